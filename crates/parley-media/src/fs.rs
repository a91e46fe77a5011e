//! Blobs as files under one directory, owner-only: `blobs/<2 hex>/<62 hex>` for stored bytes,
//! `parts/<uuid>.part` for uploads in progress. An upload is synced before it is renamed into
//! place and the directory is synced after, so a blob that exists is whole and survives a
//! crash; a part file a crash left behind is removed when the store is opened.

use std::io;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use crate::sniff::{sniff, SNIFF_BYTES_MAX};
use crate::{BlobId, MediaError, Stored};

/// Mode of every directory the store makes: the owner's only.
const DIR_MODE: u32 = 0o700;
/// Mode of every file the store writes: the owner's only.
const FILE_MODE: u32 = 0o600;
const BLOBS_DIR: &str = "blobs";
const PARTS_DIR: &str = "parts";

/// Blobs on the local filesystem (the embedded default: `--data-dir/media`).
#[derive(Debug, Clone)]
pub struct FsMediaStore {
    root: PathBuf,
}

impl FsMediaStore {
    /// Opens (creating) `root`, makes it and its directories owner-only whether they existed or
    /// not, and removes every part file: no upload is in progress before the store is opened,
    /// so any part is what a crash left. Answers the store and how many parts it removed.
    pub async fn open(root: &Path) -> Result<(Self, usize), MediaError> {
        for dir in [root.to_owned(), root.join(BLOBS_DIR), root.join(PARTS_DIR)] {
            make_private_dir(&dir).await?;
        }
        let mut swept = 0;
        let mut parts = tokio::fs::read_dir(root.join(PARTS_DIR)).await?;
        while let Some(entry) = parts.next_entry().await? {
            if entry.file_type().await?.is_file() {
                tokio::fs::remove_file(entry.path()).await?;
                swept += 1;
            }
        }
        if swept > 0 {
            tracing::info!(swept, "removed part files of uploads a stop interrupted");
        }
        Ok((
            Self {
                root: root.to_owned(),
            },
            swept,
        ))
    }

    fn blob_path(&self, id: &BlobId) -> PathBuf {
        let (shard, rest) = id.as_str().split_at(2);
        self.root.join(BLOBS_DIR).join(shard).join(rest)
    }

    /// Streams `body` into the store, at most `size_max` bytes: hashed and counted as it
    /// arrives, never held whole. Past the limit, on a body error, or when `declared` names an
    /// image the bytes are not, the part is removed and nothing is kept.
    pub async fn put<S, E>(
        &self,
        body: S,
        declared: Option<&str>,
        size_max: u64,
    ) -> Result<Stored, MediaError>
    where
        S: Stream<Item = Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        let part = self
            .root
            .join(PARTS_DIR)
            .join(format!("{}.part", uuid::Uuid::new_v4().simple()));
        let written = self.write_part(&part, body, declared, size_max).await;
        match written {
            Ok((id, size, sniffed)) => {
                let blob = self.blob_path(&id);
                let new = match tokio::fs::metadata(&blob).await {
                    Ok(_) => {
                        tokio::fs::remove_file(&part).await?;
                        false
                    }
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {
                        let dir = blob.parent().unwrap_or(&self.root).to_owned();
                        make_private_dir(&dir).await?;
                        tokio::fs::rename(&part, &blob).await?;
                        sync_dir(&dir).await?;
                        true
                    }
                    Err(e) => return Err(e.into()),
                };
                Ok(Stored {
                    id,
                    size,
                    content_type: sniffed.content_type,
                    inline_safe: sniffed.inline_safe,
                    new,
                })
            }
            Err(e) => {
                if let Err(rm) = tokio::fs::remove_file(&part).await {
                    if rm.kind() != io::ErrorKind::NotFound {
                        tracing::warn!(error = %rm, "a refused upload's part file stays until the next start");
                    }
                }
                Err(e)
            }
        }
    }

    async fn write_part<S, E>(
        &self,
        part: &Path,
        mut body: S,
        declared: Option<&str>,
        size_max: u64,
    ) -> Result<(BlobId, u64, crate::Sniffed), MediaError>
    where
        S: Stream<Item = Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        let mut file = tokio::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(FILE_MODE)
            .open(part)
            .await?;
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
        file.sync_all().await?;
        let id = BlobId(hex::encode(hasher.finalize()));
        Ok((id, size, sniffed))
    }

    /// The blob's file and length, or `None` when no such blob is stored.
    pub async fn open_blob(
        &self,
        id: &BlobId,
    ) -> Result<Option<(tokio::fs::File, u64)>, MediaError> {
        match tokio::fs::File::open(self.blob_path(id)).await {
            Ok(file) => {
                let len = file.metadata().await?.len();
                Ok(Some((file, len)))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Deletes a blob no message references any more; answers whether it existed.
    pub async fn delete(&self, id: &BlobId) -> Result<bool, MediaError> {
        match tokio::fs::remove_file(self.blob_path(id)).await {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
}

/// Creates `dir` if missing and sets it owner-only either way.
async fn make_private_dir(dir: &Path) -> Result<(), MediaError> {
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
async fn sync_dir(dir: &Path) -> Result<(), MediaError> {
    let dir = tokio::fs::File::open(dir).await?;
    dir.sync_all().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;
    use tokio::io::AsyncReadExt;

    const PNG: &[u8] = &[
        0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 0x0d,
    ];

    fn chunks(parts: &[&[u8]]) -> impl Stream<Item = Result<Bytes, String>> + Unpin {
        let owned: Vec<Result<Bytes, String>> = parts
            .iter()
            .map(|p| Ok(Bytes::copy_from_slice(p)))
            .collect();
        futures::stream::iter(owned)
    }

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path)
            .expect("metadata")
            .permissions()
            .mode()
            & 0o777
    }

    async fn read_blob(store: &FsMediaStore, id: &BlobId) -> Vec<u8> {
        let (mut file, _) = store.open_blob(id).await.expect("open").expect("stored");
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).await.expect("read");
        bytes
    }

    fn parts_left(root: &Path) -> usize {
        std::fs::read_dir(root.join(PARTS_DIR))
            .expect("parts")
            .count()
    }

    #[tokio::test]
    async fn the_same_bytes_are_stored_once_under_their_digest() {
        let dir = tempfile::tempdir().expect("dir");
        let (store, _) = FsMediaStore::open(dir.path()).await.expect("open");
        let first = store
            .put(chunks(&[PNG, b"rest of it"]), Some("image/png"), 1024)
            .await
            .expect("stored");
        let again = store
            .put(chunks(&[PNG, b"rest", b" of it"]), None, 1024)
            .await
            .expect("stored");
        let mut whole = PNG.to_vec();
        whole.extend_from_slice(b"rest of it");
        assert_eq!(first.id.as_str(), hex::encode(Sha256::digest(&whole)));
        assert_eq!((first.new, again.new), (true, false));
        assert_eq!(first.id, again.id);
        assert_eq!(
            (first.size, first.content_type),
            (whole.len() as u64, "image/png")
        );
        assert_eq!(read_blob(&store, &first.id).await, whole);
        assert_eq!(parts_left(dir.path()), 0);
        assert!(store.delete(&first.id).await.expect("delete"));
        assert!(store.open_blob(&first.id).await.expect("open").is_none());
    }

    #[tokio::test]
    async fn refused_uploads_leave_nothing() {
        let dir = tempfile::tempdir().expect("dir");
        let (store, _) = FsMediaStore::open(dir.path()).await.expect("open");
        let big = vec![7u8; 600];
        let over = store.put(chunks(&[&big, &big]), None, 1000).await;
        assert!(matches!(over, Err(MediaError::TooLarge { max: 1000 })));
        let lying = store
            .put(chunks(&[b"not a picture"]), Some("image/jpeg"), 1000)
            .await;
        assert!(matches!(lying, Err(MediaError::NotWhatWasDeclared { .. })));
        let cut: Vec<Result<Bytes, String>> = vec![
            Ok(Bytes::from_static(b"half")),
            Err("connection reset".into()),
        ];
        let broken = store.put(futures::stream::iter(cut), None, 1000).await;
        assert!(matches!(broken, Err(MediaError::Body(_))));
        assert_eq!(parts_left(dir.path()), 0);
        let blobs = std::fs::read_dir(dir.path().join(BLOBS_DIR))
            .expect("blobs")
            .count();
        assert_eq!(blobs, 0, "a refused upload left a blob");
    }

    #[tokio::test]
    async fn a_part_left_by_a_crash_is_swept_and_files_are_owner_only() {
        let dir = tempfile::tempdir().expect("dir");
        let root = dir.path().join("media");
        let (store, swept) = FsMediaStore::open(&root).await.expect("open");
        assert_eq!(swept, 0);
        std::fs::write(root.join(PARTS_DIR).join("dead.part"), b"half an upload").expect("part");
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let stored = store
            .put(chunks(&[b"bytes"]), None, 100)
            .await
            .expect("stored");
        drop(store);
        let (store, swept) = FsMediaStore::open(&root).await.expect("reopen");
        assert_eq!(swept, 1);
        assert_eq!(parts_left(&root), 0);
        assert_eq!(mode(&root), 0o700, "the root is made owner-only again");
        assert_eq!(mode(&store.blob_path(&stored.id)), 0o600);
        assert_eq!(
            mode(store.blob_path(&stored.id).parent().expect("shard")),
            0o700
        );
        assert_eq!(read_blob(&store, &stored.id).await, b"bytes");
    }
}
