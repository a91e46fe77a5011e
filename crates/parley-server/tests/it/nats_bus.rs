//! Gateways on one PostgreSQL database joined by `NatsBus`, each named after its check (SPEC
//! §10): every send reaches the device on the other gateway exactly once and in order, and a
//! NATS server restarted mid-sends loses nothing acked (the gateways repair from the log and
//! reconnect without a restart of their own).

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::two_gateways::stop_all;
use crate::ws_support::Ws;
use anyhow::{bail, ensure, Context, Result};
use parley_client::NewConversation;
use parley_testkit::{free_addr, GatewayBus, ServerConfig, TestServer};
use serde_json::{json, Value};

/// The machine's NATS server, which scripts/test.sh checks or starts.
pub const SHARED_NATS_URL: &str = "nats://127.0.0.1:4222";
/// The NATS server binary of Debian's package.
const NATS_SERVER_BIN: &str = "/usr/sbin/nats-server";
/// Longest wait for a frame, a server start or a repair.
const WAIT: Duration = Duration::from_secs(20);

/// Connects and waits for the answer to a ping, so the gateway has registered the connection.
async fn online(base_url: &str, token: &str) -> Result<Ws> {
    let mut ws = Ws::connect(base_url, token).await?;
    ws.send(json!({"type": "ping", "req_id": 0})).await?;
    let pong = ws.next_of("pong", WAIT).await?;
    ensure!(pong["req_id"] == 0, "{pong}");
    Ok(ws)
}

/// Reads event frames of `conv` until `head` arrived, returning every pushed seq in order.
async fn pushed_until(ws: &mut Ws, conv: &str, head: i64, wait: Duration) -> Result<Vec<i64>> {
    let deadline = Instant::now() + wait;
    let mut seqs = Vec::new();
    while seqs.last().is_none_or(|last| *last < head) {
        let left = deadline.saturating_duration_since(Instant::now());
        let Some(frame) = ws.next_json(left).await? else {
            bail!("pushed {seqs:?}, head {head} not reached within {wait:?}");
        };
        if frame["type"] == "event" && frame["event"]["conv_id"] == conv {
            seqs.push(frame["event"]["seq"].as_i64().context("seq")?);
        }
    }
    Ok(seqs)
}

/// Every seq from `from` to `to` exactly once, in order.
fn ensure_exact(seqs: &[i64], from: i64, to: i64) -> Result<()> {
    let expected: Vec<i64> = (from..=to).collect();
    ensure!(seqs == expected, "pushed {seqs:?}, expected {from}..={to}");
    Ok(())
}

/// Every seq from `from` to `to` exactly once, in order, after any earlier events: an event
/// committed before the device connected (the conversation's joins) may still be pushed when
/// its announcement reaches the gateway after the connection did.
fn ensure_exact_from(seqs: &[i64], from: i64, to: i64) -> Result<()> {
    ensure!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "pushed {seqs:?}: a repeat or a reorder"
    );
    let since: Vec<i64> = seqs.iter().copied().filter(|s| *s >= from).collect();
    ensure_exact(&since, from, to)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_10_every_device_on_every_gateway_nats() -> Result<()> {
    every_device_on_every_gateway(GatewayBus::Nats(SHARED_NATS_URL.into()), "nats").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_10_every_device_on_every_gateway_pgbus() -> Result<()> {
    every_device_on_every_gateway(GatewayBus::Postgres, "pgbus").await
}

/// 10-every-device-on-every-gateway: three members of one group, each online on another of
/// three gateways, take turns sending through their own gateway; every device receives every
/// message exactly once and in seq order, and nothing after the head.
async fn every_device_on_every_gateway(bus: GatewayBus, name: &str) -> Result<()> {
    const SENDS: usize = 60;
    let nodes = TestServer::start_gateways_on(&bus, 3, ServerConfig::default()).await;
    let users = ["u-ana", "u-ben", "u-cy"];
    let mut clients = Vec::new();
    for (node, user) in nodes.iter().zip(users) {
        clients.push(node.user_with_device(user).await);
    }
    // Other processes may share this NATS server: a conversation id of this process.
    let conv = format!("c-{name}-{}", std::process::id());
    clients[0]
        .create_conversation(&NewConversation::group(["u-ben", "u-cy"]).with_conv_id(&conv))
        .await?;
    let mut sockets = Vec::new();
    for (node, client) in nodes.iter().zip(&clients) {
        sockets.push(online(node.base_url(), client.token()).await?);
    }
    let mut acked = Vec::new();
    for i in 0..SENDS {
        let sender = &clients[i % clients.len()];
        acked.push(sender.send(&conv, &format!("m-{i}"), "x").await?.seq);
    }
    let (first, head) = (acked[0], acked[acked.len() - 1]);
    ensure_exact(&acked, first, head)?;
    for (ws, user) in sockets.iter_mut().zip(users) {
        let pushed = pushed_until(ws, &conv, head, WAIT).await?;
        ensure_exact_from(&pushed, first, head).with_context(|| format!("pushed to {user}"))?;
    }
    // Nothing more comes: no duplicate from another gateway's copy of an announcement.
    for (ws, user) in sockets.iter_mut().zip(users) {
        let after = ws.next_json(Duration::from_millis(300)).await?;
        ensure!(
            after.is_none(),
            "a frame after the head at {user}: {after:?}"
        );
    }
    stop_all(nodes).await;
    Ok(())
}

/// A private `nats-server` on a port of its own, killed when dropped.
struct NatsServer {
    addr: SocketAddr,
    child: Child,
}

impl NatsServer {
    async fn start(addr: SocketAddr) -> Result<NatsServer> {
        let child = Command::new(NATS_SERVER_BIN)
            .args(["-a", &addr.ip().to_string(), "-p", &addr.port().to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("cannot start {NATS_SERVER_BIN}"))?;
        let deadline = Instant::now() + WAIT;
        while tokio::net::TcpStream::connect(addr).await.is_err() {
            ensure!(
                Instant::now() < deadline,
                "nats-server not listening on {addr}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(NatsServer { addr, child })
    }

    fn url(&self) -> String {
        format!("nats://{}", self.addr)
    }

    fn kill(&mut self) -> Result<()> {
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn readyz_bus(base_url: &str) -> Result<Value> {
    let body: Value = reqwest::get(format!("{base_url}/readyz"))
        .await?
        .json()
        .await?;
    Ok(body["bus"].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_10_nats_restart() -> Result<()> {
    let mut nats = NatsServer::start(free_addr()?).await?;
    let bus = GatewayBus::Nats(nats.url());
    let nodes = TestServer::start_gateways_on(&bus, 2, ServerConfig::default()).await;
    let (a, b) = (&nodes[0], &nodes[1]);
    let ana = a.user_with_device("u-ana").await;
    let ben = a.user_with_device("u-ben").await;
    ana.create_conversation(&NewConversation::group(["u-ben"]).with_conv_id("c-r"))
        .await?;
    let mut ws_ben = online(b.base_url(), ben.token()).await?;
    ensure!(readyz_bus(b.base_url()).await? == "ok");

    // Before, during and after the outage: every send is acked by gateway A's store.
    let mut acked = Vec::new();
    for i in 0..10 {
        acked.push(ana.send("c-r", &format!("before-{i}"), "x").await?.seq);
    }
    nats.kill()?;
    let mut degraded_seen = false;
    for i in 0..10 {
        acked.push(ana.send("c-r", &format!("during-{i}"), "x").await?.seq);
        degraded_seen |= readyz_bus(b.base_url()).await? == "degraded";
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    ensure!(
        degraded_seen,
        "/readyz of gateway B never said the bus was degraded"
    );
    let restarted = Instant::now();
    let nats = NatsServer::start(nats.addr).await?;
    // The last sends of the outage are announced by nobody after the restart: only the repair
    // from the log brings them to B.
    let (first, head) = (acked[0], acked[acked.len() - 1]);
    ensure_exact(&acked, first, head)?;
    let on_b = pushed_until(&mut ws_ben, "c-r", head, WAIT).await?;
    let repaired_ms = restarted.elapsed().as_millis();
    ensure_exact_from(&on_b, first, head)?;
    eprintln!("10-nats-restart: every acked send on B {repaired_ms} ms after the restart");

    // The gateways reconnected by themselves: new sends travel again, and readyz is ok.
    let deadline = Instant::now() + WAIT;
    while readyz_bus(b.base_url()).await? != "ok" {
        ensure!(Instant::now() < deadline, "gateway B still degraded");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut after = Vec::new();
    for i in 0..10 {
        after.push(ana.send("c-r", &format!("after-{i}"), "x").await?.seq);
    }
    let on_b = pushed_until(&mut ws_ben, "c-r", after[9], WAIT).await?;
    ensure_exact(&on_b, head + 1, after[9])?;
    stop_all(nodes).await;
    drop(nats);
    Ok(())
}
