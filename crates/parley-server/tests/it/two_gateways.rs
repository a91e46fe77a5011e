//! Two gateways on one PostgreSQL database, each with its own PgBus: the side effects of a
//! write made on one reach the user's devices connected to the other.

use std::time::Duration;

use crate::ws_support::Ws;
use anyhow::{ensure, Result};
use parley_client::NewConversation;
use parley_testkit::{ServerConfig, TestServer};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(10);
/// How long to watch for a frame that must not come.
const QUIET_PERIOD_MS: u64 = 300;

/// Connects and waits for the answer to a ping, so the gateway has registered the connection.
async fn online(base_url: &str, token: &str) -> Result<Ws> {
    let mut ws = Ws::connect(base_url, token).await?;
    ping(&mut ws, 0).await?;
    Ok(ws)
}

/// A ping answered: the connection is open and served.
async fn ping(ws: &mut Ws, req_id: u64) -> Result<()> {
    ws.send(json!({"type": "ping", "req_id": req_id})).await?;
    let pong = ws.next_of("pong", WAIT).await?;
    ensure!(pong["req_id"] == req_id, "{pong}");
    Ok(())
}

async fn stop_all(nodes: Vec<TestServer>) {
    for node in nodes {
        node.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_on_gateway_a_reaches_the_users_device_on_gateway_b() -> Result<()> {
    let nodes = TestServer::start_gateways(2, ServerConfig::default()).await;
    let (a, b) = (&nodes[0], &nodes[1]);
    let phone = a.user_with_device("u-ana").await;
    let laptop = a.device("u-ana", "laptop").await;
    let tablet = a.device("u-ana", "tablet").await;
    let ben = a.user_with_device("u-ben").await;
    ben.create_conversation(&NewConversation::group(["u-ana"]).with_conv_id("c-r"))
        .await?;
    for i in 0..3 {
        ben.send("c-r", &format!("m-{i}"), "x").await?; // 3, 4, 5
    }
    let mut ws_phone = online(a.base_url(), phone.token()).await?;
    let mut ws_tablet = online(a.base_url(), tablet.token()).await?;
    let mut ws_laptop = online(b.base_url(), laptop.token()).await?;

    let ack = phone.mark_read("c-r", 4).await?;
    ensure!(ack.read_seq == 4, "ack {ack:?}");
    for (ws, name) in [
        (&mut ws_laptop, "laptop on B"),
        (&mut ws_tablet, "tablet on A"),
    ] {
        let f = ws.next_of("read", WAIT).await?;
        ensure!(
            f["conv_id"] == "c-r" && f["read_seq"] == 4,
            "{name}: read frame {f}"
        );
    }
    let own = ws_phone
        .next_json(Duration::from_millis(QUIET_PERIOD_MS))
        .await?;
    ensure!(own.is_none(), "the marking device got a frame: {own:?}");
    ensure!(
        b.pg_bus().stats().notices_received >= 1,
        "{:?}",
        b.pg_bus().stats()
    );
    stop_all(nodes).await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_on_gateway_a_closes_the_devices_socket_on_gateway_b_with_4003() -> Result<()>
{
    let nodes = TestServer::start_gateways(2, ServerConfig::default()).await;
    let (a, b) = (&nodes[0], &nodes[1]);
    let phone = a.user_with_device("u-ana").await;
    let laptop = a.device("u-ana", "laptop").await;
    let mut ws_phone = online(b.base_url(), phone.token()).await?;
    let mut ws_laptop = online(b.base_url(), laptop.token()).await?;

    a.admin().revoke_device("u-ana", "laptop").await?;
    let (code, _) = ws_laptop.until_close(WAIT).await?;
    ensure!(code == 4003, "close code {code}");
    // The user's other device on B stays connected.
    ping(&mut ws_phone, 1).await?;
    // And the revoked token cannot connect to B again.
    let again = Ws::connect(b.base_url(), laptop.token()).await;
    ensure!(
        again.is_err() && format!("{:?}", again.err()).contains("401"),
        "revoked token connected"
    );
    stop_all(nodes).await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_of_the_new_token_survives_the_notice_of_the_token_it_replaced() -> Result<()>
{
    let nodes = TestServer::start_gateways(2, ServerConfig::default()).await;
    let (a, b) = (&nodes[0], &nodes[1]);
    a.user_with_device("u-ana").await;
    // Re-issuing replaces the device's token; the new one connects to B at once, most likely
    // before B hears of the replacement.
    let fresh = a.device("u-ana", "d1").await;
    let mut ws = online(b.base_url(), fresh.token()).await?;
    tokio::time::timeout(WAIT, async {
        // The notices of both issues, the first token's and the new one's.
        while b.pg_bus().stats().notices_received < 2 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await?;
    tokio::time::sleep(Duration::from_millis(QUIET_PERIOD_MS)).await;
    ping(&mut ws, 1).await?;
    stop_all(nodes).await;
    Ok(())
}
