//! Batching of concurrent sends to one conversation (SPEC §4, "Batching").
//!
//! Every send of a conversation waits for that conversation's row lock, so concurrent sends to
//! a hot conversation commit one after another, each paying a lock, a transaction and a commit.
//! Here the first send to a conversation starts a worker; sends that arrive while it runs join
//! the conversation's queue, and the worker commits everything queued in one transaction: one
//! lock acquisition, consecutive seqs, one commit, each request still checked on its own
//! (`send_batch.rs`). A send that finds the conversation idle runs alone through the plain send
//! transaction, so a quiet conversation pays nothing for the queue.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use sqlx::PgPool;
use tokio::sync::oneshot;

use super::{send, send_batch};
use crate::error::StoreError;
use crate::types::{SendOutcome, SendRequest};

/// Most sends committed in one transaction: enough to absorb a pool's worth of concurrent
/// senders, few enough that one transaction's statements stay small.
pub const SEND_BATCH_LEN_MAX: usize = 64;
/// Most sends waiting for one conversation. Beyond this a send is refused as unavailable (safe
/// to retry) instead of queueing without bound behind a stalled database.
pub const SEND_QUEUE_LEN_MAX: usize = 4_096;

type Reply = oneshot::Sender<Result<SendOutcome, StoreError>>;

struct Waiting {
    req: SendRequest,
    reply: Reply,
}

/// The queues of the conversations whose worker is running. A conversation is in the map
/// exactly while its worker runs.
#[derive(Default)]
pub(crate) struct SendQueue {
    queues: Mutex<HashMap<String, VecDeque<Waiting>>>,
}

impl SendQueue {
    pub(crate) async fn send(
        self: &Arc<Self>,
        pool: &PgPool,
        req: SendRequest,
    ) -> Result<SendOutcome, StoreError> {
        let (reply, answer) = oneshot::channel();
        let conv = req.conv_id.as_str().to_owned();
        let start_worker = {
            let mut queues = self.lock();
            match queues.get_mut(&conv) {
                Some(queue) if queue.len() >= SEND_QUEUE_LEN_MAX => {
                    return Err(StoreError::Unavailable(
                        "too many sends waiting for this conversation".into(),
                    ));
                }
                Some(queue) => {
                    queue.push_back(Waiting { req, reply });
                    false
                }
                None => {
                    queues.insert(conv.clone(), VecDeque::from([Waiting { req, reply }]));
                    true
                }
            }
        };
        if start_worker {
            // The worker outlives this caller: once a send is queued it runs to its end even
            // if the caller stops waiting, like a transaction already sent to the database.
            tokio::spawn(self.clone().drain(pool.clone(), conv));
        }
        answer.await.map_err(|_| {
            StoreError::OutcomeUnknown("the send worker stopped before answering".into())
        })?
    }

    /// Commits the conversation's queue batch by batch until it is empty.
    async fn drain(self: Arc<Self>, pool: PgPool, conv: String) {
        let _cleanup = Cleanup {
            queue: &self,
            conv: &conv,
        };
        loop {
            let batch: Vec<Waiting> = {
                let mut queues = self.lock();
                let Some(queue) = queues.get_mut(&conv) else {
                    return;
                };
                if queue.is_empty() {
                    queues.remove(&conv);
                    return;
                }
                let n = queue.len().min(SEND_BATCH_LEN_MAX);
                queue.drain(..n).collect()
            };
            if let [one] = batch.as_slice() {
                let outcome = send::send(&pool, &one.req).await;
                if let Some(w) = batch.into_iter().next() {
                    // The caller may have stopped waiting; the outcome stands either way.
                    let _ = w.reply.send(outcome);
                }
                continue;
            }
            let reqs: Vec<&SendRequest> = batch.iter().map(|w| &w.req).collect();
            match send_batch::send_batch(&pool, &reqs).await {
                Ok(outcomes) => {
                    for (w, outcome) in batch.into_iter().zip(outcomes) {
                        let _ = w.reply.send(outcome);
                    }
                }
                // Nothing of the batch was written. Each request goes alone, so a request that
                // makes the database fail fails only itself.
                Err(e) => {
                    tracing::debug!(error = %e, sends = batch.len(), "batch failed before commit; sending one by one");
                    for w in batch {
                        let outcome = send::send(&pool, &w.req).await;
                        let _ = w.reply.send(outcome);
                    }
                }
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, VecDeque<Waiting>>> {
        // A panic while holding the lock leaves the map consistent (every change is a single
        // insert, push or remove), so a poisoned lock is still safe to use.
        self.queues
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Removes the conversation's queue if its worker ends abnormally (a panic), so later sends
/// start a new worker instead of waiting behind a dead one. The waiters it drops learn that
/// their outcome is unknown. After a normal end the queue is already gone and this does nothing.
struct Cleanup<'a> {
    queue: &'a SendQueue,
    conv: &'a str,
}

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.queue.lock().remove(self.conv);
        }
    }
}
