//! Errors of the SDK: the server's stable error codes, kept apart from transport failures so a
//! caller can tell "refused" from "unknown outcome".

/// The stable error codes of SPEC §6, so callers and tests compare against names, not literals.
pub mod code {
    pub const BAD_REQUEST: &str = "BAD_REQUEST";
    pub const BODY_TOO_LARGE: &str = "BODY_TOO_LARGE";
    pub const REQUEST_TOO_LARGE: &str = "REQUEST_TOO_LARGE";
    pub const UNAUTHENTICATED: &str = "UNAUTHENTICATED";
    pub const NOT_MEMBER: &str = "NOT_MEMBER";
    pub const NOT_FOUND: &str = "NOT_FOUND";
    pub const FORBIDDEN: &str = "FORBIDDEN";
    pub const ALREADY_MEMBER: &str = "ALREADY_MEMBER";
    pub const ALREADY_EXISTS: &str = "ALREADY_EXISTS";
    pub const IDEMPOTENCY_MISMATCH: &str = "IDEMPOTENCY_MISMATCH";
    pub const RECALL_WINDOW_EXPIRED: &str = "RECALL_WINDOW_EXPIRED";
    pub const NOT_SENDER: &str = "NOT_SENDER";
    pub const EPOCH_CHANGED: &str = "EPOCH_CHANGED";
    pub const RATE_LIMITED: &str = "RATE_LIMITED";
    pub const OUTCOME_UNKNOWN: &str = "OUTCOME_UNKNOWN";
    pub const UNAVAILABLE: &str = "UNAVAILABLE";
}

/// HTTP status of the two answers that invite a retry with the same request key.
const STATUS_SERVICE_UNAVAILABLE: u16 = 503;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server understood the request and answered with a stable error code.
    #[error("HTTP {status} {code}: {message}")]
    Api {
        status: u16,
        code: String,
        message: String,
    },
    /// A non-success answer without the error envelope, e.g. from a proxy in front of the server.
    #[error("HTTP {status} without an error envelope: {body}")]
    UnexpectedStatus { status: u16, body: String },
    /// No answer within the configured timeout: the request may or may not have been applied.
    #[error("request timed out: {0}")]
    Timeout(#[source] reqwest::Error),
    /// The connection failed: the request may or may not have reached the server.
    #[error("transport error: {0}")]
    Transport(#[source] reqwest::Error),
    /// A success answer whose body does not have the documented shape.
    #[error("cannot decode the HTTP {status} answer ({reason}): {body}")]
    Decode {
        status: u16,
        reason: String,
        body: String,
    },
    /// The base URL cannot address the server's endpoints.
    #[error("invalid base URL {url:?}: {reason}")]
    InvalidUrl { url: String, reason: String },
}

impl ClientError {
    /// The HTTP status of the answer, when there was one.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Api { status, .. }
            | Self::UnexpectedStatus { status, .. }
            | Self::Decode { status, .. } => Some(*status),
            Self::Timeout(_) | Self::Transport(_) | Self::InvalidUrl { .. } => None,
        }
    }

    /// The stable error code of SPEC §6, when the server sent one.
    pub fn code(&self) -> Option<&str> {
        match self {
            Self::Api { code, .. } => Some(code),
            _ => None,
        }
    }

    /// Whether the outcome is unknown or nothing was written, so resending the same request key
    /// is both safe (idempotent) and useful. Refusals are final and are never retried.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Timeout(_) | Self::Transport(_) => true,
            Self::Api { status, code, .. } => {
                *status == STATUS_SERVICE_UNAVAILABLE
                    && (code == code::OUTCOME_UNKNOWN || code == code::UNAVAILABLE)
            }
            Self::UnexpectedStatus { .. } | Self::Decode { .. } | Self::InvalidUrl { .. } => false,
        }
    }

    /// Sorts a reqwest failure: a timeout leaves the outcome unknown just like a broken
    /// connection, but callers report the two differently.
    pub(crate) fn from_reqwest(e: reqwest::Error) -> Self {
        if e.is_timeout() {
            Self::Timeout(e)
        } else {
            Self::Transport(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(status: u16, c: &str) -> ClientError {
        ClientError::Api {
            status,
            code: c.to_owned(),
            message: String::new(),
        }
    }

    #[test]
    fn only_unknown_outcomes_are_retryable() {
        assert!(api(503, code::OUTCOME_UNKNOWN).is_retryable());
        assert!(api(503, code::UNAVAILABLE).is_retryable());
        assert!(!api(409, code::IDEMPOTENCY_MISMATCH).is_retryable());
        assert!(!api(404, code::NOT_MEMBER).is_retryable());
        let odd = ClientError::UnexpectedStatus {
            status: 503,
            body: String::new(),
        };
        assert!(!odd.is_retryable());
    }

    #[test]
    fn status_and_code_are_exposed() {
        let e = api(404, code::NOT_MEMBER);
        assert_eq!(e.status(), Some(404));
        assert_eq!(e.code(), Some("NOT_MEMBER"));
        let e = ClientError::UnexpectedStatus {
            status: 502,
            body: "bad gateway".into(),
        };
        assert_eq!((e.status(), e.code()), (Some(502), None));
    }
}
