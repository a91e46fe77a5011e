//! The background retention job of one node (SPEC §4, purge): every `purge_interval_ms` it
//! purges what is past retention, in rounds of bounded batches, then deletes the tombstones
//! older than `tombstone_ttl_ms`.
//!
//! Each round gives every due conversation at most one batch, in its own short transaction
//! that skips a conversation whose lock is held (the store's `purge_batch`), so sends are
//! never held up for long and never by another conversation's purge. Several nodes may run
//! the job at once: a conversation another node is cutting is simply skipped.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use parley_store::{PurgeReport, Store};
use tokio_util::sync::CancellationToken;

use crate::gateway::window::EventWindow;
use crate::metrics::Metrics;

/// Events deleted per conversation and transaction: the longest a purge holds a
/// conversation's lock is one delete of this many rows.
pub const PURGE_BATCH_EVENTS_MAX: u32 = 1_000;
/// Rounds of one run; what remains waits for the next run.
const PURGE_ROUNDS_PER_RUN_MAX: usize = 100;

/// Runs the job until `stop`. The first run comes one interval after start. While a run is
/// under way the event window answers nothing, since `min_seq` may move under it.
pub async fn run(
    store: Arc<dyn Store>,
    window: Arc<EventWindow>,
    metrics: Arc<Metrics>,
    purge_interval: Duration,
    tombstone_ttl: Duration,
    stop: CancellationToken,
) {
    let period = purge_interval.max(Duration::from_millis(1));
    let mut every = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = every.tick() => {}
        }
        window.purge_started();
        let purged = tokio::select! {
            _ = stop.cancelled() => None,
            purged = purge_once(&*store, tombstone_ttl) => Some(purged),
        };
        window.purge_ended();
        let Some(purged) = purged else {
            return;
        };
        match purged {
            Ok((report, expired)) => {
                metrics.purge_runs.inc();
                metrics.purge_events_deleted.inc_by(report.events_deleted);
                metrics
                    .purge_tombstones_written
                    .inc_by(report.tombstones_written);
                metrics.purge_tombstones_expired.inc_by(expired);
                if report.events_deleted > 0 || expired > 0 || report.conversations_busy > 0 {
                    tracing::info!(
                        conversations = report.conversations,
                        events_deleted = report.events_deleted,
                        tombstones_written = report.tombstones_written,
                        conversations_busy = report.conversations_busy,
                        tombstones_expired = expired,
                        "retention purge"
                    );
                }
            }
            Err(e) => tracing::warn!(error = %e, "retention purge failed; retried next interval"),
        }
    }
}

/// One run: purge rounds until nothing more is due (or the round limit), then the tombstone
/// expiry. Answers the summed report and the number of expired tombstones.
pub async fn purge_once(
    store: &dyn Store,
    tombstone_ttl: Duration,
) -> Result<(PurgeReport, u64), parley_store::StoreError> {
    let mut total = PurgeReport::default();
    for _ in 0..PURGE_ROUNDS_PER_RUN_MAX {
        let round = store
            .purge_batch(Utc::now(), PURGE_BATCH_EVENTS_MAX)
            .await?;
        total.conversations += round.conversations;
        total.events_deleted += round.events_deleted;
        total.tombstones_written += round.tombstones_written;
        total.conversations_busy += round.conversations_busy;
        total.more = round.more;
        if !round.more {
            break;
        }
    }
    let ttl = chrono::Duration::from_std(tombstone_ttl).unwrap_or(chrono::Duration::MAX);
    let expired = match Utc::now().checked_sub_signed(ttl) {
        Some(older_than) => store.expire_tombstones(older_than).await?,
        None => 0,
    };
    Ok((total, expired))
}
