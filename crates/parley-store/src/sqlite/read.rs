//! Read paths: events after a cursor, history pages, conversation views (SPEC §5).
//!
//! Every read checks the reader's membership periods at access time (P11) and returns only
//! events inside them. A reader who never had a period gets `NotMember`, exactly like a reader
//! of a conversation that does not exist (P10). Each read runs in one read transaction: in WAL
//! mode that is one snapshot, like PostgreSQL's REPEATABLE READ.

use parley_domain::membership::visible_ranges;
use parley_domain::{
    ConvId, ConvKind, ConversationView, DeliveryMode, Event, EventsPage, MemberView, Period,
    Rejection, Role, UserId,
};
use sqlx::{Row, SqliteConnection};

use super::rows::{event_from_row, now, tick, ts};
use super::SqliteStore;
use crate::backend::Backend;
use crate::error::StoreError;
use crate::page::{events_page, RangeReader, ReaderLog};
use crate::types::{ConversationFeed, EventsQuery};

/// The conversation row and the reader's periods, read in one snapshot.
struct Snapshot {
    kind: ConvKind,
    title: Option<String>,
    delivery_mode: DeliveryMode,
    min_seq: i64,
    epoch: i64,
    recall_window_ms: i64,
    retention_ms: Option<i64>,
    periods: Vec<Period>,
    /// The head as this reader may see it: the log's head for a current member, the end of the
    /// last period for a former one (whose view stops there, P11).
    head: i64,
    is_member: bool,
}

async fn snapshot(
    conn: &mut SqliteConnection,
    conv_id: &ConvId,
    viewer: &UserId,
) -> Result<Snapshot, StoreError> {
    let row = sqlx::query(
        "SELECT kind, title, delivery_mode, next_seq, min_seq, epoch, recall_window_ms, retention_ms
         FROM conversations WHERE conv_id = $1",
    )
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
    let kind: String = row.try_get("kind")?;
    let mode: String = row.try_get("delivery_mode")?;
    Ok(Snapshot {
        kind: ConvKind::parse(&kind).unwrap_or(ConvKind::Group),
        title: row.try_get("title")?,
        delivery_mode: DeliveryMode::parse(&mode).unwrap_or(DeliveryMode::Push),
        min_seq: row.try_get("min_seq")?,
        epoch: row.try_get("epoch")?,
        recall_window_ms: row.try_get("recall_window_ms")?,
        retention_ms: row.try_get("retention_ms")?,
        periods,
        head,
        is_member,
    })
}

/// The range read of the log, ascending: one primary-key range scan.
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
    conn: &mut SqliteConnection,
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
    conn: &'c mut SqliteConnection,
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
    store: &SqliteStore,
    conv_id: &ConvId,
    viewer: &UserId,
    query: EventsQuery,
    limit: u32,
) -> Result<EventsPage, StoreError> {
    let mut tx = store.begin_read().await?;
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

/// The conversation as `viewer` sees it; the member list only when asked for (a single
/// conversation's view has it, feed entries do not) and only for a current member.
async fn view(
    conn: &mut SqliteConnection,
    conv_id: &ConvId,
    viewer: &UserId,
    with_members: bool,
) -> Result<ConversationView, StoreError> {
    let snap = snapshot(conn, conv_id, viewer).await?;
    let read_seq: i64 =
        sqlx::query_scalar("SELECT read_seq FROM read_marks WHERE conv_id = $1 AND user_id = $2")
            .bind(conv_id.as_str())
            .bind(viewer.as_str())
            .fetch_optional(&mut *conn)
            .await?
            .unwrap_or(0);
    let read_seq = read_seq.min(snap.head);

    // Unread: visible msg events of others after read_seq, not recalled (SPEC §5).
    let mut unread = 0i64;
    for (lo, hi) in visible_ranges(&snap.periods, (read_seq + 1).max(snap.min_seq), snap.head) {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM events WHERE conv_id = $1 AND seq BETWEEN $2 AND $3
               AND kind = 'msg' AND recalled_at IS NULL AND sender_user <> $4",
        )
        .bind(conv_id.as_str())
        .bind(lo)
        .bind(hi)
        .bind(viewer.as_str())
        .fetch_one(&mut *conn)
        .await?;
        unread += n;
    }

    let mut last_event = None;
    if let Some(r) = visible_ranges(&snap.periods, snap.min_seq, snap.head).last() {
        last_event = range(conn, conv_id, *r, true, 1).await?.into_iter().next();
    }

    let members = if with_members && snap.is_member {
        let rows = sqlx::query(
            "SELECT user_id, role FROM membership_periods WHERE conv_id = $1 AND to_seq IS NULL ORDER BY from_seq",
        )
        .bind(conv_id.as_str())
        .fetch_all(&mut *conn)
        .await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            let role: String = r.try_get("role")?;
            out.push(MemberView {
                user_id: UserId::from_trusted(r.try_get("user_id")?),
                role: Role::parse(&role).unwrap_or(Role::Member),
            });
        }
        Some(out)
    } else {
        None
    };

    Ok(ConversationView {
        conv_id: conv_id.clone(),
        kind: snap.kind,
        title: snap.title,
        delivery_mode: snap.delivery_mode,
        head: snap.head,
        min_seq: snap.min_seq,
        epoch: snap.epoch,
        read_seq,
        unread,
        members,
        recall_window_ms: snap.recall_window_ms,
        retention_ms: snap.retention_ms,
        last_event,
    })
}

pub(super) async fn get_conversation(
    store: &SqliteStore,
    conv_id: &ConvId,
    viewer: &UserId,
) -> Result<ConversationView, StoreError> {
    let mut tx = store.begin_read().await?;
    let v = view(&mut tx, conv_id, viewer, true).await?;
    tx.commit().await?;
    Ok(v)
}

/// Sync tokens of the embedded store are `c1.` and the change clock of the snapshot the answer
/// was read in.
const SYNC_TOKEN_PREFIX: &str = "c1.";

fn parse_sync_token(token: &str) -> Result<i64, StoreError> {
    token
        .strip_prefix(SYNC_TOKEN_PREFIX)
        .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|n| n.parse::<i64>().ok())
        .ok_or_else(|| Rejection::BadRequest("invalid sync token".into()).into())
}

/// The feed of SPEC §5: the conversations that changed for `viewer` since `since`.
///
/// Every write that changes what a feed shows of a conversation stamps `conversations.change_seq`
/// with the next value of the change clock, and every move of a read position stamps
/// `read_marks.change_seq`. The token is the clock as the previous answer's snapshot saw it:
/// every stamp up to it was in that answer, every stamp above it is new (writes are serial, so
/// they commit in clock order). Same semantics as the PostgreSQL feed, whose tokens are
/// snapshots over transaction ids.
pub(super) async fn list_conversations(
    store: &SqliteStore,
    viewer: &UserId,
    since: Option<&str>,
) -> Result<ConversationFeed, StoreError> {
    let since = since.map(parse_sync_token).transpose()?;
    let mut tx = store.begin_read().await?;
    let clock: i64 = sqlx::query_scalar("SELECT last FROM change_clock WHERE id = 1")
        .fetch_one(&mut *tx)
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
    .bind(since)
    .fetch_all(&mut *tx)
    .await?;
    let mut conversations = Vec::with_capacity(ids.len());
    for id in ids {
        conversations.push(view(&mut tx, &ConvId::from_trusted(id), viewer, false).await?);
    }
    tx.commit().await?;
    Ok(ConversationFeed {
        conversations,
        sync_token: format!("{SYNC_TOKEN_PREFIX}{clock}"),
    })
}

pub(super) async fn log_range(
    store: &SqliteStore,
    conv_id: &ConvId,
    after: i64,
    upto: i64,
    limit: u32,
) -> Result<Vec<Event>, StoreError> {
    if upto <= after {
        return Ok(Vec::new());
    }
    let mut conn = store.reader.acquire().await?;
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
    store: &SqliteStore,
    conv_id: &ConvId,
    user: &UserId,
    seq: i64,
) -> Result<i64, StoreError> {
    let mut tx = store.begin_write().await?;
    let snap = snapshot(&mut tx, conv_id, user).await?;
    // Clamped to the head the reader may see; max() keeps it monotonic (P8). Only a move is a
    // change for the sync feed.
    let target = seq.min(snap.head).max(0);
    let change = tick(&mut tx).await?;
    let read_seq: i64 = sqlx::query_scalar(
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
    .bind(target)
    .bind(ts(now()))
    .bind(change)
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(read_seq)
}
