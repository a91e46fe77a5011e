//! The bytes of attachments (their first layer, not yet served): content-addressed storage, an
//! upload streamed to disk under a size limit and never buffered whole, and the media type
//! sniffed from the bytes rather than taken from the client.
//!
//! An upload is written to a part file, hashed and counted as it arrives, synced, then renamed
//! to the path its SHA-256 names: the same bytes are stored once, and nothing half-written is
//! ever at a blob's path, since a rename is atomic. A crash mid-upload leaves only a part file,
//! which [`FsMediaStore::open`] sweeps away. Which messages reference a blob, who may read it
//! and when an unreferenced blob goes are the store's and the server's, not this crate's.

mod fs;
mod sniff;

use std::fmt;

pub use fs::FsMediaStore;
pub use sniff::{sniff, Sniffed, SNIFF_BYTES_MAX};

/// Default largest upload: 25 MiB.
pub const MEDIA_BYTES_MAX_DEFAULT: u64 = 25 * 1024 * 1024;

/// A blob's id: the lowercase hex SHA-256 of its bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlobId(String);

impl BlobId {
    /// 64 lowercase hex digits, else `None`: an id from a request is never a path.
    pub fn parse(s: &str) -> Option<Self> {
        let ok = s.len() == 64
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        ok.then(|| Self(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for BlobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A stored upload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    pub id: BlobId,
    pub size: u64,
    /// The media type sniffed from the bytes (`application/octet-stream` when unknown).
    pub content_type: &'static str,
    /// Whether a browser may show it inline; anything that could run script (SVG, HTML, XML,
    /// PDF) or is unknown is served only as an attachment.
    pub inline_safe: bool,
    /// False when these bytes were stored before: the blob was kept and this upload dropped.
    pub new: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum MediaError {
    /// The upload went past the limit; nothing of it is kept.
    #[error("the upload is larger than {max} bytes")]
    TooLarge { max: u64 },
    /// The client declared an image and the bytes are not one.
    #[error("the upload was declared {declared} but its bytes are {sniffed}")]
    NotWhatWasDeclared {
        declared: String,
        sniffed: &'static str,
    },
    /// The upload's body failed or ended early; nothing of it is kept.
    #[error("the upload did not arrive whole: {0}")]
    Body(String),
    #[error("media storage: {0}")]
    Io(#[from] std::io::Error),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blob_ids_are_hex_digests_only() {
        let hex = "a".repeat(64);
        assert!(BlobId::parse(&hex).is_some());
        for bad in [
            "",
            "../etc/passwd",
            &"A".repeat(64),
            &"a".repeat(63),
            &format!("{}/", "a".repeat(63)),
        ] {
            assert!(BlobId::parse(bad).is_none(), "{bad}");
        }
    }
}
