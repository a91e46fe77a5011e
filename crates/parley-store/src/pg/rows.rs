//! Row decoding and the commit shared by the PostgreSQL modules.

use chrono::{DateTime, Utc};
use parley_domain::{ConvId, Event, Period, UserId};
use sqlx::postgres::PgRow;
use sqlx::Row;

use super::PgTx;
use crate::error::StoreError;
use crate::flow::{ReadTx, WriteTx};
use crate::rows;
use crate::sql::PERIODS_SQL;

pub(super) fn event_from_row(conv_id: &ConvId, row: &PgRow) -> Result<Event, StoreError> {
    let kind = rows::event_kind(row.try_get("kind")?)?;
    let recalled_at: Option<DateTime<Utc>> = row.try_get("recalled_at")?;
    let recalled = recalled_at.is_some();
    let body: Option<String> = if recalled { None } else { row.try_get("body")? };
    Ok(Event {
        conv_id: conv_id.clone(),
        seq: row.try_get("seq")?,
        kind,
        created_at: row.try_get("created_at")?,
        message_id: row.try_get("message_id")?,
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
/// commit may have reached the server before the connection failed, and only a retry with the
/// same request key tells the client the truth.
pub(super) async fn commit(tx: PgTx<'_>) -> Result<(), StoreError> {
    tx.commit()
        .await
        .map_err(|e| StoreError::OutcomeUnknown(e.to_string()))
}

impl ReadTx for PgTx<'_> {
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

impl WriteTx for PgTx<'_> {
    async fn commit_or_unknown(self) -> Result<(), StoreError> {
        commit(self).await
    }
}
