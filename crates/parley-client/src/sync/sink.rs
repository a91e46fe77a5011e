//! Where caught-up events go: the app's own [`EventSink`], or in-memory logs kept by the state.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::types::{Event, EventKind};

/// Why the app's copy of a conversation's log became void.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Restart {
    /// Events between the device's cursor and `min_seq` were purged; the log restarts at
    /// `min_seq`.
    Truncated,
    /// The log was rebuilt; it restarts from seq 1 of the new epoch.
    EpochChanged,
    /// The server no longer lets the user read the conversation; it is forgotten.
    Inaccessible,
}

/// Where caught-up events go when the app keeps them itself ([`crate::SyncState::with_sink`]).
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
pub(super) struct MemoryLogs {
    pub(super) logs: HashMap<String, Vec<Event>>,
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

/// The destination of a state's events.
pub(super) enum Events {
    Memory(MemoryLogs),
    Sink(Box<dyn EventSink>),
}

impl Events {
    /// Hands `events` over; answers what [`MemoryLogs::append`] answers (nothing for a sink).
    pub(super) fn append(&mut self, conv_id: &str, events: Vec<Event>) -> Vec<(i64, i64)> {
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

    pub(super) fn restart(&mut self, conv_id: &str, why: Restart) {
        match self {
            Self::Memory(logs) => logs.restart(conv_id, why),
            Self::Sink(sink) => sink.restart(conv_id, why),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{conversation, page, seqs};
    use crate::sync::{SavedSync, SyncState};

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
        state.apply_entry(&conversation("c", 2, 0, 0));
        state.apply_page("c", page(&[1, 2], 2, 2));
        let mut p = page(&[9], 9, 9);
        p.truncated = true;
        state.apply_page("c", p);
        assert_eq!(state.events("c"), None, "the app keeps the events");
        assert_eq!(*seen.lock().unwrap(), ["c:[1, 2]", "c:Truncated", "c:[9]"]);
        let saved = state.save();
        let restored = SyncState::restore(saved.clone(), Recorder::default());
        assert_eq!(restored.save(), saved);
        let json = serde_json::to_string(&saved).unwrap();
        assert_eq!(serde_json::from_str::<SavedSync>(&json).unwrap(), saved);
    }
}
