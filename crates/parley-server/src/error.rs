//! The one error type of the HTTP edge and its mapping to the stable codes of SPEC §6.
//!
//! Every refusal the server sends is built from an `ApiError`: each variant names one code of
//! `parley_wire::ErrorCode`, which holds the code's status, and the body is
//! `parley_wire::ErrorBody` (`{"error": {"code": "...", "message": "..."}}`), the shape the SDK
//! reads.
//! Messages never carry message bodies, tokens or internal store details: those may reach logs
//! through `tracing`, never clients.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use parley_domain::Rejection;
use parley_store::StoreError;
use parley_wire::{ErrorBody, ErrorCode};

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Malformed JSON, an unknown or conflicting field, an invalid id or an empty body.
    #[error("{0}")]
    BadRequest(String),
    /// A request body that is not declared `application/json`.
    #[error("{0}")]
    UnsupportedMediaType(String),
    #[error("message body is {len} bytes; the limit is {max} bytes")]
    BodyTooLarge { len: usize, max: usize },
    #[error("request body exceeds the limit of {max} bytes")]
    RequestTooLarge { max: usize },
    #[error("missing, unknown or revoked token")]
    Unauthenticated,
    /// A login refused: an unknown user, a wrong password and a user without a password are
    /// one answer, so the answer does not tell which user ids exist.
    #[error("unknown user or wrong password")]
    BadCredentials,
    /// Never a member, or no such conversation (P10): one answer for both.
    #[error("not a member of this conversation")]
    NotMember,
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("already a member")]
    AlreadyMember,
    #[error("{0} already exists")]
    AlreadyExists(&'static str),
    #[error("this client_msg_id was used for a different request")]
    IdempotencyMismatch,
    #[error("the recall window has passed")]
    RecallWindowExpired,
    #[error("only the sender may recall or edit a message")]
    NotSender,
    /// The named message was recalled (an edit, a reaction, a reply or a thread reply).
    #[error("the message was recalled")]
    Recalled,
    #[error("{0}")]
    LimitReached(&'static str),
    /// Attachments (docs/MEDIA.md); each message says what was refused, never the bytes.
    #[error("the upload is larger than {max} bytes")]
    MediaTooLarge { max: u64 },
    #[error("the media quota of this user is used up")]
    QuotaExceeded,
    #[error("{0}")]
    MediaTypeMismatch(String),
    #[error("the image is {width}x{height} pixels, over the server's bounds")]
    ImageTooLarge { width: u32, height: u32 },
    #[error("the upload did not arrive whole; nothing was kept")]
    UploadIncomplete,
    #[error("the upload stalled or took too long; nothing was kept")]
    RequestTimeout,
    /// The file is `len` bytes; the range asked for lies outside it.
    #[error("the range lies outside the file of {len} bytes")]
    RangeNotSatisfiable { len: u64 },
    #[error("the cursor belongs to another epoch of this conversation")]
    EpochChanged,
    /// Over the device's rate; it may ask again after `retry_after_ms`.
    #[error("too many requests; retry in {retry_after_ms} ms")]
    RateLimited { retry_after_ms: u64 },
    #[error("method not allowed on this path")]
    MethodNotAllowed,
    /// The store did not confirm the commit. The detail is for logs only.
    #[error("the outcome of the write is unknown; retry with the same client_msg_id")]
    OutcomeUnknown { detail: String },
    /// The store could not be reached before anything was written. The detail is for logs only.
    #[error("the service is unavailable; retry later")]
    Unavailable { detail: String },
    /// An MLS message made in another epoch (docs/E2EE.md); the body carries the current epoch
    /// and the winning Commit's seq.
    #[error("the message was made in epoch {sent_in}; the conversation is at epoch {epoch}")]
    EpochConflict {
        sent_in: i64,
        epoch: i64,
        winning_seq: i64,
    },
    #[error("the conversation is end-to-end encrypted; post MLS messages instead")]
    EncryptedConversation,
    #[error("the conversation is not end-to-end encrypted")]
    NotEncrypted,
    /// This gateway does not hold its lease, so it accepts no WebSocket (chapter 10).
    #[error("this gateway does not hold its lease; connect to another gateway")]
    LeaseExpired,
}

impl ApiError {
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::BadRequest(message.into())
    }

    /// The current epoch and the winning Commit's seq of an `EPOCH_CONFLICT`.
    pub fn conflict(&self) -> Option<(i64, i64)> {
        match self {
            Self::EpochConflict {
                epoch, winning_seq, ..
            } => Some((*epoch, *winning_seq)),
            _ => None,
        }
    }

    /// The stable code of SPEC §6; `None` for the one answer outside its table, a method that
    /// a known path does not have.
    pub fn wire_code(&self) -> Option<ErrorCode> {
        Some(match self {
            Self::BadRequest(_) => ErrorCode::BadRequest,
            Self::UnsupportedMediaType(_) => ErrorCode::UnsupportedMediaType,
            Self::BodyTooLarge { .. } => ErrorCode::BodyTooLarge,
            Self::RequestTooLarge { .. } => ErrorCode::RequestTooLarge,
            Self::Unauthenticated | Self::BadCredentials => ErrorCode::Unauthenticated,
            Self::NotMember => ErrorCode::NotMember,
            Self::NotFound(_) => ErrorCode::NotFound,
            Self::Forbidden(_) => ErrorCode::Forbidden,
            Self::AlreadyMember => ErrorCode::AlreadyMember,
            Self::AlreadyExists(_) => ErrorCode::AlreadyExists,
            Self::IdempotencyMismatch => ErrorCode::IdempotencyMismatch,
            Self::RecallWindowExpired => ErrorCode::RecallWindowExpired,
            Self::NotSender => ErrorCode::NotSender,
            Self::Recalled => ErrorCode::Recalled,
            Self::LimitReached(_) => ErrorCode::LimitReached,
            Self::MediaTooLarge { .. } => ErrorCode::MediaTooLarge,
            Self::QuotaExceeded => ErrorCode::QuotaExceeded,
            Self::MediaTypeMismatch(_) => ErrorCode::MediaTypeMismatch,
            Self::ImageTooLarge { .. } => ErrorCode::ImageTooLarge,
            Self::UploadIncomplete => ErrorCode::UploadIncomplete,
            Self::RequestTimeout => ErrorCode::RequestTimeout,
            Self::RangeNotSatisfiable { .. } => ErrorCode::RangeNotSatisfiable,
            Self::EpochChanged => ErrorCode::EpochChanged,
            Self::RateLimited { .. } => ErrorCode::RateLimited,
            Self::MethodNotAllowed => return None,
            Self::OutcomeUnknown { .. } => ErrorCode::OutcomeUnknown,
            Self::Unavailable { .. } => ErrorCode::Unavailable,
            Self::LeaseExpired => ErrorCode::LeaseExpired,
            Self::EpochConflict { .. } => ErrorCode::EpochConflict,
            Self::EncryptedConversation => ErrorCode::EncryptedConversation,
            Self::NotEncrypted => ErrorCode::NotEncrypted,
        })
    }

    /// The stable code clients branch on; it never changes once published.
    pub fn code(&self) -> &'static str {
        self.wire_code()
            .map_or(METHOD_NOT_ALLOWED_CODE, ErrorCode::as_str)
    }

    /// How long a rate-limited caller waits before asking again; `None` for other refusals.
    pub fn retry_after_ms(&self) -> Option<u64> {
        match self {
            Self::RateLimited { retry_after_ms } => Some(*retry_after_ms),
            _ => None,
        }
    }

    pub fn status(&self) -> StatusCode {
        match self.wire_code() {
            // Every status of the table is a valid one; the fallback is never taken.
            Some(code) => StatusCode::from_u16(code.http_status())
                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            None => StatusCode::METHOD_NOT_ALLOWED,
        }
    }
}

/// The code of a 405, which SPEC §6's table does not list: the router answers it, never a
/// handler, so clients meet it only when calling a path with the wrong method.
const METHOD_NOT_ALLOWED_CODE: &str = "METHOD_NOT_ALLOWED";

impl From<Rejection> for ApiError {
    fn from(r: Rejection) -> Self {
        match r {
            Rejection::NotMember => Self::NotMember,
            Rejection::NotFound(what) => Self::NotFound(what.to_owned()),
            Rejection::Forbidden(why) => Self::Forbidden(why.to_owned()),
            Rejection::AlreadyMember => Self::AlreadyMember,
            Rejection::AlreadyExists(what) => Self::AlreadyExists(what),
            Rejection::IdempotencyMismatch => Self::IdempotencyMismatch,
            Rejection::RecallWindowExpired => Self::RecallWindowExpired,
            Rejection::NotSender => Self::NotSender,
            Rejection::EpochChanged => Self::EpochChanged,
            Rejection::BadRequest(why) => Self::BadRequest(why),
            Rejection::Recalled => Self::Recalled,
            Rejection::LimitReached(what) => Self::LimitReached(what),
            Rejection::QuotaExceeded => Self::QuotaExceeded,
            Rejection::EpochConflict {
                sent_in,
                epoch,
                winning_seq,
            } => Self::EpochConflict {
                sent_in,
                epoch,
                winning_seq,
            },
            Rejection::EncryptedConversation => Self::EncryptedConversation,
            Rejection::NotEncrypted => Self::NotEncrypted,
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Rejected(r) => r.into(),
            StoreError::Unavailable(detail) => Self::Unavailable { detail },
            StoreError::OutcomeUnknown(detail) => Self::OutcomeUnknown { detail },
            StoreError::Migration(detail) => Self::Unavailable {
                detail: format!("migration failed: {detail}"),
            },
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        match &self {
            Self::Unavailable { detail } => {
                tracing::warn!(code = self.code(), %detail, "store unavailable");
            }
            Self::OutcomeUnknown { detail } => {
                tracing::error!(code = self.code(), %detail, "commit outcome unknown");
            }
            _ => {}
        }
        let mut body = ErrorBody::new(self.code(), self.to_string());
        if let Some((epoch, winning_seq)) = self.conflict() {
            body.error.epoch = Some(epoch);
            body.error.winning_seq = Some(winning_seq);
        }
        let mut response = (self.status(), Json(body)).into_response();
        if let Self::RangeNotSatisfiable { len } = &self {
            if let Ok(v) = HeaderValue::from_str(&format!("bytes */{len}")) {
                response.headers_mut().insert(header::CONTENT_RANGE, v);
            }
        }
        if let Some(ms) = self.retry_after_ms() {
            // `Retry-After` counts whole seconds: rounded up, so a client that waits it is
            // never early.
            let seconds = ms.div_ceil(1_000).max(1);
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_the_status_of_the_contract() {
        let cases: Vec<(ApiError, &str, u16)> = vec![
            (ApiError::bad_request("x"), "BAD_REQUEST", 400),
            (
                ApiError::BodyTooLarge { len: 9, max: 6 },
                "BODY_TOO_LARGE",
                413,
            ),
            (
                ApiError::RequestTooLarge { max: 4096 },
                "REQUEST_TOO_LARGE",
                413,
            ),
            (ApiError::Unauthenticated, "UNAUTHENTICATED", 401),
            (ApiError::BadCredentials, "UNAUTHENTICATED", 401),
            (ApiError::NotMember, "NOT_MEMBER", 404),
            (ApiError::NotFound("user".into()), "NOT_FOUND", 404),
            (ApiError::Forbidden("role".into()), "FORBIDDEN", 403),
            (ApiError::AlreadyMember, "ALREADY_MEMBER", 409),
            (ApiError::AlreadyExists("user"), "ALREADY_EXISTS", 409),
            (ApiError::IdempotencyMismatch, "IDEMPOTENCY_MISMATCH", 409),
            (ApiError::RecallWindowExpired, "RECALL_WINDOW_EXPIRED", 409),
            (ApiError::NotSender, "NOT_SENDER", 403),
            (ApiError::EpochChanged, "EPOCH_CHANGED", 409),
            (
                ApiError::RateLimited { retry_after_ms: 1 },
                "RATE_LIMITED",
                429,
            ),
            (
                ApiError::UnsupportedMediaType("text/plain".into()),
                "UNSUPPORTED_MEDIA_TYPE",
                415,
            ),
            (
                ApiError::OutcomeUnknown { detail: "x".into() },
                "OUTCOME_UNKNOWN",
                503,
            ),
            (
                ApiError::Unavailable { detail: "x".into() },
                "UNAVAILABLE",
                503,
            ),
            (ApiError::LeaseExpired, "LEASE_EXPIRED", 503),
            (ApiError::MediaTooLarge { max: 1 }, "MEDIA_TOO_LARGE", 413),
            (ApiError::QuotaExceeded, "QUOTA_EXCEEDED", 413),
            (
                ApiError::MediaTypeMismatch("x".into()),
                "MEDIA_TYPE_MISMATCH",
                415,
            ),
            (
                ApiError::ImageTooLarge {
                    width: 1,
                    height: 1,
                },
                "IMAGE_TOO_LARGE",
                422,
            ),
            (ApiError::UploadIncomplete, "UPLOAD_INCOMPLETE", 400),
            (ApiError::RequestTimeout, "REQUEST_TIMEOUT", 408),
            (
                ApiError::RangeNotSatisfiable { len: 1 },
                "RANGE_NOT_SATISFIABLE",
                416,
            ),
        ];
        for (err, code, status) in cases {
            assert_eq!(err.code(), code);
            assert_eq!(err.status().as_u16(), status, "{code}");
        }
        let wrong_method = ApiError::MethodNotAllowed;
        assert_eq!(
            (wrong_method.code(), wrong_method.status().as_u16()),
            ("METHOD_NOT_ALLOWED", 405)
        );
    }

    #[test]
    fn store_errors_map_by_kind() {
        let map = |e: StoreError| ApiError::from(e).code();
        assert_eq!(map(Rejection::NotMember.into()), "NOT_MEMBER");
        assert_eq!(map(Rejection::NotFound("user").into()), "NOT_FOUND");
        assert_eq!(map(Rejection::EpochChanged.into()), "EPOCH_CHANGED");
        assert_eq!(
            map(Rejection::BadRequest("bad".into()).into()),
            "BAD_REQUEST"
        );
        assert_eq!(map(StoreError::Unavailable("down".into())), "UNAVAILABLE");
        assert_eq!(
            map(StoreError::OutcomeUnknown("reset".into())),
            "OUTCOME_UNKNOWN"
        );
        assert_eq!(map(StoreError::Migration("v3".into())), "UNAVAILABLE");
    }

    #[test]
    fn internal_details_stay_out_of_client_messages() {
        let err = ApiError::from(StoreError::Unavailable(
            "connection to 10.0.0.7 refused".into(),
        ));
        assert!(!err.to_string().contains("10.0.0.7"));
    }

    #[test]
    fn retry_after_is_whole_seconds_rounded_up() {
        let header_of = |ms| {
            ApiError::RateLimited { retry_after_ms: ms }
                .into_response()
                .headers()
                .get(header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        assert_eq!(header_of(1).as_deref(), Some("1"));
        assert_eq!(header_of(1_000).as_deref(), Some("1"));
        assert_eq!(header_of(1_001).as_deref(), Some("2"));
        assert_eq!(header_of(0).as_deref(), Some("1"));
        assert!(ApiError::NotMember
            .into_response()
            .headers()
            .get(header::RETRY_AFTER)
            .is_none());
    }

    #[tokio::test]
    async fn responses_use_the_error_envelope() {
        let response = ApiError::NotMember.into_response();
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap_or_default();
        let json: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
        assert_eq!(json["error"]["code"], "NOT_MEMBER");
        assert!(json["error"]["message"].is_string());
    }
}
