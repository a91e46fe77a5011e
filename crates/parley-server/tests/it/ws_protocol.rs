//! The frame protocol of SPEC §7: bad frames, size limits, authentication, sync and read.

use std::time::Duration;

use crate::ws_support;
use crate::ws_support::Ws;
use anyhow::{ensure, Result};
use parley_client::NewConversation;
use parley_domain::Limits;
use parley_testkit::{test_on_both_stores, ServerConfig, StoreKind, TestServer};
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;

const WAIT: Duration = Duration::from_secs(5);

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    bad_frames_answer_errors_and_keep_the_connection
);
/// A malformed or unknown frame answers an error frame and the connection stays open.
async fn bad_frames_answer_errors_and_keep_the_connection(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ana = server.user_with_device("u-ana").await;
    let mut ws = Ws::connect(server.base_url(), ana.token()).await?;
    ws.send_raw(Message::Text("{not json".into())).await?;
    let e = ws.next_of("error", WAIT).await?;
    ensure!(
        e["code"] == "BAD_REQUEST" && e["req_id"].is_null(),
        "malformed: {e}"
    );
    ws.send(json!({"type": "dance", "req_id": 7})).await?;
    let e = ws.next_of("error", WAIT).await?;
    ensure!(
        e["code"] == "BAD_REQUEST" && e["req_id"] == 7,
        "unknown type: {e}"
    );
    ws.send(json!({"type": "send", "req_id": 8, "conv_id": "c-x", "client_msg_id": "m", "body": "b", "sender_user": "u-ben"})).await?;
    let e = ws.next_of("error", WAIT).await?;
    ensure!(
        e["code"] == "BAD_REQUEST" && e["req_id"] == 8,
        "sender field: {e}"
    );
    ws.send(json!({"type": "send", "req_id": 9, "conv_id": "c-missing", "client_msg_id": "m", "body": "b"})).await?;
    let e = ws.next_of("error", WAIT).await?;
    ensure!(
        e["code"] == "NOT_MEMBER" && e["req_id"] == 9,
        "unknown conversation: {e}"
    );
    ws.send(json!({"type": "ping", "req_id": 10})).await?;
    ensure!(
        ws.next_of("pong", WAIT).await?["req_id"] == 10,
        "connection did not stay open"
    );
    Ok(())
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    oversized_frame_closes_with_1009
);
/// A frame over MAX_REQUEST_BYTES closes the connection with 1009.
async fn oversized_frame_closes_with_1009(store: StoreKind) -> Result<()> {
    let config = ServerConfig {
        limits: Limits {
            body_bytes_max: 64,
            request_bytes_max: 1024,
        },
        ..ServerConfig::default()
    };
    let server = TestServer::start_on(store, config).await;
    let ana = server.user_with_device("u-ana").await;
    let mut ws = Ws::connect(server.base_url(), ana.token()).await?;
    let big = json!({"type": "ping", "req_id": "x".repeat(4096)});
    ws.send(big).await?;
    let (code, _) = ws.until_close(WAIT).await?;
    ensure!(code == 1009, "close code {code}");
    Ok(())
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    upgrade_needs_a_valid_token
);
/// A bad or missing token answers 401 and no upgrade; the browser query token works.
async fn upgrade_needs_a_valid_token(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ana = server.user_with_device("u-ana").await;
    let bad = Ws::connect(server.base_url(), "pd_nope").await;
    ensure!(
        format!("{:?}", bad.err()).contains("401"),
        "bad token upgraded"
    );
    let url = format!(
        "{}?access_token={}",
        ws_support::ws_url(server.base_url()),
        ana.token()
    );
    let (mut ws, _) = tokio_tungstenite::connect_async(url).await?;
    use futures::{SinkExt, StreamExt};
    ws.send(Message::Text(
        json!({"type": "ping", "req_id": 1}).to_string().into(),
    ))
    .await?;
    let reply = tokio::time::timeout(WAIT, ws.next()).await?;
    ensure!(
        matches!(reply, Some(Ok(Message::Text(ref t))) if t.as_str().contains("pong")),
        "query token: {reply:?}"
    );
    Ok(())
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    sync_and_read_frames
);
/// `sync` answers the events-after page; `read` answers the position and tells the user's
/// other devices.
async fn sync_and_read_frames(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ana1 = server.user_with_device("u-ana").await;
    let ana2 = server.device("u-ana", "d2").await;
    server.user_with_device("u-ben").await;
    ana1.create_conversation(&NewConversation::group(["u-ben"]).with_conv_id("c-1"))
        .await?;
    let mut ws1 = Ws::connect(server.base_url(), ana1.token()).await?;
    let mut ws2 = Ws::connect(server.base_url(), ana2.token()).await?;
    ws1.send(json!({"type": "sync", "req_id": "s", "conv_id": "c-1", "after": 0}))
        .await?;
    let ack = ws1.next_of("ack", WAIT).await?;
    ensure!(
        ack["req_id"] == "s" && ack["head"] == 2 && ack["through_seq"] == 2,
        "sync ack {ack}"
    );
    ensure!(
        ack["events"].as_array().map(Vec::len) == Some(2),
        "sync events {ack}"
    );
    ws1.send(json!({"type": "read", "req_id": "r", "conv_id": "c-1", "seq": 99}))
        .await?;
    let ack = ws1.next_of("ack", WAIT).await?;
    ensure!(ack["read_seq"] == 2, "read is clamped to head: {ack}");
    let told = ws2.next_of("read", WAIT).await?;
    ensure!(
        told["conv_id"] == "c-1" && told["read_seq"] == 2,
        "other device: {told}"
    );
    Ok(())
}
