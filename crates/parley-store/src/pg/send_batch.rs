//! The send transaction for several requests to one conversation (SPEC §4, "Batching"): the
//! steps of `send.rs` once for the whole batch (one lock, one key check, one insert, one
//! commit), with every request decided on its own, in queue order:
//!
//! - a key already in the log or in the tombstones: `dup`, or `IDEMPOTENCY_MISMATCH` when the
//!   fingerprint differs (the replay check precedes the membership check, as in `send.rs`);
//! - a key taken by an earlier request of the same batch: the same two answers, against it;
//! - a sender without an open period: `NOT_MEMBER`;
//! - otherwise the next seq.
//!
//! A refused request never fails the others. A database error before the commit returns the
//! error for the whole batch (nothing was written; the queue then sends each request alone, so
//! one request that makes the database fail cannot fail its batch-mates); a failed commit
//! leaves the outcome of every request that was to write unknown (P6), while refusals and
//! replays keep their answers, which did not depend on the commit.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use parley_domain::Rejection;
use sqlx::postgres::PgRow;
use sqlx::{PgPool, Postgres, Row, Transaction};
use uuid::Uuid;

use super::send::SEND_LOCK_SQL;
use crate::error::StoreError;
use crate::types::{SendOutcome, SendRequest};

/// The request keys of the batch in the log and in the tombstones, and the senders' open
/// periods. `$1` conv_id, `$2` sender_user[], `$3` client_msg_id[] (pairwise).
pub const SEND_BATCH_KEY_CHECK_SQL: &str = "
SELECT 'event' AS src, sender_user, client_msg_id, seq, message_id, request_hash FROM events
 WHERE conv_id = $1
   AND (sender_user, client_msg_id) IN (SELECT * FROM UNNEST($2::text[], $3::text[]))
UNION ALL
SELECT 'tombstone', sender_user, client_msg_id, seq, message_id, request_hash FROM idem_tombstones
 WHERE conv_id = $1
   AND (sender_user, client_msg_id) IN (SELECT * FROM UNNEST($2::text[], $3::text[]))
UNION ALL
SELECT 'member', user_id, NULL, NULL, NULL, NULL FROM membership_periods
 WHERE conv_id = $1 AND user_id = ANY($2::text[]) AND to_seq IS NULL";

/// Inserts the accepted requests at consecutive seqs, advances the counter and the message
/// count, and moves each sender's read position to their last new message, in one statement.
/// `$1` conv_id; `$2`–`$9` the rows (seq, message_id, sender_user, sender_device,
/// client_msg_id, request_hash, body, msg_ordinal); `$10` the last seq, `$11` the message count
/// after it; `$12`/`$13` one read position per sender.
pub const SEND_BATCH_INSERT_SQL: &str = "
WITH ins AS (
   INSERT INTO events (conv_id, seq, kind, message_id, sender_user, sender_device,
                       client_msg_id, request_hash, body, msg_ordinal)
   SELECT $1, r.seq, 'msg', r.message_id, r.sender_user, r.sender_device,
          r.client_msg_id, r.request_hash, r.body, r.msg_ordinal
     FROM UNNEST($2::bigint[], $3::uuid[], $4::text[], $5::text[], $6::text[], $7::text[],
                 $8::text[], $9::bigint[])
          AS r(seq, message_id, sender_user, sender_device, client_msg_id, request_hash, body,
               msg_ordinal)
   RETURNING seq, created_at
 ), counter AS (
   UPDATE conversations
      SET next_seq = $10 + 1, msg_count = $11, change_xid = pg_current_xact_id()
    WHERE conv_id = $1
 ), mark AS (
   INSERT INTO read_marks (conv_id, user_id, read_seq)
   SELECT $1, m.user_id, m.read_seq FROM UNNEST($12::text[], $13::bigint[]) AS m(user_id, read_seq)
   ON CONFLICT (conv_id, user_id) DO UPDATE
     SET read_seq = GREATEST(read_marks.read_seq, EXCLUDED.read_seq), updated_at = now(),
         change_xid = pg_current_xact_id()
 )
 SELECT seq, created_at FROM ins";

/// What the batch decided for one request before the insert.
enum Decision {
    Answered(Box<Result<SendOutcome, StoreError>>),
    /// To be written at `seq` with `message_id`.
    Write {
        seq: i64,
        message_id: Uuid,
    },
    /// A replay of the earlier request `index` of this batch, which is to be written.
    SameAs {
        index: usize,
    },
}

/// The request keys found, by (sender_user, client_msg_id).
type Priors = HashMap<(String, String), Prior>;

/// A request key found in the log or in the tombstones.
struct Prior {
    seq: i64,
    message_id: Uuid,
    request_hash: String,
    purged: bool,
}

/// Commits `reqs`, all to one conversation, and answers each in order. `Err`: the batch failed
/// before its commit, so nothing of it was written.
pub(super) async fn send_batch(
    pool: &PgPool,
    reqs: &[&SendRequest],
) -> Result<Vec<Result<SendOutcome, StoreError>>, StoreError> {
    let Some(first) = reqs.first() else {
        return Ok(Vec::new());
    };
    let conv = first.conv_id.as_str();
    let mut tx = pool.begin().await?;
    let locked = sqlx::query(SEND_LOCK_SQL)
        .bind(conv)
        .fetch_optional(&mut *tx)
        .await?;
    let Some(locked) = locked else {
        // An unknown conversation answers like a non-member (P10).
        return Ok(reqs
            .iter()
            .map(|_| Err(Rejection::NotMember.into()))
            .collect());
    };
    let next_seq: i64 = locked.try_get("next_seq")?;
    let msg_count: i64 = locked.try_get("msg_count")?;

    let senders: Vec<&str> = reqs.iter().map(|r| r.sender_user.as_str()).collect();
    let keys: Vec<&str> = reqs.iter().map(|r| r.client_msg_id.as_str()).collect();
    let found = sqlx::query(SEND_BATCH_KEY_CHECK_SQL)
        .bind(conv)
        .bind(&senders)
        .bind(&keys)
        .fetch_all(&mut *tx)
        .await?;
    let (priors, members) = read_checks(&found)?;

    let decisions = decide(reqs, &priors, &members, next_seq);
    let writes: Vec<(usize, i64, Uuid)> = decisions
        .iter()
        .enumerate()
        .filter_map(|(i, d)| match d {
            Decision::Write { seq, message_id } => Some((i, *seq, *message_id)),
            _ => None,
        })
        .collect();
    let mut created: HashMap<i64, DateTime<Utc>> = HashMap::new();
    if !writes.is_empty() {
        created = insert(&mut tx, reqs, &writes, msg_count).await?;
        if let Err(e) = super::rows::commit(tx).await {
            return Ok(answers(reqs, decisions, &created, Some(&e)));
        }
    }
    Ok(answers(reqs, decisions, &created, None))
}

/// Splits the key check's rows into the keys found (the log before the tombstones) and the
/// senders with an open period.
fn read_checks(rows: &[PgRow]) -> Result<(Priors, Vec<String>), StoreError> {
    let mut priors = Priors::new();
    let mut members = Vec::new();
    for row in rows {
        let src: &str = row.try_get("src")?;
        let sender: String = row.try_get("sender_user")?;
        if src == "member" {
            members.push(sender);
            continue;
        }
        let key = (sender, row.try_get::<String, _>("client_msg_id")?);
        let purged = src == "tombstone";
        if purged && priors.contains_key(&key) {
            continue;
        }
        let message_id: Option<Uuid> = row.try_get("message_id")?;
        let message_id = message_id
            .ok_or_else(|| StoreError::Unavailable("stored message without id".into()))?;
        priors.insert(
            key,
            Prior {
                seq: row.try_get("seq")?,
                message_id,
                request_hash: row.try_get("request_hash")?,
                purged,
            },
        );
    }
    Ok((priors, members))
}

fn decide(
    reqs: &[&SendRequest],
    priors: &Priors,
    members: &[String],
    next_seq: i64,
) -> Vec<Decision> {
    let mut taken: HashMap<(&str, &str), usize> = HashMap::new();
    let mut seq = next_seq;
    let mut decisions = Vec::with_capacity(reqs.len());
    for (i, req) in reqs.iter().enumerate() {
        let sender = req.sender_user.as_str();
        let key = req.client_msg_id.as_str();
        let hash = req.request_hash.as_str();
        let decision = if let Some(prior) = priors.get(&(sender.to_owned(), key.to_owned())) {
            Decision::Answered(Box::new(if prior.request_hash == hash {
                Ok(SendOutcome {
                    conv_id: req.conv_id.clone(),
                    seq: prior.seq,
                    message_id: prior.message_id,
                    dup: true,
                    purged: prior.purged,
                    event: None,
                })
            } else {
                Err(Rejection::IdempotencyMismatch.into())
            }))
        } else if let Some(&index) = taken.get(&(sender, key)) {
            if reqs[index].request_hash.as_str() == hash {
                Decision::SameAs { index }
            } else {
                Decision::Answered(Box::new(Err(Rejection::IdempotencyMismatch.into())))
            }
        } else if !members.iter().any(|m| m == sender) {
            Decision::Answered(Box::new(Err(Rejection::NotMember.into())))
        } else {
            taken.insert((sender, key), i);
            let decision = Decision::Write {
                seq,
                message_id: Uuid::new_v4(),
            };
            seq += 1;
            decision
        };
        decisions.push(decision);
    }
    decisions
}

async fn insert(
    tx: &mut Transaction<'static, Postgres>,
    reqs: &[&SendRequest],
    writes: &[(usize, i64, Uuid)],
    msg_count: i64,
) -> Result<HashMap<i64, DateTime<Utc>>, StoreError> {
    let n = writes.len();
    let (mut seqs, mut ids, mut senders, mut devices) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    let (mut keys, mut hashes, mut bodies, mut ordinals) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    // One read position per sender: their last new message (one row per key in one upsert).
    let mut marks: HashMap<&str, i64> = HashMap::new();
    for (k, &(i, seq, message_id)) in writes.iter().enumerate() {
        let req = reqs[i];
        seqs.push(seq);
        ids.push(message_id);
        senders.push(req.sender_user.as_str());
        devices.push(req.sender_device.as_str());
        keys.push(req.client_msg_id.as_str());
        hashes.push(req.request_hash.as_str());
        bodies.push(req.body.as_str());
        ordinals.push(msg_count + 1 + k as i64);
        let mark = marks.entry(req.sender_user.as_str()).or_insert(seq);
        *mark = (*mark).max(seq);
    }
    let (mark_users, mark_seqs): (Vec<&str>, Vec<i64>) = marks.into_iter().unzip();
    let last_seq = seqs.last().copied().unwrap_or_default();
    let last_ordinal = ordinals.last().copied().unwrap_or(msg_count);
    let rows = sqlx::query(SEND_BATCH_INSERT_SQL)
        .bind(reqs[writes[0].0].conv_id.as_str())
        .bind(&seqs)
        .bind(&ids)
        .bind(&senders)
        .bind(&devices)
        .bind(&keys)
        .bind(&hashes)
        .bind(&bodies)
        .bind(&ordinals)
        .bind(last_seq)
        .bind(last_ordinal)
        .bind(&mark_users)
        .bind(&mark_seqs)
        .fetch_all(&mut **tx)
        .await?;
    let mut created = HashMap::with_capacity(rows.len());
    for row in &rows {
        created.insert(row.try_get::<i64, _>("seq")?, row.try_get("created_at")?);
    }
    if created.len() != n {
        return Err(StoreError::Unavailable(format!(
            "batch insert returned {} of {n} rows",
            created.len()
        )));
    }
    Ok(created)
}

/// Each request's answer; `commit_failed` turns every write, and every replay of one, into an
/// unknown outcome.
fn answers(
    reqs: &[&SendRequest],
    decisions: Vec<Decision>,
    created: &HashMap<i64, DateTime<Utc>>,
    commit_failed: Option<&StoreError>,
) -> Vec<Result<SendOutcome, StoreError>> {
    let written = |i: usize, seq: i64, message_id: Uuid| -> Result<SendOutcome, StoreError> {
        if let Some(e) = commit_failed {
            return Err(same_error(e));
        }
        let created_at = created.get(&seq).copied().ok_or_else(|| {
            StoreError::OutcomeUnknown("committed row without its timestamp".into())
        })?;
        Ok(reqs[i].committed(seq, message_id, created_at))
    };
    let seq_of = |index: usize| match decisions.get(index) {
        Some(Decision::Write { seq, message_id }) => Some((*seq, *message_id)),
        _ => None,
    };
    decisions
        .iter()
        .enumerate()
        .map(|(i, d)| match d {
            Decision::Answered(outcome) => match outcome.as_ref() {
                Ok(o) => Ok(o.clone()),
                Err(e) => Err(same_error(e)),
            },
            Decision::Write { seq, message_id } => written(i, *seq, *message_id),
            Decision::SameAs { index } => {
                let Some((seq, message_id)) = seq_of(*index) else {
                    return Err(StoreError::Unavailable(
                        "replay of an unwritten request".into(),
                    ));
                };
                if let Some(e) = commit_failed {
                    return Err(same_error(e));
                }
                Ok(SendOutcome {
                    conv_id: reqs[i].conv_id.clone(),
                    seq,
                    message_id,
                    dup: true,
                    purged: false,
                    event: None,
                })
            }
        })
        .collect()
}

/// A copy of `e` for another request of the same batch.
fn same_error(e: &StoreError) -> StoreError {
    match e {
        StoreError::Rejected(r) => StoreError::Rejected(r.clone()),
        StoreError::Unavailable(m) => StoreError::Unavailable(m.clone()),
        StoreError::OutcomeUnknown(m) => StoreError::OutcomeUnknown(m.clone()),
        StoreError::Migration(m) => StoreError::Migration(m.clone()),
    }
}
