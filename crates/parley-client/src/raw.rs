//! Requests outside the typed API: arbitrary bodies, headers and credentials, answered with the
//! status and whatever JSON came back. Contract tests use it to send what a well-behaved client
//! never would (unknown fields, malformed JSON, missing or foreign tokens).

use reqwest::header::{HeaderMap, CONTENT_TYPE};
use reqwest::Method;
use serde_json::Value;
use url::Url;

use crate::error::ClientError;
use crate::http::{self, Http};

#[derive(Debug, Clone)]
enum Credentials {
    /// The token of the client that built the request.
    Own,
    None,
    Bearer(String),
}

/// A request under construction; nothing is sent before [`RawRequest::send`].
#[derive(Debug)]
pub struct RawRequest {
    http: Http,
    method: Method,
    url: Result<Url, ClientError>,
    credentials: Credentials,
    headers: Vec<(String, String)>,
    body: Option<Vec<u8>>,
}

/// A full answer: status, headers, the body as JSON (`Null` when empty, a JSON string when it
/// is not JSON) and the body as text.
#[derive(Debug, Clone)]
pub struct RawResponse {
    pub status: u16,
    pub headers: HeaderMap,
    pub json: Value,
    pub text: String,
}

impl RawRequest {
    pub(crate) fn new(http: &Http, method: Method, path_and_query: &str) -> Self {
        Self {
            http: http.clone(),
            url: http.url_literal(path_and_query),
            method,
            credentials: Credentials::Own,
            headers: Vec::new(),
            body: None,
        }
    }

    /// A JSON body, sent as `application/json`.
    pub fn json(self, value: &Value) -> Self {
        self.body(value.to_string())
    }

    /// A body sent byte for byte as `application/json` (unless a `content-type` header is
    /// given), so malformed JSON reaches the server as written.
    pub fn body(mut self, bytes: impl Into<Vec<u8>>) -> Self {
        self.body = Some(bytes.into());
        self
    }

    /// An extra header; invalid names or values fail at `send`.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Sends another bearer token instead of the client's own.
    pub fn bearer(mut self, token: impl Into<String>) -> Self {
        self.credentials = Credentials::Bearer(token.into());
        self
    }

    /// Sends no `Authorization` header at all.
    pub fn without_auth(mut self) -> Self {
        self.credentials = Credentials::None;
        self
    }

    /// Sends and returns the status and the body as JSON; any status is a success here.
    pub async fn send(self) -> Result<(u16, Value), ClientError> {
        let r = self.response().await?;
        Ok((r.status, r.json))
    }

    /// Sends and returns the whole answer; any status is a success here.
    pub async fn response(self) -> Result<RawResponse, ClientError> {
        let url = self.url?;
        let mut request = match self.credentials {
            Credentials::Own => self.http.authorised(self.method, url),
            Credentials::None => self.http.bare(self.method, url),
            Credentials::Bearer(token) => self.http.bare(self.method, url).bearer_auth(token),
        };
        let has_content_type = self
            .headers
            .iter()
            .any(|(name, _)| name.eq_ignore_ascii_case(CONTENT_TYPE.as_str()));
        if let Some(body) = self.body {
            if !has_content_type {
                request = request.header(CONTENT_TYPE, "application/json");
            }
            request = request.body(body);
        }
        for (name, value) in self.headers {
            request = request.header(name, value);
        }
        let response = request.send().await.map_err(ClientError::from_reqwest)?;
        let headers = response.headers().clone();
        let (status, bytes) = http::read(response).await?;
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let json = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or_else(|_| Value::String(text.clone()))
        };
        Ok(RawResponse {
            status,
            headers,
            json,
            text,
        })
    }
}
