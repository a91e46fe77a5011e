//! The send transaction for several requests at once on SQLite (SPEC §4, "Batching"): one
//! `BEGIN IMMEDIATE` and one `COMMIT`, so one WAL sync, for every send queued while the
//! previous batch committed. Each request runs the steps of the lone send (`flow::send`), in
//! queue order, as two calls to the connection's worker thread: one read of the counter and
//! the key, then its writes inside a savepoint of their own. It is decided on its own by the
//! send decision of every store (`parley_domain::decide::send`):
//!
//! - it sees every earlier request of the batch as written, so a key written earlier in the
//!   batch answers that write (`dup`), or `IDEMPOTENCY_MISMATCH` when the fingerprint differs;
//! - the seqs of a conversation follow one another without a hole, since each request reads
//!   the counter the one before it advanced;
//! - a refusal (`NOT_MEMBER`, a mismatch) writes nothing and answers that request only;
//! - a database error in its writes rolls back to the request's savepoint and answers that
//!   request only (`Unavailable`: nothing of it was written); its batch-mates go on. A failed
//!   read, or a failed rollback, may mean SQLite ended the whole transaction: the batch fails
//!   unwritten and the queue sends each of its requests alone.
//!
//! Answers leave only after the commit returned. A failed commit leaves every write of the
//! batch, and every replay of one, outcome-unknown (P6); refusals and replays of earlier
//! commits keep their answers, which did not depend on it.

use std::collections::HashSet;

use parley_domain::decide::send::{decide, KeyCheck, SendDecision};
use parley_domain::decide::LogCounter;
use parley_domain::Rejection;
use uuid::Uuid;

use super::send::{write_message, write_message_sql};
use super::{SqliteStore, Tx};
use crate::backend::Backend;
use crate::error::StoreError;
use crate::flow::send::{commit_after_ack, NewMessage};
use crate::flow::WriteTx;
use crate::query::{Arg, Sql, SqlRow};
use crate::rows;
use crate::sql::send_key_check_sql;
use crate::types::{SendOutcome, SendRequest};

/// The writes of one request inside a savepoint of its own, in one hand-off to the worker
/// thread (`send.rs`). Savepoints of one transaction nest by name; each request releases its
/// own before the next takes it, so one name serves every request. When a statement of the
/// list fails, the savepoint stays open with the statements before it written, and
/// [`UNDO_REQUEST_SQL`] undoes them.
const WRITE_REQUEST_SQL: &str = concat!(
    "SAVEPOINT send_request;\n",
    write_message_sql!(),
    ";\nRELEASE send_request"
);
/// Undoes a request's writes and closes its savepoint.
const UNDO_REQUEST_SQL: &str = "ROLLBACK TO send_request; RELEASE send_request";
/// The counter of conversation `$1` and the request's key check (`SEND_KEY_CHECK_SQL`) in one
/// read: the write lock is held since `BEGIN IMMEDIATE`, so reading both at once sees the same
/// as reading them one after the other, at one hand-off instead of two. `$2` sender_user,
/// `$3` client_msg_id.
const READ_FOR_REQUEST_SQL: &str = concat!(
    "SELECT 'counter' AS src, next_seq AS seq, NULL AS message_id, NULL AS request_hash
       FROM conversations WHERE conv_id = $1
 UNION ALL
 ",
    send_key_check_sql!()
);
/// The `src` of the counter's row in [`READ_FOR_REQUEST_SQL`].
const COUNTER_SRC: &str = "counter";

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
    let mut written: HashSet<(&str, i64)> = HashSet::with_capacity(reqs.len());
    let mut applied = Vec::with_capacity(reqs.len());
    for req in reqs {
        let result = apply(&mut tx, req, &written).await?;
        if let Applied::Pending(outcome) = &result {
            written.insert((req.conv_id.as_str(), outcome.seq));
        }
        applied.push(result);
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
/// write lock is held since `BEGIN IMMEDIATE`. Two hand-offs to the worker thread: the read
/// of the counter and the key, then the writes in a savepoint of their own. A refusal writes
/// nothing and answers this request; an error of the writes is undone and answers this request.
/// `Err` when the read failed or the undo did: SQLite may have rolled the whole transaction
/// back on such an error, so the batch fails and its requests go alone.
async fn apply(
    tx: &mut Tx<'static>,
    req: &SendRequest,
    written: &HashSet<(&str, i64)>,
) -> Result<Applied, StoreError> {
    let args = [
        Arg::Text(req.conv_id.as_str()),
        Arg::Text(req.sender_user.as_str()),
        Arg::Text(req.client_msg_id.as_str()),
    ];
    let found = tx.fetch_all(READ_FOR_REQUEST_SQL, &args).await?;
    let (mut counter, decision) = match read_decision(req, &found) {
        Ok(read) => read,
        Err(e) => return Ok(Applied::Answered(Err(e))),
    };
    match decision {
        SendDecision::Write => {}
        SendDecision::Replay {
            seq,
            message_id,
            purged,
        } => {
            let outcome = req.replayed(seq, message_id, purged);
            return Ok(if written.contains(&(req.conv_id.as_str(), seq)) {
                Applied::Pending(outcome)
            } else {
                Applied::Answered(Ok(outcome))
            });
        }
        // Earlier requests of the batch are in the log this request read, so the decision
        // never points at one by index.
        SendDecision::ReplayOfEarlier { .. } => {
            return Ok(Applied::Answered(Err(StoreError::Unavailable(
                "send decision named an earlier request of a batch without its list".into(),
            ))))
        }
    }
    let slot = counter.take_msg();
    let message_id = Uuid::new_v4();
    let msg = NewMessage {
        req,
        slot,
        message_id,
    };
    match write_message(tx, WRITE_REQUEST_SQL, &msg).await {
        Ok(created_at) => Ok(Applied::Pending(
            req.committed(slot.seq, message_id, created_at),
        )),
        Err(e) => {
            sqlx::query(UNDO_REQUEST_SQL).execute(&mut **tx).await?;
            Ok(Applied::Answered(Err(e.into())))
        }
    }
}

/// The counter and the send decision of `req` from the rows of [`READ_FOR_REQUEST_SQL`].
/// `Err` is a refusal (`NOT_MEMBER`, a mismatch) or an unreadable row; nothing was written
/// for either.
fn read_decision(
    req: &SendRequest,
    found: &[impl SqlRow],
) -> Result<(LogCounter, SendDecision), StoreError> {
    let mut counter = None;
    let mut check = KeyCheck::default();
    for row in found {
        if row.str("src")? == COUNTER_SRC {
            counter = Some(LogCounter::new(row.int("seq")?, 0));
        } else {
            check.record(rows::key_check(row)?);
        }
    }
    // Read for an unknown conversation too, which answers like a non-member (P10).
    let Some(counter) = counter else {
        return Err(Rejection::NotMember.into());
    };
    Ok((counter, decide(&check, None, &req.request_hash)?))
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
