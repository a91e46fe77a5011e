//! The store on PostgreSQL: its pool, its statements and its send batching, under the
//! store-neutral flows (`flow/`, `read.rs`, `views.rs`).
//!
//! Writes to one conversation serialise on its row (`SELECT … FOR NO KEY UPDATE`: it conflicts
//! with itself like `FOR UPDATE`, but not with the key-share locks that foreign-key checks of
//! other tables take). Reads run in a read-only REPEATABLE READ transaction, so a page, its
//! `head` and the reader's periods come from one snapshot.

mod admin;
mod events_after;
pub use events_after::EVENTS_AFTER_ONE_PERIOD_SQL;
mod membership;
mod read;
mod realtime;
mod recall;
mod retention;
pub use crate::sql::{EVENTS_RANGE_ASC_SQL, EVENTS_RANGE_DESC_SQL};
mod rows;
mod send;
mod send_batch;
mod send_queue;
mod timed_pool;
pub use send_batch::{SEND_BATCH_INSERT_SQL, SEND_BATCH_KEY_CHECK_SQL, SEND_BATCH_LOCK_SQL};
pub use send_queue::{SEND_BATCH_LEN_MAX, SEND_QUEUE_LEN_MAX, SEND_WORKERS_MAX};
mod views;
pub use send::{SEND_INSERT_SQL, SEND_KEY_CHECK_SQL, SEND_LOCK_SQL};

use std::sync::Arc;
use std::time::Duration;

use parley_domain::{ConvId, EventsPage, UserId};
use sqlx::pool::PoolConnection;
use sqlx::postgres::PgPoolOptions;
use sqlx::{PgPool, Postgres, Transaction};
use timed_pool::TimedPool;

use crate::backend::Backend;
use crate::breaks::Breaks;
use crate::error::StoreError;
use crate::observer::{ObserverSlot, StoreObserver};
use crate::types::{SendOutcome, SendRequest};

/// How long a request waits for a pooled connection before the store counts as unavailable.
const POOL_ACQUIRE_TIMEOUT_MS: u64 = 5_000;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

/// A transaction on the pool: READ COMMITTED for writes, REPEATABLE READ for reads.
pub(crate) type PgTx<'c> = Transaction<'c, Postgres>;

#[derive(Clone)]
pub struct PgStore {
    /// The pool, with the waits for its connections reported to the observer.
    pool: TimedPool,
    /// Concurrent sends, committed together in batches (`send_queue.rs`).
    sends: Arc<send_queue::SendQueue>,
    /// The guards this store runs without (`breaks.rs`); none outside a test build.
    breaks: Breaks,
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
        let pool = TimedPool::new(pool, ObserverSlot::default());
        Self {
            sends: Arc::new(send_queue::SendQueue::new(pool.clone(), Breaks::default())),
            pool,
            breaks: Breaks::default(),
        }
    }

    /// The same store without the guards `breaks` names (a test build's controls; see
    /// `breaks.rs`). Call it before the first send: the send queue is replaced.
    pub fn with_breaks(self, breaks: Breaks) -> Self {
        Self {
            sends: Arc::new(send_queue::SendQueue::new(self.pool.clone(), breaks)),
            pool: self.pool,
            breaks,
        }
    }

    pub fn pool(&self) -> &PgPool {
        self.pool.pool()
    }
}

/// The store's contract is `store_impl.rs` over these and the statements of `admin.rs`,
/// `realtime.rs` and `retention.rs`.
impl Backend for PgStore {
    type Tx = PgTx<'static>;
    type Conn = PoolConnection<Postgres>;

    async fn begin_write(&self) -> Result<PgTx<'static>, StoreError> {
        self.pool.begin().await
    }

    async fn begin_read(&self) -> Result<PgTx<'static>, StoreError> {
        read::begin_snapshot(&self.pool).await
    }

    async fn connection(&self) -> Result<PoolConnection<Postgres>, StoreError> {
        self.pool.acquire().await
    }

    fn observe(&self, observer: Arc<dyn StoreObserver>) {
        self.pool.observer().set(observer);
    }

    fn breaks(&self) -> Breaks {
        self.breaks
    }

    async fn migrate_schema(&self) -> Result<(), StoreError> {
        MIGRATOR
            .run(self.pool.pool())
            .await
            .map_err(|e| StoreError::Migration(e.to_string()))
    }

    /// Through the node's send queue, which commits concurrent sends in batches.
    async fn commit_send(&self, req: &SendRequest) -> Result<SendOutcome, StoreError> {
        self.sends.send(req.clone()).await
    }

    async fn events_after_in_one_statement(
        &self,
        conv_id: &ConvId,
        viewer: &UserId,
        cursor: (i64, Option<i64>),
        limit: u32,
    ) -> Result<Option<EventsPage>, StoreError> {
        events_after::events_after_one_period(&self.pool, conv_id, viewer, cursor, limit).await
    }
}
