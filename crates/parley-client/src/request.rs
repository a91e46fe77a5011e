//! Request bodies of SPEC §6. Optional fields are left out rather than sent as null, because the
//! server rejects fields it does not expect.

use serde::Serialize;

use crate::types::{ConvKind, DeliveryMode, Role};

/// A fresh request key for a new message: 128 random bits in hex. Keep it with the message
/// until the send is acked, and resend with the same key: the server then answers `dup: true`
/// instead of storing the message twice.
pub fn new_client_msg_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// A create-conversation request. The caller is always the first member and need not be listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NewConversation {
    pub kind: ConvKind,
    pub members: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conv_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delivery_mode: Option<DeliveryMode>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recall_window_ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retention_ms: Option<i64>,
}

impl NewConversation {
    /// The direct chat with `peer`; asking again returns the same conversation.
    pub fn direct(peer: impl Into<String>) -> Self {
        Self::new(ConvKind::Direct, vec![peer.into()])
    }

    /// A group of the caller and `members`, in this join order.
    pub fn group<I, S>(members: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::new(
            ConvKind::Group,
            members.into_iter().map(Into::into).collect(),
        )
    }

    /// An end-to-end encrypted conversation (docs/E2EE.md): the caller is its only member;
    /// everyone else joins by an MLS Commit (`e2ee` feature).
    pub fn encrypted() -> Self {
        Self::new(ConvKind::Encrypted, Vec::new())
    }

    fn new(kind: ConvKind, members: Vec<String>) -> Self {
        Self {
            kind,
            members,
            conv_id: None,
            title: None,
            delivery_mode: None,
            recall_window_ms: None,
            retention_ms: None,
        }
    }

    /// A group id chosen by the client instead of a generated one.
    pub fn with_conv_id(mut self, conv_id: impl Into<String>) -> Self {
        self.conv_id = Some(conv_id.into());
        self
    }

    pub fn with_title(mut self, title: impl Into<String>) -> Self {
        self.title = Some(title.into());
        self
    }

    /// Overrides the choice the server makes from the member count.
    pub fn with_delivery_mode(mut self, mode: DeliveryMode) -> Self {
        self.delivery_mode = Some(mode);
        self
    }

    pub fn with_recall_window_ms(mut self, recall_window_ms: i64) -> Self {
        self.recall_window_ms = Some(recall_window_ms);
        self
    }

    pub fn with_retention_ms(mut self, retention_ms: i64) -> Self {
        self.retention_ms = Some(retention_ms);
        self
    }
}

/// The relations a message may name beside its body (docs/RELATIONS.md). The default names
/// none, and such a send is the plain one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SendOptions {
    /// The seq of the message this one replies to: a visible, unrecalled message of the same
    /// conversation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<i64>,
    /// The seq of the thread's root: a visible, unrecalled message that is not itself a reply
    /// in a thread.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread_root: Option<i64>,
    /// Users mentioned beside the body's `@user` words (at most 64). `None` sends no list.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mentions: Option<Vec<String>>,
    /// Media ids from [`crate::Client::upload`] (at most 10); with any, the body may be empty.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attachments: Option<Vec<String>>,
}

impl SendOptions {
    /// A reply to the message at `seq`.
    pub fn reply_to(seq: i64) -> Self {
        Self {
            reply_to: Some(seq),
            ..Self::default()
        }
    }

    /// A reply in the thread rooted at `root`.
    pub fn in_thread(root: i64) -> Self {
        Self {
            thread_root: Some(root),
            ..Self::default()
        }
    }

    /// These options, also mentioning `users`.
    pub fn with_mentions<I, S>(mut self, users: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.mentions = Some(users.into_iter().map(Into::into).collect());
        self
    }
}

#[derive(Serialize)]
pub(crate) struct SendBody<'a> {
    pub client_msg_id: &'a str,
    pub body: &'a str,
    #[serde(flatten)]
    pub options: &'a SendOptions,
}

#[derive(Serialize)]
pub(crate) struct EditBody<'a> {
    pub client_msg_id: &'a str,
    pub body: &'a str,
}

#[derive(Serialize)]
pub(crate) struct UserRef<'a> {
    pub user_id: &'a str,
}

#[derive(Serialize)]
pub(crate) struct RoleBody {
    pub role: Role,
}

#[derive(Serialize)]
pub(crate) struct ReadBody {
    pub seq: i64,
}

#[derive(Serialize)]
pub(crate) struct NewUser<'a> {
    pub user_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub display_name: Option<&'a str>,
}

/// Not `Debug`: it holds a password.
#[derive(Serialize)]
pub(crate) struct Login<'a> {
    pub user_id: &'a str,
    pub password: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_id: Option<&'a str>,
}

#[derive(Serialize)]
pub(crate) struct NewDevice<'a> {
    pub device_id: &'a str,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn send_options_are_left_out_when_absent() {
        let plain = SendOptions::default();
        let body = SendBody {
            client_msg_id: "k",
            body: "hi",
            options: &plain,
        };
        assert_eq!(
            serde_json::to_value(&body).unwrap(),
            json!({"client_msg_id": "k", "body": "hi"})
        );
        let options = SendOptions::reply_to(3).with_mentions(["ben"]);
        let body = SendBody {
            options: &options,
            ..body
        };
        assert_eq!(
            serde_json::to_value(&body).unwrap(),
            json!({"client_msg_id": "k", "body": "hi", "reply_to": 3, "mentions": ["ben"]})
        );
        let thread = SendOptions::in_thread(7);
        assert_eq!(
            serde_json::to_value(&thread).unwrap(),
            json!({"thread_root": 7})
        );
    }

    #[test]
    fn absent_options_are_left_out() {
        let v = serde_json::to_value(NewConversation::direct("ben")).unwrap();
        assert_eq!(v, json!({"kind": "direct", "members": ["ben"]}));
        let v = serde_json::to_value(
            NewConversation::group(["ben", "cai"])
                .with_conv_id("c-1")
                .with_delivery_mode(DeliveryMode::Pull),
        )
        .unwrap();
        assert_eq!(
            v,
            json!({"kind": "group", "members": ["ben", "cai"], "conv_id": "c-1",
                   "delivery_mode": "pull"})
        );
    }
}
