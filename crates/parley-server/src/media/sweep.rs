//! The media sweep (docs/MEDIA.md): uploads no message names are deleted after their grace
//! period, and blobs no upload names are deleted from the backend, on the retention task's
//! interval. Each round is bounded; a round that found a full batch runs again at once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parley_media::{BlobId, MediaBackend};
use parley_store::{BlobRemover, MediaSweep, Store, StoreError};
use tokio_util::sync::CancellationToken;

/// Uploads and blobs one round deletes at most.
pub const SWEEP_BATCH_LEN_MAX: u32 = 500;

/// One round: uploads last uploaded more than `grace` ago and named by no message, then the
/// blobs no upload names.
pub async fn sweep_once(
    store: &dyn Store,
    backend: &MediaBackend,
    grace: Duration,
) -> Result<MediaSweep, StoreError> {
    let grace_ms = i64::try_from(grace.as_millis()).unwrap_or(i64::MAX);
    let before_ms = chrono::Utc::now()
        .timestamp_millis()
        .saturating_sub(grace_ms);
    let backend = backend.clone();
    let remover = move |sha256: String| -> BlobRemover {
        let backend = backend.clone();
        Box::new(move || {
            Box::pin(async move {
                let Some(id) = BlobId::parse(&sha256) else {
                    return Ok(());
                };
                backend
                    .delete(&id)
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            })
        })
    };
    store
        .sweep_media(before_ms, SWEEP_BATCH_LEN_MAX, &remover)
        .await
}

/// Sweeps every `interval` until `stop`.
pub async fn run(
    store: Arc<dyn Store>,
    backend: MediaBackend,
    grace: Duration,
    interval: Duration,
    stop: CancellationToken,
) {
    loop {
        let started = Instant::now();
        match sweep_once(&*store, &backend, grace).await {
            Ok(report) if report.media_deleted + report.blobs_deleted > 0 => {
                tracing::info!(
                    media = report.media_deleted,
                    blobs = report.blobs_deleted,
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "media sweep"
                );
                let full = report.media_deleted >= u64::from(SWEEP_BATCH_LEN_MAX)
                    || report.blobs_deleted >= u64::from(SWEEP_BATCH_LEN_MAX);
                if full && !stop.is_cancelled() {
                    continue;
                }
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "media sweep failed; retried next round"),
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(interval) => {}
        }
    }
}
