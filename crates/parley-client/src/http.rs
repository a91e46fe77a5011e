//! The HTTP transport shared by the device and the admin client: base URL, bearer token,
//! timeouts, and the mapping of every answer to a typed value or a [`ClientError`].

use std::fmt;
use std::time::Duration;

use parley_wire::ErrorBody;
use reqwest::{Method, RequestBuilder, Response};
use serde::de::DeserializeOwned;
use url::Url;

use crate::error::ClientError;
use crate::retry::RetryPolicy;

/// Longest wait for a whole answer. Long enough for a loaded server, short enough that a send
/// whose connection hung is retried well within a user's patience.
pub const REQUEST_TIMEOUT_MS_DEFAULT: u64 = 10_000;
/// Longest wait for a TCP connection; a refused or unroutable server fails fast.
pub const CONNECT_TIMEOUT_MS_DEFAULT: u64 = 3_000;
/// Most bytes of an unexpected answer kept in an error, so a large HTML page cannot flood logs.
const ERROR_BODY_BYTES_MAX: usize = 2_048;

/// Timeouts and retry behaviour of a client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientOptions {
    pub request_timeout_ms: u64,
    pub connect_timeout_ms: u64,
    /// Used by [`crate::Client::send_with_retry`].
    pub retry: RetryPolicy,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            request_timeout_ms: REQUEST_TIMEOUT_MS_DEFAULT,
            connect_timeout_ms: CONNECT_TIMEOUT_MS_DEFAULT,
            retry: RetryPolicy::default(),
        }
    }
}

#[derive(Clone)]
pub(crate) struct Http {
    client: reqwest::Client,
    base: Url,
    token: String,
}

impl fmt::Debug for Http {
    /// Leaves the token out: clients end up in logs and panic messages.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Http")
            .field("base", &self.base.as_str())
            .finish_non_exhaustive()
    }
}

/// `base_url` as the base of every endpoint: an absolute http(s) URL.
fn parse_base_url(base_url: &str) -> Result<Url, ClientError> {
    let invalid = |reason: String| ClientError::InvalidUrl {
        url: base_url.to_owned(),
        reason,
    };
    let base = Url::parse(base_url).map_err(|e| invalid(e.to_string()))?;
    if !matches!(base.scheme(), "http" | "https") || base.cannot_be_a_base() {
        return Err(invalid("expected an http:// or https:// URL".into()));
    }
    Ok(base)
}

/// How long an idle pooled connection is kept for reuse: shorter than the server's keep-alive
/// idle timeout (`PARLEY_KEEPALIVE_IDLE_MS`, 60 s by default), so the client drops a
/// connection before the server closes it and a request never races that close.
const POOL_IDLE_MS: u64 = 45_000;

impl Http {
    pub(crate) fn new(
        base_url: &str,
        token: &str,
        options: &ClientOptions,
    ) -> Result<Self, ClientError> {
        let base = parse_base_url(base_url)?;
        let client = reqwest::Client::builder()
            .timeout(Duration::from_millis(options.request_timeout_ms))
            .connect_timeout(Duration::from_millis(options.connect_timeout_ms))
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_millis(POOL_IDLE_MS))
            .build()
            .map_err(ClientError::from_reqwest)?;
        Ok(Self {
            client,
            base,
            token: token.to_owned(),
        })
    }

    /// The same connection pool and base URL, acting as another identity.
    pub(crate) fn with_token(&self, token: &str) -> Self {
        Self {
            client: self.client.clone(),
            base: self.base.clone(),
            token: token.to_owned(),
        }
    }

    /// The same connection pool and identity, speaking to the server at `base_url`: another
    /// gateway of the same deployment.
    pub(crate) fn with_base_url(&self, base_url: &str) -> Result<Self, ClientError> {
        Ok(Self {
            client: self.client.clone(),
            base: parse_base_url(base_url)?,
            token: self.token.clone(),
        })
    }

    pub(crate) fn base_url(&self) -> &Url {
        &self.base
    }

    pub(crate) fn token(&self) -> &str {
        &self.token
    }

    /// The endpoint at `segments` below the base URL; each segment is percent-encoded, so ids
    /// such as `dm:ana:ben` or ids with `/` cannot escape their place in the path.
    pub(crate) fn url(&self, segments: &[&str]) -> Result<Url, ClientError> {
        let mut url = self.base.clone();
        url.path_segments_mut()
            .map_err(|()| ClientError::InvalidUrl {
                url: self.base.to_string(),
                reason: "cannot be a base URL".into(),
            })?
            .pop_if_empty()
            .extend(segments);
        Ok(url)
    }

    /// The endpoint at a literal `path_and_query` below the base URL, sent as written.
    pub(crate) fn url_literal(&self, path_and_query: &str) -> Result<Url, ClientError> {
        let base = self.base.as_str().trim_end_matches('/');
        let sep = if path_and_query.starts_with('/') {
            ""
        } else {
            "/"
        };
        let joined = format!("{base}{sep}{path_and_query}");
        Url::parse(&joined).map_err(|e| ClientError::InvalidUrl {
            url: joined,
            reason: e.to_string(),
        })
    }

    /// A request without credentials; callers add what the endpoint needs.
    pub(crate) fn bare(&self, method: Method, url: Url) -> RequestBuilder {
        self.client.request(method, url)
    }

    /// A request carrying this client's bearer token.
    pub(crate) fn authorised(&self, method: Method, url: Url) -> RequestBuilder {
        self.bare(method, url).bearer_auth(&self.token)
    }

    /// Sends and decodes a JSON answer.
    pub(crate) async fn json<T: DeserializeOwned>(
        &self,
        request: RequestBuilder,
    ) -> Result<T, ClientError> {
        let (status, bytes) = exchange(request).await?;
        serde_json::from_slice(&bytes).map_err(|e| ClientError::Decode {
            status,
            reason: e.to_string(),
            body: preview(&bytes),
        })
    }

    /// Sends and checks for success, ignoring the answer's body.
    pub(crate) async fn ok(&self, request: RequestBuilder) -> Result<(), ClientError> {
        exchange(request).await.map(drop)
    }

    /// Sends and returns a successful answer as text.
    pub(crate) async fn text(&self, request: RequestBuilder) -> Result<String, ClientError> {
        let (_, bytes) = exchange(request).await?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }
}

/// Sends a request and reads the whole answer; any non-success status becomes an error.
async fn exchange(request: RequestBuilder) -> Result<(u16, Vec<u8>), ClientError> {
    let response = request.send().await.map_err(ClientError::from_reqwest)?;
    let (status, bytes) = read(response).await?;
    if (200..300).contains(&status) {
        Ok((status, bytes))
    } else {
        Err(error_from_answer(status, &bytes))
    }
}

pub(crate) async fn read(response: Response) -> Result<(u16, Vec<u8>), ClientError> {
    let status = response.status().as_u16();
    let bytes = response.bytes().await.map_err(ClientError::from_reqwest)?;
    Ok((status, bytes.to_vec()))
}

/// The error of a non-success answer: the stable code when the body is the documented
/// envelope, the raw status otherwise.
pub(crate) fn error_from_answer(status: u16, bytes: &[u8]) -> ClientError {
    match serde_json::from_slice::<ErrorBody>(bytes) {
        Ok(ErrorBody { error }) => ClientError::Api {
            status,
            code: error.code,
            message: error.message,
        },
        Err(_) => ClientError::UnexpectedStatus {
            status,
            body: preview(bytes),
        },
    }
}

fn preview(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    if text.len() <= ERROR_BODY_BYTES_MAX {
        return text.into_owned();
    }
    let mut end = ERROR_BODY_BYTES_MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(base: &str) -> Http {
        Http::new(base, "t", &ClientOptions::default()).unwrap()
    }

    #[test]
    fn path_segments_are_encoded_below_the_base() {
        let h = http("http://127.0.0.1:8080");
        let u = h
            .url(&["v1", "conversations", "dm:ana:ben", "events"])
            .unwrap();
        assert_eq!(
            u.as_str(),
            "http://127.0.0.1:8080/v1/conversations/dm:ana:ben/events"
        );
        let u = http("http://h/api/").url(&["v1", "a/b c"]).unwrap();
        assert_eq!(u.as_str(), "http://h/api/v1/a%2Fb%20c");
    }

    #[test]
    fn another_base_url_keeps_the_token_and_is_validated() {
        let h = http("http://a:1").with_base_url("http://b:2/api/").unwrap();
        assert_eq!(h.token(), "t");
        assert_eq!(h.url(&["v1"]).unwrap().as_str(), "http://b:2/api/v1");
        assert!(matches!(
            http("http://a:1").with_base_url("ftp://b"),
            Err(ClientError::InvalidUrl { .. })
        ));
    }

    #[test]
    fn literal_paths_join_once() {
        let h = http("http://h/api/");
        assert_eq!(
            h.url_literal("/v1/x?a=1").unwrap().as_str(),
            "http://h/api/v1/x?a=1"
        );
        assert_eq!(h.url_literal("v1").unwrap().as_str(), "http://h/api/v1");
    }

    #[test]
    fn bad_base_urls_are_refused() {
        for base in ["127.0.0.1:8080", "ftp://h", "mailto:x@y", "not a url"] {
            assert!(
                matches!(
                    Http::new(base, "t", &ClientOptions::default()),
                    Err(ClientError::InvalidUrl { .. })
                ),
                "{base}"
            );
        }
    }

    #[test]
    fn answers_without_envelope_keep_their_status() {
        let e = error_from_answer(404, br#"{"error":{"code":"NOT_MEMBER","message":"no"}}"#);
        assert_eq!((e.status(), e.code()), (Some(404), Some("NOT_MEMBER")));
        let e = error_from_answer(413, b"payload too large");
        assert_eq!((e.status(), e.code()), (Some(413), None));
    }

    #[test]
    fn previews_cut_on_char_boundaries() {
        let long = "你".repeat(ERROR_BODY_BYTES_MAX);
        let p = preview(long.as_bytes());
        assert!(p.len() <= ERROR_BODY_BYTES_MAX + "…".len());
    }
}
