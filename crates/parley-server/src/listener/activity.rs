//! What one connection is doing, as far as its time limits and its eviction are concerned:
//! shared by the socket wrapper (which counts reads), the head timer (which knows when the
//! server waits for a request head) and the admission registry (which picks idle connections
//! to close when the cap is reached).
//!
//! Everything here is a relaxed atomic: each value is written by the connection's own task
//! and only read elsewhere to choose an eviction, where a stale value costs nothing.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

pub struct Activity {
    accepted: Instant,
    /// Bytes read from the socket so far (wrapping): a change tells a started head from idle.
    reads: AtomicU64,
    /// Head timers alive; the server waits for a request head while one is.
    head_waits: AtomicU32,
    /// When the current wait for a head began, in milliseconds after `accepted`.
    waiting_since_ms: AtomicU64,
    /// Whether a request head ever arrived in full.
    served: AtomicBool,
    /// Set once the connection was asked to leave room for a newer one.
    evicting: AtomicBool,
    evict: Notify,
    /// Position in the admission registry, kept by the registry under its lock.
    pub(super) slot: AtomicUsize,
}

impl Activity {
    pub fn new() -> Self {
        Self {
            accepted: Instant::now(),
            reads: AtomicU64::new(0),
            head_waits: AtomicU32::new(0),
            waiting_since_ms: AtomicU64::new(0),
            served: AtomicBool::new(false),
            evicting: AtomicBool::new(false),
            evict: Notify::new(),
            slot: AtomicUsize::new(usize::MAX),
        }
    }

    pub fn accepted(&self) -> Instant {
        self.accepted
    }

    pub fn count_read(&self, bytes: usize) {
        self.reads.fetch_add(bytes as u64, Relaxed);
    }

    pub fn reads(&self) -> u64 {
        self.reads.load(Relaxed)
    }

    /// Whether a request head ever arrived in full on this connection.
    pub fn served(&self) -> bool {
        self.served.load(Relaxed)
    }

    /// The server began waiting for a request head.
    pub fn head_wait_began(&self) {
        let since = Instant::now().saturating_duration_since(self.accepted);
        self.waiting_since_ms
            .store(since.as_millis() as u64, Relaxed);
        self.head_waits.fetch_add(1, Relaxed);
    }

    /// The wait for a head ended: the head arrived, or the connection is going away.
    pub fn head_wait_ended(&self) {
        self.served.store(true, Relaxed);
        self.head_waits.fetch_sub(1, Relaxed);
    }

    /// No request is in progress: the server waits for the next head. A connection in this
    /// state can be closed without losing anyone's request.
    pub fn waiting_for_head(&self) -> bool {
        self.head_waits.load(Relaxed) > 0
    }

    /// When the current wait for a head began; meaningful while [`Self::waiting_for_head`].
    pub fn waiting_since(&self) -> Instant {
        self.accepted + Duration::from_millis(self.waiting_since_ms.load(Relaxed))
    }

    /// Asks the connection to close if it is still idle. Answers false if it was asked
    /// already, so one eviction is never counted twice.
    pub fn ask_to_leave(&self) -> bool {
        if self.evicting.swap(true, Relaxed) {
            return false;
        }
        self.evict.notify_one();
        true
    }

    pub fn is_evicting(&self) -> bool {
        self.evicting.load(Relaxed)
    }

    /// Completes when the connection was asked to leave.
    pub async fn asked_to_leave(&self) {
        self.evict.notified().await
    }
}

impl Default for Activity {
    fn default() -> Self {
        Self::new()
    }
}
