//! An upload: the body streamed into a part file (never buffered whole), registered in the
//! store, then made visible (docs/MEDIA.md). Any refusal keeps nothing.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use futures::{Stream, StreamExt};
use parley_domain::media::clean_filename;
use parley_domain::{Attachment, MediaId};
use parley_store::{DeviceIdentity, MediaThumbnail, NewMedia};

use super::media_error;
use crate::error::ApiError;
use crate::state::AppState;

/// What the client says of an upload beside its bytes.
pub struct UploadHead {
    /// The declared type; only an `image/*` claim is checked against the bytes.
    pub declared: Option<String>,
    pub filename: Option<String>,
    pub content_length: Option<u64>,
}

/// Streams, registers and commits one upload.
pub async fn upload(
    state: &AppState,
    device: &DeviceIdentity,
    head: UploadHead,
    body: Body,
) -> Result<Attachment, ApiError> {
    let media = state.media()?;
    let limits = &state.config().media;
    if let Some(len) = head.content_length {
        if len > limits.bytes_max {
            return Err(ApiError::MediaTooLarge {
                max: limits.bytes_max,
            });
        }
    }
    let timed_out = Arc::new(AtomicBool::new(false));
    let stream = idle_bounded(
        body.into_data_stream(),
        Duration::from_millis(limits.chunk_idle_ms.max(1)),
        timed_out.clone(),
    );
    let staged = media
        .backend()
        .stage(Box::pin(stream), head.declared.as_deref(), limits.bytes_max)
        .await
        .map_err(|e| media_error(e, timed_out.load(Ordering::Relaxed)))?;
    let new = NewMedia {
        media_id: MediaId::new_random(),
        uploader: device.user_id.clone(),
        sha256: staged.id.as_str().to_owned(),
        size: i64::try_from(staged.size).unwrap_or(i64::MAX),
        content_type: staged.content_type.to_owned(),
        inline_safe: staged.inline_safe,
        filename: head.filename.as_deref().and_then(clean_filename),
        width: staged.image.map(|i| i.width),
        height: staged.image.map(|i| i.height),
        thumbnail: staged.thumbnail.as_ref().map(|t| MediaThumbnail {
            sha256: t.id.as_str().to_owned(),
            size: i64::try_from(t.size).unwrap_or(i64::MAX),
            content_type: t.content_type.to_owned(),
        }),
        now_ms: chrono::Utc::now().timestamp_millis(),
        quota_bytes: limits
            .quota_bytes
            .map(|q| i64::try_from(q).unwrap_or(i64::MAX)),
    };
    let record = match state.store().register_media(&new).await {
        Ok(record) => record,
        Err(e) => {
            media.backend().discard(staged).await;
            return Err(e.into());
        }
    };
    // Registered first, visible second: a sweep that deleted these bytes before the
    // registration is healed by this write (flow/media.rs in the store explains the order).
    media
        .backend()
        .commit(staged)
        .await
        .map_err(|e| media_error(e, false))?;
    Ok(record.attachment())
}

/// The body's chunks, ending in an error when none comes for `idle` (and flagging why).
fn idle_bounded<S>(
    body: S,
    idle: Duration,
    timed_out: Arc<AtomicBool>,
) -> impl Stream<Item = Result<Bytes, String>> + Send
where
    S: Stream<Item = Result<Bytes, axum::Error>> + Send + Unpin + 'static,
{
    futures::stream::unfold(Some(body), move |state| {
        let timed_out = timed_out.clone();
        async move {
            let mut body = state?;
            match tokio::time::timeout(idle, body.next()).await {
                Ok(Some(Ok(chunk))) => Some((Ok(chunk), Some(body))),
                Ok(Some(Err(e))) => Some((Err(e.to_string()), None)),
                Ok(None) => None,
                Err(_) => {
                    timed_out.store(true, Ordering::Relaxed);
                    Some((Err("no byte of the body came in time".to_owned()), None))
                }
            }
        }
    })
}
