//! The send transaction for several requests at once (SPEC §4, "Batching"): the steps of
//! `send.rs` once for the whole batch (one lock statement, one key check, one insert, one
//! commit), with every request decided on its own, in queue order, by the send decision of
//! every store (`parley_domain::decide::send`):
//!
//! - a key already in the log or in the tombstones: `dup`, or `IDEMPOTENCY_MISMATCH` when the
//!   fingerprint differs (the replay check precedes the membership check);
//! - a key taken by an earlier request of the same batch: the same two answers, against it;
//! - a sender without an open period, or an unknown conversation: `NOT_MEMBER`;
//! - otherwise the next seq of its conversation.
//!
//! The requests may belong to several conversations. Their rows are locked in `conv_id` order,
//! and every other transaction locks at most one conversation row, so two batches, or a batch
//! and a membership change, never wait for each other in a cycle.
//!
//! A refused request never fails the others. A database error before the commit returns the
//! error for the whole batch (nothing was written; the queue then sends each request alone, so
//! one request that makes the database fail cannot fail its batch-mates); a failed commit
//! leaves the outcome of every request that was to write unknown (P6), while refusals and
//! replays keep their answers, which did not depend on the commit.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use chrono::{DateTime, Utc};
use parley_domain::decide::send::{decide, Earlier, KeyCheck, SendDecision};
use parley_domain::decide::{LogCounter, Slot};
use parley_domain::Rejection;
use sqlx::postgres::PgRow;
use sqlx::Row;
use uuid::Uuid;

use super::send_function;
use super::timed_pool::TimedPool;
use super::PgTx;
use crate::breaks::Breaks;
use crate::error::StoreError;
use crate::flow::send::commit_after_ack;
use crate::flow::WriteTx;
use crate::rows;
use crate::types::{SendOutcome, SendRequest};

/// Locks the batch's conversations one by one in the order of `$1`, which the caller sorts by
/// `conv_id` (distinct). The locking subquery is not flattened into a join, so each row is
/// reached by its primary key, in array order, under every plan.
pub const SEND_BATCH_LOCK_SQL: &str = "
SELECT c.conv_id, c.next_seq, c.msg_count, c.ctid::text AS row_id
  FROM UNNEST($1::text[]) WITH ORDINALITY AS k(conv_id, n)
  CROSS JOIN LATERAL (
    SELECT ctid, conv_id, next_seq, msg_count FROM conversations
     WHERE conv_id = k.conv_id
       FOR NO KEY UPDATE) c
 ORDER BY k.n";

/// The lock statement without its lock, for the test break `no-row-lock` only (`breaks.rs`).
const SEND_BATCH_READ_UNLOCKED_SQL: &str = "
SELECT c.conv_id, c.next_seq, c.msg_count, c.ctid::text AS row_id
  FROM UNNEST($1::text[]) WITH ORDINALITY AS k(conv_id, n)
  CROSS JOIN LATERAL (
    SELECT ctid, conv_id, next_seq, msg_count FROM conversations
     WHERE conv_id = k.conv_id) c
 ORDER BY k.n";

/// The request keys of the batch in the log and in the tombstones, and the senders' open
/// periods, each row naming its request by position (`n`, from 1). `$1` conv_id[], `$2`
/// sender_user[], `$3` client_msg_id[] (one entry per request).
/// Each lookup is a LATERAL subquery with `LIMIT 1` (each is unique by its index), which the
/// planner cannot flatten into a join: it stays one index probe per request under every plan,
/// the generic plan of a prepared statement included (`send_batch_statements_use_indexes`).
pub const SEND_BATCH_KEY_CHECK_SQL: &str = "
SELECT 'event' AS src, k.n, e.seq, e.message_id, e.request_hash
  FROM UNNEST($1::text[], $2::text[], $3::text[])
       WITH ORDINALITY AS k(conv_id, sender_user, client_msg_id, n)
  CROSS JOIN LATERAL (
    SELECT seq, message_id, request_hash FROM events
     WHERE conv_id = k.conv_id AND sender_user = k.sender_user
       AND client_msg_id = k.client_msg_id AND client_msg_id IS NOT NULL
     LIMIT 1) e
UNION ALL
SELECT 'tombstone', k.n, t.seq, t.message_id, t.request_hash
  FROM UNNEST($1::text[], $2::text[], $3::text[])
       WITH ORDINALITY AS k(conv_id, sender_user, client_msg_id, n)
  CROSS JOIN LATERAL (
    SELECT seq, message_id, request_hash FROM idem_tombstones
     WHERE conv_id = k.conv_id AND sender_user = k.sender_user
       AND client_msg_id = k.client_msg_id
     LIMIT 1) t
UNION ALL
SELECT 'member', k.n, NULL, NULL, NULL
  FROM UNNEST($1::text[], $2::text[]) WITH ORDINALITY AS k(conv_id, user_id, n)
  CROSS JOIN LATERAL (
    SELECT 1 FROM membership_periods
     WHERE conv_id = k.conv_id AND user_id = k.user_id AND to_seq IS NULL
     LIMIT 1) m";

/// Inserts the accepted requests, advances each conversation's counter and message count, and
/// moves each sender's read position to their last new message, in one statement.
/// `$1`–`$9` the rows (conv_id, seq, message_id, sender_user, sender_device, client_msg_id,
/// request_hash, body, msg_ordinal); `$10`–`$12` per conversation (conv_id, last seq, message
/// count after it); `$13`–`$15` one read position per conversation and sender; `$16` the
/// locked rows' `ctid`s from the lock statement. The rows stay where they are while the batch
/// holds their locks, and a TID scan reaches them under every plan (a join on `conv_id` may
/// become a scan of the whole table in a prepared statement's generic plan).
pub const SEND_BATCH_INSERT_SQL: &str = "
WITH ins AS (
   INSERT INTO events (conv_id, seq, kind, message_id, sender_user, sender_device,
                       client_msg_id, request_hash, body, msg_ordinal)
   SELECT r.conv_id, r.seq, 'msg', r.message_id, r.sender_user, r.sender_device,
          r.client_msg_id, r.request_hash, r.body, r.msg_ordinal
     FROM UNNEST($1::text[], $2::bigint[], $3::uuid[], $4::text[], $5::text[], $6::text[],
                 $7::text[], $8::text[], $9::bigint[])
          AS r(conv_id, seq, message_id, sender_user, sender_device, client_msg_id,
               request_hash, body, msg_ordinal)
   RETURNING conv_id, seq, created_at
 ), counter AS (
   UPDATE conversations c
      SET next_seq = u.last_seq + 1, msg_count = u.msg_count, change_xid = pg_current_xact_id()
     FROM UNNEST($10::text[], $11::bigint[], $12::bigint[]) AS u(conv_id, last_seq, msg_count)
    WHERE c.ctid = ANY($16::text[]::tid[]) AND c.conv_id = u.conv_id
 ), mark AS (
   INSERT INTO read_marks (conv_id, user_id, read_seq)
   SELECT m.conv_id, m.user_id, m.read_seq
     FROM UNNEST($13::text[], $14::text[], $15::bigint[]) AS m(conv_id, user_id, read_seq)
   ON CONFLICT (conv_id, user_id) DO UPDATE
     SET read_seq = GREATEST(read_marks.read_seq, EXCLUDED.read_seq), updated_at = now(),
         change_xid = pg_current_xact_id()
 )
 SELECT conv_id, seq, created_at FROM ins";

/// What the batch decided for one request before the insert.
enum Decision {
    Answered(Box<Result<SendOutcome, StoreError>>),
    /// To be written at `slot` with `message_id`.
    Write {
        slot: Slot,
        message_id: Uuid,
    },
    /// A replay of the earlier request `index` of this batch, which is to be written.
    SameAs {
        index: usize,
    },
}

/// What the batch read under its locks.
struct Checked {
    /// Each locked conversation's counters.
    counters: HashMap<String, LogCounter>,
    /// The locked rows' `ctid`s, as text.
    row_ids: Vec<String>,
    /// Per request: its key in the log or in the tombstones, and its sender's open period.
    checks: Vec<KeyCheck>,
}

/// Commits `reqs` and answers each in order. `Err`: the batch failed before its commit, so
/// nothing of it was written. The batch runs as one statement, the function `send_messages`
/// (`send_function.rs`), except under the test break `ack-before-commit`, which needs a commit
/// apart from the answer and runs the statements below in a transaction.
pub(super) async fn send_batch(
    pool: &TimedPool,
    reqs: &[&SendRequest],
    breaks: Breaks,
) -> Result<Vec<Result<SendOutcome, StoreError>>, StoreError> {
    if !breaks.ack_before_commit() {
        return send_function::send_batch(pool, reqs, breaks).await;
    }
    send_batch_in_transaction(pool, reqs, breaks).await
}

/// The batch as a transaction of five round trips: BEGIN, the locks, the key checks, the
/// insert, COMMIT.
async fn send_batch_in_transaction(
    pool: &TimedPool,
    reqs: &[&SendRequest],
    breaks: Breaks,
) -> Result<Vec<Result<SendOutcome, StoreError>>, StoreError> {
    let mut tx = pool.begin().await?;
    let checked = lock_and_check(&mut tx, reqs, breaks).await?;
    let decisions = decide_each(reqs, &checked);
    let writes: Vec<(usize, Slot, Uuid)> = decisions
        .iter()
        .enumerate()
        .filter_map(|(i, d)| match d {
            Decision::Write { slot, message_id } => Some((i, *slot, *message_id)),
            _ => None,
        })
        .collect();
    let mut created = HashMap::new();
    if !writes.is_empty() {
        created = insert(&mut tx, reqs, &writes, &checked).await?;
        if breaks.ack_before_commit() {
            // Test break: answer as committed now and commit in the background.
            tokio::spawn(commit_after_ack(tx));
            return Ok(answers(reqs, decisions, &created, None));
        }
        if let Err(e) = tx.commit_or_unknown().await {
            return Ok(answers(reqs, decisions, &created, Some(&e)));
        }
    }
    Ok(answers(reqs, decisions, &created, None))
}

async fn lock_and_check(
    tx: &mut PgTx<'_>,
    reqs: &[&SendRequest],
    breaks: Breaks,
) -> Result<Checked, StoreError> {
    // Test break `no-unique-index`: the key check before the lock (see `flow::send`).
    let early = if breaks.no_unique_index() {
        Some(key_check(tx, reqs).await?)
    } else {
        None
    };
    let convs: BTreeSet<&str> = reqs.iter().map(|r| r.conv_id.as_str()).collect();
    let convs: Vec<&str> = convs.into_iter().collect();
    let lock = if breaks.no_row_lock() {
        SEND_BATCH_READ_UNLOCKED_SQL
    } else {
        SEND_BATCH_LOCK_SQL
    };
    let locked = sqlx::query(lock).bind(&convs).fetch_all(&mut **tx).await?;
    let mut counters = HashMap::with_capacity(locked.len());
    let mut row_ids = Vec::with_capacity(locked.len());
    for row in &locked {
        row_ids.push(row.try_get::<String, _>("row_id")?);
        counters.insert(
            row.try_get::<String, _>("conv_id")?,
            LogCounter::new(row.try_get("next_seq")?, row.try_get("msg_count")?),
        );
    }
    let checks = match early {
        Some(checks) => checks,
        None => key_check(tx, reqs).await?,
    };
    Ok(Checked {
        counters,
        row_ids,
        checks,
    })
}

/// Each request's key in the log and in the tombstones, and its sender's open period.
async fn key_check(tx: &mut PgTx<'_>, reqs: &[&SendRequest]) -> Result<Vec<KeyCheck>, StoreError> {
    let conv_ids: Vec<&str> = reqs.iter().map(|r| r.conv_id.as_str()).collect();
    let senders: Vec<&str> = reqs.iter().map(|r| r.sender_user.as_str()).collect();
    let keys: Vec<&str> = reqs.iter().map(|r| r.client_msg_id.as_str()).collect();
    let found = sqlx::query(SEND_BATCH_KEY_CHECK_SQL)
        .bind(&conv_ids)
        .bind(&senders)
        .bind(&keys)
        .fetch_all(&mut **tx)
        .await?;
    read_checks(&found, reqs.len())
}

/// Sorts the key check's rows by the request they name (`n`, from 1).
fn read_checks(rows: &[PgRow], len: usize) -> Result<Vec<KeyCheck>, StoreError> {
    let mut checks = vec![KeyCheck::default(); len];
    for row in rows {
        let n: i64 = row.try_get("n")?;
        let check = usize::try_from(n - 1)
            .ok()
            .and_then(|i| checks.get_mut(i))
            .ok_or_else(|| StoreError::Unavailable(format!("key check named request {n}")))?;
        check.record(rows::key_check(row)?);
    }
    Ok(checks)
}

/// Each request's decision, in queue order, by the one send decision of every store; a key
/// written earlier in the batch counts as taken.
fn decide_each(reqs: &[&SendRequest], checked: &Checked) -> Vec<Decision> {
    let mut taken: HashMap<(&str, &str, &str), usize> = HashMap::new();
    // The next seq of each conversation, as the batch allocates them.
    let mut counters: HashMap<&str, LogCounter> = checked
        .counters
        .iter()
        .map(|(conv, counter)| (conv.as_str(), *counter))
        .collect();
    let mut decisions = Vec::with_capacity(reqs.len());
    for (i, req) in reqs.iter().enumerate() {
        let key = (
            req.conv_id.as_str(),
            req.sender_user.as_str(),
            req.client_msg_id.as_str(),
        );
        let earlier = taken.get(&key).map(|&index| Earlier {
            index,
            request_hash: &reqs[index].request_hash,
        });
        let answered =
            |outcome: Result<SendOutcome, StoreError>| Decision::Answered(Box::new(outcome));
        decisions.push(
            match decide(&checked.checks[i], earlier, &req.request_hash) {
                Err(refused) => answered(Err(refused.into())),
                Ok(SendDecision::Replay {
                    seq,
                    message_id,
                    purged,
                }) => answered(Ok(req.replayed(seq, message_id, purged))),
                Ok(SendDecision::ReplayOfEarlier { index }) => Decision::SameAs { index },
                Ok(SendDecision::Write) => match counters.get_mut(key.0) {
                    Some(counter) => {
                        taken.insert(key, i);
                        Decision::Write {
                            slot: counter.take_msg(),
                            message_id: Uuid::new_v4(),
                        }
                    }
                    // A member of a conversation whose row is gone cannot happen (periods
                    // reference it); answer like an unknown conversation rather than write
                    // without its lock.
                    None => answered(Err(Rejection::NotMember.into())),
                },
            },
        );
    }
    decisions
}

/// The columns of the insert, one entry per written request.
#[derive(Default)]
struct Rows<'a> {
    convs: Vec<&'a str>,
    seqs: Vec<i64>,
    ids: Vec<Uuid>,
    senders: Vec<&'a str>,
    devices: Vec<&'a str>,
    keys: Vec<&'a str>,
    hashes: Vec<&'a str>,
    bodies: Vec<&'a str>,
    ordinals: Vec<i64>,
}

async fn insert(
    tx: &mut PgTx<'_>,
    reqs: &[&SendRequest],
    writes: &[(usize, Slot, Uuid)],
    checked: &Checked,
) -> Result<HashMap<(String, i64), DateTime<Utc>>, StoreError> {
    let mut rows = Rows::default();
    // Each conversation's last slot after the batch.
    let mut last: BTreeMap<&str, Slot> = BTreeMap::new();
    // One read position per (conversation, sender): their last new message.
    let mut marks: HashMap<(&str, &str), i64> = HashMap::new();
    for &(i, slot, message_id) in writes {
        let req = reqs[i];
        let conv = req.conv_id.as_str();
        // Each conversation's writes take its seqs without a hole from its locked next_seq.
        let expected = match last.get(conv) {
            Some(prev) => prev.seq + 1,
            None => checked.counters.get(conv).map_or(0, LogCounter::next_seq),
        };
        assert_eq!(slot.seq, expected, "batch seq of {conv} off its counter");
        last.insert(conv, slot);
        rows.convs.push(conv);
        rows.seqs.push(slot.seq);
        rows.ids.push(message_id);
        rows.senders.push(req.sender_user.as_str());
        rows.devices.push(req.sender_device.as_str());
        rows.keys.push(req.client_msg_id.as_str());
        rows.hashes.push(req.request_hash.as_str());
        rows.bodies.push(req.body.as_str());
        rows.ordinals.push(slot.msg_ordinal);
        let mark = marks
            .entry((conv, req.sender_user.as_str()))
            .or_insert(slot.seq);
        *mark = (*mark).max(slot.seq);
    }
    let (last_convs, (last_seqs, last_counts)): (Vec<&str>, (Vec<i64>, Vec<i64>)) = last
        .into_iter()
        .map(|(conv, slot)| (conv, (slot.seq, slot.msg_ordinal)))
        .unzip();
    let (mark_keys, mark_seqs): (Vec<(&str, &str)>, Vec<i64>) = marks.into_iter().unzip();
    let (mark_convs, mark_users): (Vec<&str>, Vec<&str>) = mark_keys.into_iter().unzip();
    let returned = sqlx::query(SEND_BATCH_INSERT_SQL)
        .bind(&rows.convs)
        .bind(&rows.seqs)
        .bind(&rows.ids)
        .bind(&rows.senders)
        .bind(&rows.devices)
        .bind(&rows.keys)
        .bind(&rows.hashes)
        .bind(&rows.bodies)
        .bind(&rows.ordinals)
        .bind(&last_convs)
        .bind(&last_seqs)
        .bind(&last_counts)
        .bind(&mark_convs)
        .bind(&mark_users)
        .bind(&mark_seqs)
        .bind(&checked.row_ids)
        .fetch_all(&mut **tx)
        .await?;
    let mut created = HashMap::with_capacity(returned.len());
    for row in &returned {
        let key = (
            row.try_get::<String, _>("conv_id")?,
            row.try_get::<i64, _>("seq")?,
        );
        created.insert(key, row.try_get("created_at")?);
    }
    if created.len() != writes.len() {
        return Err(StoreError::Unavailable(format!(
            "batch insert returned {} of {} rows",
            created.len(),
            writes.len()
        )));
    }
    Ok(created)
}

/// Each request's answer; `commit_failed` turns every write, and every replay of one, into an
/// unknown outcome.
fn answers(
    reqs: &[&SendRequest],
    decisions: Vec<Decision>,
    created: &HashMap<(String, i64), DateTime<Utc>>,
    commit_failed: Option<&StoreError>,
) -> Vec<Result<SendOutcome, StoreError>> {
    let written = |i: usize, seq: i64, message_id: Uuid| -> Result<SendOutcome, StoreError> {
        if let Some(e) = commit_failed {
            return Err(e.clone());
        }
        let key = (reqs[i].conv_id.as_str().to_owned(), seq);
        let created_at = created.get(&key).copied().ok_or_else(|| {
            StoreError::OutcomeUnknown("committed row without its timestamp".into())
        })?;
        Ok(reqs[i].committed(seq, message_id, created_at))
    };
    let seq_of = |index: usize| match decisions.get(index) {
        Some(Decision::Write { slot, message_id }) => Some((slot.seq, *message_id)),
        _ => None,
    };
    decisions
        .iter()
        .enumerate()
        .map(|(i, d)| match d {
            Decision::Answered(outcome) => outcome.as_ref().clone(),
            Decision::Write { slot, message_id } => written(i, slot.seq, *message_id),
            Decision::SameAs { index } => {
                let Some((seq, message_id)) = seq_of(*index) else {
                    return Err(StoreError::Unavailable(
                        "replay of an unwritten request".into(),
                    ));
                };
                if let Some(e) = commit_failed {
                    return Err(e.clone());
                }
                Ok(reqs[i].replayed(seq, message_id, false))
            }
        })
        .collect()
}
