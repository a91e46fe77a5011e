//! The session's end of the app's delivery queue, which the driver never waits on.
//!
//! The driver is the one task that reads the socket, and answers to the app's requests arrive
//! on it between pushes. If it waited for room in a full queue, an app that sends from its
//! receive loop would wait for its own answer behind deliveries it has not taken: a deadlock
//! until the request's timeout. So the queue is only ever offered what fits:
//!
//! - an event is queued only when there is room; otherwise it is left on the server, the
//!   conversation is marked stale (its cursor did not move) and the outlet is *starved*;
//! - a page of events is fetched only as large as the room left (`Sequencer::fill`);
//! - a notice (read position, connection state) that finds no room is *held*, coalesced
//!   (one read position per conversation, the latest connection state), and goes out first
//!   once there is room; events wait while notices are held, so the order is kept.
//!
//! Once the app has taken half the queue, the driver flushes the held notices and fetches the
//! stale conversations from their cursors: nothing is lost and nothing is buffered without
//! bound.

use std::collections::VecDeque;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::ws::protocol::Delivery;

/// Notices held while the queue is full. Connection notices coalesce to two, read positions to
/// one per conversation; beyond this many conversations a read notice is dropped (a catch-up
/// brings every read position anyway).
pub(crate) const HELD_LEN_MAX: usize = 1_024;

pub(crate) struct Outlet {
    tx: mpsc::Sender<Delivery>,
    /// Notices that found the queue full, in order, coalesced. Bounded by `HELD_LEN_MAX`.
    held: VecDeque<Delivery>,
    /// An event was left out for lack of room; its conversation is stale.
    starved: bool,
    /// Free slots to wait for before resuming: half the queue.
    resume_len: usize,
}

impl Outlet {
    pub(crate) fn new(tx: mpsc::Sender<Delivery>) -> Self {
        let resume_len = tx.max_capacity().div_ceil(2).max(1);
        Self {
            tx,
            held: VecDeque::new(),
            starved: false,
            resume_len,
        }
    }

    /// Free slots for events: none while notices are held, since they go first. When the app
    /// dropped its receiver, everything fits and is discarded.
    pub(crate) fn room(&self) -> usize {
        if self.tx.is_closed() {
            return usize::MAX;
        }
        if !self.held.is_empty() {
            return 0;
        }
        self.tx.capacity()
    }

    /// Notes that an event was left out for lack of room.
    pub(crate) fn starve(&mut self) {
        self.starved = true;
    }

    /// Queues a delivery the caller made room for ([`Outlet::room`]). The driver is the only
    /// sender, so room it saw is still there.
    pub(crate) fn put(&mut self, delivery: Delivery) {
        if let Err(mpsc::error::TrySendError::Full(_)) = self.tx.try_send(delivery) {
            tracing::error!("a delivery found no room that was checked; its conversation resyncs");
            self.starved = true;
        }
    }

    /// Queues a notice now, or holds it until there is room.
    pub(crate) fn notice(&mut self, notice: Delivery) {
        if self.held.is_empty() {
            match self.tx.try_send(notice) {
                Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => {}
                Err(mpsc::error::TrySendError::Full(notice)) => self.hold(notice),
            }
        } else {
            self.hold(notice);
        }
    }

    fn hold(&mut self, notice: Delivery) {
        match notice {
            Delivery::Read { conv_id, read_seq } => {
                let same = self.held.iter_mut().find_map(|held| match held {
                    Delivery::Read {
                        conv_id: c,
                        read_seq: r,
                    } if *c == conv_id => Some(r),
                    _ => None,
                });
                if let Some(held_seq) = same {
                    *held_seq = (*held_seq).max(read_seq);
                } else if self.held.len() < HELD_LEN_MAX {
                    self.held.push_back(Delivery::Read { conv_id, read_seq });
                } else {
                    tracing::warn!(conv_id, "too many notices held; dropping a read position");
                }
            }
            Delivery::Disconnected { reason } => {
                // The latest loss stands for all: a reconnect held after an earlier one is over.
                self.held
                    .retain(|held| !matches!(held, Delivery::Reconnected));
                let earlier = self.held.iter_mut().find_map(|held| match held {
                    Delivery::Disconnected { reason } => Some(reason),
                    _ => None,
                });
                match earlier {
                    Some(earlier) => *earlier = reason,
                    None => self.held.push_back(Delivery::Disconnected { reason }),
                }
            }
            Delivery::Reconnected => {
                if !self.held.contains(&Delivery::Reconnected) {
                    self.held.push_back(Delivery::Reconnected);
                }
            }
            // Typing is stale by the time a far-behind app would read it.
            Delivery::Typing { .. } => {}
            Delivery::Presence {
                user_id,
                online,
                last_seen,
            } => {
                let earlier = self.held.iter_mut().find_map(|held| match held {
                    Delivery::Presence {
                        user_id: u,
                        online: o,
                        last_seen: l,
                    } if *u == user_id => Some((o, l)),
                    _ => None,
                });
                if let Some((o, l)) = earlier {
                    (*o, *l) = (online, last_seen);
                } else if self.held.len() < HELD_LEN_MAX {
                    self.held.push_back(Delivery::Presence {
                        user_id,
                        online,
                        last_seen,
                    });
                } else {
                    tracing::warn!(user_id, "too many notices held; dropping a presence change");
                }
            }
            other => self.held.push_back(other),
        }
    }

    /// Whether the driver should wait for room and then resume: notices are held or events
    /// were left out.
    pub(crate) fn waiting(&self) -> bool {
        self.starved || !self.held.is_empty()
    }

    /// Resolves once half the queue is free, or the app dropped its receiver.
    pub(crate) fn room_to_resume(&self) -> impl std::future::Future<Output = ()> + 'static {
        let tx = self.tx.clone();
        let wanted = self.resume_len;
        async move {
            // The permits are only a way to wait; dropping them frees the slots again.
            let _ = tx.reserve_many(wanted).await;
        }
    }

    /// After [`Outlet::room_to_resume`]: sends the held notices that fit and clears the starved
    /// mark, since the caller now catches the stale conversations up.
    pub(crate) fn resume(&mut self) {
        self.starved = false;
        while let Some(notice) = self.held.pop_front() {
            match self.tx.try_send(notice) {
                Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => {}
                Err(mpsc::error::TrySendError::Full(notice)) => {
                    self.held.push_front(notice);
                    return;
                }
            }
        }
    }

    /// The end of the session: the held notices and then `last`, waiting for room since
    /// nothing else is left to do, unless the app closes the session meanwhile.
    pub(crate) async fn finish(&mut self, last: Option<Delivery>, cancel: &CancellationToken) {
        let notices = self.held.drain(..).chain(last).collect::<Vec<_>>();
        for notice in notices {
            let sent = cancel.run_until_cancelled(self.tx.send(notice)).await;
            if !matches!(sent, Some(Ok(()))) {
                // Closed by the app, or nobody reads any more: the rest is moot.
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(conv_id: &str, read_seq: i64) -> Delivery {
        Delivery::Read {
            conv_id: conv_id.into(),
            read_seq,
        }
    }

    fn lost(reason: &str) -> Delivery {
        Delivery::Disconnected {
            reason: reason.into(),
        }
    }

    fn drain(rx: &mut mpsc::Receiver<Delivery>) -> Vec<Delivery> {
        let mut out = Vec::new();
        while let Ok(d) = rx.try_recv() {
            out.push(d);
        }
        out
    }

    #[test]
    fn notices_that_find_the_queue_full_are_held_coalesced_and_go_first() {
        let (tx, mut rx) = mpsc::channel(4);
        let mut outlet = Outlet::new(tx);
        for seq in 1..=4 {
            outlet.notice(read("a", seq));
        }
        assert_eq!(outlet.room(), 0);
        outlet.notice(read("b", 1));
        outlet.notice(read("b", 3));
        outlet.notice(lost("first"));
        outlet.notice(Delivery::Reconnected);
        outlet.notice(lost("second"));
        outlet.notice(read("b", 2));
        assert!(outlet.waiting());
        assert_eq!(outlet.room(), 0, "events wait behind held notices");
        assert_eq!(drain(&mut rx).len(), 4);
        outlet.notice(Delivery::Reconnected);
        outlet.resume();
        assert!(!outlet.waiting());
        assert_eq!(
            drain(&mut rx),
            [read("b", 3), lost("second"), Delivery::Reconnected]
        );
        assert_eq!(outlet.room(), 4);
    }

    #[test]
    fn a_resume_without_enough_room_keeps_the_rest_in_order() {
        let (tx, mut rx) = mpsc::channel(2);
        let mut outlet = Outlet::new(tx);
        outlet.notice(read("a", 1));
        outlet.notice(read("b", 1));
        for conv in ["c", "d", "e"] {
            outlet.notice(read(conv, 1));
        }
        assert_eq!(drain(&mut rx).len(), 2);
        outlet.resume();
        assert_eq!(drain(&mut rx), [read("c", 1), read("d", 1)]);
        assert!(outlet.waiting());
        outlet.resume();
        assert_eq!(drain(&mut rx), [read("e", 1)]);
        assert!(!outlet.waiting());
    }

    #[test]
    fn held_read_positions_are_bounded() {
        let (tx, _rx) = mpsc::channel(1);
        let mut outlet = Outlet::new(tx);
        for i in 0..HELD_LEN_MAX + 10 {
            outlet.notice(read(&format!("c{i}"), 1));
        }
        assert_eq!(outlet.held.len(), HELD_LEN_MAX);
    }

    #[tokio::test]
    async fn a_dropped_receiver_takes_everything() {
        let (tx, rx) = mpsc::channel(1);
        let mut outlet = Outlet::new(tx);
        outlet.notice(read("a", 1));
        outlet.notice(read("b", 1));
        drop(rx);
        assert_eq!(outlet.room(), usize::MAX);
        outlet.room_to_resume().await;
        outlet.resume();
        assert!(!outlet.waiting());
    }

    #[tokio::test]
    async fn room_to_resume_waits_for_half_the_queue() {
        let (tx, mut rx) = mpsc::channel(4);
        let mut outlet = Outlet::new(tx);
        for seq in 1..=4 {
            outlet.put(read("a", seq));
        }
        let resumed = outlet.room_to_resume();
        tokio::pin!(resumed);
        assert!(futures::poll!(resumed.as_mut()).is_pending());
        rx.recv().await;
        assert!(
            futures::poll!(resumed.as_mut()).is_pending(),
            "one slot is not half"
        );
        rx.recv().await;
        resumed.await;
        assert_eq!(outlet.room(), 2, "waiting took no room");
    }
}
