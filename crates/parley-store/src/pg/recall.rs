//! The recall transaction (SPEC §4): under the conversation's row lock, check the actor's open
//! period, the target, its sender and the window; append the `recall` event at `next_seq` and
//! erase the target's body in the same statement, so no committed state ever holds a recall
//! whose message still has its body.

use chrono::{DateTime, Duration, Utc};
use parley_domain::membership::is_visible;
use parley_domain::{ConvId, Event, EventKind, Period, Rejection, UserId};
use sqlx::{PgPool, Row};

use super::rows::commit;
use crate::error::StoreError;
use crate::types::RecallOutcome;

pub(super) async fn recall(
    pool: &PgPool,
    conv_id: &ConvId,
    actor: &UserId,
    target_seq: i64,
    now: DateTime<Utc>,
) -> Result<RecallOutcome, StoreError> {
    let conv = conv_id.as_str();
    let mut tx = pool.begin().await?;
    let locked = sqlx::query(
        "SELECT next_seq, msg_count, recall_window_ms FROM conversations
          WHERE conv_id = $1 FOR NO KEY UPDATE",
    )
    .bind(conv)
    .fetch_optional(&mut *tx)
    .await?;
    // An unknown conversation answers like one the actor never joined (P10).
    let Some(locked) = locked else {
        return Err(Rejection::NotMember.into());
    };
    let seq: i64 = locked.try_get("next_seq")?;
    let window_ms: i64 = locked.try_get("recall_window_ms")?;
    // A recall is no msg: it carries the msg count so far as its ordinal (see `views`).
    let msg_ordinal: i64 = locked.try_get("msg_count")?;

    let rows = sqlx::query(
        "SELECT from_seq, to_seq FROM membership_periods WHERE conv_id = $1 AND user_id = $2",
    )
    .bind(conv)
    .bind(actor.as_str())
    .fetch_all(&mut *tx)
    .await?;
    let mut periods = Vec::with_capacity(rows.len());
    for r in &rows {
        periods.push(Period {
            from_seq: r.try_get("from_seq")?,
            to_seq: r.try_get("to_seq")?,
        });
    }
    // A recall is a write: it needs an open period (P11).
    if !periods.iter().any(|p| p.to_seq.is_none()) {
        return Err(Rejection::NotMember.into());
    }

    let target = sqlx::query(
        "SELECT kind, sender_user, created_at, recalled_at FROM events WHERE conv_id = $1 AND seq = $2",
    )
    .bind(conv)
    .bind(target_seq)
    .fetch_optional(&mut *tx)
    .await?;
    let no_such = || StoreError::from(Rejection::NotFound("no such message"));
    let target = target.ok_or_else(no_such)?;
    let kind: String = target.try_get("kind")?;
    if kind != EventKind::Msg.as_str() || !is_visible(&periods, target_seq) {
        return Err(no_such());
    }
    let sender: Option<String> = target.try_get("sender_user")?;
    if sender.as_deref() != Some(actor.as_str()) {
        return Err(Rejection::NotSender.into());
    }

    let recalled_at: Option<DateTime<Utc>> = target.try_get("recalled_at")?;
    if recalled_at.is_some() {
        // Idempotent: the existing recall, even after the window. It follows its target, so
        // the search starts there.
        let existing: Option<i64> = sqlx::query_scalar(
            "SELECT seq FROM events
              WHERE conv_id = $1 AND seq > $2 AND kind = 'recall' AND target_seq = $2
              ORDER BY seq LIMIT 1",
        )
        .bind(conv)
        .bind(target_seq)
        .fetch_optional(&mut *tx)
        .await?;
        let existing = existing.ok_or_else(|| {
            StoreError::Unavailable("a recalled message has no recall event".into())
        })?;
        return Ok(RecallOutcome {
            event: None,
            seq: existing,
            target_seq,
        });
    }

    let created_at: DateTime<Utc> = target.try_get("created_at")?;
    if created_at + Duration::milliseconds(window_ms) < now {
        return Err(Rejection::RecallWindowExpired.into());
    }

    // The recall event, the erased body and the counter in one statement. The request hash
    // stays, so an identical retry of the original send is still `dup` (SPEC §4, step 3). The
    // conversation counts as changed for the sync feed.
    let at: DateTime<Utc> = sqlx::query_scalar(
        "WITH ev AS (
           INSERT INTO events (conv_id, seq, kind, sender_user, target_seq, msg_ordinal)
           VALUES ($1, $2, 'recall', $3, $4, $5) RETURNING created_at
         ), erase AS (
           UPDATE events SET body = NULL, recalled_at = now() WHERE conv_id = $1 AND seq = $4
         ), counter AS (
           UPDATE conversations SET next_seq = $2 + 1, change_xid = pg_current_xact_id()
            WHERE conv_id = $1
         )
         SELECT created_at FROM ev",
    )
    .bind(conv)
    .bind(seq)
    .bind(actor.as_str())
    .bind(target_seq)
    .bind(msg_ordinal)
    .fetch_one(&mut *tx)
    .await?;
    commit(tx).await?;

    let event = Event {
        conv_id: conv_id.clone(),
        seq,
        kind: EventKind::Recall,
        created_at: at,
        message_id: None,
        sender_user: Some(actor.clone()),
        sender_device: None,
        client_msg_id: None,
        body: None,
        recalled: false,
        subject_user: None,
        target_seq: Some(target_seq),
    };
    Ok(RecallOutcome {
        event: Some(event),
        seq,
        target_seq,
    })
}
