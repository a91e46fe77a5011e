//! Graceful shutdown under the connection limits: a request in progress is answered, an open
//! WebSocket is closed with 1001, and connections that wait for a request head (a silent one,
//! one halfway through its head, an idle keep-alive) are closed at once instead of holding the
//! shutdown until their timeouts.
//!
//! PostgreSQL only: a lock on the devices table is how a request is kept in progress (its
//! authentication waits); the embedded store's readers never wait for a writer.

use std::time::Duration;

use crate::raw_tcp::{self, HEALTHZ};
use crate::ws_bounds::hold_authentication;
use anyhow::{bail, ensure, Context, Result};
use futures::StreamExt;
use parley_testkit::{ServerConfig, StoreKind, TestServer};
use tokio::io::AsyncWriteExt;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;

const WAIT: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_answers_requests_in_progress_and_closes_idle_connections_at_once() -> Result<()> {
    let server = TestServer::start_on(StoreKind::Postgres, ServerConfig::default()).await;
    let ana = server.user_with_device("u-ana").await;
    let ben = server.user_with_device("u-ben").await;
    let addr = raw_tcp::server_addr(server.base_url())?;

    let req = raw_tcp::upgrade_request(server.base_url(), ben.token())?;
    let (mut ws, _) = tokio_tungstenite::connect_async(req).await?;

    let mut silent = raw_tcp::connect(addr).await?;
    let mut partial = raw_tcp::connect(addr).await?;
    partial.write_all(&HEALTHZ[..20]).await?;
    let mut idle = raw_tcp::connect(addr).await?;
    let ok = raw_tcp::exchange(&mut idle, HEALTHZ, WAIT).await?;
    ensure!(ok.status == 200, "{ok:?}");

    let lock = hold_authentication(&server).await?;
    let mut busy = raw_tcp::connect(addr).await?;
    let request = format!(
        "GET /v1/conversations HTTP/1.1\r\nhost: parley\r\nauthorization: Bearer {}\r\n\r\n",
        ana.token()
    );
    busy.write_all(request.as_bytes()).await?;
    // The request is in progress once its authentication waits for the devices table.
    crate::waits::lock_waiters(&server, 1, WAIT).await?;

    let began = Instant::now();
    let stopping = tokio::spawn(server.stop());
    // Connections waiting for a head do not wait for their timeouts (10 s by default).
    for (name, conn) in [
        ("silent", &mut silent),
        ("half-headed", &mut partial),
        ("idle keep-alive", &mut idle),
    ] {
        let closed = raw_tcp::until_closed(conn, began + WAIT)
            .await
            .with_context(|| format!("the {name} connection outlived the shutdown"))?;
        ensure!(
            closed.received.is_empty(),
            "the {name} connection got bytes"
        );
    }
    let code = loop {
        match tokio::time::timeout_at(began + WAIT, ws.next()).await {
            Ok(Some(Ok(Message::Close(Some(frame))))) => break u16::from(frame.code),
            Ok(Some(Ok(_))) => {}
            other => bail!("no close frame at shutdown: {other:?}"),
        }
    };
    ensure!(code == 1001, "WebSocket closed with {code}");
    // Reading on sends the client's own close frame, which completes the close handshake.
    while let Ok(Some(_)) = tokio::time::timeout_at(began + WAIT, ws.next()).await {}

    // The shutdown closed everything else and still waits for the request it holds.
    ensure!(
        !stopping.is_finished(),
        "the shutdown ended with a request in progress"
    );
    lock.rollback().await?;
    let answer = raw_tcp::read_answer(&mut busy, WAIT).await?;
    ensure!(
        answer.status == 200,
        "the request in progress got {answer:?}"
    );
    ensure!(
        answer.header("connection") == Some("close"),
        "the connection stays open after shutdown: {answer:?}"
    );
    tokio::time::timeout(WAIT, stopping)
        .await
        .context("the shutdown did not finish")??;
    Ok(())
}
