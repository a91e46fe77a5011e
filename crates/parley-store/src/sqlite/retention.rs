//! Retention (SPEC §4, purge) on SQLite: deletes the oldest events of conversations with a
//! `retention_ms`, in seq order, and raises `min_seq` past them; the request keys of purged
//! messages move into `idem_tombstones` in the same transaction (P2 after retention).
//!
//! Each conversation is cut in its own short write transaction of at most one batch, so the
//! single writer is never held for long and sends interleave with the purge. There are no
//! per-conversation locks to skip here: every write, the purge's included, waits its turn for
//! the one writer, so `conversations_busy` is always 0.

use chrono::{DateTime, Duration, Utc};
use sqlx::Row;

use super::rows::{commit, parse_ts, tick, ts};
use super::SqliteStore;
use crate::backend::Backend;
use crate::error::StoreError;
use crate::types::PurgeReport;

/// Most conversations one purge round cuts; the next round continues with the rest.
const PURGE_CONVERSATIONS_PER_ROUND_MAX: usize = 1_000;
/// Tombstones deleted by one write transaction of the expiry.
const TOMBSTONE_EXPIRY_BATCH_LEN_MAX: i64 = 10_000;
/// Write transactions of one expiry call; what remains waits for the next call.
const TOMBSTONE_EXPIRY_BATCHES_MAX: usize = 100;

pub(super) async fn purge_batch(
    store: &SqliteStore,
    now: DateTime<Utc>,
    batch_events_max: u32,
) -> Result<PurgeReport, StoreError> {
    let batch = i64::from(batch_events_max.max(1));
    // Conversations with a retention and something stored, with the time of their oldest stored
    // event (read by primary key); whether it is past retention is decided here, exactly, on
    // the parsed times.
    let rows = sqlx::query(
        "SELECT c.conv_id, c.retention_ms, e.created_at FROM conversations c
           JOIN events e ON e.conv_id = c.conv_id AND e.seq = c.min_seq
          WHERE c.retention_ms IS NOT NULL AND c.min_seq < c.next_seq
          ORDER BY c.conv_id",
    )
    .fetch_all(&store.reader)
    .await?;
    let mut due = Vec::new();
    for r in &rows {
        let retention_ms: i64 = r.try_get("retention_ms")?;
        let oldest: String = r.try_get("created_at")?;
        if parse_ts(&oldest)? < now - Duration::milliseconds(retention_ms) {
            due.push(r.try_get::<String, _>("conv_id")?);
        }
    }
    let mut report = PurgeReport {
        more: due.len() > PURGE_CONVERSATIONS_PER_ROUND_MAX,
        ..PurgeReport::default()
    };
    for conv in due.iter().take(PURGE_CONVERSATIONS_PER_ROUND_MAX) {
        if let Some((deleted, tombstones, full)) = cut_one(store, conv, now, batch).await? {
            report.conversations += 1;
            report.events_deleted += deleted;
            report.tombstones_written += tombstones;
            report.more |= full;
        }
    }
    Ok(report)
}

/// Cuts one conversation: `(deleted, tombstones written, batch was full)`, or `None` when
/// nothing was past retention after all.
async fn cut_one(
    store: &SqliteStore,
    conv: &str,
    now: DateTime<Utc>,
    batch: i64,
) -> Result<Option<(u64, u64, bool)>, StoreError> {
    let mut tx = store.begin_write().await?;
    let row = sqlx::query("SELECT min_seq, retention_ms FROM conversations WHERE conv_id = $1")
        .bind(conv)
        .fetch_optional(&mut *tx)
        .await?;
    let Some(row) = row else { return Ok(None) };
    let min_seq: i64 = row.try_get("min_seq")?;
    let Some(retention_ms) = row.try_get::<Option<i64>, _>("retention_ms")? else {
        return Ok(None);
    };
    let cutoff = now - Duration::milliseconds(retention_ms);

    // The cut is the end of the longest run from min_seq of events older than the cutoff;
    // stopping at the first younger event keeps every deleted event past retention and the
    // remaining seqs without a hole (P1).
    let rows = sqlx::query(
        "SELECT seq, created_at FROM events WHERE conv_id = $1 AND seq >= $2 ORDER BY seq LIMIT $3",
    )
    .bind(conv)
    .bind(min_seq)
    .bind(batch)
    .fetch_all(&mut *tx)
    .await?;
    let mut cut = None;
    for (expected, row) in (min_seq..).zip(&rows) {
        let seq: i64 = row.try_get("seq")?;
        let created_at: String = row.try_get("created_at")?;
        if seq != expected || parse_ts(&created_at)? >= cutoff {
            break;
        }
        cut = Some(seq);
    }
    let Some(cut) = cut else { return Ok(None) };

    // Keep the request keys, delete, raise min_seq: one transaction. A moved min_seq is a change
    // the sync feed reports. A key can only meet an older tombstone of its own if that one
    // expired and was reused, so the newer answer wins.
    let tombstones = sqlx::query(
        "INSERT INTO idem_tombstones
                (conv_id, sender_user, client_msg_id, request_hash, seq, message_id, purged_at)
         SELECT conv_id, sender_user, client_msg_id, request_hash, seq, message_id, $4 FROM events
          WHERE conv_id = $1 AND seq BETWEEN $2 AND $3 AND kind = 'msg'
            AND client_msg_id IS NOT NULL AND sender_user IS NOT NULL
            AND request_hash IS NOT NULL AND message_id IS NOT NULL
         ON CONFLICT (conv_id, sender_user, client_msg_id) DO UPDATE
            SET request_hash = excluded.request_hash, seq = excluded.seq,
                message_id = excluded.message_id, purged_at = excluded.purged_at",
    )
    .bind(conv)
    .bind(min_seq)
    .bind(cut)
    .bind(ts(now))
    .execute(&mut *tx)
    .await?
    .rows_affected();
    let deleted = sqlx::query("DELETE FROM events WHERE conv_id = $1 AND seq BETWEEN $2 AND $3")
        .bind(conv)
        .bind(min_seq)
        .bind(cut)
        .execute(&mut *tx)
        .await?
        .rows_affected();
    let change = tick(&mut tx).await?;
    sqlx::query(
        "UPDATE conversations SET min_seq = min($2 + 1, next_seq), change_seq = $3 WHERE conv_id = $1",
    )
    .bind(conv)
    .bind(cut)
    .bind(change)
    .execute(&mut *tx)
    .await?;
    commit(tx).await?;
    Ok(Some((
        deleted,
        tombstones,
        rows.len() as i64 == batch && cut == min_seq + batch - 1,
    )))
}

pub(super) async fn expire_tombstones(
    store: &SqliteStore,
    older_than: DateTime<Utc>,
) -> Result<u64, StoreError> {
    let cutoff = ts(older_than);
    let mut total = 0u64;
    for _ in 0..TOMBSTONE_EXPIRY_BATCHES_MAX {
        // Bounded transactions: each deletes at most one batch, found through the purged_at
        // index, and lets the sends queued behind it through before the next.
        let mut tx = store.begin_write().await?;
        let done = sqlx::query(
            "DELETE FROM idem_tombstones WHERE rowid IN
               (SELECT rowid FROM idem_tombstones WHERE purged_at < $1 LIMIT $2)",
        )
        .bind(&cutoff)
        .bind(TOMBSTONE_EXPIRY_BATCH_LEN_MAX)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        tx.commit().await?;
        total += done;
        if (done as i64) < TOMBSTONE_EXPIRY_BATCH_LEN_MAX {
            break;
        }
    }
    Ok(total)
}
