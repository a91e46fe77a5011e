//! The realtime gateway of one node: live WebSocket connections (`hub`), the fanout of
//! committed events to them (`fanout`) and of the bus's notices (`notices`), the socket
//! protocol (`socket`, `frames`), and the gateway's lease in the store.

pub mod ephemeral;
pub mod fanout;
pub mod frames;
pub mod hints;
pub mod hub;
pub mod lease;
pub mod notices;
pub mod origin;
pub mod out_queue;
pub mod socket;
pub mod window;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use parley_bus::EventBus;
use parley_store::Store;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::{task_tracker::TaskTrackerToken, TaskTracker};

use crate::metrics::Metrics;
use hints::Hints;
use hub::{CloseReason, Hub};
use lease::Lease;
use window::EventWindow;

pub struct Gateway {
    id: String,
    metrics: Arc<Metrics>,
    hub: Arc<Hub>,
    hints: Arc<Hints>,
    /// The newest events of pull conversations, answering fetches after hints.
    window: Arc<EventWindow>,
    connections: TaskTracker,
    lease: Arc<Lease>,
    /// Typing frames let through per device and conversation.
    typing: ephemeral::TypingLimiter,
    /// Route changes on their way to presence notices.
    presence: Arc<ephemeral::PresenceQueue>,
    /// The renewal and reaper loop, stopped and awaited before the lease is released so no
    /// renewal can bring the row back after it.
    lease_task: Mutex<Option<(CancellationToken, JoinHandle<()>)>>,
}

impl Gateway {
    /// A gateway named `id` with a lease of `lease_ms`, whose pull hints are coalesced over
    /// `hint_interval`, counting into `metrics`.
    pub fn new(id: String, lease_ms: u64, hint_interval: Duration, metrics: Arc<Metrics>) -> Self {
        Self {
            id,
            hub: Arc::new(Hub::default()),
            hints: Arc::new(Hints::new(hint_interval, metrics.hints.clone())),
            window: Arc::new(EventWindow::new(metrics.window_counters())),
            metrics,
            connections: TaskTracker::new(),
            lease: Arc::new(Lease::new(lease_ms)),
            typing: ephemeral::TypingLimiter::default(),
            presence: Arc::default(),
            lease_task: Mutex::new(None),
        }
    }

    /// This gateway's lease in the store.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    pub fn typing(&self) -> &ephemeral::TypingLimiter {
        &self.typing
    }

    pub fn presence(&self) -> &Arc<ephemeral::PresenceQueue> {
        &self.presence
    }

    pub fn window(&self) -> &Arc<EventWindow> {
        &self.window
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn hub(&self) -> &Arc<Hub> {
        &self.hub
    }

    /// A token held for the life of one connection; `None` once shutdown began.
    pub fn enter(&self) -> Option<TaskTrackerToken> {
        (!self.connections.is_closed()).then(|| self.connections.token())
    }

    /// Starts the fanout, the hint flusher and the lease loop (renewal and reaper); the first
    /// two stop when `stop` is cancelled, the lease loop when the lease is released.
    pub fn start(&self, store: Arc<dyn Store>, bus: Arc<dyn EventBus>, stop: CancellationToken) {
        // Only the single-node bus brings every commit through this process before its ack.
        self.window.set_enabled(bus.kind() == "local");
        let fanout = fanout::Fanout::new(
            self.id.clone(),
            store.clone(),
            self.hub.clone(),
            self.hints.clone(),
            self.window.clone(),
            self.metrics.pushes.clone(),
        );
        tokio::spawn(fanout.run(bus.subscribe(), stop.clone()));
        self.presence
            .start(store.clone(), bus.clone(), stop.clone());
        tokio::spawn(self.hints.clone().run(stop));
        let lease_stop = CancellationToken::new();
        let task = tokio::spawn(self.lease.clone().run(
            store,
            self.id.clone(),
            self.metrics.clone(),
            self.presence.clone(),
            lease_stop.clone(),
        ));
        *self
            .lease_task
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some((lease_stop, task));
    }

    /// The last step of a drain: stops the lease loop, then deletes this gateway's row and its
    /// remaining routes, so other gateways need not wait for the lease to expire.
    pub async fn release_lease(&self, store: &dyn Store) {
        let task = self
            .lease_task
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some((stop, task)) = task {
            stop.cancel();
            if let Err(e) = task.await {
                tracing::warn!(error = %e, "the lease task failed");
            }
        }
        self.lease.release(store, &self.id).await;
    }

    /// Refuses new connections and asks every open one to close with 1001 once its in-flight
    /// requests are answered.
    pub fn begin_shutdown(&self) {
        self.connections.close();
        self.hub.close_all(CloseReason::Shutdown);
    }

    /// Waits until every connection ended, at most `wait`.
    pub async fn wait_closed(&self, wait: Duration) {
        let _ = tokio::time::timeout(wait, self.connections.wait()).await;
    }
}
