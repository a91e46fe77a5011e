//! The server's Prometheus metrics: one registry per `AppState`, no globals, so every server a
//! test starts counts on its own. Every name starts with `parley_`; `docs/METRICS.md` lists
//! them. `GET /metrics` encodes the registry in the text exposition format (OpenMetrics).

mod send_outcome;
mod store_observer;

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

pub use send_outcome::SendOutcome;
pub use store_observer::StoreMetrics;

/// One label pair, such as `outcome="written"`; every label value is a fixed word of the code,
/// never a client's input, so no family can grow without bound.
pub type Label = [(&'static str, &'static str); 1];

/// The content type of the text exposition format `encode` writes.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Smallest bucket of the latency histograms: 100 µs, below a loopback round trip.
const LATENCY_BUCKET_START_S: f64 = 0.000_1;
/// Latency buckets double from the start: 100 µs to about 3.3 s in 16 buckets.
const LATENCY_BUCKETS_LEN: u16 = 16;
/// Smallest bucket of the notification latency: 1 ms; notifications wait for coalescing, so
/// their buckets reach further than the request latencies'.
const PUSH_BUCKET_START_S: f64 = 0.001;
/// Notification latency buckets double from 1 ms to about 131 s in 18 buckets.
const PUSH_BUCKETS_LEN: u16 = 18;
/// Batch size buckets double from 1 to 128, past the store's `SEND_BATCH_LEN_MAX` (64).
const BATCH_BUCKETS_LEN: u16 = 8;

/// Every metric of one server. Clones of the fields share their values with the registry.
pub struct Metrics {
    registry: Registry,
    /// Sends by outcome (`SendOutcome`), over HTTP and WebSocket.
    pub sends: Family<Label, Counter>,
    /// From a send accepted (parsed, within its rate) to its ack, written or replayed.
    pub send_ack_seconds: Histogram,
    /// Sends per transaction of the store's batched send path.
    pub store_send_batch_size: Histogram,
    /// Wait for a pooled database connection.
    pub store_pool_wait_seconds: Histogram,
    /// Event frames queued to connections.
    pub pushes: Counter,
    /// Hint frames queued to connections (pull conversations).
    pub hints: Counter,
    /// Events-after reads by what answered them: `hit` (the gateway's event window) or
    /// `miss` (the store).
    pub window_fetches: Family<Label, Counter>,
    /// WebSocket connections closed, by reason (`too_slow` is close code 4008).
    pub ws_closed: Family<Label, Counter>,
    /// Open connections by kind: `http` (accepted TCP connections of the main listener) and
    /// `websocket` (upgraded connections being served).
    pub open_connections: Family<Label, Gauge>,
    /// Device routes claimed by new WebSocket connections.
    pub route_claims: Counter,
    /// Route claims that displaced an older connection of the same device, on any gateway.
    pub route_kicks: Counter,
    /// Routes of expired gateways deleted by this gateway's reaper.
    pub routes_reaped: Counter,
    /// Runs of the retention job.
    pub purge_runs: Counter,
    /// Events deleted by the retention purge.
    pub purge_events_deleted: Counter,
    /// Tombstones written by the retention purge.
    pub purge_tombstones_written: Counter,
    /// Tombstones deleted after their time to live.
    pub purge_tombstones_expired: Counter,
    /// Requests refused by the rate limiter, by kind (`send`, `admin`, and `login` for the
    /// password throttle of `accounts::throttle`).
    pub rate_limited: Family<Label, Counter>,
    /// Password verifications run (argon2), the dummy ones for unknown users included.
    pub password_verifications: Counter,
    /// Offline notifications by outcome: `delivered`, `retry`, `gone`, `refused`, `dropped`
    /// (read, delivered over a socket, or the message gone), `expired` (out of attempts).
    pub push_notifications: Family<Label, Counter>,
    /// From a message's commit to the push service accepting its notification, coalescing
    /// wait included.
    pub push_commit_to_send_seconds: Histogram,
    /// From a search's turn to its answer: the store's statement and the snippets.
    pub search_seconds: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let latency = || {
            Histogram::new(exponential_buckets(
                LATENCY_BUCKET_START_S,
                2.0,
                LATENCY_BUCKETS_LEN,
            ))
        };
        let metrics = Self {
            registry: Registry::default(),
            sends: Family::default(),
            send_ack_seconds: latency(),
            store_send_batch_size: Histogram::new(exponential_buckets(1.0, 2.0, BATCH_BUCKETS_LEN)),
            store_pool_wait_seconds: latency(),
            pushes: Counter::default(),
            hints: Counter::default(),
            window_fetches: Family::default(),
            ws_closed: Family::default(),
            open_connections: Family::default(),
            route_claims: Counter::default(),
            route_kicks: Counter::default(),
            routes_reaped: Counter::default(),
            purge_runs: Counter::default(),
            purge_events_deleted: Counter::default(),
            purge_tombstones_written: Counter::default(),
            purge_tombstones_expired: Counter::default(),
            rate_limited: Family::default(),
            password_verifications: Counter::default(),
            push_notifications: Family::default(),
            push_commit_to_send_seconds: Histogram::new(exponential_buckets(
                PUSH_BUCKET_START_S,
                2.0,
                PUSH_BUCKETS_LEN,
            )),
            search_seconds: latency(),
        };
        metrics.registered()
    }

    /// The hit and miss counters of the event window, shared with the registry.
    pub fn window_counters(&self) -> crate::gateway::window::WindowCounters {
        // One statement each: the family's read guard lives to the end of its statement, and a
        // second `get_or_create` inside it would wait for a write lock behind that guard.
        let hits = self
            .window_fetches
            .get_or_create(&[("outcome", "hit")])
            .clone();
        let misses = self
            .window_fetches
            .get_or_create(&[("outcome", "miss")])
            .clone();
        crate::gateway::window::WindowCounters { hits, misses }
    }

    fn registered(mut self) -> Self {
        let r = &mut self.registry;
        r.register("parley_sends", "Sends by outcome", self.sends.clone());
        r.register(
            "parley_password_verifications",
            "Password verifications run, against a stored or the dummy hash",
            self.password_verifications.clone(),
        );
        r.register(
            "parley_push_notifications",
            "Offline notifications by outcome",
            self.push_notifications.clone(),
        );
        r.register(
            "parley_push_commit_to_send_seconds",
            "Time from a message's commit to the push service accepting its notification",
            self.push_commit_to_send_seconds.clone(),
        );
        r.register(
            "parley_search_seconds",
            "Time to answer a message search, from its turn among the node's searches",
            self.search_seconds.clone(),
        );
        r.register(
            "parley_send_ack_seconds",
            "Time from a send accepted to its ack",
            self.send_ack_seconds.clone(),
        );
        r.register(
            "parley_store_send_batch_size",
            "Sends committed per transaction of the batched send path",
            self.store_send_batch_size.clone(),
        );
        r.register(
            "parley_store_pool_wait_seconds",
            "Wait for a pooled database connection",
            self.store_pool_wait_seconds.clone(),
        );
        r.register(
            "parley_pushes",
            "Event frames queued to connections",
            self.pushes.clone(),
        );
        r.register(
            "parley_window_fetches",
            "Events-after reads answered by the gateway's event window (hit) or the store (miss)",
            self.window_fetches.clone(),
        );
        r.register(
            "parley_hints",
            "Hint frames queued to connections",
            self.hints.clone(),
        );
        r.register(
            "parley_ws_closed",
            "WebSocket connections closed, by reason",
            self.ws_closed.clone(),
        );
        r.register(
            "parley_open_connections",
            "Open connections by kind",
            self.open_connections.clone(),
        );
        r.register(
            "parley_route_claims",
            "Device routes claimed by new WebSocket connections",
            self.route_claims.clone(),
        );
        r.register(
            "parley_route_kicks",
            "Route claims that displaced an older connection of the device",
            self.route_kicks.clone(),
        );
        r.register(
            "parley_routes_reaped",
            "Routes of expired gateways deleted by this gateway's reaper",
            self.routes_reaped.clone(),
        );
        r.register(
            "parley_purge_runs",
            "Runs of the retention job",
            self.purge_runs.clone(),
        );
        r.register(
            "parley_purge_events_deleted",
            "Events deleted by the retention purge",
            self.purge_events_deleted.clone(),
        );
        r.register(
            "parley_purge_tombstones_written",
            "Tombstones written by the retention purge",
            self.purge_tombstones_written.clone(),
        );
        r.register(
            "parley_purge_tombstones_expired",
            "Tombstones deleted after their time to live",
            self.purge_tombstones_expired.clone(),
        );
        r.register(
            "parley_rate_limited",
            "Requests refused by the rate limiter, by kind",
            self.rate_limited.clone(),
        );
        // The label values a scrape should show at 0 before the first event, so a rate over
        // them is defined from the start.
        for kind in ["http", "websocket"] {
            let _ = self.open_connections.get_or_create(&[("kind", kind)]);
        }
        for outcome in SendOutcome::ALL {
            let _ = self.sends.get_or_create(&outcome.label());
        }
        self
    }

    /// Counts one send's outcome.
    pub fn send(&self, outcome: SendOutcome) {
        self.sends.get_or_create(&outcome.label()).inc();
    }

    pub fn send_acked(&self, elapsed: Duration) {
        self.send_ack_seconds.observe(elapsed.as_secs_f64());
    }

    /// The open connections gauge of `kind` (`http` or `websocket`).
    pub fn open(&self, kind: &'static str) -> Gauge {
        self.open_connections
            .get_or_create(&[("kind", kind)])
            .clone()
    }

    /// The refusal counter of one rate limit kind.
    pub fn rate_limited(&self, kind: &'static str) -> Counter {
        self.rate_limited.get_or_create(&[("kind", kind)]).clone()
    }

    pub fn ws_closed(&self, reason: &'static str) {
        self.ws_closed.get_or_create(&[("reason", reason)]).inc();
    }

    /// The registry in the text exposition format.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing to a `String` cannot fail; an error would be a bug of the encoder, and an
        // empty scrape is then what the scraper sees.
        if let Err(e) = encode(&mut text, &self.registry) {
            tracing::warn!(error = %e, "metrics encoding failed");
        }
        text
    }

    /// The store's side: pool waits and batch sizes (`Store::observe`).
    pub fn store_observer(self: &Arc<Self>) -> Arc<StoreMetrics> {
        Arc::new(StoreMetrics::new(
            self.store_send_batch_size.clone(),
            self.store_pool_wait_seconds.clone(),
        ))
    }
}
