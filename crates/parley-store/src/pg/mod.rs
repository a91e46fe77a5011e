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
mod mls;
mod read;
mod realtime;
mod recall;
mod retention;
pub use crate::sql::{EVENTS_RANGE_ASC_SQL, EVENTS_RANGE_DESC_SQL};
mod rows;
mod search;
mod send;
mod send_batch;
mod send_function;
pub use send_function::{SEND_BATCH_FUNCTION_SQL, SEND_FUNCTION_SQL};
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
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgPool, Postgres, Transaction};
use timed_pool::TimedPool;

use crate::backend::Backend;
use crate::breaks::Breaks;
use crate::error::StoreError;
use crate::observer::{ObserverSlot, StoreObserver};
use crate::types::{SendOutcome, SendRequest};

/// How long a request waits for a pooled connection before the store counts as unavailable.
const POOL_ACQUIRE_TIMEOUT_MS: u64 = 5_000;

/// A pooled connection idle at least this long is pinged before it is handed out, so one that
/// died while idle (a restarted server, a dropped route) is replaced instead of failing a
/// request. A connection in steady use skips the ping: it would double the round trips of every
/// one-statement read (an events-after page, a token check).
const POOL_PING_IDLE_MS: u64 = 1_000;

/// Default `idle_in_transaction_session_timeout` of the store's connections: a connection that
/// sits in an open transaction this long (a stuck client of the pool, a hung task holding a
/// conversation's row lock) is ended by PostgreSQL, so a lock is never held without bound.
/// Far above any transaction of the store, which never waits on anything but the database.
pub const IDLE_IN_TRANSACTION_TIMEOUT_MS_DEFAULT: u64 = 10_000;

/// The options of every connection of the store's pool: the URL's, with the store's
/// `idle_in_transaction_session_timeout` (0 turns it off). Public so that `parley verify` can
/// build a connection the same way.
pub fn connect_options(
    url: &str,
    idle_in_transaction_timeout_ms: u64,
) -> Result<PgConnectOptions, StoreError> {
    let options: PgConnectOptions = url
        .parse()
        .map_err(|e: sqlx::Error| StoreError::Unavailable(format!("bad database URL: {e}")))?;
    Ok(options.options([(
        "idle_in_transaction_session_timeout",
        idle_in_transaction_timeout_ms.to_string(),
    )]))
}

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
    /// The `idle_in_transaction_session_timeout` its connections were opened with; `None` for
    /// a pool made elsewhere (`from_pool`).
    idle_in_transaction_timeout_ms: Option<u64>,
}

impl PgStore {
    /// Connects a pool of at most `pool_size` connections, with the default
    /// `idle_in_transaction_session_timeout`.
    pub async fn connect(url: &str, pool_size: u32) -> Result<Self, StoreError> {
        Self::connect_with(url, pool_size, IDLE_IN_TRANSACTION_TIMEOUT_MS_DEFAULT).await
    }

    /// Connects a pool of at most `pool_size` connections whose transactions PostgreSQL ends
    /// after `idle_in_transaction_timeout_ms` idle (0: never).
    pub async fn connect_with(
        url: &str,
        pool_size: u32,
        idle_in_transaction_timeout_ms: u64,
    ) -> Result<Self, StoreError> {
        let pool = PgPoolOptions::new()
            .max_connections(pool_size)
            .acquire_timeout(Duration::from_millis(POOL_ACQUIRE_TIMEOUT_MS))
            .test_before_acquire(false)
            .before_acquire(|conn, meta| {
                Box::pin(async move {
                    if meta.idle_for >= Duration::from_millis(POOL_PING_IDLE_MS) {
                        conn.ping().await?;
                    }
                    Ok(true)
                })
            })
            .connect_with(connect_options(url, idle_in_transaction_timeout_ms)?)
            .await?;
        let mut store = Self::from_pool(pool);
        store.idle_in_transaction_timeout_ms = Some(idle_in_transaction_timeout_ms);
        Ok(store)
    }

    pub fn from_pool(pool: PgPool) -> Self {
        let pool = TimedPool::new(pool, ObserverSlot::default());
        Self {
            sends: Arc::new(send_queue::SendQueue::new(pool.clone(), Breaks::default())),
            pool,
            breaks: Breaks::default(),
            idle_in_transaction_timeout_ms: None,
        }
    }

    /// The same store without the guards `breaks` names (a test build's controls; see
    /// `breaks.rs`). Call it before the first send: the send queue is replaced.
    pub fn with_breaks(self, breaks: Breaks) -> Self {
        Self {
            sends: Arc::new(send_queue::SendQueue::new(self.pool.clone(), breaks)),
            pool: self.pool,
            breaks,
            idle_in_transaction_timeout_ms: self.idle_in_transaction_timeout_ms,
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

    fn describe(&self) -> crate::StoreDescription {
        crate::StoreDescription {
            kind: "postgres",
            idle_in_transaction_timeout_ms: self.idle_in_transaction_timeout_ms,
        }
    }

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
