//! Attachments (docs/MEDIA.md): uploads streamed with a progress callback, downloads, and
//! signed URLs. A send names the uploads in [`crate::SendOptions::attachments`].

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use parley_wire::{Media, SignedUrls};
use reqwest::{header, Method};
use tokio::io::AsyncWriteExt;

use crate::error::ClientError;
use crate::http::error_from_answer;
use crate::Client;

/// Called with the bytes moved so far and the whole length (when known) as an upload or a
/// download goes.
pub type Progress = Arc<dyn Fn(u64, Option<u64>) + Send + Sync>;

/// Bytes of a file read per chunk of an upload: the upload is streamed, never held whole.
const UPLOAD_CHUNK_BYTES: usize = 64 * 1024;

impl Client {
    /// Uploads `bytes` (`POST /v1/media`). `content_type` is a hint the server checks only for
    /// images; `filename` is shown to readers.
    pub async fn upload(
        &self,
        bytes: impl Into<Bytes>,
        filename: Option<&str>,
        content_type: Option<&str>,
    ) -> Result<Media, ClientError> {
        let bytes: Bytes = bytes.into();
        let len = bytes.len() as u64;
        self.upload_body(
            reqwest::Body::from(bytes),
            Some(len),
            filename,
            content_type,
        )
        .await
    }

    /// Uploads the file at `path`, streamed from disk, calling `progress` as chunks go out. The
    /// file name sent is the path's last part.
    pub async fn upload_file(
        &self,
        path: &Path,
        content_type: Option<&str>,
        progress: Option<Progress>,
    ) -> Result<Media, ClientError> {
        let file = tokio::fs::File::open(path)
            .await
            .map_err(|e| ClientError::Io(e.to_string()))?;
        let len = file
            .metadata()
            .await
            .map_err(|e| ClientError::Io(e.to_string()))?
            .len();
        let mut sent = 0u64;
        let stream = tokio_util::io::ReaderStream::with_capacity(file, UPLOAD_CHUNK_BYTES).map(
            move |chunk| {
                if let (Ok(c), Some(p)) = (&chunk, &progress) {
                    sent += c.len() as u64;
                    p(sent, Some(len));
                }
                chunk
            },
        );
        let name = path.file_name().and_then(|n| n.to_str());
        self.upload_body(
            reqwest::Body::wrap_stream(stream),
            Some(len),
            name,
            content_type,
        )
        .await
    }

    async fn upload_body(
        &self,
        body: reqwest::Body,
        len: Option<u64>,
        filename: Option<&str>,
        content_type: Option<&str>,
    ) -> Result<Media, ClientError> {
        let mut url = self.http().url(&["v1", "media"])?;
        if let Some(name) = filename {
            url.query_pairs_mut().append_pair("filename", name);
        }
        let mut request = self.http().authorised(Method::POST, url).body(body);
        if let Some(len) = len {
            request = request.header(header::CONTENT_LENGTH, len);
        }
        if let Some(ct) = content_type {
            request = request.header(header::CONTENT_TYPE, ct);
        }
        self.http().json(request).await
    }

    /// The bytes of an upload (`GET /v1/media/{id}`), held in memory; see
    /// [`Client::download_to`] for large files.
    pub async fn download(&self, media_id: &str) -> Result<Bytes, ClientError> {
        let url = self.http().url(&["v1", "media", media_id])?;
        let response = self.fetch(url).await?;
        response.bytes().await.map_err(ClientError::from_reqwest)
    }

    /// An image's thumbnail (`GET /v1/media/{id}/thumbnail`).
    pub async fn thumbnail(&self, media_id: &str) -> Result<Bytes, ClientError> {
        let url = self.http().url(&["v1", "media", media_id, "thumbnail"])?;
        let response = self.fetch(url).await?;
        response.bytes().await.map_err(ClientError::from_reqwest)
    }

    /// Streams an upload into the file at `path` (created or truncated), calling `progress` as
    /// chunks arrive; answers the bytes written.
    pub async fn download_to(
        &self,
        media_id: &str,
        path: &Path,
        progress: Option<Progress>,
    ) -> Result<u64, ClientError> {
        let url = self.http().url(&["v1", "media", media_id])?;
        let response = self.fetch(url).await?;
        let total = response.content_length();
        let mut file = tokio::fs::File::create(path)
            .await
            .map_err(|e| ClientError::Io(e.to_string()))?;
        let mut stream = response.bytes_stream();
        let mut written = 0u64;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(ClientError::from_reqwest)?;
            file.write_all(&chunk)
                .await
                .map_err(|e| ClientError::Io(e.to_string()))?;
            written += chunk.len() as u64;
            if let Some(p) = &progress {
                p(written, total);
            }
        }
        file.sync_all()
            .await
            .map_err(|e| ClientError::Io(e.to_string()))?;
        Ok(written)
    }

    /// Links to an upload that need no header, for a browser (`POST /v1/media/{id}/url`).
    pub async fn media_url(&self, media_id: &str) -> Result<SignedUrls, ClientError> {
        let url = self.http().url(&["v1", "media", media_id, "url"])?;
        self.http()
            .json(self.http().authorised(Method::POST, url))
            .await
    }

    async fn fetch(&self, url: reqwest::Url) -> Result<reqwest::Response, ClientError> {
        let response = self
            .http()
            .authorised(Method::GET, url)
            .send()
            .await
            .map_err(ClientError::from_reqwest)?;
        let status = response.status().as_u16();
        if (200..300).contains(&status) {
            return Ok(response);
        }
        let bytes = response.bytes().await.map_err(ClientError::from_reqwest)?;
        Err(error_from_answer(status, &bytes))
    }
}
