//! Part files: where an upload is written, hashed and examined before it becomes a blob. Both
//! backends stage into a local directory of them, owner-only, emptied when the backend opens.

use std::io;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use crate::sniff::{sniff, Sniffed, SNIFF_BYTES_MAX};
use crate::{thumb, BlobId, MediaError, Staged};

/// Mode of every directory the store makes: the owner's only.
pub(crate) const DIR_MODE: u32 = 0o700;
/// Mode of every file the store writes: the owner's only.
pub(crate) const FILE_MODE: u32 = 0o600;

/// A part file that is removed when this is dropped, unless it was moved away first: an upload
/// whose request is cancelled mid-body, or a staged upload never committed, leaves nothing.
#[derive(Debug)]
pub(crate) struct Part {
    path: PathBuf,
    /// False once the file was renamed away or removed: nothing is left for the drop.
    armed: bool,
}

impl Part {
    /// A new, unique part path in `dir`; the file is created by whoever writes it.
    pub(crate) fn new_in(dir: &Path) -> Self {
        let name = format!("{}.part", uuid::Uuid::new_v4().simple());
        Self {
            path: dir.join(name),
            armed: true,
        }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The file was renamed away: nothing is left to remove.
    pub(crate) fn moved(mut self) {
        self.armed = false;
    }

    /// Removes the file now, without blocking the runtime as the drop would.
    pub(crate) async fn remove(mut self) {
        self.armed = false;
        if let Err(e) = tokio::fs::remove_file(&self.path).await {
            if e.kind() != io::ErrorKind::NotFound {
                tracing::warn!(error = %e, path = %self.path.display(), "a part file stays until the next start");
            }
        }
    }
}

impl Drop for Part {
    fn drop(&mut self) {
        // A drop cannot await; an unlink is one short system call, so it is done in place
        // rather than leaving the part to the next start's sweep.
        if self.armed {
            if let Err(e) = std::fs::remove_file(&self.path) {
                if e.kind() != io::ErrorKind::NotFound {
                    tracing::warn!(error = %e, path = %self.path.display(), "a part file stays until the next start");
                }
            }
        }
    }
}

/// Bytes gathered before one write to a part file.
const PART_WRITE_BUFFER_BYTES: usize = 1024 * 1024;

/// Streams `body` into a new part file in `dir` and examines it (see [`crate::MediaBackend::stage`]).
pub(crate) async fn stage<S, E>(
    dir: &Path,
    body: S,
    declared: Option<&str>,
    size_max: u64,
) -> Result<Staged, MediaError>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    // On every early return below the part is dropped, which removes its file.
    let part = Part::new_in(dir);
    let (id, size, sniffed) = write(part.path(), body, declared, size_max).await?;
    let examined = thumb::examine(part.path(), sniffed.content_type).await?;
    Ok(Staged {
        id,
        size,
        content_type: sniffed.content_type,
        inline_safe: sniffed.inline_safe,
        image: examined.image,
        thumbnail: examined.thumbnail,
        part,
    })
}

/// Writes the body to `path`, hashing, counting and keeping its head for the sniffer, then
/// syncs it so that a blob renamed from it is whole after a crash.
async fn write<S, E>(
    path: &Path,
    mut body: S,
    declared: Option<&str>,
    size_max: u64,
) -> Result<(BlobId, u64, Sniffed), MediaError>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    // A body arrives in chunks of a few kilobytes; each write of a `tokio::fs::File` is a trip
    // to the blocking pool, so the chunks are gathered into writes of a buffer's size.
    let mut file =
        tokio::io::BufWriter::with_capacity(PART_WRITE_BUFFER_BYTES, create_private(path).await?);
    let mut hasher = Sha256::new();
    let mut head: Vec<u8> = Vec::with_capacity(SNIFF_BYTES_MAX);
    let mut size: u64 = 0;
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| MediaError::Body(e.to_string()))?;
        size = size.saturating_add(chunk.len() as u64);
        if size > size_max {
            return Err(MediaError::TooLarge { max: size_max });
        }
        if head.len() < SNIFF_BYTES_MAX {
            let take = (SNIFF_BYTES_MAX - head.len()).min(chunk.len());
            head.extend_from_slice(&chunk[..take]);
        }
        hasher.update(&chunk);
        file.write_all(&chunk).await?;
    }
    let sniffed = sniff(&head, declared)?;
    file.flush().await?;
    file.get_ref().sync_all().await?;
    let id = BlobId(hex::encode(hasher.finalize()));
    Ok((id, size, sniffed))
}

/// A new owner-only file at `path`, which must not exist yet.
pub(crate) async fn create_private(path: &Path) -> io::Result<tokio::fs::File> {
    tokio::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .open(path)
        .await
}

/// Creates the parts directory `dir` (and its missing parents) owner-only and removes every
/// part file in it: no upload is in progress before the backend is opened, so any part is what
/// a crash left. Answers how many it removed.
pub(crate) async fn open_dir(dir: &Path) -> Result<usize, MediaError> {
    if let Some(parent) = dir.parent() {
        tokio::fs::create_dir_all(parent).await?;
    }
    make_private_dir(dir).await?;
    let mut swept = 0;
    let mut parts = tokio::fs::read_dir(dir).await?;
    while let Some(entry) = parts.next_entry().await? {
        if entry.file_type().await?.is_file() {
            tokio::fs::remove_file(entry.path()).await?;
            swept += 1;
        }
    }
    if swept > 0 {
        tracing::info!(swept, "removed part files of uploads a stop interrupted");
    }
    Ok(swept)
}

/// Creates `dir` if missing and sets it owner-only either way.
pub(crate) async fn make_private_dir(dir: &Path) -> Result<(), MediaError> {
    match tokio::fs::DirBuilder::new()
        .mode(DIR_MODE)
        .create(dir)
        .await
    {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e.into()),
    }
    use std::os::unix::fs::PermissionsExt;
    tokio::fs::set_permissions(dir, std::fs::Permissions::from_mode(DIR_MODE)).await?;
    Ok(())
}

/// Syncs a directory, so a rename into it survives a crash.
pub(crate) async fn sync_dir(dir: &Path) -> Result<(), MediaError> {
    let dir = tokio::fs::File::open(dir).await?;
    dir.sync_all().await?;
    Ok(())
}
