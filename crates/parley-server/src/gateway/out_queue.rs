//! The bounded queue of frames waiting for one connection's writer.
//!
//! A tokio `mpsc` channel allocates its slots in blocks of 32 and keeps a spare block for
//! reuse: about 3.6 KB per connection for `Message` frames, held while the connection is idle
//! (measured with heaptrack over 4,000 idle sockets). This queue holds only the frames waiting
//! now, and gives back a burst's capacity once it is drained, so an idle connection keeps a
//! few dozen bytes here.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use axum::extract::ws::Message;
use tokio::sync::Notify;

/// Capacity in frames a drained queue may keep: steady traffic reuses it, a burst's larger
/// capacity is given back.
const IDLE_CAPACITY_FRAMES_MAX: usize = 8;

/// Why a frame was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrySendError {
    /// The queue holds its maximum: the reader is too slow.
    Full,
    /// The writer is gone.
    Closed,
}

/// Nothing was waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Empty;

struct State {
    frames: VecDeque<Message>,
    sender_gone: bool,
    receiver_gone: bool,
}

struct Shared {
    state: Mutex<State>,
    /// Raised after each frame queued and when the sender goes; `Notify` keeps a permit when
    /// the writer is not waiting, so a frame queued between its check and its wait is seen.
    ready: Notify,
    len_max: usize,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // The critical sections only move frames; a panic in one leaves consistent data.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The gateway's end: queues frames without waiting.
pub struct OutSender(Arc<Shared>);

/// The writer's end.
pub struct OutReceiver(Arc<Shared>);

/// A queue of at most `len_max` frames (at least one).
pub fn channel(len_max: usize) -> (OutSender, OutReceiver) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            frames: VecDeque::new(),
            sender_gone: false,
            receiver_gone: false,
        }),
        ready: Notify::new(),
        len_max: len_max.max(1),
    });
    (OutSender(shared.clone()), OutReceiver(shared))
}

impl OutSender {
    /// Queues a frame, or says why not; never waits.
    pub fn try_send(&self, frame: Message) -> Result<(), TrySendError> {
        {
            let mut state = self.0.lock();
            if state.receiver_gone {
                return Err(TrySendError::Closed);
            }
            if state.frames.len() >= self.0.len_max {
                return Err(TrySendError::Full);
            }
            state.frames.push_back(frame);
        }
        self.0.ready.notify_one();
        Ok(())
    }
}

impl Drop for OutSender {
    fn drop(&mut self) {
        self.0.lock().sender_gone = true;
        self.0.ready.notify_one();
    }
}

impl OutReceiver {
    /// The next frame; `None` once the sender is gone and every frame was taken.
    pub async fn recv(&mut self) -> Option<Message> {
        loop {
            {
                // One lock answers both questions, so an idle writer's wake-up costs one.
                let mut state = self.0.lock();
                if let Some(frame) = take(&mut state) {
                    return Some(frame);
                }
                if state.sender_gone {
                    return None;
                }
            }
            self.0.ready.notified().await;
        }
    }

    /// The next frame if one is waiting.
    pub fn try_recv(&mut self) -> Result<Message, Empty> {
        take(&mut self.0.lock()).ok_or(Empty)
    }
}

/// Takes the oldest frame, giving a drained burst's capacity back.
fn take(state: &mut State) -> Option<Message> {
    let frame = state.frames.pop_front()?;
    if state.frames.is_empty() && state.frames.capacity() > IDLE_CAPACITY_FRAMES_MAX {
        state.frames = VecDeque::new();
    }
    Some(frame)
}

impl Drop for OutReceiver {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.receiver_gone = true;
        state.frames = VecDeque::new();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &str) -> Message {
        Message::Text(s.into())
    }

    #[tokio::test]
    async fn frames_come_out_in_order_and_the_bound_holds() {
        let (tx, mut rx) = channel(2);
        assert_eq!(tx.try_send(text("a")), Ok(()));
        assert_eq!(tx.try_send(text("b")), Ok(()));
        assert_eq!(tx.try_send(text("c")), Err(TrySendError::Full));
        assert_eq!(rx.recv().await, Some(text("a")));
        assert_eq!(tx.try_send(text("d")), Ok(()));
        assert_eq!(rx.try_recv(), Ok(text("b")));
        assert_eq!(rx.try_recv(), Ok(text("d")));
        assert_eq!(rx.try_recv(), Err(Empty));
    }

    #[tokio::test]
    async fn a_waiting_writer_wakes_for_a_frame() {
        let (tx, mut rx) = channel(4);
        let writer = tokio::spawn(async move { rx.recv().await });
        tokio::task::yield_now().await;
        assert_eq!(tx.try_send(text("x")), Ok(()));
        assert_eq!(writer.await.ok().flatten(), Some(text("x")));
    }

    #[tokio::test]
    async fn the_writer_ends_after_the_last_frame_once_the_sender_is_gone() {
        let (tx, mut rx) = channel(4);
        assert_eq!(tx.try_send(text("last")), Ok(()));
        drop(tx);
        assert_eq!(rx.recv().await, Some(text("last")));
        assert_eq!(rx.recv().await, None);
    }

    #[test]
    fn a_gone_writer_refuses_frames() {
        let (tx, rx) = channel(4);
        drop(rx);
        assert_eq!(tx.try_send(text("x")), Err(TrySendError::Closed));
    }

    #[test]
    fn a_drained_burst_gives_its_capacity_back() {
        let (tx, mut rx) = channel(1_000);
        for i in 0..100 {
            assert_eq!(tx.try_send(text(&i.to_string())), Ok(()));
        }
        while rx.try_recv().is_ok() {}
        assert!(tx.0.lock().frames.capacity() <= IDLE_CAPACITY_FRAMES_MAX);
    }
}
