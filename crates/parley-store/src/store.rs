//! The storage-neutral contract.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use parley_domain::{ConvId, ConversationView, DeviceId, Event, EventsPage, Role, UserId};

use crate::error::StoreError;
use crate::mls_types::*;
use crate::push_types::*;
use crate::types::*;

/// Everything the server asks of the authoritative store. Implementations keep P1–P11; the
/// contract tests in `tests/` hold them to it.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Reports the store's pool waits and send batches to `observer` from now on (the server's
    /// metrics). A later call replaces the observer; a store with nothing to report (a test's
    /// stand-in) ignores it.
    fn observe(&self, _observer: std::sync::Arc<dyn crate::StoreObserver>) {}
    /// The kind of store and the limits it sets on its own connections.
    fn describe(&self) -> StoreDescription {
        StoreDescription {
            kind: "unknown",
            idle_in_transaction_timeout_ms: None,
        }
    }
    /// Applies the embedded migrations.
    async fn migrate(&self) -> Result<(), StoreError>;
    /// Succeeds when the store answers a trivial query.
    async fn ping(&self) -> Result<(), StoreError>;

    // Users and devices.
    async fn create_user(
        &self,
        user_id: &UserId,
        display_name: Option<&str>,
    ) -> Result<User, StoreError>;
    /// Stores the hash of a new token for the device, creating the device or replacing (and so
    /// revoking) its previous token. `NotFound` when the user does not exist.
    async fn issue_device_token(
        &self,
        user_id: &UserId,
        device_id: &DeviceId,
        token_hash: &str,
    ) -> Result<(), StoreError>;
    /// Creates a user with the hash of a password (a PHC string the store does not read);
    /// `AlreadyExists` when the id is taken.
    async fn create_user_with_password(
        &self,
        user_id: &UserId,
        display_name: Option<&str>,
        password_hash: &str,
    ) -> Result<User, StoreError>;
    /// Replaces the user's password hash. `NotFound` when the user does not exist.
    async fn set_password_hash(
        &self,
        user_id: &UserId,
        password_hash: &str,
    ) -> Result<(), StoreError>;
    /// The user's password hash; `None` both for an unknown user and for a user without a
    /// password, which the login answers alike.
    async fn password_hash(&self, user_id: &UserId) -> Result<Option<String>, StoreError>;
    /// Revokes the device's token. `NotFound` when there is no such device.
    async fn revoke_device(&self, user_id: &UserId, device_id: &DeviceId)
        -> Result<(), StoreError>;
    /// The live device a token hash belongs to; `None` for unknown or revoked tokens.
    async fn authenticate(&self, token_hash: &str) -> Result<Option<DeviceIdentity>, StoreError>;

    // Conversations and membership.
    async fn create_conversation(
        &self,
        req: &NewConversation,
    ) -> Result<CreatedConversation, StoreError>;
    /// The conversation as `viewer` sees it; `NotMember` unless the viewer ever had a period.
    async fn get_conversation(
        &self,
        conv_id: &ConvId,
        viewer: &UserId,
    ) -> Result<ConversationView, StoreError>;
    /// The conversations in which `viewer` ever had a period that changed since the sync token
    /// `since` (all of them without one), and the token for the next call. A bad token is
    /// `BadRequest`.
    async fn list_conversations(
        &self,
        viewer: &UserId,
        since: Option<&str>,
    ) -> Result<ConversationFeed, StoreError>;
    async fn add_member(
        &self,
        conv_id: &ConvId,
        actor: &UserId,
        target: &UserId,
    ) -> Result<MembershipChange, StoreError>;
    /// Leave (`actor == target`) or remove another member.
    async fn remove_member(
        &self,
        conv_id: &ConvId,
        actor: &UserId,
        target: &UserId,
    ) -> Result<MembershipChange, StoreError>;
    async fn set_role(
        &self,
        conv_id: &ConvId,
        actor: &UserId,
        target: &UserId,
        role: Role,
    ) -> Result<Role, StoreError>;

    // Search (docs/SEARCH.md).
    /// The messages `req.user` may read that match the query, at most `req.limit`, in the
    /// request's order.
    async fn search(&self, req: &SearchRequest) -> Result<Vec<SearchHit>, StoreError>;
    /// The conversation's search language; `NotMember` unless the viewer ever had a period.
    async fn search_language(
        &self,
        conv_id: &ConvId,
        viewer: &UserId,
    ) -> Result<parley_domain::SearchLanguage, StoreError>;
    /// Sets the conversation's search language (an owner or admin), splitting its messages
    /// again in the same transaction.
    async fn set_search_language(
        &self,
        conv_id: &ConvId,
        actor: &UserId,
        language: parley_domain::SearchLanguage,
    ) -> Result<parley_domain::SearchLanguage, StoreError>;
    /// Whether new messages are being indexed, and how far the index lags the log.
    async fn search_status(&self) -> Result<SearchStatus, StoreError>;

    // The log.
    /// The send transaction of SPEC §4.
    async fn send(&self, req: &SendRequest) -> Result<SendOutcome, StoreError>;
    /// Events visible to `viewer`, ascending after a cursor or descending before one.
    async fn events(
        &self,
        conv_id: &ConvId,
        viewer: &UserId,
        query: EventsQuery,
        limit: u32,
    ) -> Result<EventsPage, StoreError>;

    /// The recall of SPEC §4, in one transaction under the conversation's lock: appends a
    /// `recall` event and erases the target's body. `actor` needs an open period (`NotMember`),
    /// `target_seq` must be a `msg` the actor can see (`NotFound`), sent by the actor
    /// (`NotSender`), and created at most `recall_window_ms` before `now`
    /// (`RecallWindowExpired`). A message already recalled answers its existing recall, even
    /// after the window.
    async fn recall(
        &self,
        conv_id: &ConvId,
        actor: &UserId,
        target_seq: i64,
        now: DateTime<Utc>,
    ) -> Result<RecallOutcome, StoreError>;

    /// An edit of the caller's message (docs/RELATIONS.md): keyed and fingerprinted like a
    /// send (`dup` on a retry, `IdempotencyMismatch` for another request under the key), then
    /// `NotMember`, `NotFound` (no visible msg at `target_seq`), `NotSender`, `Recalled`.
    async fn edit(&self, req: &EditRequest) -> Result<EditOutcome, StoreError>;

    /// A reaction added or taken back; a repeated one changes nothing. `NotMember`,
    /// `NotFound`, `Recalled`, `LimitReached` (distinct keys on the message).
    async fn react(&self, req: &ReactRequest) -> Result<ReactOutcome, StoreError>;

    /// A thread's root and the replies `viewer` may see, by the cursors of `events`.
    /// `NotFound` when the root is no visible message that starts a thread.
    async fn thread(
        &self,
        conv_id: &ConvId,
        viewer: &UserId,
        thread: ThreadQuery,
        limit: u32,
    ) -> Result<EventsPage, StoreError>;

    // End-to-end encrypted conversations (docs/E2EE.md).
    /// An MLS write under the conversation's lock: keyed like a send (`dup` on a retry,
    /// `IdempotencyMismatch`), then `NotMember`, `NotEncrypted`, `EpochConflict` (made in
    /// another epoch than the current one), and for the users a Commit adds or removes the
    /// rules of a group's adds and removals.
    async fn post_mls(&self, req: &MlsRequest) -> Result<MlsOutcome, StoreError>;
    /// Whether the conversation is end-to-end encrypted; `None` when it does not exist. A
    /// conversation's kind never changes, so an answer may be kept.
    async fn is_encrypted(&self, conv_id: &ConvId) -> Result<Option<bool>, StoreError>;
    /// Stores a device's KeyPackages; `LimitReached` past `KEY_PACKAGES_PER_DEVICE_MAX`.
    async fn publish_key_packages(
        &self,
        batch: &KeyPackageBatch,
    ) -> Result<KeyPackageStock, StoreError>;
    /// What a device holds in the directory.
    async fn key_package_stock(
        &self,
        user: &UserId,
        device: &DeviceId,
    ) -> Result<KeyPackageStock, StoreError>;
    /// One package per live device of `user` that has one, each ordinary package handed out
    /// once; `NotFound` for an unknown user.
    async fn claim_key_packages(&self, user: &UserId) -> Result<Vec<ClaimedPackage>, StoreError>;

    // Attachments (docs/MEDIA.md).
    /// Registers an upload whose bytes are staged, before they are made visible: its blobs and
    /// its media row (the uploader's earlier row for the same bytes, if any, keeps its id).
    /// `QuotaExceeded` when a new row would take the uploader past `quota_bytes`.
    async fn register_media(&self, new: &NewMedia) -> Result<MediaRecord, StoreError>;
    /// The upload when `viewer` may read it (a message naming it in one of their periods, or
    /// their own upload no message named yet); `None` for no such upload and for no access.
    async fn readable_media(
        &self,
        media_id: &parley_domain::MediaId,
        viewer: &UserId,
    ) -> Result<Option<MediaRecord>, StoreError>;
    /// One round of the media sweep: uploads no message names, last uploaded before
    /// `uploaded_before_ms`, then the bytes of blobs no upload names, each deleted by the
    /// remover `remover` makes for it while the store holds the blob's row lock.
    async fn sweep_media(
        &self,
        uploaded_before_ms: i64,
        batch_len_max: u32,
        remover: &(dyn Fn(String) -> BlobRemover + Send + Sync),
    ) -> Result<MediaSweep, StoreError>;
    /// The key named `name` every gateway shares; `candidate` becomes it if none exists.
    async fn shared_key(&self, name: &str, candidate: &str) -> Result<String, StoreError>;

    // Offline notifications (docs/PUSH.md).
    /// Sets the device's push target, replacing any earlier one.
    async fn set_push_target(
        &self,
        device: (&UserId, &DeviceId),
        target: &PushTarget,
        now_ms: i64,
    ) -> Result<(), StoreError>;
    /// The device's push target.
    async fn push_target(
        &self,
        device: (&UserId, &DeviceId),
    ) -> Result<Option<PushTarget>, StoreError>;
    /// Deletes the device's push target and what is queued for it; true when it had one.
    async fn delete_push_target(&self, device: (&UserId, &DeviceId)) -> Result<bool, StoreError>;
    /// Sets the member's notification level of the conversation.
    async fn set_notify_level(
        &self,
        conv_id: &ConvId,
        user: &UserId,
        level: NotifyLevel,
    ) -> Result<(), StoreError>;
    /// The member's notification level of the conversation.
    async fn notify_level(
        &self,
        conv_id: &ConvId,
        user: &UserId,
    ) -> Result<NotifyLevel, StoreError>;
    /// Sets whether the user's notifications leave out sender and preview.
    async fn set_push_privacy(&self, user: &UserId, privacy: bool) -> Result<(), StoreError>;
    /// Whether the user's notifications leave out sender and preview.
    async fn push_privacy(&self, user: &UserId) -> Result<bool, StoreError>;
    /// Expands at most `batch_len_max` committed messages into notifications owed to devices;
    /// answers how many messages.
    async fn expand_push_outbox(
        &self,
        now_ms: i64,
        coalesce_ms: i64,
        batch_len_max: u32,
    ) -> Result<u64, StoreError>;
    /// Leases at most `batch_len_max` due notifications to `lease` for `lease_ms`.
    async fn claim_push(
        &self,
        lease: &str,
        now_ms: i64,
        lease_ms: i64,
        batch_len_max: u32,
    ) -> Result<Vec<PushJob>, StoreError>;
    /// Applies what became of claimed notifications.
    async fn report_push(
        &self,
        outcomes: &[PushOutcome],
        now_ms: i64,
        coalesce_ms: i64,
    ) -> Result<(), StoreError>;
    /// How much notification work waits.
    async fn push_backlog(&self) -> Result<PushBacklog, StoreError>;

    /// Moves `user`'s read position to `max(read_seq, min(seq, head))` (P8) and answers the
    /// resulting position. `NotMember` unless the user ever had a period.
    async fn mark_read(&self, conv_id: &ConvId, user: &UserId, seq: i64)
        -> Result<i64, StoreError>;

    // Retention (SPEC §4, purge).
    /// One round of the retention purge: for each conversation whose oldest event is older
    /// than its `retention_ms` at `now`, deletes at most `batch_events_max` events in seq
    /// order, raises `min_seq` past them and moves the request keys of purged messages into
    /// the tombstones (stamped `now`), in one short transaction per conversation. A
    /// conversation whose lock is held is skipped, never waited for.
    async fn purge_batch(
        &self,
        now: DateTime<Utc>,
        batch_events_max: u32,
    ) -> Result<PurgeReport, StoreError>;
    /// Deletes the tombstones purged before `older_than` and answers how many. A request key
    /// whose tombstone expired is free again.
    async fn expire_tombstones(&self, older_than: DateTime<Utc>) -> Result<u64, StoreError>;

    // Realtime support for gateways.
    /// Registers a gateway or renews its lease until now + `lease_ms`.
    async fn renew_gateway(&self, gateway_id: &str, lease_ms: i64) -> Result<(), StoreError>;
    /// Releases a draining gateway's lease: deletes its row and every route naming it in one
    /// transaction, and answers how many routes it deleted.
    async fn release_gateway(&self, gateway_id: &str) -> Result<u64, StoreError>;
    /// One batch of route convergence (chapter 10): deletes at most `batch_len_max` routes
    /// whose gateway's lease expired by the store's clock, or whose gateway row is gone, and
    /// then the expired gateway rows that no longer have routes. Answers how many routes it
    /// deleted; fewer than `batch_len_max` means none were left. Routes locked by another
    /// reaper are skipped, never waited for.
    async fn reap_routes(&self, batch_len_max: u32) -> Result<u64, StoreError>;
    /// [`Store::reap_routes`], answering the user of each deleted route instead of the count,
    /// so that the gateway can tell those users' co-members they went offline.
    async fn reap_route_users(&self, batch_len_max: u32) -> Result<Vec<UserId>, StoreError>;
    /// Every registered gateway, by id, with the time left on its lease and its route count.
    async fn gateway_leases(&self) -> Result<Vec<GatewayLease>, StoreError>;
    /// Points the device's route at a new connection and answers the route it replaced, whose
    /// connection the caller must close (chapter 05).
    async fn claim_route(&self, route: &Route) -> Result<Option<Route>, StoreError>;
    /// The device's route as the last claim left it, if any: which gateway and connection
    /// deliver to it. A gateway checks its connections against it after its bus lost
    /// announcements, since a lost kick would leave an older connection open.
    async fn device_route(
        &self,
        user_id: &UserId,
        device_id: &DeviceId,
    ) -> Result<Option<Route>, StoreError>;
    /// Deletes the device's route only where it still names `conn_id` (P9). True when deleted.
    async fn release_route(
        &self,
        user_id: &UserId,
        device_id: &DeviceId,
        conn_id: &str,
    ) -> Result<bool, StoreError>;
    /// The current members of a conversation with the start of their open period, and the head
    /// they were read at: what a gateway's member cache starts from.
    async fn current_members(&self, conv_id: &ConvId) -> Result<MemberSnapshot, StoreError>;
    /// Committed events with `after < seq <= upto`, ascending, unfiltered: gateways filter per
    /// recipient with the member cache. At most `limit`.
    async fn log_range(
        &self,
        conv_id: &ConvId,
        after: i64,
        upto: i64,
        limit: u32,
    ) -> Result<Vec<Event>, StoreError>;

    // Presence and typing (SPEC §7).
    /// How many routes the user's devices have, on every gateway: the user is online while
    /// this is above zero.
    async fn user_routes(&self, user_id: &UserId) -> Result<i64, StoreError>;
    /// Records now as the user's `last_seen` (a device of theirs disconnected) and answers the
    /// routes the user has left beside the time written; `None` when there is no such user.
    async fn mark_seen(&self, user_id: &UserId) -> Result<Option<Seen>, StoreError>;
    /// At most `limit` distinct users that have a route and share a direct conversation or a
    /// `push` group with `user_id` now: who is told when the user comes or goes.
    async fn presence_peers(&self, user_id: &UserId, limit: u32)
        -> Result<Vec<UserId>, StoreError>;
    /// Whom `user_id` typing in `conv_id` reaches: the delivery mode and at most `limit` other
    /// current members that have a route (none in a pull conversation). `None` when the
    /// conversation does not exist or `user_id` is not a current member (P10: the same).
    async fn typing_targets(
        &self,
        conv_id: &ConvId,
        user_id: &UserId,
        limit: u32,
    ) -> Result<Option<TypingTargets>, StoreError>;
    /// The presence of those of `users` that are `viewer` or share a conversation with
    /// `viewer` now, by user id; unknown users and strangers are left out alike.
    async fn presence_of(
        &self,
        viewer: &UserId,
        users: &[UserId],
    ) -> Result<Vec<UserPresence>, StoreError>;
}
