//! The read primitives on PostgreSQL: snapshots, read marks and the sync feed's change
//! tracking.

use parley_domain::{ConvId, Rejection, UserId};
use sqlx::PgPool;

use super::PgTx;
use crate::error::StoreError;
use crate::flow::read_mark::ReadMarkTx;
use crate::views::FeedTx;

/// A read-only REPEATABLE READ transaction: one snapshot, so a page, its `head` and the
/// reader's periods agree.
pub(super) async fn begin_snapshot(pool: &PgPool) -> Result<PgTx<'static>, StoreError> {
    let mut tx = pool.begin().await?;
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        .execute(&mut *tx)
        .await?;
    Ok(tx)
}

impl ReadMarkTx for PgTx<'_> {
    async fn raise_read_mark(
        &mut self,
        (conv_id, user): (&ConvId, &UserId),
        seq: i64,
    ) -> Result<i64, StoreError> {
        Ok(sqlx::query_scalar(
            "INSERT INTO read_marks (conv_id, user_id, read_seq) VALUES ($1, $2, $3)
             ON CONFLICT (conv_id, user_id) DO UPDATE
               SET read_seq = GREATEST(read_marks.read_seq, EXCLUDED.read_seq),
                   updated_at = CASE WHEN EXCLUDED.read_seq > read_marks.read_seq
                                     THEN now() ELSE read_marks.updated_at END,
                   change_xid = CASE WHEN EXCLUDED.read_seq > read_marks.read_seq
                                     THEN pg_current_xact_id() ELSE read_marks.change_xid END
             RETURNING read_seq",
        )
        .bind(conv_id.as_str())
        .bind(user.as_str())
        .bind(seq)
        .fetch_one(&mut **self)
        .await?)
    }
}

/// Sync tokens are `s1.` and the text of the snapshot the answer was read in
/// (`xmin:xmax:xip,…`).
const SYNC_TOKEN_PREFIX: &str = "s1.";
/// Longest accepted sync token: a snapshot lists the transactions running when it was taken.
const SYNC_TOKEN_BYTES_MAX: usize = 16 * 1024;

/// The feed's change tracking on PostgreSQL. Every write to a conversation stamps
/// `conversations.change_xid` with its transaction id, and every move of a read position stamps
/// `read_marks.change_xid`. The token is the snapshot the previous answer was read in: a change
/// whose transaction was visible in that snapshot is in that answer already; any other change
/// is new. So nothing is missed (a transaction still running then is not visible in it) and
/// nothing unchanged is sent again. The call reads the user's memberships by one index range
/// and probes each conversation's row by primary key, plus one index range over the user's
/// read marks.
impl FeedTx for PgTx<'_> {
    /// The snapshot's text.
    type Since = String;

    fn parse_since(token: &str) -> Result<String, StoreError> {
        let bad = || StoreError::from(Rejection::BadRequest("invalid sync token".into()));
        if token.len() > SYNC_TOKEN_BYTES_MAX {
            return Err(bad());
        }
        let snapshot = token.strip_prefix(SYNC_TOKEN_PREFIX).ok_or_else(bad)?;
        let mut parts = snapshot.splitn(3, ':');
        let number =
            |s: &str| !s.is_empty() && s.len() <= 20 && s.bytes().all(|b| b.is_ascii_digit());
        let (Some(xmin), Some(xmax), Some(xip)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(bad());
        };
        if !number(xmin) || !number(xmax) || !(xip.is_empty() || xip.split(',').all(number)) {
            return Err(bad());
        }
        Ok(snapshot.to_owned())
    }

    async fn changed_since(
        &mut self,
        viewer: &UserId,
        since: Option<&String>,
    ) -> Result<(Vec<String>, String), StoreError> {
        let snapshot: String = sqlx::query_scalar("SELECT pg_current_snapshot()::text")
            .fetch_one(&mut **self)
            .await?;
        let ids: Vec<String> = sqlx::query_scalar(
            "SELECT DISTINCT m.conv_id FROM membership_periods m
               JOIN conversations c ON c.conv_id = m.conv_id
              WHERE m.user_id = $1
                AND ($2::text IS NULL OR NOT pg_visible_in_snapshot(c.change_xid, $2::text::pg_snapshot))
             UNION
             SELECT r.conv_id FROM read_marks r
              WHERE r.user_id = $1 AND $2::text IS NOT NULL
                AND r.change_xid >= pg_snapshot_xmin($2::text::pg_snapshot)
                AND NOT pg_visible_in_snapshot(r.change_xid, $2::text::pg_snapshot)
             ORDER BY 1",
        )
        .bind(viewer.as_str())
        .bind(since.map(String::as_str))
        .fetch_all(&mut **self)
        .await?;
        Ok((ids, format!("{SYNC_TOKEN_PREFIX}{snapshot}")))
    }
}
