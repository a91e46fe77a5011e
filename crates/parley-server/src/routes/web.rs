//! `GET /` and `GET /web/{name}`: the browser client (docs/WEB.md), embedded in the binary at
//! compile time, so serving it needs no files, no build step and no Node.js.
//!
//! The page runs under a strict Content-Security-Policy: scripts and styles only from this
//! origin's own files (no inline code at all), connections only to this origin. Every asset
//! carries an ETag computed at compile time and `Cache-Control: no-cache`, so a browser keeps
//! its copy and revalidates it with a 304 rather than run an outdated script after an upgrade.

use axum::extract::rejection::PathRejection;
use axum::extract::Path;
use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, ETAG, IF_NONE_MATCH, REFERRER_POLICY,
    X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use parley_wire::ErrorBody;

use crate::error::ApiError;

/// The page's policy: nothing inline, nothing from another origin, no framing, no forms posted
/// anywhere. `img-src data:` lets the stylesheet draw small inline images; `media-src 'self'`
/// lets voice notes and other audio attachments play from their signed URLs. The service worker
/// (`/web/sw.js`) falls under `script-src 'self'`, which `worker-src` defaults to.
pub const CONTENT_SECURITY_POLICY_VALUE: &str = "default-src 'none'; script-src 'self'; \
    style-src 'self'; img-src 'self' data:; media-src 'self'; connect-src 'self'; base-uri 'none'; \
    form-action 'none'; frame-ancestors 'none'";

/// Every asset is revalidated before use (with its ETag, so usually a 304 without a body).
const CACHE_CONTROL_VALUE: &str = "no-cache";

/// One embedded file: its name under `/web/`, its media type and its bytes.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static str,
    etag: &'static str,
}

/// FNV-1a, 64 bits: a stable digest of an asset for its ETag, computed by the compiler.
const fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < bytes.len() {
        hash ^= bytes[i] as u64;
        hash = hash.wrapping_mul(0x0100_0000_01b3);
        i += 1;
    }
    hash
}

/// The ETag of `body`: its digest in hex, quoted, as a `&'static str` built at compile time.
const fn etag_bytes(body: &str) -> [u8; 18] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let hash = fnv1a(body.as_bytes());
    let mut out = [b'"'; 18];
    let mut i = 0;
    while i < 16 {
        out[1 + i] = HEX[((hash >> (60 - 4 * i)) & 0xf) as usize];
        i += 1;
    }
    out
}

macro_rules! asset {
    ($name:literal, $content_type:expr) => {{
        const BODY: &str = include_str!(concat!("../../web/", $name));
        const ETAG: [u8; 18] = etag_bytes(BODY);
        Asset {
            name: $name,
            content_type: $content_type,
            body: BODY,
            etag: match std::str::from_utf8(&ETAG) {
                Ok(s) => s,
                Err(_) => panic!("an ETag is ASCII"),
            },
        }
    }};
}

const JS: &str = "text/javascript; charset=utf-8";

/// The page itself, served at `/`.
static INDEX: Asset = asset!("index.html", "text/html; charset=utf-8");

/// Everything the page loads, served at `/web/{name}`.
static ASSETS: &[Asset] = &[
    asset!("style.css", "text/css; charset=utf-8"),
    asset!("icon.svg", "image/svg+xml"),
    asset!("app.js", JS),
    asset!("api.js", JS),
    asset!("connection.js", JS),
    asset!("sync.js", JS),
    asset!("outbox.js", JS),
    asset!("presence.js", JS),
    asset!("dom.js", JS),
    asset!("format.js", JS),
    asset!("login_view.js", JS),
    asset!("list_view.js", JS),
    asset!("chat_view.js", JS),
    asset!("thread_panel.js", JS),
    asset!("composer.js", JS),
    asset!("message_view.js", JS),
    asset!("relations.js", JS),
    asset!("members_panel.js", JS),
    asset!("dialogs.js", JS),
    asset!("notifications.js", JS),
    asset!("search.js", JS),
    // The service worker: registered from its own path, so its scope is `/web/` and it needs no
    // `Service-Worker-Allowed` header; it controls no page.
    asset!("sw.js", JS),
];

/// The answer for `asset`: 304 when the browser's copy is current, else the file.
fn respond(asset: &Asset, headers: &HeaderMap, is_page: bool) -> Response {
    let fresh = headers
        .get_all(IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|tag| {
            let tag = tag.trim();
            tag == "*" || tag.trim_start_matches("W/") == asset.etag
        });
    let mut response = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(CONTENT_TYPE, asset.content_type)], asset.body).into_response()
    };
    let h = response.headers_mut();
    h.insert(ETAG, HeaderValue::from_static(asset.etag));
    h.insert(CACHE_CONTROL, HeaderValue::from_static(CACHE_CONTROL_VALUE));
    h.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    if is_page {
        h.insert(
            CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CONTENT_SECURITY_POLICY_VALUE),
        );
        h.insert(X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    }
    response
}

/// The web client's page (docs/WEB.md).
#[utoipa::path(
    get,
    path = "/",
    tag = "web",
    responses(
        (status = 200, description = "The web client's page, under a Content-Security-Policy.",
            content_type = "text/html", body = String),
        (status = 304, description = "The browser's copy (`If-None-Match`) is current."),
    )
)]
pub async fn page(headers: HeaderMap) -> Response {
    respond(&INDEX, &headers, true)
}

/// A script, stylesheet or image of the web client.
#[utoipa::path(
    get,
    path = "/web/{name}",
    tag = "web",
    params(("name" = String, Path, example = "app.js", description = "The file, e.g. `app.js`.")),
    responses(
        (status = 200, description = "The file, with its media type.", content(
            (String = "text/javascript"), (String = "text/css"), (String = "image/svg+xml"))),
        (status = 304, description = "The browser's copy (`If-None-Match`) is current."),
        (status = 404, description = "`NOT_FOUND`: no such file.", body = ErrorBody),
    )
)]
pub async fn asset(name: Result<Path<String>, PathRejection>, headers: HeaderMap) -> Response {
    // A name that does not even decode (bad percent-encoding) is no file either.
    let name = name.map(|Path(n)| n).unwrap_or_default();
    match ASSETS.iter().find(|a| a.name == name) {
        Some(asset) => respond(asset, &headers, false),
        None => ApiError::NotFound("no such file".into()).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etags_differ_by_content_and_are_quoted() {
        let tags: std::collections::HashSet<_> = ASSETS.iter().map(|a| a.etag).collect();
        assert_eq!(tags.len(), ASSETS.len());
        assert!(INDEX.etag.starts_with('"') && INDEX.etag.ends_with('"'));
        assert_eq!(INDEX.etag.len(), 18);
    }

    #[test]
    fn the_policy_allows_nothing_inline() {
        assert!(!CONTENT_SECURITY_POLICY_VALUE.contains("unsafe"));
        assert!(CONTENT_SECURITY_POLICY_VALUE.contains("frame-ancestors 'none'"));
    }

    #[test]
    fn the_policy_lets_the_page_register_its_service_worker() {
        // `worker-src` falls back to `script-src`: nothing may narrow it below this origin.
        assert!(CONTENT_SECURITY_POLICY_VALUE.contains("script-src 'self';"));
        assert!(!CONTENT_SECURITY_POLICY_VALUE.contains("worker-src"));
        assert!(!CONTENT_SECURITY_POLICY_VALUE.contains("child-src"));
        let sw = ASSETS
            .iter()
            .find(|a| a.name == "sw.js")
            .expect("sw.js is embedded");
        assert!(sw.content_type.starts_with("text/javascript"));
    }

    #[test]
    fn the_page_loads_only_embedded_files() {
        // Every `/web/` reference of the page and of the scripts names an embedded asset.
        let texts = std::iter::once(INDEX.body).chain(ASSETS.iter().map(|a| a.body));
        for text in texts {
            for (i, _) in text.match_indices("/web/") {
                let rest = &text[i + 5..];
                let end = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '.' || c == '_'))
                    .unwrap_or(rest.len());
                let name = &rest[..end];
                assert!(
                    ASSETS.iter().any(|a| a.name == name),
                    "/web/{name} is referenced but not embedded"
                );
            }
        }
        for text in ASSETS.iter().filter(|a| a.name.ends_with(".js")) {
            for (i, _) in text.body.match_indices("from \"./") {
                let rest = &text.body[i + 8..];
                let name = &rest[..rest.find('"').unwrap_or(rest.len())];
                assert!(
                    ASSETS.iter().any(|a| a.name == name),
                    "{} imports ./{name}, which is not embedded",
                    text.name
                );
            }
        }
    }
}
