//! The server binary under connection floods, measured from outside the process: 2,000
//! slow-loris connections are closed at the head timeout while a normal client's sends keep
//! their latency (p99 within twice the p99 without attack), and a flood of silent sockets past
//! a low open-file limit leaves health checks and existing clients working.
//!
//! The server runs as its own process, so the attack's sockets and the server's open-file
//! limit are its own and nothing else in the test run shares them. These tests run alone
//! (.config/nextest.toml gives them every test slot): the latency comparison needs the
//! machine's cores to itself as much as a test run allows. The normal client measures sends,
//! the work clients come for; a sub-millisecond request such as `/healthz` measures the
//! machine's scheduler more than the server on a loaded two-core machine.

use std::net::{IpAddr, SocketAddr};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use futures::StreamExt;
use parley_client::{AdminClient, Client, NewConversation};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

use parley_testkit::{free_addr, wait_ready};

const ADMIN_TOKEN: &str = "conn-hardening-admin-token";

/// A server process that is killed when dropped.
struct Server {
    child: Child,
    addr: SocketAddr,
    _data: tempfile::TempDir,
}

impl Server {
    /// Starts `parley serve` on the embedded store with `flags`, under `open_files_max` if
    /// given (through `prlimit`, so only the server's limit changes).
    async fn start(flags: &[&str], open_files_max: Option<u32>) -> Result<Server> {
        let data = tempfile::tempdir()?;
        let addr = free_addr()?;
        let parley = env!("CARGO_BIN_EXE_parley");
        let mut cmd = match open_files_max {
            Some(n) => {
                let mut cmd = Command::new("prlimit");
                cmd.arg(format!("--nofile={n}:{n}")).arg(parley);
                cmd
            }
            None => Command::new(parley),
        };
        cmd.arg("serve")
            .arg("--listen")
            .arg(addr.to_string())
            .arg("--admin-token")
            .arg(ADMIN_TOKEN)
            .arg("--data-dir")
            .arg(data.path())
            .args(flags)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        let mut child = cmd.spawn().context("cannot start the server")?;
        wait_ready(&mut child, &format!("http://{addr}")).await?;
        Ok(Server {
            child,
            addr,
            _data: data,
        })
    }

    fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn connect_from(server: SocketAddr, from: u8) -> Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(IpAddr::from([127, 0, 0, from]), 0))?;
    Ok(socket.connect(server).await?)
}

/// The start of a request head that a slow-loris client never finishes.
const LORIS_HEAD: &[u8] = b"GET /healthz HTTP/1.1\r\nhost: parley\r\nx-loris: ";
const LORIS_CONNECTIONS: usize = 2_000;
/// A slow-loris client sends one more byte of its head this often.
const LORIS_BYTE_EVERY_MS: u64 = 1_000;
const HEAD_TIMEOUT_MS: u64 = 2_000;
/// How late the server may close a connection past the head timeout on a loaded machine.
const LATE_MS: u64 = 3_000;
/// How long one round of attack lasts: several head timeouts, so every connection is closed at
/// least once and the reconnecting attackers keep the pressure up.
const ATTACK_MS: u64 = 7_000;
/// Attack rounds, each between two windows without attack: the machine's own load changes
/// over a test's time, and interleaving lets both sides of the comparison see it alike.
const ROUNDS: usize = 2;
/// When the normal client starts measuring in a round: every attacker has connected and is
/// trickling by then.
const MEASURE_FROM_MS: u64 = 1_500;
/// Sends of the normal client per window, one every `PROBE_EVERY_MS`.
const PROBES_UNLOADED: usize = 300;
const PROBES_ATTACKED: usize = 450;
const PROBE_EVERY_MS: u64 = 10;

/// What the attack saw: how long the server held each connection before closing it, and the
/// longest any connection still open at the end had been held.
#[derive(Default)]
struct LorisReport {
    held_ms: Vec<u64>,
    open_at_end_ms: Vec<u64>,
    connected: usize,
}

/// One slow-loris client until `stop`: from `start` on, connects, trickles its head, and
/// reconnects whenever the server closes it.
async fn loris(
    server: SocketAddr,
    start: Instant,
    stop: Instant,
    report: Arc<Mutex<LorisReport>>,
) -> Result<()> {
    let mut buf = [0u8; 1024];
    tokio::time::sleep_until(start).await;
    while Instant::now() < stop {
        let mut conn = connect_from(server, 2).await?;
        let opened = Instant::now();
        if let Ok(mut r) = report.lock() {
            r.connected += 1;
        }
        let mut sent = 0;
        let closed = loop {
            if Instant::now() >= stop {
                break false;
            }
            let byte = LORIS_HEAD.get(sent).copied().unwrap_or(b'a');
            if conn.write_all(&[byte]).await.is_err() {
                break true;
            }
            sent += 1;
            let next = Instant::now() + Duration::from_millis(LORIS_BYTE_EVERY_MS);
            match tokio::time::timeout_at(next.min(stop), conn.read(&mut buf)).await {
                Err(_) => {}
                Ok(Ok(0)) | Ok(Err(_)) => break true,
                Ok(Ok(_)) => {}
            }
        };
        let held = opened.elapsed().as_millis() as u64;
        if let Ok(mut r) = report.lock() {
            if closed {
                r.held_ms.push(held);
            } else {
                r.open_at_end_ms.push(held);
            }
        }
    }
    Ok(())
}

/// A normal client: one device that sends into one conversation.
#[derive(Clone)]
struct Normal {
    base_url: String,
    token: String,
}

const NORMAL_CONV: &str = "c-normal";

impl Normal {
    async fn new(base_url: &str) -> Result<Normal> {
        let admin = AdminClient::new(base_url, ADMIN_TOKEN)?;
        admin.create_user("u-normal", None).await?;
        admin.create_user("u-peer", None).await?;
        let token = admin.create_device("u-normal", "d1").await?;
        Client::new(base_url, &token)?
            .create_conversation(&NewConversation::group(["u-peer"]).with_conv_id(NORMAL_CONV))
            .await?;
        Ok(Normal {
            base_url: base_url.to_owned(),
            token,
        })
    }

    /// Latencies of `probes` sends from a kept-alive connection, each `PROBE_EVERY_MS` after
    /// the last began; `window` keeps request keys apart between calls. It runs on a thread
    /// and runtime of its own, so the attack's tasks in this process never delay it.
    async fn send_latencies(&self, window: usize, probes: usize) -> Result<Vec<Duration>> {
        let normal = self.clone();
        tokio::task::spawn_blocking(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtime.block_on(async move {
                let client = Client::new(&normal.base_url, &normal.token)?;
                let mut latencies = Vec::with_capacity(probes);
                let mut next = Instant::now();
                for i in 0..probes {
                    tokio::time::sleep_until(next).await;
                    next += Duration::from_millis(PROBE_EVERY_MS);
                    let started = Instant::now();
                    let key = format!("w{window}-m{i}");
                    tokio::time::timeout(
                        Duration::from_secs(5),
                        client.send(NORMAL_CONV, &key, "hello"),
                    )
                    .await
                    .context("a send took over 5 s")??;
                    latencies.push(started.elapsed());
                }
                Ok(latencies)
            })
        })
        .await?
    }
}

fn p99(latencies: &[Duration]) -> Duration {
    let mut sorted = latencies.to_vec();
    sorted.sort();
    let rank = (sorted.len() * 99).div_ceil(100).max(1);
    sorted[rank - 1]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_loris_connections_are_closed_and_a_normal_client_keeps_its_latency() -> Result<()> {
    let server = Server::start(
        &[
            "--header-timeout-ms",
            &HEAD_TIMEOUT_MS.to_string(),
            // The attack comes from one address; the per-address cap would refuse most of it
            // at once, and this test is about what the timeouts do with what got in.
            "--connections-per-address-max",
            "10000",
        ],
        None,
    )
    .await?;
    let normal = Normal::new(&server.base_url()).await?;
    let mut unloaded = normal.send_latencies(0, PROBES_UNLOADED).await?;
    let mut attacked = Vec::new();
    let report = Arc::new(Mutex::new(LorisReport::default()));
    for round in 0..ROUNDS {
        let began = Instant::now();
        let stop = began + Duration::from_millis(ATTACK_MS);
        let mut attackers = tokio::task::JoinSet::new();
        for i in 0..LORIS_CONNECTIONS {
            // Spread over one byte interval, as clients of a real attack are: each sends its
            // bytes on its own beat rather than all in the same millisecond.
            let offset = LORIS_BYTE_EVERY_MS * i as u64 / LORIS_CONNECTIONS as u64;
            let start = began + Duration::from_millis(offset);
            attackers.spawn(loris(server.addr, start, stop, report.clone()));
        }
        tokio::time::sleep_until(began + Duration::from_millis(MEASURE_FROM_MS)).await;
        attacked.extend(
            normal
                .send_latencies(2 * round + 1, PROBES_ATTACKED)
                .await?,
        );
        while let Some(done) = attackers.join_next().await {
            done??;
        }
        unloaded.extend(
            normal
                .send_latencies(2 * round + 2, PROBES_UNLOADED)
                .await?,
        );
    }
    let (unloaded, attacked) = (p99(&unloaded), p99(&attacked));

    let report = report.lock().map_err(|_| anyhow::anyhow!("report lock"))?;
    let held_max = report.held_ms.iter().max().copied().unwrap_or(0);
    let open_max = report.open_at_end_ms.iter().max().copied().unwrap_or(0);
    eprintln!(
        "slow-loris: {} connections made, {} closed by the server (held at most {held_max} ms), \
         {} open at the end of a round (the oldest {open_max} ms); send p99 without attack \
         {unloaded:?}, during the attack {attacked:?}",
        report.connected,
        report.held_ms.len(),
        report.open_at_end_ms.len(),
    );
    ensure!(
        report.held_ms.len() >= ROUNDS * LORIS_CONNECTIONS,
        "only {} of {} slow-loris connections were closed by the server",
        report.held_ms.len(),
        ROUNDS * LORIS_CONNECTIONS
    );
    ensure!(
        held_max <= HEAD_TIMEOUT_MS + LATE_MS && open_max <= HEAD_TIMEOUT_MS + LATE_MS,
        "a slow-loris connection was held {} ms; the head timeout is {HEAD_TIMEOUT_MS} ms",
        held_max.max(open_max)
    );
    ensure!(
        attacked <= 2 * unloaded,
        "send p99 rose from {unloaded:?} to {attacked:?} under the attack"
    );
    Ok(())
}

/// The open-file limit of the server in the exhaustion test, and the silent sockets that
/// exceed it.
const OPEN_FILES_MAX: u32 = 1_024;
const SILENT_SOCKETS: usize = 1_100;
/// How long a health check may take while the flood holds its sockets.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_sockets_past_the_open_file_limit_leave_health_checks_and_clients_working(
) -> Result<()> {
    let server = Server::start(&[], Some(OPEN_FILES_MAX)).await?;
    let base = server.base_url();
    let admin = AdminClient::new(&base, ADMIN_TOKEN)?;
    admin.create_user("u-ana", None).await?;
    admin.create_user("u-ben", None).await?;
    let token = admin.create_device("u-ana", "d1").await?;
    let ana = Client::new(&base, &token)?;
    ana.create_conversation(&NewConversation::group(["u-ben"]).with_conv_id("c-flood"))
        .await?;
    // Existing clients: an HTTP connection and a WebSocket open before the flood and used
    // after it.
    let existing = reqwest::Client::builder().timeout(PROBE_TIMEOUT).build()?;
    let healthz = format!("{base}/healthz");
    ensure!(existing.get(&healthz).send().await?.status() == 200);
    let ben_token = admin.create_device("u-ben", "d1").await?;
    let mut ws_request =
        format!("{}/v1/ws", base.replacen("http", "ws", 1)).into_client_request()?;
    ws_request
        .headers_mut()
        .insert("authorization", format!("Bearer {ben_token}").parse()?);
    let (mut ben_ws, _) = tokio_tungstenite::connect_async(ws_request).await?;

    let mut silent = Vec::with_capacity(SILENT_SOCKETS);
    for _ in 0..SILENT_SOCKETS {
        silent.push(connect_from(server.addr, 3).await?);
    }

    for probe in 0..20 {
        // A new client each time: a new connection, as a load balancer's probe makes.
        let fresh = reqwest::Client::builder()
            .timeout(PROBE_TIMEOUT)
            .pool_max_idle_per_host(0)
            .build()?;
        for path in ["healthz", "readyz"] {
            let started = Instant::now();
            let answer = fresh.get(format!("{base}/{path}")).send().await;
            let status = match answer {
                Ok(a) => a.status(),
                Err(e) => bail!(
                    "probe {probe}: /{path} failed after {:?}: {e}",
                    started.elapsed()
                ),
            };
            ensure!(status == 200, "probe {probe}: /{path} answered {status}");
        }
    }
    ensure!(
        existing.get(&healthz).send().await?.status() == 200,
        "the existing client's connection stopped working"
    );
    // A write through the store, from a client that connects during the flood, reaches the
    // WebSocket that was open before it.
    ana.send("c-flood", "m-1", "still here")
        .await
        .context("a send during the flood")?;
    let pushed = loop {
        let frame = tokio::time::timeout(PROBE_TIMEOUT, ben_ws.next())
            .await
            .context("no push within the probe timeout")?
            .context("the WebSocket ended")??;
        if let Message::Text(text) = frame {
            let frame: serde_json::Value = serde_json::from_str(text.as_str())?;
            if frame["type"] == "event" {
                break frame;
            }
        }
    };
    ensure!(pushed["event"]["client_msg_id"] == "m-1", "{pushed}");
    drop(silent);
    Ok(())
}
