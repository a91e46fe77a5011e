//! What a push service's or gateway's status code means for the target and the message.

/// What to do after one delivery attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The service took the message.
    Delivered,
    /// The subscription no longer exists (404, 410): drop the target, never retry.
    Gone,
    /// The service is overloaded or failing (429, 5xx): try again later, not before `after_ms`
    /// when it said so in `Retry-After`.
    Retry { after_ms: Option<u64> },
    /// The service refused this message for good (413, other 4xx, an unexpected status): drop
    /// the message, keep the target.
    Refused,
}

/// The outcome of an answer with `status` and, if any, its `Retry-After` header.
///
/// `Retry-After` is read in its delay-seconds form only; the HTTP-date form gives `None`, and
/// the server falls back on its own backoff.
pub fn classify(status: u16, retry_after: Option<&str>) -> Outcome {
    match status {
        200..=299 => Outcome::Delivered,
        404 | 410 => Outcome::Gone,
        429 | 500..=599 => Outcome::Retry {
            after_ms: retry_after
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(|s| s.saturating_mul(1000)),
        },
        _ => Outcome::Refused,
    }
}
