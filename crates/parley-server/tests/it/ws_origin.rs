//! The `Origin` check of `GET /v1/ws`: a browser page may open a socket from the server's own
//! origin (scheme `http` or `https`, the `Host` header's host and port) or from an origin of the
//! allow-list, compared by scheme, host and port. Native clients send no `Origin` and pass.

use anyhow::{bail, Result};
use parley_testkit::{ServerConfig, StoreKind, TestServer};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Error as WsError;

use crate::ws_support::ws_url;

/// The HTTP status of an upgrade request carrying `origin` (none when `None`): 101 when the
/// socket opened.
async fn upgrade_status(server: &TestServer, token: &str, origin: Option<&str>) -> Result<u16> {
    let mut req = ws_url(server.base_url()).into_client_request()?;
    req.headers_mut()
        .insert("authorization", format!("Bearer {token}").parse()?);
    if let Some(origin) = origin {
        req.headers_mut().insert("origin", origin.parse()?);
    }
    match tokio_tungstenite::connect_async(req).await {
        Ok((_, response)) => Ok(response.status().as_u16()),
        Err(WsError::Http(response)) => Ok(response.status().as_u16()),
        Err(e) => bail!("upgrade with origin {origin:?} failed: {e}"),
    }
}

#[tokio::test]
async fn origin_is_compared_by_scheme_host_and_port() -> Result<()> {
    let config = ServerConfig {
        ws_allowed_origins: vec!["https://app.example".into(), "http://localhost:3000".into()],
        ..ServerConfig::default()
    };
    let server = TestServer::start_on(StoreKind::Sqlite, config).await;
    let ana = server.user_with_device("u-ana").await;
    let host = server.base_url().trim_start_matches("http://").to_owned();
    let port = host.rsplit(':').next().unwrap_or_default().to_owned();
    let other_port = if port == "1" { "2" } else { "1" };

    let cases: Vec<(Option<String>, u16)> = vec![
        (None, 101),
        // The server's own origin, plain or behind a TLS proxy.
        (Some(format!("http://{host}")), 101),
        (Some(format!("https://{host}")), 101),
        (Some(format!("HTTP://{}", host.to_uppercase())), 101),
        // The host of the server under another scheme, or on another port.
        (Some(format!("evil://{host}")), 403),
        (Some(format!("ws://{host}")), 403),
        (Some(format!("http://127.0.0.1:{other_port}")), 403),
        (Some("http://127.0.0.1".to_owned()), 403),
        (Some(format!("http://{host}/path")), 403),
        (Some(format!("http://user@{host}")), 403),
        (Some("null".to_owned()), 403),
        // The allow-list: the same scheme, host and port only; default ports are implied.
        (Some("https://app.example".to_owned()), 101),
        (Some("https://app.example:443".to_owned()), 101),
        (Some("http://app.example".to_owned()), 403),
        (Some("evil://app.example".to_owned()), 403),
        (Some("https://app.example:8443".to_owned()), 403),
        (Some("https://app.example.evil".to_owned()), 403),
        (Some("http://localhost:3000".to_owned()), 101),
        (Some("http://localhost:3001".to_owned()), 403),
        (Some("http://localhost".to_owned()), 403),
    ];
    let mut wrong = Vec::new();
    for (origin, expected) in cases {
        let status = upgrade_status(&server, ana.token(), origin.as_deref()).await?;
        if status != expected {
            wrong.push(format!("{origin:?}: {status}, expected {expected}"));
        }
    }
    if !wrong.is_empty() {
        bail!("origins answered wrongly:\n{}", wrong.join("\n"));
    }
    Ok(())
}

#[tokio::test]
async fn a_star_allows_any_origin() -> Result<()> {
    let config = ServerConfig {
        ws_allowed_origins: vec!["*".into()],
        ..ServerConfig::default()
    };
    let server = TestServer::start_on(StoreKind::Sqlite, config).await;
    let ana = server.user_with_device("u-ana").await;
    for origin in ["https://anywhere.example", "evil://x", "null"] {
        let status = upgrade_status(&server, ana.token(), Some(origin)).await?;
        if status != 101 {
            bail!("{origin}: {status}");
        }
    }
    Ok(())
}
