//! The answers of send, read, recall and events-after (SPEC §6), the same over HTTP and as the
//! fields of a WebSocket `ack`; the event object they and `event` frames carry; and the answer
//! of `GET /v1/me`.

use serde::{Deserialize, Serialize};

/// The ack of a send: the message is committed in the authoritative store.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SendAck {
    pub conv_id: String,
    pub seq: i64,
    pub message_id: String,
    /// True when this request key was already committed: the stored answer is returned.
    pub dup: bool,
    /// True when the original event was purged and the answer came from its tombstone; the
    /// field is present only then.
    #[serde(default, skip_serializing_if = "is_false")]
    pub purged: bool,
}

/// The answer of a read: the resulting position, which never moves back (P8).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadAck {
    pub read_seq: i64,
}

/// The answer of a recall; recalling again answers the same recall.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecallAck {
    /// The seq of the `recall` event.
    pub seq: i64,
    pub target_seq: i64,
}

/// The answer of an edit: the `edit` event, keyed like a send (`dup` on a retry).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EditAck {
    pub conv_id: String,
    /// The seq of the `edit` event.
    pub seq: i64,
    pub message_id: String,
    /// The edited message.
    pub target_seq: i64,
    pub dup: bool,
}

/// The answer of a reaction added (`PUT`) or taken back (`DELETE`).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReactionAck {
    pub conv_id: String,
    pub target_seq: i64,
    pub key: String,
    /// The seq of the `react` or `unreact` event written; when nothing changed, the seq of
    /// the caller's existing reaction (`PUT`) or null (`DELETE`).
    pub seq: Option<i64>,
    /// False when the caller had already reacted with this key (`PUT`) or had not (`DELETE`).
    pub changed: bool,
}

/// The answer of `GET /v1/me`: the user and the device a device token belongs to.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    pub user_id: String,
    pub device_id: String,
}

/// One user's presence in the answer of `GET /v1/presence` (and the fields of a `presence`
/// frame): online while a device of theirs is connected; `last_seen` (RFC 3339 UTC) is when
/// their last device disconnected, absent if never since presence was kept.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserPresence {
    pub user_id: String,
    pub online: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_seen: Option<String>,
}

/// The answer of `GET /v1/presence`: the asked users the caller may see, by user id. Unknown
/// users and users who share no conversation with the caller are absent alike (P10).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PresenceList {
    pub presence: Vec<UserPresence>,
}

/// An answer of events-after (ascending) or of a history page (descending). `E` is the event
/// as each side holds it: the server writes its domain event, a client reads [`Event`].
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventsPage<E = Event> {
    pub events: Vec<E>,
    pub head: i64,
    pub min_seq: i64,
    pub epoch: i64,
    /// The last seq the server examined: the next `after` cursor, even when no event was visible.
    pub through_seq: i64,
    /// True when the cursor lay below `min_seq` and the answer starts at `min_seq`.
    #[serde(default)]
    pub truncated: bool,
    /// The exclusive cursor of the next older page; `None` once `min_seq` was reached.
    #[serde(default)]
    pub next_before: Option<i64>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    #[default]
    Msg,
    Recall,
    Join,
    Leave,
    /// A new body for the sender's message at `target_seq`.
    Edit,
    /// A reaction `key` added to the message at `target_seq`.
    React,
    /// A reaction `key` taken back from the message at `target_seq`.
    Unreact,
    /// An MLS application message of an encrypted conversation (docs/E2EE.md).
    MlsApplication,
    /// An MLS proposal.
    MlsProposal,
    /// An MLS Commit: the conversation's epoch moved past `mls_epoch`.
    MlsCommit,
    /// An MLS Welcome; its message and devices reach only the devices it names.
    MlsWelcome,
    /// A kind added after this version; it still takes a seq, so cursors move past it.
    #[serde(other)]
    Other,
}

/// One committed event of a conversation log as a client reads it. Fields that do not belong
/// to the kind are absent from the JSON and `None` here.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub conv_id: String,
    pub seq: i64,
    pub kind: EventKind,
    /// RFC 3339, UTC.
    pub created_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender_user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender_device: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_msg_id: Option<String>,
    /// Absent on recalled messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub recalled: bool,
    /// Who joined or left (`join`, `leave`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject_user: Option<String>,
    /// The recalled, edited or reacted-to message (`recall`, `edit`, `react`, `unreact`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_seq: Option<i64>,
    /// The message this one replies to (`msg`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<i64>,
    /// The root of the thread this message is a reply in (`msg`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_root: Option<i64>,
    /// The members this message mentions (`msg`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mentions: Vec<String>,
    /// The reaction key (`react`, `unreact`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// When the message was last edited (RFC 3339, UTC); its `body` is the current one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edited_at: Option<String>,
    /// The message's reactions when it was read: count per key and whether the reader is
    /// among them, keys in the order first used.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reactions: Vec<ReactionCount>,
    /// The thread this message roots, when it has replies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread: Option<ThreadSummary>,
    /// The message's attachments (docs/MEDIA.md); none once it is recalled.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<Media>,
    /// The epoch an MLS message was made in (`mls_*`; a Welcome: the epoch it starts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mls_epoch: Option<i64>,
    /// The MLS message, base64 (`mls_*`; a Welcome's only for the devices it names).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mls_message: Option<String>,
    /// The devices a Welcome is for, shown to them only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mls_devices: Vec<crate::mls::DeviceRef>,
}

/// An upload (`POST /v1/media`) as the server describes it, and an attachment of a message.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Media {
    pub media_id: String,
    /// Lowercase hex SHA-256 of the bytes.
    pub sha256: String,
    pub size: i64,
    /// Sniffed from the bytes by the server.
    pub content_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filename: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub width: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub height: Option<u32>,
    /// A thumbnail can be fetched.
    #[serde(default)]
    pub thumbnail: bool,
}

/// Links to an upload that need no header (`POST /v1/media/{id}/url`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignedUrls {
    /// Relative to the server.
    pub url: String,
    #[serde(default)]
    pub thumbnail_url: Option<String>,
    /// RFC 3339.
    pub expires_at: String,
}

/// One reaction key on a message, as a read answers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReactionCount {
    pub key: String,
    pub count: i64,
    /// The reader reacted with this key.
    pub me: bool,
}

/// The replies of a thread, on its root message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadSummary {
    /// Replies in the thread that are not recalled.
    pub reply_count: i64,
    /// The seq of the newest reply.
    pub latest_seq: i64,
}

fn is_false(b: &bool) -> bool {
    !*b
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::de::DeserializeOwned;
    use serde_json::{json, Value};

    /// Encodes `value`, checks the JSON is `expected`, and decodes it back to `value`.
    fn round_trip<T>(value: &T, expected: Value)
    where
        T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug,
    {
        let text = serde_json::to_string(value).expect("encodes");
        let json: Value = serde_json::from_str(&text).expect("valid JSON");
        assert_eq!(json, expected);
        let back: T = serde_json::from_str(&text).expect("decodes");
        assert_eq!(&back, value);
    }

    fn message(seq: i64) -> Event {
        Event {
            conv_id: "c".into(),
            seq,
            kind: EventKind::Msg,
            created_at: "2024-01-01T00:00:00.000000Z".into(),
            message_id: Some("m".into()),
            sender_user: Some("ana".into()),
            sender_device: Some("d1".into()),
            client_msg_id: Some("x".into()),
            body: Some("hi".into()),
            recalled: false,
            subject_user: None,
            target_seq: None,
            ..Event::default()
        }
    }

    #[test]
    fn send_acks_carry_purged_only_when_true() {
        let mut ack = SendAck {
            conv_id: "c".into(),
            seq: 3,
            message_id: "m".into(),
            dup: false,
            purged: false,
        };
        round_trip(
            &ack,
            json!({"conv_id": "c", "seq": 3, "message_id": "m", "dup": false}),
        );
        ack.dup = true;
        ack.purged = true;
        round_trip(
            &ack,
            json!({"conv_id": "c", "seq": 3, "message_id": "m", "dup": true, "purged": true}),
        );
    }

    #[test]
    fn presence_lists_round_trip() {
        round_trip(
            &PresenceList {
                presence: vec![
                    UserPresence {
                        user_id: "ana".into(),
                        online: true,
                        last_seen: None,
                    },
                    UserPresence {
                        user_id: "ben".into(),
                        online: false,
                        last_seen: Some("2024-01-01T00:00:00.000000Z".into()),
                    },
                ],
            },
            json!({"presence": [{"user_id": "ana", "online": true},
                   {"user_id": "ben", "online": false,
                    "last_seen": "2024-01-01T00:00:00.000000Z"}]}),
        );
    }

    #[test]
    fn identities_round_trip() {
        round_trip(
            &Identity {
                user_id: "ana".into(),
                device_id: "phone".into(),
            },
            json!({"user_id": "ana", "device_id": "phone"}),
        );
    }

    #[test]
    fn read_and_recall_acks_round_trip() {
        round_trip(&ReadAck { read_seq: 5 }, json!({"read_seq": 5}));
        round_trip(
            &RecallAck {
                seq: 9,
                target_seq: 4,
            },
            json!({"seq": 9, "target_seq": 4}),
        );
    }

    #[test]
    fn events_pages_keep_truncated_and_a_null_next_before() {
        let page = EventsPage {
            events: vec![message(3)],
            head: 3,
            min_seq: 1,
            epoch: 2,
            through_seq: 3,
            truncated: false,
            next_before: None,
        };
        round_trip(
            &page,
            json!({"events": [{"conv_id": "c", "seq": 3, "kind": "msg",
                     "created_at": "2024-01-01T00:00:00.000000Z", "message_id": "m",
                     "sender_user": "ana", "sender_device": "d1", "client_msg_id": "x",
                     "body": "hi"}],
                   "head": 3, "min_seq": 1, "epoch": 2, "through_seq": 3,
                   "truncated": false, "next_before": null}),
        );
    }

    #[test]
    fn events_leave_out_the_fields_of_other_kinds() {
        let recalled = Event {
            body: None,
            recalled: true,
            ..message(3)
        };
        let recall = Event {
            seq: 4,
            kind: EventKind::Recall,
            message_id: None,
            client_msg_id: None,
            body: None,
            target_seq: Some(3),
            ..message(4)
        };
        let join = Event {
            seq: 5,
            kind: EventKind::Join,
            message_id: None,
            sender_user: None,
            sender_device: None,
            client_msg_id: None,
            body: None,
            subject_user: Some("ben".into()),
            ..message(5)
        };
        let at = "2024-01-01T00:00:00.000000Z";
        round_trip(
            &recalled,
            json!({"conv_id": "c", "seq": 3, "kind": "msg", "created_at": at,
                   "message_id": "m", "sender_user": "ana", "sender_device": "d1",
                   "client_msg_id": "x", "recalled": true}),
        );
        round_trip(
            &recall,
            json!({"conv_id": "c", "seq": 4, "kind": "recall", "created_at": at,
                   "sender_user": "ana", "sender_device": "d1", "target_seq": 3}),
        );
        round_trip(
            &join,
            json!({"conv_id": "c", "seq": 5, "kind": "join", "created_at": at,
                   "subject_user": "ben"}),
        );
    }

    #[test]
    fn unknown_fields_and_kinds_are_tolerated() {
        let e: Event = serde_json::from_value(json!({
            "conv_id": "c", "seq": 7, "kind": "poll", "created_at": "2024-01-01T00:00:00Z",
            "votes": 3
        }))
        .expect("decodes");
        assert_eq!((e.kind, e.seq, e.body), (EventKind::Other, 7, None));
        let ack: SendAck = serde_json::from_value(json!({
            "conv_id": "c", "seq": 1, "message_id": "m", "dup": false, "shard": 4
        }))
        .expect("decodes");
        assert!(!ack.purged);
    }

    #[test]
    fn recalled_message_has_no_body() {
        let e: Event = serde_json::from_value(json!({
            "conv_id": "c", "seq": 3, "kind": "msg", "created_at": "2024-01-01T00:00:00Z",
            "message_id": "m", "sender_user": "ana", "sender_device": "d1",
            "client_msg_id": "x", "recalled": true
        }))
        .expect("decodes");
        assert!(e.recalled && e.body.is_none());
    }

    #[test]
    fn events_page_decodes_null_next_before() {
        let p: EventsPage = serde_json::from_value(json!({
            "events": [], "head": 3, "min_seq": 1, "epoch": 1, "through_seq": 3,
            "truncated": false, "next_before": null
        }))
        .expect("decodes");
        assert_eq!((p.through_seq, p.next_before), (3, None));
    }
}
