//! The primitives of the recall (`flow::recall`) on SQLite, in the write transaction that holds
//! the database's write lock.

use chrono::{DateTime, Utc};

use super::rows::{now, tick, ts};
use super::Tx;
use crate::error::StoreError;
use crate::flow::recall::{NewRecall, RecallTx};
use crate::flow::relate::{NewRelationEvent, RelateTx};

impl RelateTx for Tx<'_> {
    async fn append_relation_event(
        &mut self,
        ev: &NewRelationEvent<'_>,
    ) -> Result<DateTime<Utc>, StoreError> {
        let at = now();
        let change = tick(self).await?;
        sqlx::query(
            "INSERT INTO events (conv_id, seq, kind, sender_user, sender_device, client_msg_id,
                                 request_hash, message_id, body, target_seq, reaction_key,
                                 created_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
        )
        .bind(ev.conv_id.as_str())
        .bind(ev.slot.seq)
        .bind(ev.kind.as_str())
        .bind(ev.actor.as_str())
        .bind(ev.device)
        .bind(ev.client_msg_id)
        .bind(ev.request_hash)
        .bind(ev.message_id.map(super::rows::uuid_text))
        .bind(ev.body)
        .bind(ev.target_seq)
        .bind(ev.reaction_key)
        .bind(ts(at))
        .execute(&mut **self)
        .await?;
        sqlx::query(
            "UPDATE conversations SET next_seq = $2 + 1, change_seq = $3 WHERE conv_id = $1",
        )
        .bind(ev.conv_id.as_str())
        .bind(ev.slot.seq)
        .bind(change)
        .execute(&mut **self)
        .await?;
        Ok(at)
    }
}

impl RecallTx for Tx<'_> {
    /// The write lock is held already; this reads the row. This store keeps no message count.
    const LOCK_FOR_RECALL_SQL: &'static str =
        "SELECT next_seq, 0 AS msg_count, recall_window_ms FROM conversations WHERE conv_id = $1";

    async fn append_recall(&mut self, recall: &NewRecall<'_>) -> Result<DateTime<Utc>, StoreError> {
        let at = now();
        let change = tick(self).await?;
        sqlx::query(
            "INSERT INTO events (conv_id, seq, kind, sender_user, target_seq, created_at)
             VALUES ($1, $2, 'recall', $3, $4, $5)",
        )
        .bind(recall.conv_id.as_str())
        .bind(recall.slot.seq)
        .bind(recall.actor.as_str())
        .bind(recall.target_seq)
        .bind(ts(at))
        .execute(&mut **self)
        .await?;
        sqlx::query(
            "UPDATE events SET body = NULL, recalled_at = $3 WHERE conv_id = $1 AND seq = $2",
        )
        .bind(recall.conv_id.as_str())
        .bind(recall.target_seq)
        .bind(ts(at))
        .execute(&mut **self)
        .await?;
        sqlx::query(
            "UPDATE conversations SET next_seq = $2 + 1, change_seq = $3 WHERE conv_id = $1",
        )
        .bind(recall.conv_id.as_str())
        .bind(recall.slot.seq)
        .bind(change)
        .execute(&mut **self)
        .await?;
        Ok(at)
    }
}
