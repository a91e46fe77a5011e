//! Folding live relation events into the messages a client keeps (docs/RELATIONS.md, "Who
//! folds").
//!
//! The server folds on every read: a page's messages come with their current body,
//! `edited_at`, reactions (with the reader's `me`) and thread summary. A pushed or caught-up
//! `edit`, `react`, `unreact` or `recall` event is the change itself, and a pushed `msg` carries
//! only its own fields; [`fold`] applies them to the messages held in [`Messages`], so the SDK
//! folds either way and a client that keeps messages shows what a fresh read would show.
//!
//! ```
//! use parley_client::relations::{fold, Messages};
//! # fn demo(page: parley_client::EventsPage, live: Vec<parley_client::Event>) {
//! let mut messages = Messages::new();
//! messages.insert_page(&page); // folded by the server as of page.head
//! for event in &live {
//!     fold(&mut messages, event, "ana"); // pushed or caught up, in seq order
//! }
//! # }
//! ```
//!
//! **Each message knows the seq it reflects.** A message read from a page reflects every event
//! up to the page's `head` (the server folds in the read's snapshot); a message folded live
//! reflects the last event applied to it. An event at or below that seq is already in the
//! message and is skipped, so applying the same event twice changes nothing, and events
//! caught up after a read that already counted them are not counted again. Events of one
//! conversation must be folded in seq order, as [`crate::Realtime`] and [`crate::SyncState`]
//! deliver them.
//!
//! Limits: a reaction key is placed where the server places it when it is added or dropped,
//! but when the first of several users to react with a key takes it back, the server may move
//! that key behind keys first used after it (it orders by the oldest remaining reaction),
//! which the counts here cannot tell; counts and `me` are exact. A recalled thread reply
//! leaves its root's count only when the reply itself is held (the `recall` event does not
//! name the thread).

use std::collections::BTreeMap;

use crate::types::{Event, EventKind, EventsPage, ReactionCount, ThreadSummary};

/// The messages of one conversation, keyed by seq, each with the seq it reflects.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Messages {
    held: BTreeMap<i64, Held>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Held {
    event: Event,
    /// The last seq of the conversation this copy reflects.
    as_of: i64,
}

impl Messages {
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes the messages of a page (events-after, history or thread page) as the server
    /// folded them, reflecting the log up to `page.head`. A message held with a later state
    /// is kept.
    pub fn insert_page(&mut self, page: &EventsPage) {
        for event in &page.events {
            self.insert_read(event.clone(), page.head);
        }
    }

    /// Takes a `msg` as a read answered it, reflecting the log up to `as_of` (the read's
    /// `head`). Other kinds are not held; a copy that already reflects a later seq is kept.
    pub fn insert_read(&mut self, event: Event, as_of: i64) {
        if event.kind != EventKind::Msg {
            return;
        }
        let seq = event.seq;
        match self.held.get(&seq) {
            Some(held) if held.as_of > as_of => {}
            _ => {
                self.held.insert(seq, Held { event, as_of });
            }
        }
    }

    /// The message at `seq`.
    pub fn get(&self, seq: i64) -> Option<&Event> {
        self.held.get(&seq).map(|h| &h.event)
    }

    /// The last seq the message at `seq` reflects.
    pub fn as_of(&self, seq: i64) -> Option<i64> {
        self.held.get(&seq).map(|h| h.as_of)
    }

    /// The messages in seq order.
    pub fn iter(&self) -> impl Iterator<Item = &Event> + '_ {
        self.held.values().map(|h| &h.event)
    }

    pub fn len(&self) -> usize {
        self.held.len()
    }

    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// [`fold`] on these messages.
    pub fn fold(&mut self, event: &Event, me: &str) -> bool {
        fold(self, event, me)
    }

    /// The held message at `seq` when it does not reflect `seq_now` yet; marks it as
    /// reflecting it.
    fn pending(&mut self, seq: i64, seq_now: i64) -> Option<&mut Event> {
        let held = self.held.get_mut(&seq)?;
        if held.as_of >= seq_now {
            return None;
        }
        held.as_of = seq_now;
        Some(&mut held.event)
    }
}

/// Applies a pushed or caught-up event of the conversation to `messages`, as the user `me`
/// sees it; answers whether anything changed. An event a held message already reflects
/// (the same event again, or one a read already counted) changes nothing.
///
/// - `msg`: held (if not yet); a reply in a thread also counts on its root (`reply_count`
///   + 1, `latest_seq`).
/// - `edit`: the target's body becomes the edit's and `edited_at` its `created_at` (an edit
///   without body, of a recalled message, changes nothing).
/// - `react` / `unreact`: the key's count moves by one, `me` follows the reactions of `me`,
///   a new key goes last and a key at 0 is dropped.
/// - `recall`: the target loses its body, `edited_at` and reactions and is marked recalled,
///   and a recalled thread reply leaves its root's count (the summary goes at 0).
pub fn fold(messages: &mut Messages, event: &Event, me: &str) -> bool {
    let seq = event.seq;
    match event.kind {
        EventKind::Msg => {
            let mut changed = false;
            if let std::collections::btree_map::Entry::Vacant(slot) = messages.held.entry(seq) {
                slot.insert(Held {
                    event: event.clone(),
                    as_of: seq,
                });
                changed = true;
            }
            if let Some(root) = event.thread_root {
                if let Some(root) = messages.pending(root, seq) {
                    let thread = root.thread.get_or_insert(ThreadSummary {
                        reply_count: 0,
                        latest_seq: seq,
                    });
                    thread.reply_count += 1;
                    thread.latest_seq = thread.latest_seq.max(seq);
                    changed = true;
                }
            }
            changed
        }
        EventKind::Edit => {
            let (Some(target), Some(body)) = (event.target_seq, event.body.as_ref()) else {
                return false;
            };
            let Some(message) = messages.pending(target, seq) else {
                return false;
            };
            if message.recalled {
                return false;
            }
            message.body = Some(body.clone());
            message.edited_at = Some(event.created_at.clone());
            true
        }
        EventKind::React | EventKind::Unreact => {
            let (Some(target), Some(key)) = (event.target_seq, event.key.as_deref()) else {
                return false;
            };
            let Some(message) = messages.pending(target, seq) else {
                return false;
            };
            if message.recalled {
                return false;
            }
            let mine = event.is_from(me);
            let at = message.reactions.iter().position(|r| r.key == key);
            if event.kind == EventKind::React {
                match at {
                    Some(i) => {
                        let r = &mut message.reactions[i];
                        r.count += 1;
                        r.me |= mine;
                    }
                    None => message.reactions.push(ReactionCount {
                        key: key.to_owned(),
                        count: 1,
                        me: mine,
                    }),
                }
                true
            } else {
                let Some(i) = at else {
                    return false;
                };
                let r = &mut message.reactions[i];
                r.count -= 1;
                if mine {
                    r.me = false;
                }
                if r.count <= 0 {
                    message.reactions.remove(i);
                }
                true
            }
        }
        EventKind::Recall => {
            let Some(target) = event.target_seq else {
                return false;
            };
            let Some(message) = messages.pending(target, seq) else {
                return false;
            };
            if message.recalled {
                return false;
            }
            message.recalled = true;
            message.body = None;
            message.edited_at = None;
            message.reactions.clear();
            let root = message.thread_root;
            if let Some(root) = root.and_then(|root| messages.pending(root, seq)) {
                if let Some(thread) = root.thread.as_mut() {
                    thread.reply_count -= 1;
                    if thread.reply_count <= 0 {
                        root.thread = None;
                    }
                }
            }
            true
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: &str = "2024-01-01T00:00:00.000000Z";

    fn msg(seq: i64, from: &str, body: &str) -> Event {
        Event {
            conv_id: "c".into(),
            seq,
            kind: EventKind::Msg,
            created_at: T0.into(),
            message_id: Some(format!("m{seq}")),
            sender_user: Some(from.into()),
            sender_device: Some("d".into()),
            client_msg_id: Some(format!("k{seq}")),
            body: Some(body.into()),
            ..Event::default()
        }
    }

    fn reply(seq: i64, from: &str, root: i64) -> Event {
        Event {
            thread_root: Some(root),
            ..msg(seq, from, "in thread")
        }
    }

    fn edit(seq: i64, from: &str, target: i64, body: &str) -> Event {
        Event {
            conv_id: "c".into(),
            seq,
            kind: EventKind::Edit,
            created_at: format!("2024-01-01T00:00:{seq:02}.000000Z"),
            sender_user: Some(from.into()),
            target_seq: Some(target),
            body: Some(body.into()),
            ..Event::default()
        }
    }

    fn react(seq: i64, from: &str, target: i64, key: &str, added: bool) -> Event {
        Event {
            conv_id: "c".into(),
            seq,
            kind: if added {
                EventKind::React
            } else {
                EventKind::Unreact
            },
            created_at: T0.into(),
            sender_user: Some(from.into()),
            target_seq: Some(target),
            key: Some(key.into()),
            ..Event::default()
        }
    }

    fn recall(seq: i64, from: &str, target: i64) -> Event {
        Event {
            conv_id: "c".into(),
            seq,
            kind: EventKind::Recall,
            created_at: T0.into(),
            sender_user: Some(from.into()),
            target_seq: Some(target),
            ..Event::default()
        }
    }

    fn counts(messages: &Messages, seq: i64) -> Vec<(String, i64, bool)> {
        messages
            .get(seq)
            .unwrap()
            .reactions
            .iter()
            .map(|r| (r.key.clone(), r.count, r.me))
            .collect()
    }

    fn fold_all(messages: &mut Messages, events: &[Event], me: &str) {
        for e in events {
            fold(messages, e, me);
        }
    }

    #[test]
    fn an_edit_replaces_the_body_and_sets_edited_at() {
        let mut m = Messages::new();
        assert!(fold(&mut m, &msg(1, "ana", "helo"), "ben"));
        assert!(fold(&mut m, &edit(2, "ana", 1, "hello"), "ben"));
        let e = m.get(1).unwrap();
        assert_eq!(e.body.as_deref(), Some("hello"));
        assert_eq!(e.edited_at.as_deref(), Some("2024-01-01T00:00:02.000000Z"));
        assert!(fold(&mut m, &edit(3, "ana", 1, "hello!"), "ben"));
        assert_eq!(m.get(1).unwrap().body.as_deref(), Some("hello!"));
        assert_eq!(m.as_of(1), Some(3));
    }

    #[test]
    fn reactions_count_per_key_with_me_and_drop_at_zero() {
        let mut m = Messages::new();
        fold(&mut m, &msg(1, "ana", "hi"), "ana");
        fold_all(
            &mut m,
            &[
                react(2, "ben", 1, "👍", true),
                react(3, "ana", 1, "👍", true),
                react(4, "ben", 1, "🎉", true),
            ],
            "ana",
        );
        assert_eq!(
            counts(&m, 1),
            [("👍".into(), 2, true), ("🎉".into(), 1, false)]
        );
        fold(&mut m, &react(5, "ana", 1, "👍", false), "ana");
        assert_eq!(
            counts(&m, 1),
            [("👍".into(), 1, false), ("🎉".into(), 1, false)]
        );
        fold(&mut m, &react(6, "ben", 1, "👍", false), "ana");
        assert_eq!(counts(&m, 1), [("🎉".into(), 1, false)]);
        fold(&mut m, &react(7, "ana", 1, "👍", true), "ana");
        assert_eq!(
            counts(&m, 1),
            [("🎉".into(), 1, false), ("👍".into(), 1, true)],
            "a key used again after it was dropped goes last"
        );
        assert!(
            !fold(&mut m, &react(8, "cai", 1, "x", false), "ana"),
            "an unreact of a key the message does not hold changes nothing"
        );
    }

    #[test]
    fn the_same_event_twice_is_applied_once() {
        let events = [
            msg(1, "ana", "root"),
            react(2, "ben", 1, "👍", true),
            reply(3, "ben", 1),
            edit(4, "ana", 1, "root, edited"),
            react(5, "ana", 1, "👍", true),
            recall(6, "ben", 3),
        ];
        let mut once = Messages::new();
        fold_all(&mut once, &events, "ana");
        let mut twice = Messages::new();
        for e in &events {
            assert!(fold(&mut twice, e, "ana"), "seq {}", e.seq);
            assert!(!fold(&mut twice, e, "ana"), "seq {} again", e.seq);
        }
        assert_eq!(once, twice);
        // Replaying the whole run again, as a catch-up overlapping pushes would.
        fold_all(&mut twice, &events, "ana");
        assert_eq!(once, twice);
        let root = once.get(1).unwrap();
        assert_eq!(root.body.as_deref(), Some("root, edited"));
        assert_eq!(root.thread, None, "the only reply was recalled");
        assert_eq!(counts(&once, 1), [("👍".into(), 2, true)]);
    }

    #[test]
    fn thread_replies_count_on_their_root() {
        let mut m = Messages::new();
        fold_all(
            &mut m,
            &[
                msg(1, "ana", "root"),
                reply(2, "ben", 1),
                msg(3, "cai", "beside"),
                reply(4, "cai", 1),
            ],
            "ana",
        );
        assert_eq!(
            m.get(1).unwrap().thread,
            Some(ThreadSummary {
                reply_count: 2,
                latest_seq: 4
            })
        );
        fold(&mut m, &recall(5, "ben", 2), "ana");
        assert_eq!(
            m.get(1).unwrap().thread,
            Some(ThreadSummary {
                reply_count: 1,
                latest_seq: 4
            }),
            "latest_seq stays, as the server keeps it"
        );
        assert_eq!(m.len(), 4);
    }

    #[test]
    fn a_recall_erases_body_edits_and_reactions_and_blocks_later_changes() {
        let mut m = Messages::new();
        fold_all(
            &mut m,
            &[
                msg(1, "ana", "hi"),
                edit(2, "ana", 1, "hi!"),
                react(3, "ben", 1, "👍", true),
                recall(4, "ana", 1),
            ],
            "ben",
        );
        let e = m.get(1).unwrap();
        assert!(e.recalled);
        assert_eq!((e.body.as_deref(), e.edited_at.as_deref()), (None, None));
        assert!(e.reactions.is_empty());
        assert_eq!(e.text(), None);
        // An edit written before the recall but folded late is older than the message's state.
        assert!(!fold(&mut m, &edit(3, "ana", 1, "late"), "ben"));
        // A bodiless edit (the target recalled) changes nothing either.
        let mut bodiless = edit(5, "ana", 1, "");
        bodiless.body = None;
        assert!(!fold(&mut m, &bodiless, "ben"));
    }

    #[test]
    fn events_a_read_already_reflects_are_skipped() {
        // A read at head 5 answered the root with its edit (seq 3) and reaction (seq 4) folded.
        let mut read = msg(1, "ana", "edited");
        read.edited_at = Some("2024-01-01T00:00:03.000000Z".into());
        read.reactions = vec![ReactionCount {
            key: "👍".into(),
            count: 1,
            me: true,
        }];
        let page = EventsPage {
            events: vec![read.clone()],
            head: 5,
            min_seq: 1,
            epoch: 1,
            through_seq: 5,
            truncated: false,
            next_before: None,
        };
        let mut m = Messages::new();
        m.insert_page(&page);
        // The catch-up that follows starts below the read's head.
        fold_all(
            &mut m,
            &[
                edit(3, "ana", 1, "edited"),
                react(4, "ben", 1, "👍", true),
                react(6, "cai", 1, "👍", true),
            ],
            "ben",
        );
        assert_eq!(counts(&m, 1), [("👍".into(), 2, true)]);
        assert_eq!(m.as_of(1), Some(6));
        // An older read does not replace a newer copy.
        m.insert_read(read, 5);
        assert_eq!(counts(&m, 1), [("👍".into(), 2, true)]);
    }

    #[test]
    fn folding_in_order_gives_the_state_of_a_read() {
        // What a read at head 9 answers for ben, built by hand from docs/RELATIONS.md.
        let mut expected_root = msg(1, "ana", "v2");
        expected_root.edited_at = Some("2024-01-01T00:00:05.000000Z".into());
        expected_root.reactions = vec![
            ReactionCount {
                key: "👍".into(),
                count: 1,
                me: true,
            },
            ReactionCount {
                key: "❤️".into(),
                count: 1,
                me: false,
            },
        ];
        expected_root.thread = Some(ThreadSummary {
            reply_count: 1,
            latest_seq: 7,
        });
        let mut m = Messages::new();
        fold_all(
            &mut m,
            &[
                msg(1, "ana", "v1"),
                react(2, "ben", 1, "👍", true),
                react(3, "cai", 1, "😂", true),
                reply(4, "ben", 1),
                edit(5, "ana", 1, "v2"),
                react(6, "cai", 1, "❤️", true),
                reply(7, "cai", 1),
                react(8, "cai", 1, "😂", false),
                recall(9, "ben", 4),
            ],
            "ben",
        );
        assert_eq!(m.get(1), Some(&expected_root));
        assert!(m.get(4).unwrap().recalled);
        assert_eq!(m.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 4, 7]);
    }

    #[test]
    fn events_of_messages_not_held_and_other_kinds_change_nothing() {
        let mut m = Messages::new();
        assert!(!fold(&mut m, &edit(2, "ana", 1, "x"), "ana"));
        assert!(!fold(&mut m, &react(3, "ana", 1, "x", true), "ana"));
        assert!(!fold(&mut m, &recall(4, "ana", 1), "ana"));
        let join = Event {
            conv_id: "c".into(),
            seq: 5,
            kind: EventKind::Join,
            created_at: T0.into(),
            subject_user: Some("ben".into()),
            ..Event::default()
        };
        assert!(!fold(&mut m, &join, "ana"));
        assert!(m.is_empty());
        // A reply whose root is not held is held itself.
        assert!(fold(&mut m, &reply(6, "ana", 1), "ana"));
        assert_eq!(m.len(), 1);
    }
}
