//! What the store keeps and answers for offline notifications (docs/PUSH.md).

use chrono::{DateTime, Utc};
use parley_domain::{ConvId, DeviceId, UserId};
use uuid::Uuid;

/// Where a device's notifications go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PushTarget {
    /// A Web Push subscription (RFC 8030): the push service's endpoint and the browser's keys.
    WebPush {
        endpoint: String,
        p256dh: String,
        auth: String,
    },
    /// A push gateway in the Matrix model: the gateway's URL, the device's key and its app.
    Gateway {
        url: String,
        pushkey: String,
        app_id: String,
    },
}

impl PushTarget {
    /// The kind as the store and the API name it.
    pub fn kind(&self) -> &'static str {
        match self {
            PushTarget::WebPush { .. } => "webpush",
            PushTarget::Gateway { .. } => "gateway",
        }
    }

    /// The URL notifications are posted to.
    pub fn endpoint(&self) -> &str {
        match self {
            PushTarget::WebPush { endpoint, .. } => endpoint,
            PushTarget::Gateway { url, .. } => url,
        }
    }
}

/// A member's notification level of one conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NotifyLevel {
    /// Every message of others.
    #[default]
    All,
    /// Messages that mention the member or reply to one of theirs.
    Mentions,
    /// Nothing: the conversation is muted.
    None,
}

impl NotifyLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            NotifyLevel::All => "all",
            NotifyLevel::Mentions => "mentions",
            NotifyLevel::None => "none",
        }
    }

    /// The level named `s`; `None` for any other text.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "all" => Some(NotifyLevel::All),
            "mentions" => Some(NotifyLevel::Mentions),
            "none" => Some(NotifyLevel::None),
            _ => None,
        }
    }
}

/// Why a message notifies a member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotifyReason {
    Message,
    Mention,
    Reply,
}

impl NotifyReason {
    pub fn as_str(self) -> &'static str {
        match self {
            NotifyReason::Message => "message",
            NotifyReason::Mention => "mention",
            NotifyReason::Reply => "reply",
        }
    }
}

/// The message a claimed notification is about, as it stands when claimed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushMessage {
    pub sender: UserId,
    /// The current body (its last edit's, if edited).
    pub body: Option<String>,
    pub message_id: Option<Uuid>,
    /// When the message committed.
    pub committed_at: DateTime<Utc>,
    pub reason: NotifyReason,
}

/// One notification a gateway claimed, leased to it until it reports the outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushJob {
    pub user_id: UserId,
    pub device_id: DeviceId,
    pub conv_id: ConvId,
    /// The latest message of the conversation the device is owed a notification for.
    pub seq: i64,
    /// Failed attempts so far.
    pub attempts: i64,
    /// The claim's lease token; an outcome counts only while the lease is still this one.
    pub lease: String,
    pub target: PushTarget,
    /// `None` when the message is gone (recalled, purged) since it was queued.
    pub message: Option<PushMessage>,
    /// The member has read up to here, on any device.
    pub read_seq: i64,
    /// The device holds a live socket: the message reached it there.
    pub online: bool,
    /// The member chose notifications without sender and preview.
    pub privacy: bool,
    pub title: Option<String>,
}

/// What became of one claimed notification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushResult {
    /// The push service took it.
    Sent { at_ms: i64 },
    /// Not sent and never to be: read, delivered over a socket, or the message is gone.
    Dropped,
    /// Sent and refused for now (5xx, 429, a timeout): try again at `due_ms`.
    Retry { due_ms: i64 },
    /// The push service no longer knows the endpoint (404/410): the target is deleted.
    Gone,
}

/// The outcome of one job, reported by the gateway that claimed it.
#[derive(Debug, Clone)]
pub struct PushOutcome {
    pub job: PushJob,
    pub result: PushResult,
}

/// How much notification work waits in the store.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PushBacklog {
    /// Committed messages not yet expanded into notifications.
    pub outbox_len: i64,
    /// Notifications owed to devices, due or coalescing.
    pub pending_len: i64,
}
