//! The send transaction (SPEC §4), one READ COMMITTED transaction:
//! lock the conversation row, check the request key in the log and in the tombstones, check the
//! sender's open period, insert at `next_seq`, advance the counter, commit.
//!
//! The checks run under the lock and in statements issued after it was granted, so each sees
//! every send that committed before the lock was released: two identical concurrent requests
//! resolve to one row and one `dup = false`. (A single statement that locked and checked at
//! once would re-check only the locked row after waiting and miss the other's new event.)

use chrono::{DateTime, Utc};
use parley_domain::Rejection;
use sqlx::{PgPool, Row};
use uuid::Uuid;

use super::rows::commit;
use crate::error::StoreError;
use crate::types::{SendOutcome, SendRequest};

/// Step 1: the conversation's row lock, its counter and its message count. `$1` conv_id.
pub const SEND_LOCK_SQL: &str =
    "SELECT next_seq, msg_count FROM conversations WHERE conv_id = $1 FOR NO KEY UPDATE";

/// Steps 2–4 in one round trip: the request key in the log and in the tombstones, and the
/// sender's open period. `$1` conv_id, `$2` sender_user, `$3` client_msg_id.
pub const SEND_KEY_CHECK_SQL: &str =
    "SELECT 'event' AS src, seq, message_id, request_hash FROM events
   WHERE conv_id = $1 AND sender_user = $2 AND client_msg_id = $3
 UNION ALL
 SELECT 'tombstone', seq, message_id, request_hash FROM idem_tombstones
   WHERE conv_id = $1 AND sender_user = $2 AND client_msg_id = $3
 UNION ALL
 SELECT 'member', NULL, NULL, NULL FROM membership_periods
   WHERE conv_id = $1 AND user_id = $2 AND to_seq IS NULL";

/// Step 5: insert at `next_seq`, advance the counter and the message count, and move the
/// sender's read position to the new message (an own message is read), all in one statement.
/// `$1` conv_id, `$2` seq, `$3` message_id, `$4` sender_user, `$5` sender_device, `$6`
/// client_msg_id, `$7` request_hash, `$8` body, `$9` msg_ordinal (the message count after it).
pub const SEND_INSERT_SQL: &str = "WITH ins AS (
   INSERT INTO events (conv_id, seq, kind, message_id, sender_user, sender_device,
                       client_msg_id, request_hash, body, msg_ordinal)
   VALUES ($1, $2, 'msg', $3, $4, $5, $6, $7, $8, $9)
   RETURNING created_at
 ), counter AS (
   UPDATE conversations
      SET next_seq = $2 + 1, msg_count = $9, change_xid = pg_current_xact_id()
    WHERE conv_id = $1
 ), mark AS (
   INSERT INTO read_marks (conv_id, user_id, read_seq) VALUES ($1, $4, $2)
   ON CONFLICT (conv_id, user_id) DO UPDATE
     SET read_seq = GREATEST(read_marks.read_seq, EXCLUDED.read_seq), updated_at = now(),
         change_xid = pg_current_xact_id()
 )
 SELECT created_at FROM ins";

/// Where a request key was found.
enum Prior {
    Event,
    Tombstone,
}

pub(super) async fn send(pool: &PgPool, req: &SendRequest) -> Result<SendOutcome, StoreError> {
    let conv = req.conv_id.as_str();
    let sender = req.sender_user.as_str();
    let key = req.client_msg_id.as_str();
    let mut tx = pool.begin().await?;

    // 1. The conversation's row lock; an unknown conversation answers like a non-member (P10).
    let locked = sqlx::query(SEND_LOCK_SQL)
        .bind(conv)
        .fetch_optional(&mut *tx)
        .await?;
    let Some(locked) = locked else {
        return Err(Rejection::NotMember.into());
    };
    let seq: i64 = locked.try_get("next_seq")?;
    let msg_ordinal: i64 = locked.try_get::<i64, _>("msg_count")? + 1;

    // 2–4. Request key in the log, in the tombstones, and the sender's open period: one round trip.
    let found = sqlx::query(SEND_KEY_CHECK_SQL)
        .bind(conv)
        .bind(sender)
        .bind(key)
        .fetch_all(&mut *tx)
        .await?;

    let mut is_member = false;
    let mut prior = None;
    for row in &found {
        let src: &str = row.try_get("src")?;
        match src {
            "event" => prior = Some((Prior::Event, row)),
            "tombstone" if prior.is_none() => prior = Some((Prior::Tombstone, row)),
            "member" => is_member = true,
            _ => {}
        }
    }
    if let Some((from, row)) = prior {
        // The replay check precedes the membership check, so a retry by someone who has since
        // left still learns that the original send committed.
        let stored_hash: Option<String> = row.try_get("request_hash")?;
        if stored_hash.as_deref() != Some(req.request_hash.as_str()) {
            return Err(Rejection::IdempotencyMismatch.into());
        }
        let message_id: Option<Uuid> = row.try_get("message_id")?;
        let message_id = message_id
            .ok_or_else(|| StoreError::Unavailable("stored message without id".into()))?;
        return Ok(SendOutcome {
            conv_id: req.conv_id.clone(),
            seq: row.try_get("seq")?,
            message_id,
            dup: true,
            purged: matches!(from, Prior::Tombstone),
            event: None,
        });
    }
    if !is_member {
        return Err(Rejection::NotMember.into());
    }

    // 5. Insert at next_seq, advance the counter, and move the sender's read position to the new
    // message (an own message is read), all in one statement.
    let message_id = Uuid::new_v4();
    let inserted = sqlx::query(SEND_INSERT_SQL)
        .bind(conv)
        .bind(seq)
        .bind(message_id)
        .bind(sender)
        .bind(req.sender_device.as_str())
        .bind(key)
        .bind(req.request_hash.as_str())
        .bind(req.body.as_str())
        .bind(msg_ordinal)
        .fetch_one(&mut *tx)
        .await?;
    let created_at: DateTime<Utc> = inserted.try_get("created_at")?;

    // 6. Commit; only now may the caller ack and announce.
    commit(tx).await?;

    Ok(req.committed(seq, message_id, created_at))
}
