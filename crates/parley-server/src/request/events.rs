//! Reading a conversation log: events after a cursor (`sync` frames, `GET …/events?after=`)
//! or history pages before one (`GET …/events[?before=]`).

use parley_domain::{ConvId, Event};
use parley_store::{DeviceIdentity, EventsQuery, ThreadQuery};
use parley_wire::EventsPage;

use super::fields;
use crate::error::ApiError;
use crate::path::{ConvPath, DeferredPath};
use crate::query::{self, QueryPairs};
use crate::state::AppState;

/// Events after `after`, ascending, at most `limit`; with `epoch`, a cursor of another epoch
/// is refused (`EPOCH_CHANGED`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncAfter {
    pub conv_id: ConvId,
    pub after: i64,
    pub epoch: Option<i64>,
    pub limit: u32,
}

/// Events before `before` (the newest without one), descending, at most `limit`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct History {
    pub conv_id: ConvId,
    pub before: Option<i64>,
    pub limit: u32,
}

/// A thread's page: its root and replies, by the cursors of the log (docs/RELATIONS.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadPage {
    pub conv_id: ConvId,
    pub root: i64,
    pub query: EventsQuery,
    pub limit: u32,
}

/// `GET /v1/conversations/{conv_id}/events`: the query's cursor chooses the direction;
/// `thread` narrows the page to one thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadEvents {
    After(SyncAfter),
    Before(History),
    Thread(ThreadPage),
}

impl SyncAfter {
    /// A `sync` frame's fields, in the order of the query's and with its ranges.
    pub fn from_frame(
        conv_id: &str,
        after: i64,
        limit: Option<u32>,
        epoch: Option<i64>,
    ) -> Result<Self, ApiError> {
        let conv_id = fields::conv_id(conv_id)?;
        let after = fields::non_negative("after", after)?;
        let epoch = epoch
            .map(|e| fields::non_negative("epoch", e))
            .transpose()?;
        let limit = fields::page_size(limit.map(i64::from))?;
        Ok(Self {
            conv_id,
            after,
            epoch,
            limit,
        })
    }

    pub async fn run(
        self,
        state: &AppState,
        device: &DeviceIdentity,
    ) -> Result<EventsPage<Event>, ApiError> {
        ReadEvents::After(self).run(state, device).await
    }
}

impl ReadEvents {
    /// The path first, then the query (see `query::events_query` for its parameters).
    pub fn from_http(path: DeferredPath<ConvPath>, query: QueryPairs) -> Result<Self, ApiError> {
        let conv_id = path.into_inner()?.conv_id()?;
        let pairs = query.into_inner()?;
        let (query, limit) = query::events_query(&pairs)?;
        if let Some(root) = query::events_thread(&pairs)? {
            return Ok(Self::Thread(ThreadPage {
                conv_id,
                root,
                query,
                limit,
            }));
        }
        Ok(match query {
            EventsQuery::After { after, epoch } => Self::After(SyncAfter {
                conv_id,
                after,
                epoch,
                limit,
            }),
            EventsQuery::Before { before } => Self::Before(History {
                conv_id,
                before,
                limit,
            }),
        })
    }

    /// One page as the caller may see it: visibility is checked by the store against the
    /// caller's periods at access time (P11).
    pub async fn run(
        self,
        state: &AppState,
        device: &DeviceIdentity,
    ) -> Result<EventsPage<Event>, ApiError> {
        let (conv_id, query, limit) = match self {
            Self::After(s) => return s.read(state, device).await,
            Self::Before(h) => (h.conv_id, EventsQuery::Before { before: h.before }, h.limit),
            Self::Thread(t) => {
                let thread = ThreadQuery {
                    root: t.root,
                    query: t.query,
                };
                let page = state
                    .store()
                    .thread(&t.conv_id, &device.user_id, thread, t.limit)
                    .await?;
                return Ok(wire_page(page, device));
            }
        };
        let page = state
            .store()
            .events(&conv_id, &device.user_id, query, limit)
            .await?;
        Ok(wire_page(page, device))
    }
}

impl SyncAfter {
    /// From the gateway's event window when it can answer exactly as the store would
    /// (`gateway::window`), else from the store, whose answer teaches the window the log's
    /// `min_seq` and `epoch`.
    async fn read(
        &self,
        state: &AppState,
        device: &DeviceIdentity,
    ) -> Result<EventsPage<Event>, ApiError> {
        let window = state.gateway().window();
        let cursor = (self.after, self.epoch);
        if let Some(page) = window
            .fetch(&self.conv_id, &device.user_id, cursor, self.limit)
            .await
        {
            return Ok(wire_page(page, device));
        }
        let generation = window.purge_generation();
        let query = EventsQuery::After {
            after: self.after,
            epoch: self.epoch,
        };
        let page = state
            .store()
            .events(&self.conv_id, &device.user_id, query, self.limit)
            .await?;
        window.learn(&self.conv_id, &page, generation);
        Ok(wire_page(page, device))
    }
}

/// The page as `device` may see it: a Welcome's message only for the devices it names
/// (docs/E2EE.md).
fn wire_page(page: parley_domain::EventsPage, device: &DeviceIdentity) -> EventsPage<Event> {
    let (user, device) = (device.user_id.as_str(), device.device_id.as_str());
    let events = page
        .events
        .into_iter()
        .map(|e| e.redacted_for(user, device).unwrap_or(e))
        .collect();
    EventsPage {
        events,
        head: page.head,
        min_seq: page.min_seq,
        epoch: page.epoch,
        through_seq: page.through_seq,
        truncated: page.truncated,
        next_before: page.next_before,
    }
}
