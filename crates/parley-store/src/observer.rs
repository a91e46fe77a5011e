//! What the store reports about its own work to whoever runs it, without knowing who that is:
//! the server turns it into metrics, and the store depends on no metrics crate.

use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

/// Told of the store's internal work as it happens. Calls come from the store's request path,
/// so an implementation must not block: a counter update, not a log line.
pub trait StoreObserver: Send + Sync {
    /// A transaction of the batched send path committed (or failed) `sends` sends together;
    /// a lone send is a batch of one.
    fn send_batch(&self, sends: usize);
    /// A request waited `wait` for a pooled connection (the wait is measured whether or not a
    /// connection was obtained in time).
    fn pool_wait(&self, wait: Duration);
}

/// The observer a store reports to, which the server sets once after the store was opened.
/// Until then reports go nowhere. Clones share the one slot.
#[derive(Clone, Default)]
pub(crate) struct ObserverSlot(Arc<RwLock<Option<Arc<dyn StoreObserver>>>>);

impl ObserverSlot {
    pub(crate) fn set(&self, observer: Arc<dyn StoreObserver>) {
        // A poisoned slot still holds a whole `Option`: the write that panicked was a swap.
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = Some(observer);
    }

    fn get(&self) -> Option<Arc<dyn StoreObserver>> {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(crate) fn send_batch(&self, sends: usize) {
        if let Some(observer) = self.get() {
            observer.send_batch(sends);
        }
    }

    pub(crate) fn pool_wait(&self, wait: Duration) {
        if let Some(observer) = self.get() {
            observer.pool_wait(wait);
        }
    }
}
