//! The embedded store: the same contract as PostgreSQL on one SQLite file, for a single node
//! that runs without a database server (SPEC §14).
//!
//! SQLite has one writer at a time, so here every write serialises, not only the writes to one
//! conversation: that is this store's ceiling (docs/PERFORMANCE.md measures it). The store
//! makes the serialisation explicit instead of discovering it through lock errors:
//!
//! - one write connection (a pool of exactly one), and every write transaction starts with
//!   `BEGIN IMMEDIATE`, which takes the database's write lock before the first read. The checks
//!   of a send therefore see every write that committed before, exactly like the statements
//!   PostgreSQL runs after granting the conversation's row lock;
//! - a pool of read connections that cannot write (`query_only`); each read runs in one
//!   transaction, which in WAL mode is one snapshot, so a page, its `head` and the reader's
//!   periods agree;
//! - WAL journal, so readers never wait for the writer nor the writer for readers;
//! - `synchronous = FULL`: every commit syncs the WAL to disk before it returns, so an ack
//!   survives a crash of the process and of the machine. `NORMAL` would skip that sync and keep
//!   acks across `kill -9` but not across a power loss; an ack promises durability (P6);
//! - concurrent sends share that sync: the node's send queue commits everything queued while
//!   the previous batch committed in one transaction, each request in a savepoint of its own
//!   (`send_queue.rs`, `send_batch.rs`); every answer leaves after the commit returned;
//! - a busy timeout, for the rare writer outside this process (the sqlite3 shell, a test);
//! - foreign keys on, as in PostgreSQL;
//! - the directory and the files owner-only (`files.rs`).

mod admin;
pub mod files;
mod membership;
mod mls;
mod read;
mod realtime;
mod recall;
mod retention;
mod rows;
mod search;
mod send;
mod send_batch;
pub mod send_queue;
mod views;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sqlx::pool::PoolConnection;
use sqlx::query::Query;
use sqlx::sqlite::{
    SqliteArguments, SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{Sqlite, SqlitePool, Transaction};

use crate::backend::Backend;
use crate::breaks::Breaks;
use crate::error::StoreError;
use crate::observer::ObserverSlot;

/// Connections of the read pool: readers run in parallel in WAL mode, and more than a few per
/// core only adds threads (each SQLite connection has its own worker thread).
pub const READ_POOL_SIZE: u32 = 8;
/// How long a write waits for another process's write lock before the store counts as
/// unavailable. Writers of this process queue for the single write connection instead.
pub const BUSY_TIMEOUT_MS: u64 = 5_000;
/// How long a request waits for a pooled connection. Every write of the node queues for the one
/// write connection, so this is generous: a send that waits this long is refused unwritten.
const POOL_ACQUIRE_TIMEOUT_MS: u64 = 30_000;
/// Name of the database file inside the data directory.
pub const DB_FILE_NAME: &str = "parley.db";

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");

/// A transaction on one of the pools: a write (holding the write lock) or a read (one snapshot).
pub(crate) type Tx<'c> = Transaction<'c, Sqlite>;

#[derive(Clone)]
pub struct SqliteStore {
    writer: SqlitePool,
    reader: SqlitePool,
    path: PathBuf,
    /// Told how long each request waited for a connection of either pool.
    observer: ObserverSlot,
    /// The guards this store runs without (`breaks.rs`); none outside a test build. Of the
    /// four, `cleanup-without-cad` and `ack-before-commit` apply here; the other two remove
    /// PostgreSQL guards that the single writer does not have (`send.rs`).
    breaks: Breaks,
    /// Concurrent sends waiting to be committed together (`send_queue.rs`).
    sends: Arc<send_queue::SendQueue>,
}

impl SqliteStore {
    /// Opens (creating if missing) the database file at `path`. The schema is applied by
    /// [`Store::migrate`].
    pub async fn open(path: &Path) -> Result<Self, StoreError> {
        Self::open_with(path, |options| options).await
    }

    /// Like [`SqliteStore::open`], with `configure` applied to the options of every connection,
    /// e.g. to log statements at another level.
    pub async fn open_with(
        path: &Path,
        configure: impl Fn(SqliteConnectOptions) -> SqliteConnectOptions,
    ) -> Result<Self, StoreError> {
        files::private_db_file(path).map_err(|e| {
            StoreError::Unavailable(format!(
                "cannot create the database file {} owner-only: {e}",
                path.display()
            ))
        })?;
        let base = configure(SqliteConnectOptions::new())
            .filename(path)
            .busy_timeout(Duration::from_millis(BUSY_TIMEOUT_MS))
            .foreign_keys(true);
        let write_options = base
            .clone()
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full);
        // The single writer; it stays open so the WAL and its index are never torn down and
        // rebuilt between two writes.
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .acquire_timeout(Duration::from_millis(POOL_ACQUIRE_TIMEOUT_MS))
            .connect_with(write_options)
            .await?;
        // Opened after the writer, which created the file and switched it to WAL (a persistent
        // property of the file).
        let reader = SqlitePoolOptions::new()
            .max_connections(READ_POOL_SIZE)
            .acquire_timeout(Duration::from_millis(POOL_ACQUIRE_TIMEOUT_MS))
            .connect_with(base.pragma("query_only", "ON"))
            .await?;
        Ok(Self {
            writer,
            reader,
            path: path.to_owned(),
            observer: ObserverSlot::default(),
            breaks: Breaks::default(),
            sends: Arc::default(),
        })
    }

    /// The same store without the guards `breaks` names (a test build's controls; see
    /// `breaks.rs`).
    pub fn with_breaks(self, breaks: Breaks) -> Self {
        Self { breaks, ..self }
    }

    /// Opens `<dir>/parley.db`, creating the directory if missing; both are owner-only
    /// (`files.rs`).
    pub async fn open_dir(dir: &Path) -> Result<Self, StoreError> {
        files::private_dir(dir).map_err(|e| {
            StoreError::Unavailable(format!(
                "cannot create the data directory {} owner-only: {e}",
                dir.display()
            ))
        })?;
        Self::open(&dir.join(DB_FILE_NAME)).await
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A connection of `pool`; the wait for it is reported, a timeout included.
    async fn acquire(&self, pool: &SqlitePool) -> Result<PoolConnection<Sqlite>, StoreError> {
        let start = std::time::Instant::now();
        let conn = pool.acquire().await;
        self.observer.pool_wait(start.elapsed());
        Ok(conn?)
    }

    /// Runs one statement in a write transaction of its own and answers the rows it changed. A
    /// failed commit here is `Unavailable`, as for the single statements of the PostgreSQL
    /// store: none of these is a send whose retry needs the outcome-unknown answer.
    async fn write_one<'q>(
        &self,
        statement: Query<'q, Sqlite, SqliteArguments<'q>>,
    ) -> Result<u64, StoreError> {
        let mut tx = self.begin_write().await?;
        let changed = statement.execute(&mut *tx).await?.rows_affected();
        tx.commit().await?;
        Ok(changed)
    }

    /// Closes both pools; later calls fail as unavailable. Tests use it to let go of the file.
    pub async fn close(&self) {
        self.reader.close().await;
        self.writer.close().await;
    }
}

/// The store's contract is `store_impl.rs` over these and the statements of `admin.rs`,
/// `realtime.rs` and `retention.rs`.
impl Backend for SqliteStore {
    type Tx = Tx<'static>;
    type Conn = PoolConnection<Sqlite>;

    fn describe(&self) -> crate::StoreDescription {
        crate::StoreDescription {
            kind: "sqlite",
            idle_in_transaction_timeout_ms: None,
        }
    }

    /// Holds the write lock from the first statement (`BEGIN IMMEDIATE`).
    async fn begin_write(&self) -> Result<Tx<'static>, StoreError> {
        let conn = self.acquire(&self.writer).await?;
        // What `Pool::begin_with` runs after its acquire, so the acquire is timed alone.
        Ok(sqlx::Transaction::begin(conn, Some("BEGIN IMMEDIATE".into())).await?)
    }

    /// On a `query_only` connection; in WAL mode, one snapshot from the first statement.
    async fn begin_read(&self) -> Result<Tx<'static>, StoreError> {
        let conn = self.acquire(&self.reader).await?;
        Ok(sqlx::Transaction::begin(conn, None).await?)
    }

    async fn connection(&self) -> Result<PoolConnection<Sqlite>, StoreError> {
        self.acquire(&self.reader).await
    }

    /// Through the node's send queue, which commits concurrent sends in one transaction and
    /// one WAL sync (group commit).
    async fn commit_send(
        &self,
        req: &crate::types::SendRequest,
    ) -> Result<crate::types::SendOutcome, StoreError> {
        self.queued_send(req.clone()).await
    }

    fn observe(&self, observer: std::sync::Arc<dyn crate::StoreObserver>) {
        self.observer.set(observer);
    }

    fn breaks(&self) -> Breaks {
        self.breaks
    }

    async fn migrate_schema(&self) -> Result<(), StoreError> {
        MIGRATOR
            .run(&self.writer)
            .await
            .map_err(|e| StoreError::Migration(e.to_string()))
    }
}
