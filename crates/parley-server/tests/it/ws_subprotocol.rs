//! The browser's way to authenticate a WebSocket: the token in a `parley.token.<token>`
//! subprotocol entry beside `parley`, which the server selects (never the token entry). The
//! page's own origin passes the `Origin` check and a foreign one does not.

use anyhow::{bail, ensure, Result};
use futures::{SinkExt, StreamExt};
use parley_testkit::{ServerConfig, StoreKind, TestServer};
use serde_json::json;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::Response;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

use crate::ws_support::ws_url;

const WAIT: std::time::Duration = std::time::Duration::from_secs(5);

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Opens `/v1/ws` as a browser does: the token only in the offered subprotocols.
async fn open(
    server: &TestServer,
    token: &str,
    origin: Option<&str>,
) -> Result<Result<(Socket, Response<Option<Vec<u8>>>), u16>> {
    let mut req = ws_url(server.base_url()).into_client_request()?;
    req.headers_mut().insert(
        "sec-websocket-protocol",
        format!("parley, parley.token.{token}").parse()?,
    );
    if let Some(origin) = origin {
        req.headers_mut().insert("origin", origin.parse()?);
    }
    match tokio_tungstenite::connect_async(req).await {
        Ok(ok) => Ok(Ok(ok)),
        Err(WsError::Http(response)) => Ok(Err(response.status().as_u16())),
        Err(e) => bail!("upgrade failed: {e}"),
    }
}

#[tokio::test]
async fn a_subprotocol_token_opens_the_socket_and_parley_is_selected() -> Result<()> {
    let server = TestServer::start_on(StoreKind::Sqlite, ServerConfig::default()).await;
    let ana = server.user_with_device("u-ana").await;
    let Ok((mut ws, response)) = open(&server, ana.token(), None).await? else {
        bail!("the subprotocol token was refused");
    };
    let selected = response
        .headers()
        .get("sec-websocket-protocol")
        .and_then(|v| v.to_str().ok());
    ensure!(selected == Some("parley"), "selected {selected:?}");
    ws.send(Message::Text(
        json!({"type": "ping", "req_id": 1}).to_string().into(),
    ))
    .await?;
    let reply = tokio::time::timeout(WAIT, ws.next()).await?;
    ensure!(
        matches!(reply, Some(Ok(Message::Text(ref t))) if t.as_str().contains("pong")),
        "{reply:?}"
    );
    Ok(())
}

#[tokio::test]
async fn a_bad_subprotocol_token_is_401() -> Result<()> {
    let server = TestServer::start_on(StoreKind::Sqlite, ServerConfig::default()).await;
    server.user_with_device("u-ana").await;
    let status = open(&server, "pd_nope", None).await?.err();
    ensure!(status == Some(401), "bad token: {status:?}");
    Ok(())
}

#[tokio::test]
async fn the_pages_own_origin_passes_and_a_foreign_one_does_not() -> Result<()> {
    let server = TestServer::start_on(StoreKind::Sqlite, ServerConfig::default()).await;
    let ana = server.user_with_device("u-ana").await;
    // The origin of the page `GET /` serves: the scheme, host and port of the server itself.
    let own = server.base_url().trim_end_matches('/').to_owned();
    let opened = open(&server, ana.token(), Some(&own)).await?;
    ensure!(opened.is_ok(), "own origin {own}: {:?}", opened.err());
    for foreign in ["https://evil.example", "http://127.0.0.1:1", "null"] {
        let status = open(&server, ana.token(), Some(foreign)).await?.err();
        ensure!(status == Some(403), "{foreign}: {status:?}");
    }
    Ok(())
}
