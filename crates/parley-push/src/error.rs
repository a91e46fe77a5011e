//! The one error type of the crate.

/// Why a key, a target, a payload or an authorization was refused, or why encryption failed.
///
/// The texts name the part at fault but never a secret: they end up in logs.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PushError {
    /// A key or an auth secret does not decode, or is not a valid P-256 point or scalar.
    #[error("invalid key: {0}")]
    Key(&'static str),
    /// A Web Push subscription is malformed (its endpoint, `p256dh` or `auth`).
    #[error("invalid Web Push subscription: {0}")]
    Subscription(String),
    /// A push-gateway target is malformed (its URL, pushkey or app id).
    #[error("invalid push gateway target: {0}")]
    Target(String),
    /// A plaintext is longer than every push service is sure to take.
    #[error("payload of {len} bytes is over the limit of {max} bytes")]
    PayloadTooLarge { len: usize, max: usize },
    /// The cipher refused to seal a record; only a plaintext beyond AES-GCM's bounds would.
    #[error("cannot encrypt: {0}")]
    Encrypt(&'static str),
    /// A Web Push message does not decrypt: wrong keys, a tampered byte, a malformed header.
    #[error("cannot decrypt: {0}")]
    Decrypt(&'static str),
    /// A VAPID authorization cannot be made or does not verify.
    #[error("VAPID: {0}")]
    Vapid(String),
    /// A `Topic` header value is not at most 32 characters of the base64url alphabet.
    #[error("invalid topic: {0}")]
    Topic(&'static str),
}
