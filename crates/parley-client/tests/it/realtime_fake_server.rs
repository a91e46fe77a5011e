//! The realtime session against a scripted WebSocket peer, for what a real server does only
//! under failures: a connection dropped before the ack, close codes, a server gone silent.
//! No database is needed, and the peer answers no HTTP: a session that tracks a conversation
//! fetches its events on the socket.

use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use futures::{SinkExt, StreamExt};
use parley_client::{code, Client, ClientError, Delivery, Realtime, RealtimeOptions, StopReason};
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::handshake::server::{Request, Response};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

/// Longest wait for anything the session is expected to do.
const WAIT_MS: u64 = 5_000;

type Peer = WebSocketStream<TcpStream>;

struct FakeServer {
    listener: TcpListener,
    base_url: String,
}

impl FakeServer {
    async fn start() -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let base_url = format!("http://{}", listener.local_addr()?);
        Ok(Self { listener, base_url })
    }

    fn client(&self) -> Result<Client> {
        Ok(Client::new(&self.base_url, "tok-secret")?)
    }

    /// Accepts the next WebSocket connection; answers its path and `Authorization` header.
    /// A `GET /v1/me` before it (a session asks who it is before it connects) is answered with
    /// ana's device d1.
    // The handshake callback's error type is tungstenite's, large by its design.
    #[allow(clippy::result_large_err)]
    async fn accept(&self) -> Result<(Peer, String, String)> {
        let tcp = loop {
            let (mut tcp, _) = tokio::time::timeout(ms(WAIT_MS), self.listener.accept())
                .await
                .context("no connection came")??;
            if !asks_who_am_i(&tcp).await? {
                break tcp;
            }
            let body = r#"{"user_id":"ana","device_id":"d1"}"#;
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
                 connection: close\r\n\r\n{body}",
                body.len()
            );
            tcp.write_all(answer.as_bytes()).await?;
            tcp.shutdown().await?;
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let callback = move |request: &Request, response: Response| {
            let auth = request
                .headers()
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            let _ = tx.send((request.uri().path().to_owned(), auth));
            Ok(response)
        };
        let peer = tokio_tungstenite::accept_hdr_async(tcp, callback).await?;
        let (path, auth) = rx.recv()?;
        Ok((peer, path, auth))
    }

    /// Whether a connection comes within `wait_ms`.
    async fn connection_within(&self, wait_ms: u64) -> bool {
        tokio::time::timeout(ms(wait_ms), self.listener.accept())
            .await
            .is_ok()
    }
}

/// Whether the connection's first request is `GET /v1/me`, read without consuming it.
async fn asks_who_am_i(tcp: &TcpStream) -> Result<bool> {
    const LINE: &[u8] = b"GET /v1/me ";
    let mut head = [0u8; LINE.len()];
    loop {
        let n = tokio::time::timeout(ms(WAIT_MS), tcp.peek(&mut head))
            .await
            .context("no request came")??;
        if n == 0 || n == head.len() || !LINE.starts_with(&head[..n]) {
            return Ok(head == LINE);
        }
        tokio::time::sleep(ms(1)).await;
    }
}

/// The session tells the app the connection was lost, then that a new one replaced it.
async fn lost_then_reconnected(rt: &mut Realtime) -> Result<()> {
    match next_delivery(rt).await? {
        Some(Delivery::Disconnected { .. }) => {}
        other => bail!("expected Disconnected, got {other:?}"),
    }
    match next_delivery(rt).await? {
        Some(Delivery::Reconnected) => Ok(()),
        other => bail!("expected Reconnected, got {other:?}"),
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The next JSON frame from the session that is not a keepalive ping.
async fn next_request(peer: &mut Peer) -> Result<Value> {
    loop {
        let message = tokio::time::timeout(ms(WAIT_MS), peer.next())
            .await
            .context("no frame came")?
            .context("connection ended")??;
        if let Message::Text(text) = message {
            return Ok(serde_json::from_str(text.as_str())?);
        }
    }
}

async fn reply(peer: &mut Peer, frame: Value) -> Result<()> {
    peer.send(Message::Text(frame.to_string().into())).await?;
    Ok(())
}

async fn close_with(peer: &mut Peer, code: u16) -> Result<()> {
    peer.close(Some(CloseFrame {
        code: CloseCode::from(code),
        reason: "".into(),
    }))
    .await?;
    Ok(())
}

async fn next_delivery(rt: &mut Realtime) -> Result<Option<Delivery>> {
    tokio::time::timeout(ms(WAIT_MS), rt.next())
        .await
        .context("no delivery came")
}

fn fast_reconnects() -> RealtimeOptions {
    RealtimeOptions {
        reconnect_backoff_first_ms: 10,
        reconnect_backoff_max_ms: 50,
        ..RealtimeOptions::default()
    }
}

#[tokio::test]
async fn the_token_goes_in_the_header_to_v1_ws() -> Result<()> {
    let fake = FakeServer::start().await?;
    let client = fake.client()?;
    let (connected, accepted) = tokio::join!(
        Realtime::connect(&client, RealtimeOptions::default()),
        fake.accept()
    );
    let (_peer, path, auth) = accepted?;
    let rt = connected?;
    ensure!(
        path == "/v1/ws" && auth == "Bearer tok-secret",
        "{path} {auth}"
    );
    ensure!(rt.is_connected());
    ensure!(rt.identity().user_id == "ana" && rt.identity().device_id == "d1");
    Ok(())
}

#[tokio::test]
async fn a_send_cut_off_before_its_ack_is_resent_with_the_same_key() -> Result<()> {
    let fake = FakeServer::start().await?;
    let client = fake.client()?;
    let (connected, accepted) =
        tokio::join!(Realtime::connect(&client, fast_reconnects()), fake.accept());
    let mut rt = connected?;
    let (mut first, ..) = accepted?;

    let handle = rt.handle();
    let send = tokio::spawn(async move { handle.send("c-1", "m-1", "hello").await });
    let asked = next_request(&mut first).await?;
    ensure!(
        asked["type"] == "send" && asked["client_msg_id"] == "m-1" && asked["body"] == "hello",
        "{asked}"
    );
    // The server committed, then the connection died before the ack left.
    drop(first);

    let (mut second, ..) = fake.accept().await?;
    let again = next_request(&mut second).await?;
    ensure!(
        again["type"] == "send" && again["client_msg_id"] == "m-1",
        "{again}"
    );
    ensure!(again["req_id"] != asked["req_id"], "req_id reused: {again}");
    reply(
        &mut second,
        json!({"type": "ack", "req_id": again["req_id"], "conv_id": "c-1", "seq": 7,
               "message_id": "msg-7", "dup": true}),
    )
    .await?;
    let ack = send.await??;
    ensure!(ack.seq == 7 && ack.dup, "{ack:?}");
    lost_then_reconnected(&mut rt).await?;
    Ok(())
}

#[tokio::test]
async fn error_frames_become_api_errors_with_their_code() -> Result<()> {
    let fake = FakeServer::start().await?;
    let client = fake.client()?;
    let (connected, accepted) = tokio::join!(
        Realtime::connect(&client, RealtimeOptions::default()),
        fake.accept()
    );
    let rt = connected?;
    let (mut peer, ..) = accepted?;
    let handle = rt.handle();
    let send = tokio::spawn(async move { handle.send("c-1", "m-1", "hello").await });
    let asked = next_request(&mut peer).await?;
    reply(
        &mut peer,
        json!({"type": "error", "req_id": asked["req_id"], "code": "IDEMPOTENCY_MISMATCH",
               "message": "other content"}),
    )
    .await?;
    let e = send.await?.unwrap_err();
    ensure!(
        e.code() == Some(code::IDEMPOTENCY_MISMATCH) && e.status() == Some(409),
        "{e}"
    );
    ensure!(!e.is_retryable());
    Ok(())
}

#[tokio::test]
async fn too_slow_and_shutdown_reconnect_while_kicked_stops_for_good() -> Result<()> {
    let fake = FakeServer::start().await?;
    let client = fake.client()?;
    let (connected, accepted) =
        tokio::join!(Realtime::connect(&client, fast_reconnects()), fake.accept());
    let mut rt = connected?;
    let (mut peer, ..) = accepted?;

    for code in [4008, 1001] {
        close_with(&mut peer, code).await?;
        peer = fake.accept().await?.0;
        lost_then_reconnected(&mut rt)
            .await
            .with_context(|| format!("after {code}"))?;
        ensure!(rt.is_connected(), "after {code}");
    }
    reply(&mut peer, json!({"type": "kicked"})).await?;
    close_with(&mut peer, 4001).await?;
    ensure!(next_delivery(&mut rt).await? == Some(Delivery::Kicked));
    ensure!(!rt.is_connected());
    ensure!(next_delivery(&mut rt).await?.is_none());
    ensure!(rt.handle().stop_reason() == Some(StopReason::Kicked));
    ensure!(
        !fake.connection_within(300).await,
        "a kicked session came back"
    );
    Ok(())
}

#[tokio::test]
async fn a_revoked_token_stops_the_session() -> Result<()> {
    let fake = FakeServer::start().await?;
    let client = fake.client()?;
    let (connected, accepted) =
        tokio::join!(Realtime::connect(&client, fast_reconnects()), fake.accept());
    let mut rt = connected?;
    let (mut peer, ..) = accepted?;
    close_with(&mut peer, 4003).await?;
    ensure!(next_delivery(&mut rt).await? == Some(Delivery::Revoked));
    let e = rt.ping().await.unwrap_err();
    ensure!(
        matches!(
            e,
            ClientError::SessionStopped {
                reason: StopReason::Revoked
            }
        ),
        "{e}"
    );
    ensure!(
        !fake.connection_within(300).await,
        "a revoked session came back"
    );
    Ok(())
}

#[tokio::test]
async fn a_silent_server_is_pinged_then_replaced() -> Result<()> {
    let fake = FakeServer::start().await?;
    let client = fake.client()?;
    let options = RealtimeOptions {
        ping_interval_ms: 100,
        silence_max_ms: 250,
        ..fast_reconnects()
    };
    let (connected, accepted) = tokio::join!(Realtime::connect(&client, options), fake.accept());
    let mut rt = connected?;
    let (mut silent, ..) = accepted?;
    let ping = next_request(&mut silent).await?;
    ensure!(
        ping["type"] == "ping" && ping["req_id"].is_string(),
        "{ping}"
    );
    // No pong, nothing at all: the session gives up on this connection and opens another.
    let (_next, ..) = fake.accept().await?;
    lost_then_reconnected(&mut rt).await?;
    drop(silent);
    Ok(())
}

#[tokio::test]
async fn reconnect_attempts_can_be_bounded() -> Result<()> {
    let fake = FakeServer::start().await?;
    let client = fake.client()?;
    let options = RealtimeOptions {
        reconnect_attempts_max: Some(2),
        ..fast_reconnects()
    };
    let (connected, accepted) = tokio::join!(Realtime::connect(&client, options), fake.accept());
    let mut rt = connected?;
    let (peer, ..) = accepted?;
    // The server goes away for good: nothing listens on the port any more.
    drop(peer);
    drop(fake);
    match next_delivery(&mut rt).await? {
        Some(Delivery::Disconnected { .. }) => {}
        other => bail!("expected Disconnected, got {other:?}"),
    }
    ensure!(!rt.is_connected());
    match next_delivery(&mut rt).await? {
        Some(Delivery::Unreachable) => {}
        other => bail!("expected Unreachable, got {other:?}"),
    }
    ensure!(rt.handle().stop_reason() == Some(StopReason::Unreachable));
    Ok(())
}

fn event(conv_id: &str, seq: i64) -> Value {
    json!({
        "conv_id": conv_id, "seq": seq, "kind": "msg", "created_at": "2024-01-01T00:00:00Z",
        "message_id": format!("m-{seq}"), "sender_user": "ben", "sender_device": "d1",
        "client_msg_id": format!("c-{seq}"), "body": "hi"
    })
}

/// A tracked conversation is caught up with a `sync` frame on the socket (the peer serves no
/// HTTP), and a frame that arrives while the fetch waits is handled after it, not lost.
#[tokio::test]
async fn catch_up_fetches_on_the_socket_and_keeps_frames_that_arrive_meanwhile() -> Result<()> {
    let fake = FakeServer::start().await?;
    let client = fake.client()?;
    let (connected, accepted) = tokio::join!(
        Realtime::connect(&client, RealtimeOptions::default()),
        fake.accept()
    );
    let (mut peer, _, _) = accepted?;
    let mut rt = connected?;
    rt.track("c-1", 1, 0);

    let sync = next_request(&mut peer).await?;
    ensure!(
        sync["type"] == "sync"
            && sync["conv_id"] == "c-1"
            && sync["after"] == 0
            && sync["epoch"] == 1,
        "expected a sync for c-1 after 0 in epoch 1: {sync}"
    );
    // Before the answer: a read position of another device.
    reply(
        &mut peer,
        json!({"type": "read", "conv_id": "c-1", "read_seq": 1}),
    )
    .await?;
    let page = json!({
        "type": "ack", "req_id": sync["req_id"], "events": [event("c-1", 1), event("c-1", 2)],
        "head": 2, "min_seq": 1, "epoch": 1, "through_seq": 2, "truncated": false,
        "next_before": null
    });
    reply(&mut peer, page).await?;

    let mut got = Vec::new();
    for _ in 0..3 {
        match next_delivery(&mut rt).await? {
            Some(Delivery::Event(e)) => got.push(format!("event {}", e.seq)),
            Some(Delivery::Read { read_seq, .. }) => got.push(format!("read {read_seq}")),
            other => bail!("unexpected delivery: {other:?}"),
        }
    }
    ensure!(
        got == ["event 1", "event 2", "read 1"],
        "the fetched events, then the frame kept meanwhile: {got:?}"
    );
    ensure!(
        rt.cursor("c-1") == Some((1, 2)),
        "cursor {:?}",
        rt.cursor("c-1")
    );
    Ok(())
}
