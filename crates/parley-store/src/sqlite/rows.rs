//! Row decoding, timestamps, ids and the commit helper shared by the SQLite modules.

use chrono::{DateTime, SecondsFormat, Utc};
use parley_domain::{ConvId, Event, Period, UserId};
use sqlx::sqlite::SqliteRow;
use sqlx::{Row, SqliteConnection};
use uuid::Uuid;

use super::Tx;
use crate::error::StoreError;
use crate::flow::{ReadTx, WriteTx};
use crate::rows;
use crate::sql::PERIODS_SQL;

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

pub(super) fn event_from_row(conv_id: &ConvId, row: &SqliteRow) -> Result<Event, StoreError> {
    let kind = rows::event_kind(row.try_get("kind")?)?;
    let recalled_at: Option<String> = row.try_get("recalled_at")?;
    let recalled = recalled_at.is_some();
    let body: Option<String> = if recalled { None } else { row.try_get("body")? };
    let created_at: String = row.try_get("created_at")?;
    let message_id: Option<String> = row.try_get("message_id")?;
    Ok(Event {
        conv_id: conv_id.clone(),
        seq: row.try_get("seq")?,
        kind,
        created_at: parse_ts(&created_at)?,
        message_id: message_id.as_deref().map(parse_uuid).transpose()?,
        sender_user: row
            .try_get::<Option<String>, _>("sender_user")?
            .map(UserId::from_trusted),
        sender_device: row.try_get("sender_device")?,
        client_msg_id: row.try_get("client_msg_id")?,
        body,
        recalled,
        subject_user: row
            .try_get::<Option<String>, _>("subject_user")?
            .map(UserId::from_trusted),
        target_seq: row.try_get("target_seq")?,
    })
}

/// Commits a write transaction. Any failure here is reported as an unknown outcome (P6): the
/// commit may have reached the file before the error was raised, and only a retry with the same
/// request key tells the client the truth. The transaction is rolled back when it is dropped.
pub(super) async fn commit(tx: Tx<'_>) -> Result<(), StoreError> {
    tx.commit()
        .await
        .map_err(|e| StoreError::OutcomeUnknown(e.to_string()))
}

impl ReadTx for Tx<'_> {
    async fn periods(
        &mut self,
        conv_id: &ConvId,
        user: &UserId,
    ) -> Result<Vec<Period>, StoreError> {
        let found = sqlx::query(PERIODS_SQL)
            .bind(conv_id.as_str())
            .bind(user.as_str())
            .fetch_all(&mut **self)
            .await?;
        found
            .iter()
            .map(|r| {
                Ok(Period {
                    from_seq: r.try_get("from_seq")?,
                    to_seq: r.try_get("to_seq")?,
                })
            })
            .collect()
    }

    async fn finish(self) -> Result<(), StoreError> {
        Ok(self.commit().await?)
    }
}

impl WriteTx for Tx<'_> {
    async fn commit_or_unknown(self) -> Result<(), StoreError> {
        commit(self).await
    }
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
pub(super) fn json_list<'a>(items: impl IntoIterator<Item = &'a str>) -> Result<String, StoreError> {
    let items: Vec<&str> = items.into_iter().collect();
    serde_json::to_string(&items).map_err(|e| StoreError::Unavailable(e.to_string()))
}
