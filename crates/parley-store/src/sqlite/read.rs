//! The read primitives (`read.rs`, `flow::read_mark`, the feed of `views.rs`) on SQLite. Each
//! read runs in one read transaction: in WAL mode that is one snapshot, like PostgreSQL's
//! REPEATABLE READ.

use parley_domain::{ConvId, Event, Rejection, UserId};
use sqlx::{Row, SqliteConnection};

use super::rows::{event_from_row, now, tick, ts};
use super::Tx;
use crate::error::StoreError;
use crate::flow::read_mark::ReadMarkTx;
use crate::page::RangeReader;
use crate::read::{LogBounds, LogReadTx, MemberRow};
use crate::rows;
use crate::sql::{events_range_sql, LOG_BOUNDS_SQL, MEMBER_SNAPSHOT_SQL, OPEN_PERIODS_SQL};
use crate::views::FeedTx;

/// Events of one seq range by primary key, ascending or descending, at most `limit`.
pub(super) async fn range(
    conn: &mut SqliteConnection,
    conv_id: &ConvId,
    (lo, hi): (i64, i64),
    descending: bool,
    limit: usize,
) -> Result<Vec<Event>, StoreError> {
    let rows = sqlx::query(events_range_sql(descending))
        .bind(conv_id.as_str())
        .bind(lo)
        .bind(hi)
        .bind(limit as i64)
        .fetch_all(&mut *conn)
        .await?;
    rows.iter().map(|r| event_from_row(conv_id, r)).collect()
}

impl RangeReader for Tx<'_> {
    async fn range(
        &mut self,
        conv_id: &ConvId,
        bounds: (i64, i64),
        descending: bool,
        limit: usize,
    ) -> Result<Vec<Event>, StoreError> {
        range(self, conv_id, bounds, descending, limit).await
    }
}

impl LogReadTx for Tx<'_> {
    async fn log_bounds(&mut self, conv_id: &ConvId) -> Result<Option<LogBounds>, StoreError> {
        let row = sqlx::query(LOG_BOUNDS_SQL)
            .bind(conv_id.as_str())
            .fetch_optional(&mut **self)
            .await?;
        let Some(row) = row else { return Ok(None) };
        Ok(Some(LogBounds {
            next_seq: row.try_get("next_seq")?,
            min_seq: row.try_get("min_seq")?,
            epoch: row.try_get("epoch")?,
        }))
    }

    async fn member_row(&mut self, conv_id: &ConvId) -> Result<Option<MemberRow>, StoreError> {
        let row = sqlx::query(MEMBER_SNAPSHOT_SQL)
            .bind(conv_id.as_str())
            .fetch_optional(&mut **self)
            .await?;
        let Some(row) = row else { return Ok(None) };
        Ok(Some(MemberRow {
            next_seq: row.try_get("next_seq")?,
            delivery_mode: rows::delivery_mode(row.try_get("delivery_mode")?)?,
            pull_threshold: rows::threshold(row.try_get("pull_threshold")?),
        }))
    }

    async fn open_periods(&mut self, conv_id: &ConvId) -> Result<Vec<(UserId, i64)>, StoreError> {
        let found = sqlx::query(OPEN_PERIODS_SQL)
            .bind(conv_id.as_str())
            .fetch_all(&mut **self)
            .await?;
        found
            .iter()
            .map(|r| {
                Ok((
                    UserId::from_trusted(r.try_get("user_id")?),
                    r.try_get("from_seq")?,
                ))
            })
            .collect()
    }
}

impl ReadMarkTx for Tx<'_> {
    async fn raise_read_mark(
        &mut self,
        conv_id: &ConvId,
        user: &UserId,
        seq: i64,
    ) -> Result<i64, StoreError> {
        let change = tick(self).await?;
        Ok(sqlx::query_scalar(
            "INSERT INTO read_marks (conv_id, user_id, read_seq, updated_at, change_seq)
             VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (conv_id, user_id) DO UPDATE
               SET read_seq = max(read_marks.read_seq, excluded.read_seq),
                   updated_at = CASE WHEN excluded.read_seq > read_marks.read_seq
                                     THEN excluded.updated_at ELSE read_marks.updated_at END,
                   change_seq = CASE WHEN excluded.read_seq > read_marks.read_seq
                                     THEN excluded.change_seq ELSE read_marks.change_seq END
             RETURNING read_seq",
        )
        .bind(conv_id.as_str())
        .bind(user.as_str())
        .bind(seq)
        .bind(ts(now()))
        .bind(change)
        .fetch_one(&mut **self)
        .await?)
    }
}

/// Sync tokens of the embedded store are `c1.` and the change clock of the snapshot the answer
/// was read in.
const SYNC_TOKEN_PREFIX: &str = "c1.";

/// The feed's change tracking on SQLite. Every write that changes what a feed shows of a
/// conversation stamps `conversations.change_seq` with the next value of the change clock, and
/// every move of a read position stamps `read_marks.change_seq`. The token is the clock as the
/// previous answer's snapshot saw it: every stamp up to it was in that answer, every stamp
/// above it is new (writes are serial, so they commit in clock order). Same semantics as the
/// PostgreSQL feed, whose tokens are snapshots over transaction ids.
impl FeedTx for Tx<'_> {
    /// The change clock.
    type Since = i64;

    fn parse_since(token: &str) -> Result<i64, StoreError> {
        token
            .strip_prefix(SYNC_TOKEN_PREFIX)
            .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|n| n.parse::<i64>().ok())
            .ok_or_else(|| Rejection::BadRequest("invalid sync token".into()).into())
    }

    async fn changed_since(
        &mut self,
        viewer: &UserId,
        since: Option<&i64>,
    ) -> Result<(Vec<String>, String), StoreError> {
        let clock: i64 = sqlx::query_scalar("SELECT last FROM change_clock WHERE id = 1")
            .fetch_one(&mut **self)
            .await?;
        let ids: Vec<String> = sqlx::query_scalar(
            "SELECT m.conv_id FROM membership_periods m
               JOIN conversations c ON c.conv_id = m.conv_id
              WHERE m.user_id = $1 AND ($2 IS NULL OR c.change_seq > $2)
             UNION
             SELECT r.conv_id FROM read_marks r
              WHERE r.user_id = $1 AND $2 IS NOT NULL AND r.change_seq > $2
             ORDER BY 1",
        )
        .bind(viewer.as_str())
        .bind(since.copied())
        .fetch_all(&mut **self)
        .await?;
        Ok((ids, format!("{SYNC_TOKEN_PREFIX}{clock}")))
    }
}
