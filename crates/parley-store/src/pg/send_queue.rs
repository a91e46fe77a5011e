//! Batching of concurrent sends (SPEC §4, "Batching").
//!
//! Every send pays a transaction: a lock, a key check, an insert and a commit (one round trip
//! through the function `send_message`, `send_function.rs`) and a WAL flush; and sends to one
//! conversation commit strictly one after another behind its row lock. Here a send joins the
//! node's queue, and at most `SEND_WORKERS_MAX` workers commit what is queued, batch by batch:
//! one transaction for everything queued when a worker takes its next batch (one call of
//! `send_messages`), each request still checked on its own (`send_batch.rs`). A send that
//! finds the queue empty starts a worker and is committed alone (`send.rs`), so an idle
//! server pays nothing for the queue; under load the batches grow by themselves, since sends
//! queue while a worker's transaction runs. A conversation is in at most one batch at a time:
//! its sends wait in the queue for the next batch rather than in the database for its row lock,
//! so a hot conversation gets batches as large as its senders make them.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::oneshot;

use super::timed_pool::TimedPool;
use super::{send, send_batch};
use crate::breaks::Breaks;
use crate::error::StoreError;
use crate::types::{SendOutcome, SendRequest};

/// Most sends committed in one transaction: enough to absorb a pool's worth of concurrent
/// senders, few enough that one transaction's statements and lock set stay small.
pub const SEND_BATCH_LEN_MAX: usize = 64;
/// Most sends waiting on one node. Beyond this a send is refused as unavailable (safe to
/// retry) instead of queueing without bound behind a stalled database.
pub const SEND_QUEUE_LEN_MAX: usize = 4_096;
/// Most send transactions the queue runs at once. Two: one batch waiting for a lock (held by
/// another node, say) does not stop every send of the node, and each batch collects what
/// queued while the other ran. Measured on two cores (docs/PERFORMANCE.md, saturate): two
/// workers commit 0.78 of the raw transaction rate at 16 sends in flight and 2.2 times it at 64;
/// four workers 0.67 and 1.73, but do better at 4–8 in flight (0.66 against 0.48 at 4).
pub const SEND_WORKERS_MAX: usize = 2;

type Reply = oneshot::Sender<Result<SendOutcome, StoreError>>;

struct Waiting {
    req: SendRequest,
    reply: Reply,
}

#[derive(Default)]
struct State {
    waiting: VecDeque<Waiting>,
    workers: usize,
    /// Conversations in a batch being committed. Their queued sends wait for the next batch
    /// instead of going to another worker, which would only wait for the same row lock and
    /// split what could have been one batch.
    busy: HashSet<String>,
}

impl State {
    /// Takes, in queue order, up to `SEND_BATCH_LEN_MAX` sends whose conversations no other
    /// worker is committing, and marks those conversations busy.
    fn take_batch(&mut self) -> Vec<Waiting> {
        let mut batch = Vec::new();
        let mut kept = VecDeque::with_capacity(self.waiting.len());
        let mut taken: HashSet<String> = HashSet::new();
        while let Some(w) = self.waiting.pop_front() {
            let conv = w.req.conv_id.as_str();
            let free = taken.contains(conv) || !self.busy.contains(conv);
            if batch.len() < SEND_BATCH_LEN_MAX && free {
                if !taken.contains(conv) {
                    taken.insert(conv.to_owned());
                }
                batch.push(w);
            } else {
                kept.push_back(w);
            }
        }
        self.waiting = kept;
        self.busy.extend(taken);
        batch
    }
}

pub(crate) struct SendQueue {
    state: Mutex<State>,
    pool: TimedPool,
    /// The store's test breaks (`breaks.rs`); none outside a test build.
    breaks: Breaks,
}

impl SendQueue {
    pub(crate) fn new(pool: TimedPool, breaks: Breaks) -> Self {
        Self {
            state: Mutex::default(),
            pool,
            breaks,
        }
    }

    pub(crate) async fn send(
        self: &Arc<Self>,
        req: SendRequest,
    ) -> Result<SendOutcome, StoreError> {
        let (reply, answer) = oneshot::channel();
        let start_worker = {
            let mut state = self.lock();
            if state.waiting.len() >= SEND_QUEUE_LEN_MAX {
                return Err(StoreError::Unavailable(
                    "too many sends waiting for the database".into(),
                ));
            }
            state.waiting.push_back(Waiting { req, reply });
            let start = state.workers < SEND_WORKERS_MAX;
            if start {
                state.workers += 1;
            }
            start
        };
        if start_worker {
            // The worker outlives this caller: once a send is queued it runs to its end even
            // if the caller stops waiting, like a transaction already sent to the database.
            tokio::spawn(self.clone().work());
        }
        answer.await.map_err(|_| {
            StoreError::OutcomeUnknown("the send worker stopped before answering".into())
        })?
    }

    /// Commits queued sends batch by batch until the queue is empty.
    async fn work(self: Arc<Self>) {
        let _cleanup = Cleanup { queue: &self };
        loop {
            let batch = {
                let mut state = self.lock();
                let batch = state.take_batch();
                if batch.is_empty() {
                    // Whatever is left belongs to conversations another worker is committing;
                    // that worker takes it next.
                    state.workers -= 1;
                    return;
                }
                batch
            };
            let _busy = Busy {
                queue: &self,
                convs: batch
                    .iter()
                    .map(|w| w.req.conv_id.as_str().to_owned())
                    .collect(),
            };
            commit(&self.pool, batch, self.breaks).await;
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every change under the lock is a single push, drain or count, so a lock poisoned by a
        // panic elsewhere still guards a consistent state.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Commits one batch and answers each of its callers. A caller that stopped waiting gets
/// nothing; the outcome stands either way.
async fn commit(pool: &TimedPool, batch: Vec<Waiting>, breaks: Breaks) {
    pool.observer().send_batch(batch.len());
    if batch.len() == 1 {
        for w in batch {
            let outcome = send::send_one(pool, &w.req, breaks).await;
            let _ = w.reply.send(outcome);
        }
        return;
    }
    let reqs: Vec<&SendRequest> = batch.iter().map(|w| &w.req).collect();
    match send_batch::send_batch(pool, &reqs, breaks).await {
        Ok(outcomes) => {
            for (w, outcome) in batch.into_iter().zip(outcomes) {
                let _ = w.reply.send(outcome);
            }
        }
        // Nothing of the batch was written. Each request goes alone, so a request that makes
        // the database fail fails only itself.
        Err(e) => {
            tracing::debug!(error = %e, sends = batch.len(), "batch failed before commit; sending one by one");
            for w in batch {
                let outcome = send::send_one(pool, &w.req, breaks).await;
                let _ = w.reply.send(outcome);
            }
        }
    }
}

/// Gives up a worker's place if it ends abnormally (a panic), so later sends can start a new
/// one. The callers of the batch it held learn that their outcome is unknown. After a normal
/// end the place is already given up and this does nothing.
struct Cleanup<'a> {
    queue: &'a SendQueue,
}

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.queue.lock().workers -= 1;
        }
    }
}

/// The conversations of the batch a worker is committing; they are free again when it is done,
/// normally or not.
struct Busy<'a> {
    queue: &'a SendQueue,
    convs: HashSet<String>,
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        let mut state = self.queue.lock();
        for conv in &self.convs {
            state.busy.remove(conv);
        }
    }
}
