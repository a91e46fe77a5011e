//! The event bus between many gateways through a NATS server (SPEC §10).
//!
//! As with `PgBus`, nothing here runs inside a write transaction:
//!
//! - [`NatsBus::announce`] and [`NatsBus::notify`] hand the full event or the notice to this
//!   node's subscribers at once and queue the event (a shared pointer) or the notice in a
//!   bounded queue;
//! - a publisher task (`publisher.rs`) drains what accumulated, coalesces it
//!   ([`crate::coalesce`]: the highest head of each conversation, and its events up to a bound
//!   per batch), groups it by subject ([`subjects`]) and publishes each group as payloads of
//!   at most [`NATS_PAYLOAD_BYTES_MAX`] bytes ([`crate::codec`]), with every event of at most
//!   [`crate::codec::EVENT_INLINE_BYTES_MAX`] bytes encoded; a larger one travels as its head;
//! - a receiver task (`receiver.rs`) turns other gateways' payloads into announcements of
//!   events (pushed by the fanout without reading the store when they follow what it pushed),
//!   of heads beyond them (read from the log) and notices, skipping this gateway's own;
//! - a watcher task follows the client's connection events: while disconnected the bus is
//!   [`degraded`](crate::EventBus::degraded); after a reconnect it publishes
//!   [`Announcement::Reconnected`](crate::Announcement::Reconnected), so the fanout reads every
//!   conversation it holds from the log (what other gateways announced meanwhile is lost: core
//!   NATS keeps nothing for absent subscribers).
//!
//! The client reconnects by itself, waiting [`crate::backoff`]'s jittered, doubling delays.
//! In this first step every gateway subscribes to every shard ([`subjects::ALL_SUBJECTS`]);
//! subscribing only to the shards of its connected devices' conversations is the next step.

mod publisher;
mod receiver;
pub mod subjects;

pub use tokio_util::sync::CancellationToken;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use parley_domain::Event;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::DropGuard;

use crate::backoff::Backoff;
use crate::coalesce::Outbound;
use crate::{BusError, EventBus, LocalBus, Notice, Subscription};

/// The NATS URL when none is configured: a server on this machine.
pub const NATS_URL_DEFAULT: &str = "nats://127.0.0.1:4222";
/// Largest payload. NATS refuses messages above the server's `max_payload` (1 MiB by default);
/// smaller payloads keep one slow subscriber's buffer, and a lost message, small.
pub const NATS_PAYLOAD_BYTES_MAX: usize = 64 * 1024;
/// Announcements waiting for the publisher; past it they are dropped, never waited for.
pub const NATS_QUEUE_LEN_MAX: usize = 65_536;
/// Longest gateway id, so that the id and one head or notice always fit in one payload.
pub const GATEWAY_ID_BYTES_MAX: usize = 128;
/// Longest wait for the first connection, so an unreachable server fails the start quickly.
pub const NATS_CONNECT_TIMEOUT_MS: u64 = 5_000;
/// Longest wait for the round trip that confirms the subscription after a reconnect.
pub const NATS_FLUSH_TIMEOUT_MS: u64 = 5_000;
/// First wait before a reconnect attempt.
pub const NATS_RECONNECT_BACKOFF_MS_MIN: u64 = 100;
/// Longest wait between two reconnect attempts: short enough that a restarted server is found
/// within seconds, long enough not to hammer it.
pub const NATS_RECONNECT_BACKOFF_MS_MAX: u64 = 2_000;
/// Shortest time between two publish batches, so a burst travels as a few batches.
pub const NATS_BATCH_INTERVAL_MS_MIN: u64 = 5;

/// Counters of the bus, for tests and logs. Every field only grows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NatsBusStats {
    /// Announcements not queued because the queue was full or the bus had stopped.
    pub dropped: u64,
    /// Payloads published.
    pub published: u64,
    /// Heads and notices that could not be published.
    pub lost: u64,
    /// Payloads of other gateways received.
    pub received: u64,
    /// This gateway's own payloads that came back and were skipped.
    pub own_ignored: u64,
    /// Payloads on the subjects that were not valid.
    pub malformed: u64,
    /// Times the client connected again after losing its connection.
    pub reconnects: u64,
}

#[derive(Default)]
struct Counters {
    dropped: AtomicU64,
    published: AtomicU64,
    lost: AtomicU64,
    received: AtomicU64,
    own_ignored: AtomicU64,
    malformed: AtomicU64,
    reconnects: AtomicU64,
}

fn bump(counter: &AtomicU64, by: u64) -> u64 {
    counter.fetch_add(by, Ordering::Relaxed) + by
}

/// The NATS event bus of one gateway. Cloning shares the bus.
#[derive(Clone)]
pub struct NatsBus {
    inner: Arc<Inner>,
}

struct Inner {
    gateway_id: String,
    local: LocalBus,
    queue: mpsc::Sender<Outbound>,
    counters: Arc<Counters>,
    connected: Arc<AtomicBool>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    _stop_on_drop: DropGuard,
}

impl NatsBus {
    /// Connects to `url`, subscribes to every shard and starts the tasks. It returns once the
    /// subscription is confirmed by the server, so payloads published from then on reach it.
    ///
    /// `gateway_id` must be unique among the gateways: payloads carrying it are skipped.
    pub async fn start(
        url: &str,
        gateway_id: String,
        shutdown: CancellationToken,
    ) -> Result<NatsBus, BusError> {
        if gateway_id.is_empty() || gateway_id.len() > GATEWAY_ID_BYTES_MAX {
            return Err(BusError::Config(format!(
                "gateway id must be 1 to {GATEWAY_ID_BYTES_MAX} bytes"
            )));
        }
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        let options = async_nats::ConnectOptions::new()
            .name(format!("parley {gateway_id}"))
            .connection_timeout(Duration::from_millis(NATS_CONNECT_TIMEOUT_MS))
            .reconnect_delay_callback(reconnect_delay)
            .event_callback(move |event| {
                let events_tx = events_tx.clone();
                async move {
                    // The watcher ends only at shutdown; an event after it is of no use.
                    let _ = events_tx.send(event);
                }
            });
        let connect = options.connect(url);
        let client =
            match tokio::time::timeout(Duration::from_millis(NATS_CONNECT_TIMEOUT_MS), connect)
                .await
            {
                Ok(Ok(client)) => client,
                Ok(Err(e)) => return Err(BusError::Unavailable(format!("NATS at {url}: {e}"))),
                Err(_) => {
                    return Err(BusError::Unavailable(format!(
                        "no connection to NATS at {url} within {NATS_CONNECT_TIMEOUT_MS} ms"
                    )))
                }
            };
        let subscriber = client
            .subscribe(subjects::ALL_SUBJECTS)
            .await
            .map_err(|e| BusError::Unavailable(format!("cannot subscribe on NATS: {e}")))?;
        flush(&client)
            .await
            .map_err(|e| BusError::Unavailable(format!("NATS did not confirm: {e}")))?;

        let stop = shutdown.child_token();
        let local = LocalBus::new();
        let counters = Arc::new(Counters::default());
        let connected = Arc::new(AtomicBool::new(true));
        let (queue, rx) = mpsc::channel(NATS_QUEUE_LEN_MAX);
        let publisher = publisher::Publisher {
            rx,
            client: client.clone(),
            gateway_id: gateway_id.clone(),
            counters: counters.clone(),
            stop: stop.clone(),
        };
        let receiver = receiver::Receiver {
            gateway_id: gateway_id.clone(),
            local: local.clone(),
            counters: counters.clone(),
            stop: stop.clone(),
        };
        let watcher = receiver::Watcher {
            client,
            local: local.clone(),
            counters: counters.clone(),
            connected: connected.clone(),
            stop: stop.clone(),
        };
        let tasks = vec![
            tokio::spawn(publisher.run()),
            tokio::spawn(receiver.run(subscriber)),
            tokio::spawn(watcher.run(events_rx)),
        ];
        tracing::info!(gateway_id, url, "nats event bus started");
        Ok(NatsBus {
            inner: Arc::new(Inner {
                gateway_id,
                local,
                queue,
                counters,
                connected,
                tasks: Mutex::new(tasks),
                _stop_on_drop: stop.drop_guard(),
            }),
        })
    }

    /// The id this bus puts on its payloads and skips on arrival.
    pub fn gateway_id(&self) -> &str {
        &self.inner.gateway_id
    }

    pub fn stats(&self) -> NatsBusStats {
        let c = &self.inner.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        NatsBusStats {
            dropped: get(&c.dropped),
            published: get(&c.published),
            lost: get(&c.lost),
            received: get(&c.received),
            own_ignored: get(&c.own_ignored),
            malformed: get(&c.malformed),
            reconnects: get(&c.reconnects),
        }
    }

    /// Waits until the tasks have ended, after the shutdown token was cancelled.
    pub async fn stopped(&self) {
        let tasks = match self.inner.tasks.lock() {
            Ok(mut tasks) => std::mem::take(&mut *tasks),
            Err(poisoned) => std::mem::take(&mut *poisoned.into_inner()),
        };
        for task in tasks {
            if let Err(e) = task.await {
                tracing::error!(error = %e, "nats event bus task failed");
            }
        }
    }

    fn queue(&self, entry: Outbound) {
        if self.inner.queue.try_send(entry).is_err() {
            // Logged at powers of two, so a stalled server yields a few lines, not one per write.
            let dropped = bump(&self.inner.counters.dropped, 1);
            if dropped.is_power_of_two() {
                tracing::warn!(
                    dropped_total = dropped,
                    "nats event bus queue full or stopped: announcements to other gateways dropped"
                );
            }
        }
    }
}

impl EventBus for NatsBus {
    fn kind(&self) -> &'static str {
        "nats"
    }

    fn announce(&self, event: Arc<Event>) {
        self.inner.local.announce(event.clone());
        self.queue(Outbound::Event(event));
    }

    fn notify(&self, notice: Notice) {
        self.inner.local.notify(notice.clone());
        self.queue(Outbound::Notice(notice));
    }

    fn subscribe(&self) -> Subscription {
        self.inner.local.subscribe()
    }

    fn degraded(&self) -> bool {
        !self.inner.connected.load(Ordering::Acquire)
    }
}

/// The wait before reconnect attempt `attempts`: [`Backoff`]'s doubling, jittered step.
fn reconnect_delay(attempts: usize) -> Duration {
    let mut backoff = Backoff::new(NATS_RECONNECT_BACKOFF_MS_MIN, NATS_RECONNECT_BACKOFF_MS_MAX);
    // The step doubles per attempt and stops at the maximum after a few, so this loop is short.
    for _ in 1..attempts.min(32) {
        backoff.next_delay();
    }
    backoff.next_delay()
}

/// A round trip to the server, bounded, so a subscription is known to be in place.
async fn flush(client: &async_nats::Client) -> Result<(), String> {
    match tokio::time::timeout(Duration::from_millis(NATS_FLUSH_TIMEOUT_MS), client.flush()).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {NATS_FLUSH_TIMEOUT_MS} ms")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Announcement;
    use chrono::DateTime;
    use parley_domain::{ConvId, EventKind, UserId};

    const NATS_SERVER_BIN: &str = "/usr/sbin/nats-server";
    const WAIT: Duration = Duration::from_secs(10);

    /// A private `nats-server` on a free port, killed when dropped.
    struct NatsServer(std::process::Child, u16);

    impl NatsServer {
        async fn start() -> NatsServer {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free port")
                .port();
            let child = std::process::Command::new(NATS_SERVER_BIN)
                .args(["-a", "127.0.0.1", "-p", &port.to_string()])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("nats-server starts");
            let deadline = tokio::time::Instant::now() + WAIT;
            while tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_err()
            {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "nats-server not listening"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            NatsServer(child, port)
        }

        fn url(&self) -> String {
            format!("nats://127.0.0.1:{}", self.1)
        }
    }

    impl Drop for NatsServer {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    fn message(conv_id: &ConvId, seq: i64, body: String) -> Arc<Event> {
        let ana = UserId::parse("u-ana").expect("valid user id");
        let mut event = Event::membership(
            conv_id,
            seq,
            EventKind::Join,
            &ana,
            &ana,
            DateTime::from_timestamp_micros(1_700_000_000_000_001).expect("valid time"),
        );
        event.kind = EventKind::Msg;
        event.subject_user = None;
        event.body = Some(body);
        Arc::new(event)
    }

    /// The next committed announcement of `conv_id` on `sub`, within [`WAIT`].
    async fn next_committed(sub: &mut Subscription, conv_id: &ConvId) -> crate::Committed {
        tokio::time::timeout(WAIT, async {
            loop {
                match sub.recv().await.expect("subscription open") {
                    Announcement::Committed(c) if &c.conv_id == conv_id => return c,
                    _ => continue,
                }
            }
        })
        .await
        .expect("an announcement within the wait")
    }

    #[tokio::test]
    async fn a_small_event_arrives_whole_and_a_large_one_as_its_head() {
        let server = NatsServer::start().await;
        let stop = CancellationToken::new();
        let a = NatsBus::start(&server.url(), "gw-a".into(), stop.clone())
            .await
            .expect("bus a starts");
        let b = NatsBus::start(&server.url(), "gw-b".into(), stop.clone())
            .await
            .expect("bus b starts");
        let mut on_b = b.subscribe();
        let conv_id = ConvId::parse("c-1").expect("valid conv id");

        let small = message(&conv_id, 1, "hello".into());
        a.announce(small.clone());
        let got = next_committed(&mut on_b, &conv_id).await;
        assert_eq!(got.head, 1);
        assert_eq!(
            got.event.as_deref(),
            Some(&*small),
            "the event itself travels"
        );

        let large = message(
            &conv_id,
            2,
            "x".repeat(crate::codec::EVENT_INLINE_BYTES_MAX),
        );
        a.announce(large);
        let got = next_committed(&mut on_b, &conv_id).await;
        assert_eq!((got.head, got.event.is_none()), (2, true), "a head alone");

        assert_eq!(b.stats().malformed, 0);
        assert_eq!(a.stats().lost, 0);
        stop.cancel();
        a.stopped().await;
        b.stopped().await;
    }

    #[test]
    fn reconnect_waits_grow_and_stay_bounded() {
        assert!(reconnect_delay(1) <= Duration::from_millis(NATS_RECONNECT_BACKOFF_MS_MIN));
        assert!(reconnect_delay(4) >= Duration::from_millis(NATS_RECONNECT_BACKOFF_MS_MIN * 4));
        assert!(reconnect_delay(1_000) <= Duration::from_millis(NATS_RECONNECT_BACKOFF_MS_MAX));
    }
}
