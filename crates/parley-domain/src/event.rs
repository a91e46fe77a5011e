//! Events as they are stored and as they appear on the wire (SPEC §6, event object).

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Serialize, Serializer};

use crate::ids::{ConvId, UserId};
use crate::relations::Relations;

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    Msg,
    Recall,
    Join,
    Leave,
    /// A new body for an earlier message of the same sender (`target_seq`).
    Edit,
    /// A reaction `key` added to a message (`target_seq`).
    React,
    /// A reaction `key` taken back from a message (`target_seq`).
    Unreact,
    /// An MLS application message of an encrypted conversation (docs/E2EE.md).
    MlsApplication,
    /// An MLS proposal.
    MlsProposal,
    /// An MLS Commit, which moved the conversation's epoch past `mls_epoch`.
    MlsCommit,
    /// An MLS Welcome for the devices it names.
    MlsWelcome,
}

impl EventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Msg => "msg",
            Self::Recall => "recall",
            Self::Join => "join",
            Self::Leave => "leave",
            Self::Edit => "edit",
            Self::React => "react",
            Self::Unreact => "unreact",
            Self::MlsApplication => "mls_application",
            Self::MlsProposal => "mls_proposal",
            Self::MlsCommit => "mls_commit",
            Self::MlsWelcome => "mls_welcome",
        }
    }

    /// The kinds of an encrypted conversation's MLS messages.
    pub fn is_mls(self) -> bool {
        matches!(
            self,
            Self::MlsApplication | Self::MlsProposal | Self::MlsCommit | Self::MlsWelcome
        )
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "msg" => Self::Msg,
            "recall" => Self::Recall,
            "join" => Self::Join,
            "leave" => Self::Leave,
            "edit" => Self::Edit,
            "react" => Self::React,
            "unreact" => Self::Unreact,
            "mls_application" => Self::MlsApplication,
            "mls_proposal" => Self::MlsProposal,
            "mls_commit" => Self::MlsCommit,
            "mls_welcome" => Self::MlsWelcome,
            _ => return None,
        })
    }
}

fn rfc3339<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&t.to_rfc3339_opts(SecondsFormat::Micros, true))
}

/// One committed event of a conversation log. Fields that do not belong to the kind are `None`
/// and are left out of the JSON.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    pub conv_id: ConvId,
    pub seq: i64,
    pub kind: EventKind,
    #[serde(serialize_with = "rfc3339")]
    pub created_at: DateTime<Utc>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_id: Option<uuid::Uuid>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sender_user: Option<UserId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sender_device: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_msg_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub recalled: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subject_user: Option<UserId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_seq: Option<i64>,
    /// Replies, threads, mentions, reaction keys and what reads fold in; boxed, since most
    /// events have none and the gateways keep many events in memory.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(inline))]
    pub rel: Option<Box<Relations>>,
    /// An MLS event's opaque message (docs/E2EE.md); boxed like `rel`.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(inline))]
    pub mls: Option<Box<MlsFields>>,
}

/// A device a Welcome is for.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize)]
pub struct WelcomeDevice {
    pub user_id: String,
    pub device_id: String,
}

/// What an MLS event carries: the server stores and forwards it and never reads it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MlsFields {
    /// The epoch the message was made in; a Welcome's is the epoch its Commit started. Present
    /// on MLS events only, so not required of an event in the document.
    #[cfg_attr(feature = "openapi", schema(required = false))]
    pub mls_epoch: i64,
    /// Standard base64 of the MLS message; a Welcome's only for the devices it names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mls_message: Option<String>,
    /// The devices a Welcome is for, shown to them only.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub mls_devices: Vec<WelcomeDevice>,
}

impl Event {
    /// The event as `device` of `user` may see it: a Welcome keeps its message and its devices
    /// only for the devices it names (docs/E2EE.md); every other event is unchanged. `None`
    /// when nothing needs to change, so the shared copy is used.
    pub fn redacted_for(&self, user: &str, device: &str) -> Option<Self> {
        let mls = self.mls.as_deref()?;
        if self.kind != EventKind::MlsWelcome || mls.mls_message.is_none() {
            return None;
        }
        let named = mls
            .mls_devices
            .iter()
            .any(|d| d.user_id == user && d.device_id == device);
        if named {
            return None;
        }
        let mut copy = self.clone();
        copy.mls = Some(Box::new(MlsFields {
            mls_epoch: mls.mls_epoch,
            mls_message: None,
            mls_devices: Vec::new(),
        }));
        Some(copy)
    }
}

impl Event {
    /// The relations of this event, or the empty set.
    pub fn relations(&self) -> &Relations {
        static NONE: std::sync::LazyLock<Relations> = std::sync::LazyLock::new(Relations::default);
        self.rel.as_deref().unwrap_or(&NONE)
    }

    /// The relations of this event to change, made when it had none.
    pub fn relations_mut(&mut self) -> &mut Relations {
        self.rel.get_or_insert_with(Box::default)
    }

    /// Drops an empty relation box, so an event that lost its last relation compares and
    /// serialises as one that never had any.
    pub fn tidy_relations(&mut self) {
        if self.rel.as_deref().is_some_and(Relations::is_empty) {
            self.rel = None;
        }
    }

    /// A join or a leave of `subject`, made by `actor` (who is the subject when they left or
    /// created the conversation).
    pub fn membership(
        conv_id: &ConvId,
        seq: i64,
        kind: EventKind,
        actor: &UserId,
        subject: &UserId,
        created_at: DateTime<Utc>,
    ) -> Self {
        assert!(
            matches!(kind, EventKind::Join | EventKind::Leave),
            "a membership event of kind {kind:?}"
        );
        Self {
            subject_user: Some(subject.clone()),
            ..Self::by(conv_id, seq, kind, actor, created_at)
        }
    }

    /// The recall of the message at `target_seq` by its sender `actor`.
    pub fn recall(
        conv_id: &ConvId,
        seq: i64,
        actor: &UserId,
        target_seq: i64,
        created_at: DateTime<Utc>,
    ) -> Self {
        assert!(
            target_seq < seq,
            "a recall at {seq} of a later seq {target_seq}"
        );
        Self {
            target_seq: Some(target_seq),
            ..Self::by(conv_id, seq, EventKind::Recall, actor, created_at)
        }
    }

    /// An MLS event at `seq` posted by `actor` (docs/E2EE.md); the caller adds what keys it
    /// like a send.
    pub fn mls(
        conv_id: &ConvId,
        seq: i64,
        kind: EventKind,
        actor: &UserId,
        created_at: DateTime<Utc>,
        fields: MlsFields,
    ) -> Self {
        assert!(kind.is_mls(), "an MLS event of kind {kind:?}");
        Self {
            mls: Some(Box::new(fields)),
            ..Self::by(conv_id, seq, kind, actor, created_at)
        }
    }

    /// An event of `kind` made by `actor`, every field of other kinds left out.
    fn by(
        conv_id: &ConvId,
        seq: i64,
        kind: EventKind,
        actor: &UserId,
        created_at: DateTime<Utc>,
    ) -> Self {
        Self {
            conv_id: conv_id.clone(),
            seq,
            kind,
            created_at,
            message_id: None,
            sender_user: Some(actor.clone()),
            sender_device: None,
            client_msg_id: None,
            body: None,
            recalled: false,
            subject_user: None,
            target_seq: None,
            rel: None,
            mls: None,
        }
    }

    /// The edit at `seq` by `actor` of their message at `target_seq`, with its new `body`; the
    /// caller adds what keys it like a send (`sender_device`, `client_msg_id`, `message_id`).
    pub fn edit(
        conv_id: &ConvId,
        seq: i64,
        actor: &UserId,
        target_seq: i64,
        body: &str,
        created_at: DateTime<Utc>,
    ) -> Self {
        assert!(
            target_seq < seq,
            "an edit at {seq} of a later seq {target_seq}"
        );
        Self {
            body: Some(body.to_owned()),
            target_seq: Some(target_seq),
            ..Self::by(conv_id, seq, EventKind::Edit, actor, created_at)
        }
    }

    /// A `react` (or, `added` false, an `unreact`) at `seq` by `actor` on `target_seq`.
    pub fn reaction(
        conv_id: &ConvId,
        seq: i64,
        actor: &UserId,
        target_seq: i64,
        key: &str,
        added: bool,
        created_at: DateTime<Utc>,
    ) -> Self {
        assert!(
            target_seq < seq,
            "a reaction at {seq} to a later seq {target_seq}"
        );
        let kind = if added {
            EventKind::React
        } else {
            EventKind::Unreact
        };
        Self {
            target_seq: Some(target_seq),
            rel: Relations {
                key: Some(key.to_owned()),
                ..Relations::default()
            }
            .boxed(),
            ..Self::by(conv_id, seq, kind, actor, created_at)
        }
    }
}

/// An answer of events-after or of a history page (SPEC §5).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventsPage {
    pub events: Vec<Event>,
    pub head: i64,
    pub min_seq: i64,
    pub epoch: i64,
    /// The last seq the server examined (ascending reads): the client's next cursor.
    pub through_seq: i64,
    pub truncated: bool,
    /// The exclusive cursor of the next older page (descending reads); null once nothing older
    /// is visible.
    pub next_before: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn membership_and_recall_events_carry_only_their_fields() {
        let conv = ConvId::parse("c-1").unwrap();
        let (ana, ben) = (
            UserId::parse("u-ana").unwrap(),
            UserId::parse("u-ben").unwrap(),
        );
        let at = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        let join = Event::membership(&conv, 4, EventKind::Join, &ana, &ben, at);
        let json = serde_json::to_value(&join).unwrap();
        assert_eq!(json["kind"], "join");
        assert_eq!(json["sender_user"], "u-ana");
        assert_eq!(json["subject_user"], "u-ben");
        assert!(json.get("body").is_none() && json.get("target_seq").is_none());
        let recall = Event::recall(&conv, 6, &ana, 5, at);
        let json = serde_json::to_value(&recall).unwrap();
        assert_eq!(
            (json["kind"].as_str(), json["target_seq"].as_i64()),
            (Some("recall"), Some(5))
        );
        assert!(json.get("subject_user").is_none());
    }

    #[test]
    #[should_panic(expected = "a membership event of kind Msg")]
    fn a_message_is_no_membership_event() {
        let conv = ConvId::parse("c-1").unwrap();
        let ana = UserId::parse("u-ana").unwrap();
        Event::membership(&conv, 1, EventKind::Msg, &ana, &ana, Utc::now());
    }
}
