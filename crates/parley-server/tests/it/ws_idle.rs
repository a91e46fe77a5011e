//! The WebSocket idle timeout with protocol pings (SPEC §7: "Any frame from the client,
//! protocol pongs included, counts as activity for `IDLE_TIMEOUT_MS`"). The server pings every
//! half timeout. A client that answers those pings with protocol pongs, and sends nothing else,
//! stays connected; one that does not answer is closed (1000, counted as `idle`) at the limit.
//!
//! The timeout is what is under test, so time must pass; the tests wait for events, not for
//! fixed periods: the silent client's close (seen in `parley_ws_closed_total{reason="idle"}`,
//! without reading its socket, since reading would answer the pings) marks the moment by
//! which the answering client, connected earlier, would have been closed too.

use std::time::Duration;

use crate::waits;
use crate::ws_support::{Next, Ws};
use anyhow::{bail, ensure, Result};
use parley_testkit::{test_on_both_stores, ServerConfig, StoreKind, TestServer};
use serde_json::json;
use tokio::sync::oneshot;
use tokio::time::Instant;

/// The idle timeout of these tests: short, so they are quick.
const IDLE_MS: u64 = 800;
/// Timers never fire early; this allows for client and server starting their clocks apart.
const EARLY_MS: u64 = 50;
/// Longest wait for an idle close: the limit plus a loaded machine's lateness.
const CLOSE_WAIT: Duration = Duration::from_secs(10);
const WAIT: Duration = Duration::from_secs(5);
const IDLE_CLOSES: &str = "parley_ws_closed_total{reason=\"idle\"}";

/// Reads `ws` until told to stop, which answers the server's protocol pings with pongs (the
/// WebSocket library does so as it reads); fails if the server closes it meanwhile.
fn keep_answering(mut ws: Ws) -> (oneshot::Sender<()>, tokio::task::JoinHandle<Result<Ws>>) {
    let (stop_tx, mut stop_rx) = oneshot::channel();
    let task = tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = &mut stop_rx => return Ok(ws),
                next = ws.next_or_close(CLOSE_WAIT) => match next? {
                    Next::Frame(_) | Next::Quiet => {}
                    Next::Closed(code) => bail!("the answering client was closed with {code}"),
                },
            }
        }
    });
    (stop_tx, task)
}

/// Connects a client that never reads (so never answers a ping), waits until the server
/// counted `closes` idle closes, and checks the close came no earlier than the limit.
async fn silent_client_closed(server: &TestServer, token: &str, closes: f64) -> Result<()> {
    let connected = Instant::now();
    let mut silent = Ws::connect(server.base_url(), token).await?;
    waits::metric(server, IDLE_CLOSES, CLOSE_WAIT, |n| n >= closes).await?;
    let took = connected.elapsed().as_millis() as u64;
    ensure!(
        took + EARLY_MS >= IDLE_MS,
        "the silent client was closed after {took} ms, before the limit of {IDLE_MS} ms"
    );
    // Its socket holds the server's pings and then the close frame.
    match silent.next_or_close(WAIT).await? {
        Next::Frame(f) => bail!("the silent client got {f}"),
        Next::Closed(code) => {
            ensure!(code == 1000, "idle close code {code}");
            Ok(())
        }
        Next::Quiet => bail!("the silent client's socket has no close frame"),
    }
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    idle_timeout_counts_protocol_pongs
);
/// A client whose only activity is answering the server's pings outlives two idle timeouts,
/// each marked by a silent client's idle close; then it is still served.
async fn idle_timeout_counts_protocol_pongs(store: StoreKind) -> Result<()> {
    let config = ServerConfig {
        idle_timeout_ms: IDLE_MS,
        ..ServerConfig::default()
    };
    let server = TestServer::start_on(store, config).await;
    let answering = server.user_with_device("u-ana").await;
    let silent = server.user_with_device("u-ben").await;
    let ws = Ws::connect(server.base_url(), answering.token()).await?;
    let (stop, reader) = keep_answering(ws);

    silent_client_closed(&server, silent.token(), 1.0).await?;
    silent_client_closed(&server, silent.token(), 2.0).await?;
    // A reader that ended early fails here with the reason it ended.
    let _ = stop.send(());
    let mut ws = reader.await??;
    ws.send(json!({"type": "ping", "req_id": 1})).await?;
    ensure!(
        ws.next_of("pong", WAIT).await?["req_id"] == 1,
        "the answering client is not served"
    );
    let closes = waits::metric(&server, IDLE_CLOSES, WAIT, |_| true).await?;
    ensure!(
        closes == 2.0,
        "{closes} idle closes, expected the silent client's two"
    );
    Ok(())
}
