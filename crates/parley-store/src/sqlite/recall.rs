//! The recall transaction (SPEC §4) on SQLite: in one write transaction (which holds the
//! database's write lock), check the actor's open period, the target, its sender and the window;
//! append the `recall` event at `next_seq` and erase the target's body, so no committed state
//! ever holds a recall whose message still has its body.

use chrono::{DateTime, Duration, Utc};
use parley_domain::membership::is_visible;
use parley_domain::{ConvId, Event, EventKind, Period, Rejection, UserId};
use sqlx::Row;

use super::rows::{commit, now as store_now, parse_ts, tick, ts};
use super::SqliteStore;
use crate::backend::Backend;
use crate::error::StoreError;
use crate::types::RecallOutcome;

pub(super) async fn recall(
    store: &SqliteStore,
    conv_id: &ConvId,
    actor: &UserId,
    target_seq: i64,
    now: DateTime<Utc>,
) -> Result<RecallOutcome, StoreError> {
    let conv = conv_id.as_str();
    let mut tx = store.begin_write().await?;
    let locked =
        sqlx::query("SELECT next_seq, recall_window_ms FROM conversations WHERE conv_id = $1")
            .bind(conv)
            .fetch_optional(&mut *tx)
            .await?;
    // An unknown conversation answers like one the actor never joined (P10).
    let Some(locked) = locked else {
        return Err(Rejection::NotMember.into());
    };
    let seq: i64 = locked.try_get("next_seq")?;
    let window_ms: i64 = locked.try_get("recall_window_ms")?;

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

    let recalled_at: Option<String> = target.try_get("recalled_at")?;
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

    let created_at: String = target.try_get("created_at")?;
    if parse_ts(&created_at)? + Duration::milliseconds(window_ms) < now {
        return Err(Rejection::RecallWindowExpired.into());
    }

    // The recall event, the erased body and the counter in one transaction. The request hash
    // stays, so an identical retry of the original send is still `dup` (SPEC §4, step 3). The
    // conversation counts as changed for the sync feed.
    let at = store_now();
    let change = tick(&mut tx).await?;
    sqlx::query(
        "INSERT INTO events (conv_id, seq, kind, sender_user, target_seq, created_at)
         VALUES ($1, $2, 'recall', $3, $4, $5)",
    )
    .bind(conv)
    .bind(seq)
    .bind(actor.as_str())
    .bind(target_seq)
    .bind(ts(at))
    .execute(&mut *tx)
    .await?;
    sqlx::query("UPDATE events SET body = NULL, recalled_at = $3 WHERE conv_id = $1 AND seq = $2")
        .bind(conv)
        .bind(target_seq)
        .bind(ts(at))
        .execute(&mut *tx)
        .await?;
    sqlx::query("UPDATE conversations SET next_seq = $2 + 1, change_seq = $3 WHERE conv_id = $1")
        .bind(conv)
        .bind(seq)
        .bind(change)
        .execute(&mut *tx)
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
