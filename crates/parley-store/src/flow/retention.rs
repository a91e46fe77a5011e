//! Retention (SPEC §4, purge): deletes the oldest events of conversations with a
//! `retention_ms`, in seq order, and raises `min_seq` past them; the request keys of purged
//! messages move into the tombstones in the same transaction (P2 after retention).
//!
//! Each conversation is cut in its own short transaction of at most one batch, so the purge
//! never holds a conversation, or SQLite's one writer, for longer than one batch. A backend
//! with per-conversation locks skips a conversation whose lock is held rather than wait for it.

use chrono::{DateTime, Utc};
use parley_domain::decide::retention::{cutoff, plan_cut};

use super::{StoreFuture, WriteTx};
use crate::backend::Backend;
use crate::error::StoreError;
use crate::query::SqlRow;
use crate::sql;
use crate::types::PurgeReport;

/// Most conversations one purge round cuts; the next round continues with the rest.
pub(crate) const PURGE_CONVERSATIONS_PER_ROUND_MAX: usize = 1_000;
/// Tombstones deleted by one statement (one transaction on SQLite) of the expiry.
pub(crate) const TOMBSTONE_EXPIRY_BATCH_LEN_MAX: u64 = 10_000;
/// Batches of one expiry call; what remains waits for the next call.
const TOMBSTONE_EXPIRY_BATCHES_MAX: usize = 100;

/// A conversation as the purge found it when it tried to lock it.
pub(crate) enum PurgeLock {
    /// Another transaction holds its lock.
    Busy,
    /// No such conversation.
    Gone,
    Locked {
        min_seq: i64,
        retention_ms: Option<i64>,
    },
}

/// The statements of retention outside a conversation's purge transaction.
pub(crate) trait Expiry {
    /// Conversations with events past retention at `now`, by id, at most `limit`.
    fn due_for_purge(&self, now: DateTime<Utc>, limit: usize) -> impl StoreFuture<Vec<String>>;
    /// Deletes at most `len_max` tombstones purged before `older_than`; answers how many.
    fn expire_tombstone_batch(
        &self,
        older_than: DateTime<Utc>,
        len_max: u64,
    ) -> impl StoreFuture<u64>;
}

pub(crate) trait PurgeTx: WriteTx {
    /// Locks conversation `$1` for this transaction without waiting for it, and reads its
    /// `min_seq` and `retention_ms`.
    const LOCK_FOR_PURGE_SQL: &'static str;
    /// Whether that statement skips a conversation another transaction holds. Conversations
    /// are never deleted, so there a missing row is a busy one.
    const SKIPS_LOCKED: bool;

    /// Locks the conversation without waiting for it.
    fn lock_for_purge(&mut self, conv_id: &str) -> impl StoreFuture<PurgeLock> {
        async move {
            let found = sql::conversation_row(self, Self::LOCK_FOR_PURGE_SQL, conv_id, |r| {
                Ok(PurgeLock::Locked {
                    min_seq: r.int("min_seq")?,
                    retention_ms: r.opt_int("retention_ms")?,
                })
            })
            .await?;
            Ok(match found {
                Some(locked) => locked,
                None if Self::SKIPS_LOCKED => PurgeLock::Busy,
                None => PurgeLock::Gone,
            })
        }
    }
    /// The first events from `min_seq`, at most `len_max`, ascending: `(seq, created_at)`.
    fn oldest_events(
        &mut self,
        conv_id: &str,
        min_seq: i64,
        len_max: usize,
    ) -> impl StoreFuture<Vec<(i64, DateTime<Utc>)>> {
        sql::oldest_events(self, conv_id, min_seq, len_max)
    }
    /// Deletes the events of the cut, keeps the request keys of the messages among them in the
    /// tombstones (stamped `purged_at`; a key meeting an older tombstone of its own, which
    /// expired and was used again, replaces it), raises `min_seq` past them (never above
    /// `next_seq`) and stamps the conversation changed. Answers how many events were deleted
    /// and tombstones written.
    fn cut(&mut self, cut: &LogCut<'_>) -> impl StoreFuture<(u64, u64)>;
}

/// The prefix of a conversation's log a purge deletes: `min_seq..=through_seq`.
pub(crate) struct LogCut<'a> {
    pub conv_id: &'a str,
    pub min_seq: i64,
    pub through_seq: i64,
    pub purged_at: DateTime<Utc>,
}

/// What one conversation's purge transaction did.
enum Cut {
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

pub(crate) async fn purge_batch<B: Backend>(
    backend: &B,
    now: DateTime<Utc>,
    batch_events_max: u32,
) -> Result<PurgeReport, StoreError> {
    let batch = batch_events_max.max(1) as usize;
    let due = backend
        .due_for_purge(now, PURGE_CONVERSATIONS_PER_ROUND_MAX + 1)
        .await?;
    let mut report = PurgeReport {
        more: due.len() > PURGE_CONVERSATIONS_PER_ROUND_MAX,
        ..PurgeReport::default()
    };
    for conv in due.iter().take(PURGE_CONVERSATIONS_PER_ROUND_MAX) {
        match cut_one(backend, conv, now, batch).await? {
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

async fn cut_one<B: Backend>(
    backend: &B,
    conv: &str,
    now: DateTime<Utc>,
    batch: usize,
) -> Result<Cut, StoreError> {
    let mut tx = backend.begin_write().await?;
    let (min_seq, retention_ms) = match tx.lock_for_purge(conv).await? {
        PurgeLock::Busy => return Ok(Cut::Busy),
        PurgeLock::Locked {
            min_seq,
            retention_ms: Some(retention_ms),
        } => (min_seq, retention_ms),
        PurgeLock::Gone | PurgeLock::Locked { .. } => return Ok(Cut::Nothing),
    };
    let events = tx.oldest_events(conv, min_seq, batch).await?;
    let Some(cut) = plan_cut(min_seq, &events, cutoff(now, retention_ms), batch) else {
        return Ok(Cut::Nothing);
    };
    let log_cut = LogCut {
        conv_id: conv,
        min_seq,
        through_seq: cut.through_seq,
        purged_at: now,
    };
    let (deleted, tombstones) = tx.cut(&log_cut).await?;
    super::relate::forget_purged(&mut tx, conv, cut.through_seq).await?;
    tx.commit_or_unknown().await?;
    Ok(Cut::Done {
        deleted,
        tombstones,
        full: cut.full,
    })
}

/// Deletes the tombstones purged before `older_than`, in bounded batches.
pub(crate) async fn expire_tombstones<B: Backend>(
    backend: &B,
    older_than: DateTime<Utc>,
) -> Result<u64, StoreError> {
    let mut total = 0u64;
    for _ in 0..TOMBSTONE_EXPIRY_BATCHES_MAX {
        let done = backend
            .expire_tombstone_batch(older_than, TOMBSTONE_EXPIRY_BATCH_LEN_MAX)
            .await?;
        total += done;
        if done < TOMBSTONE_EXPIRY_BATCH_LEN_MAX {
            break;
        }
    }
    Ok(total)
}
