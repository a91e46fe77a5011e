//! Time bounds of a WebSocket's start and end: an upgrade whose authentication cannot finish
//! is answered 503 within the handshake timeout, and a reader that stalls until it is too slow
//! still receives its close code (4008), not a bare end of stream (1006).

use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use futures::{SinkExt, StreamExt};
use parley_client::NewConversation;
use parley_domain::Limits;
use parley_server::config::ConnectionLimits;
use parley_testkit::{test_on_both_stores, ServerConfig, Sql, StoreKind, TestServer};
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use crate::raw_tcp;

const HANDSHAKE_MS: u64 = 700;
/// How late an answer may come on a loaded machine.
const LATE_MS: u64 = 3_000;

/// Makes every device authentication wait until the returned transaction ends: it holds the
/// devices table locked. PostgreSQL only: the embedded store's readers never wait for a writer.
pub(crate) async fn hold_authentication(
    server: &TestServer,
) -> Result<sqlx::Transaction<'static, sqlx::Postgres>> {
    let Sql::Postgres(pool) = server.sql() else {
        bail!("this test runs on PostgreSQL");
    };
    let mut lock = pool.begin().await?;
    sqlx::query("LOCK TABLE devices IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *lock)
        .await?;
    Ok(lock)
}

/// PostgreSQL only: a lock on the devices table is how a store read is made to wait; the
/// embedded store's readers never wait for a writer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_whose_authentication_hangs_is_answered_503_in_time() -> Result<()> {
    let config = ServerConfig {
        connections: ConnectionLimits {
            ws_handshake_timeout_ms: HANDSHAKE_MS,
            ..ConnectionLimits::default()
        },
        ..ServerConfig::default()
    };
    let server = TestServer::start_on(StoreKind::Postgres, config).await;
    let ana = server.user_with_device("u-ana").await;
    let lock = hold_authentication(&server).await?;

    let started = Instant::now();
    let attempt = tokio::time::timeout(
        Duration::from_millis(HANDSHAKE_MS + LATE_MS),
        tokio_tungstenite::connect_async(raw_tcp::upgrade_request(server.base_url(), ana.token())?),
    )
    .await
    .context("the upgrade was still waiting past its handshake timeout")?;
    let took = started.elapsed();
    let Err(tokio_tungstenite::tungstenite::Error::Http(answer)) = attempt else {
        bail!("the upgrade was not refused: {attempt:?}");
    };
    ensure!(answer.status() == 503, "status {}", answer.status());
    let body: serde_json::Value =
        serde_json::from_slice(answer.body().as_deref().unwrap_or_default())?;
    ensure!(body["error"]["code"] == "UNAVAILABLE", "{body}");
    ensure!(
        took >= Duration::from_millis(HANDSHAKE_MS - 50),
        "answered after {took:?}, before the handshake timeout"
    );

    lock.rollback().await?;
    let (mut ws, _) =
        tokio_tungstenite::connect_async(raw_tcp::upgrade_request(server.base_url(), ana.token())?)
            .await?;
    ws.close(None).await?;
    Ok(())
}

/// Pushes in the stalled-reader test, each large so the socket's buffers fill.
const STALL_MESSAGES: usize = 300;
const STALL_BODY_BYTES: usize = 32 * 1024;
/// How long the reader stops reading once every message was sent: past the old one-second
/// bound on the close, inside the close bound configured here. This stall is what the test is
/// about (a close that outlives a long stall), not a wait for something to happen.
const STALL_MS: u64 = 3_000;
const CLOSE_BOUND_MS: u64 = 15_000;
/// The reader's receive buffer: small, so the server's writer blocks early.
const READER_BUFFER_BYTES: u32 = 64 * 1024;

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    a_stalled_reader_gets_its_close_code_not_a_bare_end
);
/// The reader's queue overflows while it does not read: the server closes it as too slow. When
/// the reader resumes it must find, after the frames the server had already written, the
/// close frame with 4008, so it knows to resynchronise.
async fn a_stalled_reader_gets_its_close_code_not_a_bare_end(store: StoreKind) -> Result<()> {
    let config = ServerConfig {
        limits: Limits {
            body_bytes_max: STALL_BODY_BYTES,
            request_bytes_max: 2 * STALL_BODY_BYTES,
        },
        outbound_queue_len_max: 8,
        connections: ConnectionLimits {
            ws_close_timeout_ms: CLOSE_BOUND_MS,
            ..ConnectionLimits::default()
        },
        ..ServerConfig::default()
    };
    let server = TestServer::start_on(store, config).await;
    let ana = server.user_with_device("u-ana").await;
    let slow = server.user_with_device("u-slow").await;
    ana.create_conversation(&NewConversation::group(["u-slow"]).with_conv_id("c-1"))
        .await?;
    let mut ws = small_buffer_websocket(server.base_url(), slow.token()).await?;
    ws.send(Message::Text(r#"{"type":"ping","req_id":"ready"}"#.into()))
        .await?;
    loop {
        match tokio::time::timeout(Duration::from_secs(5), ws.next()).await {
            Ok(Some(Ok(Message::Text(t)))) if t.contains("pong") => break,
            Ok(Some(Ok(_))) => {}
            other => bail!("no pong: {other:?}"),
        }
    }

    // From here on the reader does not read until every message was sent, and then a while.
    let body = "x".repeat(STALL_BODY_BYTES);
    for i in 0..STALL_MESSAGES {
        ana.send("c-1", &format!("m-{i}"), &body).await?;
    }
    tokio::time::sleep(Duration::from_millis(STALL_MS)).await;

    let resumed = Instant::now();
    let mut events = 0;
    let code = loop {
        let next = tokio::time::timeout(Duration::from_secs(10), ws.next())
            .await
            .context("no close within 10 s of resuming")?;
        match next {
            Some(Ok(Message::Text(_))) => events += 1,
            Some(Ok(Message::Close(Some(frame)))) => break u16::from(frame.code),
            Some(Ok(Message::Close(None))) => break u16::from(CloseCode::Status),
            Some(Ok(_)) => {}
            Some(Err(e)) => bail!("the stream broke after {events} frames, no close frame: {e}"),
            None => bail!("the stream ended after {events} frames, no close frame"),
        }
    };
    ensure!(code == 4008, "close code {code} after {events} frames");
    ensure!(
        events < STALL_MESSAGES,
        "every push arrived ({events}): the reader was never too slow"
    );
    ensure!(
        resumed.elapsed() < Duration::from_secs(10),
        "the close took {:?} after resuming",
        resumed.elapsed()
    );
    // The operator sees the dropped slow reader in the metrics.
    let samples = crate::metrics::scrape(&server).await?;
    let too_slow = crate::metrics::value(&samples, "parley_ws_closed_total{reason=\"too_slow\"}");
    ensure!(too_slow == 1.0, "slow readers closed: {too_slow}");
    Ok(())
}

async fn small_buffer_websocket(base_url: &str, token: &str) -> Result<WebSocketStream<TcpStream>> {
    let socket = TcpSocket::new_v4()?;
    socket.set_recv_buffer_size(READER_BUFFER_BYTES)?;
    let tcp = socket.connect(raw_tcp::server_addr(base_url)?).await?;
    let (ws, _) =
        tokio_tungstenite::client_async(raw_tcp::upgrade_request(base_url, token)?, tcp).await?;
    Ok(ws)
}
