//! The primitives of retention (`flow::retention`) on PostgreSQL. A conversation's row is
//! locked with `SKIP LOCKED`: one whose lock a send holds is left for a later round, so the
//! purge never waits behind a busy conversation and never delays its sends for longer than one
//! batch. Other conversations are never locked at all.

use chrono::{DateTime, Utc};
use sqlx::Row;

use super::{PgStore, PgTx};
use crate::error::StoreError;
use crate::flow::retention::{Expiry, LogCut, PurgeTx};

/// Conversations whose oldest stored event (the one at `min_seq`, read by primary key) is past
/// retention at `$1`.
const DUE_CONVERSATIONS_SQL: &str = "SELECT c.conv_id FROM conversations c
   JOIN events e ON e.conv_id = c.conv_id AND e.seq = c.min_seq
  WHERE c.retention_ms IS NOT NULL AND c.min_seq < c.next_seq
    AND e.created_at < $1 - c.retention_ms * interval '1 millisecond'
  ORDER BY c.conv_id LIMIT $2";

impl Expiry for PgStore {
    async fn due_for_purge(
        &self,
        now: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<String>, StoreError> {
        Ok(sqlx::query_scalar(DUE_CONVERSATIONS_SQL)
            .bind(now)
            .bind(limit as i64)
            .fetch_all(&mut *self.pool.acquire().await?)
            .await?)
    }

    /// One bounded statement, found through the purged_at index.
    async fn expire_tombstone_batch(
        &self,
        older_than: DateTime<Utc>,
        len_max: u64,
    ) -> Result<u64, StoreError> {
        let done = sqlx::query(
            "DELETE FROM idem_tombstones
              WHERE ctid = ANY(ARRAY(SELECT ctid FROM idem_tombstones WHERE purged_at < $1 LIMIT $2))
                AND purged_at < $1",
        )
        .bind(older_than)
        .bind(len_max as i64)
        .execute(&mut *self.pool.acquire().await?)
        .await?;
        Ok(done.rows_affected())
    }
}

impl PurgeTx for PgTx<'_> {
    const LOCK_FOR_PURGE_SQL: &'static str = "SELECT min_seq, retention_ms FROM conversations
          WHERE conv_id = $1 FOR NO KEY UPDATE SKIP LOCKED";
    const SKIPS_LOCKED: bool = true;

    /// Delete, keep the request keys, raise min_seq: one statement.
    async fn cut(&mut self, cut: &LogCut<'_>) -> Result<(u64, u64), StoreError> {
        let counts = sqlx::query(
            "WITH gone AS (
               DELETE FROM events WHERE conv_id = $1 AND seq BETWEEN $2 AND $3
               RETURNING conv_id, seq, kind, sender_user, client_msg_id, request_hash, message_id
             ), tomb AS (
               INSERT INTO idem_tombstones
                      (conv_id, sender_user, client_msg_id, request_hash, seq, message_id, purged_at)
               SELECT conv_id, sender_user, client_msg_id, request_hash, seq, message_id, $4 FROM gone
                WHERE kind IN ('msg', 'edit') AND client_msg_id IS NOT NULL AND sender_user IS NOT NULL
                  AND request_hash IS NOT NULL AND message_id IS NOT NULL
               ON CONFLICT (conv_id, sender_user, client_msg_id) DO UPDATE
                  SET request_hash = EXCLUDED.request_hash, seq = EXCLUDED.seq,
                      message_id = EXCLUDED.message_id, purged_at = EXCLUDED.purged_at
               RETURNING 1
             ), counter AS (
               UPDATE conversations
                  SET min_seq = LEAST($3 + 1, next_seq), change_xid = pg_current_xact_id()
                WHERE conv_id = $1
             )
             SELECT (SELECT count(*) FROM gone) AS deleted, (SELECT count(*) FROM tomb) AS tombstones",
        )
        .bind(cut.conv_id)
        .bind(cut.min_seq)
        .bind(cut.through_seq)
        .bind(cut.purged_at)
        .fetch_one(&mut **self)
        .await?;
        let deleted: i64 = counts.try_get("deleted")?;
        let tombstones: i64 = counts.try_get("tombstones")?;
        Ok((deleted.max(0) as u64, tombstones.max(0) as u64))
    }
}
