//! Two gateways on one PostgreSQL database, joined by `PgBus` or by `NatsBus`: the side effects
//! of a write made on one reach the user's devices connected to the other. Each check runs on
//! both buses, as `<check>_pgbus` and `<check>_nats`.
//!
//! On NATS, gateways of parallel tests share the machine's server and its subjects, so every
//! user and conversation id carries a suffix of its own ([`unique`]): another test's notices
//! then concern users this one does not have.

use std::time::Duration;

use crate::nats_bus::SHARED_NATS_URL;
use crate::ws_support::Ws;
use anyhow::{ensure, Result};
use parley_client::{DeliveryMode, NewConversation};
use parley_testkit::{GatewayBus, ServerConfig, TestServer};
use serde_json::json;

pub const WAIT: Duration = Duration::from_secs(10);
/// How long to watch for a frame that must not come.
pub const QUIET_PERIOD_MS: u64 = 300;

/// `prefix` with a suffix no other test uses.
pub fn unique(prefix: &str) -> String {
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    format!("{prefix}-{}", &suffix[..12])
}

/// The machine's NATS server, or PostgreSQL's notifications.
pub fn bus_of(nats: bool) -> GatewayBus {
    if nats {
        GatewayBus::Nats(SHARED_NATS_URL.into())
    } else {
        GatewayBus::Postgres
    }
}

/// Connects and waits for the answer to a ping, so the gateway has registered the connection
/// and claimed its route.
pub async fn online(base_url: &str, token: &str) -> Result<Ws> {
    let mut ws = Ws::connect(base_url, token).await?;
    ping(&mut ws, 0).await?;
    Ok(ws)
}

/// Terminates the `PgBus` listener connection of `node`, as a network fault would; the bus
/// reconnects on its own and announces `Reconnected`.
pub async fn kill_listener(node: &TestServer) -> Result<()> {
    let listener = format!("parley-listen {}", node.pg_bus().gateway_id());
    let killed: i64 = node
        .sql()
        .one(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
              WHERE datname = current_database() AND application_name = $1) AS t",
            &[listener.as_str().into()],
        )
        .await?;
    ensure!(killed == 1, "{killed} listener backends terminated");
    Ok(())
}

/// A ping answered: the connection is open and served.
pub async fn ping(ws: &mut Ws, req_id: u64) -> Result<()> {
    ws.send(json!({"type": "ping", "req_id": req_id})).await?;
    let pong = ws.next_of("pong", WAIT).await?;
    ensure!(pong["req_id"] == req_id, "{pong}");
    Ok(())
}

/// Nothing but presence frames (co-members coming and going) arrives within the quiet period.
pub async fn quiet(ws: &mut Ws, name: &str) -> Result<()> {
    let until = tokio::time::Instant::now() + Duration::from_millis(QUIET_PERIOD_MS);
    loop {
        let left = until.saturating_duration_since(tokio::time::Instant::now());
        match ws.next_json(left).await? {
            None => return Ok(()),
            Some(f) if f["type"] == "presence" => {}
            Some(f) => anyhow::bail!("{name} got a frame: {f}"),
        }
    }
}

pub async fn stop_all(nodes: Vec<TestServer>) {
    for node in nodes {
        node.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_on_gateway_a_reaches_the_users_device_on_gateway_b_pgbus() -> Result<()> {
    a_read_on_gateway_a_reaches_the_users_device_on_gateway_b(bus_of(false)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_on_gateway_a_reaches_the_users_device_on_gateway_b_nats() -> Result<()> {
    a_read_on_gateway_a_reaches_the_users_device_on_gateway_b(bus_of(true)).await
}

async fn a_read_on_gateway_a_reaches_the_users_device_on_gateway_b(bus: GatewayBus) -> Result<()> {
    let nodes = TestServer::start_gateways_on(&bus, 2, ServerConfig::default()).await;
    let (a, b) = (&nodes[0], &nodes[1]);
    let (ana, ben, conv) = (unique("u-ana"), unique("u-ben"), unique("c-r"));
    let phone = a.user_with_device(&ana).await;
    let laptop = a.device(&ana, "laptop").await;
    let tablet = a.device(&ana, "tablet").await;
    let ben = a.user_with_device(&ben).await;
    ben.create_conversation(&NewConversation::group([ana.as_str()]).with_conv_id(&conv))
        .await?;
    for i in 0..3 {
        ben.send(&conv, &format!("m-{i}"), "x").await?; // 3, 4, 5
    }
    let mut ws_phone = online(a.base_url(), phone.token()).await?;
    let mut ws_tablet = online(a.base_url(), tablet.token()).await?;
    let mut ws_laptop = online(b.base_url(), laptop.token()).await?;

    let ack = phone.mark_read(&conv, 4).await?;
    ensure!(ack.read_seq == 4, "ack {ack:?}");
    for (ws, name) in [
        (&mut ws_laptop, "laptop on B"),
        (&mut ws_tablet, "tablet on A"),
    ] {
        let f = ws.next_of("read", WAIT).await?;
        ensure!(
            f["conv_id"] == conv.as_str() && f["read_seq"] == 4,
            "{name}: read frame {f}"
        );
    }
    quiet(&mut ws_phone, "the marking device").await?;
    if bus == GatewayBus::Postgres {
        ensure!(
            b.pg_bus().stats().notices_received >= 1,
            "{:?}",
            b.pg_bus().stats()
        );
    }
    stop_all(nodes).await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_on_gateway_a_closes_the_devices_socket_on_gateway_b_with_4003_pgbus(
) -> Result<()> {
    a_revocation_on_gateway_a_closes_the_devices_socket_on_gateway_b_with_4003(bus_of(false)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_on_gateway_a_closes_the_devices_socket_on_gateway_b_with_4003_nats(
) -> Result<()> {
    a_revocation_on_gateway_a_closes_the_devices_socket_on_gateway_b_with_4003(bus_of(true)).await
}

async fn a_revocation_on_gateway_a_closes_the_devices_socket_on_gateway_b_with_4003(
    bus: GatewayBus,
) -> Result<()> {
    let nodes = TestServer::start_gateways_on(&bus, 2, ServerConfig::default()).await;
    let (a, b) = (&nodes[0], &nodes[1]);
    let ana = unique("u-ana");
    let phone = a.user_with_device(&ana).await;
    let laptop = a.device(&ana, "laptop").await;
    let mut ws_phone = online(b.base_url(), phone.token()).await?;
    let mut ws_laptop = online(b.base_url(), laptop.token()).await?;

    a.admin().revoke_device(&ana, "laptop").await?;
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
async fn a_connection_of_the_new_token_survives_the_notice_of_the_token_it_replaced_pgbus(
) -> Result<()> {
    a_connection_of_the_new_token_survives_the_notice_of_the_token_it_replaced(bus_of(false)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_of_the_new_token_survives_the_notice_of_the_token_it_replaced_nats(
) -> Result<()> {
    a_connection_of_the_new_token_survives_the_notice_of_the_token_it_replaced(bus_of(true)).await
}

async fn a_connection_of_the_new_token_survives_the_notice_of_the_token_it_replaced(
    bus: GatewayBus,
) -> Result<()> {
    let nodes = TestServer::start_gateways_on(&bus, 2, ServerConfig::default()).await;
    let (a, b) = (&nodes[0], &nodes[1]);
    let (ana, ben, conv) = (unique("u-ana"), unique("u-ben"), unique("c-r"));
    a.user_with_device(&ana).await;
    a.user_with_device(&ben).await;
    let other = a.device(&ana, "d2").await;
    other
        .create_conversation(&NewConversation::group([ben.as_str()]).with_conv_id(&conv))
        .await?;
    // Re-issuing replaces the device's token; the new one connects to B at once, most likely
    // before B hears of the replacement.
    let fresh = a.device(&ana, "d1").await;
    let mut ws = online(b.base_url(), fresh.token()).await?;
    // A read on A announced after the re-issue: the bus keeps a user's notices in order and
    // B applies them one after the other, so once its frame arrives B has checked the new
    // token against both notices of the device.
    other.mark_read(&conv, 1).await?;
    let read = ws.next_of("read", WAIT).await?;
    ensure!(read["conv_id"] == conv.as_str(), "{read}");
    ping(&mut ws, 1).await?;
    stop_all(nodes).await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_hint_reaches_a_device_on_the_other_gateway_pgbus() -> Result<()> {
    a_pull_hint_reaches_a_device_on_the_other_gateway(bus_of(false)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_hint_reaches_a_device_on_the_other_gateway_nats() -> Result<()> {
    a_pull_hint_reaches_a_device_on_the_other_gateway(bus_of(true)).await
}

/// A send into a pull group on A reaches the member's devices on B and on A as a `hint` with
/// the new head, never as an event frame.
async fn a_pull_hint_reaches_a_device_on_the_other_gateway(bus: GatewayBus) -> Result<()> {
    let nodes = TestServer::start_gateways_on(&bus, 2, ServerConfig::default()).await;
    let (a, b) = (&nodes[0], &nodes[1]);
    let (ana, ben, conv) = (unique("u-ana"), unique("u-ben"), unique("c-pull"));
    let ana = a.user_with_device(&ana).await;
    let ben_b = a.user_with_device(&ben).await;
    let ben_a = a.device(&ben, "d2").await;
    ana.create_conversation(
        &NewConversation::group([ben.as_str()])
            .with_conv_id(&conv)
            .with_delivery_mode(DeliveryMode::Pull),
    )
    .await?;
    let mut ws_on_b = online(b.base_url(), ben_b.token()).await?;
    let mut ws_on_a = online(a.base_url(), ben_a.token()).await?;

    let head = ana.send(&conv, "m-1", "x").await?.seq;
    for (ws, name) in [(&mut ws_on_b, "ben on B"), (&mut ws_on_a, "ben on A")] {
        // Hints of the conversation's joins may come first; the send's head comes last.
        loop {
            let frame = ws.next_json(WAIT).await?;
            let Some(frame) = frame else {
                anyhow::bail!("{name}: no hint of head {head} within {WAIT:?}");
            };
            ensure!(frame["type"] == "hint", "{name}: {frame} in a pull group");
            ensure!(frame["conv_id"] == conv.as_str(), "{name}: {frame}");
            if frame["head"] == head {
                break;
            }
        }
    }
    quiet(&mut ws_on_b, "ben on B after the head").await?;
    stop_all(nodes).await;
    Ok(())
}

/// A revocation whose notice never reached B (made in the store alone here, as if lost with
/// the bus) leaves the socket open; once B's bus reconnects, B checks every connection's token
/// and closes it with 4003. `PgBus` only: its listener connection can be killed on demand,
/// while a NATS client buffers what it publishes while disconnected and may still deliver it.
///
/// The device's token is issued in the store alone too: issuing it through the API announces
/// the device's earlier token revoked, and that notice, slow to reach B, would make B check
/// the token after its revocation and close the socket before the bus is down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_lost_with_the_bus_closes_the_socket_once_the_bus_reconnected_pgbus(
) -> Result<()> {
    let nodes = TestServer::start_gateways(2, ServerConfig::default()).await;
    let (a, b) = (&nodes[0], &nodes[1]);
    let user_id = parley_domain::UserId::parse(&unique("u-ana"))?;
    let device_id = parley_domain::DeviceId::parse(parley_testkit::TEST_DEVICE_ID)?;
    let (token, token_hash) = parley_store::token::new_device_token();
    a.store().create_user(&user_id, None).await?;
    a.store()
        .issue_device_token(&user_id, &device_id, &token_hash)
        .await?;
    let mut ws = online(b.base_url(), &token).await?;

    a.store().revoke_device(&user_id, &device_id).await?;
    quiet(&mut ws, "the phone on B, its revocation not announced").await?;
    ping(&mut ws, 1).await?;

    kill_listener(b).await?;
    let (code, _) = ws.until_close(WAIT).await?;
    ensure!(code == 4003, "close code {code}");
    ensure!(
        b.pg_bus().stats().listen_reconnects >= 1,
        "{:?}",
        b.pg_bus().stats()
    );
    stop_all(nodes).await;
    Ok(())
}
