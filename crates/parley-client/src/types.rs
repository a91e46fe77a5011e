//! The JSON answers of SPEC §6 as typed structs.
//!
//! Unknown fields are ignored and unknown enum values decode as `Other`, because the contract
//! lets the server add fields and event kinds without breaking existing clients.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ConvKind {
    Direct,
    Group,
    /// A kind this SDK does not know yet.
    #[serde(other)]
    Other,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeliveryMode {
    Push,
    Pull,
    /// A mode this SDK does not know yet.
    #[serde(other)]
    Other,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Owner,
    Admin,
    Member,
    /// A role this SDK does not know yet.
    #[serde(other)]
    Other,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EventKind {
    Msg,
    Recall,
    Join,
    Leave,
    /// A kind added after this SDK was built; it still takes a seq, so cursors move past it.
    #[serde(other)]
    Other,
}

/// One committed event of a conversation log. Fields that do not belong to the kind are `None`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub conv_id: String,
    pub seq: i64,
    pub kind: EventKind,
    /// RFC 3339, UTC.
    pub created_at: String,
    #[serde(default)]
    pub message_id: Option<String>,
    #[serde(default)]
    pub sender_user: Option<String>,
    #[serde(default)]
    pub sender_device: Option<String>,
    #[serde(default)]
    pub client_msg_id: Option<String>,
    /// Absent on recalled messages.
    #[serde(default)]
    pub body: Option<String>,
    #[serde(default)]
    pub recalled: bool,
    /// Who joined or left (`join`, `leave`).
    #[serde(default)]
    pub subject_user: Option<String>,
    /// The recalled message (`recall`).
    #[serde(default)]
    pub target_seq: Option<i64>,
}

/// An answer of events-after (ascending) or of a history page (descending).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventsPage {
    pub events: Vec<Event>,
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

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub user_id: String,
    pub role: Role,
}

/// A conversation as the calling user sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Conversation {
    pub conv_id: String,
    pub kind: ConvKind,
    #[serde(default)]
    pub title: Option<String>,
    pub delivery_mode: DeliveryMode,
    pub head: i64,
    pub min_seq: i64,
    pub epoch: i64,
    pub read_seq: i64,
    pub unread: i64,
    #[serde(default)]
    pub members: Option<Vec<Member>>,
    pub recall_window_ms: i64,
    /// `None`: events are kept forever.
    #[serde(default)]
    pub retention_ms: Option<i64>,
    #[serde(default)]
    pub last_event: Option<Event>,
}

/// The conversation list: every conversation that changed since the given sync token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConversationList {
    pub conversations: Vec<Conversation>,
    /// Opaque; pass it as `since` on the next call.
    pub sync_token: String,
}

/// The ack of a send: the message is committed in the authoritative store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SendAck {
    pub conv_id: String,
    pub seq: i64,
    pub message_id: String,
    /// True when this request key was already committed: the stored answer is returned.
    pub dup: bool,
    /// True when the original event was purged and the answer came from its tombstone.
    #[serde(default)]
    pub purged: bool,
}

/// The seq of the `join` or `leave` event a membership change wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MembershipSeq {
    pub seq: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoleChange {
    pub user_id: String,
    pub role: Role,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadAck {
    /// The resulting read position; it never moves back.
    pub read_seq: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecallAck {
    /// The seq of the `recall` event.
    pub seq: i64,
    pub target_seq: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    pub user_id: String,
    #[serde(default)]
    pub display_name: Option<String>,
}

/// A device and its freshly issued token; the token is shown only once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceToken {
    pub user_id: String,
    pub device_id: String,
    pub token: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unknown_fields_and_kinds_are_tolerated() {
        let e: Event = serde_json::from_value(json!({
            "conv_id": "c", "seq": 7, "kind": "poll", "created_at": "2024-01-01T00:00:00Z",
            "votes": 3
        }))
        .unwrap();
        assert_eq!((e.kind, e.seq, e.body), (EventKind::Other, 7, None));
    }

    #[test]
    fn recalled_message_has_no_body() {
        let e: Event = serde_json::from_value(json!({
            "conv_id": "c", "seq": 3, "kind": "msg", "created_at": "2024-01-01T00:00:00Z",
            "message_id": "m", "sender_user": "ana", "sender_device": "d1",
            "client_msg_id": "x", "recalled": true
        }))
        .unwrap();
        assert!(e.recalled && e.body.is_none());
    }

    #[test]
    fn events_page_decodes_null_next_before() {
        let p: EventsPage = serde_json::from_value(json!({
            "events": [], "head": 3, "min_seq": 1, "epoch": 1, "through_seq": 3,
            "truncated": false, "next_before": null
        }))
        .unwrap();
        assert_eq!((p.through_seq, p.next_before), (3, None));
    }
}
