//! Attachments (docs/MEDIA.md): the media ids a send names and what a message then carries.
//!
//! The bytes live beside the log, not in it; a message holds a snapshot of each attachment's
//! description (id, digest, size, sniffed type, file name, image size), written with the
//! message, so a read needs no join and a later upload of other bytes changes nothing sent.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Most attachments one message carries.
pub const ATTACHMENTS_PER_MESSAGE_MAX: usize = 10;
/// Longest file name kept, in bytes.
pub const FILENAME_BYTES_MAX: usize = 255;

/// The uploader's handle on stored bytes: 32 lowercase hex digits.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct MediaId(String);

impl MediaId {
    pub const LEN: usize = 32;

    /// 32 lowercase hex digits, else `None`.
    pub fn parse(s: &str) -> Option<Self> {
        let ok = s.len() == Self::LEN
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        ok.then(|| Self(s.to_owned()))
    }

    /// A fresh random id.
    pub fn new_random() -> Self {
        Self(uuid::Uuid::new_v4().simple().to_string())
    }

    /// An id read back from a store, which only ever stored parsed ids.
    pub fn from_trusted(s: String) -> Self {
        Self(s)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for MediaId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a message says of one attachment.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attachment {
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub media_id: MediaId,
    /// Lowercase hex SHA-256 of the bytes.
    pub sha256: String,
    pub size: i64,
    /// Sniffed from the bytes, never the uploader's word.
    pub content_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filename: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub width: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub height: Option<u32>,
    /// A thumbnail can be fetched (`GET /v1/media/{id}/thumbnail`).
    #[serde(default)]
    pub thumbnail: bool,
}

/// A file name as a client gave it, made safe to show and to put in a header: the last path
/// part only (a name is never a path), no control characters or quotes, at most
/// [`FILENAME_BYTES_MAX`] bytes cut at a character boundary. `None` when nothing is left.
pub fn clean_filename(raw: &str) -> Option<String> {
    let last = raw.rsplit(['/', '\\']).next().unwrap_or("");
    let kept: String = last
        .chars()
        .filter(|c| !c.is_control() && !matches!(c, '"' | '\0'))
        .collect();
    let trimmed = kept.trim().trim_start_matches('.');
    let mut end = trimmed.len().min(FILENAME_BYTES_MAX);
    while !trimmed.is_char_boundary(end) {
        end -= 1;
    }
    let name = trimmed[..end].trim();
    (!name.is_empty()).then(|| name.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn media_ids_are_32_lowercase_hex_digits() {
        let id = MediaId::new_random();
        assert_eq!(MediaId::parse(id.as_str()), Some(id));
        for bad in [
            "",
            "../x",
            &"A".repeat(32),
            &"a".repeat(31),
            &"a".repeat(64),
        ] {
            assert!(MediaId::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn file_names_are_never_paths() {
        assert_eq!(
            clean_filename("../../etc/passwd").as_deref(),
            Some("passwd")
        );
        assert_eq!(clean_filename("C:\\x\\a.png").as_deref(), Some("a.png"));
        assert_eq!(clean_filename("..").as_deref(), None);
        assert_eq!(clean_filename("a\"b\r\n.txt").as_deref(), Some("ab.txt"));
        assert_eq!(clean_filename(".bashrc").as_deref(), Some("bashrc"));
        let long = "é".repeat(200);
        let cut = clean_filename(&long).unwrap_or_default();
        assert!(cut.len() <= FILENAME_BYTES_MAX && cut.chars().all(|c| c == 'é'));
    }
}
