//! The realtime gateway of one node: live WebSocket connections (`hub`), the fanout of
//! committed events to them (`fanout`) and of the bus's notices (`notices`), the socket
//! protocol (`socket`, `frames`), and the gateway's lease in the store.

pub mod fanout;
pub mod frames;
pub mod hints;
pub mod hub;
pub mod notices;
pub mod origin;
pub mod socket;

use std::sync::Arc;
use std::time::Duration;

use parley_bus::EventBus;
use parley_store::Store;
use tokio_util::sync::CancellationToken;
use tokio_util::task::{task_tracker::TaskTrackerToken, TaskTracker};

use crate::metrics::Metrics;
use hints::Hints;
use hub::{CloseReason, Hub};

/// How long a gateway's lease lasts; routes of a gateway whose lease ran out may be reaped.
pub const GATEWAY_LEASE_MS: i64 = 30_000;
/// How often the lease is renewed: well inside its length, so one failed renewal is harmless.
const GATEWAY_LEASE_RENEW_MS: u64 = 10_000;

pub struct Gateway {
    id: String,
    metrics: Arc<Metrics>,
    hub: Arc<Hub>,
    hints: Arc<Hints>,
    connections: TaskTracker,
}

impl Gateway {
    /// A gateway named `id` whose pull hints are coalesced over `hint_interval`, counting
    /// into `metrics`.
    pub fn new(id: String, hint_interval: Duration, metrics: Arc<Metrics>) -> Self {
        Self {
            id,
            hub: Arc::new(Hub::default()),
            hints: Arc::new(Hints::new(hint_interval, metrics.hints.clone())),
            metrics,
            connections: TaskTracker::new(),
        }
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

    /// Starts the fanout, the hint flusher and the lease renewal; all stop when `stop` is
    /// cancelled.
    pub fn start(&self, store: Arc<dyn Store>, bus: Arc<dyn EventBus>, stop: CancellationToken) {
        let fanout = fanout::Fanout::new(
            self.id.clone(),
            store.clone(),
            self.hub.clone(),
            self.hints.clone(),
            self.metrics.pushes.clone(),
        );
        tokio::spawn(fanout.run(bus.subscribe(), stop.clone()));
        tokio::spawn(self.hints.clone().run(stop.clone()));
        let id = self.id.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_millis(GATEWAY_LEASE_RENEW_MS));
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = every.tick() => {
                        if let Err(e) = store.renew_gateway(&id, GATEWAY_LEASE_MS).await {
                            tracing::warn!(error = %e, "gateway lease renewal failed");
                        }
                    }
                }
            }
        });
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
