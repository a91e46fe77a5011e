//! VAPID (RFC 8292): the server's identity towards Web Push services.
//!
//! Each request to a push service carries `Authorization: vapid t=<JWT>, k=<public key>`. The
//! JWT is signed with ES256 by the server's long-lived P-256 key and names the push service's
//! origin (`aud`), an expiry (`exp`) and a contact (`sub`). A browser subscribed with the same
//! public key as its `applicationServerKey`, so its push service accepts messages signed by that
//! key alone.

use std::fmt;

use p256::ecdsa::signature::{Signer, Verifier};
use p256::ecdsa::{Signature, SigningKey, VerifyingKey};
use rand::rngs::OsRng;
use serde_json::Value;
use url::Url;

use crate::{b64, PushError};

/// The JOSE header of every VAPID token: RFC 8292 §2 fixes ES256.
const JWT_HEADER: &str = r#"{"typ":"JWT","alg":"ES256"}"#;

/// How far ahead a token's `exp` may lie, in seconds: RFC 8292 §2 lets a push service refuse
/// anything more than 24 hours out.
pub const EXP_AHEAD_S_MAX: u64 = 24 * 60 * 60;

/// Length of an `Authorization` value worth parsing, in bytes: a real one is about 300, and the
/// receiver should not decode megabytes of base64 for a stranger.
const AUTHORIZATION_LEN_MAX: usize = 4096;

/// The server's VAPID key: a P-256 ECDSA signing key.
///
/// Its [`to_base64`](Self::to_base64) form is the private scalar and is stored in the server's
/// database; [`public_key`](Self::public_key) is what browsers get as `applicationServerKey`.
#[derive(Clone)]
pub struct VapidKey {
    key: SigningKey,
}

impl VapidKey {
    /// A new key from the OS random generator.
    pub fn generate() -> Self {
        Self {
            key: SigningKey::random(&mut OsRng),
        }
    }

    /// The key from its stored form: base64url (padding optional) of the 32-byte private scalar.
    pub fn from_base64(text: &str) -> Result<Self, PushError> {
        let bytes = b64::decode_lenient(text).ok_or(PushError::Key("VAPID key is not base64"))?;
        if bytes.len() != 32 {
            return Err(PushError::Key("VAPID key is not 32 bytes"));
        }
        let key = SigningKey::from_slice(&bytes)
            .map_err(|_| PushError::Key("VAPID key is not a P-256 scalar"))?;
        Ok(Self { key })
    }

    /// The stored form: base64url without padding of the 32-byte private scalar.
    pub fn to_base64(&self) -> String {
        b64::encode(&self.key.to_bytes())
    }

    /// base64url without padding of the 65-byte uncompressed public point, the
    /// `applicationServerKey` a browser subscribes with and the `k` of every authorization.
    pub fn public_key(&self) -> String {
        b64::encode(self.key.verifying_key().to_encoded_point(false).as_bytes())
    }

    /// The `Authorization` header value for a request to `endpoint`: `vapid t=<JWT>, k=<key>`.
    ///
    /// `subject` is the contact a push service may write to (RFC 8292 §2.1: a `mailto:` or an
    /// `https:` URI; Apple's service refuses anything else). `expires_unix_s` must be in the
    /// future and, for most services, at most 24 hours ahead.
    pub fn authorization(
        &self,
        endpoint: &str,
        subject: &str,
        expires_unix_s: u64,
    ) -> Result<String, PushError> {
        if subject.is_empty() {
            return Err(PushError::Vapid("empty subject".into()));
        }
        let claims = serde_json::json!({
            "aud": origin(endpoint)?,
            "exp": expires_unix_s,
            "sub": subject,
        });
        let signing_input = format!(
            "{}.{}",
            b64::encode(JWT_HEADER.as_bytes()),
            b64::encode(claims.to_string().as_bytes())
        );
        let signature: Signature = self.key.sign(signing_input.as_bytes());
        Ok(format!(
            "vapid t={signing_input}.{}, k={}",
            b64::encode(&signature.to_bytes()),
            self.public_key()
        ))
    }
}

/// Never prints the private scalar, only the public key.
impl fmt::Debug for VapidKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VapidKey")
            .field("public_key", &self.public_key())
            .finish_non_exhaustive()
    }
}

/// Checks an `Authorization` header value as a push service does for a request to `endpoint`,
/// and answers its `k`, the sender's public key as written.
///
/// The token must be ES256, signed by `k`, with `aud` the endpoint's origin and `exp` after
/// `now_unix_s` but at most 24 hours ahead (RFC 8292 §2).
pub fn verify_authorization(
    header: &str,
    endpoint: &str,
    now_unix_s: u64,
) -> Result<String, PushError> {
    let refuse = |why: &str| PushError::Vapid(why.to_owned());
    if header.len() > AUTHORIZATION_LEN_MAX {
        return Err(refuse("authorization too long"));
    }
    let (token, k) = parse_header(header)?;

    let key_bytes = b64::decode_lenient(k).ok_or_else(|| refuse("k is not base64"))?;
    if key_bytes.len() != 65 || key_bytes[0] != 0x04 {
        return Err(refuse("k is not an uncompressed P-256 point"));
    }
    let key =
        VerifyingKey::from_sec1_bytes(&key_bytes).map_err(|_| refuse("k is not a P-256 point"))?;

    let mut parts = token.split('.');
    let (Some(header_part), Some(claims_part), Some(signature_part), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(refuse("t is not a JWS in compact form"));
    };
    let jose = json_part(header_part).ok_or_else(|| refuse("JWT header is not JSON"))?;
    if jose.get("alg").and_then(Value::as_str) != Some("ES256") {
        return Err(refuse("JWT alg is not ES256"));
    }
    let signature = b64::decode_strict(signature_part)
        .and_then(|bytes| Signature::from_slice(&bytes).ok())
        .ok_or_else(|| refuse("JWT signature is not 64 bytes of r||s"))?;
    let signing_input = &token[..header_part.len() + 1 + claims_part.len()];
    key.verify(signing_input.as_bytes(), &signature)
        .map_err(|_| refuse("JWT signature does not verify against k"))?;

    let claims = json_part(claims_part).ok_or_else(|| refuse("JWT claims are not JSON"))?;
    if claims.get("aud").and_then(Value::as_str) != Some(origin(endpoint)?.as_str()) {
        return Err(refuse("aud is not the endpoint's origin"));
    }
    let exp = claims
        .get("exp")
        .and_then(Value::as_u64)
        .ok_or_else(|| refuse("exp is missing or not a whole number"))?;
    if exp <= now_unix_s {
        return Err(refuse("token expired"));
    }
    if exp > now_unix_s.saturating_add(EXP_AHEAD_S_MAX) {
        return Err(refuse("exp is more than 24 hours ahead"));
    }
    Ok(k.to_owned())
}

/// `scheme://host[:port]` of a push endpoint, the audience its service expects.
pub(crate) fn origin(endpoint: &str) -> Result<String, PushError> {
    let url = Url::parse(endpoint)
        .map_err(|e| PushError::Vapid(format!("endpoint is not a URL: {e}")))?;
    if !matches!(url.scheme(), "https" | "http") || url.host().is_none() {
        return Err(PushError::Vapid("endpoint is not an http(s) URL".into()));
    }
    Ok(url.origin().ascii_serialization())
}

/// Splits `vapid t=<token>, k=<key>` (parameters in any order, the scheme in any case).
fn parse_header(header: &str) -> Result<(&str, &str), PushError> {
    let refuse = |why: &str| PushError::Vapid(why.to_owned());
    let (scheme, params) = header
        .trim()
        .split_once(' ')
        .ok_or_else(|| refuse("authorization has no parameters"))?;
    if !scheme.eq_ignore_ascii_case("vapid") {
        return Err(refuse("authorization scheme is not vapid"));
    }
    let (mut token, mut key) = (None, None);
    for param in params.split(',') {
        let Some((name, value)) = param.split_once('=') else {
            return Err(refuse("authorization parameter without a value"));
        };
        match name.trim() {
            "t" => token = Some(value.trim()),
            "k" => key = Some(value.trim()),
            _ => {}
        }
    }
    match (token, key) {
        (Some(token), Some(key)) => Ok((token, key)),
        _ => Err(refuse("authorization lacks t or k")),
    }
}

/// One JSON object of a JWT, from its base64url form.
fn json_part(part: &str) -> Option<Value> {
    let bytes = b64::decode_strict(part)?;
    serde_json::from_slice::<Value>(&bytes)
        .ok()
        .filter(Value::is_object)
}
