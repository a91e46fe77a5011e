//! Read paths: events after a cursor, history pages, conversation views (SPEC §5).
//!
//! Every read checks the reader's membership periods at access time (P11) and returns only
//! events inside them. A reader who never had a period gets `NotMember`, exactly like a reader
//! of a conversation that does not exist (P10).

use parley_domain::{ConvId, ConversationView, Event, EventsPage, Period, Rejection, UserId};
use sqlx::{PgConnection, PgPool, Row};

use super::events_after::events_after_one_period;
use super::rows::event_from_row;
use super::views;
use crate::error::StoreError;
use crate::page::{events_page, RangeReader, ReaderLog};
use crate::types::{ConversationFeed, EventsQuery};

/// The conversation row and the reader's periods, read in one snapshot.
struct Snapshot {
    min_seq: i64,
    epoch: i64,
    periods: Vec<Period>,
    /// The head as this reader may see it: the log's head for a current member, the end of the
    /// last period for a former one (whose view stops there, P11).
    head: i64,
}

async fn begin_snapshot(
    pool: &PgPool,
) -> Result<sqlx::Transaction<'static, sqlx::Postgres>, StoreError> {
    let mut tx = pool.begin().await?;
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        .execute(&mut *tx)
        .await?;
    Ok(tx)
}

async fn snapshot(
    conn: &mut PgConnection,
    conv_id: &ConvId,
    viewer: &UserId,
) -> Result<Snapshot, StoreError> {
    let row = sqlx::query("SELECT next_seq, min_seq, epoch FROM conversations WHERE conv_id = $1")
        .bind(conv_id.as_str())
        .fetch_optional(&mut *conn)
        .await?;
    let Some(row) = row else {
        return Err(Rejection::NotMember.into());
    };
    let rows = sqlx::query(
        "SELECT from_seq, to_seq FROM membership_periods WHERE conv_id = $1 AND user_id = $2 ORDER BY from_seq",
    )
    .bind(conv_id.as_str())
    .bind(viewer.as_str())
    .fetch_all(&mut *conn)
    .await?;
    if rows.is_empty() {
        return Err(Rejection::NotMember.into());
    }
    let mut periods = Vec::with_capacity(rows.len());
    for r in &rows {
        periods.push(Period {
            from_seq: r.try_get("from_seq")?,
            to_seq: r.try_get("to_seq")?,
        });
    }
    let log_head: i64 = row.try_get::<i64, _>("next_seq")? - 1;
    let is_member = periods.iter().any(|p| p.to_seq.is_none());
    let head = if is_member {
        log_head
    } else {
        periods.iter().filter_map(|p| p.to_seq).max().unwrap_or(0)
    };
    Ok(Snapshot {
        min_seq: row.try_get("min_seq")?,
        epoch: row.try_get("epoch")?,
        periods,
        head,
    })
}

/// The range read of the log, ascending: one primary-key range scan (`04-history-uses-pk`
/// explains exactly this text).
pub const EVENTS_RANGE_ASC_SQL: &str =
    "SELECT seq, kind, created_at, message_id, sender_user, sender_device, \
     client_msg_id, body, subject_user, target_seq, recalled_at \
     FROM events WHERE conv_id = $1 AND seq BETWEEN $2 AND $3 ORDER BY seq ASC LIMIT $4";
/// The range read of the log, descending (history pages).
pub const EVENTS_RANGE_DESC_SQL: &str =
    "SELECT seq, kind, created_at, message_id, sender_user, sender_device, \
     client_msg_id, body, subject_user, target_seq, recalled_at \
     FROM events WHERE conv_id = $1 AND seq BETWEEN $2 AND $3 ORDER BY seq DESC LIMIT $4";

/// Events of one seq range by primary key, ascending or descending, at most `limit`.
async fn range(
    conn: &mut PgConnection,
    conv_id: &ConvId,
    (lo, hi): (i64, i64),
    descending: bool,
    limit: usize,
) -> Result<Vec<Event>, StoreError> {
    let sql = if descending {
        EVENTS_RANGE_DESC_SQL
    } else {
        EVENTS_RANGE_ASC_SQL
    };
    let rows = sqlx::query(sql)
        .bind(conv_id.as_str())
        .bind(lo)
        .bind(hi)
        .bind(limit as i64)
        .fetch_all(&mut *conn)
        .await?;
    rows.iter().map(|r| event_from_row(conv_id, r)).collect()
}

/// The range reads of one read transaction, for `page::events_page`.
struct Ranges<'c> {
    conn: &'c mut PgConnection,
}

#[async_trait::async_trait]
impl RangeReader for Ranges<'_> {
    async fn range(
        &mut self,
        conv_id: &ConvId,
        bounds: (i64, i64),
        descending: bool,
        limit: usize,
    ) -> Result<Vec<Event>, StoreError> {
        range(self.conn, conv_id, bounds, descending, limit).await
    }
}

pub(super) async fn events(
    pool: &PgPool,
    conv_id: &ConvId,
    viewer: &UserId,
    query: EventsQuery,
    limit: u32,
) -> Result<EventsPage, StoreError> {
    if let EventsQuery::After { after, epoch } = query {
        let one = events_after_one_period(pool, conv_id, viewer, (after, epoch), limit).await?;
        if let Some(page) = one {
            return Ok(page);
        }
    }
    let mut tx = begin_snapshot(pool).await?;
    let snap = snapshot(&mut tx, conv_id, viewer).await?;
    let log = ReaderLog {
        min_seq: snap.min_seq,
        epoch: snap.epoch,
        head: snap.head,
        periods: &snap.periods,
    };
    let page = events_page(&mut Ranges { conn: &mut tx }, conv_id, log, query, limit).await?;
    tx.commit().await?;
    Ok(page)
}

pub(super) async fn get_conversation(
    pool: &PgPool,
    conv_id: &ConvId,
    viewer: &UserId,
) -> Result<ConversationView, StoreError> {
    let mut tx = begin_snapshot(pool).await?;
    // NotMember for an unknown conversation and for a reader who never had a period (P10).
    snapshot(&mut tx, conv_id, viewer).await?;
    let ids = [conv_id.as_str().to_owned()];
    let view = views::build(&mut tx, viewer, &ids, true)
        .await?
        .into_iter()
        .next();
    tx.commit().await?;
    view.ok_or_else(|| Rejection::NotMember.into())
}

/// Sync tokens are `s1.` and the text of the snapshot the answer was read in
/// (`xmin:xmax:xip,…`).
const SYNC_TOKEN_PREFIX: &str = "s1.";
/// Longest accepted sync token: a snapshot lists the transactions running when it was taken.
const SYNC_TOKEN_BYTES_MAX: usize = 16 * 1024;

fn parse_sync_token(token: &str) -> Result<String, StoreError> {
    let bad = || StoreError::from(Rejection::BadRequest("invalid sync token".into()));
    if token.len() > SYNC_TOKEN_BYTES_MAX {
        return Err(bad());
    }
    let snapshot = token.strip_prefix(SYNC_TOKEN_PREFIX).ok_or_else(bad)?;
    let mut parts = snapshot.splitn(3, ':');
    let number = |s: &str| !s.is_empty() && s.len() <= 20 && s.bytes().all(|b| b.is_ascii_digit());
    let (Some(xmin), Some(xmax), Some(xip)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(bad());
    };
    if !number(xmin) || !number(xmax) || !(xip.is_empty() || xip.split(',').all(number)) {
        return Err(bad());
    }
    Ok(snapshot.to_owned())
}

/// The feed of SPEC §5: the conversations that changed for `viewer` since `since`.
///
/// Every write to a conversation stamps `conversations.change_xid` with its transaction id, and
/// every move of a read position stamps `read_marks.change_xid`. The token is the snapshot the
/// previous answer was read in: a change whose transaction was visible in that snapshot is in
/// that answer already; any other change is new. So nothing is missed (a transaction still
/// running then is not visible in it) and nothing unchanged is sent again. The call reads the
/// user's memberships by one index range and probes each conversation's row by primary key,
/// plus one index range over the user's read marks.
pub(super) async fn list_conversations(
    pool: &PgPool,
    viewer: &UserId,
    since: Option<&str>,
) -> Result<ConversationFeed, StoreError> {
    let since = since.map(parse_sync_token).transpose()?;
    let mut tx = begin_snapshot(pool).await?;
    let snapshot: String = sqlx::query_scalar("SELECT pg_current_snapshot()::text")
        .fetch_one(&mut *tx)
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
    .bind(since.as_deref())
    .fetch_all(&mut *tx)
    .await?;
    let conversations = views::build(&mut tx, viewer, &ids, false).await?;
    tx.commit().await?;
    Ok(ConversationFeed {
        conversations,
        sync_token: format!("{SYNC_TOKEN_PREFIX}{snapshot}"),
    })
}

pub(super) async fn log_range(
    pool: &PgPool,
    conv_id: &ConvId,
    after: i64,
    upto: i64,
    limit: u32,
) -> Result<Vec<Event>, StoreError> {
    if upto <= after {
        return Ok(Vec::new());
    }
    let mut conn = pool.acquire().await?;
    range(
        &mut conn,
        conv_id,
        (after.saturating_add(1), upto),
        false,
        limit.max(1) as usize,
    )
    .await
}

pub(super) async fn mark_read(
    pool: &PgPool,
    conv_id: &ConvId,
    user: &UserId,
    seq: i64,
) -> Result<i64, StoreError> {
    let mut tx = pool.begin().await?;
    let snap = snapshot(&mut tx, conv_id, user).await?;
    // Clamped to the head the reader may see; GREATEST keeps it monotonic under concurrent marks.
    let target = seq.min(snap.head).max(0);
    let read_seq: i64 = sqlx::query_scalar(
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
    .bind(target)
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(read_seq)
}
