//! The history of one schedule, recorded as it happens: one clock, one lock, so the order of
//! the records is the order of the events (docs/HISTORY.md).

use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use parley_history::Record;

/// The records of one schedule, in the order they happened.
pub struct Recorder {
    started: Instant,
    records: Mutex<Vec<Record>>,
}

impl Default for Recorder {
    fn default() -> Self {
        Self::new()
    }
}

impl Recorder {
    pub fn new() -> Recorder {
        Recorder {
            started: Instant::now(),
            records: Mutex::new(Vec::new()),
        }
    }

    /// Milliseconds since the recorder started.
    pub fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// Appends the record `make` builds from the current time; the time is read under the
    /// lock, so times never go back along the lines.
    pub fn record(&self, make: impl FnOnce(u64) -> Record) {
        let mut records = self.records.lock().unwrap_or_else(PoisonError::into_inner);
        let time_ms = self.now_ms();
        records.push(make(time_ms));
    }

    /// Every record so far.
    pub fn records(&self) -> Vec<Record> {
        self.records
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}
