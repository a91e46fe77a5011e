//! The small query interface both backends implement: run a statement with a few text or
//! integer arguments and read its columns. A statement that reads the same on both databases
//! is then bound and decoded once (`sql.rs`), and rows of the same shape are decoded once
//! (`rows.rs`), whatever types each database stores them in (SQLite keeps times and message
//! ids as text).

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::error::StoreError;
use crate::flow::StoreFuture;

/// One argument of a statement.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Arg<'a> {
    Text(&'a str),
    Int(i64),
    /// An integer or NULL.
    OptInt(Option<i64>),
    /// A text or NULL.
    OptText(Option<&'a str>),
    /// A list of ids: an array in PostgreSQL, a JSON array in SQLite (for `json_each`).
    Texts(&'a [String]),
}

/// A row's columns by name, in the types the store works with.
pub(crate) trait SqlRow: Send + Sync {
    fn int(&self, column: &str) -> Result<i64, StoreError>;
    fn opt_int(&self, column: &str) -> Result<Option<i64>, StoreError>;
    fn str(&self, column: &str) -> Result<&str, StoreError>;
    fn opt_str(&self, column: &str) -> Result<Option<&str>, StoreError>;
    fn flag(&self, column: &str) -> Result<bool, StoreError>;
    fn is_null(&self, column: &str) -> Result<bool, StoreError>;
    fn time(&self, column: &str) -> Result<DateTime<Utc>, StoreError>;
    fn opt_time(&self, column: &str) -> Result<Option<DateTime<Utc>>, StoreError> {
        if self.is_null(column)? {
            Ok(None)
        } else {
            self.time(column).map(Some)
        }
    }
    fn opt_uuid(&self, column: &str) -> Result<Option<Uuid>, StoreError>;

    fn string(&self, column: &str) -> Result<String, StoreError> {
        self.str(column).map(str::to_owned)
    }

    fn opt_string(&self, column: &str) -> Result<Option<String>, StoreError> {
        Ok(self.opt_str(column)?.map(str::to_owned))
    }
}

/// A connection or transaction that runs statements.
pub(crate) trait Sql: Send {
    type Row: SqlRow;

    fn fetch_all(
        &mut self,
        sql: &'static str,
        args: &[Arg<'_>],
    ) -> impl StoreFuture<Vec<Self::Row>>;
    fn fetch_optional(
        &mut self,
        sql: &'static str,
        args: &[Arg<'_>],
    ) -> impl StoreFuture<Option<Self::Row>>;
    /// Runs a statement for its effect; answers the rows it changed.
    fn execute(&mut self, sql: &'static str, args: &[Arg<'_>]) -> impl StoreFuture<u64>;
}

/// Implements `Sql` for a connection type (`|c| c`) or for a transaction through its
/// connection (`|t| &mut **t`), binding arguments with `bound`.
macro_rules! sql_through {
    ($ty:ty, $row:ty, $bound:path, |$this:ident| $conn:expr) => {
        impl $crate::query::Sql for $ty {
            type Row = $row;

            async fn fetch_all(
                &mut self,
                sql: &'static str,
                args: &[$crate::query::Arg<'_>],
            ) -> Result<Vec<$row>, $crate::error::StoreError> {
                let $this = self;
                Ok($bound(sql, args)?.fetch_all($conn).await?)
            }

            async fn fetch_optional(
                &mut self,
                sql: &'static str,
                args: &[$crate::query::Arg<'_>],
            ) -> Result<Option<$row>, $crate::error::StoreError> {
                let $this = self;
                Ok($bound(sql, args)?.fetch_optional($conn).await?)
            }

            async fn execute(
                &mut self,
                sql: &'static str,
                args: &[$crate::query::Arg<'_>],
            ) -> Result<u64, $crate::error::StoreError> {
                let $this = self;
                Ok($bound(sql, args)?.execute($conn).await?.rows_affected())
            }
        }
    };
}

/// Implements the query interface for one backend, for its connection, for its transaction
/// (through the connection) and for its row, and the two ends of its transactions. A backend
/// names its types and the three things it does its own way: how it binds the arguments
/// (`bound`, answering a `sqlx` query), how it reads a time and how a message id (PostgreSQL
/// has the types, SQLite keeps text).
macro_rules! sqlx_backend {
    (
        connection: $conn:ty,
        transaction: $tx:ty,
        row: $row:ty,
        bound: $bound:path,
        time: $time:path,
        opt_uuid: $opt_uuid:path $(,)?
    ) => {
        $crate::query::sql_through!($conn, $row, $bound, |c| c);
        $crate::query::sql_through!($tx, $row, $bound, |t| &mut **t);

        impl $crate::flow::ReadTx for $tx {
            async fn finish(self) -> Result<(), $crate::error::StoreError> {
                Ok(self.commit().await?)
            }
        }

        /// A failed commit may have landed before the error was raised.
        impl $crate::flow::WriteTx for $tx {
            async fn commit_or_unknown(self) -> Result<(), $crate::error::StoreError> {
                self.commit()
                    .await
                    .map_err(|e| $crate::error::StoreError::OutcomeUnknown(e.to_string()))
            }
        }

        impl $crate::query::SqlRow for $row {
            fn int(&self, column: &str) -> Result<i64, $crate::error::StoreError> {
                Ok(sqlx::Row::try_get(self, column)?)
            }

            fn opt_int(&self, column: &str) -> Result<Option<i64>, $crate::error::StoreError> {
                Ok(sqlx::Row::try_get(self, column)?)
            }

            fn str(&self, column: &str) -> Result<&str, $crate::error::StoreError> {
                Ok(sqlx::Row::try_get(self, column)?)
            }

            fn opt_str(&self, column: &str) -> Result<Option<&str>, $crate::error::StoreError> {
                Ok(sqlx::Row::try_get(self, column)?)
            }

            fn flag(&self, column: &str) -> Result<bool, $crate::error::StoreError> {
                Ok(sqlx::Row::try_get(self, column)?)
            }

            fn is_null(&self, column: &str) -> Result<bool, $crate::error::StoreError> {
                Ok(sqlx::ValueRef::is_null(&sqlx::Row::try_get_raw(
                    self, column,
                )?))
            }

            fn time(
                &self,
                column: &str,
            ) -> Result<chrono::DateTime<chrono::Utc>, $crate::error::StoreError> {
                $time(self, column)
            }

            fn opt_uuid(
                &self,
                column: &str,
            ) -> Result<Option<uuid::Uuid>, $crate::error::StoreError> {
                $opt_uuid(self, column)
            }
        }
    };
}

pub(crate) use {sql_through, sqlx_backend};
