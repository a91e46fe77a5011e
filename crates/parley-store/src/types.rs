//! Requests and answers of the store, in domain types.

use chrono::{DateTime, Utc};
use parley_domain::{
    Attachment, Body, ClientMsgId, ConvId, ConvKind, DeliveryMode, DeviceId, Event, MediaId,
    ReactionKey, RequestHash, SendRelations, UserId,
};

/// The device a token belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceIdentity {
    pub user_id: UserId,
    pub device_id: DeviceId,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub user_id: UserId,
    pub display_name: Option<String>,
}

#[derive(Debug, Clone)]
pub struct NewConversation {
    pub creator: UserId,
    pub kind: ConvKind,
    /// Group id chosen by the client; generated when absent. Ignored for direct chats.
    pub conv_id: Option<ConvId>,
    /// The other initial members, caller and duplicates already removed, in request order.
    pub members: Vec<UserId>,
    pub title: Option<String>,
    /// Explicit delivery mode; `None` lets the member count decide against `pull_threshold`.
    pub delivery_mode: Option<DeliveryMode>,
    pub pull_threshold: u32,
    pub recall_window_ms: i64,
    pub retention_ms: Option<i64>,
}

#[derive(Debug, Clone)]
pub struct CreatedConversation {
    pub conv_id: ConvId,
    /// False when a direct conversation of the pair already existed.
    pub created: bool,
    /// The join events written, in seq order (empty when nothing was created).
    pub events: Vec<Event>,
}

#[derive(Debug, Clone)]
pub struct SendRequest {
    pub conv_id: ConvId,
    pub sender_user: UserId,
    pub sender_device: DeviceId,
    pub client_msg_id: ClientMsgId,
    pub body: Body,
    pub request_hash: RequestHash,
    /// A reply, a thread, mentions; empty for a plain message.
    pub relations: SendRelations,
}

impl SendRequest {
    /// A send that may relate to other messages: `mentions` are completed with the body's
    /// `@user` words, and a send with any relation has a fingerprint of its own
    /// (`RequestHash::of_related_message`); one without stays a plain send.
    pub fn related(
        conv_id: ConvId,
        sender_user: UserId,
        sender_device: DeviceId,
        client_msg_id: ClientMsgId,
        body: Body,
        mut relations: SendRelations,
    ) -> Self {
        let given = std::mem::take(&mut relations.mentions);
        relations.mentions = parley_domain::relations::mentions_of(body.as_str(), given);
        if relations.is_empty() {
            return Self::new(conv_id, sender_user, sender_device, client_msg_id, body);
        }
        let request_hash = RequestHash::of_related_message(body.as_str(), &relations);
        Self {
            conv_id,
            sender_user,
            sender_device,
            client_msg_id,
            body,
            request_hash,
            relations,
        }
    }

    pub fn new(
        conv_id: ConvId,
        sender_user: UserId,
        sender_device: DeviceId,
        client_msg_id: ClientMsgId,
        body: Body,
    ) -> Self {
        let request_hash = RequestHash::of_message(body.as_str());
        Self {
            conv_id,
            sender_user,
            sender_device,
            client_msg_id,
            body,
            request_hash,
            relations: SendRelations::default(),
        }
    }
}

impl SendRequest {
    /// The outcome of this request once it committed at `seq`: the ack fields and the event
    /// to announce. Every store builds it the same way, after its commit returned.
    pub fn committed(
        &self,
        seq: i64,
        message_id: uuid::Uuid,
        created_at: chrono::DateTime<chrono::Utc>,
    ) -> SendOutcome {
        let event = parley_domain::Event {
            conv_id: self.conv_id.clone(),
            seq,
            kind: parley_domain::EventKind::Msg,
            created_at,
            message_id: Some(message_id),
            sender_user: Some(self.sender_user.clone()),
            sender_device: Some(self.sender_device.as_str().to_owned()),
            client_msg_id: Some(self.client_msg_id.as_str().to_owned()),
            body: Some(self.body.as_str().to_owned()),
            recalled: false,
            subject_user: None,
            target_seq: None,
            rel: None,
            mls: None,
        };
        SendOutcome {
            conv_id: self.conv_id.clone(),
            seq,
            message_id,
            dup: false,
            purged: false,
            event: Some(event),
        }
    }
}

impl SendRequest {
    /// The answer to a retry of this request, which committed before at `seq`: its ack again,
    /// with `dup`, and no event to announce.
    pub fn replayed(&self, seq: i64, message_id: uuid::Uuid, purged: bool) -> SendOutcome {
        SendOutcome {
            conv_id: self.conv_id.clone(),
            seq,
            message_id,
            dup: true,
            purged,
            event: None,
        }
    }
}

/// The answer to a send: the ack fields, plus the committed event when this call wrote it.
#[derive(Debug, Clone)]
pub struct SendOutcome {
    pub conv_id: ConvId,
    pub seq: i64,
    pub message_id: uuid::Uuid,
    pub dup: bool,
    /// True when the original event was purged and the answer came from its tombstone.
    pub purged: bool,
    /// The event this call committed; `None` for a replay.
    pub event: Option<Event>,
}

/// A membership change that was committed: the event, and the conversation's delivery mode
/// after it.
#[derive(Debug, Clone)]
pub struct MembershipChange {
    pub event: Event,
}

/// Which way an events read goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventsQuery {
    /// Ascending from an exclusive cursor; `epoch` is the cursor's epoch when the client has one.
    After { after: i64, epoch: Option<i64> },
    /// Descending below an exclusive cursor; `None` is the newest page.
    Before { before: Option<i64> },
}

/// A thread's page: its root and its replies, by the same cursors as the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadQuery {
    pub root: i64,
    pub query: EventsQuery,
}

/// Where a device is connected: gateway and connection (SPEC §3, routes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub user_id: UserId,
    pub device_id: DeviceId,
    pub gateway_id: String,
    pub conn_id: String,
}

/// A registered gateway as the admin listing shows it (chapter 10).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayLease {
    pub gateway_id: String,
    /// Time left on the lease by the store's clock; negative once it expired.
    pub lease_expires_in_ms: i64,
    /// Routes that name the gateway.
    pub routes: i64,
}

/// The current members of a conversation as of `head`, with how its events are delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberSnapshot {
    pub head: i64,
    /// Each current member with the first seq of their open period.
    pub members: Vec<(UserId, i64)>,
    pub delivery_mode: DeliveryMode,
    /// Member count at which this `push` group becomes `pull` (SPEC §8); `None` when the mode
    /// cannot change any more (chosen at creation, a direct chat, or already `pull`). A gateway
    /// applies the same rule to the joins it sees, so it never asks the store per event.
    pub pull_threshold: Option<u32>,
}

impl MemberSnapshot {
    /// The delivery mode after a join brought the member count to `members`: the store's own
    /// switching rule, so a gateway's cache follows the log without a query.
    pub fn mode_after_join(
        mode: DeliveryMode,
        pull_threshold: Option<u32>,
        members: usize,
    ) -> DeliveryMode {
        parley_domain::decide::membership::mode_after_join(mode, pull_threshold, members)
    }
}

/// The answer to a recall (SPEC §4).
#[derive(Debug, Clone)]
pub struct RecallOutcome {
    /// The recall event this call committed; `None` when the message was already recalled and
    /// the answer is the existing recall.
    pub event: Option<Event>,
    /// The seq of the recall event.
    pub seq: i64,
    /// The seq of the recalled message.
    pub target_seq: i64,
}

/// An edit of a message (docs/RELATIONS.md): idempotent per request key, like a send.
#[derive(Debug, Clone)]
pub struct EditRequest {
    pub conv_id: ConvId,
    pub sender_user: UserId,
    pub sender_device: DeviceId,
    pub client_msg_id: ClientMsgId,
    pub target_seq: i64,
    pub body: Body,
    pub request_hash: RequestHash,
}

impl EditRequest {
    pub fn new(
        conv_id: ConvId,
        sender_user: UserId,
        sender_device: DeviceId,
        client_msg_id: ClientMsgId,
        target_seq: i64,
        body: Body,
    ) -> Self {
        let request_hash = RequestHash::of_edit(target_seq, body.as_str());
        Self {
            conv_id,
            sender_user,
            sender_device,
            client_msg_id,
            target_seq,
            body,
            request_hash,
        }
    }
}

/// The answer to an edit: its ack fields, and the event when this call wrote it.
#[derive(Debug, Clone)]
pub struct EditOutcome {
    pub conv_id: ConvId,
    pub seq: i64,
    pub message_id: uuid::Uuid,
    pub target_seq: i64,
    pub dup: bool,
    pub event: Option<Event>,
}

/// A reaction added (`PUT`) or taken back (`DELETE`).
#[derive(Debug, Clone)]
pub struct ReactRequest {
    pub conv_id: ConvId,
    pub user: UserId,
    pub target_seq: i64,
    pub key: ReactionKey,
    pub added: bool,
}

/// The answer to a reaction: the event this call wrote, if it changed anything.
#[derive(Debug, Clone)]
pub struct ReactOutcome {
    /// The seq of the `react` or `unreact` event written; for an unchanged `PUT` the seq of
    /// the user's existing reaction; `None` for an unchanged `DELETE`.
    pub seq: Option<i64>,
    pub event: Option<Event>,
}

/// What one call of the retention purge did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PurgeReport {
    /// Conversations whose log was cut.
    pub conversations: u64,
    pub events_deleted: u64,
    /// Request keys of purged messages moved to the tombstones.
    pub tombstones_written: u64,
    /// Conversations skipped because a write held their lock; a later call retries them.
    pub conversations_busy: u64,
    /// True when events past retention may remain: a conversation's batch was full, or more
    /// conversations were due than one call takes.
    pub more: bool,
}

/// The answer of the sync feed: the changed conversations and the token of the next call.
#[derive(Debug, Clone)]
pub struct ConversationFeed {
    pub conversations: Vec<parley_domain::ConversationView>,
    /// Opaque; pass it back as `since` to get only what changed after this answer.
    pub sync_token: String,
}

/// What a store is and the limits it sets on its own database connections, as the server
/// reports them (`GET /v1/admin/server`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreDescription {
    /// `postgres` or `sqlite`; a test's stand-in says `unknown`.
    pub kind: &'static str,
    /// `idle_in_transaction_session_timeout` of the store's PostgreSQL connections, in
    /// milliseconds (0: off); `None` where the store has no such setting.
    pub idle_in_transaction_timeout_ms: Option<u64>,
}

/// A user's presence as another user may see it (`GET /v1/presence`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserPresence {
    pub user_id: UserId,
    /// At least one of the user's devices has a route, on any gateway.
    pub online: bool,
    /// When the user's device last disconnected; `None` if never since presence was kept.
    pub last_seen: Option<DateTime<Utc>>,
}

/// Whom a typing frame reaches: the conversation's mode, and its other current members that
/// have a route (none read in a `pull` conversation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypingTargets {
    pub mode: DeliveryMode,
    pub online_others: Vec<UserId>,
}

/// What a disconnect left: the routes the user still has and the `last_seen` written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    pub routes_left: i64,
    pub last_seen: DateTime<Utc>,
}

/// A thumbnail blob of an upload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MediaThumbnail {
    pub sha256: String,
    pub size: i64,
    pub content_type: String,
}

/// An upload whose bytes are staged, to register before they are made visible (docs/MEDIA.md).
#[derive(Debug, Clone)]
pub struct NewMedia {
    /// The id a first upload of these bytes by this uploader takes; a later one keeps the
    /// earlier id.
    pub media_id: MediaId,
    pub uploader: UserId,
    pub sha256: String,
    pub size: i64,
    pub content_type: String,
    pub inline_safe: bool,
    pub filename: Option<String>,
    pub width: Option<u32>,
    pub height: Option<u32>,
    pub thumbnail: Option<MediaThumbnail>,
    pub now_ms: i64,
    /// Most bytes the uploader's media may hold together; `None` is no quota.
    pub quota_bytes: Option<i64>,
}

/// A registered upload, as the download path serves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MediaRecord {
    pub media_id: MediaId,
    pub uploader: UserId,
    pub sha256: String,
    pub size: i64,
    pub content_type: String,
    pub inline_safe: bool,
    pub filename: Option<String>,
    pub width: Option<u32>,
    pub height: Option<u32>,
    pub thumbnail: Option<MediaThumbnail>,
}

impl MediaRecord {
    /// What a message that names this upload carries.
    pub fn attachment(&self) -> Attachment {
        Attachment {
            media_id: self.media_id.clone(),
            sha256: self.sha256.clone(),
            size: self.size,
            content_type: self.content_type.clone(),
            filename: self.filename.clone(),
            width: self.width,
            height: self.height,
            thumbnail: self.thumbnail.is_some(),
        }
    }
}

/// Deletes one blob's bytes from the media backend; the store runs it while it holds the blob's
/// row lock (`Store::delete_blob`).
pub type BlobRemover = Box<
    dyn FnOnce() -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send>>
        + Send,
>;

/// What one round of the media sweep did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MediaSweep {
    /// Uploads no message names that passed their grace period, deleted.
    pub media_deleted: u64,
    /// Blobs whose bytes were deleted, no upload naming them any more.
    pub blobs_deleted: u64,
}

/// A search of the messages `user` may read (docs/SEARCH.md).
#[derive(Debug, Clone)]
pub struct SearchRequest {
    pub user: UserId,
    pub query: parley_domain::SearchQuery,
    pub order: parley_domain::SearchOrder,
    pub cursor: Option<parley_domain::SearchCursor>,
    /// At most this many hits.
    pub limit: u32,
}

/// One message a search found, with its current body (the snippet is cut from it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchHit {
    pub conv_id: ConvId,
    pub seq: i64,
    pub sender_user: UserId,
    pub created_at: DateTime<Utc>,
    /// The order key of newest-first pages and their cursors.
    pub at_us: i64,
    pub language: parley_domain::SearchLanguage,
    pub body: String,
}

/// How the search index follows the log, for `GET /v1/admin/server`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SearchStatus {
    /// Messages are indexed by a trigger in their own transaction (false only where an
    /// operator or a benchmark switched the trigger off).
    pub indexing: bool,
    /// Committed messages not yet findable: 0 whenever `indexing`, since the index is written
    /// in the message's transaction.
    pub lag_events: i64,
}
