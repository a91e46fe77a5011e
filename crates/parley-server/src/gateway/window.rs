//! The event window: the newest events of each pull conversation in the gateway's memory, so
//! that the fetch every online member makes after a hint is answered without a database round
//! trip in the common case.
//!
//! The log stays the authority. The window only ever holds a contiguous run of committed
//! events, appended by the fanout in seq order (the fanout repairs out-of-order announcements
//! from the log before it hands them on); an append that is not the next seq drops the
//! conversation's window rather than let it serve a hole. A fetch `after = N` is served from
//! memory only when all of these hold, and from the store otherwise:
//! - the window covers `N + 1` up to at least the newest seq this gateway knew to be committed
//!   when the fetch arrived: every send, membership change or recall acked through this gateway
//!   notes its seq here before its ack goes out (`note`), so an answer from the window reflects
//!   every write acked before the request (SPEC §5, read your writes). A fetch that finds the
//!   window short of such a seq waits for the fanout to append it (`fetch`, at most
//!   `WINDOW_CATCH_UP_WAIT_MS`): under a steady stream some send is always between its note and
//!   its append, and without the wait nearly every fetch would go to the store;
//! - the reader is a current member whose open period began at or before `N + 1`, which makes
//!   every event from `N + 1` to the head visible to them (P11); anyone else (a former member,
//!   a member whose period starts inside the range) is answered by the store;
//! - the conversation's `min_seq` and `epoch` are known from a store answer read since the last
//!   retention purge, and the cursor is of that epoch;
//! - no retention purge is running.
//!
//! The window is on only where this gateway sees every commit before its ack, the single-node
//! bus (`local`). With a bus between gateways, a write acked by another gateway reaches this one
//! only through the bus, after its ack, so the window stays off there.
//!
//! Member sets come from the fanout's own snapshot (`track`) and follow the window's join and
//! leave events in seq order, like the fanout's member cache. A recall event updates the
//! recalled message in the window, so the body served is the log's.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use parley_domain::relations::{ReactionCount, ThreadSummary};
use parley_domain::{ConvId, Event, EventKind, EventsPage, UserId};
use parley_store::MemberSnapshot;
use prometheus_client::metrics::counter::Counter;
use tokio::sync::Notify;

/// Most events kept per conversation; the oldest go first. A fetch after a hint needs the events
/// since the reader's last fetch, a handful in a steady stream.
pub const WINDOW_EVENTS_PER_CONV_MAX: usize = 256;
/// Most conversations with a window; past it the one appended to longest ago is dropped.
pub const WINDOW_CONVS_MAX: usize = 1_024;
/// Most bytes of events held over all windows (estimated: the event's size plus its texts).
pub const WINDOW_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Most conversations with a committed seq noted before the fanout saw its announcement; past
/// it every window starts over.
pub const NOTED_CONVS_MAX: usize = 100_000;
/// Longest a fetch waits for the fanout to append the commits noted before it arrived. Sends
/// into a busy conversation are noted before their ack and appended a moment later, so a fetch
/// that arrives between the two would otherwise always go to the store; past this wait (a
/// fanout busy repairing a gap) it goes to the store anyway.
pub const WINDOW_CATCH_UP_WAIT_MS: u64 = 10;

/// The window's bounds; `Default` is the named constants above.
#[derive(Debug, Clone, Copy)]
pub struct WindowLimits {
    pub events_per_conv_max: usize,
    pub convs_max: usize,
    pub bytes_max: usize,
}

impl Default for WindowLimits {
    fn default() -> Self {
        Self {
            events_per_conv_max: WINDOW_EVENTS_PER_CONV_MAX,
            convs_max: WINDOW_CONVS_MAX,
            bytes_max: WINDOW_BYTES_MAX,
        }
    }
}

/// A conversation's `min_seq` and `epoch`, as a store answer gave them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LogMeta {
    min_seq: i64,
    epoch: i64,
}

struct ConvWindow {
    /// A contiguous run of committed events, oldest first.
    events: VecDeque<Arc<Event>>,
    /// The newest seq known committed: from the snapshot, appends and `note`.
    known_head: i64,
    /// Current members with the first seq of their open period.
    members: HashMap<UserId, i64>,
    /// The seq up to which `members` reflects the log.
    members_through: i64,
    meta: Option<LogMeta>,
    bytes: usize,
    /// When it was last appended to, on the window's own clock (eviction order).
    touched: u64,
    /// The reactions of the messages in the window, by message seq: each key with its
    /// reactors and the seq of each one's `react`, as the store's `reactions` rows hold them,
    /// so a page folds in each reader's counts and `me` as the store would. A reaction always
    /// follows its message, so the window has seen every reaction to every message it holds.
    /// Counted in `bytes`; an entry leaves with its message.
    reactions: BTreeMap<i64, Reactors>,
}

/// The reactions of one message: each key with `(reactor, seq of their react)`, in the order
/// the keys were first used.
type Reactors = Vec<(String, Vec<(UserId, i64)>)>;

/// What one reactor of one key costs the window beside the key and id texts.
const REACTOR_OVERHEAD_BYTES: usize = 48;

fn reactor_bytes(key: &str, user: &UserId) -> usize {
    key.len() + user.as_str().len() + REACTOR_OVERHEAD_BYTES
}

fn reactors_bytes(reactors: &Reactors) -> usize {
    reactors
        .iter()
        .flat_map(|(key, users)| users.iter().map(move |(u, _)| reactor_bytes(key, u)))
        .sum()
}

impl ConvWindow {
    /// Drops the oldest event and the reactions of its message; answers the bytes freed.
    fn pop_oldest(&mut self) -> Option<usize> {
        let old = self.events.pop_front()?;
        let mut freed = event_bytes(&old);
        if let Some(r) = self.reactions.remove(&old.seq) {
            freed += reactors_bytes(&r);
        }
        Some(freed)
    }

    /// Applies a `react` (`added`) or `unreact` of `user` at `seq` to the message at `target`
    /// if the window holds it unrecalled; answers the bytes grown and freed.
    fn react(
        &mut self,
        target: i64,
        key: &str,
        user: &UserId,
        seq: i64,
        added: bool,
    ) -> (usize, usize) {
        let held = self
            .events
            .front()
            .and_then(|f| usize::try_from(target - f.seq).ok())
            .and_then(|i| self.events.get(i))
            .is_some_and(|m| m.kind == EventKind::Msg && !m.recalled);
        if !held {
            return (0, 0);
        }
        let reactors = self.reactions.entry(target).or_default();
        let slot = match reactors.iter().position(|(k, _)| k == key) {
            Some(i) => i,
            None if added => {
                reactors.push((key.to_owned(), Vec::new()));
                reactors.len() - 1
            }
            None => return (0, 0),
        };
        let users = &mut reactors[slot].1;
        let at = users.iter().position(|(u, _)| u == user);
        let change = match (added, at) {
            (true, None) => {
                users.push((user.clone(), seq));
                (reactor_bytes(key, user), 0)
            }
            (false, Some(i)) => {
                users.remove(i);
                (0, reactor_bytes(key, user))
            }
            _ => (0, 0),
        };
        if reactors[slot].1.is_empty() {
            reactors.remove(slot);
        }
        if reactors.is_empty() {
            self.reactions.remove(&target);
        }
        change
    }

    /// The reaction counts of the message at `seq` as `reader` reads them: keys ordered by
    /// their earliest current reaction, as the store orders them.
    fn counts_for(&self, seq: i64, reader: &UserId) -> Vec<ReactionCount> {
        let Some(reactors) = self.reactions.get(&seq) else {
            return Vec::new();
        };
        let mut counts: Vec<(i64, ReactionCount)> = reactors
            .iter()
            .map(|(key, users)| {
                let first = users.iter().map(|(_, s)| *s).min().unwrap_or(i64::MAX);
                let count = ReactionCount {
                    key: key.clone(),
                    count: i64::try_from(users.len()).unwrap_or(i64::MAX),
                    me: users.iter().any(|(u, _)| u == reader),
                };
                (first, count)
            })
            .collect();
        counts.sort_by_key(|(first, _)| *first);
        counts.into_iter().map(|(_, c)| c).collect()
    }
}

impl ConvWindow {
    fn newest(&self) -> Option<i64> {
        self.events.back().map(|e| e.seq)
    }
}

#[derive(Default)]
struct Inner {
    convs: HashMap<ConvId, ConvWindow>,
    /// Seqs noted committed for conversations without a window, until the fanout sees their
    /// announcement: a window started from a snapshot read before such a commit must not serve
    /// without it.
    noted: HashMap<ConvId, i64>,
    /// Bumped whenever windows and notes are dropped wholesale: a member snapshot read across a
    /// bump may miss a note that was dropped, so it starts no window.
    generation: u64,
    /// Bumped when a purge starts or ends: a store answer read across a bump may tell an old
    /// `min_seq`.
    purge_generation: u64,
    purging: u32,
    bytes: usize,
    clock: u64,
}

impl Inner {
    fn clear(&mut self) {
        self.convs.clear();
        self.noted.clear();
        self.bytes = 0;
        self.generation += 1;
    }

    fn drop_conv(&mut self, conv_id: &ConvId) {
        if let Some(w) = self.convs.remove(conv_id) {
            self.bytes -= w.bytes;
        }
    }

    /// Drops the window appended to longest ago, other than `keep`'s.
    fn evict_one(&mut self, keep: &ConvId) -> bool {
        let oldest = self
            .convs
            .iter()
            .filter(|(c, _)| *c != keep)
            .min_by_key(|(_, w)| w.touched)
            .map(|(c, _)| c.clone());
        match oldest {
            Some(c) => {
                self.drop_conv(&c);
                true
            }
            None => false,
        }
    }
}

/// What became of fetches asked of the window (`parley_window_fetches_total`).
#[derive(Clone, Default)]
pub struct WindowCounters {
    pub hits: Counter,
    pub misses: Counter,
}

pub struct EventWindow {
    limits: WindowLimits,
    enabled: AtomicBool,
    inner: Mutex<Inner>,
    counters: WindowCounters,
    /// Woken after every append or drop, for fetches waiting on the fanout (`fetch`).
    changed: Notify,
}

/// Why the window could not answer a fetch.
enum Miss {
    /// Everything holds except that the window does not yet reach the commits noted before
    /// the fetch: the fanout is about to append them.
    Behind,
    /// The store must answer.
    Store,
}

/// The estimated memory of one event: its struct and its texts.
fn event_bytes(e: &Event) -> usize {
    let text = |s: Option<&str>| s.map_or(0, str::len);
    std::mem::size_of::<Event>()
        + e.conv_id.as_str().len()
        + text(e.body.as_deref())
        + text(e.sender_user.as_ref().map(UserId::as_str))
        + text(e.sender_device.as_deref())
        + text(e.client_msg_id.as_deref())
        + text(e.subject_user.as_ref().map(UserId::as_str))
        + e.rel.as_deref().map_or(0, |r| {
            r.attachments
                .iter()
                .map(|a| {
                    std::mem::size_of::<parley_domain::Attachment>()
                        + a.media_id.as_str().len()
                        + a.sha256.len()
                        + a.content_type.len()
                        + text(a.filename.as_deref())
                })
                .sum::<usize>()
        })
}

impl EventWindow {
    /// A window, off until `set_enabled`, counting into `counters`.
    pub fn new(counters: WindowCounters) -> Self {
        Self::with_limits(WindowLimits::default(), counters)
    }

    pub fn with_limits(limits: WindowLimits, counters: WindowCounters) -> Self {
        Self {
            limits,
            enabled: AtomicBool::new(false),
            inner: Mutex::new(Inner::default()),
            counters,
            changed: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Every statement leaves the maps consistent; a panic elsewhere must not stop reads.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Acquire)
    }

    /// Turns the window on (only where every commit is noted here before its ack) or off.
    pub fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Ordering::Release);
        if !on {
            self.lock().clear();
        }
    }

    /// The generation to hand to `track` for a member snapshot read that starts now.
    pub fn generation(&self) -> u64 {
        self.lock().generation
    }

    /// The generation to hand to `learn` for a store read that starts now.
    pub fn purge_generation(&self) -> u64 {
        self.lock().purge_generation
    }

    /// `seq` of `conv_id` committed and is about to be acked: no window answer may leave it
    /// out from now on.
    pub fn note(&self, conv_id: &ConvId, seq: i64) {
        if !self.enabled() {
            return;
        }
        let mut inner = self.lock();
        if let Some(w) = inner.convs.get_mut(conv_id) {
            w.known_head = w.known_head.max(seq);
            return;
        }
        if inner.noted.len() >= NOTED_CONVS_MAX && !inner.noted.contains_key(conv_id) {
            inner.clear();
        }
        let noted = inner.noted.entry(conv_id.clone()).or_insert(seq);
        *noted = (*noted).max(seq);
    }

    /// The fanout took the announcement of `conv_id` up to `head`: a snapshot it reads from now
    /// on includes the noted commits up to it.
    pub fn seen(&self, conv_id: &ConvId, head: i64) {
        if !self.enabled() {
            return;
        }
        let mut inner = self.lock();
        if inner.noted.get(conv_id).is_some_and(|n| *n <= head) {
            inner.noted.remove(conv_id);
        }
    }

    /// Starts (or restarts) the window of a pull conversation from the fanout's member
    /// snapshot, read after `generation` was taken.
    pub fn track(&self, conv_id: &ConvId, snap: &MemberSnapshot, generation: u64) {
        if !self.enabled() {
            return;
        }
        let mut inner = self.lock();
        if inner.generation != generation {
            return;
        }
        inner.drop_conv(conv_id);
        if inner.convs.len() >= self.limits.convs_max {
            inner.evict_one(conv_id);
        }
        let noted = inner.noted.remove(conv_id).unwrap_or(snap.head);
        inner.clock += 1;
        let touched = inner.clock;
        inner.convs.insert(
            conv_id.clone(),
            ConvWindow {
                events: VecDeque::new(),
                known_head: snap.head.max(noted),
                members: snap.members.iter().cloned().collect(),
                members_through: snap.head,
                meta: None,
                bytes: 0,
                touched,
                reactions: BTreeMap::new(),
            },
        );
    }

    /// Appends the next committed event of a tracked conversation, in seq order.
    pub fn append(&self, event: &Arc<Event>) {
        if !self.enabled() {
            return;
        }
        self.append_locked(event);
        self.changed.notify_waiters();
    }

    fn append_locked(&self, event: &Arc<Event>) {
        let mut inner = self.lock();
        let conv_id = &event.conv_id;
        let Some(w) = inner.convs.get_mut(conv_id) else {
            return;
        };
        let contiguous = match w.newest() {
            Some(newest) if event.seq <= newest => return,
            Some(newest) => event.seq == newest + 1,
            // The first event may be older than the snapshot, never beyond its next seq.
            None => event.seq <= w.members_through + 1,
        };
        if !contiguous {
            // A hole: the window must never serve it, and the member set may have missed a join
            // or leave. The log answers this conversation until the fanout tracks it again.
            inner.drop_conv(conv_id);
            return;
        }
        if event.seq > w.members_through {
            w.members_through = event.seq;
            if let Some(subject) = &event.subject_user {
                match event.kind {
                    EventKind::Join => {
                        w.members.insert(subject.clone(), event.seq);
                    }
                    EventKind::Leave => {
                        w.members.remove(subject);
                    }
                    _ => {}
                }
            }
        }
        let mut added = event_bytes(event);
        let mut removed = 0;
        let mut account = |(grown, freed): (usize, usize)| {
            added += grown;
            removed += freed;
        };
        match (event.kind, event.target_seq) {
            (EventKind::Recall, Some(target)) => account(recall_in_window(w, target)),
            (EventKind::Edit, Some(target)) => {
                account(fold_in_window(w, target, |m| {
                    if !m.recalled {
                        m.body.clone_from(&event.body);
                        m.relations_mut().edited_at = Some(event.created_at);
                    }
                }));
            }
            (EventKind::React | EventKind::Unreact, Some(target)) => {
                if let (Some(key), Some(user)) = (&event.relations().key, &event.sender_user) {
                    let added = event.kind == EventKind::React;
                    account(w.react(target, key, user, event.seq, added));
                }
            }
            _ => {}
        }
        if let (EventKind::Msg, Some(root)) = (event.kind, event.relations().thread_root) {
            let reply = event.seq;
            account(fold_in_window(w, root, |m| {
                let thread = m.relations_mut().thread.get_or_insert(ThreadSummary {
                    reply_count: 0,
                    latest_seq: reply,
                });
                thread.reply_count += 1;
                thread.latest_seq = reply;
            }));
        }
        w.known_head = w.known_head.max(event.seq);
        w.events.push_back(event.clone());
        while w.events.len() > self.limits.events_per_conv_max {
            if let Some(freed) = w.pop_oldest() {
                removed += freed;
            }
        }
        w.bytes = w.bytes + added - removed;
        inner.clock += 1;
        let clock = inner.clock;
        if let Some(w) = inner.convs.get_mut(conv_id) {
            w.touched = clock;
        }
        inner.bytes = inner.bytes + added - removed;
        // Bounded: each pass drops a whole other window, or this window's oldest event.
        while inner.bytes > self.limits.bytes_max {
            if inner.evict_one(conv_id) {
                continue;
            }
            let Some(w) = inner.convs.get_mut(conv_id) else {
                break;
            };
            let Some(b) = w.pop_oldest() else {
                break;
            };
            w.bytes -= b;
            inner.bytes -= b;
        }
    }

    /// Learns `min_seq` and `epoch` of a tracked conversation from a store answer read after
    /// `purge_generation` was taken.
    pub fn learn(&self, conv_id: &ConvId, page: &EventsPage, purge_generation: u64) {
        if !self.enabled() {
            return;
        }
        let mut inner = self.lock();
        if inner.purge_generation != purge_generation || inner.purging > 0 {
            return;
        }
        if let Some(w) = inner.convs.get_mut(conv_id) {
            w.meta = Some(LogMeta {
                min_seq: page.min_seq,
                epoch: page.epoch,
            });
        }
    }

    /// A retention purge starts: `min_seq` may move, so no window answers until it ended and a
    /// store answer told the new one.
    pub fn purge_started(&self) {
        let mut inner = self.lock();
        inner.purging += 1;
        inner.purge_generation += 1;
        for w in inner.convs.values_mut() {
            w.meta = None;
        }
    }

    /// The purge begun by `purge_started` ended, whatever it did.
    pub fn purge_ended(&self) {
        let mut inner = self.lock();
        inner.purging = inner.purging.saturating_sub(1);
        inner.purge_generation += 1;
        for w in inner.convs.values_mut() {
            w.meta = None;
        }
    }

    /// Drops every window and note (the fanout forgot its positions).
    pub fn clear(&self) {
        if !self.enabled() {
            return;
        }
        self.lock().clear();
        self.changed.notify_waiters();
    }

    /// The events-after page for `reader`, as the store would answer it, when the window can
    /// tell it now, without waiting; `None` sends the request to the store. The server asks
    /// `fetch`; the unit tests check the window's rules through this one.
    #[cfg(test)]
    pub fn serve(
        &self,
        conv_id: &ConvId,
        reader: &UserId,
        cursor: (i64, Option<i64>),
        limit: u32,
    ) -> Option<EventsPage> {
        let page = match self.known_head(conv_id) {
            Some(through) => self.page(conv_id, reader, cursor, limit, through).ok(),
            None => None,
        };
        self.count(page)
    }

    /// The events-after page for `reader`, as the store would answer it, when the window can
    /// tell it; `None` sends the request to the store. A fetch that finds the window short of
    /// commits noted before it arrived waits for the fanout to append them, at most
    /// `WINDOW_CATCH_UP_WAIT_MS`.
    pub async fn fetch(
        &self,
        conv_id: &ConvId,
        reader: &UserId,
        cursor: (i64, Option<i64>),
        limit: u32,
    ) -> Option<EventsPage> {
        // Every write acked before this fetch arrived is noted by now; later ones it may omit.
        let Some(through) = self.known_head(conv_id) else {
            return self.count(None);
        };
        let deadline = tokio::time::Instant::now() + Duration::from_millis(WINDOW_CATCH_UP_WAIT_MS);
        loop {
            // Registered before the check, so an append between the check and the wait wakes it.
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            match self.page(conv_id, reader, cursor, limit, through) {
                Ok(page) => return self.count(Some(page)),
                Err(Miss::Behind) => {
                    if tokio::time::timeout_at(deadline, changed).await.is_err() {
                        return self.count(None);
                    }
                }
                Err(Miss::Store) => return self.count(None),
            }
        }
    }

    fn count(&self, page: Option<EventsPage>) -> Option<EventsPage> {
        match &page {
            Some(_) => self.counters.hits.inc(),
            None => self.counters.misses.inc(),
        };
        page
    }

    /// The newest seq of `conv_id` known committed, when it has a window and the window is on.
    fn known_head(&self, conv_id: &ConvId) -> Option<i64> {
        if !self.enabled() {
            return None;
        }
        self.lock().convs.get(conv_id).map(|w| w.known_head)
    }

    /// The page, when the window holds every event from the cursor to at least `through`.
    fn page(
        &self,
        conv_id: &ConvId,
        reader: &UserId,
        (after, epoch): (i64, Option<i64>),
        limit: u32,
        through: i64,
    ) -> Result<EventsPage, Miss> {
        let inner = self.lock();
        if inner.purging > 0 {
            return Err(Miss::Store);
        }
        let w = inner.convs.get(conv_id).ok_or(Miss::Store)?;
        let meta = w.meta.ok_or(Miss::Store)?;
        let first = w.events.front().ok_or(Miss::Store)?.seq;
        let head = w.newest().ok_or(Miss::Store)?;
        let start = after.checked_add(1).ok_or(Miss::Store)?;
        let visible = w.members.get(reader).is_some_and(|from| *from <= start);
        if first > start
            || !visible
            || start < meta.min_seq
            || epoch.is_some_and(|e| e != meta.epoch)
        {
            return Err(Miss::Store);
        }
        if through > head {
            // Commits acked before the fetch are not appended yet: the fanout is about to.
            return Err(Miss::Behind);
        }
        if after >= head {
            return Err(Miss::Store);
        }
        let limit = limit.max(1) as usize;
        let skip = usize::try_from(start - first).map_err(|_| Miss::Store)?;
        let events: Vec<Event> = w
            .events
            .iter()
            .skip(skip)
            .take(limit)
            .map(|e| {
                let mut e = Event::clone(e);
                let counts = w.counts_for(e.seq, reader);
                if !counts.is_empty() {
                    e.relations_mut().reactions = counts;
                }
                e
            })
            .collect();
        let through_seq = match events.last() {
            Some(last) if events.len() == limit => last.seq,
            _ => head,
        };
        Ok(EventsPage {
            events,
            head,
            min_seq: meta.min_seq,
            epoch: meta.epoch,
            through_seq,
            truncated: false,
            next_before: None,
        })
    }
}

/// Changes the message at `target`, if the window holds it, as the log's transaction changed
/// it (an edit's body, a thread's summary); answers the bytes it grew and freed.
fn fold_in_window(
    w: &mut ConvWindow,
    target: i64,
    change: impl FnOnce(&mut Event),
) -> (usize, usize) {
    let Some(first) = w.events.front().map(|e| e.seq) else {
        return (0, 0);
    };
    let Some(slot) = usize::try_from(target - first)
        .ok()
        .and_then(|i| w.events.get_mut(i))
    else {
        return (0, 0);
    };
    if slot.kind != EventKind::Msg {
        return (0, 0);
    }
    let before = event_bytes(slot);
    let mut changed = Event::clone(slot);
    change(&mut changed);
    let after = event_bytes(&changed);
    *slot = Arc::new(changed);
    (after.saturating_sub(before), before.saturating_sub(after))
}

/// Marks the message at `target` recalled, as the log now holds it (no body), with the bodies
/// of its edits and its place in its thread; answers the bytes it grew and freed.
fn recall_in_window(w: &mut ConvWindow, target: i64) -> (usize, usize) {
    let mut freed = 0;
    let thread_root = w
        .events
        .iter()
        .find(|e| e.seq == target && e.kind == EventKind::Msg && !e.recalled)
        .and_then(|e| e.relations().thread_root);
    if let Some(root) = thread_root {
        // The root keeps its summary with a count of 0, as the store's row does.
        freed += fold_in_window(w, root, |m| {
            if let Some(t) = m.relations_mut().thread.as_mut() {
                t.reply_count = (t.reply_count - 1).max(0);
            }
        })
        .1;
    }
    for slot in w.events.iter_mut() {
        if slot.kind == EventKind::Edit && slot.target_seq == Some(target) && slot.body.is_some() {
            let mut erased = Event::clone(slot);
            freed += erased.body.take().map_or(0, |b| b.len());
            *slot = Arc::new(erased);
        }
    }
    if let Some(r) = w.reactions.remove(&target) {
        freed += reactors_bytes(&r);
    }
    (0, freed + erase_recalled(w, target))
}

fn erase_recalled(w: &mut ConvWindow, target: i64) -> usize {
    let Some(first) = w.events.front().map(|e| e.seq) else {
        return 0;
    };
    let Some(slot) = usize::try_from(target - first)
        .ok()
        .and_then(|i| w.events.get_mut(i))
    else {
        return 0;
    };
    if slot.kind != EventKind::Msg || slot.recalled {
        return 0;
    }
    let before = event_bytes(slot);
    let mut recalled = Event::clone(slot);
    recalled.body = None;
    recalled.recalled = true;
    if let Some(rel) = recalled.rel.as_deref_mut() {
        rel.edited_at = None;
        rel.attachments.clear();
    }
    recalled.tidy_relations();
    let after = event_bytes(&recalled);
    *slot = Arc::new(recalled);
    before - after
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::DateTime;
    use parley_domain::DeliveryMode;

    fn conv() -> ConvId {
        ConvId::from_trusted("g".into())
    }

    fn user(u: &str) -> UserId {
        UserId::from_trusted(u.into())
    }

    fn event(seq: i64, kind: EventKind, subject: Option<&str>) -> Arc<Event> {
        Arc::new(Event {
            conv_id: conv(),
            seq,
            kind,
            created_at: chrono::Utc::now(),
            message_id: None,
            sender_user: Some(user("a")),
            sender_device: None,
            client_msg_id: None,
            body: (kind == EventKind::Msg).then(|| format!("m{seq}")),
            recalled: false,
            subject_user: subject.map(user),
            target_seq: None,
            rel: None,
            mls: None,
        })
    }

    fn msg(seq: i64) -> Arc<Event> {
        event(seq, EventKind::Msg, None)
    }

    /// Members `a` (since 1) and `b` (since 2) at head `head`.
    fn snapshot(head: i64) -> MemberSnapshot {
        MemberSnapshot {
            head,
            members: vec![(user("a"), 1), (user("b"), 2)],
            delivery_mode: DeliveryMode::Pull,
            pull_threshold: None,
        }
    }

    fn page_of(min_seq: i64) -> EventsPage {
        EventsPage {
            events: Vec::new(),
            head: 0,
            min_seq,
            epoch: 0,
            through_seq: 0,
            truncated: false,
            next_before: None,
        }
    }

    /// A window tracking `g` from a snapshot at `head`, holding `head + 1 ..= last`, its
    /// `min_seq` learnt as 1.
    fn window_with(limits: WindowLimits, head: i64, last: i64) -> EventWindow {
        let w = EventWindow::with_limits(limits, WindowCounters::default());
        w.set_enabled(true);
        w.track(&conv(), &snapshot(head), w.generation());
        for seq in head + 1..=last {
            w.append(&msg(seq));
        }
        w.learn(&conv(), &page_of(1), w.purge_generation());
        w
    }

    fn seqs(page: &EventsPage) -> Vec<i64> {
        page.events.iter().map(|e| e.seq).collect()
    }

    #[test]
    fn serves_the_events_after_a_cursor_up_to_the_head() {
        let w = window_with(WindowLimits::default(), 2, 10);
        let page = w
            .serve(&conv(), &user("a"), (6, Some(0)), 50)
            .expect("a hit");
        assert_eq!(seqs(&page), vec![7, 8, 9, 10]);
        assert_eq!((page.head, page.through_seq, page.min_seq), (10, 10, 1));
        assert!(!page.truncated);
        // A full page ends at its last event, like the store's.
        let page = w.serve(&conv(), &user("a"), (2, None), 3).expect("a hit");
        assert_eq!((seqs(&page), page.through_seq), (vec![3, 4, 5], 5));
        // Below the window, at or past its head, or of another epoch: the store answers.
        assert!(w.serve(&conv(), &user("a"), (1, None), 50).is_none());
        assert!(w.serve(&conv(), &user("a"), (10, None), 50).is_none());
        assert!(w.serve(&conv(), &user("a"), (6, Some(1)), 50).is_none());
        assert_eq!(w.counters.hits.get(), 2);
        assert_eq!(w.counters.misses.get(), 3);
    }

    #[test]
    fn nothing_is_served_before_the_store_told_min_seq() {
        let w = EventWindow::new(WindowCounters::default());
        w.set_enabled(true);
        w.track(&conv(), &snapshot(2), w.generation());
        w.append(&msg(3));
        w.append(&msg(4));
        assert!(w.serve(&conv(), &user("a"), (2, None), 50).is_none());
        w.learn(&conv(), &page_of(1), w.purge_generation());
        assert!(w.serve(&conv(), &user("a"), (2, None), 50).is_some());
    }

    #[test]
    fn a_gap_drops_the_window_instead_of_serving_a_hole() {
        let w = window_with(WindowLimits::default(), 2, 5);
        w.append(&msg(7));
        assert!(w.serve(&conv(), &user("a"), (4, None), 50).is_none());
        // Nothing is appended to a dropped window until the fanout tracks it again.
        w.append(&msg(8));
        assert!(w.serve(&conv(), &user("a"), (7, None), 50).is_none());
        // A first event beyond the snapshot's next seq is a gap too.
        let w = EventWindow::new(WindowCounters::default());
        w.set_enabled(true);
        w.track(&conv(), &snapshot(2), w.generation());
        w.append(&msg(4));
        w.learn(&conv(), &page_of(1), w.purge_generation());
        assert!(w.serve(&conv(), &user("a"), (3, None), 50).is_none());
        // A repeated event changes nothing.
        let w = window_with(WindowLimits::default(), 2, 5);
        w.append(&msg(4));
        let page = w.serve(&conv(), &user("a"), (2, None), 50).expect("a hit");
        assert_eq!(seqs(&page), vec![3, 4, 5]);
    }

    #[test]
    fn a_commit_noted_before_its_append_holds_the_window_back() {
        let w = window_with(WindowLimits::default(), 2, 5);
        w.note(&conv(), 6);
        assert!(
            w.serve(&conv(), &user("a"), (3, None), 50).is_none(),
            "an acked seq 6 must be in the answer"
        );
        w.append(&msg(6));
        let page = w.serve(&conv(), &user("a"), (3, None), 50).expect("a hit");
        assert_eq!(seqs(&page), vec![4, 5, 6]);
    }

    #[tokio::test]
    async fn a_fetch_waits_for_the_append_of_a_commit_noted_before_it() {
        let w = Arc::new(window_with(WindowLimits::default(), 2, 5));
        w.note(&conv(), 6);
        let appender = {
            let w = w.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(2)).await;
                w.append(&msg(6));
            })
        };
        let page = w
            .fetch(&conv(), &user("a"), (3, None), 50)
            .await
            .expect("served once seq 6 is appended");
        assert_eq!(seqs(&page), vec![4, 5, 6]);
        appender.await.expect("appender");
    }

    #[tokio::test(start_paused = true)]
    async fn a_fetch_goes_to_the_store_when_the_append_does_not_come() {
        let w = window_with(WindowLimits::default(), 2, 5);
        w.note(&conv(), 6);
        let started = tokio::time::Instant::now();
        assert!(w.fetch(&conv(), &user("a"), (3, None), 50).await.is_none());
        assert!(started.elapsed() >= Duration::from_millis(WINDOW_CATCH_UP_WAIT_MS));
        // A commit noted after the fetch arrived does not hold it back.
        let w = window_with(WindowLimits::default(), 2, 5);
        let page = w
            .fetch(&conv(), &user("a"), (3, None), 50)
            .await
            .expect("a hit");
        assert_eq!(seqs(&page), vec![4, 5]);
        // A reader the window cannot answer does not wait.
        w.note(&conv(), 6);
        let started = tokio::time::Instant::now();
        assert!(w.fetch(&conv(), &user("x"), (3, None), 50).await.is_none());
        assert_eq!(started.elapsed(), Duration::ZERO);
    }

    #[test]
    fn a_commit_noted_before_the_window_started_holds_it_back() {
        let w = EventWindow::new(WindowCounters::default());
        w.set_enabled(true);
        // Seq 4 commits and is noted while the fanout reads a snapshot that misses it.
        let generation = w.generation();
        w.note(&conv(), 4);
        w.track(&conv(), &snapshot(3), generation);
        w.append(&msg(3));
        w.learn(&conv(), &page_of(1), w.purge_generation());
        assert!(w.serve(&conv(), &user("a"), (2, None), 50).is_none());
        w.append(&msg(4));
        assert!(w.serve(&conv(), &user("a"), (2, None), 50).is_some());
        // Once the fanout saw the announcement, the note is gone and a snapshot covers it.
        let w = EventWindow::new(WindowCounters::default());
        w.set_enabled(true);
        w.note(&conv(), 4);
        w.seen(&conv(), 4);
        w.track(&conv(), &snapshot(4), w.generation());
        w.append(&msg(4));
        w.learn(&conv(), &page_of(1), w.purge_generation());
        assert!(w.serve(&conv(), &user("a"), (3, None), 50).is_some());
        // Notes dropped wholesale while a snapshot was read: that snapshot starts no window.
        let w = EventWindow::new(WindowCounters::default());
        w.set_enabled(true);
        let generation = w.generation();
        w.note(&conv(), 4);
        w.clear();
        w.track(&conv(), &snapshot(3), generation);
        w.append(&msg(3));
        w.learn(&conv(), &page_of(1), w.purge_generation());
        assert!(w.serve(&conv(), &user("a"), (2, None), 50).is_none());
    }

    #[test]
    fn only_members_whose_period_covers_the_range_are_served() {
        let w = window_with(WindowLimits::default(), 2, 4);
        w.append(&event(5, EventKind::Join, Some("c")));
        w.append(&msg(6));
        w.append(&event(7, EventKind::Leave, Some("b")));
        w.append(&msg(8));
        // `c` joined at 5: from 4 on everything is visible; from earlier the store answers.
        let page = w.serve(&conv(), &user("c"), (4, None), 50).expect("a hit");
        assert_eq!(seqs(&page), vec![5, 6, 7, 8]);
        assert!(w.serve(&conv(), &user("c"), (3, None), 50).is_none());
        // `b` left at 7, a stranger never joined: the store answers both.
        assert!(w.serve(&conv(), &user("b"), (5, None), 50).is_none());
        assert!(w.serve(&conv(), &user("x"), (5, None), 50).is_none());
        assert!(w.serve(&conv(), &user("a"), (2, None), 50).is_some());
    }

    #[test]
    fn a_recall_takes_the_body_out_of_the_window() {
        let w = window_with(WindowLimits::default(), 2, 5);
        let mut recall = Event::clone(&event(6, EventKind::Recall, None));
        recall.target_seq = Some(4);
        w.append(&Arc::new(recall));
        let page = w.serve(&conv(), &user("a"), (2, None), 50).expect("a hit");
        let target = &page.events[1];
        assert_eq!(
            (target.seq, target.recalled, target.body.as_deref()),
            (4, true, None)
        );
        assert_eq!(page.events[0].body.as_deref(), Some("m3"));
        assert_eq!(page.events.last().map(|e| e.kind), Some(EventKind::Recall));
    }

    #[test]
    fn an_edit_and_thread_replies_fold_into_the_window_and_a_recall_takes_them_back() {
        let w = window_with(WindowLimits::default(), 2, 5);
        let mut edit = Event::clone(&event(6, EventKind::Edit, None));
        edit.target_seq = Some(4);
        edit.body = Some("m4 edited".into());
        w.append(&Arc::new(edit));
        let mut reply = Event::clone(&msg(7));
        reply.relations_mut().thread_root = Some(4);
        w.append(&Arc::new(reply));
        let page = w.serve(&conv(), &user("a"), (2, None), 50).expect("a hit");
        let root = &page.events[1];
        assert_eq!(root.body.as_deref(), Some("m4 edited"));
        assert!(root.relations().edited_at.is_some());
        let thread = root.relations().thread.clone().expect("a thread summary");
        assert_eq!((thread.reply_count, thread.latest_seq), (1, 7));
        let mut recall = Event::clone(&event(8, EventKind::Recall, None));
        recall.target_seq = Some(7);
        w.append(&Arc::new(recall));
        let mut recall = Event::clone(&event(9, EventKind::Recall, None));
        recall.target_seq = Some(4);
        w.append(&Arc::new(recall));
        let page = w.serve(&conv(), &user("a"), (2, None), 50).expect("a hit");
        let root = &page.events[1];
        assert!(root.recalled && root.body.is_none() && root.relations().edited_at.is_none());
        let edit = &page.events[3];
        assert_eq!((edit.kind, edit.body.as_deref()), (EventKind::Edit, None));
    }

    /// A react or unreact by `who` at `seq` on `target` with `key`.
    fn reaction(seq: i64, who: &str, target: i64, key: &str, added: bool) -> Arc<Event> {
        let at = DateTime::from_timestamp(1_700_000_000, 0).expect("time");
        Arc::new(Event::reaction(
            &conv(),
            seq,
            &user(who),
            target,
            key,
            added,
            at,
        ))
    }

    #[test]
    fn reactions_fold_into_a_page_per_reader_as_the_store_orders_them() {
        let w = window_with(WindowLimits::default(), 2, 5);
        w.append(&reaction(6, "a", 4, "👍", true));
        w.append(&reaction(7, "b", 4, "🎉", true));
        w.append(&reaction(8, "b", 4, "👍", true));
        w.append(&reaction(9, "a", 4, "👍", false));
        w.append(&reaction(10, "a", 4, "👍", true));
        let counts = |reader: &str| {
            let page = w
                .serve(&conv(), &user(reader), (2, None), 50)
                .expect("a hit");
            page.events[1]
                .relations()
                .reactions
                .iter()
                .map(|r| (r.key.clone(), r.count, r.me))
                .collect::<Vec<_>>()
        };
        // 👍's earliest current reaction is now b's at 8, after 🎉's at 7.
        assert_eq!(
            counts("a"),
            [("🎉".to_owned(), 1, false), ("👍".to_owned(), 2, true)]
        );
        assert_eq!(
            counts("b"),
            [("🎉".to_owned(), 1, true), ("👍".to_owned(), 2, true)]
        );
        let mut recall = Event::clone(&event(11, EventKind::Recall, None));
        recall.target_seq = Some(4);
        w.append(&Arc::new(recall));
        let page = w.serve(&conv(), &user("a"), (2, None), 50).expect("a hit");
        assert!(page.events[1].relations().reactions.is_empty());
    }

    #[test]
    fn a_purge_stops_answers_until_the_store_tells_min_seq_again() {
        let w = window_with(WindowLimits::default(), 2, 5);
        let before = w.purge_generation();
        w.purge_started();
        assert!(w.serve(&conv(), &user("a"), (2, None), 50).is_none());
        w.purge_ended();
        assert!(w.serve(&conv(), &user("a"), (2, None), 50).is_none());
        // A store answer read before the purge does not count.
        w.learn(&conv(), &page_of(1), before);
        assert!(w.serve(&conv(), &user("a"), (2, None), 50).is_none());
        // The new min_seq is 4: a cursor below it is the store's (a truncated answer).
        w.learn(&conv(), &page_of(4), w.purge_generation());
        assert!(w.serve(&conv(), &user("a"), (2, None), 50).is_none());
        assert!(w.serve(&conv(), &user("a"), (3, None), 50).is_some());
    }

    #[test]
    fn the_bounds_drop_the_oldest_events_and_windows() {
        let limits = WindowLimits {
            events_per_conv_max: 4,
            convs_max: 2,
            bytes_max: usize::MAX,
        };
        let w = window_with(limits, 2, 10);
        // Only 7..=10 are kept.
        assert!(w.serve(&conv(), &user("a"), (5, None), 50).is_none());
        let page = w.serve(&conv(), &user("a"), (6, None), 50).expect("a hit");
        assert_eq!(seqs(&page), vec![7, 8, 9, 10]);
        // Two more conversations: the one appended to longest ago (`g`) is dropped.
        for c in ["h", "i"] {
            w.track(
                &ConvId::from_trusted(c.into()),
                &snapshot(2),
                w.generation(),
            );
        }
        assert!(w.serve(&conv(), &user("a"), (6, None), 50).is_none());
        assert_eq!(w.lock().convs.len(), 2);

        // The byte bound: room for three events of `g` at most (bodies of up to 3 bytes).
        let one = event_bytes(&msg(3));
        let bytes_max = 3 * one + 8;
        let limits = WindowLimits {
            events_per_conv_max: 100,
            convs_max: 10,
            bytes_max,
        };
        let w = window_with(limits, 2, 10);
        assert!(w.lock().bytes <= bytes_max);
        assert!(w.serve(&conv(), &user("a"), (7, None), 50).is_some());
        assert!(w.serve(&conv(), &user("a"), (6, None), 50).is_none());
    }

    #[test]
    fn a_window_that_is_off_serves_nothing() {
        let w = window_with(WindowLimits::default(), 2, 5);
        w.set_enabled(false);
        assert!(w.serve(&conv(), &user("a"), (2, None), 50).is_none());
        assert!(w.lock().convs.is_empty());
    }
}
