//! Caps on open connections (`ServerConfig::connections`): one address over its share is
//! refused with 503 `UNAVAILABLE` while other addresses and its own open connections are
//! served; at the process cap a new client displaces a silent connection instead of being
//! locked out; when every connection is busy a new one is refused, and the busy ones keep
//! working.
//!
//! The head timeout stays at its default (10 s) here: everything these tests see happens far
//! sooner, so it is the caps at work, not the timeouts. Clients play several hosts by
//! connecting from several 127.0.0.0/8 addresses.

use std::time::Duration;

use crate::raw_tcp::{self, HEALTHZ};
use anyhow::{ensure, Context, Result};
use futures::{SinkExt, StreamExt};
use parley_server::config::ConnectionLimits;
use parley_testkit::{ServerConfig, StoreKind, TestServer};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;

const WAIT: Duration = Duration::from_secs(5);

fn capped(connections_max: usize, per_address_max: usize) -> ServerConfig {
    ServerConfig {
        connections: ConnectionLimits {
            connections_max,
            connections_per_address_max: per_address_max,
            ..ConnectionLimits::default()
        },
        ..ServerConfig::default()
    }
}

/// Checks that `answer` is the refusal: 503 `UNAVAILABLE` with `Retry-After`.
fn is_refusal(answer: &raw_tcp::Answer) -> Result<()> {
    ensure!(answer.status == 503, "{answer:?}");
    ensure!(answer.header("retry-after") == Some("1"), "{answer:?}");
    ensure!(
        answer.json()?["error"]["code"] == "UNAVAILABLE",
        "{answer:?}"
    );
    Ok(())
}

/// Waits until a new connection from 127.0.0.1 is served again, after `freed` gave its place
/// back; until then every attempt must be the refusal.
async fn served_again(addr: std::net::SocketAddr, freed: &str) -> Result<()> {
    let deadline = Instant::now() + WAIT;
    loop {
        let mut again = raw_tcp::connect(addr).await?;
        let answer = raw_tcp::exchange(&mut again, HEALTHZ, WAIT).await?;
        if answer.status == 200 {
            return Ok(());
        }
        is_refusal(&answer)?;
        ensure!(
            Instant::now() < deadline,
            "{freed} did not give its place back"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Opens `n` connections from `127.0.0.<from>` that send nothing, each one accepted before
/// the next is opened (a connection answered at once was refused).
async fn silent(server: std::net::SocketAddr, from: u8, n: usize) -> Result<Vec<TcpStream>> {
    let mut held = Vec::with_capacity(n);
    for _ in 0..n {
        let mut conn = raw_tcp::connect_from(server, from).await?;
        ensure!(
            raw_tcp::open_after(&mut conn, Duration::from_millis(20)).await?,
            "a silent connection under the cap was closed"
        );
        held.push(conn);
    }
    Ok(held)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_over_its_cap_is_refused_and_others_are_served() -> Result<()> {
    let server = TestServer::start_on(StoreKind::Sqlite, capped(100, 4)).await;
    let addr = raw_tcp::server_addr(server.base_url())?;
    let mut keep_alive = raw_tcp::connect(addr).await?;
    let ok = raw_tcp::exchange(&mut keep_alive, HEALTHZ, WAIT).await?;
    ensure!(ok.status == 200, "{ok:?}");
    let _held = silent(addr, 1, 3).await?;

    // The fifth connection from 127.0.0.1 is refused, whether it waits or speaks first.
    let mut waiting = raw_tcp::connect(addr).await?;
    is_refusal(&raw_tcp::read_answer(&mut waiting, WAIT).await?)?;
    let mut speaking = raw_tcp::connect(addr).await?;
    is_refusal(&raw_tcp::exchange(&mut speaking, HEALTHZ, WAIT).await?)?;

    // Another address is served, and so is the first address's open connection.
    let mut other = raw_tcp::connect_from(addr, 2).await?;
    let ok = raw_tcp::exchange(&mut other, HEALTHZ, WAIT).await?;
    ensure!(ok.status == 200, "{ok:?}");
    let ok = raw_tcp::exchange(&mut keep_alive, HEALTHZ, WAIT).await?;
    ensure!(ok.status == 200, "{ok:?}");

    // A closed connection gives its place back.
    drop(keep_alive);
    served_again(addr, "the closed connection").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_cap_a_new_client_displaces_the_oldest_silent_connection() -> Result<()> {
    const CAP: usize = 8;
    let server = TestServer::start_on(StoreKind::Sqlite, capped(CAP, 100)).await;
    let addr = raw_tcp::server_addr(server.base_url())?;
    let mut held = silent(addr, 3, CAP).await?;

    let started = Instant::now();
    let mut probe = raw_tcp::connect_from(addr, 1).await?;
    let ok = raw_tcp::exchange(&mut probe, HEALTHZ, WAIT).await?;
    ensure!(
        ok.status == 200,
        "a new client was not served at the cap: {ok:?}"
    );
    // The oldest silent connection made the room, long before any timeout.
    let closed = raw_tcp::until_closed(&mut held[0], started + WAIT).await?;
    ensure!(
        closed.received.is_empty(),
        "the displaced connection got bytes"
    );
    for (i, conn) in held.iter_mut().enumerate().skip(1) {
        ensure!(
            raw_tcp::open_after(conn, Duration::from_millis(10)).await?,
            "silent connection {i} was closed too"
        );
    }
    // The new client keeps its place: it has been served, and it is idle now, but a silent
    // connection that never sent a request goes first.
    let mut next = raw_tcp::connect_from(addr, 1).await?;
    let ok = raw_tcp::exchange(&mut next, HEALTHZ, WAIT).await?;
    ensure!(ok.status == 200, "{ok:?}");
    let ok = raw_tcp::exchange(&mut probe, HEALTHZ, WAIT).await?;
    ensure!(ok.status == 200, "the served client was displaced: {ok:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_every_connection_is_busy_a_new_one_is_refused_and_the_busy_ones_work() -> Result<()> {
    const CAP: usize = 3;
    let server = TestServer::start_on(StoreKind::Sqlite, capped(CAP, 100)).await;
    let addr = raw_tcp::server_addr(server.base_url())?;
    let mut clients = Vec::new();
    for i in 0..CAP {
        clients.push(server.user_with_device(&format!("u-{i}")).await);
    }
    // The admin client's kept-alive connection holds a place until the last WebSocket takes
    // it: it has been idle since the devices were made, so it is the one displaced.
    let mut sockets = Vec::new();
    for client in &clients {
        sockets.push(websocket(server.base_url(), client.token()).await?);
    }
    let mut refused = raw_tcp::connect(addr).await?;
    is_refusal(&raw_tcp::exchange(&mut refused, HEALTHZ, WAIT).await?)?;
    for ws in &mut sockets {
        ws.send(Message::Text(r#"{"type":"ping","req_id":1}"#.into()))
            .await?;
        let pong = next_text(ws).await?;
        ensure!(pong.contains("pong"), "{pong}");
    }
    // A WebSocket that closes gives its place back.
    let mut gone = sockets.pop().context("a socket")?;
    gone.close(None).await?;
    while gone.next().await.is_some() {}
    served_again(addr, "the closed WebSocket").await
}

type WebSocket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<TcpStream>>;

async fn websocket(base_url: &str, token: &str) -> Result<WebSocket> {
    let req = raw_tcp::upgrade_request(base_url, token)?;
    Ok(tokio_tungstenite::connect_async(req).await?.0)
}

async fn next_text(ws: &mut WebSocket) -> Result<String> {
    loop {
        let msg = tokio::time::timeout(WAIT, ws.next())
            .await
            .context("no frame in time")?
            .context("the socket ended")??;
        if let Message::Text(text) = msg {
            return Ok(text.to_string());
        }
    }
}
