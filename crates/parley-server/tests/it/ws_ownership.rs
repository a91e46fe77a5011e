//! Connection ownership (chapter 05): routes, kicks and revocation.

use std::time::Duration;

use crate::ws_support::Ws;
use anyhow::{ensure, Result};
use parley_domain::{DeviceId, UserId};
use parley_testkit::{test_on_both_stores, ServerConfig, StoreKind, TestServer};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(5);

async fn route_conn(server: &TestServer, user: &str) -> Result<Option<String>> {
    Ok(server
        .sql()
        .optional(
            "SELECT conn_id FROM routes WHERE user_id = $1 AND device_id = 'd1'",
            &[user.into()],
        )
        .await?)
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    check_05_kick_old_connection
);
/// A newer connection of the same device closes the older one with `kicked` and 4001.
async fn check_05_kick_old_connection(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ana = server.user_with_device("u-ana").await;
    let mut old = Ws::connect(server.base_url(), ana.token()).await?;
    old.send(json!({"type": "ping", "req_id": 1})).await?;
    old.next_of("pong", WAIT).await?;
    let mut new = Ws::connect(server.base_url(), ana.token()).await?;
    let (code, frames) = old.until_close(WAIT).await?;
    ensure!(code == 4001, "close code {code}");
    ensure!(
        frames.iter().any(|f| f["type"] == "kicked"),
        "no kicked frame before close: {frames:?}"
    );
    new.send(json!({"type": "ping", "req_id": 2})).await?;
    ensure!(
        new.next_of("pong", WAIT).await?["req_id"] == 2,
        "new connection not serving"
    );
    Ok(())
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    check_05_old_cleanup_keeps_new_route
);
/// The old connection's cleanup keeps the new connection's route (P9), both through the
/// gateway and at the store's compare-and-delete.
async fn check_05_old_cleanup_keeps_new_route(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ana = server.user_with_device("u-ana").await;
    let mut old = Ws::connect(server.base_url(), ana.token()).await?;
    old.send(json!({"type": "ping", "req_id": 1})).await?;
    old.next_of("pong", WAIT).await?;
    let first = route_conn(&server, "u-ana").await?;
    ensure!(first.is_some(), "no route for the first connection");
    let mut new = Ws::connect(server.base_url(), ana.token()).await?;
    new.send(json!({"type": "ping", "req_id": 2})).await?;
    new.next_of("pong", WAIT).await?;
    let (code, _) = old.until_close(WAIT).await?;
    ensure!(code == 4001, "old close code {code}");
    // The server cleans up after the close handshake, which the old client ends by leaving.
    // The cleanup, its route release included, has run once the connection left the count of
    // open connections; then the route must still be the new one's.
    drop(old);
    crate::waits::open_websockets(&server, 1.0, WAIT).await?;
    let second = route_conn(&server, "u-ana").await?;
    ensure!(
        second.is_some() && second != first,
        "route after old cleanup: {second:?} (first {first:?})"
    );

    // The store's guard by itself: releasing with the old conn_id deletes nothing.
    let (user, device) = (UserId::parse("u-ana")?, DeviceId::parse("d1")?);
    let stale = first.unwrap_or_default();
    ensure!(
        !server.store().release_route(&user, &device, &stale).await?,
        "stale release deleted a route"
    );
    ensure!(
        route_conn(&server, "u-ana").await? == second,
        "route changed by stale release"
    );
    // The negative control, the same cleanup with the compare-and-delete removed (the test
    // break `cleanup-without-cad`), is `05-control-cleanup-without-compare-and-delete`: on
    // both stores in `parley-store/tests/it/break_controls.rs`, and through a `parley serve`
    // gateway in `parley/tests/it/break_process.rs`.
    drop(new);
    Ok(())
}

// `05-reissued-token-closes-socket` is a check of `parley verify`, run on both stores by
// `verify_checks.rs`.

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    check_05_revoked_token_closes_socket
);
/// Revoking a device's token closes its sockets with 4003.
async fn check_05_revoked_token_closes_socket(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ana = server.user_with_device("u-ana").await;
    let mut ws = Ws::connect(server.base_url(), ana.token()).await?;
    ws.send(json!({"type": "ping", "req_id": 1})).await?;
    ws.next_of("pong", WAIT).await?;
    server.admin().revoke_device("u-ana", "d1").await?;
    let (code, _) = ws.until_close(WAIT).await?;
    ensure!(code == 4003, "close code {code}");
    // And the revoked token cannot connect again: the upgrade answers 401.
    let again = Ws::connect(server.base_url(), ana.token()).await;
    ensure!(
        again.is_err() && format!("{:?}", again.err()).contains("401"),
        "revoked token connected"
    );
    Ok(())
}
