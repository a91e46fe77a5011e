//! Offline notifications (docs/PUSH.md): a device's push registration, notification levels and
//! settings, and the payload a Web Push service worker receives.

use serde::{Deserialize, Serialize};

/// The keys of a Web Push subscription, as `PushSubscription.toJSON()` gives them.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebPushKeys {
    /// The browser's P-256 public key, base64url.
    pub p256dh: String,
    /// The browser's 16-byte authentication secret, base64url.
    pub auth: String,
}

/// `PUT /v1/devices/me/push`: either a Web Push subscription (`endpoint` and `keys`, the
/// browser's `PushSubscription.toJSON()` as it is) or a push-gateway target (`url`, `pushkey`,
/// `app_id`, the Matrix push-gateway model). Never both.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PushRegistration {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// Sent by browsers; the server does not use it.
    #[serde(
        default,
        rename = "expirationTime",
        skip_serializing_if = "Option::is_none"
    )]
    pub expiration_time: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keys: Option<WebPushKeys>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pushkey: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_id: Option<String>,
}

/// A device's push target as the API shows it: never the browser's keys.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushTargetInfo {
    /// `webpush` or `gateway`.
    pub kind: String,
    /// The subscription's endpoint or the gateway's URL.
    pub endpoint: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pushkey: Option<String>,
}

/// A member's notification level of one conversation: `all` (the default), `mentions`
/// (mentions of them and replies to their messages) or `none` (muted).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NotificationLevel {
    #[cfg_attr(feature = "openapi", schema(pattern = "^(all|mentions|none)$"))]
    pub level: String,
}

/// A user's notification settings.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NotificationSettings {
    /// Notifications carry no sender, no preview and no title.
    pub privacy: bool,
}

/// `GET /v1/push/vapid`: the key browsers subscribe with (`applicationServerKey`).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VapidPublicKey {
    /// The uncompressed P-256 public key, base64url without padding.
    pub public_key: String,
}

/// What a Web Push notification carries, encrypted (RFC 8291). Sender, preview and title are
/// absent in privacy mode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushPayload {
    pub conv_id: String,
    /// The latest message of the conversation this notification stands for.
    pub seq: i64,
    /// Unread messages of the conversation.
    pub unread: i64,
    /// Unread messages of all the user's conversations.
    pub badge: i64,
    /// `message`, `mention` or `reply`.
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
}
