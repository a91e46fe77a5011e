//! Assembling an events page (SPEC §5) from a reader's visible ranges: the same for every store,
//! which only supplies the primary-key range reads of one snapshot.

use parley_domain::membership::visible_ranges;
use parley_domain::{ConvId, Event, EventsPage, Period, Rejection};

use crate::error::StoreError;
use crate::flow::StoreFuture;
use crate::types::EventsQuery;

/// Range reads of one conversation log, all inside one snapshot.
pub(crate) trait RangeReader: Send {
    /// Events with `lo <= seq <= hi`, ascending or descending, at most `limit`.
    fn range(
        &mut self,
        conv_id: &ConvId,
        bounds: (i64, i64),
        descending: bool,
        limit: usize,
    ) -> impl StoreFuture<Vec<Event>>;
}

/// The log as one reader may see it, read in the same snapshot as the ranges.
pub(crate) struct ReaderLog<'a> {
    pub min_seq: i64,
    pub epoch: i64,
    /// The head this reader may see (the end of their last period for a former member).
    pub head: i64,
    pub periods: &'a [Period],
}

/// The events-after answer for `events`, the visible events after `after` in ascending order,
/// at most `limit` of them: `through_seq` is the log's head for this reader unless the page is
/// full, when the client resumes right after the last event it got.
pub(crate) fn after_page(
    events: Vec<Event>,
    log: &ReaderLog<'_>,
    after: i64,
    limit: usize,
) -> EventsPage {
    let through_seq = match events.last() {
        Some(last) if events.len() == limit => last.seq,
        _ => log.head,
    };
    EventsPage {
        events,
        head: log.head,
        min_seq: log.min_seq,
        epoch: log.epoch,
        through_seq,
        truncated: after < log.min_seq - 1,
        next_before: None,
    }
}

/// Events after a cursor (ascending, `through_seq` = last seq examined) or a history page
/// (descending, exclusive cursor, `next_before`).
pub(crate) async fn events_page(
    reader: &mut impl RangeReader,
    conv_id: &ConvId,
    log: ReaderLog<'_>,
    query: EventsQuery,
    limit: u32,
) -> Result<EventsPage, StoreError> {
    let limit = limit.max(1) as usize;
    let mut events = Vec::new();
    match query {
        EventsQuery::After { after, epoch } => {
            if epoch.is_some_and(|e| e != log.epoch) {
                return Err(Rejection::EpochChanged.into());
            }
            let start = after.saturating_add(1).max(log.min_seq);
            for r in visible_ranges(log.periods, start, log.head) {
                events.extend(
                    reader
                        .range(conv_id, r, false, limit - events.len())
                        .await?,
                );
                if events.len() == limit {
                    break;
                }
            }
            Ok(after_page(events, &log, after, limit))
        }
        EventsQuery::Before { before } => {
            let upper = before.map_or(log.head, |b| b.saturating_sub(1).min(log.head));
            let ranges = visible_ranges(log.periods, log.min_seq, upper);
            for r in ranges.iter().rev() {
                events.extend(
                    reader
                        .range(conv_id, *r, true, limit - events.len())
                        .await?,
                );
                if events.len() == limit {
                    break;
                }
            }
            // The next page exists only if something visible lies below the smallest seq
            // examined; once the page reached min_seq (or the reader's first period) it is null.
            let next_before = match events.last() {
                Some(last) if events.len() == limit => ranges
                    .first()
                    .is_some_and(|(lo, _)| *lo < last.seq)
                    .then_some(last.seq),
                _ => None,
            };
            Ok(EventsPage {
                events,
                head: log.head,
                min_seq: log.min_seq,
                epoch: log.epoch,
                through_seq: upper.max(0),
                truncated: false,
                next_before,
            })
        }
    }
}
