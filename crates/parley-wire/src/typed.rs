//! Typed views of an [`Event`]: one struct per kind, with the fields that kind always carries
//! as plain values instead of options. They have no JSON of their own; the wire shape stays the
//! event object of SPEC §6.

use crate::answer::{Event, EventKind};

/// A `msg` event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub conv_id: String,
    pub seq: i64,
    /// RFC 3339, UTC.
    pub created_at: String,
    pub message_id: String,
    pub sender_user: String,
    pub sender_device: String,
    pub client_msg_id: String,
    /// `None` once the message was recalled; the current body when it was edited.
    pub body: Option<String>,
    /// The message this one replies to.
    pub reply_to: Option<i64>,
    /// The root of the thread this message is a reply in.
    pub thread_root: Option<i64>,
    /// The members it mentions.
    pub mentions: Vec<String>,
    /// When it was last edited, as read.
    pub edited_at: Option<String>,
}

impl Message {
    /// The text, unless the message was recalled.
    pub fn text(&self) -> Option<&str> {
        self.body.as_deref()
    }

    pub fn is_recalled(&self) -> bool {
        self.body.is_none()
    }
}

/// A `recall` event: `sender_user` recalled their message at `target_seq`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recall {
    pub conv_id: String,
    pub seq: i64,
    pub created_at: String,
    pub sender_user: String,
    pub target_seq: i64,
}

/// An `edit` event: `sender_user` gave their message at `target_seq` a new body (`None`
/// once the message was recalled or purged).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edit {
    pub conv_id: String,
    pub seq: i64,
    pub created_at: String,
    pub sender_user: String,
    pub target_seq: i64,
    pub body: Option<String>,
}

/// A `react` (`added`) or `unreact` event of `sender_user` with `key` on `target_seq`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reaction {
    pub conv_id: String,
    pub seq: i64,
    pub created_at: String,
    pub sender_user: String,
    pub target_seq: i64,
    pub key: String,
    pub added: bool,
}

/// A `join` or `leave` event: `user` joined or left; `by` made the change when the server
/// names who did (SPEC §6 lists `sender_user` for membership events).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MembershipChange {
    pub conv_id: String,
    pub seq: i64,
    pub created_at: String,
    pub user: String,
    pub by: Option<String>,
}

/// An event by kind. An event whose kind this version does not know, or that lacks a field its
/// kind requires, stays whole in [`TypedEvent::Other`]: it still takes its seq in the log.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TypedEvent {
    Message(Message),
    Recall(Recall),
    Join(MembershipChange),
    Leave(MembershipChange),
    Edit(Edit),
    Reaction(Reaction),
    /// Boxed: a whole event is the largest variant by far, and the rarest.
    Other(Box<Event>),
}

impl Event {
    /// The text of a message that was not recalled; `None` for every other event.
    pub fn text(&self) -> Option<&str> {
        match self.kind {
            EventKind::Msg if !self.recalled => self.body.as_deref(),
            _ => None,
        }
    }

    /// Whether `user_id` sent this event (a message or a recall), or made this membership change.
    pub fn is_from(&self, user_id: &str) -> bool {
        self.sender_user.as_deref() == Some(user_id)
    }

    /// The typed view of a copy of this event.
    pub fn typed(&self) -> TypedEvent {
        self.clone().into_typed()
    }

    /// The typed view of this event.
    pub fn into_typed(self) -> TypedEvent {
        match self.kind {
            EventKind::Msg => match (
                self.message_id,
                self.sender_user,
                self.sender_device,
                self.client_msg_id,
            ) {
                (Some(message_id), Some(sender_user), Some(sender_device), Some(client_msg_id)) => {
                    TypedEvent::Message(Message {
                        conv_id: self.conv_id,
                        seq: self.seq,
                        created_at: self.created_at,
                        message_id,
                        sender_user,
                        sender_device,
                        client_msg_id,
                        body: if self.recalled { None } else { self.body },
                        reply_to: self.reply_to,
                        thread_root: self.thread_root,
                        mentions: self.mentions,
                        edited_at: self.edited_at,
                    })
                }
                (message_id, sender_user, sender_device, client_msg_id) => {
                    TypedEvent::Other(Box::new(Event {
                        message_id,
                        sender_user,
                        sender_device,
                        client_msg_id,
                        ..self
                    }))
                }
            },
            EventKind::Recall => match (self.sender_user, self.target_seq) {
                (Some(sender_user), Some(target_seq)) => TypedEvent::Recall(Recall {
                    conv_id: self.conv_id,
                    seq: self.seq,
                    created_at: self.created_at,
                    sender_user,
                    target_seq,
                }),
                (sender_user, target_seq) => TypedEvent::Other(Box::new(Event {
                    sender_user,
                    target_seq,
                    ..self
                })),
            },
            EventKind::Join | EventKind::Leave => {
                let Some(user) = self.subject_user else {
                    return TypedEvent::Other(Box::new(Event {
                        subject_user: None,
                        ..self
                    }));
                };
                let change = MembershipChange {
                    conv_id: self.conv_id,
                    seq: self.seq,
                    created_at: self.created_at,
                    user,
                    by: self.sender_user,
                };
                if self.kind == EventKind::Join {
                    TypedEvent::Join(change)
                } else {
                    TypedEvent::Leave(change)
                }
            }
            EventKind::Edit => match (self.sender_user, self.target_seq) {
                (Some(sender_user), Some(target_seq)) => TypedEvent::Edit(Edit {
                    conv_id: self.conv_id,
                    seq: self.seq,
                    created_at: self.created_at,
                    sender_user,
                    target_seq,
                    body: self.body,
                }),
                (sender_user, target_seq) => TypedEvent::Other(Box::new(Event {
                    sender_user,
                    target_seq,
                    ..self
                })),
            },
            EventKind::React | EventKind::Unreact => {
                match (self.sender_user, self.target_seq, self.key) {
                    (Some(sender_user), Some(target_seq), Some(key)) => {
                        TypedEvent::Reaction(Reaction {
                            added: self.kind == EventKind::React,
                            conv_id: self.conv_id,
                            seq: self.seq,
                            created_at: self.created_at,
                            sender_user,
                            target_seq,
                            key,
                        })
                    }
                    (sender_user, target_seq, key) => TypedEvent::Other(Box::new(Event {
                        sender_user,
                        target_seq,
                        key,
                        ..self
                    })),
                }
            }
            // MLS events stay raw: only the SDK's `e2ee` layer can give them meaning.
            EventKind::MlsApplication
            | EventKind::MlsProposal
            | EventKind::MlsCommit
            | EventKind::MlsWelcome
            | EventKind::Other => TypedEvent::Other(Box::new(self)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(value: serde_json::Value) -> Event {
        serde_json::from_value(value).expect("an event")
    }

    const AT: &str = "2024-01-01T00:00:00Z";

    #[test]
    fn a_message_has_its_fields_and_its_text() {
        let e = event(
            json!({"conv_id": "c", "seq": 3, "kind": "msg", "created_at": AT,
            "message_id": "m", "sender_user": "ana", "sender_device": "d1",
            "client_msg_id": "x", "body": "hi"}),
        );
        assert_eq!(e.text(), Some("hi"));
        assert!(e.is_from("ana") && !e.is_from("ben"));
        let TypedEvent::Message(m) = e.typed() else {
            panic!("a message: {e:?}");
        };
        assert_eq!(
            (m.seq, m.sender_user.as_str(), m.sender_device.as_str()),
            (3, "ana", "d1")
        );
        assert_eq!((m.client_msg_id.as_str(), m.text()), ("x", Some("hi")));
        assert!(!m.is_recalled());
    }

    #[test]
    fn a_recalled_message_has_no_text() {
        let e = event(
            json!({"conv_id": "c", "seq": 3, "kind": "msg", "created_at": AT,
            "message_id": "m", "sender_user": "ana", "sender_device": "d1",
            "client_msg_id": "x", "recalled": true}),
        );
        assert_eq!(e.text(), None);
        let TypedEvent::Message(m) = e.into_typed() else {
            panic!("a message");
        };
        assert!(m.is_recalled() && m.text().is_none());
    }

    #[test]
    fn recalls_and_membership_changes_are_typed() {
        let recall = event(
            json!({"conv_id": "c", "seq": 4, "kind": "recall", "created_at": AT,
            "sender_user": "ana", "sender_device": "d1", "target_seq": 3}),
        );
        assert_eq!(recall.text(), None);
        assert_eq!(
            recall.typed(),
            TypedEvent::Recall(Recall {
                conv_id: "c".into(),
                seq: 4,
                created_at: AT.into(),
                sender_user: "ana".into(),
                target_seq: 3,
            })
        );
        let join = event(
            json!({"conv_id": "c", "seq": 5, "kind": "join", "created_at": AT,
            "subject_user": "ben", "sender_user": "ana"}),
        );
        let TypedEvent::Join(change) = join.typed() else {
            panic!("a join");
        };
        assert_eq!(
            (change.user.as_str(), change.by.as_deref()),
            ("ben", Some("ana"))
        );
        let leave = event(
            json!({"conv_id": "c", "seq": 6, "kind": "leave", "created_at": AT,
            "subject_user": "ben"}),
        );
        assert!(matches!(
            leave.typed(),
            TypedEvent::Leave(MembershipChange { by: None, .. })
        ));
    }

    #[test]
    fn unknown_kinds_and_incomplete_events_stay_whole() {
        let poll = event(json!({"conv_id": "c", "seq": 7, "kind": "poll", "created_at": AT}));
        assert_eq!(poll.typed(), TypedEvent::Other(Box::new(poll.clone())));
        let bodyless = event(
            json!({"conv_id": "c", "seq": 8, "kind": "msg", "created_at": AT,
            "body": "hi"}),
        );
        assert_eq!(
            bodyless.typed(),
            TypedEvent::Other(Box::new(bodyless.clone()))
        );
        let join = event(json!({"conv_id": "c", "seq": 9, "kind": "join", "created_at": AT}));
        assert_eq!(join.typed(), TypedEvent::Other(Box::new(join.clone())));
    }
}
