//! Request bodies: read under the configured byte limit, then parsed as JSON in two steps.
//!
//! The order follows SPEC §6's precedence. The extractor runs after authentication (401), then
//! enforces the request limit (413) before any parsing: a body not declared `application/json`
//! is refused (415, at the rank of 400), then malformed JSON (400). Handlers then look at the
//! loose JSON value for limits that outrank parse errors, such as an oversized message body
//! (413), before the strict typed parse that rejects unknown, duplicate and missing fields (400).

use axum::body::Body;
use axum::extract::{FromRequest, Request};
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use axum::http::HeaderMap;
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::ApiError;
use crate::state::AppState;

/// A JSON request body that fit within `request_bytes_max` and is well-formed JSON.
#[derive(Debug, Clone)]
pub struct JsonBody {
    bytes: Bytes,
    value: Value,
}

impl JsonBody {
    /// Parses bytes already read, so the limit check stays separate from parsing.
    pub fn from_bytes(bytes: Bytes) -> Result<Self, ApiError> {
        let value = serde_json::from_slice(&bytes)
            .map_err(|e| ApiError::bad_request(format!("malformed JSON: {e}")))?;
        Ok(Self { bytes, value })
    }

    /// The loose value, for checks that must come before strict parsing.
    pub fn value(&self) -> &Value {
        &self.value
    }

    /// The strict typed parse. Parsing the original bytes rather than the loose value keeps
    /// duplicate keys visible, so a request naming a field twice is refused as conflicting.
    /// Only objects are requests: serde would otherwise accept a struct as a positional array.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, ApiError> {
        if !self.value.is_object() {
            return Err(ApiError::bad_request(
                "the request body must be a JSON object",
            ));
        }
        serde_json::from_slice(&self.bytes)
            .map_err(|e| ApiError::bad_request(format!("invalid request: {e}")))
    }
}

/// Refuses a declared length above the limit before reading anything.
fn check_content_length(headers: &HeaderMap, limit_bytes: usize) -> Result<(), ApiError> {
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    match declared {
        Some(len) if len > limit_bytes as u64 => {
            Err(ApiError::RequestTooLarge { max: limit_bytes })
        }
        _ => Ok(()),
    }
}

/// The one media type of request bodies.
const JSON_MEDIA_TYPE: &str = "application/json";

/// Refuses a body that is not declared JSON: a form or plain text would otherwise be parsed as
/// JSON anyway, and a browser sends those cross-origin without a preflight. Parameters such as
/// `charset=utf-8` are allowed; the media type is compared without regard to case (RFC 9110).
fn check_content_type(headers: &HeaderMap) -> Result<(), ApiError> {
    let declared = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok());
    let media_type = declared
        .map(|v| v.split(';').next().unwrap_or_default().trim())
        .unwrap_or_default();
    if media_type.eq_ignore_ascii_case(JSON_MEDIA_TYPE) {
        return Ok(());
    }
    Err(ApiError::UnsupportedMediaType(match declared {
        Some(_) => format!("request bodies must be {JSON_MEDIA_TYPE}"),
        None => format!("a request body needs Content-Type: {JSON_MEDIA_TYPE}"),
    }))
}

/// Reads a body, stopping as soon as it passes `limit_bytes`. Chunked bodies declare no length,
/// so the limit is enforced on what actually arrives.
pub async fn read_limited(body: Body, limit_bytes: usize) -> Result<Bytes, ApiError> {
    let mut stream = body.into_data_stream();
    let mut buf = BytesMut::new();
    while let Some(chunk) = stream.next().await {
        let chunk =
            chunk.map_err(|_| ApiError::bad_request("the request body could not be read"))?;
        if buf.len() + chunk.len() > limit_bytes {
            return Err(ApiError::RequestTooLarge { max: limit_bytes });
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf.freeze())
}

impl FromRequest<AppState> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let limit_bytes = state.config().limits.request_bytes_max;
        check_content_length(req.headers(), limit_bytes)?;
        // The type is judged after the length: 413 outranks 415, and a body without a declared
        // length is only known to be too large once read.
        let declared_json = check_content_type(req.headers());
        let bytes = read_limited(req.into_body(), limit_bytes).await?;
        declared_json?;
        Self::from_bytes(bytes)
    }
}

/// Largest body of an MLS write (docs/E2EE.md): a Commit that adds a hundred devices carries
/// their KeyPackages, and its Welcome the group's ratchet tree and a secret per device, which
/// together pass the limit of ordinary requests.
pub const MLS_REQUEST_BYTES_MAX: usize = 1024 * 1024;

/// A JSON body of an MLS write: the checks of [`JsonBody`] with [`MLS_REQUEST_BYTES_MAX`], or the
/// deployment's limit where that is larger.
#[derive(Debug, Clone)]
pub struct MlsJsonBody(pub JsonBody);

impl FromRequest<AppState> for MlsJsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let limit_bytes = state
            .config()
            .limits
            .request_bytes_max
            .max(MLS_REQUEST_BYTES_MAX);
        check_content_length(req.headers(), limit_bytes)?;
        let declared_json = check_content_type(req.headers());
        let bytes = read_limited(req.into_body(), limit_bytes).await?;
        declared_json?;
        Ok(Self(JsonBody::from_bytes(bytes)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use serde::Deserialize;

    fn chunked(parts: Vec<&'static str>) -> Body {
        let chunks = parts
            .into_iter()
            .map(|p| Ok::<_, std::io::Error>(Bytes::from_static(p.as_bytes())));
        Body::from_stream(futures::stream::iter(chunks))
    }

    #[tokio::test]
    async fn chunked_bodies_are_cut_at_the_limit() {
        let ok = read_limited(chunked(vec!["{\"a\":", "1}"]), 7).await;
        assert_eq!(ok.ok().as_deref(), Some(b"{\"a\":1}".as_slice()));
        let over = read_limited(chunked(vec!["{\"a\":", "12}"]), 7).await;
        assert_eq!(over.err().map(|e| e.code()), Some("REQUEST_TOO_LARGE"));
    }

    #[test]
    fn declared_lengths_over_the_limit_are_refused_up_front() {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_LENGTH, HeaderValue::from_static("4097"));
        assert!(check_content_length(&headers, 4096).is_err());
        headers.insert(CONTENT_LENGTH, HeaderValue::from_static("4096"));
        assert!(check_content_length(&headers, 4096).is_ok());
        assert!(check_content_length(&HeaderMap::new(), 4096).is_ok());
    }

    #[test]
    fn only_json_bodies_are_accepted() {
        let with = |value: &'static str| {
            let mut headers = HeaderMap::new();
            headers.insert(CONTENT_TYPE, HeaderValue::from_static(value));
            check_content_type(&headers).err().map(|e| e.code())
        };
        for ok in [
            "application/json",
            "application/json; charset=utf-8",
            "Application/JSON",
        ] {
            assert_eq!(with(ok), None, "{ok}");
        }
        for bad in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/jsonx",
            "",
        ] {
            assert_eq!(with(bad), Some("UNSUPPORTED_MEDIA_TYPE"), "{bad}");
        }
        assert_eq!(
            check_content_type(&HeaderMap::new())
                .err()
                .map(|e| e.code()),
            Some("UNSUPPORTED_MEDIA_TYPE")
        );
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Probe {
        a: i64,
    }

    #[test]
    fn malformed_unknown_and_duplicate_fields_are_bad_requests() {
        let parse = |s: &'static str| {
            JsonBody::from_bytes(Bytes::from_static(s.as_bytes())).and_then(|b| b.parse::<Probe>())
        };
        assert_eq!(parse("{\"a\":1}").ok().map(|p| p.a), Some(1));
        for bad in ["", "{", "{\"a\":1,\"b\":2}", "{\"a\":1,\"a\":2}", "[1]"] {
            assert_eq!(
                parse(bad).err().map(|e| e.code()),
                Some("BAD_REQUEST"),
                "{bad}"
            );
        }
    }
}
