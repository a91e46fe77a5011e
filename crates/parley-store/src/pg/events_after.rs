//! Events after a cursor in one statement: the read every device makes on a pull group's hint
//! and on every gap, so it is the most frequent read in a busy deployment.
//!
//! The general path (`read::events`) opens a read-only REPEATABLE READ transaction and reads
//! the conversation row, the reader's periods and each visible range: six round trips. For a
//! reader with one membership period (everyone who never left and rejoined) the visible range is
//! a single interval, so the conversation row, the period and the range scan fit in one
//! statement, which PostgreSQL runs in one snapshot: one round trip, the same answer. Readers
//! with several periods take the general path.

use parley_domain::{ConvId, EventsPage, Period, Rejection, UserId};
use sqlx::Row;

use super::timed_pool::TimedPool;
use crate::error::StoreError;
use crate::page::{after_page, ReaderLog};
use crate::read::fold_reactions;
use crate::rows;

/// The conversation row and the reader's one period, joined to the range scan of the log by
/// primary key (`check_04_history_uses_pk` checks the plan). The range is empty unless the reader
/// has exactly one period; `period_count` tells the caller which case it is. No CTEs and no
/// outer sort: the plan is three index scans, cheap to start for a statement run thousands of
/// times a second.
pub const EVENTS_AFTER_ONE_PERIOD_SQL: &str = "
SELECT c.next_seq - 1 AS r_log_head, c.min_seq AS r_min_seq, c.epoch AS r_epoch,
       p.period_count AS r_period_count, p.from_seq AS r_from_seq, p.to_seq AS r_to_seq,
       EXISTS (SELECT 1 FROM reactions r WHERE r.conv_id = $1 AND r.target_seq >= $3)
         AS r_reacted,
       e.seq, e.kind, e.created_at, e.message_id, e.sender_user, e.sender_device,
       e.client_msg_id, e.body, e.subject_user, e.target_seq, e.recalled_at,
       e.reply_to, e.thread_root, e.mentions, e.reaction_key, e.edited_at, e.thread_replies,
       e.thread_latest_seq, e.attachments, e.mls_epoch, e.mls_message, e.mls_devices
  FROM conversations c
  CROSS JOIN LATERAL (
    -- With one period, min and max are that period's bounds (max ignores an open NULL).
    SELECT count(*) AS period_count, min(from_seq) AS from_seq, max(to_seq) AS to_seq
      FROM membership_periods
     WHERE conv_id = c.conv_id AND user_id = $2
  ) p
  LEFT JOIN LATERAL (
    SELECT seq, kind, created_at, message_id, sender_user, sender_device,
           client_msg_id, body, subject_user, target_seq, recalled_at, reply_to, thread_root, mentions, reaction_key, edited_at, thread_replies, thread_latest_seq, attachments, mls_epoch, mls_message, mls_devices
      FROM events
     WHERE p.period_count = 1
       AND conv_id = c.conv_id
       AND seq BETWEEN GREATEST($3, c.min_seq, p.from_seq)
                   AND LEAST(c.next_seq - 1, COALESCE(p.to_seq, c.next_seq - 1))
     ORDER BY seq ASC
     LIMIT $4
  ) e ON true
 WHERE c.conv_id = $1";

/// `Ok(None)`: the reader has several periods; the caller reads through the general path.
pub(super) async fn events_after_one_period(
    pool: &TimedPool,
    conv_id: &ConvId,
    viewer: &UserId,
    (after, epoch): (i64, Option<i64>),
    limit: u32,
) -> Result<Option<EventsPage>, StoreError> {
    let limit = limit.max(1);
    let mut conn = pool.acquire().await?;
    let rows = sqlx::query(EVENTS_AFTER_ONE_PERIOD_SQL)
        .bind(conv_id.as_str())
        .bind(viewer.as_str())
        .bind(after.saturating_add(1))
        .bind(i64::from(limit))
        .fetch_all(&mut *conn)
        .await?;
    // No row: the conversation does not exist, which answers like a non-member (P10).
    let Some(first) = rows.first() else {
        return Err(Rejection::NotMember.into());
    };
    let period_count: i64 = first.try_get("r_period_count")?;
    match period_count {
        0 => return Err(Rejection::NotMember.into()),
        1 => {}
        _ => return Ok(None),
    }
    let log_epoch: i64 = first.try_get("r_epoch")?;
    if epoch.is_some_and(|e| e != log_epoch) {
        return Err(Rejection::EpochChanged.into());
    }
    let log_head: i64 = first.try_get("r_log_head")?;
    // A former member sees the log up to the end of their period (P11).
    let head = first
        .try_get::<Option<i64>, _>("r_to_seq")?
        .unwrap_or(log_head);
    let mut events = Vec::with_capacity(rows.len());
    for row in &rows {
        // The left join gives one row without an event when the range is empty.
        if row.try_get::<Option<i64>, _>("seq")?.is_some() {
            events.push(rows::event(conv_id, row)?);
        }
    }
    // The join hands the range over in the index's order, which SQL does not promise.
    events.sort_unstable_by_key(|e| e.seq);
    // Reaction counts cost a second statement only when a message after the cursor has any.
    if first.try_get::<bool, _>("r_reacted")? {
        fold_reactions(&mut *conn, conv_id, viewer, &mut events).await?;
    }
    let period = [Period {
        from_seq: first.try_get("r_from_seq")?,
        to_seq: first.try_get("r_to_seq")?,
    }];
    let log = ReaderLog {
        min_seq: first.try_get("r_min_seq")?,
        epoch: log_epoch,
        head,
        periods: &period,
    };
    Ok(Some(after_page(events, &log, after, limit as usize)))
}
