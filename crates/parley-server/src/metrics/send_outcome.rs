//! The outcome label of `parley_sends_total`: what became of one send request.

use crate::error::ApiError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOutcome {
    /// A new message was committed.
    Written,
    /// The request key was known: the earlier outcome was answered again (`dup: true`).
    Replayed,
    /// The request key was used for a different request (409).
    Mismatch,
    /// The sender is not a member of the conversation, or may not send there (404, 403).
    Refused,
    /// Over the device's rate (429); nothing was written.
    RateLimited,
    /// Refused at the edge: malformed, oversized or of the wrong media type (400, 413, 415).
    Invalid,
    /// The store was unreachable or did not confirm the commit (503).
    Unavailable,
}

impl SendOutcome {
    pub const ALL: [Self; 7] = [
        Self::Written,
        Self::Replayed,
        Self::Mismatch,
        Self::Refused,
        Self::RateLimited,
        Self::Invalid,
        Self::Unavailable,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Written => "written",
            Self::Replayed => "replayed",
            Self::Mismatch => "mismatch",
            Self::Refused => "refused",
            Self::RateLimited => "rate_limited",
            Self::Invalid => "invalid",
            Self::Unavailable => "unavailable",
        }
    }

    pub fn label(self) -> super::Label {
        [("outcome", self.as_str())]
    }

    /// The outcome of a send that ended in `error`.
    pub fn of_error(error: &ApiError) -> Self {
        match error {
            ApiError::IdempotencyMismatch => Self::Mismatch,
            ApiError::RateLimited { .. } => Self::RateLimited,
            ApiError::OutcomeUnknown { .. } | ApiError::Unavailable { .. } => Self::Unavailable,
            ApiError::BadRequest(_)
            | ApiError::UnsupportedMediaType(_)
            | ApiError::BodyTooLarge { .. }
            | ApiError::RequestTooLarge { .. } => Self::Invalid,
            // Membership, permissions and every other business refusal.
            _ => Self::Refused,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_map_to_their_outcome() {
        assert_eq!(
            SendOutcome::of_error(&ApiError::IdempotencyMismatch),
            SendOutcome::Mismatch
        );
        assert_eq!(
            SendOutcome::of_error(&ApiError::RateLimited { retry_after_ms: 5 }),
            SendOutcome::RateLimited
        );
        assert_eq!(
            SendOutcome::of_error(&ApiError::NotMember),
            SendOutcome::Refused
        );
        assert_eq!(
            SendOutcome::of_error(&ApiError::BodyTooLarge { len: 9, max: 8 }),
            SendOutcome::Invalid
        );
    }
}
