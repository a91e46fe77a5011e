//! The event bus: how committed events reach every gateway that may hold an interested device.
//!
//! An announcement is a hint, never the source of truth. It is made only after commit (P7), it
//! may be lost (a gateway repairs by reading the log), and it may be coalesced. The in-process
//! bus carries the full event so a single node pushes without reading the store again.

mod local;

pub use local::LocalBus;

use std::sync::Arc;

use parley_domain::{ConvId, Event};

/// One committed event, or the news that a conversation's head moved.
#[derive(Debug, Clone)]
pub struct Announcement {
    pub conv_id: ConvId,
    /// The head after the announced commit.
    pub head: i64,
    /// The committed event, when the bus carries payloads; gateways read the log otherwise.
    pub event: Option<Arc<Event>>,
}

/// A receiver of announcements. Lagging receivers lose announcements and must resync.
pub type Subscription = tokio::sync::broadcast::Receiver<Announcement>;

/// Announces committed events. `announce` never blocks the send path: implementations queue
/// and drop (a lost announcement is repaired by sync), never wait.
pub trait EventBus: Send + Sync + 'static {
    fn announce(&self, event: Arc<Event>);
    fn subscribe(&self) -> Subscription;
}
