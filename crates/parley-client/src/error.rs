//! Errors of the SDK: the server's stable error codes, kept apart from transport failures so a
//! caller can tell "refused" from "unknown outcome".

use parley_wire::{ErrorCode, FrameError};

/// The stable error codes of SPEC §6, so callers and tests compare against names, not literals.
pub use parley_wire::code;

/// The status of a code this SDK does not know: a server-side refusal that is neither retried
/// nor mistaken for a client mistake.
const STATUS_UNKNOWN_CODE: u16 = 500;

/// Everything a call of the SDK can fail with. New kinds of failure may be added, so a `match`
/// on it ends with a wildcard arm.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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
    /// The WebSocket could not be opened, or it dropped before the answer came: the request may
    /// or may not have been applied.
    #[error("WebSocket unavailable: {reason}")]
    Disconnected { reason: String },
    /// No answer on the WebSocket within the configured time: the request may or may not have
    /// been applied.
    #[error("no WebSocket answer within {waited_ms} ms")]
    NoAnswer { waited_ms: u64 },
    /// A WebSocket frame from the server that does not have the documented shape. The reason
    /// names the position, never the content, so message bodies stay out of logs.
    #[error("cannot decode a WebSocket frame: {reason}")]
    BadFrame { reason: String },
    /// The retry budget ran out while a retry waited for its answer: the request may or may
    /// not have been applied. Resending it later with the same request key is still safe.
    #[error("no answer within the retry budget ({attempts} attempts in {waited_ms} ms)")]
    RetryBudgetSpent { waited_ms: u64, attempts: u32 },
    /// The realtime session has stopped for good; nothing more is sent on it.
    #[error("the realtime session has stopped: {reason}")]
    SessionStopped { reason: crate::ws::StopReason },
    /// A local file of an upload or a download could not be read or written.
    #[error("local file: {0}")]
    Io(String),
}

impl ClientError {
    /// The HTTP status of the answer, when there was one.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Api { status, .. }
            | Self::UnexpectedStatus { status, .. }
            | Self::Decode { status, .. } => Some(*status),
            Self::Timeout(_)
            | Self::Transport(_)
            | Self::InvalidUrl { .. }
            | Self::Disconnected { .. }
            | Self::NoAnswer { .. }
            | Self::RetryBudgetSpent { .. }
            | Self::BadFrame { .. }
            | Self::SessionStopped { .. }
            | Self::Io(_) => None,
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
            Self::Timeout(_)
            | Self::Transport(_)
            | Self::Disconnected { .. }
            | Self::NoAnswer { .. }
            | Self::RetryBudgetSpent { .. } => true,
            Self::Api { status, code, .. } => matches!(
                ErrorCode::parse(code),
                Some(c @ (ErrorCode::OutcomeUnknown | ErrorCode::Unavailable))
                    if *status == c.http_status()
            ),
            Self::UnexpectedStatus { .. }
            | Self::Decode { .. }
            | Self::InvalidUrl { .. }
            | Self::BadFrame { .. }
            | Self::SessionStopped { .. }
            | Self::Io(_) => false,
        }
    }

    /// The error without any answer body or decoder message, for logs: both may quote message
    /// text, which never goes to logs.
    pub(crate) fn redacted(&self) -> String {
        match self {
            Self::Decode { status, .. } => format!("cannot decode the HTTP {status} answer"),
            Self::UnexpectedStatus { status, .. } => {
                format!("HTTP {status} without an error envelope")
            }
            other => other.to_string(),
        }
    }

    /// The error a WebSocket `error` frame stands for. The frame has no HTTP status, so the
    /// status is the one SPEC §6 gives the code; that keeps [`ClientError::status`] and
    /// [`ClientError::is_retryable`] meaning the same over both transports.
    pub(crate) fn from_frame(code: String, message: String) -> Self {
        Self::Api {
            status: http_status_of(&code),
            code,
            message,
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

/// The HTTP status SPEC §6 gives an error code; 500 for a code this SDK does not know.
pub fn http_status_of(code: &str) -> u16 {
    ErrorCode::parse(code).map_or(STATUS_UNKNOWN_CODE, ErrorCode::http_status)
}

/// A server frame that does not decode; the reason names the position, never the content.
impl From<FrameError> for ClientError {
    fn from(e: FrameError) -> Self {
        Self::BadFrame { reason: e.reason }
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
    fn frame_errors_take_the_status_of_their_code() {
        let e = ClientError::from_frame(code::OUTCOME_UNKNOWN.into(), String::new());
        assert_eq!(e.status(), Some(503));
        assert!(e.is_retryable());
        let e = ClientError::from_frame(code::NOT_MEMBER.into(), String::new());
        assert_eq!((e.status(), e.code()), (Some(404), Some("NOT_MEMBER")));
        assert!(!e.is_retryable());
        assert_eq!(http_status_of("SOMETHING_NEW"), 500);
        assert!(ClientError::NoAnswer { waited_ms: 1 }.is_retryable());
        assert!(ClientError::Disconnected { reason: "x".into() }.is_retryable());
    }

    #[test]
    fn redacted_errors_leave_bodies_out() {
        let e = ClientError::Decode {
            status: 200,
            reason: "invalid type: string \"secret words\"".into(),
            body: r#"{"body":"secret words"}"#.into(),
        };
        assert!(!e.redacted().contains("secret"), "{}", e.redacted());
        let e = ClientError::UnexpectedStatus {
            status: 502,
            body: "secret words".into(),
        };
        assert!(!e.redacted().contains("secret"));
        assert_eq!(
            api(404, code::NOT_MEMBER).redacted(),
            api(404, code::NOT_MEMBER).to_string()
        );
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
