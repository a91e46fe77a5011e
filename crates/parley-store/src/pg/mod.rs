//! PostgreSQL implementation of the store.
//!
//! Writes to one conversation serialise on its row (`SELECT … FOR NO KEY UPDATE`: it conflicts
//! with itself like `FOR UPDATE`, but not with the key-share locks that foreign-key checks of
//! other tables take). Reads run in a read-only REPEATABLE READ transaction, so a page, its
//! `head` and the reader's periods come from one snapshot.

mod admin;
mod events_after;
pub use events_after::EVENTS_AFTER_ONE_PERIOD_SQL;
pub mod bus;
pub use bus::{PgBus, PgBusStats};
/// Re-exported so a caller of [`PgBus::start`] needs no tokio-util dependency of its own and
/// always passes the type the bus expects.
pub use tokio_util::sync::CancellationToken;
mod membership;
mod read;
mod realtime;
mod recall;
mod retention;
pub use read::{EVENTS_RANGE_ASC_SQL, EVENTS_RANGE_DESC_SQL};
mod rows;
mod send;
mod send_batch;
mod send_queue;
pub use send_batch::{SEND_BATCH_INSERT_SQL, SEND_BATCH_KEY_CHECK_SQL, SEND_BATCH_LOCK_SQL};
pub use send_queue::{SEND_BATCH_LEN_MAX, SEND_QUEUE_LEN_MAX, SEND_WORKERS_MAX};
mod views;
pub use send::{SEND_INSERT_SQL, SEND_KEY_CHECK_SQL, SEND_LOCK_SQL};

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use parley_domain::{ConvId, ConversationView, DeviceId, Event, EventsPage, Role, UserId};
use sqlx::postgres::PgPoolOptions;
use sqlx::{PgPool, Postgres, Transaction};

use crate::backend::Backend;
use crate::flow::{create, join, leave, role};
use crate::{error::StoreError, store::Store, types::*};

/// How long a request waits for a pooled connection before the store counts as unavailable.
const POOL_ACQUIRE_TIMEOUT_MS: u64 = 5_000;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

/// A transaction on the pool: READ COMMITTED for writes, REPEATABLE READ for reads.
type PgTx<'c> = Transaction<'c, Postgres>;

#[derive(Clone)]
pub struct PgStore {
    pool: PgPool,
    /// Concurrent sends, committed together in batches (`send_queue.rs`).
    sends: Arc<send_queue::SendQueue>,
}

impl PgStore {
    /// Connects a pool of at most `pool_size` connections.
    pub async fn connect(url: &str, pool_size: u32) -> Result<Self, StoreError> {
        let pool = PgPoolOptions::new()
            .max_connections(pool_size)
            .acquire_timeout(Duration::from_millis(POOL_ACQUIRE_TIMEOUT_MS))
            .connect(url)
            .await?;
        Ok(Self::from_pool(pool))
    }

    pub fn from_pool(pool: PgPool) -> Self {
        Self {
            pool,
            sends: Arc::default(),
        }
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

impl Backend for PgStore {
    type Tx = PgTx<'static>;

    async fn begin_write(&self) -> Result<PgTx<'static>, StoreError> {
        Ok(self.pool.begin().await?)
    }

    async fn due_for_purge(
        &self,
        now: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<String>, StoreError> {
        retention::due_for_purge(&self.pool, now, limit).await
    }

    async fn expire_tombstone_batch(
        &self,
        older_than: DateTime<Utc>,
        len_max: u64,
    ) -> Result<u64, StoreError> {
        retention::expire_tombstone_batch(&self.pool, older_than, len_max).await
    }
}

#[async_trait]
impl Store for PgStore {
    async fn migrate(&self) -> Result<(), StoreError> {
        MIGRATOR
            .run(&self.pool)
            .await
            .map_err(|e| StoreError::Migration(e.to_string()))
    }

    async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn create_user(
        &self,
        user_id: &UserId,
        display_name: Option<&str>,
    ) -> Result<User, StoreError> {
        admin::create_user(&self.pool, user_id, display_name).await
    }

    async fn issue_device_token(
        &self,
        user_id: &UserId,
        device_id: &DeviceId,
        token_hash: &str,
    ) -> Result<(), StoreError> {
        admin::issue_device_token(&self.pool, user_id, device_id, token_hash).await
    }

    async fn revoke_device(
        &self,
        user_id: &UserId,
        device_id: &DeviceId,
    ) -> Result<(), StoreError> {
        admin::revoke_device(&self.pool, user_id, device_id).await
    }

    async fn authenticate(&self, token_hash: &str) -> Result<Option<DeviceIdentity>, StoreError> {
        admin::authenticate(&self.pool, token_hash).await
    }

    async fn create_conversation(
        &self,
        req: &NewConversation,
    ) -> Result<CreatedConversation, StoreError> {
        create::create_conversation(self, req).await
    }

    async fn get_conversation(
        &self,
        conv_id: &ConvId,
        viewer: &UserId,
    ) -> Result<ConversationView, StoreError> {
        read::get_conversation(&self.pool, conv_id, viewer).await
    }

    async fn list_conversations(
        &self,
        viewer: &UserId,
        since: Option<&str>,
    ) -> Result<ConversationFeed, StoreError> {
        read::list_conversations(&self.pool, viewer, since).await
    }

    async fn add_member(
        &self,
        conv_id: &ConvId,
        actor: &UserId,
        target: &UserId,
    ) -> Result<MembershipChange, StoreError> {
        join::add_member(self, conv_id, actor, target).await
    }

    async fn remove_member(
        &self,
        conv_id: &ConvId,
        actor: &UserId,
        target: &UserId,
    ) -> Result<MembershipChange, StoreError> {
        leave::remove_member(self, conv_id, actor, target).await
    }

    async fn set_role(
        &self,
        conv_id: &ConvId,
        actor: &UserId,
        target: &UserId,
        role: Role,
    ) -> Result<Role, StoreError> {
        role::set_role(self, conv_id, actor, target, role).await
    }

    async fn send(&self, req: &SendRequest) -> Result<SendOutcome, StoreError> {
        self.sends.send(&self.pool, req.clone()).await
    }

    async fn events(
        &self,
        conv_id: &ConvId,
        viewer: &UserId,
        query: EventsQuery,
        limit: u32,
    ) -> Result<EventsPage, StoreError> {
        read::events(&self.pool, conv_id, viewer, query, limit).await
    }

    async fn recall(
        &self,
        conv_id: &ConvId,
        actor: &UserId,
        target_seq: i64,
        now: DateTime<Utc>,
    ) -> Result<RecallOutcome, StoreError> {
        crate::flow::recall::recall(self, conv_id, actor, target_seq, now).await
    }

    async fn purge_batch(
        &self,
        now: DateTime<Utc>,
        batch_events_max: u32,
    ) -> Result<PurgeReport, StoreError> {
        crate::flow::retention::purge_batch(self, now, batch_events_max).await
    }

    async fn expire_tombstones(&self, older_than: DateTime<Utc>) -> Result<u64, StoreError> {
        crate::flow::retention::expire_tombstones(self, older_than).await
    }

    async fn mark_read(
        &self,
        conv_id: &ConvId,
        user: &UserId,
        seq: i64,
    ) -> Result<i64, StoreError> {
        read::mark_read(&self.pool, conv_id, user, seq).await
    }

    async fn renew_gateway(&self, gateway_id: &str, lease_ms: i64) -> Result<(), StoreError> {
        realtime::renew_gateway(&self.pool, gateway_id, lease_ms).await
    }

    async fn claim_route(&self, route: &Route) -> Result<Option<Route>, StoreError> {
        realtime::claim_route(&self.pool, route).await
    }

    async fn release_route(
        &self,
        user_id: &UserId,
        device_id: &DeviceId,
        conn_id: &str,
    ) -> Result<bool, StoreError> {
        realtime::release_route(&self.pool, user_id, device_id, conn_id).await
    }

    async fn current_members(&self, conv_id: &ConvId) -> Result<MemberSnapshot, StoreError> {
        realtime::current_members(&self.pool, conv_id).await
    }

    async fn log_range(
        &self,
        conv_id: &ConvId,
        after: i64,
        upto: i64,
        limit: u32,
    ) -> Result<Vec<Event>, StoreError> {
        read::log_range(&self.pool, conv_id, after, upto, limit).await
    }
}
