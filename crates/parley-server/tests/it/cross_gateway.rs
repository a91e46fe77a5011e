//! 10-cross-gateway-kick (SPEC §10, chapter 05): a device that connects on gateway B while its
//! route names a live connection on gateway A gets A's connection closed with `kicked` and
//! 4001 through the bus; B's connection stays and keeps the route after A's connection is
//! cleaned up (P9). Checked on `PgBus` and on `NatsBus`.

use std::time::Instant;

use crate::metrics::{scrape, value};
use crate::two_gateways::{bus_of, kill_listener, online, ping, quiet, stop_all, unique, WAIT};
use crate::ws_support::Ws;
use anyhow::{bail, ensure, Context, Result};
use parley_bus::Notice;
use parley_client::NewConversation;
use parley_domain::{DeviceId, UserId};
use parley_store::Route;
use parley_testkit::{GatewayBus, ServerConfig, TestServer, TEST_DEVICE_ID};
use serde_json::json;

const OPEN_SOCKETS: &str = "parley_open_connections{kind=\"websocket\"}";

/// The device's route as `(gateway_id, conn_id)`, if it has one.
async fn route_of(node: &TestServer, user: &str, device: &str) -> Result<Option<(String, String)>> {
    let route: Option<String> = node
        .sql()
        .optional(
            "SELECT gateway_id || ' ' || conn_id FROM routes WHERE user_id = $1 AND device_id = $2",
            &[user.into(), device.into()],
        )
        .await?;
    Ok(route.and_then(|r| {
        let (gateway, conn) = r.split_once(' ')?;
        Some((gateway.to_owned(), conn.to_owned()))
    }))
}

/// Waits until `node` holds `count` WebSocket connections: a connection is counted until its
/// cleanup, route release included, is done.
async fn until_open_sockets(node: &TestServer, count: f64) -> Result<()> {
    let deadline = Instant::now() + WAIT;
    loop {
        let open = value(&scrape(node).await?, OPEN_SOCKETS);
        if open == count {
            return Ok(());
        }
        ensure!(
            Instant::now() < deadline,
            "{open} sockets open, not {count}, after {WAIT:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// The event `seq` of `conv` arrives; events before it (the conversation's joins, when their
/// announcements reach the gateway after the connection did) are passed over.
async fn pushed(ws: &mut Ws, conv: &str, seq: i64, name: &str) -> Result<()> {
    loop {
        let frame = ws.next_of("event", WAIT).await.context(name.to_owned())?;
        let got = frame["event"]["seq"].as_i64().context("seq")?;
        ensure!(
            frame["event"]["conv_id"] == conv && got <= seq,
            "{name}: {frame}"
        );
        if got == seq {
            return Ok(());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_10_cross_gateway_kick_pgbus() -> Result<()> {
    cross_gateway_kick(bus_of(false)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_10_cross_gateway_kick_nats() -> Result<()> {
    cross_gateway_kick(bus_of(true)).await
}

/// The phone connects on A, then the same phone on B: A's connection gets `kicked` and 4001,
/// B's stays usable and keeps the route once A's connection is cleaned up. The user's laptop
/// on A is not kicked (a kick names one connection, not the user's).
async fn cross_gateway_kick(bus: GatewayBus) -> Result<()> {
    let nodes = TestServer::start_gateways_on(&bus, 2, ServerConfig::default()).await;
    let (a, b) = (&nodes[0], &nodes[1]);
    let (ana, ben, conv) = (unique("u-ana"), unique("u-ben"), unique("c-k"));
    let phone = a.user_with_device(&ana).await;
    let laptop = a.device(&ana, "laptop").await;
    let ben_client = a.user_with_device(&ben).await;
    ben_client
        .create_conversation(&NewConversation::group([ana.as_str()]).with_conv_id(&conv))
        .await?;
    // Ben on B tells which gateway id B has.
    let _ws_ben = online(b.base_url(), ben_client.token()).await?;
    let (gateway_b, _) = route_of(b, &ben, TEST_DEVICE_ID)
        .await?
        .context("ben's route on B")?;

    let mut ws_phone_a = online(a.base_url(), phone.token()).await?;
    let mut ws_laptop_a = online(a.base_url(), laptop.token()).await?;
    let (gateway_a, conn_a) = route_of(a, &ana, TEST_DEVICE_ID)
        .await?
        .context("the phone's route on A")?;
    ensure!(gateway_a != gateway_b, "both gateways are {gateway_a}");

    let mut ws_phone_b = online(b.base_url(), phone.token()).await?;
    let (code, frames) = ws_phone_a.until_close(WAIT).await?;
    ensure!(code == 4001, "close code {code} on A");
    ensure!(
        frames.contains(&json!({"type": "kicked"})),
        "no kicked frame before the close on A: {frames:?}"
    );

    // A's cleanup ran (its socket is no longer counted), and the route still names B's
    // connection: compare-and-delete left the newer route alone.
    until_open_sockets(a, 1.0).await?;
    let Some((gateway, conn)) = route_of(a, &ana, TEST_DEVICE_ID).await? else {
        bail!("the phone has no route after A's cleanup");
    };
    ensure!(
        gateway == gateway_b && conn != conn_a,
        "route {gateway}/{conn}, expected one on {gateway_b}"
    );

    // B's connection is open and served, and so is the laptop on A.
    ping(&mut ws_phone_b, 1).await?;
    ping(&mut ws_laptop_a, 1).await?;
    let seq = ben_client.send(&conv, "m-1", "x").await?.seq;
    pushed(&mut ws_phone_b, &conv, seq, "phone on B").await?;
    pushed(&mut ws_laptop_a, &conv, seq, "laptop on A").await?;
    quiet(&mut ws_phone_b, "phone on B").await?;
    stop_all(nodes).await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kick_comes_from_the_notice_not_the_route_table_pgbus() -> Result<()> {
    the_kick_comes_from_the_notice_not_the_route_table(bus_of(false)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kick_comes_from_the_notice_not_the_route_table_nats() -> Result<()> {
    the_kick_comes_from_the_notice_not_the_route_table(bus_of(true)).await
}

/// Negative control of the kick check: the route taken in the store without a notice leaves
/// A's connection open (so the 4001 above is the bus's doing), and the notice alone, naming
/// A's connection, closes it with `kicked` + 4001.
async fn the_kick_comes_from_the_notice_not_the_route_table(bus: GatewayBus) -> Result<()> {
    let nodes = TestServer::start_gateways_on(&bus, 2, ServerConfig::default()).await;
    let (a, b) = (&nodes[0], &nodes[1]);
    let ana = unique("u-ana");
    let phone = a.user_with_device(&ana).await;
    let mut ws_phone_a = online(a.base_url(), phone.token()).await?;
    let (gateway_a, conn_a) = route_of(a, &ana, TEST_DEVICE_ID)
        .await?
        .context("the phone's route on A")?;

    let user_id = UserId::parse(&ana)?;
    let device_id = DeviceId::parse(TEST_DEVICE_ID)?;
    let elsewhere = Route {
        user_id: user_id.clone(),
        device_id: device_id.clone(),
        gateway_id: unique("gw-elsewhere"),
        conn_id: unique("conn"),
    };
    let replaced = b.store().claim_route(&elsewhere).await?;
    ensure!(
        replaced.as_ref().map(|r| (&r.gateway_id, &r.conn_id)) == Some((&gateway_a, &conn_a)),
        "replaced {replaced:?}"
    );
    quiet(
        &mut ws_phone_a,
        "the phone on A, its route taken without a notice",
    )
    .await?;
    ping(&mut ws_phone_a, 1).await?;

    b.bus().notify(Notice::RouteTaken {
        user_id,
        device_id,
        gateway_id: gateway_a,
        conn_id: conn_a,
    });
    let (code, frames) = ws_phone_a.until_close(WAIT).await?;
    ensure!(code == 4001, "close code {code} on A");
    ensure!(frames.contains(&json!({"type": "kicked"})), "{frames:?}");
    stop_all(nodes).await;
    Ok(())
}

/// A kick lost with the bus is repaired once the bus reconnects: the phone's route is taken in
/// the store with no notice at all (as if the kick were published while A's listener was
/// down), A's connection stays open, then A's listener connection is killed; after it
/// reconnects, A checks its connections' routes and closes the phone's with `kicked` + 4001.
/// The laptop of the same user on A, whose route still names its connection, stays open.
/// `PgBus` only: its listener connection can be killed on demand, while the NATS client
/// buffers what is published during a disconnect, so a notice cannot be lost on purpose.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kick_lost_with_the_bus_is_repaired_once_the_bus_reconnected_pgbus() -> Result<()> {
    let nodes = TestServer::start_gateways_on(&bus_of(false), 2, ServerConfig::default()).await;
    let (a, b) = (&nodes[0], &nodes[1]);
    let ana = unique("u-ana");
    let phone = a.user_with_device(&ana).await;
    let laptop = a.device(&ana, "laptop").await;
    let mut ws_phone = online(a.base_url(), phone.token()).await?;
    let mut ws_laptop = online(a.base_url(), laptop.token()).await?;
    route_of(a, &ana, TEST_DEVICE_ID)
        .await?
        .context("the phone's route on A")?;
    route_of(a, &ana, "laptop")
        .await?
        .context("the laptop's route on A")?;

    let taken = Route {
        user_id: UserId::parse(&ana)?,
        device_id: DeviceId::parse(TEST_DEVICE_ID)?,
        gateway_id: b.pg_bus().gateway_id().to_owned(),
        conn_id: unique("conn"),
    };
    b.store().claim_route(&taken).await?;
    quiet(&mut ws_phone, "the phone on A, its kick not announced").await?;
    ping(&mut ws_phone, 1).await?;

    kill_listener(a).await?;
    let (code, frames) = ws_phone.until_close(WAIT).await?;
    ensure!(code == 4001, "close code {code} on A");
    ensure!(frames.contains(&json!({"type": "kicked"})), "{frames:?}");
    ping(&mut ws_laptop, 2).await?;
    stop_all(nodes).await;
    Ok(())
}
