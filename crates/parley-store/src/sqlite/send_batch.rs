//! The send transaction for several requests at once on SQLite (SPEC §4, "Batching"): one
//! `BEGIN IMMEDIATE` and one `COMMIT`, so one WAL sync, for every send queued while the
//! previous batch committed. Each request runs the steps of the lone send (`flow::send`) inside
//! a savepoint of its own, in queue order, and is decided on its own by the send decision of
//! every store (`parley_domain::decide::send`):
//!
//! - it sees every earlier request of the batch as written, so a key written earlier in the
//!   batch answers that write (`dup`), or `IDEMPOTENCY_MISMATCH` when the fingerprint differs;
//! - the seqs of a conversation follow one another without a hole, since each request reads
//!   the counter the one before it advanced;
//! - a refusal (`NOT_MEMBER`, a mismatch) writes nothing and answers that request only;
//! - a database error rolls back to the request's savepoint and answers that request only
//!   (`Unavailable`: nothing of it was written); its batch-mates go on.
//!
//! Answers leave only after the commit returned. A failed commit leaves every write of the
//! batch, and every replay of one, outcome-unknown (P6); refusals and replays of earlier
//! commits keep their answers, which did not depend on it.

use std::collections::HashSet;

use parley_domain::decide::send::{decide, SendDecision};
use parley_domain::Rejection;
use uuid::Uuid;

use super::{SqliteStore, Tx};
use crate::backend::Backend;
use crate::breaks::Breaks;
use crate::error::StoreError;
use crate::flow::send::{commit_after_ack, NewMessage, SendTx};
use crate::flow::WriteTx;
use crate::types::{SendOutcome, SendRequest};

/// The savepoint around one request. Savepoints of one transaction nest by name; each request
/// releases its own before the next takes it, so one name serves every request.
const SAVEPOINT_SQL: &str = "SAVEPOINT send_request";
const RELEASE_SQL: &str = "RELEASE send_request";
/// Undoes the request's statements and leaves the savepoint open, so `RELEASE` follows.
const ROLLBACK_TO_SQL: &str = "ROLLBACK TO send_request";

/// One request's result inside the open transaction.
enum Applied {
    /// Final whatever the commit does: a refusal, a failure rolled back to the savepoint, or
    /// a replay of a send committed before this batch.
    Answered(Result<SendOutcome, StoreError>),
    /// Written in this transaction, or a replay of such a write: true once the commit returns.
    Pending(SendOutcome),
}

/// Commits `reqs` in one transaction and answers each, in order. `Err`: the batch failed
/// outside any one request (the transaction or a savepoint statement), nothing of it was
/// committed, and the caller may send each request alone.
pub(super) async fn send_batch(
    store: &SqliteStore,
    reqs: &[&SendRequest],
) -> Result<Vec<Result<SendOutcome, StoreError>>, StoreError> {
    let breaks = store.breaks();
    let mut tx = store.begin_write().await?;
    // (conv_id, seq) of every message this transaction wrote, to tell a replay of one of
    // them, which depends on the commit, from a replay of an earlier commit.
    let mut written: HashSet<(String, i64)> = HashSet::with_capacity(reqs.len());
    let mut applied = Vec::with_capacity(reqs.len());
    for req in reqs {
        sqlx::query(SAVEPOINT_SQL).execute(&mut *tx).await?;
        let result = apply(&mut tx, req, breaks, &written).await;
        if result.is_err() {
            sqlx::query(ROLLBACK_TO_SQL).execute(&mut *tx).await?;
        }
        sqlx::query(RELEASE_SQL).execute(&mut *tx).await?;
        applied.push(match result {
            Ok(Applied::Pending(outcome)) => {
                written.insert((outcome.conv_id.as_str().to_owned(), outcome.seq));
                Applied::Pending(outcome)
            }
            Ok(answered) => answered,
            Err(e) => Applied::Answered(Err(e)),
        });
    }
    if written.is_empty() {
        // Nothing was written: the answers stand whatever the end of the transaction does.
        if let Err(e) = tx.commit().await {
            tracing::debug!(error = %e, "commit of a send batch without writes failed");
        }
        return Ok(answers(applied, None));
    }
    if breaks.ack_before_commit() {
        // Test break: answer as committed now and commit in the background.
        tokio::spawn(commit_after_ack(tx));
        return Ok(answers(applied, None));
    }
    let failed = tx.commit_or_unknown().await.err();
    Ok(answers(applied, failed.as_ref()))
}

/// The steps of the lone send for one request, in the batch's open transaction; the database
/// write lock is held since `BEGIN IMMEDIATE`.
async fn apply(
    tx: &mut Tx<'static>,
    req: &SendRequest,
    breaks: Breaks,
    written: &HashSet<(String, i64)>,
) -> Result<Applied, StoreError> {
    let counter = tx.lock_for_send(&req.conv_id, breaks).await?;
    // Read for an unknown conversation too, which answers like a non-member (P10).
    let check = tx.key_check(req).await?;
    let Some(mut counter) = counter else {
        return Err(Rejection::NotMember.into());
    };
    match decide(&check, None, &req.request_hash)? {
        SendDecision::Write => {}
        SendDecision::Replay {
            seq,
            message_id,
            purged,
        } => {
            let outcome = req.replayed(seq, message_id, purged);
            let key = (req.conv_id.as_str().to_owned(), seq);
            return Ok(if written.contains(&key) {
                Applied::Pending(outcome)
            } else {
                Applied::Answered(Ok(outcome))
            });
        }
        // Earlier requests of the batch are in the log this request read, so the decision
        // never points at one by index.
        SendDecision::ReplayOfEarlier { .. } => {
            return Err(StoreError::Unavailable(
                "send decision named an earlier request of a batch without its list".into(),
            ))
        }
    }
    let slot = counter.take_msg();
    let message_id = Uuid::new_v4();
    let msg = NewMessage {
        req,
        slot,
        message_id,
    };
    let created_at = tx.insert_message(&msg).await?;
    Ok(Applied::Pending(
        req.committed(slot.seq, message_id, created_at),
    ))
}

/// Each request's answer; `commit_failed` turns every write, and every replay of one, into
/// the commit's error (an unknown outcome).
fn answers(
    applied: Vec<Applied>,
    commit_failed: Option<&StoreError>,
) -> Vec<Result<SendOutcome, StoreError>> {
    applied
        .into_iter()
        .map(|a| match (a, commit_failed) {
            (Applied::Answered(outcome), _) => outcome,
            (Applied::Pending(_), Some(e)) => Err(e.clone()),
            (Applied::Pending(outcome), None) => Ok(outcome),
        })
        .collect()
}
