//! The read primitives on PostgreSQL: snapshots, read marks and the sync feed's change
//! tracking.

use parley_domain::{ConvId, Rejection, UserId};

use super::timed_pool::TimedPool;
use super::PgTx;
use crate::error::StoreError;
use crate::flow::read_mark::ReadMarkTx;
use crate::views::FeedTx;

/// A read-only REPEATABLE READ transaction: one snapshot, so a page, its `head` and the
/// reader's periods agree.
pub(super) async fn begin_snapshot(pool: &TimedPool) -> Result<PgTx<'static>, StoreError> {
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

fn invalid_token() -> StoreError {
    Rejection::BadRequest("invalid sync token".into()).into()
}

/// A snapshot as `pg_snapshot`'s text writes it, `xmin:xmax:xip,…`, checked by the rules of
/// PostgreSQL's own input function, so a token that passes here is never refused by the
/// database (which would answer `UNAVAILABLE`, a code clients retry): each id a whole number
/// whose low 32 bits are not 0, `xmin <= xmax`, and the running ids ascending within
/// `[xmin, xmax)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Snapshot {
    text: String,
    xmax: u64,
}

impl Snapshot {
    fn parse(text: &str) -> Option<Self> {
        let id = |s: &str| -> Option<u64> {
            let ok = !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
            let id = s.parse::<u64>().ok().filter(|_| ok)?;
            // A full transaction id whose 32-bit part is 0 is the invalid id.
            (id & u64::from(u32::MAX) != 0).then_some(id)
        };
        let mut parts = text.splitn(3, ':');
        let (xmin, xmax, xip) = (parts.next()?, parts.next()?, parts.next()?);
        let (xmin, xmax) = (id(xmin)?, id(xmax)?);
        if xmax < xmin {
            return None;
        }
        let mut last = xmin;
        for running in xip.split(',').filter(|_| !xip.is_empty()) {
            let running = id(running)?;
            if running < last || running >= xmax {
                return None;
            }
            last = running;
        }
        Some(Self {
            text: text.to_owned(),
            xmax,
        })
    }
}

/// The feed's change tracking on PostgreSQL. Every write to a conversation stamps
/// `conversations.change_xid` with its transaction id, and every move of a read position stamps
/// `read_marks.change_xid`. The token is the snapshot the previous answer was read in: a change
/// whose transaction was visible in that snapshot is in that answer already; any other change
/// is new. So nothing is missed (a transaction still running then is not visible in it) and
/// nothing unchanged is sent again. The call reads the user's memberships by one index range
/// and probes each conversation's row by primary key, plus one index range over the user's
/// read marks.
impl FeedTx for PgTx<'_> {
    type Since = Snapshot;

    fn parse_since(token: &str) -> Result<Snapshot, StoreError> {
        if token.len() > SYNC_TOKEN_BYTES_MAX {
            return Err(invalid_token());
        }
        let text = token
            .strip_prefix(SYNC_TOKEN_PREFIX)
            .ok_or_else(invalid_token)?;
        Snapshot::parse(text).ok_or_else(invalid_token)
    }

    async fn changed_since(
        &mut self,
        viewer: &UserId,
        since: Option<&Snapshot>,
    ) -> Result<(Vec<String>, String), StoreError> {
        let snapshot: String = sqlx::query_scalar("SELECT pg_current_snapshot()::text")
            .fetch_one(&mut **self)
            .await?;
        // A snapshot that saw transactions not yet started was never handed out by this
        // database: refused like a token of another store.
        let now = Snapshot::parse(&snapshot).ok_or_else(|| {
            StoreError::Unavailable(format!("unreadable current snapshot {snapshot:?}"))
        })?;
        if since.is_some_and(|s| s.xmax > now.xmax) {
            return Err(invalid_token());
        }
        let since = since.map(|s| s.text.as_str());
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
        .bind(since)
        .fetch_all(&mut **self)
        .await?;
        Ok((ids, format!("{SYNC_TOKEN_PREFIX}{snapshot}")))
    }
}

#[cfg(test)]
mod tests {
    use super::Snapshot;

    #[test]
    fn snapshots_follow_the_rules_of_pg_snapshot() {
        for ok in [
            "5:5:",
            "5:9:",
            "5:9:5",
            "5:9:5,5,8",
            "4294967297:4294967297:",
        ] {
            assert!(Snapshot::parse(ok).is_some(), "{ok}");
        }
        for bad in [
            "",
            "5:3:",
            "0:0:",
            "5:9:9",
            "5:9:4",
            "5:9:7,6",
            "4294967296:4294967296:",
            "5:9",
            "5:9:x",
            "+5:9:",
            "5:9:,",
            "18446744073709551616:18446744073709551616:",
        ] {
            assert!(Snapshot::parse(bad).is_none(), "{bad}");
        }
    }
}
