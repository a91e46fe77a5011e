//! The primitives of the recall (`flow::recall`) on PostgreSQL: the recall event, the erased
//! body and the counter in one statement after the row lock.

use chrono::{DateTime, Utc};

use super::PgTx;
use crate::error::StoreError;
use crate::flow::recall::{NewRecall, RecallTx};

impl RecallTx for PgTx<'_> {
    const LOCK_FOR_RECALL_SQL: &'static str =
        "SELECT next_seq, msg_count, recall_window_ms FROM conversations
          WHERE conv_id = $1 FOR NO KEY UPDATE";

    /// One statement; the conversation counts as changed for the sync feed.
    async fn append_recall(&mut self, recall: &NewRecall<'_>) -> Result<DateTime<Utc>, StoreError> {
        Ok(sqlx::query_scalar(
            "WITH ev AS (
               INSERT INTO events (conv_id, seq, kind, sender_user, target_seq, msg_ordinal)
               VALUES ($1, $2, 'recall', $3, $4, $5) RETURNING created_at
             ), erase AS (
               UPDATE events SET body = NULL, recalled_at = now() WHERE conv_id = $1 AND seq = $4
             ), counter AS (
               UPDATE conversations SET next_seq = $2 + 1, change_xid = pg_current_xact_id()
                WHERE conv_id = $1
             )
             SELECT created_at FROM ev",
        )
        .bind(recall.conv_id.as_str())
        .bind(recall.slot.seq)
        .bind(recall.actor.as_str())
        .bind(recall.target_seq)
        .bind(recall.slot.msg_ordinal)
        .fetch_one(&mut **self)
        .await?)
    }
}
