//! Blobs in an object store (`object_store`): S3 and compatible stores, a directory through
//! `LocalFileSystem`, or memory in tests, under the keys `blobs/<2 hex>/<62 hex>`. Uploads are
//! staged in a local part directory as on the filesystem backend, since the hash that names the
//! object is known only once the whole body has arrived; an object is visible only once its put
//! has completed, so nothing half-written is ever at a blob's key.

use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path as Key;
use object_store::prefix::PrefixStore;
use object_store::{GetOptions, GetRange, ObjectStore, PutPayload};
use tokio::io::AsyncReadExt;

use crate::part::{self, make_private_dir};
use crate::{Blob, BlobId, MediaError, Staged};

/// Size of each part of a multipart put, and the largest blob sent in one put: S3 wants parts
/// of at least 5 MiB, and one part at a time in memory bounds what a commit holds.
const PUT_CHUNK_BYTES: usize = 8 * 1024 * 1024;

/// Blobs in an object store, staged through a local part directory.
#[derive(Debug, Clone)]
pub struct ObjectMediaStore {
    store: Arc<dyn ObjectStore>,
    parts: PathBuf,
}

impl ObjectMediaStore {
    /// Opens the store `url` names (see [`crate::MediaBackend::open_url`]) and the part
    /// directory `parts_dir`, swept of what a crash left; answers how many parts were removed.
    pub async fn open(url: &str, parts_dir: &Path) -> Result<(Self, usize), MediaError> {
        let store = open_store(url).await?;
        let swept = part::open_dir(parts_dir).await?;
        Ok((
            Self {
                store,
                parts: parts_dir.to_owned(),
            },
            swept,
        ))
    }

    pub(crate) fn parts_dir(&self) -> &Path {
        &self.parts
    }

    /// Puts the part's bytes at the blob's key, then the thumbnail, then removes the part. The
    /// put replaces an object already there (the same bytes), so a blob a sweep removed after
    /// the upload was registered is written again.
    pub(crate) async fn commit(&self, staged: Staged) -> Result<(), MediaError> {
        let Staged {
            id,
            size,
            thumbnail,
            part,
            ..
        } = staged;
        self.put_file(&key(&id), part.path(), size).await?;
        if let Some(thumbnail) = thumbnail {
            self.store
                .put(&key(&thumbnail.id), PutPayload::from(thumbnail.bytes))
                .await?;
        }
        part.remove().await;
        Ok(())
    }

    /// Sends the file at `path` to `key`: in one put when it fits in [`PUT_CHUNK_BYTES`], else
    /// in a multipart put, one chunk in memory at a time.
    async fn put_file(&self, key: &Key, path: &Path, size: u64) -> Result<(), MediaError> {
        let mut file = tokio::fs::File::open(path).await?;
        if size <= PUT_CHUNK_BYTES as u64 {
            let bytes = read_chunk(&mut file, size as usize).await?;
            self.store.put(key, PutPayload::from(bytes)).await?;
            return Ok(());
        }
        let mut upload = self.store.put_multipart(key).await?;
        let sent: Result<(), MediaError> = async {
            loop {
                let chunk = read_chunk(&mut file, PUT_CHUNK_BYTES).await?;
                if chunk.is_empty() {
                    break;
                }
                upload.put_part(PutPayload::from(chunk)).await?;
            }
            upload.complete().await?;
            Ok(())
        }
        .await;
        if sent.is_err() {
            // An abandoned multipart upload is billed for until it is aborted.
            if let Err(e) = upload.abort().await {
                tracing::warn!(error = %e, "aborting a failed multipart upload failed");
            }
        }
        sent
    }

    pub(crate) async fn read(
        &self,
        id: &BlobId,
        range: Option<Range<u64>>,
    ) -> Result<Option<Blob>, MediaError> {
        let key = key(id);
        let empty = range.as_ref().is_some_and(|r| r.start >= r.end);
        if empty {
            // Object stores refuse an empty range; its answer is known without a read.
            return Ok(self.len(id).await?.map(|len| Blob {
                len,
                body: futures::stream::empty().boxed(),
            }));
        }
        let options = GetOptions {
            range: range.map(GetRange::Bounded),
            ..GetOptions::default()
        };
        match self.store.get_opts(&key, options).await {
            Ok(got) => {
                let len = got.meta.size;
                let body = got
                    .into_stream()
                    .map(|r| r.map_err(io::Error::other))
                    .boxed();
                Ok(Some(Blob { len, body }))
            }
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    pub(crate) async fn len(&self, id: &BlobId) -> Result<Option<u64>, MediaError> {
        match self.store.head(&key(id)).await {
            Ok(meta) => Ok(Some(meta.size)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Object stores delete a missing key without complaint, so whether the blob existed is
    /// asked first; a delete racing this one may make both answer true, which only a log reads.
    pub(crate) async fn delete(&self, id: &BlobId) -> Result<bool, MediaError> {
        let key = key(id);
        match self.store.head(&key).await {
            Ok(_) => {}
            Err(object_store::Error::NotFound { .. }) => return Ok(false),
            Err(e) => return Err(e.into()),
        }
        match self.store.delete(&key).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(true),
            Err(e) => Err(e.into()),
        }
    }
}

/// The key of a blob: `blobs/<2 hex>/<62 hex>`, as on the filesystem.
fn key(id: &BlobId) -> Key {
    let (shard, rest) = id.shard_and_rest();
    Key::from(format!("blobs/{shard}/{rest}"))
}

/// Reads up to `bytes_max` bytes from `file`, fewer only at its end.
async fn read_chunk(file: &mut tokio::fs::File, bytes_max: usize) -> io::Result<Bytes> {
    let mut chunk = BytesMut::with_capacity(bytes_max);
    let mut limited = file.take(bytes_max as u64);
    while limited.read_buf(&mut chunk).await? > 0 {}
    Ok(chunk.freeze())
}

async fn open_store(url: &str) -> Result<Arc<dyn ObjectStore>, MediaError> {
    let bad = |reason| MediaError::Url {
        url: url.to_owned(),
        reason,
    };
    if let Some(rest) = url.strip_prefix("s3://") {
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(bad("no bucket: the URL is s3://bucket/prefix"));
        }
        // Endpoint, region and credentials come from the AWS_* environment variables, as
        // every S3 tool reads them.
        let s3 = AmazonS3Builder::from_env()
            .with_bucket_name(bucket)
            .build()?;
        let prefix = prefix.trim_matches('/');
        if prefix.is_empty() {
            Ok(Arc::new(s3))
        } else {
            Ok(Arc::new(PrefixStore::new(s3, prefix)))
        }
    } else if let Some(path) = url.strip_prefix("file://") {
        if !path.starts_with('/') {
            return Err(bad("a file URL names an absolute path: file:///path"));
        }
        let root = Path::new(path);
        if let Some(parent) = root.parent() {
            tokio::fs::create_dir_all(parent).await?;
        }
        // The files `LocalFileSystem` writes take the process's umask; an owner-only root
        // keeps them from other users all the same. It stages each put in a `<key>#<n>` file
        // beside the key, which a crash mid-commit may leave there: only the staged parts of
        // this crate are swept at open, so such a file stays until removed by hand.
        make_private_dir(root).await?;
        Ok(Arc::new(LocalFileSystem::new_with_prefix(root)?))
    } else if let Some(rest) = url.strip_prefix("memory://") {
        if !rest.is_empty() && rest != "/" {
            return Err(bad("a memory URL has no path: memory://"));
        }
        Ok(Arc::new(InMemory::new()))
    } else {
        Err(bad("not s3://, file:// or memory://"))
    }
}

#[cfg(test)]
impl ObjectMediaStore {
    pub(crate) fn store_for_tests(&self) -> &dyn ObjectStore {
        self.store.as_ref()
    }
}
