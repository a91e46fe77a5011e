//! Group commit of concurrent sends on SQLite (SPEC §4, "Batching").
//!
//! Every write of this store runs on its single write connection, and every commit syncs the
//! WAL (`synchronous = FULL`), so one send at a time costs one sync each: the sends of a node
//! are bounded by the disk's syncs per second, not by its work. Here a send joins the node's
//! queue, and one worker commits what is queued, batch by batch: one transaction and one sync
//! for everything queued when it takes its next batch, each request still decided on its own
//! (`send_batch.rs`). A send that finds the queue idle starts the worker and, alone in its
//! batch, is committed through the plain send transaction (`flow::send`), so an idle server
//! pays nothing for the queue; under load the batches grow by themselves, since sends queue
//! while the worker's transaction syncs.
//!
//! One worker, since there is one write connection: a second would only wait for it.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::sync::oneshot;

use super::{send_batch, SqliteStore};
use crate::backend::Backend;
use crate::error::StoreError;
use crate::flow::send::send_in;
use crate::types::{SendOutcome, SendRequest};

/// Most sends committed in one transaction: enough for every sender of a busy node to share a
/// sync, few enough that the write lock is given up often for the node's other writes (joins,
/// read marks), which queue for the same connection.
pub const SEND_BATCH_LEN_MAX: usize = 64;
/// Most sends waiting on one node. Beyond this a send is refused as unavailable (safe to
/// retry) instead of queueing without bound behind a slow disk.
pub const SEND_QUEUE_LEN_MAX: usize = 4_096;

type Reply = oneshot::Sender<Result<SendOutcome, StoreError>>;

struct Waiting {
    req: SendRequest,
    reply: Reply,
}

#[derive(Default)]
struct State {
    waiting: VecDeque<Waiting>,
    /// Whether the worker runs; it stops when it finds the queue empty.
    working: bool,
}

#[derive(Default)]
pub(crate) struct SendQueue {
    state: Mutex<State>,
}

impl SendQueue {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Every change under the lock is a single push, drain or flag, so a lock poisoned by a
        // panic elsewhere still guards a consistent state.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl SqliteStore {
    /// Queues `req` for the next batch and answers once its batch committed.
    pub(super) async fn queued_send(&self, req: SendRequest) -> Result<SendOutcome, StoreError> {
        let (reply, answer) = oneshot::channel();
        let start_worker = {
            let mut state = self.sends.lock();
            if state.waiting.len() >= SEND_QUEUE_LEN_MAX {
                return Err(StoreError::Unavailable(
                    "too many sends waiting for the database".into(),
                ));
            }
            state.waiting.push_back(Waiting { req, reply });
            !std::mem::replace(&mut state.working, true)
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
    async fn work(self) {
        let mut run = Run {
            store: &self,
            ended: false,
        };
        loop {
            let batch: Vec<Waiting> = {
                let mut state = self.sends.lock();
                let len = state.waiting.len().min(SEND_BATCH_LEN_MAX);
                if len == 0 {
                    state.working = false;
                    run.ended = true;
                    return;
                }
                state.waiting.drain(..len).collect()
            };
            commit(&self, batch).await;
        }
    }
}

/// Commits one batch and answers each of its callers. A caller that stopped waiting gets
/// nothing; the outcome stands either way.
async fn commit(store: &SqliteStore, batch: Vec<Waiting>) {
    store.observer.send_batch(batch.len());
    if batch.len() == 1 {
        for w in batch {
            let _ = w.reply.send(send_alone(store, &w.req).await);
        }
        return;
    }
    let reqs: Vec<&SendRequest> = batch.iter().map(|w| &w.req).collect();
    match send_batch::send_batch(store, &reqs).await {
        Ok(outcomes) => {
            for (w, outcome) in batch.into_iter().zip(outcomes) {
                let _ = w.reply.send(outcome);
            }
        }
        // Nothing of the batch was committed. Each request goes alone, so whatever broke the
        // batch fails only the requests it breaks alone.
        Err(e) => {
            tracing::debug!(error = %e, sends = batch.len(), "batch failed before commit; sending one by one");
            for w in batch {
                let _ = w.reply.send(send_alone(store, &w.req).await);
            }
        }
    }
}

/// One send in its own transaction, as without the queue.
async fn send_alone(store: &SqliteStore, req: &SendRequest) -> Result<SendOutcome, StoreError> {
    send_in(store.begin_write().await?, req, store.breaks()).await
}

/// The worker's run. Should it end abnormally (a panic, or its runtime shutting down), its
/// drop lowers the flag so a later send starts a new worker; the callers of the batch it held
/// learn that their outcome is unknown. After a normal end the flag is down already, and a new
/// worker may have raised it again, so this leaves it alone.
struct Run<'a> {
    store: &'a SqliteStore,
    ended: bool,
}

impl Drop for Run<'_> {
    fn drop(&mut self) {
        if !self.ended {
            self.store.sends.lock().working = false;
        }
    }
}
