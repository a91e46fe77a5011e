//! The send transaction (SPEC §4): lock the conversation, check the request key in the log and
//! in the tombstones and the sender's open period, insert at `next_seq`, advance the counter,
//! move the sender's read position, commit.
//!
//! The checks run under the lock and in statements issued after it was granted, so each sees
//! every send that committed before: two identical concurrent requests resolve to one row and
//! one `dup = false`. (A single statement that locked and checked at once would re-check only
//! the locked row after waiting and miss the other's new event.)

use chrono::{DateTime, Utc};
use parley_domain::decide::send::{decide, KeyCheck, SendDecision};
use parley_domain::decide::{LogCounter, Slot};
use parley_domain::{ConvId, Rejection};
use uuid::Uuid;

use super::{StoreFuture, WriteTx};
use crate::breaks::Breaks;
use crate::error::StoreError;
use crate::types::{SendOutcome, SendRequest};
use crate::{rows, sql};

/// The primitives of the send transaction.
pub(crate) trait SendTx: WriteTx {
    /// Locks conversation `$1` for this transaction and reads its `next_seq` and `msg_count`.
    const LOCK_FOR_SEND_SQL: &'static str;
    /// The same read without the lock, for the test break `no-row-lock` (`breaks.rs`).
    const READ_FOR_SEND_UNLOCKED_SQL: &'static str;

    /// Locks the conversation and reads its counters; `None` when it does not exist. Under
    /// the test break `no-row-lock` it reads them without the lock.
    fn lock_for_send(
        &mut self,
        conv_id: &ConvId,
        breaks: Breaks,
    ) -> impl StoreFuture<Option<LogCounter>> {
        let statement = if breaks.no_row_lock() {
            Self::READ_FOR_SEND_UNLOCKED_SQL
        } else {
            Self::LOCK_FOR_SEND_SQL
        };
        sql::conversation_row(self, statement, conv_id.as_str(), rows::counter)
    }
    /// The request's key in the log and in the tombstones, and the sender's open period, read
    /// after the lock.
    fn key_check(&mut self, req: &SendRequest) -> impl StoreFuture<KeyCheck> {
        sql::key_check(self, req)
    }
    /// Inserts the message, advances the counter past it and moves the sender's read position
    /// to it (an own message is read). Answers the event's `created_at`.
    fn insert_message(&mut self, msg: &NewMessage<'_>) -> impl StoreFuture<DateTime<Utc>>;
}

/// A message to insert: the request, its place in the log and its new id.
pub(crate) struct NewMessage<'a> {
    pub req: &'a SendRequest,
    pub slot: Slot,
    pub message_id: Uuid,
}

/// Runs one send in `tx`, a fresh write transaction, with the store's test `breaks` (none
/// outside a test build).
pub(crate) async fn send_in<T: SendTx + Send + 'static>(
    mut tx: T,
    req: &SendRequest,
    breaks: Breaks,
) -> Result<SendOutcome, StoreError> {
    let (counter, check) = if breaks.no_unique_index() {
        // Test break: the key check before the lock, so it misses a send that commits while
        // this one waits for the lock; only the unique index would stop a second row.
        let check = tx.key_check(req).await?;
        (tx.lock_for_send(&req.conv_id, breaks).await?, check)
    } else {
        // 1. The lock.
        let counter = tx.lock_for_send(&req.conv_id, breaks).await?;
        // 2–4. The request key and the sender's period, read for an unknown conversation too:
        // it answers like a non-member (P10), and only after the same statements, so not
        // sooner.
        (counter, tx.key_check(req).await?)
    };
    let Some(mut counter) = counter else {
        return Err(Rejection::NotMember.into());
    };
    let next_seq = counter.next_seq();
    match decide(&check, None, &req.request_hash)? {
        SendDecision::Write => {}
        SendDecision::Replay {
            seq,
            message_id,
            purged,
        } => return Ok(req.replayed(seq, message_id, purged)),
        SendDecision::ReplayOfEarlier { .. } => {
            unreachable!("a lone send has no earlier request")
        }
    }
    // 5. Insert at next_seq, advance the counter, move the sender's read position.
    let slot = counter.take_msg();
    assert_eq!(slot.seq, next_seq, "a send written off the counter");
    let message_id = Uuid::new_v4();
    let msg = NewMessage {
        req,
        slot,
        message_id,
    };
    let created_at = tx.insert_message(&msg).await?;
    if breaks.ack_before_commit() {
        // Test break: answer as committed now and commit in the background, so the caller
        // acks and announces before COMMIT, and a failed commit goes unnoticed.
        tokio::spawn(commit_after_ack(tx));
        return Ok(req.committed(slot.seq, message_id, created_at));
    }
    // 6. Commit; only now may the caller ack and announce.
    tx.commit_or_unknown().await?;
    Ok(req.committed(slot.seq, message_id, created_at))
}

/// How long the commit of a send already answered waits under the test break
/// `ack-before-commit`: a slow commit (a disk flush, a synchronous replica), which leaves a
/// window in which a fault (a killed gateway, a terminated connection) loses an acked send.
/// Without it the window is a few microseconds and a control would need luck to hit it.
const ACK_BEFORE_COMMIT_DELAY_MS: u64 = 200;

/// The commit of a send already answered under the test break `ack-before-commit`: it waits
/// [`ACK_BEFORE_COMMIT_DELAY_MS`], and its failure is only logged.
pub(crate) async fn commit_after_ack(tx: impl WriteTx + Send + 'static) {
    tokio::time::sleep(std::time::Duration::from_millis(ACK_BEFORE_COMMIT_DELAY_MS)).await;
    if let Err(e) = tx.commit_or_unknown().await {
        tracing::warn!(error = %e, "test break ack-before-commit: an acked send failed to commit");
    }
}
