//! Hints of pull conversations (SPEC §8), coalesced per connection and conversation.
//!
//! The first hint after a quiet interval goes out at once, so a lone message in a large group
//! is announced without delay. Hints that follow within the interval only raise a pending
//! head; when the interval since the last hint has passed, the pending head goes out. So a
//! device gets at most one hint per conversation per interval, and the last hint of a burst is
//! always sent and carries the head after the burst.
//!
//! Each (connection, conversation) pair has one slot while it is active and exactly one entry
//! in a deadline queue. Every deadline is its enqueue time plus the same interval, so the
//! queue is ordered by construction and one task serves it from the front. A slot whose
//! deadline passes with nothing pending is dropped: memory follows the pairs hinted within the
//! last interval, and is capped at `HINT_SLOTS_MAX`.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use parley_domain::ConvId;
use prometheus_client::metrics::counter::Counter;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::frames;
use super::hub::ConnHandle;

/// Most (connection, conversation) pairs coalesced at once. Past it a hint is sent without
/// coalescing: more frames, never a lost one.
pub const HINT_SLOTS_MAX: usize = 200_000;

type Key = (String, ConvId);

struct Slot {
    conn: Arc<ConnHandle>,
    /// The newest head hinted since the last hint went out, if any.
    pending: Option<i64>,
}

#[derive(Default)]
struct Inner {
    slots: HashMap<Key, Slot>,
    /// One entry per slot: when its interval ends. Deadlines never decrease front to back.
    due: VecDeque<(Instant, Key)>,
}

pub struct Hints {
    interval: Duration,
    inner: Mutex<Inner>,
    /// Wakes the flusher when the queue gets its first entry.
    wake: Notify,
    /// Hint frames queued (`parley_hints_total`).
    sent: Counter,
}

impl Hints {
    /// Coalesces over `interval` and counts each hint sent into `sent`.
    pub fn new(interval: Duration, sent: Counter) -> Self {
        Self {
            interval,
            inner: Mutex::new(Inner::default()),
            wake: Notify::new(),
            sent,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // The data stays consistent between statements; a panic elsewhere must not stop hints.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Tells `conn` that `conv_id` has events up to `head`, now or at the end of the current
    /// interval.
    pub fn hint(&self, conn: &Arc<ConnHandle>, conv_id: &ConvId, head: i64) {
        let send_now = {
            let mut inner = self.lock();
            let key = (conn.conn_id.clone(), conv_id.clone());
            if let Some(slot) = inner.slots.get_mut(&key) {
                slot.pending = Some(slot.pending.map_or(head, |p| p.max(head)));
                false
            } else {
                if inner.slots.len() < HINT_SLOTS_MAX {
                    // `now` is read under the lock, so deadlines enter the queue in order.
                    let deadline = Instant::now() + self.interval;
                    inner.slots.insert(
                        key.clone(),
                        Slot {
                            conn: conn.clone(),
                            pending: None,
                        },
                    );
                    if inner.due.is_empty() {
                        self.wake.notify_one();
                    }
                    inner.due.push_back((deadline, key));
                }
                true
            }
        };
        if send_now {
            self.sent.inc();
            conn.push(frames::hint(conv_id.as_str(), head));
        }
    }

    /// Pairs currently coalesced; for tests and metrics.
    pub fn active_slots(&self) -> usize {
        self.lock().slots.len()
    }

    /// Sends pending hints as their intervals end, until `stop`.
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        loop {
            let next = self.lock().due.front().map(|(deadline, _)| *deadline);
            match next {
                None => tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = self.wake.notified() => continue,
                },
                Some(deadline) => tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep_until(deadline) => {}
                },
            }
            for (conn, conv_id, head) in self.take_due() {
                self.sent.inc();
                conn.push(frames::hint(conv_id.as_str(), head));
            }
        }
    }

    /// Ends every interval that is over: a pending head is answered with the hint to send and
    /// a new interval; a slot with nothing pending is dropped.
    fn take_due(&self) -> Vec<(Arc<ConnHandle>, ConvId, i64)> {
        let mut out = Vec::new();
        let mut guard = self.lock();
        // Read under the lock like in `hint`, so new deadlines still enter the queue in order.
        let now = Instant::now();
        let Inner { slots, due } = &mut *guard;
        // Each pass pops one entry and pushes at most one with a later deadline: bounded by the
        // queue's length.
        while due.front().is_some_and(|(deadline, _)| *deadline <= now) {
            let Some((_, key)) = due.pop_front() else {
                break;
            };
            let Some(slot) = slots.get_mut(&key) else {
                continue;
            };
            match slot.pending.take() {
                Some(head) => {
                    out.push((slot.conn.clone(), key.1.clone(), head));
                    due.push_back((now + self.interval, key));
                }
                None => {
                    slots.remove(&key);
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::out_queue::{self, OutReceiver};
    use axum::extract::ws::Message;
    use parley_domain::DeviceId;
    use serde_json::Value;
    use tokio::sync::watch;

    const INTERVAL_MS: u64 = 100;

    fn conn(id: &str) -> (Arc<ConnHandle>, OutReceiver) {
        let (tx, rx) = out_queue::channel(64);
        let (close, _) = watch::channel(None);
        let handle = ConnHandle::new(
            id.into(),
            DeviceId::from_trusted(id.into()),
            String::new(),
            tx,
            close,
        );
        (Arc::new(handle), rx)
    }

    fn heads(rx: &mut OutReceiver) -> Vec<(String, i64)> {
        let mut out = Vec::new();
        while let Ok(Message::Text(t)) = rx.try_recv() {
            let v: Value = serde_json::from_str(t.as_str()).expect("json frame");
            assert_eq!(v["type"], "hint");
            let conv = v["conv_id"].as_str().expect("conv_id").to_owned();
            out.push((conv, v["head"].as_i64().expect("head")));
        }
        out
    }

    async fn advance_ms(ms: u64) {
        tokio::time::advance(Duration::from_millis(ms)).await;
        // Let the flusher run on the advanced clock.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_yields_the_first_and_the_last_head() {
        let hints = Arc::new(Hints::new(
            Duration::from_millis(INTERVAL_MS),
            Counter::default(),
        ));
        let stop = CancellationToken::new();
        tokio::spawn(hints.clone().run(stop.clone()));
        let (c, mut rx) = conn("c1");
        let g = ConvId::from_trusted("g".into());

        // A burst of 10 heads over 45 ms: the first goes out at once, the rest coalesce.
        for head in 1..=10 {
            hints.hint(&c, &g, head);
            advance_ms(5).await;
        }
        assert_eq!(heads(&mut rx), vec![("g".into(), 1)]);
        advance_ms(INTERVAL_MS - 50).await;
        assert_eq!(
            heads(&mut rx),
            vec![("g".into(), 10)],
            "the burst's last head"
        );

        // Nothing pending: the next interval ends silently and the slot is dropped.
        advance_ms(INTERVAL_MS).await;
        assert_eq!(heads(&mut rx), vec![]);
        assert_eq!(hints.active_slots(), 0);

        // After the quiet interval a new hint is immediate again.
        hints.hint(&c, &g, 11);
        assert_eq!(heads(&mut rx), vec![("g".into(), 11)]);
        stop.cancel();
    }

    #[tokio::test(start_paused = true)]
    async fn a_steady_stream_gets_one_hint_per_interval() {
        let hints = Arc::new(Hints::new(
            Duration::from_millis(INTERVAL_MS),
            Counter::default(),
        ));
        let stop = CancellationToken::new();
        tokio::spawn(hints.clone().run(stop.clone()));
        let (c, mut rx) = conn("c1");
        let g = ConvId::from_trusted("g".into());
        // One head every 10 ms for one second: 100 heads.
        let mut got = Vec::new();
        for head in 1..=100 {
            hints.hint(&c, &g, head);
            advance_ms(10).await;
            got.extend(heads(&mut rx));
        }
        advance_ms(2 * INTERVAL_MS).await;
        got.extend(heads(&mut rx));
        let hs: Vec<i64> = got.iter().map(|(_, h)| *h).collect();
        assert!(
            (10..=11).contains(&hs.len()),
            "hints in one second at a 100 ms interval: {hs:?}"
        );
        assert!(
            hs.windows(2).all(|w| w[0] < w[1]),
            "heads go forward: {hs:?}"
        );
        assert_eq!(hs.last(), Some(&100), "the last head is always sent");
        stop.cancel();
    }

    #[tokio::test(start_paused = true)]
    async fn connections_and_conversations_coalesce_apart() {
        let hints = Arc::new(Hints::new(
            Duration::from_millis(INTERVAL_MS),
            Counter::default(),
        ));
        let stop = CancellationToken::new();
        tokio::spawn(hints.clone().run(stop.clone()));
        let (a, mut rx_a) = conn("a");
        let (b, mut rx_b) = conn("b");
        let (g, h) = (
            ConvId::from_trusted("g".into()),
            ConvId::from_trusted("h".into()),
        );
        hints.hint(&a, &g, 1);
        hints.hint(&a, &h, 7);
        hints.hint(&b, &g, 1);
        hints.hint(&a, &g, 2);
        assert_eq!(heads(&mut rx_a), vec![("g".into(), 1), ("h".into(), 7)]);
        assert_eq!(heads(&mut rx_b), vec![("g".into(), 1)]);
        advance_ms(INTERVAL_MS).await;
        assert_eq!(heads(&mut rx_a), vec![("g".into(), 2)]);
        assert_eq!(heads(&mut rx_b), vec![]);
        stop.cancel();
    }
}
