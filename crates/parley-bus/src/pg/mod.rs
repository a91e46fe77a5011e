//! The event bus between a few gateway nodes on one PostgreSQL database (SPEC §10), built on
//! LISTEN/NOTIFY.
//!
//! Nothing here runs inside a write transaction. A transaction that calls `pg_notify` takes
//! PostgreSQL's notify queue lock at commit and holds it until the commit is durable, so every
//! committing transaction that notifies waits for the previous one (SPEC §4; measured in
//! `docs/PERFORMANCE.md`). Instead, after commit:
//!
//! - [`PgBus::announce`] and [`PgBus::notify`] hand the full event or the notice to this
//!   node's subscribers at once (an in-process [`LocalBus`]), so the gateway that committed
//!   pushes without reading the store again, and queue `(conv_id, head)` or the notice in a
//!   bounded queue;
//! - a notifier task (`notifier.rs`) drains whatever accumulated since its previous batch (at
//!   least [`NOTIFY_BATCH_INTERVAL_MS_MIN`] apart), keeps the highest head per conversation and
//!   every notice ([`crate::coalesce`]), and sends the lot with one `pg_notify` statement on its
//!   own connection, split into payloads of at most [`NOTIFY_PAYLOAD_BYTES_MAX`] bytes
//!   ([`crate::codec`]). That connection commits asynchronously (`synchronous_commit = off`):
//!   a notification is a hint that no crash needs to preserve, so its commit does not wait
//!   for, or add, a WAL flush;
//! - a listener task (`listener.rs`) turns the notifications of other gateways into head-only
//!   announcements (`event: None`), whose subscribers read the log up to the head, and into
//!   their notices.
//!
//! Every loss on this path (a full queue, a failed notification, notifications sent while the
//! listener was reconnecting) loses only a push, a read frame or the closing of a revoked
//! device's socket on another gateway; sync repairs the first two, and a revoked token is
//! refused at its next connect. A later head of the same conversation also covers an earlier
//! lost one, because a gateway reads up to the head.

mod connect;
mod listener;
mod notifier;
mod stats;

pub use stats::PgBusStats;
/// Re-exported so a caller of [`PgBus::start`] needs no tokio-util dependency of its own and
/// always passes the type the bus expects.
pub use tokio_util::sync::CancellationToken;

use std::sync::{Arc, Mutex};

use parley_domain::Event;
use sqlx::PgPool;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::DropGuard;

use crate::backoff::Backoff;
use crate::coalesce::Outbound;
use crate::{BusError, EventBus, LocalBus, Notice, Subscription};
use connect::{connect, listen, listen_options, notify_options};
use listener::Listener;
use notifier::Notifier;
use stats::{bump, Counters};

/// The channel every gateway of one database notifies and listens on.
pub const NOTIFY_CHANNEL: &str = "parley_events";
/// Announcements waiting for the notifier. Sized for several seconds of a single node's send
/// rate, so only a stalled database connection fills it; then announcements are dropped rather
/// than blocking the write path or growing memory without bound.
pub const NOTIFY_QUEUE_LEN_MAX: usize = 65_536;
/// Largest notification payload. PostgreSQL refuses payloads of 8,000 bytes or more; the margin
/// keeps us clear of that limit whatever the encoding details.
pub const NOTIFY_PAYLOAD_BYTES_MAX: usize = 7_900;
/// Longest gateway id, so that the id and at least one `[conv_id, head]` pair or one notice
/// always fit in one payload.
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
    queue: mpsc::Sender<Outbound>,
    counters: Arc<Counters>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// Cancels the bus's own token when the last handle goes, so the tasks do not outlive it.
    _stop_on_drop: DropGuard,
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
    ) -> Result<PgBus, BusError> {
        if gateway_id.is_empty() || gateway_id.len() > GATEWAY_ID_BYTES_MAX {
            return Err(BusError::Config(format!(
                "gateway id must be 1 to {GATEWAY_ID_BYTES_MAX} bytes"
            )));
        }
        let options = pool.connect_options();
        let notify_conn = connect(&notify_options(&options, &gateway_id)).await?;
        let listen_options = listen_options(&options, &gateway_id);
        let listener = listen(&listen_options).await?;

        let stop = shutdown.child_token();
        let local = LocalBus::new();
        let counters = Arc::new(Counters::default());
        let (queue, rx) = mpsc::channel(NOTIFY_QUEUE_LEN_MAX);
        let notifier = Notifier {
            rx,
            conn: Some(notify_conn),
            options,
            gateway_id: gateway_id.clone(),
            counters: counters.clone(),
            stop: stop.clone(),
        };
        let receiver = Listener {
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

    /// Queues an announcement for the other gateways, or drops it when the queue is full.
    fn queue(&self, entry: Outbound) {
        let counters = &self.inner.counters;
        match self.inner.queue.try_send(entry) {
            Ok(()) => {
                bump(&counters.queued, 1);
            }
            Err(_) => {
                // Logged at powers of two, so a stalled database yields a few lines, not one
                // per write.
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
}

impl EventBus for PgBus {
    fn kind(&self) -> &'static str {
        "postgres"
    }

    fn announce(&self, event: Arc<Event>) {
        let entry = Outbound::Head(event.conv_id.clone(), event.seq);
        self.inner.local.announce(event);
        self.queue(entry);
    }

    fn notify(&self, notice: Notice) {
        self.inner.local.notify(notice.clone());
        self.queue(Outbound::Notice(notice));
    }

    fn subscribe(&self) -> Subscription {
        self.inner.local.subscribe()
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
