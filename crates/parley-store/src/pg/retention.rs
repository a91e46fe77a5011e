//! Retention (SPEC §4, purge): deletes the oldest events of conversations with a
//! `retention_ms`, in seq order, and raises `min_seq` past them; the request keys of purged
//! messages move into `idem_tombstones` in the same transaction (P2 after retention).
//!
//! Each conversation is cut in its own short transaction of at most one batch. Its row is
//! locked with `SKIP LOCKED`: a conversation whose lock a send holds is left for a later round,
//! so the purge never waits behind a busy conversation and never delays its sends for longer
//! than one batch. Other conversations are never locked at all.

use chrono::{DateTime, Duration, Utc};
use sqlx::{PgPool, Row};

use super::rows::commit;
use crate::error::StoreError;
use crate::types::PurgeReport;

/// Most conversations one purge round examines; the next round continues with the rest.
const PURGE_CONVERSATIONS_PER_ROUND_MAX: i64 = 1_000;
/// Tombstones deleted by one statement of the expiry.
const TOMBSTONE_EXPIRY_BATCH_LEN_MAX: i64 = 10_000;
/// Statements of one expiry call; what remains waits for the next call.
const TOMBSTONE_EXPIRY_BATCHES_MAX: usize = 100;

/// Conversations whose oldest stored event (the one at `min_seq`, read by primary key) is past
/// retention at `$1`.
const DUE_CONVERSATIONS_SQL: &str = "SELECT c.conv_id FROM conversations c
   JOIN events e ON e.conv_id = c.conv_id AND e.seq = c.min_seq
  WHERE c.retention_ms IS NOT NULL AND c.min_seq < c.next_seq
    AND e.created_at < $1 - c.retention_ms * interval '1 millisecond'
  ORDER BY c.conv_id LIMIT $2";

pub(super) async fn purge_batch(
    pool: &PgPool,
    now: DateTime<Utc>,
    batch_events_max: u32,
) -> Result<PurgeReport, StoreError> {
    let batch = i64::from(batch_events_max.max(1));
    let due: Vec<String> = sqlx::query_scalar(DUE_CONVERSATIONS_SQL)
        .bind(now)
        .bind(PURGE_CONVERSATIONS_PER_ROUND_MAX + 1)
        .fetch_all(pool)
        .await?;
    let mut report = PurgeReport {
        more: due.len() as i64 > PURGE_CONVERSATIONS_PER_ROUND_MAX,
        ..PurgeReport::default()
    };
    for conv in due.iter().take(PURGE_CONVERSATIONS_PER_ROUND_MAX as usize) {
        match cut_one(pool, conv, now, batch).await? {
            Cut::Busy => report.conversations_busy += 1,
            Cut::Nothing => {}
            Cut::Done {
                deleted,
                tombstones,
                full,
            } => {
                report.conversations += 1;
                report.events_deleted += deleted;
                report.tombstones_written += tombstones;
                report.more |= full;
            }
        }
    }
    Ok(report)
}

enum Cut {
    /// Another transaction holds the conversation's lock.
    Busy,
    /// Nothing was past retention after all (a concurrent purge got there first).
    Nothing,
    Done {
        deleted: u64,
        tombstones: u64,
        /// The batch was full: more events may be past retention.
        full: bool,
    },
}

async fn cut_one(
    pool: &PgPool,
    conv: &str,
    now: DateTime<Utc>,
    batch: i64,
) -> Result<Cut, StoreError> {
    let mut tx = pool.begin().await?;
    let locked = sqlx::query(
        "SELECT min_seq, retention_ms FROM conversations
          WHERE conv_id = $1 FOR NO KEY UPDATE SKIP LOCKED",
    )
    .bind(conv)
    .fetch_optional(&mut *tx)
    .await?;
    let Some(locked) = locked else {
        return Ok(Cut::Busy);
    };
    let min_seq: i64 = locked.try_get("min_seq")?;
    let Some(retention_ms) = locked.try_get::<Option<i64>, _>("retention_ms")? else {
        return Ok(Cut::Nothing);
    };
    let cutoff = now - Duration::milliseconds(retention_ms);

    // The cut is the end of the longest run from min_seq of events older than the cutoff.
    // `created_at` is each transaction's start, so it is not strictly ordered by seq; stopping
    // at the first younger event keeps every deleted event past retention and the remaining
    // seqs without a hole (P1).
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
        let created_at: DateTime<Utc> = row.try_get("created_at")?;
        if seq != expected || created_at >= cutoff {
            break;
        }
        cut = Some(seq);
    }
    let Some(cut) = cut else {
        return Ok(Cut::Nothing);
    };

    // Delete, keep the request keys, raise min_seq: one statement, one transaction. A moved
    // min_seq is a change the sync feed reports. A key can only meet an older tombstone of its
    // own if that one expired and was reused, so the newer answer wins.
    let counts = sqlx::query(
        "WITH gone AS (
           DELETE FROM events WHERE conv_id = $1 AND seq BETWEEN $2 AND $3
           RETURNING conv_id, seq, kind, sender_user, client_msg_id, request_hash, message_id
         ), tomb AS (
           INSERT INTO idem_tombstones
                  (conv_id, sender_user, client_msg_id, request_hash, seq, message_id, purged_at)
           SELECT conv_id, sender_user, client_msg_id, request_hash, seq, message_id, $4 FROM gone
            WHERE kind = 'msg' AND client_msg_id IS NOT NULL AND sender_user IS NOT NULL
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
    .bind(conv)
    .bind(min_seq)
    .bind(cut)
    .bind(now)
    .fetch_one(&mut *tx)
    .await?;
    let deleted: i64 = counts.try_get("deleted")?;
    let tombstones: i64 = counts.try_get("tombstones")?;
    commit(tx).await?;
    Ok(Cut::Done {
        deleted: deleted.max(0) as u64,
        tombstones: tombstones.max(0) as u64,
        full: rows.len() as i64 == batch && cut == min_seq + batch - 1,
    })
}

pub(super) async fn expire_tombstones(
    pool: &PgPool,
    older_than: DateTime<Utc>,
) -> Result<u64, StoreError> {
    let mut total = 0u64;
    for _ in 0..TOMBSTONE_EXPIRY_BATCHES_MAX {
        // Bounded statements: each deletes at most one batch, found through the purged_at index.
        let done = sqlx::query(
            "DELETE FROM idem_tombstones
              WHERE ctid = ANY(ARRAY(SELECT ctid FROM idem_tombstones WHERE purged_at < $1 LIMIT $2))
                AND purged_at < $1",
        )
        .bind(older_than)
        .bind(TOMBSTONE_EXPIRY_BATCH_LEN_MAX)
        .execute(pool)
        .await?;
        total += done.rows_affected();
        if (done.rows_affected() as i64) < TOMBSTONE_EXPIRY_BATCH_LEN_MAX {
            break;
        }
    }
    Ok(total)
}
