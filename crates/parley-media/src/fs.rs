//! Blobs as files under one directory, owner-only: `blobs/<2 hex>/<62 hex>` for stored bytes,
//! `parts/<uuid>.part` for uploads in progress. A part is synced before it is renamed into place
//! and the directory is synced after, so a blob that exists is whole and survives a crash; a part
//! file a crash left behind is removed when the store is opened.

use std::io::{self, SeekFrom};
use std::ops::Range;
use std::path::{Path, PathBuf};

use futures::StreamExt;
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};
use tokio_util::io::ReaderStream;

use crate::part::{self, make_private_dir, sync_dir, Part};
use crate::{Blob, BlobId, MediaError, Staged, Thumbnail};

const BLOBS_DIR: &str = "blobs";
const PARTS_DIR: &str = "parts";
/// Bytes read from a blob's file at a time when it is served.
const READ_CHUNK_BYTES: usize = 256 * 1024;

/// Blobs on the local filesystem (the embedded default: `--data-dir/media`).
#[derive(Debug, Clone)]
pub struct FsMediaStore {
    root: PathBuf,
    parts: PathBuf,
}

impl FsMediaStore {
    /// Opens (creating) `root`, makes it and its directories owner-only whether they existed or
    /// not, and removes every part file: no upload is in progress before the store is opened,
    /// so any part is what a crash left. Answers the store and how many parts it removed.
    pub async fn open(root: &Path) -> Result<(Self, usize), MediaError> {
        make_private_dir(root).await?;
        make_private_dir(&root.join(BLOBS_DIR)).await?;
        let parts = root.join(PARTS_DIR);
        let swept = part::open_dir(&parts).await?;
        Ok((
            Self {
                root: root.to_owned(),
                parts,
            },
            swept,
        ))
    }

    pub(crate) fn parts_dir(&self) -> &Path {
        &self.parts
    }

    fn blob_path(&self, id: &BlobId) -> PathBuf {
        let (shard, rest) = id.shard_and_rest();
        self.root.join(BLOBS_DIR).join(shard).join(rest)
    }

    /// Renames the part over the blob's path, whether a file is there or not: the bytes are the
    /// same, and a file a sweep removed after the upload was registered is written again.
    pub(crate) async fn commit(&self, staged: Staged) -> Result<(), MediaError> {
        let Staged {
            id,
            thumbnail,
            part,
            ..
        } = staged;
        let blob = self.blob_path(&id);
        let dir = self.shard_dir(&blob).await?;
        tokio::fs::rename(part.path(), &blob).await?;
        part.moved();
        sync_dir(&dir).await?;
        if let Some(thumbnail) = thumbnail {
            self.write_thumbnail(&thumbnail).await?;
        }
        Ok(())
    }

    /// Writes a thumbnail as any blob is written: a part, synced, renamed into place.
    async fn write_thumbnail(&self, thumbnail: &Thumbnail) -> Result<(), MediaError> {
        let part = Part::new_in(&self.parts);
        let mut file = part::create_private(part.path()).await?;
        file.write_all(&thumbnail.bytes).await?;
        file.sync_all().await?;
        drop(file);
        let blob = self.blob_path(&thumbnail.id);
        let dir = self.shard_dir(&blob).await?;
        tokio::fs::rename(part.path(), &blob).await?;
        part.moved();
        sync_dir(&dir).await
    }

    /// The blob's shard directory, created owner-only if it is not there yet.
    async fn shard_dir(&self, blob: &Path) -> Result<PathBuf, MediaError> {
        let dir = blob.parent().unwrap_or(&self.root).to_owned();
        make_private_dir(&dir).await?;
        Ok(dir)
    }

    pub(crate) async fn read(
        &self,
        id: &BlobId,
        range: Option<Range<u64>>,
    ) -> Result<Option<Blob>, MediaError> {
        let mut file = match tokio::fs::File::open(self.blob_path(id)).await {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let len = file.metadata().await?.len();
        let range = range.unwrap_or(0..len);
        file.seek(SeekFrom::Start(range.start)).await?;
        let wanted = range.end.saturating_sub(range.start);
        let body = ReaderStream::with_capacity(file.take(wanted), READ_CHUNK_BYTES).boxed();
        Ok(Some(Blob { len, body }))
    }

    pub(crate) async fn len(&self, id: &BlobId) -> Result<Option<u64>, MediaError> {
        match tokio::fs::metadata(self.blob_path(id)).await {
            Ok(meta) => Ok(Some(meta.len())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    pub(crate) async fn delete(&self, id: &BlobId) -> Result<bool, MediaError> {
        match tokio::fs::remove_file(self.blob_path(id)).await {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
impl FsMediaStore {
    pub(crate) fn blob_path_for_tests(&self, id: &BlobId) -> PathBuf {
        self.blob_path(id)
    }
}
