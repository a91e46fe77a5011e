//! The JSON answers of SPEC §6 as typed structs. Those the server's WebSocket speaks too
//! (events, events pages, send, read and recall acks) and the answer of `GET /v1/me`
//! ([`Identity`]) are declared once in `parley_wire` and re-exported here, with the typed views
//! of an event ([`Event::typed`]: [`Message`], [`Recall`], [`MembershipChange`]).
//!
//! Unknown fields are ignored and unknown enum values decode as `Other`, because the contract
//! lets the server add fields and event kinds without breaking existing clients.

use serde::{Deserialize, Serialize};

pub use parley_wire::{
    Edit, EditAck, Event, EventKind, EventsPage, Identity, MembershipChange, Message, PresenceList,
    Reaction, ReactionAck, ReactionCount, ReadAck, Recall, RecallAck, SendAck, ThreadSummary,
    TypedEvent, UserPresence,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum ConvKind {
    Direct,
    Group,
    /// An end-to-end encrypted conversation: an MLS group (docs/E2EE.md).
    Encrypted,
    /// A kind this SDK does not know yet.
    #[serde(other)]
    Other,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum DeliveryMode {
    Push,
    Pull,
    /// A mode this SDK does not know yet.
    #[serde(other)]
    Other,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Role {
    Owner,
    Admin,
    Member,
    /// A role this SDK does not know yet.
    #[serde(other)]
    Other,
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
    /// Messages after `read_seq` that mention the user (docs/RELATIONS.md); 0 from a server
    /// without mentions.
    #[serde(default)]
    pub mentions: i64,
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
