//! The primitives of the recall (`flow::recall`) on PostgreSQL: the recall event, the erased
//! body and the counter in one statement after the row lock.

use chrono::{DateTime, Utc};

use super::PgTx;
use crate::error::StoreError;
use crate::flow::recall::{NewRecall, RecallTx};
use crate::flow::relate::{NewRelationEvent, RelateTx};

impl RelateTx for PgTx<'_> {
    /// One statement: the event, the counter and the change stamp. An edit, a react or an
    /// unreact is no msg: it carries the msg count so far as its ordinal.
    async fn append_relation_event(
        &mut self,
        ev: &NewRelationEvent<'_>,
    ) -> Result<DateTime<Utc>, StoreError> {
        Ok(sqlx::query_scalar(
            "WITH ev AS (
               INSERT INTO events (conv_id, seq, kind, sender_user, sender_device, client_msg_id,
                                   request_hash, message_id, body, target_seq, reaction_key,
                                   msg_ordinal)
               VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) RETURNING created_at
             ), counter AS (
               UPDATE conversations SET next_seq = $2 + 1, change_xid = pg_current_xact_id()
                WHERE conv_id = $1
             )
             SELECT created_at FROM ev",
        )
        .bind(ev.conv_id.as_str())
        .bind(ev.slot.seq)
        .bind(ev.kind.as_str())
        .bind(ev.actor.as_str())
        .bind(ev.device)
        .bind(ev.client_msg_id)
        .bind(ev.request_hash)
        .bind(ev.message_id)
        .bind(ev.body)
        .bind(ev.target_seq)
        .bind(ev.reaction_key)
        .bind(ev.slot.msg_ordinal)
        .fetch_one(&mut **self)
        .await?)
    }
}

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
