//! The read primitives on SQLite: read marks and the sync feed's change tracking. Each read
//! runs in one read transaction: in WAL mode that is one snapshot, like PostgreSQL's
//! REPEATABLE READ.

use parley_domain::{ConvId, Rejection, UserId};

use super::rows::{now, tick, ts};
use super::Tx;
use crate::error::StoreError;
use crate::flow::read_mark::ReadMarkTx;
use crate::views::FeedTx;

impl ReadMarkTx for Tx<'_> {
    async fn raise_read_mark(
        &mut self,
        (conv_id, user): (&ConvId, &UserId),
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

fn invalid_token() -> StoreError {
    Rejection::BadRequest("invalid sync token".into()).into()
}

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
            .ok_or_else(invalid_token)
    }

    async fn changed_since(
        &mut self,
        viewer: &UserId,
        since: Option<&i64>,
    ) -> Result<(Vec<String>, String), StoreError> {
        let clock: i64 = sqlx::query_scalar("SELECT last FROM change_clock WHERE id = 1")
            .fetch_one(&mut **self)
            .await?;
        // A clock this store has not reached was never handed out: refused like any token of
        // another store, as PostgreSQL refuses a snapshot from its future.
        if since.is_some_and(|&s| s > clock) {
            return Err(invalid_token());
        }
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
