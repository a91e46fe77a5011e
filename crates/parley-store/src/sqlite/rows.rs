//! Timestamps, ids, the query interface (`query.rs`) and the transaction ends on SQLite.

use chrono::{DateTime, SecondsFormat, Utc};
use sqlx::query::Query;
use sqlx::sqlite::{SqliteArguments, SqliteRow};
use sqlx::{Row, Sqlite, SqliteConnection};
use uuid::Uuid;

use super::Tx;
use crate::error::StoreError;
use crate::query::{sqlx_backend, Arg};

/// The current time at the precision the store keeps (microseconds, like PostgreSQL's
/// timestamptz), so an event answered from memory equals the same event read back.
pub(super) fn now() -> DateTime<Utc> {
    let t = Utc::now();
    DateTime::from_timestamp_micros(t.timestamp_micros()).unwrap_or(t)
}

/// The stored form of a time: RFC 3339, UTC, six fractional digits. Fixed width, so comparing
/// two stored times as text compares the times.
pub(super) fn ts(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

pub(super) fn parse_ts(s: &str) -> Result<DateTime<Utc>, StoreError> {
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| StoreError::Unavailable(format!("bad timestamp in store {s:?}: {e}")))
}

/// The stored form of a message id: hyphenated text.
pub(super) fn uuid_text(id: Uuid) -> String {
    id.hyphenated().to_string()
}

pub(super) fn parse_uuid(s: &str) -> Result<Uuid, StoreError> {
    Uuid::parse_str(s)
        .map_err(|e| StoreError::Unavailable(format!("bad message id in store {s:?}: {e}")))
}

fn bound<'q>(
    sql: &'q str,
    args: &[Arg<'q>],
) -> Result<Query<'q, Sqlite, SqliteArguments<'q>>, StoreError> {
    let mut q = sqlx::query(sql);
    for arg in args {
        q = match *arg {
            Arg::Text(s) => q.bind(s),
            Arg::Int(i) => q.bind(i),
            Arg::OptInt(i) => q.bind(i),
            Arg::OptText(s) => q.bind(s),
            Arg::Texts(ids) => q.bind(json_list(ids.iter().map(String::as_str))?),
        };
    }
    Ok(q)
}

/// Times are RFC 3339 text here.
fn time(row: &SqliteRow, column: &str) -> Result<DateTime<Utc>, StoreError> {
    parse_ts(row.try_get(column)?)
}

/// Message ids are hyphenated text here.
fn opt_uuid(row: &SqliteRow, column: &str) -> Result<Option<Uuid>, StoreError> {
    row.try_get::<Option<&str>, _>(column)?
        .map(parse_uuid)
        .transpose()
}

sqlx_backend! {
    connection: SqliteConnection,
    transaction: Tx<'_>,
    row: SqliteRow,
    bound: bound,
    time: time,
    opt_uuid: opt_uuid,
}

/// Takes the next value of the change clock for this write transaction (see the schema): the
/// stamp of every feed-visible row it changes. Only write transactions call it, and they run one
/// at a time, so stamps are unique and commit in order.
pub(super) async fn tick(conn: &mut SqliteConnection) -> Result<i64, StoreError> {
    Ok(
        sqlx::query_scalar("UPDATE change_clock SET last = last + 1 WHERE id = 1 RETURNING last")
            .fetch_one(&mut *conn)
            .await?,
    )
}

/// A list of ids as one JSON array parameter, which `json_each` turns back into rows: SQLite has
/// no array type.
pub(super) fn json_list<'a>(
    items: impl IntoIterator<Item = &'a str>,
) -> Result<String, StoreError> {
    let items: Vec<&str> = items.into_iter().collect();
    serde_json::to_string(&items).map_err(|e| StoreError::Unavailable(e.to_string()))
}
