//! Incremental sync and multi-device read over HTTP and WebSocket (chapters 07 and 09).

use std::time::Duration;

use crate::ws_support::Ws;
use anyhow::{ensure, Result};
use parley_client::NewConversation;
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
    crate::verify_checks::passes(store, "09-read-reaches-other-devices").await
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    sync_feed_over_http
);
/// The feed over HTTP: a token from one answer returns only later changes; a bad token is 400.
async fn sync_feed_over_http(store: StoreKind) -> Result<()> {
    crate::verify_checks::passes(store, "07-sync-feed-only-changed").await
}
