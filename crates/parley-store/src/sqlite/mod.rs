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
//! - a busy timeout, for the rare writer outside this process (the sqlite3 shell, a test);
//! - foreign keys on, as in PostgreSQL.

mod admin;
mod membership;
mod read;
mod realtime;
mod recall;
mod retention;
mod rows;
mod send;
mod views;

use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{DateTime, Utc};
use parley_domain::{ConvId, DeviceId, Event, UserId};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Sqlite, SqlitePool, Transaction};

use crate::backend::Backend;
use crate::error::StoreError;
use crate::types::DeviceIdentity;

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
type Tx<'c> = Transaction<'c, Sqlite>;

#[derive(Clone)]
pub struct SqliteStore {
    writer: SqlitePool,
    reader: SqlitePool,
    path: PathBuf,
}

impl SqliteStore {
    /// Opens (creating if missing) the database file at `path`. The schema is applied by
    /// [`Store::migrate`].
    pub async fn open(path: &Path) -> Result<Self, StoreError> {
        let base = SqliteConnectOptions::new()
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
        })
    }

    /// Opens `<dir>/parley.db`, creating the directory if missing.
    pub async fn open_dir(dir: &Path) -> Result<Self, StoreError> {
        std::fs::create_dir_all(dir).map_err(|e| {
            StoreError::Unavailable(format!(
                "cannot create data directory {}: {e}",
                dir.display()
            ))
        })?;
        Self::open(&dir.join(DB_FILE_NAME)).await
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Closes both pools; later calls fail as unavailable. Tests use it to let go of the file.
    pub async fn close(&self) {
        self.reader.close().await;
        self.writer.close().await;
    }
}

/// The store's contract is `store_impl.rs` over these.
impl Backend for SqliteStore {
    type Tx = Tx<'static>;

    /// Holds the write lock from the first statement (`BEGIN IMMEDIATE`).
    async fn begin_write(&self) -> Result<Tx<'static>, StoreError> {
        Ok(self.writer.begin_with("BEGIN IMMEDIATE").await?)
    }

    /// On a `query_only` connection; in WAL mode, one snapshot from the first statement.
    async fn begin_read(&self) -> Result<Tx<'static>, StoreError> {
        Ok(self.reader.begin().await?)
    }

    async fn migrate_schema(&self) -> Result<(), StoreError> {
        MIGRATOR
            .run(&self.writer)
            .await
            .map_err(|e| StoreError::Migration(e.to_string()))
    }

    async fn ping_database(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.reader).await?;
        Ok(())
    }

    async fn insert_user(
        &self,
        user_id: &UserId,
        display_name: Option<&str>,
    ) -> Result<bool, StoreError> {
        admin::insert_user(self, user_id, display_name).await
    }

    async fn store_device_token(
        &self,
        user_id: &UserId,
        device_id: &DeviceId,
        token_hash: &str,
    ) -> Result<bool, StoreError> {
        admin::store_device_token(self, user_id, device_id, token_hash).await
    }

    async fn revoke_device_token(
        &self,
        user_id: &UserId,
        device_id: &DeviceId,
    ) -> Result<bool, StoreError> {
        admin::revoke_device_token(self, user_id, device_id).await
    }

    async fn device_of_token(
        &self,
        token_hash: &str,
    ) -> Result<Option<DeviceIdentity>, StoreError> {
        admin::device_of_token(&self.reader, token_hash).await
    }

    async fn renew_lease(&self, gateway_id: &str, lease_ms: i64) -> Result<(), StoreError> {
        realtime::renew_lease(self, gateway_id, lease_ms).await
    }

    async fn delete_route(
        &self,
        user_id: &UserId,
        device_id: &DeviceId,
        conn_id: &str,
    ) -> Result<bool, StoreError> {
        realtime::delete_route(self, user_id, device_id, conn_id).await
    }

    async fn read_range(
        &self,
        conv_id: &ConvId,
        bounds: (i64, i64),
        limit: usize,
    ) -> Result<Vec<Event>, StoreError> {
        let mut conn = self.reader.acquire().await?;
        crate::sql::range(&mut *conn, conv_id, bounds, false, limit).await
    }

    async fn due_for_purge(
        &self,
        now: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<String>, StoreError> {
        retention::due_for_purge(self, now, limit).await
    }

    async fn expire_tombstone_batch(
        &self,
        older_than: DateTime<Utc>,
        len_max: u64,
    ) -> Result<u64, StoreError> {
        retention::expire_tombstone_batch(self, older_than, len_max).await
    }
}
