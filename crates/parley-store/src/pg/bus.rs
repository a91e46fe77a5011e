//! The event bus between a few gateway nodes on one PostgreSQL database (SPEC §10), built on
//! LISTEN/NOTIFY.
//!
//! Nothing here runs inside a send transaction. A transaction that calls `pg_notify` takes
//! PostgreSQL's notify queue lock at commit and holds it until the commit is durable, so every
//! committing transaction that notifies waits for the previous one (SPEC §4; measured in
//! `docs/PERFORMANCE.md`). Instead, after commit:
//!
//! - [`PgBus::announce`] hands the full event to this node's subscribers at once (an in-process
//!   [`LocalBus`]), so the gateway that committed pushes without reading the store again, and
//!   queues `(conv_id, head)` in a bounded queue;
//! - a notifier task drains whatever accumulated since its previous batch (at least
//!   [`NOTIFY_BATCH_INTERVAL_MS_MIN`] apart), keeps the highest head per conversation, and sends
//!   the lot with one `pg_notify` statement on its own connection, split into payloads of at most
//!   [`NOTIFY_PAYLOAD_BYTES_MAX`] bytes. That connection commits asynchronously
//!   (`synchronous_commit = off`): a notification is a hint that no crash needs to preserve, so
//!   its commit does not wait for, or add, a WAL flush;
//! - a listener task turns the notifications of other gateways into head-only announcements
//!   (`event: None`); their subscribers read the log up to the head.
//!
//! Every loss on this path (a full queue, a failed notification, notifications sent while the
//! listener was reconnecting) loses only a push, which sync repairs (P7). A later head of the
//! same conversation also covers an earlier lost one, because a gateway reads up to the head.
//!
//! The payload is a compact JSON object: `{"origin":"gw-a","heads":[["conv",12],["c2",7]]}`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use parley_bus::{Announcement, EventBus, LocalBus, Subscription};
use parley_domain::{ConvId, Event, Rejection};
use serde::Deserialize;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use sqlx::{Connection, PgConnection, PgPool};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::error::StoreError;

/// The channel every gateway of one database notifies and listens on.
pub const NOTIFY_CHANNEL: &str = "parley_events";
/// Announcements waiting for the notifier. Sized for several seconds of a single node's send
/// rate, so only a stalled database connection fills it; then announcements are dropped rather
/// than blocking the send path or growing memory without bound.
pub const NOTIFY_QUEUE_LEN_MAX: usize = 65_536;
/// Largest notification payload. PostgreSQL refuses payloads of 8,000 bytes or more; the margin
/// keeps us clear of that limit whatever the encoding details.
pub const NOTIFY_PAYLOAD_BYTES_MAX: usize = 7_900;
/// Longest gateway id, so that the id and at least one `[conv_id, head]` pair always fit in one
/// payload.
pub const GATEWAY_ID_BYTES_MAX: usize = 128;
/// Longest wait for a connection to PostgreSQL, so an unreachable database fails the start
/// quickly and a reconnect attempt ends in a retry rather than a hang.
pub const BUS_CONNECT_TIMEOUT_MS: u64 = 5_000;
/// Longest wait for one notification statement; a hung connection is replaced rather than
/// stalling every later announcement behind it.
pub const NOTIFY_STATEMENT_TIMEOUT_MS: u64 = 5_000;
/// Shortest time between the starts of two notification batches. An idle bus notifies at once;
/// under load, announcements gather for this long, so other gateways see a few batches per
/// conversation burst instead of one notification per send, for at most this much extra delay.
pub const NOTIFY_BATCH_INTERVAL_MS_MIN: u64 = 5;
/// First wait before the notifier reconnects after a failure.
pub const NOTIFY_RECONNECT_BACKOFF_MS_MIN: u64 = 100;
/// Longest wait between two reconnect attempts of the notifier: long enough not to hammer a
/// restarting database, short enough that announcements resume soon after it is back.
pub const NOTIFY_RECONNECT_BACKOFF_MS_MAX: u64 = 5_000;
/// First wait before the listener reconnects after losing its connection.
pub const LISTEN_RECONNECT_BACKOFF_MS_MIN: u64 = 100;
/// Longest wait between two reconnect attempts of the listener.
pub const LISTEN_RECONNECT_BACKOFF_MS_MAX: u64 = 5_000;
/// Longest time the notifier spends at shutdown sending what is still queued.
pub const SHUTDOWN_FLUSH_TIMEOUT_MS: u64 = 2_000;

/// The PostgreSQL event bus of one gateway. Cloning shares the bus.
///
/// Its two background tasks end when the `shutdown` token given to [`PgBus::start`] is cancelled
/// or when the last clone is dropped; [`PgBus::stopped`] waits for them.
#[derive(Clone)]
pub struct PgBus {
    inner: Arc<Inner>,
}

struct Inner {
    gateway_id: String,
    local: LocalBus,
    queue: mpsc::Sender<(ConvId, i64)>,
    counters: Arc<Counters>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// Cancels the bus's own token when the last handle goes, so the tasks do not outlive it.
    _stop_on_drop: DropGuard,
}

/// Counters of the bus, for metrics and tests. Every field only grows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PgBusStats {
    /// Announcements queued for other gateways.
    pub queued: u64,
    /// Announcements not queued because the queue was full or the bus had stopped.
    pub dropped: u64,
    /// `pg_notify` statements sent, one per batch.
    pub batches: u64,
    /// Notification payloads sent (a batch is split when it exceeds the payload limit).
    pub notifications_sent: u64,
    /// `[conv_id, head]` pairs sent, after coalescing.
    pub heads_sent: u64,
    /// Coalesced heads lost because their notification could not be sent.
    pub heads_lost: u64,
    /// Notifications of other gateways received.
    pub notifications_received: u64,
    /// This gateway's own notifications that came back and were ignored.
    pub own_ignored: u64,
    /// Notifications on the channel that were not valid payloads.
    pub malformed: u64,
    /// Times the listener connected again after losing its connection.
    pub listen_reconnects: u64,
}

#[derive(Default)]
struct Counters {
    queued: AtomicU64,
    dropped: AtomicU64,
    batches: AtomicU64,
    notifications_sent: AtomicU64,
    heads_sent: AtomicU64,
    heads_lost: AtomicU64,
    notifications_received: AtomicU64,
    own_ignored: AtomicU64,
    malformed: AtomicU64,
    listen_reconnects: AtomicU64,
}

fn bump(counter: &AtomicU64, by: u64) -> u64 {
    counter.fetch_add(by, Ordering::Relaxed) + by
}

impl Counters {
    fn snapshot(&self) -> PgBusStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        PgBusStats {
            queued: get(&self.queued),
            dropped: get(&self.dropped),
            batches: get(&self.batches),
            notifications_sent: get(&self.notifications_sent),
            heads_sent: get(&self.heads_sent),
            heads_lost: get(&self.heads_lost),
            notifications_received: get(&self.notifications_received),
            own_ignored: get(&self.own_ignored),
            malformed: get(&self.malformed),
            listen_reconnects: get(&self.listen_reconnects),
        }
    }
}

impl PgBus {
    /// Connects the notifier and the listener (each on a connection of its own, opened with the
    /// pool's options, so the store's pool keeps all its connections) and starts their tasks.
    /// It returns once the listener is listening, so announcements made by other gateways from
    /// then on reach this one.
    ///
    /// `gateway_id` must be unique among the gateways of the database: notifications carrying it
    /// are taken for this gateway's own and ignored.
    pub async fn start(
        pool: PgPool,
        gateway_id: String,
        shutdown: CancellationToken,
    ) -> Result<PgBus, StoreError> {
        if gateway_id.is_empty() || gateway_id.len() > GATEWAY_ID_BYTES_MAX {
            return Err(Rejection::BadRequest(format!(
                "gateway id must be 1 to {GATEWAY_ID_BYTES_MAX} bytes"
            ))
            .into());
        }
        let options = (*pool.connect_options()).clone();
        let notify_conn = connect(&notify_options(&options, &gateway_id)).await?;
        let listen_options = options.application_name(&format!("parley-listen {gateway_id}"));
        let listener = listen(&listen_options).await?;

        let stop = shutdown.child_token();
        let local = LocalBus::new();
        let counters = Arc::new(Counters::default());
        let (queue, rx) = mpsc::channel(NOTIFY_QUEUE_LEN_MAX);
        let notifier = Notifier {
            rx,
            conn: Some(notify_conn),
            options: pool.connect_options(),
            gateway_id: gateway_id.clone(),
            counters: counters.clone(),
            stop: stop.clone(),
        };
        let receiver = Receiver {
            options: listen_options,
            gateway_id: gateway_id.clone(),
            local: local.clone(),
            counters: counters.clone(),
            stop: stop.clone(),
        };
        let tasks = vec![
            tokio::spawn(notifier.run()),
            tokio::spawn(receiver.run(listener)),
        ];
        tracing::info!(
            gateway_id,
            channel = NOTIFY_CHANNEL,
            "postgres event bus started"
        );
        Ok(PgBus {
            inner: Arc::new(Inner {
                gateway_id,
                local,
                queue,
                counters,
                tasks: Mutex::new(tasks),
                _stop_on_drop: stop.drop_guard(),
            }),
        })
    }

    /// The id this bus puts on its notifications and ignores on arrival.
    pub fn gateway_id(&self) -> &str {
        &self.inner.gateway_id
    }

    /// The counters so far, so drops and reconnects can be seen in metrics and tests.
    pub fn stats(&self) -> PgBusStats {
        self.inner.counters.snapshot()
    }

    /// Waits until both background tasks have ended, i.e. after the shutdown token was
    /// cancelled and the notifier sent what was still queued (bounded by
    /// [`SHUTDOWN_FLUSH_TIMEOUT_MS`]).
    pub async fn stopped(&self) {
        let tasks = match self.inner.tasks.lock() {
            Ok(mut tasks) => std::mem::take(&mut *tasks),
            Err(poisoned) => std::mem::take(&mut *poisoned.into_inner()),
        };
        for task in tasks {
            if let Err(e) = task.await {
                tracing::error!(error = %e, "event bus task failed");
            }
        }
    }
}

impl EventBus for PgBus {
    fn announce(&self, event: Arc<Event>) {
        let entry = (event.conv_id.clone(), event.seq);
        self.inner.local.announce(event);
        let counters = &self.inner.counters;
        match self.inner.queue.try_send(entry) {
            Ok(()) => {
                bump(&counters.queued, 1);
            }
            Err(_) => {
                // Logged at powers of two, so a stalled database yields a few lines, not one
                // per send.
                let dropped = bump(&counters.dropped, 1);
                if dropped.is_power_of_two() {
                    tracing::warn!(
                        dropped_total = dropped,
                        "event bus queue full or stopped: announcements to other gateways dropped; \
                         their clients repair by sync"
                    );
                }
            }
        }
    }

    fn subscribe(&self) -> Subscription {
        self.inner.local.subscribe()
    }
}

async fn connect(options: &PgConnectOptions) -> Result<PgConnection, StoreError> {
    match tokio::time::timeout(
        Duration::from_millis(BUS_CONNECT_TIMEOUT_MS),
        PgConnection::connect_with(options),
    )
    .await
    {
        Ok(conn) => Ok(conn?),
        Err(_) => Err(StoreError::Unavailable(format!(
            "no connection to PostgreSQL within {BUS_CONNECT_TIMEOUT_MS} ms"
        ))),
    }
}

/// A listener on [`NOTIFY_CHANNEL`] over a pool of one connection of its own, fresh for every
/// attempt so a suspect connection is never reused. Reconnecting is left to the caller
/// (`eager_reconnect(false)`), so every reconnect is seen and logged.
async fn listen(options: &PgConnectOptions) -> Result<PgListener, StoreError> {
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .min_connections(0)
        .max_lifetime(None)
        .idle_timeout(None)
        .acquire_timeout(Duration::from_millis(BUS_CONNECT_TIMEOUT_MS))
        .connect_lazy_with(options.clone());
    let attempt = async {
        let mut listener = PgListener::connect_with(&pool).await?;
        listener.eager_reconnect(false);
        listener.listen(NOTIFY_CHANNEL).await?;
        Ok::<_, sqlx::Error>(listener)
    };
    match tokio::time::timeout(Duration::from_millis(BUS_CONNECT_TIMEOUT_MS), attempt).await {
        Ok(listener) => Ok(listener?),
        Err(_) => Err(StoreError::Unavailable(format!(
            "could not LISTEN within {BUS_CONNECT_TIMEOUT_MS} ms"
        ))),
    }
}

/// Exponential backoff with jitter, so gateways that lost the database together do not all
/// reconnect in the same instant.
struct Backoff {
    min_ms: u64,
    max_ms: u64,
    next_ms: u64,
}

impl Backoff {
    fn new(min_ms: u64, max_ms: u64) -> Self {
        Self {
            min_ms,
            max_ms,
            next_ms: min_ms,
        }
    }

    fn reset(&mut self) {
        self.next_ms = self.min_ms;
    }

    /// The next wait: between half and all of the current step, which then doubles.
    fn next_delay(&mut self) -> Duration {
        let step = self.next_ms;
        self.next_ms = (step.saturating_mul(2)).min(self.max_ms);
        let jittered = rand::Rng::gen_range(&mut rand::thread_rng(), step / 2..=step);
        Duration::from_millis(jittered)
    }
}

/// Sleeps for the next backoff step; false when shutdown came first.
async fn wait_or_stop(backoff: &mut Backoff, stop: &CancellationToken) -> bool {
    let delay = backoff.next_delay();
    tokio::select! {
        _ = stop.cancelled() => false,
        _ = tokio::time::sleep(delay) => true,
    }
}

/// Drains the queue, coalesces, and notifies.
struct Notifier {
    rx: mpsc::Receiver<(ConvId, i64)>,
    conn: Option<PgConnection>,
    options: Arc<PgConnectOptions>,
    gateway_id: String,
    counters: Arc<Counters>,
    stop: CancellationToken,
}

impl Notifier {
    async fn run(mut self) {
        let mut backoff = Backoff::new(
            NOTIFY_RECONNECT_BACKOFF_MS_MIN,
            NOTIFY_RECONNECT_BACKOFF_MS_MAX,
        );
        let interval = Duration::from_millis(NOTIFY_BATCH_INTERVAL_MS_MIN);
        loop {
            let first = tokio::select! {
                biased;
                _ = self.stop.cancelled() => break,
                next = self.rx.recv() => match next {
                    Some(entry) => entry,
                    None => break,
                },
            };
            // Everything that queued up since the previous batch goes into this one: batches
            // grow with the load, and an idle bus notifies at once.
            let started = tokio::time::Instant::now();
            let mut heads = HashMap::new();
            coalesce(&mut heads, first);
            while heads.len() < NOTIFY_QUEUE_LEN_MAX {
                match self.rx.try_recv() {
                    Ok(entry) => coalesce(&mut heads, entry),
                    Err(_) => break,
                }
            }
            if self.send(heads).await {
                backoff.reset();
                let pause = tokio::time::sleep_until(started + interval);
                tokio::select! {
                    _ = self.stop.cancelled() => break,
                    _ = pause => {}
                }
            } else if !wait_or_stop(&mut backoff, &self.stop).await {
                break;
            }
        }
        self.flush_at_shutdown().await;
    }

    /// Sends what is still queued, so an orderly shutdown loses no announcement.
    async fn flush_at_shutdown(mut self) {
        self.rx.close();
        let mut heads = HashMap::new();
        while let Ok(entry) = self.rx.try_recv() {
            coalesce(&mut heads, entry);
        }
        if heads.is_empty() {
            return;
        }
        let lost = heads.len() as u64;
        let flush = self.send(heads);
        if tokio::time::timeout(Duration::from_millis(SHUTDOWN_FLUSH_TIMEOUT_MS), flush)
            .await
            .is_err()
        {
            bump(&self.counters.heads_lost, lost);
            tracing::warn!(
                heads = lost,
                "event bus stopped before its last announcements were sent"
            );
        }
    }

    /// Sends one batch in one statement; false (heads counted as lost, connection dropped) when
    /// it failed.
    async fn send(&mut self, heads: HashMap<ConvId, i64>) -> bool {
        let (payloads, oversized) = encode_payloads(&self.gateway_id, &heads);
        if oversized > 0 {
            bump(&self.counters.heads_lost, oversized as u64);
            tracing::warn!(
                heads = oversized,
                "conversation ids too long for a notification payload; not announced"
            );
        }
        if payloads.is_empty() {
            return true;
        }
        let sent_heads = (heads.len() - oversized) as u64;
        match self.notify(&payloads).await {
            Ok(()) => {
                bump(&self.counters.batches, 1);
                bump(&self.counters.notifications_sent, payloads.len() as u64);
                bump(&self.counters.heads_sent, sent_heads);
                true
            }
            Err(e) => {
                self.conn = None;
                bump(&self.counters.heads_lost, sent_heads);
                tracing::warn!(
                    error = %e,
                    heads = sent_heads,
                    "cannot notify other gateways; these announcements are lost and their \
                     clients repair by sync"
                );
                false
            }
        }
    }

    async fn notify(&mut self, payloads: &[String]) -> Result<(), StoreError> {
        let conn = match &mut self.conn {
            Some(conn) => conn,
            None => self
                .conn
                .insert(connect(&notify_options(&self.options, &self.gateway_id)).await?),
        };
        let statement =
            sqlx::query("SELECT pg_notify($1, payload) FROM unnest($2::text[]) AS payload")
                .bind(NOTIFY_CHANNEL)
                .bind(payloads)
                .execute(conn);
        match tokio::time::timeout(
            Duration::from_millis(NOTIFY_STATEMENT_TIMEOUT_MS),
            statement,
        )
        .await
        {
            Ok(done) => {
                done?;
                Ok(())
            }
            Err(_) => Err(StoreError::Unavailable(format!(
                "pg_notify took longer than {NOTIFY_STATEMENT_TIMEOUT_MS} ms"
            ))),
        }
    }
}

/// The notifier's connection: named for `pg_stat_activity`, and committing asynchronously, since
/// a notification lost in a crash costs nothing that sync does not repair.
fn notify_options(options: &PgConnectOptions, gateway_id: &str) -> PgConnectOptions {
    options
        .clone()
        .application_name(&format!("parley-notify {gateway_id}"))
        .options([("synchronous_commit", "off")])
}

fn coalesce(heads: &mut HashMap<ConvId, i64>, (conv_id, head): (ConvId, i64)) {
    let slot = heads.entry(conv_id).or_insert(head);
    *slot = (*slot).max(head);
}

/// Receives other gateways' notifications and hands them to this node's subscribers.
struct Receiver {
    options: PgConnectOptions,
    gateway_id: String,
    local: LocalBus,
    counters: Arc<Counters>,
    stop: CancellationToken,
}

impl Receiver {
    async fn run(self, mut listener: PgListener) {
        let mut backoff = Backoff::new(
            LISTEN_RECONNECT_BACKOFF_MS_MIN,
            LISTEN_RECONNECT_BACKOFF_MS_MAX,
        );
        loop {
            let received = tokio::select! {
                biased;
                _ = self.stop.cancelled() => break,
                received = listener.try_recv() => received,
            };
            match received {
                Ok(Some(notification)) => self.deliver(notification.payload()),
                Ok(None) => {
                    tracing::warn!("event bus listener lost its connection; reconnecting");
                    drop(listener);
                    let Some(again) = self.reconnect(&mut backoff).await else {
                        break;
                    };
                    listener = again;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "event bus listener failed; reconnecting");
                    drop(listener);
                    let Some(again) = self.reconnect(&mut backoff).await else {
                        break;
                    };
                    listener = again;
                }
            }
        }
    }

    /// Connects and listens again, waiting longer after each failure; `None` at shutdown.
    async fn reconnect(&self, backoff: &mut Backoff) -> Option<PgListener> {
        loop {
            if !wait_or_stop(backoff, &self.stop).await {
                return None;
            }
            match listen(&self.options).await {
                Ok(listener) => {
                    backoff.reset();
                    bump(&self.counters.listen_reconnects, 1);
                    // Notifications are not kept for absent listeners, so there is no way to
                    // learn what was missed; clients notice the gap in seqs and sync.
                    tracing::warn!(
                        "event bus listener reconnected; announcements of other gateways made \
                         while it was disconnected were missed and are repaired by client sync"
                    );
                    return Some(listener);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "event bus listener cannot reconnect yet");
                }
            }
        }
    }

    fn deliver(&self, payload: &str) {
        let Some(decoded) = decode_payload(payload) else {
            bump(&self.counters.malformed, 1);
            tracing::warn!(
                payload_bytes = payload.len(),
                "ignoring a malformed notification on the event bus channel"
            );
            return;
        };
        if decoded.origin == self.gateway_id {
            bump(&self.counters.own_ignored, 1);
            return;
        }
        bump(&self.counters.notifications_received, 1);
        for (conv_id, head) in decoded.heads {
            self.local.publish(Announcement {
                conv_id,
                head,
                event: None,
            });
        }
    }
}

/// The payload as it travels: the sending gateway and its coalesced heads.
#[derive(Deserialize)]
struct WirePayload {
    origin: String,
    heads: Vec<(String, i64)>,
}

struct Decoded {
    origin: String,
    heads: Vec<(ConvId, i64)>,
}

/// Parses a payload; `None` when anything in it is not what a gateway sends, since the
/// channel is open to every client of the database.
fn decode_payload(payload: &str) -> Option<Decoded> {
    let wire: WirePayload = serde_json::from_str(payload).ok()?;
    let mut heads = Vec::with_capacity(wire.heads.len());
    for (conv_id, head) in wire.heads {
        let conv_id = ConvId::parse(&conv_id).ok()?;
        if head < 0 {
            return None;
        }
        heads.push((conv_id, head));
    }
    Some(Decoded {
        origin: wire.origin,
        heads,
    })
}

/// Encodes heads into as few payloads as fit [`NOTIFY_PAYLOAD_BYTES_MAX`]; also returns how
/// many pairs could not fit even alone.
fn encode_payloads(origin: &str, heads: &HashMap<ConvId, i64>) -> (Vec<String>, usize) {
    const SUFFIX: &str = "]}";
    let prefix = format!(
        "{{\"origin\":{},\"heads\":[",
        serde_json::Value::from(origin)
    );
    let mut payloads = Vec::new();
    let mut oversized = 0;
    let mut current = prefix.clone();
    for (conv_id, head) in heads {
        let pair = format!("[{},{head}]", serde_json::Value::from(conv_id.as_str()));
        let empty = current.len() == prefix.len();
        let separator = usize::from(!empty);
        if current.len() + separator + pair.len() + SUFFIX.len() > NOTIFY_PAYLOAD_BYTES_MAX {
            if empty {
                oversized += 1;
                continue;
            }
            current.push_str(SUFFIX);
            payloads.push(std::mem::replace(&mut current, prefix.clone()));
            if current.len() + pair.len() + SUFFIX.len() > NOTIFY_PAYLOAD_BYTES_MAX {
                oversized += 1;
                continue;
            }
        } else if !empty {
            current.push(',');
        }
        current.push_str(&pair);
    }
    if current.len() > prefix.len() {
        current.push_str(SUFFIX);
        payloads.push(current);
    }
    (payloads, oversized)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conv(s: &str) -> ConvId {
        ConvId::parse(s).expect("valid conv id")
    }

    #[test]
    fn a_small_batch_is_one_compact_payload() {
        let heads = HashMap::from([(conv("c-1"), 7)]);
        let (payloads, oversized) = encode_payloads("gw-a", &heads);
        assert_eq!(oversized, 0);
        assert_eq!(payloads, vec![r#"{"origin":"gw-a","heads":[["c-1",7]]}"#]);
    }

    #[test]
    fn a_large_batch_is_split_below_the_payload_limit_and_decodes_to_every_head() {
        // 3,000 pairs of about 150 bytes each: far more than one payload holds.
        let long = "x".repeat(130);
        let heads: HashMap<ConvId, i64> = (0..3_000)
            .map(|i| (conv(&format!("{long}-{i}")), 1_000_000_000 + i))
            .collect();
        let (payloads, oversized) = encode_payloads("gw-a", &heads);
        assert_eq!(oversized, 0);
        assert!(payloads.len() > 1);
        let mut seen = HashMap::new();
        for p in &payloads {
            assert!(
                p.len() <= NOTIFY_PAYLOAD_BYTES_MAX,
                "payload of {} bytes",
                p.len()
            );
            let decoded = decode_payload(p).expect("payload decodes");
            assert_eq!(decoded.origin, "gw-a");
            for (c, h) in decoded.heads {
                assert!(seen.insert(c, h).is_none(), "a pair sent twice");
            }
        }
        assert_eq!(seen, heads);
    }

    #[test]
    fn coalescing_keeps_the_highest_head_per_conversation() {
        let mut heads = HashMap::new();
        for (c, h) in [("a", 3), ("b", 1), ("a", 5), ("a", 4), ("b", 2)] {
            coalesce(&mut heads, (conv(c), h));
        }
        assert_eq!(heads, HashMap::from([(conv("a"), 5), (conv("b"), 2)]));
    }

    #[test]
    fn malformed_payloads_are_refused() {
        for bad in [
            "",
            "hello",
            r#"{"origin":"gw-a"}"#,
            r#"{"origin":"gw-a","heads":[["c-1"]]}"#,
            r#"{"origin":"gw-a","heads":[["c-1",-1]]}"#,
            r#"{"origin":"gw-a","heads":[["bad id",1]]}"#,
        ] {
            assert!(decode_payload(bad).is_none(), "accepted {bad:?}");
        }
    }

    #[test]
    fn backoff_doubles_up_to_its_maximum_and_resets() {
        let mut b = Backoff::new(100, 400);
        let steps: Vec<u64> = (0..4).map(|_| b.next_delay().as_millis() as u64).collect();
        assert!((50..=100).contains(&steps[0]));
        assert!((100..=200).contains(&steps[1]));
        assert!((200..=400).contains(&steps[2]));
        assert!((200..=400).contains(&steps[3]));
        b.reset();
        assert!(b.next_delay().as_millis() <= 100);
    }
}
