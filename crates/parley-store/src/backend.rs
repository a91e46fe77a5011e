//! What a backend supplies to the store-neutral flows: transactions whose type implements the
//! primitives of every flow, and the few operations that run outside a transaction. Every
//! backend is a [`Store`](crate::Store) through `store_impl.rs`.

use chrono::{DateTime, Utc};
use parley_domain::{ConvId, DeviceId, Event, EventsPage, UserId};

use crate::flow::create::CreateTx;
use crate::flow::membership::MembershipTx;
use crate::flow::read_mark::ReadMarkTx;
use crate::flow::recall::RecallTx;
use crate::flow::retention::PurgeTx;
use crate::flow::route::RouteTx;
use crate::flow::send::{send_in, SendTx};
use crate::flow::StoreFuture;
use crate::types::{DeviceIdentity, SendOutcome, SendRequest};
use crate::views::FeedTx;

/// A database the store runs on.
pub(crate) trait Backend: Send + Sync + 'static {
    type Tx: SendTx
        + CreateTx
        + MembershipTx
        + RecallTx
        + PurgeTx
        + RouteTx
        + ReadMarkTx
        + FeedTx
        + 'static;

    /// Starts a write transaction: its first lock statement serialises it with every other
    /// write of the conversation.
    fn begin_write(&self) -> impl StoreFuture<Self::Tx>;
    /// Starts a read-only transaction: one snapshot from its first statement to its end.
    fn begin_read(&self) -> impl StoreFuture<Self::Tx>;

    /// Applies the embedded migrations.
    fn migrate_schema(&self) -> impl StoreFuture<()>;
    /// Runs a trivial query.
    fn ping_database(&self) -> impl StoreFuture<()>;

    /// Inserts a user unless the id is taken; true when inserted.
    fn insert_user(&self, user_id: &UserId, display_name: Option<&str>) -> impl StoreFuture<bool>;
    /// Creates the device or replaces (and so revokes) its token; false when the user does not
    /// exist.
    fn store_device_token(
        &self,
        user_id: &UserId,
        device_id: &DeviceId,
        token_hash: &str,
    ) -> impl StoreFuture<bool>;
    /// Revokes the device's token; false when there is no such device.
    fn revoke_device_token(&self, user_id: &UserId, device_id: &DeviceId)
        -> impl StoreFuture<bool>;
    /// The live device a token hash belongs to.
    fn device_of_token(&self, token_hash: &str) -> impl StoreFuture<Option<DeviceIdentity>>;

    /// Registers a gateway or renews its lease until now + `lease_ms`.
    fn renew_lease(&self, gateway_id: &str, lease_ms: i64) -> impl StoreFuture<()>;
    /// Deletes the device's route where it still names `conn_id` (P9); true when deleted.
    fn delete_route(
        &self,
        user_id: &UserId,
        device_id: &DeviceId,
        conn_id: &str,
    ) -> impl StoreFuture<bool>;
    /// Events of one seq range by primary key, ascending, at most `limit`, outside a
    /// transaction (a gateway's catch-up, filtered by the gateway).
    fn read_range(
        &self,
        conv_id: &ConvId,
        bounds: (i64, i64),
        limit: usize,
    ) -> impl StoreFuture<Vec<Event>>;

    /// Conversations with events past retention at `now`, by id, at most `limit`.
    fn due_for_purge(&self, now: DateTime<Utc>, limit: usize) -> impl StoreFuture<Vec<String>>;
    /// Deletes at most `len_max` tombstones purged before `older_than`; answers how many.
    fn expire_tombstone_batch(
        &self,
        older_than: DateTime<Utc>,
        len_max: u64,
    ) -> impl StoreFuture<u64>;

    /// Commits one send. A backend may commit concurrent sends together, deciding each
    /// request by the same rule; by default each runs the send flow in its own transaction.
    fn commit_send(&self, req: &SendRequest) -> impl StoreFuture<SendOutcome> {
        async move { send_in(self.begin_write().await?, req).await }
    }

    /// Events after a cursor in one statement where the backend has one for this reader;
    /// `None` sends the read through the general path.
    fn events_after_in_one_statement(
        &self,
        conv_id: &ConvId,
        viewer: &UserId,
        cursor: (i64, Option<i64>),
        limit: u32,
    ) -> impl StoreFuture<Option<EventsPage>> {
        let _ = (conv_id, viewer, cursor, limit);
        async { Ok(None) }
    }
}
