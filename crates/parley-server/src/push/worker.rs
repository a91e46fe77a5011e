//! The notification worker of one gateway: expand the outbox, lease due notifications, send
//! each on its own task (a slow push service holds one permit, never the others), and report
//! the outcomes back in batches.

use std::sync::Arc;
use std::time::Duration;

use parley_store::{PushJob, PushOutcome, PushResult, Store, StoreError};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use super::deliver::{self, Attempt, PUSH_ATTEMPTS_MAX};
use super::payload::Counts;
use super::{Push, PushConfig};
use crate::metrics::Metrics;

/// Outbox rows one expansion transaction takes at most.
pub const EXPAND_BATCH_LEN_MAX: u32 = 128;
/// Notifications one claim leases at most.
pub const CLAIM_BATCH_LEN_MAX: u32 = 256;
/// Notifications being sent at once by one gateway.
pub const PUSH_IN_FLIGHT_MAX: usize = 64;
/// The worker looks for work this often when nothing wakes it: messages committed on another
/// gateway, coalesced notifications coming due, retries.
pub const PUSH_POLL_MS: u64 = 200;
/// The shortest lease: a send's timeout and time to report it.
pub const LEASE_MS_MIN: u64 = deliver::PUSH_TIMEOUT_MS + 2_000;
/// Tries of one report transaction before its outcomes are left to the lease.
pub const REPORT_ATTEMPTS_MAX: u64 = 3;
/// The wait before a report's retry, times the attempt.
pub const REPORT_RETRY_MS: u64 = 50;
/// Outcomes one report transaction applies at most.
pub const REPORT_BATCH_LEN_MAX: usize = 256;

/// Everything a send task needs.
struct Shared {
    store: Arc<dyn Store>,
    push: Arc<Push>,
    config: PushConfig,
    metrics: Arc<Metrics>,
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Runs the worker until `stop`.
pub async fn run(
    store: Arc<dyn Store>,
    push: Arc<Push>,
    config: PushConfig,
    metrics: Arc<Metrics>,
    gateway_id: String,
    stop: CancellationToken,
) {
    let shared = Arc::new(Shared {
        store,
        push,
        config,
        metrics,
    });
    // The deployment's VAPID key exists from the first start on, before any browser asks for
    // it; a store that does not answer yet is asked again at the first notification.
    if let Err(e) = shared.push.vapid(&*shared.store).await {
        tracing::warn!(error = %e, "the VAPID key could not be loaded yet");
    }
    let (outcomes, reports) = mpsc::channel(PUSH_IN_FLIGHT_MAX * 2);
    let reporter = tokio::spawn(report_loop(shared.clone(), reports));
    let permits = Arc::new(Semaphore::new(PUSH_IN_FLIGHT_MAX));
    let mut claims: u64 = 0;
    loop {
        if let Err(e) = round(&shared, &permits, &outcomes, &gateway_id, &mut claims).await {
            tracing::warn!(error = %e, "a round of the notification worker failed");
        }
        tokio::select! {
            () = stop.cancelled() => break,
            () = shared.push.woken() => {}
            () = tokio::time::sleep(Duration::from_millis(PUSH_POLL_MS)) => {}
        }
    }
    drop(outcomes);
    let _ = reporter.await;
}

async fn round(
    shared: &Arc<Shared>,
    permits: &Arc<Semaphore>,
    outcomes: &mpsc::Sender<PushOutcome>,
    gateway_id: &str,
    claims: &mut u64,
) -> Result<(), StoreError> {
    let coalesce_ms = i64::try_from(shared.config.coalesce_ms).unwrap_or(i64::MAX);
    // Never shorter than a send's timeout: a lease running out under a live send would let a
    // second gateway send the same notification.
    let lease_ms = i64::try_from(shared.config.lease_ms.max(LEASE_MS_MIN)).unwrap_or(i64::MAX);
    loop {
        let expanded = shared
            .store
            .expand_push_outbox(now_ms(), coalesce_ms, EXPAND_BATCH_LEN_MAX)
            .await?;
        if expanded < u64::from(EXPAND_BATCH_LEN_MAX) {
            break;
        }
    }
    loop {
        let free = permits
            .available_permits()
            .min(CLAIM_BATCH_LEN_MAX as usize);
        if free == 0 {
            return Ok(());
        }
        *claims += 1;
        let lease = format!("{gateway_id}/{claims}/{}", now_ms());
        let asked = u32::try_from(free).unwrap_or(CLAIM_BATCH_LEN_MAX);
        let jobs = shared
            .store
            .claim_push(&lease, now_ms(), lease_ms, asked)
            .await?;
        let claimed = jobs.len();
        for job in jobs {
            let Ok(permit) = permits.clone().acquire_owned().await else {
                return Ok(());
            };
            tokio::spawn(send_one(shared.clone(), job, permit, outcomes.clone()));
        }
        if claimed < free {
            return Ok(());
        }
    }
}

async fn send_one(
    shared: Arc<Shared>,
    job: PushJob,
    _permit: OwnedSemaphorePermit,
    outcomes: mpsc::Sender<PushOutcome>,
) {
    let (label, result) = decide(&shared, &job).await;
    shared
        .metrics
        .push_notifications
        .get_or_create(&[("outcome", label)])
        .inc();
    // The reporter only stops after every sender is gone, so this cannot fail while it runs; if
    // it did, the lease runs out and the notification is claimed again.
    let _ = outcomes.send(PushOutcome { job, result }).await;
}

/// What to do with one claimed notification, and its metric label.
async fn decide(shared: &Shared, job: &PushJob) -> (&'static str, PushResult) {
    let Some(message) = &job.message else {
        return ("dropped", PushResult::Dropped);
    };
    if job.online || job.read_seq >= job.seq {
        return ("dropped", PushResult::Dropped);
    }
    if job.attempts >= PUSH_ATTEMPTS_MAX {
        return ("expired", PushResult::Dropped);
    }
    let retry = |label| {
        let due_ms = now_ms().saturating_add(deliver::retry_delay_ms(job.attempts));
        (label, PushResult::Retry { due_ms })
    };
    let counts = match counts(&*shared.store, job).await {
        Ok(counts) => counts,
        Err(_) => return retry("retry"),
    };
    let vapid = match shared.push.vapid(&*shared.store).await {
        Ok(vapid) => vapid,
        Err(_) => return retry("retry"),
    };
    let now_s = u64::try_from(now_ms() / 1000).unwrap_or(0);
    let prepared = match deliver::prepare(job, message, counts, &vapid, &shared.config, now_s) {
        Ok(prepared) => prepared,
        Err(e) => {
            tracing::warn!(error = %e, "a notification could not be prepared; dropped");
            return ("refused", PushResult::Dropped);
        }
    };
    let pushkey = match &job.target {
        parley_store::PushTarget::Gateway { pushkey, .. } => Some(pushkey.as_str()),
        parley_store::PushTarget::WebPush { .. } => None,
    };
    let attempt = deliver::post(&shared.push.client, prepared, pushkey).await;
    if attempt == Attempt::Delivered {
        let waited = chrono::Utc::now() - message.committed_at;
        let waited_s = waited.num_microseconds().unwrap_or(0).max(0) as f64 / 1e6;
        shared.metrics.push_commit_to_send_seconds.observe(waited_s);
    }
    (attempt.label(), attempt.result(job.attempts, now_ms()))
}

/// The member's unread counts: of the notification's conversation, and of all of theirs.
async fn counts(store: &dyn Store, job: &PushJob) -> Result<Counts, StoreError> {
    let feed = store.list_conversations(&job.user_id, None).await?;
    let mut counts = Counts::default();
    for view in &feed.conversations {
        counts.badge += view.unread;
        if view.conv_id == job.conv_id {
            counts.unread = view.unread;
        }
    }
    Ok(counts)
}

/// Applies outcomes in batches until every sender is gone.
async fn report_loop(shared: Arc<Shared>, mut reports: mpsc::Receiver<PushOutcome>) {
    let coalesce_ms = i64::try_from(shared.config.coalesce_ms).unwrap_or(i64::MAX);
    let mut batch = Vec::with_capacity(REPORT_BATCH_LEN_MAX);
    while reports.recv_many(&mut batch, REPORT_BATCH_LEN_MAX).await > 0 {
        // One lock order for every report: fewer waits on (and deadlocks with) an expansion
        // upserting the same rows.
        batch.sort_by(|a, b| {
            let key = |o: &PushOutcome| {
                (
                    o.job.user_id.as_str().to_owned(),
                    o.job.device_id.as_str().to_owned(),
                    o.job.conv_id.as_str().to_owned(),
                )
            };
            key(a).cmp(&key(b))
        });
        let mut attempt = 1;
        loop {
            match shared
                .store
                .report_push(&batch, now_ms(), coalesce_ms)
                .await
            {
                Ok(()) => break,
                // A sent notification not recorded would be sent again after its lease:
                // worth a retry of the transaction (a deadlock victim, a dropped connection).
                Err(e) if attempt < REPORT_ATTEMPTS_MAX => {
                    tracing::debug!(error = %e, attempt, "notification outcomes retried");
                    tokio::time::sleep(Duration::from_millis(REPORT_RETRY_MS * attempt)).await;
                    attempt += 1;
                }
                Err(e) => {
                    // The rows stay leased until their lease runs out, then are claimed again.
                    tracing::warn!(error = %e, outcomes = batch.len(), "notification outcomes not recorded");
                    break;
                }
            }
        }
        batch.clear();
    }
}
