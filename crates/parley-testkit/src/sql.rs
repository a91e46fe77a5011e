//! Direct SQL on a test server's database, whichever store it runs on: the checks that count
//! rows or hold a lock behind the server's back. Both stores keep the same tables and both
//! drivers accept `$1`-style parameters, so one statement text serves both.

use sqlx::postgres::PgRow;
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions, SqliteRow};
use sqlx::{FromRow, PgPool, Postgres, Sqlite, SqlitePool, Transaction};
use std::path::Path;
use std::time::Duration;

use crate::StoreKind;

/// How long a probe statement waits for the embedded store's write lock.
const PROBE_BUSY_TIMEOUT_MS: u64 = 10_000;
/// Connections of a probe on the embedded store: one may hold the write lock while another reads.
const PROBE_POOL_SIZE: u32 = 4;

/// One bound parameter.
#[derive(Debug, Clone, Copy)]
pub enum SqlArg<'a> {
    Text(&'a str),
    Int(i64),
}

impl<'a> From<&'a str> for SqlArg<'a> {
    fn from(s: &'a str) -> Self {
        Self::Text(s)
    }
}

impl<'a> From<&'a String> for SqlArg<'a> {
    fn from(s: &'a String) -> Self {
        Self::Text(s)
    }
}

impl From<i64> for SqlArg<'_> {
    fn from(i: i64) -> Self {
        Self::Int(i)
    }
}

/// A value both drivers decode.
pub trait Column:
    Send
    + Unpin
    + for<'r> sqlx::Decode<'r, Postgres>
    + sqlx::Type<Postgres>
    + for<'r> sqlx::Decode<'r, Sqlite>
    + sqlx::Type<Sqlite>
{
}

impl<T> Column for T where
    T: Send
        + Unpin
        + for<'r> sqlx::Decode<'r, Postgres>
        + sqlx::Type<Postgres>
        + for<'r> sqlx::Decode<'r, Sqlite>
        + sqlx::Type<Sqlite>
{
}

/// A connection pool to the test server's database, beside the server's own.
#[derive(Clone)]
pub enum Sql {
    Postgres(PgPool),
    Sqlite(SqlitePool),
}

macro_rules! bind_all {
    ($q:expr, $args:expr) => {{
        let mut q = $q;
        for a in $args {
            q = match *a {
                SqlArg::Text(s) => q.bind(s.to_owned()),
                SqlArg::Int(i) => q.bind(i),
            };
        }
        q
    }};
}

impl Sql {
    /// A pool of its own on the embedded store's file, as another process would open it.
    pub(crate) async fn open_sqlite(path: &Path) -> Result<Self, sqlx::Error> {
        let options = SqliteConnectOptions::new()
            .filename(path)
            .busy_timeout(Duration::from_millis(PROBE_BUSY_TIMEOUT_MS))
            .foreign_keys(true);
        let pool = SqlitePoolOptions::new()
            .max_connections(PROBE_POOL_SIZE)
            .connect_with(options)
            .await?;
        Ok(Self::Sqlite(pool))
    }

    pub fn kind(&self) -> StoreKind {
        match self {
            Self::Postgres(_) => StoreKind::Postgres,
            Self::Sqlite(_) => StoreKind::Sqlite,
        }
    }

    /// The single value of a query that returns exactly one row.
    pub async fn one<T: Column>(&self, sql: &str, args: &[SqlArg<'_>]) -> Result<T, sqlx::Error> {
        match self {
            Self::Postgres(pool) => {
                bind_all!(sqlx::query_scalar::<Postgres, T>(sql), args)
                    .fetch_one(pool)
                    .await
            }
            Self::Sqlite(pool) => {
                bind_all!(sqlx::query_scalar::<Sqlite, T>(sql), args)
                    .fetch_one(pool)
                    .await
            }
        }
    }

    /// The single value of a query that returns at most one row.
    pub async fn optional<T: Column>(
        &self,
        sql: &str,
        args: &[SqlArg<'_>],
    ) -> Result<Option<T>, sqlx::Error> {
        match self {
            Self::Postgres(pool) => {
                bind_all!(sqlx::query_scalar::<Postgres, T>(sql), args)
                    .fetch_optional(pool)
                    .await
            }
            Self::Sqlite(pool) => {
                bind_all!(sqlx::query_scalar::<Sqlite, T>(sql), args)
                    .fetch_optional(pool)
                    .await
            }
        }
    }

    /// The first column of every row.
    pub async fn column<T: Column>(
        &self,
        sql: &str,
        args: &[SqlArg<'_>],
    ) -> Result<Vec<T>, sqlx::Error> {
        match self {
            Self::Postgres(pool) => {
                bind_all!(sqlx::query_scalar::<Postgres, T>(sql), args)
                    .fetch_all(pool)
                    .await
            }
            Self::Sqlite(pool) => {
                bind_all!(sqlx::query_scalar::<Sqlite, T>(sql), args)
                    .fetch_all(pool)
                    .await
            }
        }
    }

    /// Every row, as a tuple.
    pub async fn rows<O>(&self, sql: &str, args: &[SqlArg<'_>]) -> Result<Vec<O>, sqlx::Error>
    where
        O: Send + Unpin + for<'r> FromRow<'r, PgRow> + for<'r> FromRow<'r, SqliteRow>,
    {
        match self {
            Self::Postgres(pool) => {
                bind_all!(sqlx::query_as::<Postgres, O>(sql), args)
                    .fetch_all(pool)
                    .await
            }
            Self::Sqlite(pool) => {
                bind_all!(sqlx::query_as::<Sqlite, O>(sql), args)
                    .fetch_all(pool)
                    .await
            }
        }
    }

    /// Runs a statement; answers the rows it affected.
    pub async fn execute(&self, sql: &str, args: &[SqlArg<'_>]) -> Result<u64, sqlx::Error> {
        match self {
            Self::Postgres(pool) => Ok(bind_all!(sqlx::query::<Postgres>(sql), args)
                .execute(pool)
                .await?
                .rows_affected()),
            Self::Sqlite(pool) => Ok(bind_all!(sqlx::query::<Sqlite>(sql), args)
                .execute(pool)
                .await?
                .rows_affected()),
        }
    }

    /// Holds the lock that a write to `conv_id` needs until [`WriteLock::release`]: the
    /// conversation's row lock in PostgreSQL, the database's write lock in SQLite. A send to the
    /// conversation cannot commit meanwhile.
    pub async fn hold_write_lock(&self, conv_id: &str) -> Result<WriteLock, sqlx::Error> {
        match self {
            Self::Postgres(pool) => {
                let mut tx = pool.begin().await?;
                sqlx::query("SELECT 1 FROM conversations WHERE conv_id = $1 FOR UPDATE")
                    .bind(conv_id.to_owned())
                    .execute(&mut *tx)
                    .await?;
                Ok(WriteLock::Postgres(tx))
            }
            Self::Sqlite(pool) => Ok(WriteLock::Sqlite(pool.begin_with("BEGIN IMMEDIATE").await?)),
        }
    }
}

impl Sql {
    /// Holds a lock that every gateway lease renewal needs until [`WriteLock::release`]: the
    /// `gateways` table's in PostgreSQL (reads go on), the database's write lock in SQLite.
    /// Renewals wait, and so time out, meanwhile.
    pub async fn hold_lease_lock(&self) -> Result<WriteLock, sqlx::Error> {
        match self {
            Self::Postgres(pool) => {
                let mut tx = pool.begin().await?;
                sqlx::query("LOCK TABLE gateways IN EXCLUSIVE MODE")
                    .execute(&mut *tx)
                    .await?;
                Ok(WriteLock::Postgres(tx))
            }
            Self::Sqlite(pool) => Ok(WriteLock::Sqlite(pool.begin_with("BEGIN IMMEDIATE").await?)),
        }
    }
}

/// A lock held by [`Sql::hold_write_lock`] or [`Sql::hold_lease_lock`]; dropping it releases
/// it too.
pub enum WriteLock {
    Postgres(Transaction<'static, Postgres>),
    Sqlite(Transaction<'static, Sqlite>),
}

impl WriteLock {
    pub async fn release(self) -> Result<(), sqlx::Error> {
        match self {
            Self::Postgres(tx) => tx.commit().await,
            Self::Sqlite(tx) => tx.commit().await,
        }
    }
}
