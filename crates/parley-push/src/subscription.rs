//! The two kinds of push target a device registers, and what they must look like before the
//! server stores them.

use url::Url;

use crate::{b64, ece, PushError};

/// Length of an endpoint or gateway URL, in bytes: real push endpoints are under 600, and the
/// server stores one per device.
pub const URL_LEN_MAX: usize = 2048;

/// Length of a gateway pushkey, in bytes: an APNs token is 64 hex digits, an FCM token about 160.
pub const PUSHKEY_LEN_MAX: usize = 512;

/// Length of a gateway app id, in bytes (reverse-DNS names such as `org.example.parley.ios`).
pub const APP_ID_LEN_MAX: usize = 64;

/// A browser's Web Push subscription, as `PushSubscription.toJSON()` gives it: the endpoint on
/// the browser vendor's push service and the browser's keys (`keys.p256dh`, `keys.auth`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebPushSubscription {
    pub endpoint: String,
    /// base64url of the browser's 65-byte uncompressed P-256 public key.
    pub p256dh: String,
    /// base64url of the browser's 16-byte auth secret.
    pub auth: String,
}

impl WebPushSubscription {
    /// Checks the endpoint (an `https` URL, or `http` when `allow_http`, for tests and local push
    /// services; no user info; at most [`URL_LEN_MAX`] bytes) and that both keys decode to what
    /// RFC 8291 needs.
    pub fn validate(&self, allow_http: bool) -> Result<(), PushError> {
        check_url(&self.endpoint, allow_http).map_err(PushError::Subscription)?;
        self.ua_public()?;
        self.auth_secret()?;
        Ok(())
    }

    /// The browser's public key, 65 bytes, checked to be a point on P-256.
    pub fn ua_public(&self) -> Result<Vec<u8>, PushError> {
        let bytes = b64::decode_lenient(&self.p256dh)
            .ok_or_else(|| PushError::Subscription("p256dh is not base64".into()))?;
        if ece::parse_point(&bytes).is_none() {
            return Err(PushError::Subscription(
                "p256dh is not an uncompressed P-256 point".into(),
            ));
        }
        Ok(bytes)
    }

    /// The browser's auth secret, 16 bytes.
    pub fn auth_secret(&self) -> Result<Vec<u8>, PushError> {
        let bytes = b64::decode_lenient(&self.auth)
            .ok_or_else(|| PushError::Subscription("auth is not base64".into()))?;
        if bytes.len() != 16 {
            return Err(PushError::Subscription("auth is not 16 bytes".into()));
        }
        Ok(bytes)
    }
}

/// A native app's registration with a Matrix push gateway: where the gateway listens, the
/// device's token there (`pushkey`), and the app it belongs to (`app_id`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GatewayTarget {
    /// The gateway's notify URL, `…/_matrix/push/v1/notify`.
    pub url: String,
    pub pushkey: String,
    pub app_id: String,
}

impl GatewayTarget {
    /// Checks the URL as [`WebPushSubscription::validate`] does, a pushkey of 1 to
    /// [`PUSHKEY_LEN_MAX`] bytes and an app id of 1 to [`APP_ID_LEN_MAX`] bytes.
    pub fn validate(&self, allow_http: bool) -> Result<(), PushError> {
        check_url(&self.url, allow_http).map_err(PushError::Target)?;
        if self.pushkey.is_empty() || self.pushkey.len() > PUSHKEY_LEN_MAX {
            return Err(PushError::Target(format!(
                "pushkey is not 1 to {PUSHKEY_LEN_MAX} bytes"
            )));
        }
        if self.app_id.is_empty() || self.app_id.len() > APP_ID_LEN_MAX {
            return Err(PushError::Target(format!(
                "app_id is not 1 to {APP_ID_LEN_MAX} bytes"
            )));
        }
        Ok(())
    }
}

/// A URL the server may POST to on a device's word: absolute, `https` (or `http` when allowed),
/// with a host, without credentials that would end up in logs and requests.
fn check_url(text: &str, allow_http: bool) -> Result<Url, String> {
    if text.len() > URL_LEN_MAX {
        return Err(format!("URL longer than {URL_LEN_MAX} bytes"));
    }
    let url = Url::parse(text).map_err(|e| format!("not a URL: {e}"))?;
    match url.scheme() {
        "https" => {}
        "http" if allow_http => {}
        "http" => return Err("URL is http, not https".into()),
        _ => return Err("URL is not https".into()),
    }
    if url.host().is_none() {
        return Err("URL has no host".into());
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("URL carries user info".into());
    }
    Ok(url)
}
