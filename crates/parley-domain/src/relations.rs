//! What a message says about other messages (a reply, a thread, mentions) and what later events
//! of the log fold into it when it is read (an edit, reactions, a thread's replies).
//!
//! The log keeps every `edit`, `react` and `unreact` as an event of its own, in seq order like
//! every other event, so a device catching up from a cursor receives each exactly once. A read
//! of a message also answers its current state folded in (current body and `edited_at`, the
//! reaction counts with the caller's own, the thread's reply count and latest reply), so a
//! client that only reads history pages needs no folding of its own.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Serialize, Serializer};

use crate::ids::UserId;
use crate::media::{Attachment, MediaId};

/// Longest reaction key, in bytes: one emoji with its modifiers, or a short token.
pub const REACTION_KEY_BYTES_MAX: usize = 64;
/// Most characters of a reaction key: an emoji sequence (a family, a flag with modifiers) is at
/// most a handful of code points; a token name such as `thumbs_up` fits too.
pub const REACTION_KEY_CHARS_MAX: usize = 32;
/// Most distinct reaction keys on one message, so the folded counts a read answers stay bounded.
pub const REACTION_KEYS_PER_MESSAGE_MAX: i64 = 64;
/// Most users one message mentions (a given list and `@user` words of the body together).
pub const MENTIONS_LEN_MAX: usize = 64;

/// A reaction key: one emoji or a short token, no whitespace or control characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReactionKey(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReactionKeyError {
    #[error("a reaction key must not be empty")]
    Empty,
    #[error(
        "a reaction key is at most {REACTION_KEY_BYTES_MAX} bytes and {REACTION_KEY_CHARS_MAX} characters"
    )]
    TooLong,
    #[error("a reaction key may not contain whitespace, control characters or /")]
    BadChar,
}

impl ReactionKey {
    pub fn parse(s: &str) -> Result<Self, ReactionKeyError> {
        if s.is_empty() {
            return Err(ReactionKeyError::Empty);
        }
        if s.len() > REACTION_KEY_BYTES_MAX || s.chars().count() > REACTION_KEY_CHARS_MAX {
            return Err(ReactionKeyError::TooLong);
        }
        if s.chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '/')
        {
            return Err(ReactionKeyError::BadChar);
        }
        Ok(Self(s.to_owned()))
    }

    /// A key read back from a store, which only ever stored parsed keys.
    pub fn from_trusted(s: String) -> Self {
        Self(s)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The relations a send asks for: each names a message of the same conversation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SendRelations {
    /// The message this one answers.
    pub reply_to: Option<i64>,
    /// The thread this message joins: the seq of the thread's root message.
    pub thread_root: Option<i64>,
    /// Users the message mentions: the given list and the body's `@user` words, deduplicated in
    /// order of first appearance. The store keeps those who are members other than the sender.
    pub mentions: Vec<UserId>,
    /// Media the sender uploaded, each once, at most `ATTACHMENTS_PER_MESSAGE_MAX`
    /// (docs/MEDIA.md).
    pub attachments: Vec<MediaId>,
}

impl SendRelations {
    /// True when the send relates to nothing: a plain message.
    pub fn is_empty(&self) -> bool {
        self.reply_to.is_none()
            && self.thread_root.is_none()
            && self.mentions.is_empty()
            && self.attachments.is_empty()
    }
}

/// Users named by `@user` words of `body`, in order of first appearance, after those of
/// `given`, each once, at most [`MENTIONS_LEN_MAX`]. A word is `@` followed by the characters
/// a user id may hold; a trailing `.` or `-` ends a sentence, not the id. An `@` inside a word
/// (an e-mail address) mentions nobody.
pub fn mentions_of(body: &str, given: Vec<UserId>) -> Vec<UserId> {
    let mut out: Vec<UserId> = Vec::new();
    let push = |u: UserId, out: &mut Vec<UserId>| {
        if out.len() < MENTIONS_LEN_MAX && !out.contains(&u) {
            out.push(u);
        }
    };
    for u in given {
        push(u, &mut out);
    }
    let bytes = body.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let starts_word = i == 0 || !is_id_byte(bytes[i - 1]);
        if bytes[i] == b'@' && starts_word {
            let start = i + 1;
            let mut end = start;
            while end < bytes.len() && is_id_byte(bytes[end]) && bytes[end] != b'@' {
                end += 1;
            }
            let mut word = &body[start..end];
            word = word.trim_end_matches(['.', '-']);
            if let Ok(user) = UserId::parse(word) {
                push(user, &mut out);
            }
            i = end.max(start);
        } else {
            i += 1;
        }
    }
    out
}

fn is_id_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'@')
}

fn rfc3339<S: Serializer>(t: &Option<DateTime<Utc>>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => s.serialize_str(&t.to_rfc3339_opts(SecondsFormat::Micros, true)),
        None => s.serialize_none(),
    }
}

/// The count of one reaction key on a message, and whether the reader is among them.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReactionCount {
    pub key: String,
    pub count: i64,
    /// The reader reacted with this key.
    pub me: bool,
}

/// The replies of a thread, on its root message.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ThreadSummary {
    /// Replies in the thread that are not recalled.
    pub reply_count: i64,
    /// The seq of the newest reply.
    pub latest_seq: i64,
}

/// The relation fields of an event, beside the fields of SPEC §6; each absent unless set.
/// A message's own: `reply_to`, `thread_root`, `mentions`. An `edit` carries its new body in
/// the event's `body` and the edited message in `target_seq`; `react` and `unreact` carry
/// `key` and the message in `target_seq`. Folded in when a message is read: `edited_at`,
/// `reactions`, `thread`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Relations {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread_root: Option<i64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<String>))]
    pub mentions: Vec<UserId>,
    /// The reaction key of a `react` or `unreact`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// When the message's body was last edited (RFC 3339, UTC).
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "rfc3339")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub edited_at: Option<DateTime<Utc>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reactions: Vec<ReactionCount>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread: Option<ThreadSummary>,
    /// A message's attachments (docs/MEDIA.md); none once it is recalled.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<Attachment>,
}

impl Relations {
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// `Some` boxed relations when any is set, so events without relations carry no box.
    pub fn boxed(self) -> Option<Box<Self>> {
        (!self.is_empty()).then(|| Box::new(self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uid(s: &str) -> UserId {
        UserId::parse(s).unwrap()
    }

    #[test]
    fn mentions_are_at_words_after_the_given_list_each_once() {
        let body = "hi @ben and @cai. mail ana@example.org, @ben again, @ @-";
        assert_eq!(
            mentions_of(body, vec![uid("dan")]),
            vec![uid("dan"), uid("ben"), uid("cai")]
        );
        assert_eq!(mentions_of("@ana", vec![uid("ana")]), vec![uid("ana")]);
        assert!(mentions_of("no one", vec![]).is_empty());
    }

    #[test]
    fn mentions_are_bounded() {
        let body: String = (0..200).map(|i| format!("@u{i} ")).collect();
        assert_eq!(mentions_of(&body, vec![]).len(), MENTIONS_LEN_MAX);
    }

    #[test]
    fn reaction_keys_are_one_emoji_or_a_short_token() {
        for ok in ["👍", "👨‍👩‍👧‍👦", "+1", "thumbs_up", "🇫🇷"] {
            assert!(ReactionKey::parse(ok).is_ok(), "{ok}");
        }
        assert_eq!(ReactionKey::parse(""), Err(ReactionKeyError::Empty));
        assert_eq!(ReactionKey::parse("a b"), Err(ReactionKeyError::BadChar));
        assert_eq!(ReactionKey::parse("a/b"), Err(ReactionKeyError::BadChar));
        assert_eq!(ReactionKey::parse("\u{7}"), Err(ReactionKeyError::BadChar));
        assert_eq!(
            ReactionKey::parse(&"x".repeat(33)),
            Err(ReactionKeyError::TooLong)
        );
    }

    #[test]
    fn empty_relations_carry_no_box_and_serialise_to_nothing() {
        assert!(Relations::default().boxed().is_none());
        let r = Relations {
            reply_to: Some(3),
            ..Relations::default()
        };
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json, serde_json::json!({"reply_to": 3}));
    }
}
