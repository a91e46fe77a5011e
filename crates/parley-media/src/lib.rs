//! The bytes of attachments: content-addressed storage on the local filesystem or in an object
//! store, an upload streamed to a part file under a size limit and never buffered whole, the
//! media type sniffed from the bytes rather than taken from the client, and image thumbnails.
//!
//! # Two phases
//!
//! An upload is [`MediaBackend::stage`]d, then [`MediaBackend::commit`]ted (or
//! [`MediaBackend::discard`]ed):
//!
//! 1. `stage` streams the body into a private part file, hashing (SHA-256) and counting it as it
//!    arrives, syncs it, sniffs its type, and for a raster image reads the dimensions from the
//!    header (refusing a decompression bomb before any pixel is decoded) and makes a thumbnail.
//!    Nothing is visible yet: the answer, a [`Staged`], names the blob and its thumbnail.
//! 2. `commit` makes the blob and its thumbnail visible under their digests: on the filesystem by
//!    renaming the part over `blobs/<2 hex>/<62 hex>`, in an object store by a completed put.
//!
//! The server registers the blob in its database between the two. That order is what makes a
//! sweep of unreferenced blobs safe against an upload of the same bytes: the sweep deletes only
//! what the database says nobody references, and an upload always writes its file *after*
//! registering it. If a sweep deleted the file of a blob between the upload's registration and
//! its commit, the commit writes it again (it replaces the file even when one is there, which is
//! harmless since the bytes are the same), so a blob a new upload relies on is never missing.
//!
//! The same bytes are stored once, and nothing half-written is ever at a blob's path: a rename
//! is atomic, and an object store shows an object only once its put completed. A crash
//! mid-upload leaves only a part file, which opening the backend sweeps away; a [`Staged`]
//! dropped without a commit or a discard (a request cancelled between the phases) removes its
//! part file itself. Which messages reference a blob, who may read it and when an unreferenced
//! blob goes are the store's and the server's, not this crate's.

mod fs;
mod object;
mod part;
mod sniff;
mod thumb;

use std::fmt;
use std::ops::Range;
use std::path::Path;

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::Stream;

pub use fs::FsMediaStore;
pub use object::ObjectMediaStore;
pub use sniff::{sniff, Sniffed, SNIFF_BYTES_MAX};
pub use thumb::{
    IMAGE_DECODE_BYTES_MAX, IMAGE_PIXELS_MAX, IMAGE_SIDE_PX_MAX, THUMBNAILS_IN_FLIGHT_MAX,
    THUMBNAIL_SIDE_PX_MAX,
};

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

    /// The id of `bytes`.
    pub(crate) fn of(bytes: &[u8]) -> Self {
        use sha2::{Digest, Sha256};
        Self(hex::encode(Sha256::digest(bytes)))
    }

    /// The blob's relative location, `blobs/<2 hex>/<62 hex>`, shared by both backends: the
    /// first two digits spread blobs over 256 directories so none grows huge.
    pub(crate) fn shard_and_rest(&self) -> (&str, &str) {
        self.0.split_at(2)
    }
}

impl fmt::Display for BlobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An image's size in pixels as it is displayed: width and height are swapped when the image's
/// EXIF orientation turns it a quarter, as browsers do when they show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageSize {
    pub width: u32,
    pub height: u32,
}

/// A thumbnail made at staging: at most [`THUMBNAIL_SIDE_PX_MAX`] on a side, a JPEG when the
/// image is opaque and a PNG when any of its pixels is see-through (JPEG has no alpha).
#[derive(Clone, PartialEq, Eq)]
pub struct Thumbnail {
    /// The SHA-256 of the thumbnail's own bytes: it is stored as a blob like any other.
    pub id: BlobId,
    pub size: u64,
    pub content_type: &'static str,
    pub bytes: Bytes,
}

impl fmt::Debug for Thumbnail {
    // The bytes are left out: a staged upload in a log line should not carry kilobytes of JPEG.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Thumbnail")
            .field("id", &self.id)
            .field("size", &self.size)
            .field("content_type", &self.content_type)
            .finish_non_exhaustive()
    }
}

/// An upload written to its part file and examined, not yet visible. Hand it to
/// [`MediaBackend::commit`] or [`MediaBackend::discard`]; dropped otherwise, it removes its part
/// file.
#[derive(Debug)]
pub struct Staged {
    pub id: BlobId,
    pub size: u64,
    /// The media type sniffed from the bytes (`application/octet-stream` when unknown).
    pub content_type: &'static str,
    /// Whether a browser may show it inline; anything that could run script (SVG, HTML, XML,
    /// PDF) or is unknown is served only as an attachment.
    pub inline_safe: bool,
    /// The dimensions of a PNG, JPEG, GIF or WebP whose header could be read.
    pub image: Option<ImageSize>,
    /// `None` for anything but such an image, and for an image whose pixels failed to decode
    /// (it is kept as a file all the same).
    pub thumbnail: Option<Thumbnail>,
    part: part::Part,
}

/// A stored blob's bytes, or the requested range of them, streamed from storage.
pub struct Blob {
    /// The whole blob's length, whatever range was asked for.
    pub len: u64,
    pub body: BoxStream<'static, std::io::Result<Bytes>>,
}

impl fmt::Debug for Blob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Blob")
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
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
    /// The image's header gives dimensions past the limits; it is refused before a pixel of it
    /// is decoded, and nothing of it is kept.
    #[error(
        "the image is {width}x{height} pixels; at most {IMAGE_SIDE_PX_MAX} on a side and \
         {IMAGE_PIXELS_MAX} pixels in all are accepted"
    )]
    ImageTooLarge { width: u32, height: u32 },
    /// The upload's body failed or ended early; nothing of it is kept.
    #[error("the upload did not arrive whole: {0}")]
    Body(String),
    /// A media URL the backend cannot open.
    #[error("media URL {url:?}: {reason}")]
    Url { url: String, reason: &'static str },
    /// The object store failed.
    #[error("media object store: {0}")]
    Store(String),
    #[error("media storage: {0}")]
    Io(#[from] std::io::Error),
}

impl From<object_store::Error> for MediaError {
    fn from(e: object_store::Error) -> Self {
        Self::Store(e.to_string())
    }
}

/// Where blobs are kept. An enum rather than a trait object: there are two backends, both known
/// here; [`MediaBackend::stage`] is generic over the body stream, which a trait object could not
/// be; and its futures need no boxing. Both backends stage uploads the same way, into a local
/// part directory, and differ only in how a staged blob becomes visible and is read back.
#[derive(Debug, Clone)]
pub enum MediaBackend {
    /// Files under one local directory, the embedded default (`--data-dir/media`).
    Fs(FsMediaStore),
    /// An `object_store` store: S3, a directory through `LocalFileSystem`, or memory in tests.
    Object(ObjectMediaStore),
}

impl MediaBackend {
    /// Opens (creating) a filesystem backend at `root`; answers it and how many part files a
    /// crash had left, which are removed.
    pub async fn open_fs(root: &Path) -> Result<(Self, usize), MediaError> {
        let (store, swept) = FsMediaStore::open(root).await?;
        Ok((Self::Fs(store), swept))
    }

    /// Opens an object-store backend from a URL: `s3://bucket/prefix` (endpoint, region and
    /// credentials from the `AWS_*` environment variables), `file:///absolute/path` or
    /// `memory://` (gone with the process; for tests). Uploads are staged in `parts_dir` on the
    /// local disk, made owner-only and swept of what a crash left; answers the backend and how
    /// many part files were removed.
    pub async fn open_url(url: &str, parts_dir: &Path) -> Result<(Self, usize), MediaError> {
        let (store, swept) = ObjectMediaStore::open(url, parts_dir).await?;
        Ok((Self::Object(store), swept))
    }

    /// Phase one: streams `body` to a part file, at most `size_max` bytes, hashing and counting
    /// it as it arrives (never held whole), then sniffs its type and, for a PNG, JPEG, GIF or
    /// WebP, checks its dimensions and makes a thumbnail. Past the limit
    /// ([`MediaError::TooLarge`], as soon as the count passes it), on a body error
    /// ([`MediaError::Body`]), when `declared` names an image the bytes are not
    /// ([`MediaError::NotWhatWasDeclared`]) or for an image too large to decode
    /// ([`MediaError::ImageTooLarge`]), the part is removed and nothing is kept.
    pub async fn stage<S, E>(
        &self,
        body: S,
        declared: Option<&str>,
        size_max: u64,
    ) -> Result<Staged, MediaError>
    where
        S: Stream<Item = Result<Bytes, E>> + Unpin,
        E: fmt::Display,
    {
        part::stage(self.parts_dir(), body, declared, size_max).await
    }

    /// Phase two: makes the staged blob and its thumbnail visible under their ids, replacing
    /// whatever is there (the same bytes), so a blob whose file a sweep removed is whole again.
    pub async fn commit(&self, staged: Staged) -> Result<(), MediaError> {
        match self {
            Self::Fs(store) => store.commit(staged).await,
            Self::Object(store) => store.commit(staged).await,
        }
    }

    /// Drops a staged upload: its part file is removed and nothing becomes visible.
    pub async fn discard(&self, staged: Staged) {
        staged.part.remove().await;
    }

    /// The blob's bytes, only `range` of them when given, or `None` when no such blob is
    /// stored. The range must lie within the blob (check it against [`MediaBackend::len`]).
    pub async fn read(
        &self,
        id: &BlobId,
        range: Option<Range<u64>>,
    ) -> Result<Option<Blob>, MediaError> {
        match self {
            Self::Fs(store) => store.read(id, range).await,
            Self::Object(store) => store.read(id, range).await,
        }
    }

    /// The blob's length, or `None` when no such blob is stored.
    pub async fn len(&self, id: &BlobId) -> Result<Option<u64>, MediaError> {
        match self {
            Self::Fs(store) => store.len(id).await,
            Self::Object(store) => store.len(id).await,
        }
    }

    /// Deletes a blob no message references any more; answers whether it existed.
    pub async fn delete(&self, id: &BlobId) -> Result<bool, MediaError> {
        match self {
            Self::Fs(store) => store.delete(id).await,
            Self::Object(store) => store.delete(id).await,
        }
    }

    fn parts_dir(&self) -> &Path {
        match self {
            Self::Fs(store) => store.parts_dir(),
            Self::Object(store) => store.parts_dir(),
        }
    }
}

#[cfg(test)]
mod tests;
