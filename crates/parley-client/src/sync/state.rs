//! [`SyncState`]: every conversation's [`ConvSync`], the feed token, and where events go; what
//! a feed entry and a pushed delivery do to it. Read positions are in `read.rs`.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

#[cfg(test)]
use crate::cursor::Progress;
use crate::cursor::Verdict;
use crate::sync::conv::ConvSync;
use crate::sync::sink::{EventSink, Events, MemoryLogs};
#[cfg(test)]
use crate::types::EventsPage;
use crate::types::{Conversation, Event};
use crate::ws::{Delivery, RealtimeHandle};

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
    pub(super) token: Option<String>,
    pub(super) convs: BTreeMap<String, ConvSync>,
    pub(super) events: Events,
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

    /// Applies one delivery of a realtime session; answers whether a catch-up is due.
    ///
    /// An event is taken when it is exactly the next seq of a known conversation; one already
    /// had is dropped; anything else (a conversation the state does not know, a seq beyond the
    /// next, a conversation marked stale) waits for the catch-up. Pushed events move the cursor
    /// and the log, not the unread count, which the next catch-up brings.
    pub fn apply_delivery(&mut self, delivery: &Delivery) -> bool {
        match delivery {
            Delivery::Event(incoming) => {
                let event = &incoming.event;
                let Some(conv) = self.convs.get_mut(&event.conv_id) else {
                    return true;
                };
                if !conv.stale && conv.verdict(event.seq) == Verdict::Seen {
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
            Delivery::Typing { .. }
            | Delivery::Presence { .. }
            | Delivery::Disconnected { .. }
            | Delivery::Kicked
            | Delivery::Revoked
            | Delivery::Unreachable => false,
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
    pub(super) fn apply_entry(&mut self, entry: &Conversation) {
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
    pub(super) fn store(&mut self, conv_id: &str, events: Vec<Event>) {
        let recalled = self.events.append(conv_id, events);
        self.uncount_recalled(conv_id, &recalled);
    }
}

#[cfg(test)]
impl SyncState {
    /// Applies a page of `conv_id` the way a catch-up does, for the tests of what follows.
    pub(super) fn apply_page(&mut self, conv_id: &str, page: EventsPage) -> Progress {
        let conv = self.convs.get_mut(conv_id).expect("a known conversation");
        let step = conv.apply_page(page);
        if step.restart {
            self.events
                .restart(conv_id, crate::sync::Restart::Truncated);
        }
        self.store(conv_id, step.events);
        step.progress
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{conversation, event, page, pushed, seqs};

    #[test]
    fn a_truncated_page_restarts_the_log_from_the_answer() {
        let mut state = SyncState::new();
        state.apply_entry(&conversation("c", 3, 0, 0));
        state.apply_page("c", page(&[1, 2, 3], 3, 3));
        let mut p = page(&[50, 51], 51, 51);
        p.truncated = true;
        p.min_seq = 50;
        assert_eq!(state.apply_page("c", p), Progress::Done);
        assert_eq!(seqs(state.events("c").unwrap()), [50, 51]);
        let c = state.conversation("c").unwrap();
        assert_eq!((c.cursor, c.last_seq, c.min_seq), (51, 51, 50));
    }

    #[test]
    fn a_new_conversation_starts_before_min_seq() {
        let mut state = SyncState::new();
        let mut e = conversation("c", 40, 12, 5);
        e.min_seq = 30;
        state.apply_entry(&e);
        let c = state.conversation("c").unwrap();
        assert_eq!((c.cursor, c.read_seq, c.unread, c.head), (29, 12, 5, 40));
        assert!(c.needs_fetch(&e));
        assert_eq!(state.events("c"), Some(&[][..]));
        assert_eq!(state.conversations().collect::<Vec<_>>(), ["c"]);
    }

    #[test]
    fn pushed_events_extend_the_log_only_when_next() {
        let mut state = SyncState::new();
        state.apply_entry(&conversation("c", 2, 0, 0));
        state.apply_page("c", page(&[1, 2], 2, 2));
        assert!(!state.apply_delivery(&pushed(event(3))));
        assert!(!state.apply_delivery(&pushed(event(3))), "a repeat");
        assert_eq!(state.cursor("c"), Some((1, 3)));
        assert!(state.apply_delivery(&pushed(event(5))), "a gap");
        assert!(state.conversation("c").unwrap().stale);
        assert!(
            state.apply_delivery(&pushed(event(4))),
            "a stale conversation waits for the catch-up"
        );
        assert_eq!(seqs(state.events("c").unwrap()), [1, 2, 3]);
        let mut other = event(1);
        other.conv_id = "new".into();
        assert!(state.apply_delivery(&pushed(other)));
        assert!(state.apply_delivery(&Delivery::Reconnected));
        assert!(!state.apply_delivery(&Delivery::Read {
            conv_id: "c".into(),
            read_seq: 3
        }));
        assert_eq!(state.read_seq("c"), Some(3));
    }

    #[test]
    fn a_saved_state_reads_back_from_its_stored_form() {
        let text = r#"{"token":"t9","conversations":{"c":{"epoch":2,"cursor":40,"read_seq":30,
            "unread":4,"unread_through":40,"head":41,"min_seq":5,"last_seq":38,"stale":true}}}"#;
        struct Discard;
        impl EventSink for Discard {
            fn append(&mut self, _: &str, _: Vec<Event>) {}
            fn restart(&mut self, _: &str, _: crate::sync::Restart) {}
        }
        let state = SyncState::restore(serde_json::from_str(text).unwrap(), Discard);
        assert_eq!(state.token(), Some("t9"));
        assert_eq!(state.cursor("c"), Some((2, 40)));
        let c = state.conversation("c").unwrap();
        assert_eq!(
            (
                c.read_seq,
                c.unread,
                c.unread_through,
                c.head,
                c.min_seq,
                c.last_seq
            ),
            (30, 4, 40, 41, 5, 38)
        );
        assert!(c.stale);
        let again = serde_json::to_value(state.save()).unwrap();
        let text: serde_json::Value = serde_json::from_str(text).unwrap();
        assert_eq!(again, text, "written back in the same form");
    }
}
