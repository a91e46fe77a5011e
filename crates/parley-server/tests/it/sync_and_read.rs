//! Incremental sync and multi-device read over HTTP and WebSocket (chapters 07 and 09).

use std::time::Duration;

use crate::ws_support::Ws;
use anyhow::{ensure, Result};
use parley_client::{Method, NewConversation};
use parley_testkit::{test_on_both_stores, ServerConfig, StoreKind, TestServer};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(5);

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    check_07_epoch_invalidates_cursor
);
/// Bumping the epoch (the log was rebuilt) invalidates every cursor: events-after with the old
/// epoch answers 409 EPOCH_CHANGED over HTTP and over WebSocket; without an epoch the answer
/// carries the new one.
async fn check_07_epoch_invalidates_cursor(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ana = server.user_with_device("u-ana").await;
    ana.create_conversation(&NewConversation::group(Vec::<String>::new()).with_conv_id("c-e"))
        .await?;
    ana.send("c-e", "m-1", "x").await?;
    let page = ana.events_after("c-e", 0, None, Some(1)).await?;
    ensure!(
        page.epoch == 1 && page.head == 2,
        "before: epoch {} head {}",
        page.epoch,
        page.head
    );

    server
        .sql()
        .execute(
            "UPDATE conversations SET epoch = epoch + 1 WHERE conv_id = 'c-e'",
            &[],
        )
        .await?;
    let stale = ana.events_after("c-e", 2, None, Some(1)).await;
    ensure!(
        stale.as_ref().err().and_then(|e| e.code()) == Some("EPOCH_CHANGED"),
        "stale cursor: {stale:?}"
    );
    ensure!(
        stale.as_ref().err().and_then(|e| e.status()) == Some(409),
        "status"
    );
    let fresh = ana.events_after("c-e", 0, None, Some(2)).await?;
    ensure!(
        fresh.epoch == 2 && fresh.events.len() == 2,
        "refetch: epoch {} events {}",
        fresh.epoch,
        fresh.events.len()
    );

    let mut ws = Ws::connect(server.base_url(), ana.token()).await?;
    ws.send(json!({"type": "sync", "req_id": 1, "conv_id": "c-e", "after": 2, "epoch": 1}))
        .await?;
    let e = ws.next_of("error", WAIT).await?;
    ensure!(e["code"] == "EPOCH_CHANGED" && e["req_id"] == 1, "ws: {e}");
    Ok(())
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    check_09_read_reaches_other_devices
);
/// Marking read on one device reaches the user's other online devices as a `read` frame, and
/// their views show the lower unread count; the marking device gets no frame of its own.
async fn check_09_read_reaches_other_devices(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let phone = server.user_with_device("u-ana").await;
    let laptop = server.device("u-ana", "laptop").await;
    let tablet = server.device("u-ana", "tablet").await;
    let ben = server.user_with_device("u-ben").await;
    ben.create_conversation(&NewConversation::group(["u-ana"]).with_conv_id("c-r"))
        .await?;
    for i in 0..3 {
        ben.send("c-r", &format!("m-{i}"), "x").await?; // 3, 4, 5
    }
    ensure!(
        laptop.get_conversation("c-r").await?.unread == 3,
        "unread before"
    );
    let mut ws_phone = Ws::connect(server.base_url(), phone.token()).await?;
    let mut ws_laptop = Ws::connect(server.base_url(), laptop.token()).await?;
    let mut ws_tablet = Ws::connect(server.base_url(), tablet.token()).await?;
    for ws in [&mut ws_phone, &mut ws_laptop, &mut ws_tablet] {
        ws.send(json!({"type": "ping", "req_id": 0})).await?;
        ws.next_of("pong", WAIT).await?;
    }
    let ack = phone.mark_read("c-r", 4).await?;
    ensure!(ack.read_seq == 4, "ack {ack:?}");
    for ws in [&mut ws_laptop, &mut ws_tablet] {
        let f = ws.next_of("read", WAIT).await?;
        ensure!(
            f["conv_id"] == "c-r" && f["read_seq"] == 4,
            "read frame {f}"
        );
    }
    let own = ws_phone.next_json(Duration::from_millis(300)).await?;
    ensure!(own.is_none(), "the marking device got a frame: {own:?}");
    let view = tablet.get_conversation("c-r").await?;
    ensure!(
        view.read_seq == 4 && view.unread == 1,
        "tablet view: read {} unread {}",
        view.read_seq,
        view.unread
    );
    // Moving it back is a no-op: the answer is the position, and nobody is told.
    let back = laptop.mark_read("c-r", 2).await?;
    ensure!(back.read_seq == 4, "moved back: {back:?}");
    Ok(())
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    sync_feed_over_http
);
/// The feed over HTTP: a token from one answer returns only later changes; a bad token is 400.
async fn sync_feed_over_http(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ana = server.user_with_device("u-ana").await;
    let ben = server.user_with_device("u-ben").await;
    for i in 1..=3 {
        ben.create_conversation(&NewConversation::group(["u-ana"]).with_conv_id(format!("c-{i}")))
            .await?;
    }
    let all = ana.list_conversations(None).await?;
    ensure!(
        all.conversations.len() == 3,
        "all: {}",
        all.conversations.len()
    );
    ben.send("c-2", "m-1", "hello").await?;
    let changed = ana.list_conversations(Some(&all.sync_token)).await?;
    let ids: Vec<&str> = changed
        .conversations
        .iter()
        .map(|c| c.conv_id.as_str())
        .collect();
    ensure!(ids == vec!["c-2"], "changed: {ids:?}");
    let c2 = &changed.conversations[0];
    ensure!(
        c2.unread == 1 && c2.head == 3,
        "c-2: unread {} head {}",
        c2.unread,
        c2.head
    );
    let preview = c2.last_event.as_ref().and_then(|e| e.body.clone());
    ensure!(
        preview.as_deref() == Some("hello"),
        "last_event preview: {preview:?}"
    );
    let (status, body) = ana
        .raw(Method::GET, "/v1/conversations?since=nonsense")
        .send()
        .await?;
    ensure!(
        status == 400 && body["error"]["code"] == "BAD_REQUEST",
        "bad token: {status} {body}"
    );
    Ok(())
}
