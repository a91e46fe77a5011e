//! The send transaction in one round trip: the server-side functions `send_message` (a lone
//! send) and `send_messages` (a batch) of migration 0004 run the row lock, the key check and
//! the insert of `send.rs` and `send_batch.rs` inside PostgreSQL, in that order, and the
//! statement's implicit transaction commits before the answer comes back (P6). The plain
//! transaction costs five round trips (BEGIN, lock, key check, insert, COMMIT), each a wake-up
//! of the server and of PostgreSQL on the same cores.
//!
//! The functions write a request exactly when the send decision can only be a write (its
//! conversation exists, its key is neither in the log nor in the tombstones, its sender has an
//! open period) and return what the key check read; every answer (replay, mismatch, not a
//! member) is then decided here by the one send decision of every store
//! (`parley_domain::decide::send`), as the other paths decide it.
//!
//! Failures: an error raised while the function runs (its context names the function) rolled
//! the statement back, so nothing was written, as did a data error in its arguments. Any
//! other failure may come from the commit (a deferred constraint, the connection lost once
//! the statement was sent, a row that cannot be read) and leaves the outcome unknown (P6),
//! refusals included, since their answers are in the rows that did not arrive.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use parley_domain::decide::send::{decide, Earlier, KeyCheck, SendDecision, StoredRequest};
use parley_domain::{Rejection, RequestHash};
use sqlx::postgres::PgRow;
use sqlx::Row;
use uuid::Uuid;

use super::timed_pool::TimedPool;
use crate::breaks::Breaks;
use crate::error::StoreError;
use crate::types::{SendOutcome, SendRequest};

/// A lone send. `$1` conv_id, `$2` sender_user, `$3` sender_device, `$4` client_msg_id, `$5`
/// request_hash, `$6` body, `$7` message_id, `$8` whether to lock the row, `$9` whether to check
/// the key before the lock (the last two for the test breaks only).
pub const SEND_FUNCTION_SQL: &str =
    "SELECT * FROM send_message($1, $2, $3, $4, $5, $6, $7, $8, $9)";

/// A batch of requests with distinct keys: `$1`–`$7` the columns of `SEND_FUNCTION_SQL`, one
/// array entry per request, then the same two flags. One row per request, named by `n` (from 1).
pub const SEND_BATCH_FUNCTION_SQL: &str =
    "SELECT * FROM send_messages($1, $2, $3, $4, $5, $6, $7, $8, $9)";

/// What the function read and wrote for one request.
struct FunctionRow {
    conv_found: bool,
    check: KeyCheck,
    /// The seq and `created_at` of the message the function wrote.
    written: Option<(i64, DateTime<Utc>)>,
}

/// One send in its own one-statement transaction.
pub(super) async fn send_one(
    pool: &TimedPool,
    req: &SendRequest,
    breaks: Breaks,
) -> Result<SendOutcome, StoreError> {
    let mut conn = pool.acquire().await?;
    let message_id = Uuid::new_v4();
    let row = sqlx::query(SEND_FUNCTION_SQL)
        .bind(req.conv_id.as_str())
        .bind(req.sender_user.as_str())
        .bind(req.sender_device.as_str())
        .bind(req.client_msg_id.as_str())
        .bind(req.request_hash.as_str())
        .bind(req.body.as_str())
        .bind(message_id)
        .bind(!breaks.no_row_lock())
        .bind(breaks.no_unique_index())
        .fetch_one(&mut *conn)
        .await
        .map_err(statement_error)?;
    answer(req, &read_row(&row)?, message_id)
}

/// Commits `reqs` in one statement and answers each in order. `Err`: the statement failed in
/// PostgreSQL, so nothing of the batch was written.
pub(super) async fn send_batch(
    pool: &TimedPool,
    reqs: &[&SendRequest],
    breaks: Breaks,
) -> Result<Vec<Result<SendOutcome, StoreError>>, StoreError> {
    // Each key goes to the function once; a later request with the same key is answered from
    // the first one's row, which its own key check would have read too.
    let mut first_with_key: HashMap<(&str, &str, &str), usize> = HashMap::new();
    // Per request: the index of its key's first request in `firsts`.
    let mut slot_of = Vec::with_capacity(reqs.len());
    let mut firsts: Vec<usize> = Vec::with_capacity(reqs.len());
    for (i, req) in reqs.iter().enumerate() {
        let key = (
            req.conv_id.as_str(),
            req.sender_user.as_str(),
            req.client_msg_id.as_str(),
        );
        let slot = *first_with_key.entry(key).or_insert_with(|| {
            firsts.push(i);
            firsts.len() - 1
        });
        slot_of.push(slot);
    }
    let column =
        |f: fn(&SendRequest) -> &str| -> Vec<&str> { firsts.iter().map(|&i| f(reqs[i])).collect() };
    let message_ids: Vec<Uuid> = firsts.iter().map(|_| Uuid::new_v4()).collect();
    let mut conn = pool.acquire().await?;
    let rows = sqlx::query(SEND_BATCH_FUNCTION_SQL)
        .bind(column(|r| r.conv_id.as_str()))
        .bind(column(|r| r.sender_user.as_str()))
        .bind(column(|r| r.sender_device.as_str()))
        .bind(column(|r| r.client_msg_id.as_str()))
        .bind(column(|r| r.request_hash.as_str()))
        .bind(column(|r| r.body.as_str()))
        .bind(&message_ids)
        .bind(!breaks.no_row_lock())
        .bind(breaks.no_unique_index())
        .fetch_all(&mut *conn)
        .await;
    let rows = match rows {
        Ok(rows) => rows,
        Err(e) if before_commit(&e) => return Err(e.into()),
        Err(e) => return Ok(all_unknown(reqs.len(), &statement_error(e))),
    };
    let read = match read_rows(&rows, firsts.len()) {
        Ok(read) => read,
        Err(e) => return Ok(all_unknown(reqs.len(), &e)),
    };
    Ok(reqs
        .iter()
        .zip(&slot_of)
        .enumerate()
        .map(|(i, (req, &slot))| {
            let first = firsts[slot];
            if first == i {
                return answer(req, &read[slot], message_ids[slot]);
            }
            answer_later(req, &read[slot], first, reqs[first], message_ids[slot])
        })
        .collect())
}

fn all_unknown(len: usize, e: &StoreError) -> Vec<Result<SendOutcome, StoreError>> {
    let unknown = StoreError::OutcomeUnknown(e.to_string());
    vec![Err(unknown); len]
}

/// The error of a one-statement send: one raised inside the function (its context names it)
/// or by its arguments was before the commit; anything else may have come from the commit.
fn statement_error(e: sqlx::Error) -> StoreError {
    if before_commit(&e) {
        StoreError::from(e)
    } else {
        StoreError::OutcomeUnknown(e.to_string())
    }
}

/// Whether `e` surely came before the statement's commit: raised while a send function ran,
/// or a data error (class 22) of the arguments, which PostgreSQL checks before running it.
fn before_commit(e: &sqlx::Error) -> bool {
    let sqlx::Error::Database(db) = e else {
        return false;
    };
    let Some(pg) = db.try_downcast_ref::<sqlx::postgres::PgDatabaseError>() else {
        return false;
    };
    let in_function = pg.r#where().is_some_and(|context| {
        context.contains("function send_message(") || context.contains("function send_messages(")
    });
    in_function || pg.code().starts_with("22")
}

/// The rows of `send_messages`, in request order; exactly one per request.
fn read_rows(rows: &[PgRow], len: usize) -> Result<Vec<FunctionRow>, StoreError> {
    let mut read: Vec<Option<FunctionRow>> = (0..len).map(|_| None).collect();
    for row in rows {
        let n: i32 = row.try_get("n").map_err(after_commit)?;
        let entry = usize::try_from(n - 1)
            .ok()
            .and_then(|i| read.get_mut(i))
            .ok_or_else(|| StoreError::OutcomeUnknown(format!("send_messages named row {n}")))?;
        *entry = Some(read_row(row)?);
    }
    read.into_iter()
        .map(|r| r.ok_or_else(|| StoreError::OutcomeUnknown("send_messages left a row out".into())))
        .collect()
}

/// A column that cannot be read after the commit leaves the outcome unknown.
fn after_commit(e: sqlx::Error) -> StoreError {
    StoreError::OutcomeUnknown(e.to_string())
}

fn read_row(row: &PgRow) -> Result<FunctionRow, StoreError> {
    let stored = |prefix: &str| -> Result<Option<StoredRequest>, StoreError> {
        let seq: Option<i64> = row
            .try_get(format!("{prefix}_seq").as_str())
            .map_err(after_commit)?;
        let message_id: Option<Uuid> = row
            .try_get(format!("{prefix}_message_id").as_str())
            .map_err(after_commit)?;
        let hash: Option<String> = row
            .try_get(format!("{prefix}_request_hash").as_str())
            .map_err(after_commit)?;
        match (seq, message_id, hash) {
            (None, _, _) => Ok(None),
            (Some(seq), Some(message_id), Some(hash)) => Ok(Some(StoredRequest {
                seq,
                message_id,
                request_hash: RequestHash::from_stored(hash),
            })),
            _ => Err(StoreError::OutcomeUnknown(
                "stored message without id".into(),
            )),
        }
    };
    let written_seq: Option<i64> = row.try_get("written_seq").map_err(after_commit)?;
    let written = match written_seq {
        Some(seq) => Some((seq, row.try_get("written_at").map_err(after_commit)?)),
        None => None,
    };
    Ok(FunctionRow {
        conv_found: row.try_get("conv_found").map_err(after_commit)?,
        check: KeyCheck {
            in_log: stored("log")?,
            in_tombstones: stored("tomb")?,
            sender_is_member: row
                .try_get::<Option<bool>, _>("is_member")
                .map_err(after_commit)?
                .unwrap_or(false),
        },
        written,
    })
}

/// The answer to the request the function checked (the first with its key).
fn answer(
    req: &SendRequest,
    row: &FunctionRow,
    message_id: Uuid,
) -> Result<SendOutcome, StoreError> {
    // An unknown conversation answers like a non-member (P10), whatever its key check read.
    if !row.conv_found {
        return Err(Rejection::NotMember.into());
    }
    match (decide(&row.check, None, &req.request_hash), row.written) {
        (Ok(SendDecision::Write), Some((seq, created_at))) => {
            Ok(req.committed(seq, message_id, created_at))
        }
        (
            Ok(SendDecision::Replay {
                seq,
                message_id,
                purged,
            }),
            None,
        ) => Ok(req.replayed(seq, message_id, purged)),
        (Err(refused), None) => Err(refused.into()),
        (decision, written) => Err(disagreement(&decision, written)),
    }
}

/// The answer to a later request of a batch with the key of request `first`, from `first`'s
/// row: the same decision the batch made in `send_batch.rs`, with `first` as the earlier
/// request when it was written.
fn answer_later(
    req: &SendRequest,
    row: &FunctionRow,
    first: usize,
    first_req: &SendRequest,
    first_message_id: Uuid,
) -> Result<SendOutcome, StoreError> {
    if !row.conv_found {
        return Err(Rejection::NotMember.into());
    }
    let earlier = row.written.map(|_| Earlier {
        index: first,
        request_hash: &first_req.request_hash,
    });
    match decide(&row.check, earlier, &req.request_hash) {
        Ok(SendDecision::Replay {
            seq,
            message_id,
            purged,
        }) => Ok(req.replayed(seq, message_id, purged)),
        Ok(SendDecision::ReplayOfEarlier { .. }) => match row.written {
            Some((seq, _)) => Ok(req.replayed(seq, first_message_id, false)),
            None => Err(disagreement(&Ok(SendDecision::Write), None)),
        },
        Err(refused) => Err(refused.into()),
        // The key's first request was not written, so this one, with the same key check, is
        // not either.
        decision @ Ok(SendDecision::Write) => Err(disagreement(&decision, row.written)),
    }
}

/// The function and the decision disagree: a bug, and a write may have committed.
fn disagreement(
    decision: &Result<SendDecision, Rejection>,
    written: Option<(i64, DateTime<Utc>)>,
) -> StoreError {
    StoreError::OutcomeUnknown(format!(
        "the send function wrote {written:?} where the decision is {decision:?}"
    ))
}
