//! Read paths (SPEC §5) for every store: events after a cursor, history pages, the log range
//! of gateways and the member snapshot of their caches. A backend supplies the row and range
//! reads of one snapshot; the membership checks and the page assembly are here.
//!
//! Every read checks the reader's membership periods at access time (P11) and returns only
//! events inside them. A reader who never had a period gets `NotMember`, exactly like a reader
//! of a conversation that does not exist (P10).

use parley_domain::decide::membership::switch_threshold;
use parley_domain::decide::view::reader_head;
use parley_domain::membership::is_visible;
use parley_domain::relations::ReactionCount;
use parley_domain::{
    ConvId, DeliveryMode, Event, EventKind, EventsPage, Period, Rejection, UserId,
};

use crate::backend::Backend;
use crate::error::StoreError;
use crate::flow::{ReadTx, StoreFuture};
use crate::page::{events_page, RangeReader, ReaderLog};
use crate::query::{Arg, Sql, SqlRow};
use crate::sql;
use crate::types::{EventsQuery, MemberSnapshot};

/// A conversation's log as a read sees it.
pub(crate) struct LogBounds {
    pub next_seq: i64,
    pub min_seq: i64,
    pub epoch: i64,
}

/// What a gateway's member cache starts from.
pub(crate) struct MemberRow {
    pub next_seq: i64,
    pub delivery_mode: DeliveryMode,
    pub pull_threshold: Option<u32>,
}

/// The reads of one snapshot.
pub(crate) trait LogReadTx: ReadTx + RangeReader {
    /// The conversation's log bounds; `None` when it does not exist.
    fn log_bounds(&mut self, conv_id: &ConvId) -> impl StoreFuture<Option<LogBounds>> {
        sql::log_bounds(self, conv_id)
    }
    /// The conversation's counter, mode and threshold; `None` when it does not exist.
    fn member_row(&mut self, conv_id: &ConvId) -> impl StoreFuture<Option<MemberRow>> {
        sql::member_row(self, conv_id)
    }
    /// The current members with the first seq of their open period.
    fn open_periods(&mut self, conv_id: &ConvId) -> impl StoreFuture<Vec<(UserId, i64)>> {
        sql::open_periods(self, conv_id)
    }
}

impl<T: ReadTx> LogReadTx for T {}

/// The range reads of a transaction are its primary-key range reads.
impl<T: Sql> RangeReader for T {
    fn range(
        &mut self,
        conv_id: &ConvId,
        bounds: (i64, i64),
        descending: bool,
        limit: usize,
    ) -> impl StoreFuture<Vec<Event>> {
        sql::range(self, conv_id, bounds, descending, limit)
    }
}

/// The conversation and the reader's periods, read in one snapshot.
pub(crate) struct Snapshot {
    pub bounds: LogBounds,
    pub periods: Vec<Period>,
    /// The head as this reader may see it.
    pub head: i64,
}

impl Snapshot {
    pub(crate) fn log(&self) -> ReaderLog<'_> {
        ReaderLog {
            min_seq: self.bounds.min_seq,
            epoch: self.bounds.epoch,
            head: self.head,
            periods: &self.periods,
        }
    }
}

/// `NotMember` for an unknown conversation and for a reader who never had a period (P10), after
/// the same two statements for both.
pub(crate) async fn snapshot<T: LogReadTx>(
    tx: &mut T,
    conv_id: &ConvId,
    viewer: &UserId,
) -> Result<Snapshot, StoreError> {
    let bounds = tx.log_bounds(conv_id).await?;
    let periods = tx.periods(conv_id, viewer).await?;
    let Some(bounds) = bounds else {
        return Err(Rejection::NotMember.into());
    };
    if periods.is_empty() {
        return Err(Rejection::NotMember.into());
    }
    let head = reader_head(&periods, bounds.next_seq - 1);
    Ok(Snapshot {
        bounds,
        periods,
        head,
    })
}

pub(crate) async fn events<B: Backend>(
    backend: &B,
    conv_id: &ConvId,
    viewer: &UserId,
    query: EventsQuery,
    limit: u32,
) -> Result<EventsPage, StoreError> {
    if let EventsQuery::After { after, epoch } = query {
        let one = backend
            .events_after_in_one_statement(conv_id, viewer, (after, epoch), limit)
            .await?;
        if let Some(page) = one {
            return Ok(page);
        }
    }
    let mut tx = backend.begin_read().await?;
    let snap = snapshot(&mut tx, conv_id, viewer).await?;
    let mut page = events_page(&mut tx, conv_id, snap.log(), query, limit).await?;
    fold_reactions(&mut tx, conv_id, viewer, &mut page.events).await?;
    tx.finish().await?;
    Ok(page)
}

/// A thread's page: its root and the replies in it that `viewer` may see, by the cursors of
/// the log (`events_page`). A root the viewer cannot see answers like a missing one.
pub(crate) async fn thread<B: Backend>(
    backend: &B,
    conv_id: &ConvId,
    viewer: &UserId,
    root: i64,
    query: EventsQuery,
    limit: u32,
) -> Result<EventsPage, StoreError> {
    let mut tx = backend.begin_read().await?;
    let snap = snapshot(&mut tx, conv_id, viewer).await?;
    let root_event = sql::range(&mut tx, conv_id, (root, root), false, 1).await?;
    let is_root = root_event.first().is_some_and(|e| {
        e.kind == EventKind::Msg
            && e.relations().thread_root.is_none()
            && is_visible(&snap.periods, root)
    });
    if !is_root || root < snap.bounds.min_seq {
        return Err(Rejection::NotFound("no such message").into());
    }
    let mut reader = ThreadReader { tx: &mut tx, root };
    let mut page = events_page(&mut reader, conv_id, snap.log(), query, limit).await?;
    fold_reactions(&mut tx, conv_id, viewer, &mut page.events).await?;
    tx.finish().await?;
    Ok(page)
}

/// The range reads of one thread: the root and its replies only.
struct ThreadReader<'t, T> {
    tx: &'t mut T,
    root: i64,
}

impl<T: Sql> RangeReader for ThreadReader<'_, T> {
    fn range(
        &mut self,
        conv_id: &ConvId,
        bounds: (i64, i64),
        descending: bool,
        limit: usize,
    ) -> impl StoreFuture<Vec<Event>> {
        sql::thread_range(self.tx, conv_id, self.root, bounds, descending, limit)
    }
}

const REACTIONS_OF_RANGE_SQL: &str = "SELECT target_seq, reaction_key, count(*) AS n,
       count(CASE WHEN user_id = $4 THEN 1 END) AS mine, min(seq) AS first_seq
  FROM reactions WHERE conv_id = $1 AND target_seq BETWEEN $2 AND $3
 GROUP BY target_seq, reaction_key ORDER BY target_seq, first_seq";

/// Folds the reaction counts of the page's messages into them, each key with whether
/// `viewer` reacted with it, keys in the order they were first used. One statement over the
/// reactions of the page's seq range; none when the page holds no message.
pub(crate) async fn fold_reactions(
    sql: &mut impl Sql,
    conv_id: &ConvId,
    viewer: &UserId,
    events: &mut [Event],
) -> Result<(), StoreError> {
    let msgs = events
        .iter()
        .filter(|e| e.kind == EventKind::Msg && !e.recalled);
    let Some((lo, hi)) = msgs.fold(None, |acc: Option<(i64, i64)>, e| {
        Some(acc.map_or((e.seq, e.seq), |(lo, hi)| (lo.min(e.seq), hi.max(e.seq))))
    }) else {
        return Ok(());
    };
    let args = [
        Arg::Text(conv_id.as_str()),
        Arg::Int(lo),
        Arg::Int(hi),
        Arg::Text(viewer.as_str()),
    ];
    let rows = sql.fetch_all(REACTIONS_OF_RANGE_SQL, &args).await?;
    if rows.is_empty() {
        return Ok(());
    }
    let mut by_seq: std::collections::HashMap<i64, Vec<ReactionCount>> =
        std::collections::HashMap::new();
    for r in &rows {
        by_seq
            .entry(r.int("target_seq")?)
            .or_default()
            .push(ReactionCount {
                key: r.string("reaction_key")?,
                count: r.int("n")?,
                me: r.int("mine")? > 0,
            });
    }
    for event in events.iter_mut().filter(|e| e.kind == EventKind::Msg) {
        if let Some(counts) = by_seq.remove(&event.seq) {
            event.relations_mut().reactions = counts;
        }
    }
    Ok(())
}

/// Committed events with `after < seq <= upto`, ascending, unfiltered, at most `limit`.
pub(crate) async fn log_range<B: Backend>(
    backend: &B,
    conv_id: &ConvId,
    (after, upto): (i64, i64),
    limit: u32,
) -> Result<Vec<Event>, StoreError> {
    if upto <= after {
        return Ok(Vec::new());
    }
    backend
        .read_range(
            conv_id,
            (after.saturating_add(1), upto),
            limit.max(1) as usize,
        )
        .await
}

pub(crate) async fn current_members<B: Backend>(
    backend: &B,
    conv_id: &ConvId,
) -> Result<MemberSnapshot, StoreError> {
    let mut tx = backend.begin_read().await?;
    let row = tx.member_row(conv_id).await?.ok_or(Rejection::NotMember)?;
    let members = tx.open_periods(conv_id).await?;
    tx.finish().await?;
    Ok(MemberSnapshot {
        head: row.next_seq - 1,
        members,
        delivery_mode: row.delivery_mode,
        pull_threshold: switch_threshold(row.delivery_mode, row.pull_threshold),
    })
}
