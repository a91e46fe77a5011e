//! Identifiers and message bodies, each validated once at the edge.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Longest user or device id, in bytes. Short enough that a direct conversation id built from two
/// user ids stays within `CONV_ID_LEN_MAX`.
pub const USER_ID_LEN_MAX: usize = 64;
/// Longest conversation id, in bytes.
pub const CONV_ID_LEN_MAX: usize = 140;
/// Longest client message id, in bytes (SPEC §6: 1–128 bytes).
pub const CLIENT_MSG_ID_LEN_MAX: usize = 128;
/// Prefix of direct conversation ids; group ids may not use it.
pub const DIRECT_PREFIX: &str = "dm:";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("{what} must not be empty")]
    Empty { what: &'static str },
    #[error("{what} is longer than {max} bytes")]
    TooLong { what: &'static str, max: usize },
    #[error("{what} may contain only letters, digits and . _ - @{extra}")]
    BadChar {
        what: &'static str,
        extra: &'static str,
    },
    #[error("group conversation ids may not start with \"dm:\"")]
    ReservedPrefix,
    /// `.` and `..` are path steps in a URL: a client would resolve them away before the id
    /// reached the server, so the resource they name could never be addressed.
    #[error("{what} may not be \".\" or \"..\"")]
    DotSegment { what: &'static str },
}

/// The one character a stored text may not hold: PostgreSQL's `text` refuses U+0000 and SQLite
/// keeps it, so it is refused at the edge and both stores answer the same.
pub const UNSTORABLE_CHAR: char = '\0';

/// A free text (a title, a display name) that holds a character no store can keep.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} must not contain U+0000")]
pub struct TextError {
    pub what: &'static str,
}

/// Checks a free text the stores keep as written: anything but `UNSTORABLE_CHAR`.
pub fn storable_text(what: &'static str, s: &str) -> Result<(), TextError> {
    if s.contains(UNSTORABLE_CHAR) {
        return Err(TextError { what });
    }
    Ok(())
}

fn check_token(s: &str, what: &'static str, max: usize, colon_ok: bool) -> Result<(), IdError> {
    if s.is_empty() {
        return Err(IdError::Empty { what });
    }
    if s.len() > max {
        return Err(IdError::TooLong { what, max });
    }
    if s == "." || s == ".." {
        return Err(IdError::DotSegment { what });
    }
    let ok = s.bytes().all(|b| {
        b.is_ascii_alphanumeric()
            || matches!(b, b'.' | b'_' | b'-' | b'@')
            || (colon_ok && b == b':')
    });
    if !ok {
        return Err(IdError::BadChar {
            what,
            extra: if colon_ok { " :" } else { "" },
        });
    }
    Ok(())
}

macro_rules! string_newtype {
    ($name:ident) => {
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
        pub struct $name(String);

        impl $name {
            pub fn as_str(&self) -> &str {
                &self.0
            }
            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }
    };
}

string_newtype!(UserId);
string_newtype!(DeviceId);
string_newtype!(ConvId);
string_newtype!(ClientMsgId);

impl UserId {
    /// Letters, digits and `. _ - @`, at most `USER_ID_LEN_MAX` bytes. No `:`, so that the
    /// direct conversation id `dm:<a>:<b>` is unambiguous.
    pub fn parse(s: &str) -> Result<Self, IdError> {
        check_token(s, "user_id", USER_ID_LEN_MAX, false)?;
        Ok(Self(s.to_owned()))
    }
}

impl DeviceId {
    pub fn parse(s: &str) -> Result<Self, IdError> {
        check_token(s, "device_id", USER_ID_LEN_MAX, false)?;
        Ok(Self(s.to_owned()))
    }
}

impl ConvId {
    /// Any conversation id a client may name in a path: group ids and direct ids.
    pub fn parse(s: &str) -> Result<Self, IdError> {
        check_token(s, "conv_id", CONV_ID_LEN_MAX, true)?;
        Ok(Self(s.to_owned()))
    }

    /// A group id chosen by a client: like `parse`, but the direct prefix is reserved.
    pub fn parse_group(s: &str) -> Result<Self, IdError> {
        let id = Self::parse(s)?;
        if s.starts_with(DIRECT_PREFIX) {
            return Err(IdError::ReservedPrefix);
        }
        Ok(id)
    }

    /// The one direct conversation of a pair, independent of who asks.
    pub fn direct(a: &UserId, b: &UserId) -> Self {
        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
        Self(format!("{DIRECT_PREFIX}{lo}:{hi}"))
    }

    /// A fresh group id for a create request that names none.
    pub fn generated_group() -> Self {
        Self(format!("g-{}", uuid::Uuid::new_v4().simple()))
    }

    /// Rebuilds an id read back from the store, which only ever holds parsed ids.
    pub fn from_trusted(s: String) -> Self {
        Self(s)
    }
}

impl UserId {
    /// Rebuilds an id read back from the store, which only ever holds parsed ids.
    pub fn from_trusted(s: String) -> Self {
        Self(s)
    }
}

impl DeviceId {
    /// Rebuilds an id read back from the store, which only ever holds parsed ids.
    pub fn from_trusted(s: String) -> Self {
        Self(s)
    }
}

impl ClientMsgId {
    /// 1–128 bytes of UTF-8 without control characters.
    pub fn parse(s: &str) -> Result<Self, IdError> {
        let what = "client_msg_id";
        if s.is_empty() {
            return Err(IdError::Empty { what });
        }
        if s.len() > CLIENT_MSG_ID_LEN_MAX {
            return Err(IdError::TooLong {
                what,
                max: CLIENT_MSG_ID_LEN_MAX,
            });
        }
        if s.chars().any(char::is_control) {
            return Err(IdError::BadChar { what, extra: "" });
        }
        Ok(Self(s.to_owned()))
    }

    pub fn from_trusted(s: String) -> Self {
        Self(s)
    }
}

/// A message body: non-empty UTF-8 of at most the configured number of bytes, without
/// `UNSTORABLE_CHAR`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Body(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BodyError {
    #[error("body must not be empty")]
    Empty,
    #[error("body is {len} bytes; the limit is {max} bytes")]
    TooLarge { len: usize, max: usize },
    #[error(transparent)]
    Unstorable(#[from] TextError),
}

impl Body {
    pub fn parse(s: &str, body_bytes_max: usize) -> Result<Self, BodyError> {
        if s.is_empty() {
            return Err(BodyError::Empty);
        }
        Self::caption(s, body_bytes_max)
    }

    /// The text of a message that carries attachments, which may be empty.
    pub fn caption(s: &str, body_bytes_max: usize) -> Result<Self, BodyError> {
        if s.len() > body_bytes_max {
            return Err(BodyError::TooLarge {
                len: s.len(),
                max: body_bytes_max,
            });
        }
        storable_text("body", s)?;
        Ok(Self(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direct_id_is_order_independent() {
        let a = UserId::parse("u-a").unwrap();
        let b = UserId::parse("u-b").unwrap();
        assert_eq!(ConvId::direct(&a, &b), ConvId::direct(&b, &a));
        assert_eq!(ConvId::direct(&a, &b).as_str(), "dm:u-a:u-b");
    }

    #[test]
    fn user_ids_reject_colons_and_spaces() {
        assert!(UserId::parse("a:b").is_err());
        assert!(UserId::parse("a b").is_err());
        assert!(UserId::parse("").is_err());
        assert!(UserId::parse(&"x".repeat(65)).is_err());
        assert!(UserId::parse("ana.b_c-d@x").is_ok());
    }

    #[test]
    fn group_ids_cannot_take_the_direct_prefix() {
        assert_eq!(ConvId::parse_group("dm:x:y"), Err(IdError::ReservedPrefix));
        assert!(ConvId::parse_group("c-a").is_ok());
    }

    #[test]
    fn body_limit_counts_utf8_bytes() {
        // The second seed's teaching limit: "你好" is 6 bytes, "你好呀" is 9.
        assert!(Body::parse("你好", 6).is_ok());
        assert_eq!(
            Body::parse("你好呀", 6),
            Err(BodyError::TooLarge { len: 9, max: 6 })
        );
        assert_eq!(Body::parse("", 6), Err(BodyError::Empty));
    }

    #[test]
    fn dot_segments_are_no_ids() {
        for dots in [".", ".."] {
            assert_eq!(
                UserId::parse(dots),
                Err(IdError::DotSegment { what: "user_id" })
            );
            assert!(DeviceId::parse(dots).is_err());
            assert!(ConvId::parse(dots).is_err());
            assert!(ConvId::parse_group(dots).is_err());
        }
        assert!(ConvId::parse("...").is_ok());
        assert!(UserId::parse(".a").is_ok());
    }

    #[test]
    fn the_zero_character_is_refused_in_every_text() {
        assert_eq!(
            Body::parse("a\0b", 16),
            Err(BodyError::Unstorable(TextError { what: "body" }))
        );
        // The size limit outranks the content, as 413 outranks 400.
        assert!(matches!(
            Body::parse("\0\0\0", 2),
            Err(BodyError::TooLarge { .. })
        ));
        assert_eq!(
            storable_text("title", "\0"),
            Err(TextError { what: "title" })
        );
        assert!(storable_text("title", "a\u{1}b\u{7f}é").is_ok());
        assert!(ClientMsgId::parse("m\0").is_err());
    }

    #[test]
    fn client_msg_id_bounds() {
        assert!(ClientMsgId::parse(&"m".repeat(128)).is_ok());
        assert!(ClientMsgId::parse(&"m".repeat(129)).is_err());
        assert!(ClientMsgId::parse("a\nb").is_err());
    }
}
