//! `GET /` and `GET /web/{name}`: the embedded browser client is served with its media types,
//! its security headers (a Content-Security-Policy with nothing inline) and ETags; an unknown
//! file is a JSON 404. The OpenAPI document lists both routes.

use anyhow::{ensure, Context, Result};
use parley_testkit::{ServerConfig, StoreKind, TestServer};
use reqwest::header::{HeaderMap, CONTENT_TYPE, ETAG, IF_NONE_MATCH};

fn header<'a>(headers: &'a HeaderMap, name: &str) -> &'a str {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

#[tokio::test]
async fn the_page_is_served_under_a_strict_policy() -> Result<()> {
    let server = TestServer::start_on(StoreKind::Sqlite, ServerConfig::default()).await;
    let http = reqwest::Client::new();
    let page = http.get(format!("{}/", server.base_url())).send().await?;
    ensure!(page.status() == 200, "GET /: {}", page.status());
    let headers = page.headers().clone();
    ensure!(
        header(&headers, "content-type") == "text/html; charset=utf-8",
        "{headers:?}"
    );
    let csp = header(&headers, "content-security-policy");
    for directive in [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "connect-src 'self'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
        "form-action 'none'",
    ] {
        ensure!(csp.contains(directive), "CSP lacks {directive}: {csp}");
    }
    ensure!(
        !csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"),
        "{csp}"
    );
    ensure!(
        header(&headers, "x-content-type-options") == "nosniff",
        "{headers:?}"
    );
    ensure!(
        header(&headers, "referrer-policy") == "no-referrer",
        "{headers:?}"
    );
    ensure!(
        header(&headers, "cache-control") == "no-cache",
        "{headers:?}"
    );
    let html = page.text().await?;
    ensure!(
        html.contains("<script type=\"module\" src=\"/web/app.js\">"),
        "{html}"
    );
    // No inline script or style: the policy would block them anyway.
    ensure!(
        !html.contains("style=\"") && !html.contains("<style"),
        "inline style"
    );
    ensure!(
        !html.contains("onclick") && !html.contains("<script>"),
        "inline script"
    );

    // The ETag revalidates: the same tag answers 304 without a body.
    let etag = header(&headers, ETAG.as_str()).to_owned();
    ensure!(etag.starts_with('"'), "ETag {etag:?}");
    let again = http
        .get(format!("{}/", server.base_url()))
        .header(IF_NONE_MATCH, &etag)
        .send()
        .await?;
    ensure!(again.status() == 304, "If-None-Match: {}", again.status());
    ensure!(again.text().await?.is_empty(), "a 304 has no body");
    Ok(())
}

#[tokio::test]
async fn assets_have_their_media_types_and_unknown_names_are_404() -> Result<()> {
    let server = TestServer::start_on(StoreKind::Sqlite, ServerConfig::default()).await;
    let http = reqwest::Client::new();
    for (name, media_type) in [
        ("app.js", "text/javascript; charset=utf-8"),
        ("connection.js", "text/javascript; charset=utf-8"),
        ("style.css", "text/css; charset=utf-8"),
        ("icon.svg", "image/svg+xml"),
    ] {
        let answer = http
            .get(format!("{}/web/{name}", server.base_url()))
            .send()
            .await?;
        ensure!(answer.status() == 200, "{name}: {}", answer.status());
        let headers = answer.headers();
        ensure!(
            header(headers, CONTENT_TYPE.as_str()) == media_type,
            "{name}: {headers:?}"
        );
        ensure!(
            header(headers, "x-content-type-options") == "nosniff",
            "{name}"
        );
        ensure!(!header(headers, "etag").is_empty(), "{name} has no ETag");
        ensure!(!answer.text().await?.is_empty(), "{name} is empty");
    }
    for missing in ["nope.js", "..%2Fsrc%2Flib.rs", "index.html", "%FF"] {
        let answer = http
            .get(format!("{}/web/{missing}", server.base_url()))
            .send()
            .await?;
        ensure!(answer.status() == 404, "{missing}: {}", answer.status());
        let body: serde_json::Value = answer.json().await?;
        ensure!(body["error"]["code"] == "NOT_FOUND", "{missing}: {body}");
    }
    Ok(())
}

#[tokio::test]
async fn the_openapi_document_lists_the_page() -> Result<()> {
    let server = TestServer::start_on(StoreKind::Sqlite, ServerConfig::default()).await;
    let doc: serde_json::Value = reqwest::get(format!("{}/openapi.json", server.base_url()))
        .await?
        .json()
        .await?;
    let page = doc["paths"]["/"]["get"]["responses"]
        .as_object()
        .context("GET / in the document")?;
    ensure!(page.contains_key("200"), "{page:?}");
    let asset = doc["paths"]["/web/{name}"]["get"]["responses"]
        .as_object()
        .context("GET /web/{name} in the document")?;
    ensure!(asset.contains_key("404"), "{asset:?}");
    let ws = doc["paths"]["/v1/ws"]["get"]["description"]
        .as_str()
        .unwrap_or_default();
    ensure!(
        ws.contains("parley.token."),
        "the subprotocol is documented: {ws}"
    );
    Ok(())
}
