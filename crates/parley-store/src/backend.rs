//! What a backend supplies to the store-neutral flows: transactions whose type implements the
//! primitives of every flow, pooled connections for single statements, and the operations of
//! `flow::admin`, `flow::route` and `flow::retention` that run outside a flow's transaction.
//! Every backend is a [`Store`](crate::Store) through `store_impl.rs`.

use std::ops::DerefMut;

use parley_domain::{ConvId, Event, EventsPage, UserId};

use crate::flow::admin::Accounts;
use crate::flow::create::CreateTx;
use crate::flow::membership::MembershipTx;
use crate::flow::read_mark::ReadMarkTx;
use crate::flow::recall::RecallTx;
use crate::flow::relate::RelateTx;
use crate::flow::retention::{Expiry, PurgeTx};
use crate::flow::route::{Gateways, RouteTx};
use crate::flow::send::{send_in, SendTx};
use crate::flow::StoreFuture;
use crate::query::Sql;
use crate::sql;
use crate::types::{DeviceIdentity, SendOutcome, SendRequest};
use crate::views::FeedTx;

/// A database the store runs on.
pub(crate) trait Backend:
    Accounts + Gateways + Expiry + crate::presence::Presence + Send + Sync + 'static
{
    type Tx: SendTx
        + RelateTx
        + CreateTx
        + MembershipTx
        + RecallTx
        + PurgeTx
        + RouteTx
        + ReadMarkTx
        + FeedTx
        + crate::flow::media::MediaTx
        + crate::flow::push::PushTx
        + crate::flow::search::SearchTx
        + crate::flow::mls::MlsTx
        + crate::flow::mls_keys::KeyPackageTx
        + 'static;
    /// A pooled connection, for a read of one statement outside a transaction.
    type Conn: DerefMut<Target: Sql + Sized> + Send;

    /// Starts a write transaction: its first lock statement serialises it with every other
    /// write of the conversation.
    fn begin_write(&self) -> impl StoreFuture<Self::Tx>;
    /// Starts a read-only transaction: one snapshot from its first statement to its end.
    fn begin_read(&self) -> impl StoreFuture<Self::Tx>;
    /// A connection of the pool reads run on.
    fn connection(&self) -> impl StoreFuture<Self::Conn>;
    /// Applies the embedded migrations.
    fn migrate_schema(&self) -> impl StoreFuture<()>;

    /// Reports the backend's pool waits and send batches to `observer` from now on; a backend
    /// with nothing to report ignores it.
    fn observe(&self, _observer: std::sync::Arc<dyn crate::StoreObserver>) {}

    /// The guards this backend was built without (`breaks.rs`); none outside a test build.
    fn breaks(&self) -> crate::breaks::Breaks;

    /// The kind of store and the limits it sets on its own connections.
    fn describe(&self) -> crate::StoreDescription;

    /// Runs a trivial query.
    fn ping_database(&self) -> impl StoreFuture<()> {
        async move {
            self.connection().await?.execute("SELECT 1", &[]).await?;
            Ok(())
        }
    }

    /// The live device a token hash belongs to.
    fn device_of_token(&self, token_hash: &str) -> impl StoreFuture<Option<DeviceIdentity>> {
        async move { sql::device_of_token(&mut *self.connection().await?, token_hash).await }
    }

    /// The user's password hash; `None` for an unknown user or one without a password.
    fn password_hash_of(&self, user_id: &UserId) -> impl StoreFuture<Option<String>> {
        async move { sql::password_hash_of(&mut *self.connection().await?, user_id).await }
    }

    /// Events of one seq range by primary key, ascending, at most `limit`, outside a
    /// transaction (a gateway's catch-up, filtered by the gateway).
    fn read_range(
        &self,
        conv_id: &ConvId,
        bounds: (i64, i64),
        limit: usize,
    ) -> impl StoreFuture<Vec<Event>> {
        async move {
            let mut conn = self.connection().await?;
            sql::range(&mut *conn, conv_id, bounds, false, limit).await
        }
    }

    /// Commits one send. A backend may commit concurrent sends together, deciding each
    /// request by the same rule; by default each runs the send flow in its own transaction.
    fn commit_send(&self, req: &SendRequest) -> impl StoreFuture<SendOutcome> {
        async move { send_in(self.begin_write().await?, req, self.breaks()).await }
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
