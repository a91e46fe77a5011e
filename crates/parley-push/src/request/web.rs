//! A Web Push request (RFC 8030 §5): the encrypted payload and the headers a push service reads.

use sha2::{Digest, Sha256};

use crate::request::PreparedPush;
use crate::{b64, ece, PushError, VapidKey, WebPushSubscription};

/// How long a VAPID token sent with a message stays valid, in seconds: half of RFC 8292's 24-hour
/// ceiling, so a push service whose clock is hours ahead or behind still takes it.
pub const VAPID_EXP_AHEAD_S: u64 = 12 * 60 * 60;

/// Length of a `Topic` header value, in characters (RFC 8030 §5.4).
pub const TOPIC_LEN_MAX: usize = 32;

/// How soon the push service should wake the device (RFC 8030 §5.3); low urgencies let a phone
/// on battery wait.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Urgency {
    VeryLow,
    Low,
    #[default]
    Normal,
    High,
}

impl Urgency {
    /// The `Urgency` header value.
    pub fn as_str(self) -> &'static str {
        match self {
            Urgency::VeryLow => "very-low",
            Urgency::Low => "low",
            Urgency::Normal => "normal",
            Urgency::High => "high",
        }
    }
}

/// A `Topic` for any key (a conversation id, say): the first 32 characters of base64url of its
/// SHA-256, which fit RFC 8030's alphabet and length whatever the key holds. A push service
/// keeps only the newest undelivered message of a topic, so a device offline for a while gets
/// one notification per conversation rather than one per message.
pub fn topic_for(key: &str) -> String {
    let mut topic = b64::encode(&Sha256::digest(key.as_bytes()));
    topic.truncate(TOPIC_LEN_MAX);
    topic
}

/// The request that delivers `payload` to the browser of `sub`: encrypted for it (RFC 8291),
/// signed with `vapid` (RFC 8292, valid [`VAPID_EXP_AHEAD_S`] from `now_unix_s`), kept by the
/// push service for at most `ttl_s` seconds.
///
/// `payload` may be at most [`ece::PAYLOAD_LEN_MAX`] bytes. The endpoint is not checked against
/// the server's https rule here: that is [`WebPushSubscription::validate`]'s, when it is stored.
#[allow(clippy::too_many_arguments)]
pub fn web_push(
    sub: &WebPushSubscription,
    vapid: &VapidKey,
    subject: &str,
    payload: &[u8],
    ttl_s: u32,
    urgency: Urgency,
    topic: Option<&str>,
    now_unix_s: u64,
) -> Result<PreparedPush, PushError> {
    if let Some(topic) = topic {
        check_topic(topic)?;
    }
    let body = ece::encrypt(payload, &sub.ua_public()?, &sub.auth_secret()?)?;
    let authorization = vapid.authorization(
        &sub.endpoint,
        subject,
        now_unix_s.saturating_add(VAPID_EXP_AHEAD_S),
    )?;
    let mut headers = vec![
        ("Content-Encoding", "aes128gcm".to_owned()),
        ("Content-Type", "application/octet-stream".to_owned()),
        ("TTL", ttl_s.to_string()),
        ("Urgency", urgency.as_str().to_owned()),
        ("Authorization", authorization),
    ];
    if let Some(topic) = topic {
        headers.push(("Topic", topic.to_owned()));
    }
    Ok(PreparedPush {
        url: sub.endpoint.clone(),
        headers,
        body,
    })
}

/// RFC 8030 §5.4: at most 32 characters of the URL- and filename-safe base64 alphabet.
fn check_topic(topic: &str) -> Result<(), PushError> {
    if topic.is_empty() || topic.len() > TOPIC_LEN_MAX {
        return Err(PushError::Topic("not 1 to 32 characters"));
    }
    if !topic
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(PushError::Topic("not the base64url alphabet"));
    }
    Ok(())
}
