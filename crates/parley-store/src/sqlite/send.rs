//! The send transaction (SPEC §4) on SQLite: one `BEGIN IMMEDIATE` transaction, which holds the
//! database's write lock from its first statement. Read `next_seq`, check the request key in the
//! log and in the tombstones, check the sender's open period, insert at `next_seq`, advance the
//! counter, move the sender's read position, commit.
//!
//! The write lock is the embedded counterpart of PostgreSQL's row lock, held for the whole
//! transaction, so every check sees every send that committed before: two identical concurrent
//! requests resolve to one row and one `dup = false`.

use parley_domain::Rejection;
use sqlx::Row;
use uuid::Uuid;

use super::rows::{commit, now, parse_uuid, tick, ts, uuid_text};
use super::SqliteStore;
use crate::error::StoreError;
use crate::types::{SendOutcome, SendRequest};

/// Where a request key was found.
enum Prior {
    Event,
    Tombstone,
}

pub(super) async fn send(
    store: &SqliteStore,
    req: &SendRequest,
) -> Result<SendOutcome, StoreError> {
    let conv = req.conv_id.as_str();
    let sender = req.sender_user.as_str();
    let key = req.client_msg_id.as_str();
    let mut tx = store.begin_write().await?;

    // 1. The counter; an unknown conversation answers like a non-member (P10).
    let seq: Option<i64> =
        sqlx::query_scalar("SELECT next_seq FROM conversations WHERE conv_id = $1")
            .bind(conv)
            .fetch_optional(&mut *tx)
            .await?;
    let Some(seq) = seq else {
        return Err(Rejection::NotMember.into());
    };

    // 2–4. Request key in the log, in the tombstones, and the sender's open period: one query.
    let found = sqlx::query(
        "SELECT 'event' AS src, seq, message_id, request_hash FROM events
           WHERE conv_id = $1 AND sender_user = $2 AND client_msg_id = $3
         UNION ALL
         SELECT 'tombstone', seq, message_id, request_hash FROM idem_tombstones
           WHERE conv_id = $1 AND sender_user = $2 AND client_msg_id = $3
         UNION ALL
         SELECT 'member', NULL, NULL, NULL FROM membership_periods
           WHERE conv_id = $1 AND user_id = $2 AND to_seq IS NULL",
    )
    .bind(conv)
    .bind(sender)
    .bind(key)
    .fetch_all(&mut *tx)
    .await?;

    let mut is_member = false;
    let mut prior = None;
    for row in &found {
        let src: String = row.try_get("src")?;
        match src.as_str() {
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
        let message_id: Option<String> = row.try_get("message_id")?;
        let message_id = message_id
            .ok_or_else(|| StoreError::Unavailable("stored message without id".into()))?;
        return Ok(SendOutcome {
            conv_id: req.conv_id.clone(),
            seq: row.try_get("seq")?,
            message_id: parse_uuid(&message_id)?,
            dup: true,
            purged: matches!(from, Prior::Tombstone),
            event: None,
        });
    }
    if !is_member {
        return Err(Rejection::NotMember.into());
    }

    // 5. Insert at next_seq, advance the counter, and move the sender's read position to the new
    // message (an own message is read).
    let message_id = Uuid::new_v4();
    let created_at = now();
    let at = ts(created_at);
    let change = tick(&mut tx).await?;
    sqlx::query(
        "INSERT INTO events (conv_id, seq, kind, message_id, sender_user, sender_device,
                             client_msg_id, request_hash, body, created_at)
         VALUES ($1, $2, 'msg', $3, $4, $5, $6, $7, $8, $9)",
    )
    .bind(conv)
    .bind(seq)
    .bind(uuid_text(message_id))
    .bind(sender)
    .bind(req.sender_device.as_str())
    .bind(key)
    .bind(req.request_hash.as_str())
    .bind(req.body.as_str())
    .bind(&at)
    .execute(&mut *tx)
    .await?;
    sqlx::query("UPDATE conversations SET next_seq = $2 + 1, change_seq = $3 WHERE conv_id = $1")
        .bind(conv)
        .bind(seq)
        .bind(change)
        .execute(&mut *tx)
        .await?;
    sqlx::query(
        "INSERT INTO read_marks (conv_id, user_id, read_seq, updated_at, change_seq)
         VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (conv_id, user_id) DO UPDATE
           SET read_seq = max(read_marks.read_seq, excluded.read_seq),
               updated_at = excluded.updated_at, change_seq = excluded.change_seq",
    )
    .bind(conv)
    .bind(sender)
    .bind(seq)
    .bind(&at)
    .bind(change)
    .execute(&mut *tx)
    .await?;

    // 6. Commit; only now may the caller ack and announce.
    commit(tx).await?;

    Ok(req.committed(seq, message_id, created_at))
}
