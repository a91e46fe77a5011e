//! The primitives of retention (`flow::retention`) on SQLite. There are no per-conversation
//! locks to skip here: every write, the purge's included, waits its turn for the one writer, so
//! a purge round never reports a busy conversation, and sends interleave with its
//! one-conversation transactions.

use chrono::{DateTime, Utc};
use parley_domain::decide::retention::is_due;
use sqlx::Row;

use super::rows::{parse_ts, tick, ts};
use super::{SqliteStore, Tx};
use crate::error::StoreError;
use crate::flow::retention::{Expiry, LogCut, PurgeTx};

impl Expiry for SqliteStore {
    /// Conversations with a retention and something stored, with the time of their oldest stored
    /// event (read by primary key); whether it is past retention is decided on the parsed times.
    async fn due_for_purge(
        &self,
        now: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<String>, StoreError> {
        let rows = sqlx::query(
            "SELECT c.conv_id, c.retention_ms, e.created_at FROM conversations c
               JOIN events e ON e.conv_id = c.conv_id AND e.seq = c.min_seq
              WHERE c.retention_ms IS NOT NULL AND c.min_seq < c.next_seq
              ORDER BY c.conv_id",
        )
        .fetch_all(&self.reader)
        .await?;
        let mut due = Vec::new();
        for r in &rows {
            if is_due(
                parse_ts(r.try_get("created_at")?)?,
                r.try_get("retention_ms")?,
                now,
            ) {
                due.push(r.try_get::<String, _>("conv_id")?);
            }
            if due.len() == limit {
                break;
            }
        }
        Ok(due)
    }

    /// One bounded write transaction, found through the purged_at index, which lets the sends
    /// queued behind it through before the next.
    async fn expire_tombstone_batch(
        &self,
        older_than: DateTime<Utc>,
        len_max: u64,
    ) -> Result<u64, StoreError> {
        self.write_one(
            sqlx::query(
                "DELETE FROM idem_tombstones WHERE rowid IN
               (SELECT rowid FROM idem_tombstones WHERE purged_at < $1 LIMIT $2)",
            )
            .bind(ts(older_than))
            .bind(len_max as i64),
        )
        .await
    }
}

impl PurgeTx for Tx<'_> {
    /// The write lock is held already; this reads the row.
    const LOCK_FOR_PURGE_SQL: &'static str =
        "SELECT min_seq, retention_ms FROM conversations WHERE conv_id = $1";
    const SKIPS_LOCKED: bool = false;

    /// Keep the request keys, delete, raise min_seq.
    async fn cut(&mut self, cut: &LogCut<'_>) -> Result<(u64, u64), StoreError> {
        let tombstones = sqlx::query(
            "INSERT INTO idem_tombstones
                    (conv_id, sender_user, client_msg_id, request_hash, seq, message_id, purged_at)
             SELECT conv_id, sender_user, client_msg_id, request_hash, seq, message_id, $4 FROM events
              WHERE conv_id = $1 AND seq BETWEEN $2 AND $3 AND kind IN ('msg', 'edit')
                AND client_msg_id IS NOT NULL AND sender_user IS NOT NULL
                AND request_hash IS NOT NULL AND message_id IS NOT NULL
             ON CONFLICT (conv_id, sender_user, client_msg_id) DO UPDATE
                SET request_hash = excluded.request_hash, seq = excluded.seq,
                    message_id = excluded.message_id, purged_at = excluded.purged_at",
        )
        .bind(cut.conv_id)
        .bind(cut.min_seq)
        .bind(cut.through_seq)
        .bind(ts(cut.purged_at))
        .execute(&mut **self)
        .await?
        .rows_affected();
        let deleted =
            sqlx::query("DELETE FROM events WHERE conv_id = $1 AND seq BETWEEN $2 AND $3")
                .bind(cut.conv_id)
                .bind(cut.min_seq)
                .bind(cut.through_seq)
                .execute(&mut **self)
                .await?
                .rows_affected();
        let change = tick(self).await?;
        sqlx::query(
            "UPDATE conversations SET min_seq = min($2 + 1, next_seq), change_seq = $3 WHERE conv_id = $1",
        )
        .bind(cut.conv_id)
        .bind(cut.through_seq)
        .bind(change)
        .execute(&mut **self)
        .await?;
        Ok((deleted, tombstones))
    }
}
