//! The store's reports (`parley_store::StoreObserver`) recorded into the server's histograms.

use std::time::Duration;

use parley_store::StoreObserver;
use prometheus_client::metrics::histogram::Histogram;

pub struct StoreMetrics {
    batch_size: Histogram,
    pool_wait_seconds: Histogram,
}

impl StoreMetrics {
    pub fn new(batch_size: Histogram, pool_wait_seconds: Histogram) -> Self {
        Self {
            batch_size,
            pool_wait_seconds,
        }
    }
}

impl StoreObserver for StoreMetrics {
    fn send_batch(&self, sends: usize) {
        self.batch_size.observe(sends as f64);
    }

    fn pool_wait(&self, wait: Duration) {
        self.pool_wait_seconds.observe(wait.as_secs_f64());
    }
}
