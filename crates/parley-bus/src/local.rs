//! The in-process bus of a single node.

use std::sync::Arc;

use parley_domain::Event;
use tokio::sync::broadcast;

use crate::{Announcement, EventBus, Subscription};

/// Announcements buffered per subscriber before the slowest one starts losing them.
pub const LOCAL_BUS_QUEUE_LEN_MAX: usize = 65_536;

#[derive(Clone)]
pub struct LocalBus {
    tx: broadcast::Sender<Announcement>,
}

impl LocalBus {
    pub fn new() -> Self {
        let (tx, _) = broadcast::channel(LOCAL_BUS_QUEUE_LEN_MAX);
        Self { tx }
    }

    /// Delivers an announcement made elsewhere (e.g. by another gateway, without payload) to this
    /// node's subscribers, so a bus between nodes can reuse the in-process fanout.
    pub fn publish(&self, announcement: Announcement) {
        // No subscriber is not an error: nobody is online.
        let _ = self.tx.send(announcement);
    }
}

impl Default for LocalBus {
    fn default() -> Self {
        Self::new()
    }
}

impl EventBus for LocalBus {
    fn announce(&self, event: Arc<Event>) {
        self.publish(Announcement {
            conv_id: event.conv_id.clone(),
            head: event.seq,
            event: Some(event),
        });
    }

    fn subscribe(&self) -> Subscription {
        self.tx.subscribe()
    }
}
