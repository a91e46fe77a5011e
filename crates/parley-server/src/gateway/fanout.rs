//! Fanout on one gateway: committed events from the bus to every online device of every member,
//! and the bus's notices to the connections they concern (`notices.rs`), in the order the bus
//! delivers them.
//!
//! Events of a conversation are pushed in seq order. The bus may deliver announcements out of
//! order (each send announces after its own commit) or coalesced (one hint for many events):
//! when an announcement is not the next seq, the missing range is read from the log, which
//! holds it already, since seq N commits only after N - 1 did. A lost announcement blocks
//! nothing: the client repairs by sync.
//!
//! Member sets come from a per-conversation cache that the log's own join and leave events
//! update in seq order; the store is asked once per conversation, not per pushed event. The
//! fanout takes every announcement already queued at once, and reads the member sets of the
//! conversations among them that it does not know yet concurrently, before pushing any of
//! them in order: one conversation's snapshot read no longer holds back the pushes of every
//! other (a cold cache after a start, many conversations seen for the first time).
//!
//! A `pull` conversation (SPEC §8) gets no event frames: each recipient's connection gets a
//! coalesced `hint` with the head instead, and fetches the events itself. The cache holds the
//! delivery mode too, and switches it on the join that brings a group to its pull threshold,
//! by the same rule as the store (`MemberSnapshot::mode_after_join`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::extract::ws::Message;
use futures::StreamExt;
use parley_bus::{Announcement, Committed, Subscription};
use parley_domain::{ConvId, DeliveryMode, Event, EventKind, UserId};
use parley_store::{MemberSnapshot, Store};
use prometheus_client::metrics::counter::Counter;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio_util::sync::CancellationToken;

use super::hints::Hints;
use super::hub::{ConnHandle, Hub};
use super::notices;
use super::window::EventWindow;

/// Most events read from the log to repair one out-of-order or coalesced announcement; a
/// larger gap is left to the clients' sync.
const REPAIR_EVENTS_MAX: u32 = 500;
/// Most conversations whose member sets are cached; past it the cache starts over.
const MEMBER_CACHE_CONVS_MAX: usize = 100_000;
/// Most announcements taken from the bus at once: their new conversations' member sets are
/// read together before any of them is pushed, so this bounds what one slow read delays.
const FANOUT_BATCH_LEN_MAX: usize = 256;
/// Most member snapshots read at once; the store's pool serves the sends too.
const SNAPSHOT_READS_IN_FLIGHT_MAX: usize = 8;

type Next = Result<Announcement, RecvError>;

struct ConvState {
    /// The last seq pushed for this conversation; `None` until the first push.
    last_pushed: Option<i64>,
    /// Current members with the first seq of their open period.
    members: HashMap<UserId, i64>,
    /// The seq up to which `members` reflects the log.
    members_through: i64,
    /// Delivery mode as of `members_through`.
    mode: DeliveryMode,
    /// Member count at which a push group switches to pull, while it still may.
    pull_threshold: Option<u32>,
}

pub struct Fanout {
    /// This gateway's id: a taken route names the gateway whose connection it replaced.
    gateway_id: String,
    store: Arc<dyn Store>,
    hub: Arc<Hub>,
    hints: Arc<Hints>,
    window: Arc<EventWindow>,
    /// Event frames queued (`parley_pushes_total`).
    pushes: Counter,
    convs: HashMap<ConvId, ConvState>,
    /// Set while a check of every connection's token runs.
    rechecking: Arc<AtomicBool>,
}

/// The event frame of SPEC §7, serialised once and shared by every recipient.
pub fn event_frame(event: &Event) -> Option<Message> {
    super::frames::event(event)
}

impl Fanout {
    pub fn new(
        gateway_id: String,
        store: Arc<dyn Store>,
        hub: Arc<Hub>,
        hints: Arc<Hints>,
        window: Arc<EventWindow>,
        pushes: Counter,
    ) -> Self {
        Self {
            gateway_id,
            store,
            hub,
            hints,
            window,
            pushes,
            convs: HashMap::new(),
            rechecking: Arc::default(),
        }
    }

    pub async fn run(mut self, mut sub: Subscription, shutdown: CancellationToken) {
        loop {
            let mut next = Some(tokio::select! {
                _ = shutdown.cancelled() => return,
                next = sub.recv() => next,
            });
            while let Some(this) = next.take() {
                match this {
                    Ok(Announcement::Committed(a)) => {
                        let (batch, after) = take_queued(a, &mut sub);
                        self.read_new_snapshots(&batch).await;
                        for a in batch {
                            self.handle(a).await;
                        }
                        next = after;
                    }
                    Ok(Announcement::Notice(notice)) => {
                        notices::apply(&self.hub, self.store.as_ref(), &self.gateway_id, &notice)
                            .await
                    }
                    Ok(Announcement::Reconnected) => {
                        // Revocations and kicks announced while the transport was down were
                        // lost with the heads: every connection's token and route is checked
                        // as after a lag.
                        self.recheck_tokens();
                        self.repair_all().await
                    }
                    Err(RecvError::Lagged(missed)) => {
                        // Announcements were lost; positions are unknown, so start over.
                        // Clients repair the missed pushes and read positions by sync;
                        // revocations that may have been lost are found by checking every
                        // connection's token.
                        tracing::warn!(missed, "fanout lagged behind the bus");
                        self.convs.clear();
                        self.window.clear();
                        self.recheck_tokens();
                    }
                    Err(RecvError::Closed) => return,
                }
            }
        }
    }

    /// Reads, concurrently, the member snapshots of the conversations of `batch` that the cache
    /// does not hold. Each read starts after its conversation's announcements arrived, as the
    /// read `handle` makes for a single one. A failed read is left to `handle`, which tries again.
    async fn read_new_snapshots(&mut self, batch: &[Committed]) {
        if self.hub.online_user_count() == 0 {
            return;
        }
        let mut new: Vec<ConvId> = Vec::new();
        for a in batch {
            if !self.convs.contains_key(&a.conv_id) && !new.contains(&a.conv_id) {
                new.push(a.conv_id.clone());
            }
        }
        if new.len() < 2 {
            return;
        }
        let generation = self.window.generation();
        let snaps: Vec<_> = futures::stream::iter(new)
            .map(|conv_id| {
                let store = self.store.clone();
                async move {
                    let snap = store.current_members(&conv_id).await;
                    (conv_id, snap)
                }
            })
            .buffer_unordered(SNAPSHOT_READS_IN_FLIGHT_MAX)
            .collect()
            .await;
        for (conv_id, snap) in snaps {
            if let Ok(snap) = snap {
                self.cache(conv_id, snap, generation);
            }
        }
    }

    /// Caches a member snapshot read after `generation` was taken.
    fn cache(&mut self, conv_id: ConvId, snap: MemberSnapshot, generation: u64) {
        if self.convs.len() >= MEMBER_CACHE_CONVS_MAX {
            self.convs.clear();
            self.window.clear();
        }
        if snap.delivery_mode == DeliveryMode::Pull {
            self.window.track(&conv_id, &snap, generation);
        }
        let state = ConvState {
            last_pushed: None,
            members: snap.members.into_iter().collect(),
            members_through: snap.head,
            mode: snap.delivery_mode,
            pull_threshold: snap.pull_threshold,
        };
        self.convs.insert(conv_id, state);
    }

    /// Checks every connection's token in a task of its own, so pushes go on meanwhile; one
    /// sweep at a time, however often the fanout lags.
    fn recheck_tokens(&self) {
        if self.rechecking.swap(true, Ordering::AcqRel) {
            return;
        }
        let (hub, store, rechecking, gateway_id) = (
            self.hub.clone(),
            self.store.clone(),
            self.rechecking.clone(),
            self.gateway_id.clone(),
        );
        tokio::spawn(async move {
            notices::recheck_all(&hub, store.as_ref(), &gateway_id).await;
            rechecking.store(false, Ordering::Release);
        });
    }

    /// After the bus lost announcements of other gateways (its transport reconnected): every
    /// conversation pushed here is read from the log, from its last pushed seq up to its
    /// current head, as if a head-only announcement had come for each.
    async fn repair_all(&mut self) {
        let held: Vec<ConvId> = self
            .convs
            .iter()
            .filter(|(_, s)| s.last_pushed.is_some())
            .map(|(c, _)| c.clone())
            .collect();
        tracing::info!(
            conversations = held.len(),
            "repairing pushes from the log after a bus reconnect"
        );
        for conv_id in held {
            match self.store.current_members(&conv_id).await {
                Ok(snap) => {
                    self.handle(Committed {
                        conv_id,
                        head: snap.head,
                        event: None,
                    })
                    .await
                }
                Err(e) => {
                    tracing::warn!(%conv_id, error = %e, "head read for repair failed; clients repair by sync")
                }
            }
        }
    }

    async fn handle(&mut self, a: Committed) {
        self.window.seen(&a.conv_id, a.head);
        if self.hub.online_user_count() == 0 {
            // Nobody to push to; forget positions so no stale gap is repaired later.
            self.convs.clear();
            self.window.clear();
            return;
        }
        if self.convs.len() >= MEMBER_CACHE_CONVS_MAX && !self.convs.contains_key(&a.conv_id) {
            self.convs.clear();
            self.window.clear();
        }
        if !self.convs.contains_key(&a.conv_id) {
            let generation = self.window.generation();
            match self.store.current_members(&a.conv_id).await {
                Ok(snap) => self.cache(a.conv_id.clone(), snap, generation),
                Err(e) => {
                    tracing::warn!(conv_id = %a.conv_id, error = %e, "member snapshot failed; push skipped");
                    return;
                }
            }
        }
        let events = match self.events_to_push(&a).await {
            Ok(events) => events,
            Err(e) => {
                tracing::warn!(conv_id = %a.conv_id, error = %e, "log read for fanout failed; push skipped");
                return;
            }
        };
        let Some(state) = self.convs.get_mut(&a.conv_id) else {
            return;
        };
        for event in events {
            if state.last_pushed.is_some_and(|lp| event.seq <= lp) {
                continue;
            }
            apply_membership(state, &event);
            self.window.append(&event);
            match state.mode {
                DeliveryMode::Push => push(&self.hub, state, &event, &self.pushes),
                DeliveryMode::Pull => hint(&self.hub, &self.hints, state, &event),
            }
            state.last_pushed = Some(event.seq);
        }
    }

    async fn events_to_push(
        &self,
        a: &Committed,
    ) -> Result<Vec<Arc<Event>>, parley_store::StoreError> {
        let last_pushed = self.convs.get(&a.conv_id).and_then(|s| s.last_pushed);
        let from = match (last_pushed, &a.event) {
            (Some(lp), _) if a.head <= lp => return Ok(Vec::new()),
            (Some(lp), Some(e)) if e.seq == lp + 1 => return Ok(vec![e.clone()]),
            (None, Some(e)) => return Ok(vec![e.clone()]),
            (Some(lp), _) => lp.max(a.head - i64::from(REPAIR_EVENTS_MAX)),
            (None, None) => a.head - 1,
        };
        let events = self
            .store
            .log_range(&a.conv_id, from, a.head, REPAIR_EVENTS_MAX)
            .await?;
        Ok(events.into_iter().map(Arc::new).collect())
    }
}

/// `first` and every announcement queued behind it, up to the first that is not a commit (or
/// an error), which comes back to be handled after the batch.
fn take_queued(first: Committed, sub: &mut Subscription) -> (Vec<Committed>, Option<Next>) {
    let mut batch = vec![first];
    while batch.len() < FANOUT_BATCH_LEN_MAX {
        match sub.try_recv() {
            Ok(Announcement::Committed(a)) => batch.push(a),
            Ok(other) => return (batch, Some(Ok(other))),
            Err(TryRecvError::Empty) => break,
            Err(TryRecvError::Lagged(missed)) => {
                return (batch, Some(Err(RecvError::Lagged(missed))))
            }
            Err(TryRecvError::Closed) => return (batch, Some(Err(RecvError::Closed))),
        }
    }
    (batch, None)
}

/// Applies a join or leave that the cache has not seen yet.
fn apply_membership(state: &mut ConvState, event: &Event) {
    if event.seq <= state.members_through {
        return;
    }
    state.members_through = event.seq;
    let Some(subject) = &event.subject_user else {
        return;
    };
    match event.kind {
        EventKind::Join => {
            state.members.insert(subject.clone(), event.seq);
            let mode = MemberSnapshot::mode_after_join(
                state.mode,
                state.pull_threshold,
                state.members.len(),
            );
            if mode != state.mode {
                state.mode = mode;
                state.pull_threshold = None;
            }
        }
        EventKind::Leave => {
            state.members.remove(subject);
        }
        EventKind::Msg
        | EventKind::Recall
        | EventKind::Edit
        | EventKind::React
        | EventKind::Unreact
        | EventKind::MlsApplication
        | EventKind::MlsProposal
        | EventKind::MlsCommit
        | EventKind::MlsWelcome => {}
    }
}

/// Calls `f` for every online connection that may see `event`: every device of every member
/// whose open period covers it, and the leaver of a leave event (who sees their own leave).
fn for_each_recipient(
    hub: &Hub,
    state: &ConvState,
    event: &Event,
    mut f: impl FnMut(&UserId, &Arc<ConnHandle>),
) {
    let covers = |from_seq: &i64| *from_seq <= event.seq;
    // Walk the smaller of the two sets: online users or members.
    if hub.online_user_count() < state.members.len() {
        for user in &hub.online_users() {
            if state.members.get(user).is_some_and(covers) {
                hub.for_each_of(user, |c| f(user, c));
            }
        }
    } else {
        for (user, from_seq) in &state.members {
            if covers(from_seq) {
                hub.for_each_of(user, |c| f(user, c));
            }
        }
    }
    if event.kind == EventKind::Leave {
        if let Some(subject) = &event.subject_user {
            hub.for_each_of(subject, |c| f(subject, c));
        }
    }
}

/// Pushes one event, serialised once, to every recipient (push mode).
fn push(hub: &Hub, state: &ConvState, event: &Event, pushes: &Counter) {
    let Some(frame) = event_frame(event) else {
        return;
    };
    if event.kind == EventKind::MlsWelcome {
        // A Welcome's message goes to the devices it names; every other device gets the
        // event without it, so its seqs stay gapless (docs/E2EE.md).
        for_each_recipient(hub, state, event, |user, c| {
            let redacted = event.redacted_for(user.as_str(), c.device_id.as_str());
            let Some(frame) = redacted.map_or_else(|| Some(frame.clone()), |e| event_frame(&e))
            else {
                return;
            };
            pushes.inc();
            c.push(frame);
        });
        return;
    }
    for_each_recipient(hub, state, event, |_, c| {
        pushes.inc();
        c.push(frame.clone());
    });
}

/// Tells every recipient that the head moved to `event.seq` (pull mode), coalesced per
/// connection by `hints`.
fn hint(hub: &Hub, hints: &Hints, state: &ConvState, event: &Event) {
    for_each_recipient(hub, state, event, |_, c| {
        hints.hint(c, &event.conv_id, event.seq);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn join(seq: i64, who: &str) -> Event {
        Event {
            conv_id: ConvId::from_trusted("g".into()),
            seq,
            kind: EventKind::Join,
            created_at: chrono::Utc::now(),
            message_id: None,
            sender_user: None,
            sender_device: None,
            client_msg_id: None,
            body: None,
            recalled: false,
            subject_user: Some(UserId::from_trusted(who.into())),
            target_seq: None,
            rel: None,
            mls: None,
        }
    }

    fn state(members: &[&str], mode: DeliveryMode, pull_threshold: Option<u32>) -> ConvState {
        ConvState {
            last_pushed: None,
            members: members
                .iter()
                .enumerate()
                .map(|(i, m)| (UserId::from_trusted((*m).into()), i as i64 + 1))
                .collect(),
            members_through: members.len() as i64,
            mode,
            pull_threshold,
        }
    }

    #[test]
    fn the_join_that_reaches_the_threshold_switches_the_cache_to_pull() {
        let mut s = state(&["a", "b"], DeliveryMode::Push, Some(3));
        apply_membership(&mut s, &join(3, "c"));
        assert_eq!((s.mode, s.pull_threshold), (DeliveryMode::Pull, None));
        // A join the snapshot already covered changes nothing.
        let mut s = state(&["a", "b"], DeliveryMode::Push, Some(3));
        apply_membership(&mut s, &join(2, "c"));
        assert_eq!(s.mode, DeliveryMode::Push);
        // Below the threshold, or with a mode fixed at creation, nothing switches.
        let mut s = state(&["a"], DeliveryMode::Push, Some(3));
        apply_membership(&mut s, &join(2, "b"));
        assert_eq!(s.mode, DeliveryMode::Push);
        let mut s = state(&["a", "b"], DeliveryMode::Push, None);
        apply_membership(&mut s, &join(3, "c"));
        assert_eq!(s.mode, DeliveryMode::Push);
    }
}
