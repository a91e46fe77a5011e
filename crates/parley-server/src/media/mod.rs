//! Attachments at the edge (docs/MEDIA.md): uploads streamed into the media backend and
//! registered in the store, downloads served to those who may read them, signed URLs, and
//! the sweep of media no message names. The handlers are in `routes::media`.

pub mod range;
pub mod signed;
pub mod sweep;
pub mod upload;

use std::sync::Arc;

use parley_media::{MediaBackend, MediaError};
use tokio::sync::OnceCell;

use crate::error::ApiError;

/// The media backend of a server and the key of its signed URLs, which every gateway shares
/// through the store (read once, on first use).
pub struct Media {
    backend: MediaBackend,
    url_key: OnceCell<Arc<[u8]>>,
}

impl Media {
    pub fn new(backend: MediaBackend) -> Self {
        Self {
            backend,
            url_key: OnceCell::new(),
        }
    }

    pub fn backend(&self) -> &MediaBackend {
        &self.backend
    }

    /// The HMAC key of signed URLs: the store's shared key `media-url`, made by the first
    /// gateway that asks.
    pub async fn url_key(&self, store: &dyn parley_store::Store) -> Result<Arc<[u8]>, ApiError> {
        self.url_key
            .get_or_try_init(|| async {
                let candidate = hex::encode(rand::random::<[u8; 32]>());
                let key = store.shared_key(signed::KEY_NAME, &candidate).await?;
                Ok::<_, ApiError>(Arc::from(key.into_bytes()))
            })
            .await
            .cloned()
    }
}

/// The answer to a failed media operation. IO and object-store failures are the server's and
/// are logged without the bytes or the file's name.
pub fn media_error(e: MediaError, timed_out: bool) -> ApiError {
    match e {
        MediaError::TooLarge { max } => ApiError::MediaTooLarge { max },
        MediaError::NotWhatWasDeclared { declared, sniffed } => ApiError::MediaTypeMismatch(
            format!("the upload was declared {declared} but its bytes are {sniffed}"),
        ),
        MediaError::ImageTooLarge { width, height } => ApiError::ImageTooLarge { width, height },
        MediaError::Body(_) if timed_out => ApiError::RequestTimeout,
        MediaError::Body(detail) if detail.contains("did not arrive in time") => {
            ApiError::RequestTimeout
        }
        MediaError::Body(_) => ApiError::UploadIncomplete,
        other => ApiError::Unavailable {
            detail: format!("media storage: {other}"),
        },
    }
}
