//! The one error type of the HTTP edge and its mapping to the stable codes of SPEC §6.
//!
//! Every refusal the server sends is built here, so the JSON shape
//! `{"error": {"code": "...", "message": "..."}}` and the status of each code live in one place.
//! Messages never carry message bodies, tokens or internal store details: those may reach logs
//! through `tracing`, never clients.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use parley_domain::Rejection;
use parley_store::StoreError;
use serde::Serialize;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Malformed JSON, an unknown or conflicting field, an invalid id or an empty body.
    #[error("{0}")]
    BadRequest(String),
    #[error("message body is {len} bytes; the limit is {max} bytes")]
    BodyTooLarge { len: usize, max: usize },
    #[error("request body exceeds the limit of {max} bytes")]
    RequestTooLarge { max: usize },
    #[error("missing, unknown or revoked token")]
    Unauthenticated,
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
    #[error("only the sender may recall a message")]
    NotSender,
    #[error("the cursor belongs to another epoch of this conversation")]
    EpochChanged,
    #[error("too many requests; slow down")]
    RateLimited,
    #[error("method not allowed on this path")]
    MethodNotAllowed,
    /// The store did not confirm the commit. The detail is for logs only.
    #[error("the outcome of the write is unknown; retry with the same client_msg_id")]
    OutcomeUnknown { detail: String },
    /// The store could not be reached before anything was written. The detail is for logs only.
    #[error("the service is unavailable; retry later")]
    Unavailable { detail: String },
}

impl ApiError {
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::BadRequest(message.into())
    }

    /// The stable code clients branch on; it never changes once published.
    pub fn code(&self) -> &'static str {
        match self {
            Self::BadRequest(_) => "BAD_REQUEST",
            Self::BodyTooLarge { .. } => "BODY_TOO_LARGE",
            Self::RequestTooLarge { .. } => "REQUEST_TOO_LARGE",
            Self::Unauthenticated => "UNAUTHENTICATED",
            Self::NotMember => "NOT_MEMBER",
            Self::NotFound(_) => "NOT_FOUND",
            Self::Forbidden(_) => "FORBIDDEN",
            Self::AlreadyMember => "ALREADY_MEMBER",
            Self::AlreadyExists(_) => "ALREADY_EXISTS",
            Self::IdempotencyMismatch => "IDEMPOTENCY_MISMATCH",
            Self::RecallWindowExpired => "RECALL_WINDOW_EXPIRED",
            Self::NotSender => "NOT_SENDER",
            Self::EpochChanged => "EPOCH_CHANGED",
            Self::RateLimited => "RATE_LIMITED",
            Self::MethodNotAllowed => "METHOD_NOT_ALLOWED",
            Self::OutcomeUnknown { .. } => "OUTCOME_UNKNOWN",
            Self::Unavailable { .. } => "UNAVAILABLE",
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            Self::BadRequest(_) => StatusCode::BAD_REQUEST,
            Self::BodyTooLarge { .. } | Self::RequestTooLarge { .. } => {
                StatusCode::PAYLOAD_TOO_LARGE
            }
            Self::Unauthenticated => StatusCode::UNAUTHORIZED,
            Self::NotMember | Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::Forbidden(_) | Self::NotSender => StatusCode::FORBIDDEN,
            Self::AlreadyMember
            | Self::AlreadyExists(_)
            | Self::IdempotencyMismatch
            | Self::RecallWindowExpired
            | Self::EpochChanged => StatusCode::CONFLICT,
            Self::RateLimited => StatusCode::TOO_MANY_REQUESTS,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::OutcomeUnknown { .. } | Self::Unavailable { .. } => {
                StatusCode::SERVICE_UNAVAILABLE
            }
        }
    }
}

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

#[derive(Serialize)]
struct ErrorBody<'a> {
    error: ErrorDetail<'a>,
}

#[derive(Serialize)]
struct ErrorDetail<'a> {
    code: &'a str,
    message: String,
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
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code(),
                message: self.to_string(),
            },
        };
        (self.status(), Json(body)).into_response()
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
            (ApiError::NotMember, "NOT_MEMBER", 404),
            (ApiError::NotFound("user".into()), "NOT_FOUND", 404),
            (ApiError::Forbidden("role".into()), "FORBIDDEN", 403),
            (ApiError::AlreadyMember, "ALREADY_MEMBER", 409),
            (ApiError::AlreadyExists("user"), "ALREADY_EXISTS", 409),
            (ApiError::IdempotencyMismatch, "IDEMPOTENCY_MISMATCH", 409),
            (ApiError::RecallWindowExpired, "RECALL_WINDOW_EXPIRED", 409),
            (ApiError::NotSender, "NOT_SENDER", 403),
            (ApiError::EpochChanged, "EPOCH_CHANGED", 409),
            (ApiError::RateLimited, "RATE_LIMITED", 429),
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
        ];
        for (err, code, status) in cases {
            assert_eq!(err.code(), code);
            assert_eq!(err.status().as_u16(), status, "{code}");
        }
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
