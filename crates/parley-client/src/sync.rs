//! Incremental sync (SPEC §5, sync feed): what a device keeps between sessions, and the
//! catch-up that brings it level with the server after any time away.
//!
//! A [`SyncState`] holds the feed's sync token and, per conversation, a [`ConvSync`]: the log's
//! epoch, the events-after cursor, the read position, the unread count and the head. The
//! events themselves go either to an in-memory log per conversation ([`SyncState::new`],
//! convenient for tests and small apps) or to the app's own storage through an [`EventSink`]
//! ([`SyncState::with_sink`]).
//!
//! [`Client::catch_up`] makes one feed call with the state's token, then fetches events-after
//! for every conversation the feed lists whose head lies beyond its cursor, in pages of 500.
//! The rules that make the result exact:
//!
//! - the cursor moves to each page's `through_seq`, never to its last event, so seqs the user
//!   cannot see (outside their membership periods) never look like a gap;
//! - events at or below what the state already has are dropped, so no seq is stored twice and
//!   each conversation's events strictly increase;
//! - a `truncated` answer (the cursor lay below `min_seq`) restarts the conversation's log from
//!   that answer; `EPOCH_CHANGED` restarts it at the new epoch from seq 0;
//! - read positions and unread counts come from the feed (the server counts unread, never the
//!   device), and a read position never moves back (P8).
//!
//! The token advances only when every listed conversation was caught up. After a failure the
//! next call asks with the old token again and resumes each conversation from its cursor; no
//! event is fetched twice into the state.
//!
//! ## With a realtime session
//!
//! [`crate::Realtime`] pushes events while connected. Feed its deliveries to
//! [`SyncState::apply_delivery`]: events that extend a conversation's log exactly are taken,
//! `read` deliveries move the read position ([`SyncState::apply_read`]), and the answer says
//! when a catch-up is due: after [`Delivery::Reconnected`] (pushes sent while no connection
//! existed are gone) and after a delivery the state cannot place (a gap, a truncation, an epoch
//! change). [`SyncState::track_in`] starts the session at the state's cursors.
//!
//! ```no_run
//! # async fn demo(client: parley_client::Client) -> Result<(), parley_client::ClientError> {
//! use parley_client::{Realtime, RealtimeOptions, SyncState};
//!
//! let mut state = SyncState::new();
//! let report = client.catch_up(&mut state).await?;
//! println!("{} conversations changed, {} events", report.changed.len(), report.events);
//!
//! let mut rt = Realtime::connect(&client, RealtimeOptions::default()).await?;
//! state.track_in(&rt.handle());
//! while let Some(delivery) = rt.next().await {
//!     if state.apply_delivery(&delivery) {
//!         client.catch_up(&mut state).await?;
//!     }
//! }
//! # Ok(())
//! # }
//! ```

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

use futures::stream::{self, StreamExt};
use serde::{Deserialize, Serialize};

use crate::client::Client;
use crate::error::{code, ClientError};
use crate::types::{Conversation, Event, EventKind, EventsPage};
use crate::ws::{Delivery, RealtimeHandle};

/// The server's largest events-after page; larger limits are clamped to it.
pub const EVENTS_PAGE_LEN_MAX: u32 = 500;
/// Conversations fetched at the same time during a catch-up: enough to hide the round trips of
/// a device with many changed conversations, few enough not to crowd the server.
pub const CATCH_UP_CONCURRENCY_DEFAULT: usize = 4;
/// Pages allowed per conversation beyond those its head needs when the first page came, for
/// events committed while the conversation is being fetched.
pub const PAGES_SLACK: u64 = 3;
/// Epoch changes accepted per conversation in one catch-up; a log rebuilt more often than this
/// while it is being read is left for the next call.
pub const EPOCH_RESETS_MAX: u32 = 2;

/// Where a device stands in one conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConvSync {
    /// The generation of the log the cursor belongs to.
    pub epoch: i64,
    /// Every seq at or below it was examined: the next events-after starts here.
    pub cursor: i64,
    /// The user's read position (monotonic).
    pub read_seq: i64,
    /// Visible messages from others after `read_seq`, as the server counted them.
    pub unread: i64,
    /// The head `unread` was counted up to.
    pub unread_through: i64,
    /// The largest seq as this user may see it (for a former member, the end of their last
    /// membership period).
    pub head: i64,
    pub min_seq: i64,
    /// The last seq handed to the app since the log (re)started; 0: none.
    pub last_seq: i64,
    /// Events-after must be asked whether or not the feed lists the conversation: a fetch was
    /// cut short, or a pushed delivery could not be placed.
    pub stale: bool,
}

impl ConvSync {
    /// A conversation the state meets for the first time, positioned just before its first
    /// stored event: nothing below `min_seq` exists any more, so nothing is reported missing.
    fn from_entry(entry: &Conversation) -> Self {
        Self {
            epoch: entry.epoch,
            cursor: (entry.min_seq - 1).max(0),
            read_seq: entry.read_seq,
            unread: entry.unread,
            unread_through: entry.head,
            head: entry.head,
            min_seq: entry.min_seq,
            last_seq: 0,
            stale: false,
        }
    }

    /// The fields whose change makes a conversation count as changed in a report.
    fn observable(&self) -> (i64, i64, i64, i64, i64, i64, i64) {
        (
            self.epoch,
            self.cursor,
            self.read_seq,
            self.unread,
            self.head,
            self.min_seq,
            self.last_seq,
        )
    }

    /// Takes the read state of a feed entry. The position never moves back; the count is the
    /// server's unless the device already knows of a read covering everything counted.
    fn take_read_state(&mut self, read_seq: i64, unread: i64, head: i64) {
        if self.read_seq > read_seq && self.read_seq >= head {
            self.unread = 0;
        } else {
            self.unread = unread;
        }
        self.read_seq = self.read_seq.max(read_seq);
        self.unread_through = head;
    }

    /// Whether events-after has anything to say beyond what the state has.
    fn needs_fetch(&self, entry: &Conversation) -> bool {
        self.stale || entry.epoch != self.epoch || self.cursor < entry.head
    }

    /// Restarts at `epoch` with no events: every cursor of the old epoch is void.
    fn reset_epoch(&mut self, epoch: i64) {
        self.epoch = epoch;
        self.cursor = 0;
        self.last_seq = 0;
    }

    /// Applies one events-after page fetched from `self.cursor` at `self.epoch`: keeps only
    /// events above everything handed over before, strictly increasing, and moves the cursor
    /// to `through_seq`.
    pub(crate) fn apply_page(&mut self, page: EventsPage) -> PageStep {
        let from = self.cursor;
        let restart = page.truncated;
        if restart {
            self.last_seq = 0;
        }
        let mut floor = from.max(self.last_seq);
        let mut events = Vec::with_capacity(page.events.len());
        for event in page.events {
            if event.seq > floor {
                floor = event.seq;
                events.push(event);
            }
        }
        if let Some(last) = events.last() {
            self.last_seq = last.seq;
        }
        self.cursor = from.max(page.through_seq).max(self.last_seq);
        self.epoch = page.epoch;
        self.head = page.head;
        self.min_seq = page.min_seq;
        let progress = if self.cursor >= page.head {
            Progress::Done
        } else if self.cursor > from {
            Progress::More
        } else {
            Progress::Stuck
        };
        PageStep {
            events,
            restart,
            progress,
        }
    }

    /// Takes a pushed event when it is exactly the next seq; answers whether it was taken.
    fn accept_push(&mut self, seq: i64) -> bool {
        if self.stale || seq != self.cursor + 1 {
            return false;
        }
        self.cursor = seq;
        self.last_seq = seq;
        self.head = self.head.max(seq);
        true
    }
}

/// What one page did to a conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PageStep {
    /// New to the app, ascending.
    pub(crate) events: Vec<Event>,
    /// The log restarts with `events` (the page was truncated).
    pub(crate) restart: bool,
    pub(crate) progress: Progress,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Progress {
    /// The cursor reached the page's head.
    Done,
    /// More pages follow.
    More,
    /// The page moved the cursor nowhere although the head lies beyond: asking again would
    /// loop.
    Stuck,
}

/// Why the app's copy of a conversation's log became void.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Restart {
    /// Events between the device's cursor and `min_seq` were purged; the log restarts at
    /// `min_seq`.
    Truncated,
    /// The log was rebuilt; it restarts from seq 1 of the new epoch.
    EpochChanged,
    /// The server no longer lets the user read the conversation; it is forgotten.
    Inaccessible,
}

/// Where caught-up events go when the app keeps them itself ([`SyncState::with_sink`]).
/// Calls for one conversation come in order; calls for different ones may interleave.
pub trait EventSink: Send {
    /// Events of `conv_id` the app does not have: ascending, each above every seq handed over
    /// for this conversation since its last restart.
    fn append(&mut self, conv_id: &str, events: Vec<Event>);
    /// The app's copy of `conv_id` is void: drop it. Events that follow start afresh.
    fn restart(&mut self, conv_id: &str, why: Restart);
}

/// The in-memory logs of [`SyncState::new`].
#[derive(Debug, Default)]
struct MemoryLogs {
    logs: HashMap<String, Vec<Event>>,
}

impl MemoryLogs {
    /// Appends events above the log's last seq. A `recall` also marks its target recalled and
    /// drops its body, as the server returns it once recalled. Answers `(recall seq, target
    /// seq)` of every message this recalled.
    fn append(&mut self, conv_id: &str, events: Vec<Event>) -> Vec<(i64, i64)> {
        let log = self.logs.entry(conv_id.to_owned()).or_default();
        let mut recalled = Vec::new();
        for event in events {
            if log.last().is_some_and(|last| last.seq >= event.seq) {
                continue;
            }
            if event.kind == EventKind::Recall {
                if let Some(target) = event.target_seq {
                    if let Ok(i) = log.binary_search_by_key(&target, |e| e.seq) {
                        if log[i].kind == EventKind::Msg && !log[i].recalled {
                            log[i].recalled = true;
                            log[i].body = None;
                            recalled.push((event.seq, target));
                        }
                    }
                }
            }
            log.push(event);
        }
        recalled
    }

    fn restart(&mut self, conv_id: &str, why: Restart) {
        match why {
            Restart::Inaccessible => {
                self.logs.remove(conv_id);
            }
            Restart::Truncated | Restart::EpochChanged => {
                self.logs.insert(conv_id.to_owned(), Vec::new());
            }
        }
    }
}

enum Events {
    Memory(MemoryLogs),
    Sink(Box<dyn EventSink>),
}

impl Events {
    /// Hands `events` over; answers what [`MemoryLogs::append`] answers (nothing for a sink).
    fn append(&mut self, conv_id: &str, events: Vec<Event>) -> Vec<(i64, i64)> {
        if events.is_empty() {
            return Vec::new();
        }
        match self {
            Self::Memory(logs) => logs.append(conv_id, events),
            Self::Sink(sink) => {
                sink.append(conv_id, events);
                Vec::new()
            }
        }
    }

    fn restart(&mut self, conv_id: &str, why: Restart) {
        match self {
            Self::Memory(logs) => logs.restart(conv_id, why),
            Self::Sink(sink) => sink.restart(conv_id, why),
        }
    }
}

/// What a device keeps to catch up: stored with [`SyncState::save`] and restored with
/// [`SyncState::restore`] next to the app's own events.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedSync {
    /// The feed token of the last complete catch-up; `None` before the first.
    pub token: Option<String>,
    pub conversations: BTreeMap<String, ConvSync>,
}

/// Everything a device keeps to catch up: the feed token, a [`ConvSync`] per conversation,
/// and the events (in memory, or handed to the app's [`EventSink`]). See the
/// [module documentation](crate::sync).
pub struct SyncState {
    token: Option<String>,
    convs: BTreeMap<String, ConvSync>,
    events: Events,
}

impl Default for SyncState {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for SyncState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SyncState")
            .field("token", &self.token)
            .field("conversations", &self.convs)
            .field("keeps_logs", &matches!(self.events, Events::Memory(_)))
            .finish()
    }
}

impl SyncState {
    /// A state that has seen nothing and keeps every conversation's events in memory, readable
    /// through [`SyncState::events`]. A device with a large history should keep events itself
    /// ([`SyncState::with_sink`]).
    pub fn new() -> Self {
        Self {
            token: None,
            convs: BTreeMap::new(),
            events: Events::Memory(MemoryLogs::default()),
        }
    }

    /// A state that has seen nothing and hands events to `sink` instead of keeping them.
    pub fn with_sink(sink: impl EventSink + 'static) -> Self {
        Self {
            token: None,
            convs: BTreeMap::new(),
            events: Events::Sink(Box::new(sink)),
        }
    }

    /// A state saved earlier, whose events the app kept in `sink`.
    pub fn restore(saved: SavedSync, sink: impl EventSink + 'static) -> Self {
        Self {
            token: saved.token,
            convs: saved.conversations,
            events: Events::Sink(Box::new(sink)),
        }
    }

    /// The positions to store next to the app's events (not the events).
    pub fn save(&self) -> SavedSync {
        SavedSync {
            token: self.token.clone(),
            conversations: self.convs.clone(),
        }
    }

    /// The feed token of the last complete catch-up.
    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    /// The conversations the state knows, in `conv_id` order.
    pub fn conversations(&self) -> impl Iterator<Item = &str> {
        self.convs.keys().map(String::as_str)
    }

    pub fn conversation(&self, conv_id: &str) -> Option<&ConvSync> {
        self.convs.get(conv_id)
    }

    /// `(epoch, cursor)` of a conversation.
    pub fn cursor(&self, conv_id: &str) -> Option<(i64, i64)> {
        self.convs.get(conv_id).map(|c| (c.epoch, c.cursor))
    }

    pub fn read_seq(&self, conv_id: &str) -> Option<i64> {
        self.convs.get(conv_id).map(|c| c.read_seq)
    }

    /// The unread count: exact as of the last catch-up; lowered by [`SyncState::apply_read`]
    /// in between.
    pub fn unread(&self, conv_id: &str) -> Option<i64> {
        self.convs.get(conv_id).map(|c| c.unread)
    }

    /// The events kept for a conversation, strictly increasing by seq; `None` when the state
    /// hands events to a sink or does not know the conversation.
    pub fn events(&self, conv_id: &str) -> Option<&[Event]> {
        match &self.events {
            Events::Memory(logs) if self.convs.contains_key(conv_id) => {
                Some(logs.logs.get(conv_id).map_or(&[][..], |log| log.as_slice()))
            }
            _ => None,
        }
    }

    /// Moves the read position of `conv_id` forward to `read_seq` (a `read` delivery, or the
    /// answer of a mark-read); never back. Answers whether it moved. The unread count drops to
    /// 0 when the position covers everything counted; otherwise the messages now read are
    /// taken off when the state keeps the log, and the next catch-up brings the server's count
    /// either way (a moved read position lists the conversation in the feed).
    pub fn apply_read(&mut self, conv_id: &str, read_seq: i64) -> bool {
        let Some(conv) = self.convs.get_mut(conv_id) else {
            return false;
        };
        if read_seq <= conv.read_seq {
            return false;
        }
        let before = conv.read_seq;
        conv.read_seq = read_seq;
        if read_seq >= conv.unread_through {
            conv.unread = 0;
        } else if let Events::Memory(logs) = &self.events {
            // Messages the server counted: from others (an own message moves the sender's read
            // position past it), not recalled, in (before, read_seq].
            let now_read = logs.logs.get(conv_id).map_or(0, |log| {
                let start = log.partition_point(|e| e.seq <= before);
                log[start..]
                    .iter()
                    .take_while(|e| e.seq <= read_seq)
                    .filter(|e| e.kind == EventKind::Msg && !e.recalled)
                    .count()
            });
            conv.unread = (conv.unread - now_read as i64).max(0);
        }
        true
    }

    /// Applies one delivery of a realtime session; answers whether a catch-up is due.
    ///
    /// An event is taken when it is exactly the next seq of a known conversation; one already
    /// had is dropped; anything else (a conversation the state does not know, a seq beyond the
    /// next, a conversation marked stale) waits for the catch-up. Pushed events move the cursor
    /// and the log, not the unread count, which the next catch-up brings.
    pub fn apply_delivery(&mut self, delivery: &Delivery) -> bool {
        match delivery {
            Delivery::Event(event) => {
                let Some(conv) = self.convs.get_mut(&event.conv_id) else {
                    return true;
                };
                if event.seq <= conv.cursor && !conv.stale {
                    return false;
                }
                if conv.accept_push(event.seq) {
                    self.store(&event.conv_id, vec![event.clone()]);
                    return false;
                }
                conv.stale = true;
                true
            }
            Delivery::Read { conv_id, read_seq } => {
                self.apply_read(conv_id, *read_seq);
                false
            }
            Delivery::Truncated { conv_id } | Delivery::EpochChanged { conv_id, .. } => {
                if let Some(conv) = self.convs.get_mut(conv_id) {
                    conv.stale = true;
                }
                true
            }
            Delivery::Reconnected => true,
            Delivery::Kicked | Delivery::Revoked | Delivery::Unreachable => false,
        }
    }

    /// Tracks every known conversation in a realtime session from the state's cursor, so the
    /// session's deliveries continue the state's logs.
    pub fn track_in(&self, realtime: &RealtimeHandle) {
        for (conv_id, conv) in &self.convs {
            realtime.track(conv_id, conv.epoch, conv.cursor);
        }
    }

    /// Takes a feed entry: a conversation new to the state starts just before `min_seq`; a
    /// known one takes the read state, and the head and `min_seq` of its epoch.
    fn apply_entry(&mut self, entry: &Conversation) {
        match self.convs.get_mut(&entry.conv_id) {
            None => {
                self.convs
                    .insert(entry.conv_id.clone(), ConvSync::from_entry(entry));
            }
            Some(conv) => {
                conv.take_read_state(entry.read_seq, entry.unread, entry.head);
                if entry.epoch == conv.epoch {
                    conv.head = conv.head.max(entry.head);
                    conv.min_seq = conv.min_seq.max(entry.min_seq);
                }
            }
        }
    }

    /// Hands events of a known conversation over. With kept logs, a message recalled after
    /// the server counted it unread is taken off the count.
    fn store(&mut self, conv_id: &str, events: Vec<Event>) {
        let recalled = self.events.append(conv_id, events);
        if let Some(conv) = self.convs.get_mut(conv_id) {
            for (recall_seq, target) in recalled {
                let counted = recall_seq > conv.unread_through
                    && target > conv.read_seq
                    && target <= conv.unread_through;
                if counted {
                    conv.unread = (conv.unread - 1).max(0);
                }
            }
        }
    }

    /// Applies what fetching one conversation produced, in the order it happened.
    fn apply_fetch(&mut self, fetch: &mut ConvFetch, report: &mut CatchUpReport) {
        let conv_id = fetch.conv_id.clone();
        if fetch.inaccessible {
            self.convs.remove(&conv_id);
        } else {
            self.convs.insert(conv_id.clone(), fetch.conv.clone());
        }
        for op in fetch.ops.drain(..) {
            match op {
                Op::Append(events) => self.store(&conv_id, events),
                Op::Restart(why) => self.events.restart(&conv_id, why),
            }
        }
        report.pages += fetch.pages;
        report.events += fetch.events;
        if fetch.truncated {
            report.truncated.push(conv_id.clone());
        }
        if fetch.epoch_resets > 0 {
            report.epoch_resets.push(conv_id.clone());
        }
        if fetch.unfinished {
            report.unfinished.push(conv_id.clone());
        }
        if fetch.inaccessible {
            report.inaccessible.push(conv_id);
        }
    }
}

/// What one catch-up did. Lists of conversations are in `conv_id` order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CatchUpReport {
    /// Entries of the feed answer. The feed may list a conversation where nothing visible to
    /// the user changed; [`CatchUpReport::changed`] leaves those out.
    pub listed: usize,
    /// Conversations whose state changed: new to the state, new events, read position, unread
    /// count, head, `min_seq` or epoch.
    pub changed: Vec<String>,
    /// Events handed to the app (after dropping any the state had).
    pub events: usize,
    /// Events-after answers received.
    pub pages: usize,
    /// Conversations whose log restarted because events below `min_seq` were purged.
    pub truncated: Vec<String>,
    /// Conversations restarted at a new epoch after `EPOCH_CHANGED`.
    pub epoch_resets: Vec<String>,
    /// Conversations left before their head because the page bound was reached; they stay
    /// stale and the next catch-up continues them.
    pub unfinished: Vec<String>,
    /// Conversations the server no longer lets the user read; they were forgotten.
    pub inaccessible: Vec<String>,
}

/// Bounds of a catch-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CatchUpOptions {
    /// Events per events-after call; clamped to 1..=[`EVENTS_PAGE_LEN_MAX`].
    pub page_len: u32,
    /// Conversations fetched at the same time (at least 1).
    pub concurrency: usize,
}

impl Default for CatchUpOptions {
    fn default() -> Self {
        Self {
            page_len: EVENTS_PAGE_LEN_MAX,
            concurrency: CATCH_UP_CONCURRENCY_DEFAULT,
        }
    }
}

/// Pages a conversation may take from `cursor` to `head`, with slack for events committed
/// meanwhile.
pub(crate) fn pages_budget(cursor: i64, head: i64, page_len: u32) -> u64 {
    let behind = u64::try_from(head.saturating_sub(cursor)).unwrap_or(0);
    behind.div_ceil(u64::from(page_len.max(1))) + PAGES_SLACK
}

enum Op {
    Append(Vec<Event>),
    Restart(Restart),
}

/// One conversation to fetch: a copy of its state and the epoch the feed gave it.
struct ConvJob {
    conv_id: String,
    start: ConvSync,
    feed_epoch: Option<i64>,
}

/// What fetching one conversation produced; applied to the state as a whole.
struct ConvFetch {
    conv_id: String,
    conv: ConvSync,
    ops: Vec<Op>,
    pages: usize,
    events: usize,
    truncated: bool,
    epoch_resets: u32,
    unfinished: bool,
    inaccessible: bool,
    error: Option<ClientError>,
}

impl ConvFetch {
    fn restarted(&self) -> bool {
        self.ops.iter().any(|op| matches!(op, Op::Restart(_)))
    }
}

impl Client {
    /// Brings `state` level with the server with the default [`CatchUpOptions`]: one feed
    /// call, then events-after for each changed conversation. See the
    /// [module documentation](crate::sync).
    pub async fn catch_up(&self, state: &mut SyncState) -> Result<CatchUpReport, ClientError> {
        self.catch_up_with(state, CatchUpOptions::default()).await
    }

    /// [`Client::catch_up`] with explicit bounds. On an error every conversation keeps the
    /// progress it made and the token stays, so calling again resumes.
    pub async fn catch_up_with(
        &self,
        state: &mut SyncState,
        options: CatchUpOptions,
    ) -> Result<CatchUpReport, ClientError> {
        let page_len = options.page_len.clamp(1, EVENTS_PAGE_LEN_MAX);
        let feed = self.list_conversations(state.token.as_deref()).await?;
        let mut report = CatchUpReport {
            listed: feed.conversations.len(),
            ..CatchUpReport::default()
        };

        let mut before: BTreeMap<String, Option<ConvSync>> = BTreeMap::new();
        let mut jobs = Vec::new();
        for entry in &feed.conversations {
            before.insert(
                entry.conv_id.clone(),
                state.convs.get(&entry.conv_id).cloned(),
            );
            state.apply_entry(entry);
            if let Some(conv) = state.convs.get(&entry.conv_id) {
                if conv.needs_fetch(entry) {
                    jobs.push(ConvJob {
                        conv_id: entry.conv_id.clone(),
                        start: conv.clone(),
                        feed_epoch: Some(entry.epoch),
                    });
                }
            }
        }
        for (conv_id, conv) in &state.convs {
            if conv.stale && !before.contains_key(conv_id) {
                before.insert(conv_id.clone(), Some(conv.clone()));
                jobs.push(ConvJob {
                    conv_id: conv_id.clone(),
                    start: conv.clone(),
                    feed_epoch: None,
                });
            }
        }

        let mut restarted = BTreeSet::new();
        let mut first_error = None;
        let mut fetches = stream::iter(jobs)
            .map(|job| fetch_conversation(self, job, page_len))
            .buffer_unordered(options.concurrency.max(1));
        while let Some(mut fetch) = fetches.next().await {
            if fetch.restarted() {
                restarted.insert(fetch.conv_id.clone());
            }
            state.apply_fetch(&mut fetch, &mut report);
            if let Some(e) = fetch.error.take() {
                first_error.get_or_insert(e);
            }
        }
        drop(fetches);

        for (conv_id, prior) in &before {
            let now = state.convs.get(conv_id);
            let changed = restarted.contains(conv_id)
                || match (prior, now) {
                    (Some(p), Some(n)) => p.observable() != n.observable(),
                    (None, None) => false,
                    _ => true,
                };
            if changed {
                report.changed.push(conv_id.clone());
            }
        }
        report.truncated.sort();
        report.epoch_resets.sort();
        report.unfinished.sort();
        report.inaccessible.sort();

        if let Some(e) = first_error {
            return Err(e);
        }
        state.token = Some(feed.sync_token);
        Ok(report)
    }
}

/// Fetches one conversation from its cursor to its head, page by page, within the page bound.
/// Never fails as a whole: an error ends the fetch and is returned with the progress made.
async fn fetch_conversation(client: &Client, job: ConvJob, page_len: u32) -> ConvFetch {
    let mut out = ConvFetch {
        conv_id: job.conv_id,
        conv: job.start,
        ops: Vec::new(),
        pages: 0,
        events: 0,
        truncated: false,
        epoch_resets: 0,
        unfinished: false,
        inaccessible: false,
        error: None,
    };
    let conv_id = out.conv_id.clone();
    // Pages used and allowed since the fetch (re)started; the bound is set by the first answer.
    let mut used = 0u64;
    let mut budget: Option<u64> = None;
    loop {
        let from = out.conv.cursor;
        let answer = client
            .events_after(&conv_id, from, Some(page_len), Some(out.conv.epoch))
            .await;
        let page = match answer {
            Ok(page) => page,
            Err(e) if e.code() == Some(code::EPOCH_CHANGED) => {
                if out.epoch_resets >= EPOCH_RESETS_MAX {
                    out.unfinished = true;
                    out.conv.stale = true;
                    return out;
                }
                match new_epoch(client, &conv_id, out.conv.epoch, job.feed_epoch).await {
                    Ok(Some(epoch)) => {
                        out.conv.reset_epoch(epoch);
                        out.ops.push(Op::Restart(Restart::EpochChanged));
                        out.epoch_resets += 1;
                        used = 0;
                        budget = None;
                        continue;
                    }
                    // The feed and the conversation disagree with events-after: the server's
                    // answer is taken as it is, without looping on it.
                    Ok(None) => return failed(out, e),
                    Err(e) => return failed(out, e),
                }
            }
            Err(e) if e.code() == Some(code::NOT_MEMBER) => {
                out.inaccessible = true;
                out.ops.push(Op::Restart(Restart::Inaccessible));
                return out;
            }
            Err(e) => return failed(out, e),
        };
        out.pages += 1;
        used += 1;
        let allowed = *budget.get_or_insert_with(|| pages_budget(from, page.head, page_len));
        let step = out.conv.apply_page(page);
        if step.restart {
            out.truncated = true;
            out.ops.push(Op::Restart(Restart::Truncated));
        }
        if !step.events.is_empty() {
            out.events += step.events.len();
            out.ops.push(Op::Append(step.events));
        }
        match step.progress {
            Progress::Done => {
                out.conv.stale = false;
                return out;
            }
            Progress::More if used < allowed => {}
            Progress::More | Progress::Stuck => {
                out.unfinished = true;
                out.conv.stale = true;
                return out;
            }
        }
    }
}

fn failed(mut out: ConvFetch, e: ClientError) -> ConvFetch {
    out.conv.stale = true;
    out.error = Some(e);
    out
}

/// The epoch to restart at after `EPOCH_CHANGED`: the feed's when it differs from the
/// refused one, else the conversation's current one; `None` when that is the refused one too.
async fn new_epoch(
    client: &Client,
    conv_id: &str,
    refused: i64,
    feed_epoch: Option<i64>,
) -> Result<Option<i64>, ClientError> {
    if let Some(epoch) = feed_epoch.filter(|&e| e != refused) {
        return Ok(Some(epoch));
    }
    let conv = client.get_conversation(conv_id).await?;
    Ok((conv.epoch != refused).then_some(conv.epoch))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{ConvKind, DeliveryMode};

    fn event(seq: i64) -> Event {
        Event {
            conv_id: "c".into(),
            seq,
            kind: EventKind::Msg,
            created_at: "2024-01-01T00:00:00Z".into(),
            message_id: Some(format!("m{seq}")),
            sender_user: Some("ben".into()),
            sender_device: Some("d1".into()),
            client_msg_id: Some(format!("c{seq}")),
            body: Some("hi".into()),
            recalled: false,
            subject_user: None,
            target_seq: None,
        }
    }

    fn page(seqs: &[i64], through_seq: i64, head: i64) -> EventsPage {
        EventsPage {
            events: seqs.iter().copied().map(event).collect(),
            head,
            min_seq: 1,
            epoch: 1,
            through_seq,
            truncated: false,
            next_before: None,
        }
    }

    fn entry(conv_id: &str, head: i64, read_seq: i64, unread: i64) -> Conversation {
        Conversation {
            conv_id: conv_id.into(),
            kind: ConvKind::Group,
            title: None,
            delivery_mode: DeliveryMode::Push,
            head,
            min_seq: 1,
            epoch: 1,
            read_seq,
            unread,
            members: None,
            recall_window_ms: 120_000,
            retention_ms: None,
            last_event: None,
        }
    }

    fn conv_at(cursor: i64) -> ConvSync {
        ConvSync {
            epoch: 1,
            cursor,
            read_seq: 0,
            unread: 0,
            unread_through: 0,
            head: cursor,
            min_seq: 1,
            last_seq: cursor,
            stale: false,
        }
    }

    fn seqs(events: &[Event]) -> Vec<i64> {
        events.iter().map(|e| e.seq).collect()
    }

    /// Applies a page as a catch-up does, to a state keeping logs.
    fn apply(state: &mut SyncState, conv_id: &str, page: EventsPage) -> Progress {
        let conv = state.convs.get_mut(conv_id).unwrap();
        let step = conv.apply_page(page);
        if step.restart {
            state.events.restart(conv_id, Restart::Truncated);
        }
        state.store(conv_id, step.events);
        step.progress
    }

    #[test]
    fn the_cursor_advances_to_through_seq_not_to_the_last_event() {
        let mut c = conv_at(2);
        // 6..=9 lie outside the user's periods: examined by the server, not sent.
        let step = c.apply_page(page(&[3, 4, 5], 9, 9));
        assert_eq!(seqs(&step.events), [3, 4, 5]);
        assert_eq!((c.cursor, c.last_seq), (9, 5));
        assert_eq!(step.progress, Progress::Done);
        assert!(c.accept_push(10), "no phantom gap at 6..=9");
    }

    #[test]
    fn a_full_page_asks_for_more_and_a_page_without_progress_stops() {
        let mut c = conv_at(0);
        let step = c.apply_page(page(&[1, 2], 2, 9));
        assert_eq!((step.progress, c.cursor), (Progress::More, 2));
        let step = c.apply_page(page(&[], 2, 9));
        assert_eq!(step.progress, Progress::Stuck);
    }

    #[test]
    fn seqs_already_had_are_dropped_and_order_is_kept() {
        let mut c = conv_at(4);
        let step = c.apply_page(page(&[3, 4, 5, 5, 7, 6, 8], 8, 8));
        assert_eq!(seqs(&step.events), [5, 7, 8]);
        // The same page again brings nothing.
        let step = c.apply_page(page(&[5, 7, 8], 8, 8));
        assert!(step.events.is_empty());
        assert_eq!(c.cursor, 8);
    }

    #[test]
    fn a_truncated_page_restarts_the_log_from_the_answer() {
        let mut state = SyncState::new();
        state.apply_entry(&entry("c", 3, 0, 0));
        apply(&mut state, "c", page(&[1, 2, 3], 3, 3));
        let mut p = page(&[50, 51], 51, 51);
        p.truncated = true;
        p.min_seq = 50;
        assert_eq!(apply(&mut state, "c", p), Progress::Done);
        assert_eq!(seqs(state.events("c").unwrap()), [50, 51]);
        let c = state.conversation("c").unwrap();
        assert_eq!((c.cursor, c.last_seq, c.min_seq), (51, 51, 50));
    }

    #[test]
    fn an_epoch_reset_restarts_from_nothing() {
        let mut c = conv_at(7);
        c.reset_epoch(2);
        assert_eq!((c.epoch, c.cursor, c.last_seq), (2, 0, 0));
        let mut p = page(&[1, 2], 2, 2);
        p.epoch = 2;
        let step = c.apply_page(p);
        assert_eq!(
            seqs(&step.events),
            [1, 2],
            "seqs of the old epoch do not hide these"
        );
    }

    #[test]
    fn a_new_conversation_starts_before_min_seq() {
        let mut state = SyncState::new();
        let mut e = entry("c", 40, 12, 5);
        e.min_seq = 30;
        state.apply_entry(&e);
        let c = state.conversation("c").unwrap();
        assert_eq!((c.cursor, c.read_seq, c.unread, c.head), (29, 12, 5, 40));
        assert!(c.needs_fetch(&e));
        assert_eq!(state.events("c"), Some(&[][..]));
        assert_eq!(state.conversations().collect::<Vec<_>>(), ["c"]);
    }

    #[test]
    fn read_state_comes_from_the_feed_and_never_moves_back() {
        let mut state = SyncState::new();
        state.apply_entry(&entry("c", 10, 4, 6));
        state.apply_entry(&entry("c", 10, 8, 2));
        assert_eq!((state.read_seq("c"), state.unread("c")), (Some(8), Some(2)));
        // An older answer does not move it back.
        state.apply_entry(&entry("c", 10, 6, 4));
        assert_eq!(state.read_seq("c"), Some(8));
        assert!(!state.apply_read("c", 7));
        assert!(state.apply_read("c", 10));
        assert_eq!(
            (state.read_seq("c"), state.unread("c")),
            (Some(10), Some(0))
        );
        assert!(!state.apply_read("unknown", 3));
        // A feed entry read before that read arrived does not bring the badge back.
        state.apply_entry(&entry("c", 10, 8, 2));
        assert_eq!(
            (state.read_seq("c"), state.unread("c")),
            (Some(10), Some(0))
        );
    }

    #[test]
    fn a_partial_read_takes_off_the_messages_it_covers() {
        let mut state = SyncState::new();
        state.apply_entry(&entry("c", 6, 0, 0));
        apply(&mut state, "c", page(&[1, 2, 3, 4, 5, 6], 6, 6));
        // The server counted 6 unread; then seq 2 is recalled by the event at 7.
        state.apply_entry(&entry("c", 6, 0, 6));
        let mut recall = event(7);
        recall.kind = EventKind::Recall;
        recall.target_seq = Some(2);
        state.store("c", vec![recall]);
        let log = state.events("c").unwrap();
        assert!(log[1].recalled && log[1].body.is_none());
        assert_eq!(state.unread("c"), Some(5));
        assert!(state.apply_read("c", 4));
        assert_eq!(state.unread("c"), Some(2), "5 and 6 are left");
    }

    #[test]
    fn pushed_events_extend_the_log_only_when_next() {
        let mut state = SyncState::new();
        state.apply_entry(&entry("c", 2, 0, 0));
        apply(&mut state, "c", page(&[1, 2], 2, 2));
        assert!(!state.apply_delivery(&Delivery::Event(event(3))));
        assert!(
            !state.apply_delivery(&Delivery::Event(event(3))),
            "a repeat"
        );
        assert_eq!(state.cursor("c"), Some((1, 3)));
        assert!(state.apply_delivery(&Delivery::Event(event(5))), "a gap");
        assert!(state.conversation("c").unwrap().stale);
        assert!(
            state.apply_delivery(&Delivery::Event(event(4))),
            "a stale conversation waits for the catch-up"
        );
        assert_eq!(seqs(state.events("c").unwrap()), [1, 2, 3]);
        let mut other = event(1);
        other.conv_id = "new".into();
        assert!(state.apply_delivery(&Delivery::Event(other)));
        assert!(state.apply_delivery(&Delivery::Reconnected));
        assert!(!state.apply_delivery(&Delivery::Read {
            conv_id: "c".into(),
            read_seq: 3
        }));
        assert_eq!(state.read_seq("c"), Some(3));
    }

    #[test]
    fn sinks_receive_events_and_restarts_in_order() {
        #[derive(Default)]
        struct Recorder(std::sync::Arc<std::sync::Mutex<Vec<String>>>);
        impl EventSink for Recorder {
            fn append(&mut self, conv_id: &str, events: Vec<Event>) {
                let mut log = self.0.lock().unwrap();
                log.push(format!("{conv_id}:{:?}", seqs(&events)));
            }
            fn restart(&mut self, conv_id: &str, why: Restart) {
                self.0.lock().unwrap().push(format!("{conv_id}:{why:?}"));
            }
        }
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut state = SyncState::with_sink(Recorder(seen.clone()));
        state.apply_entry(&entry("c", 2, 0, 0));
        apply(&mut state, "c", page(&[1, 2], 2, 2));
        let mut p = page(&[9], 9, 9);
        p.truncated = true;
        apply(&mut state, "c", p);
        assert_eq!(state.events("c"), None, "the app keeps the events");
        assert_eq!(*seen.lock().unwrap(), ["c:[1, 2]", "c:Truncated", "c:[9]"]);
        let saved = state.save();
        let restored = SyncState::restore(saved.clone(), Recorder::default());
        assert_eq!(restored.save(), saved);
        let json = serde_json::to_string(&saved).unwrap();
        assert_eq!(serde_json::from_str::<SavedSync>(&json).unwrap(), saved);
    }

    #[test]
    fn the_page_bound_follows_the_distance_to_the_head() {
        assert_eq!(pages_budget(0, 0, 500), PAGES_SLACK);
        assert_eq!(pages_budget(0, 500, 500), 1 + PAGES_SLACK);
        assert_eq!(pages_budget(0, 1201, 500), 3 + PAGES_SLACK);
        assert_eq!(pages_budget(90, 10, 500), PAGES_SLACK);
    }
}
