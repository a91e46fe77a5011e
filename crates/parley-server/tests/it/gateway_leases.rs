//! Gateway leases across real processes (SPEC §10), each test named after its check: three
//! `parley serve` processes on one PostgreSQL database, joined by NATS or by PostgreSQL
//! notifications, with leases of `LEASE_MS`. One gateway is killed (SIGKILL) or drained
//! (SIGTERM) under a steady load of sends; its devices reconnect to the others and catch up by
//! sync, and every acked send reaches every member device once, in order, with no gap.
//!
//! PostgreSQL only by design: several processes share one database, which the embedded store
//! (one process's file) cannot.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::ws_support::{Next, Ws};
use anyhow::{ensure, Context, Result};
use parley_client::{Client, ClientError, NewConversation};
use parley_testkit::{parley_binary, GatewayOptions, ProcessBus, ServerProcess};
use serde_json::json;
use tokio::sync::watch;

/// The machine's NATS server, which scripts/test.sh checks or starts.
const SHARED_NATS_URL: &str = "nats://127.0.0.1:4222";
/// Short leases, so a dead gateway's routes converge within the test.
const LEASE_MS: u64 = 1_000;
const GATEWAYS: usize = 3;
/// The gateway that is killed or drained.
const VICTIM: usize = 2;
/// Members of the group, each with one receiving device, spread round robin.
const MEMBERS: usize = 6;
/// Members that also send, each from a device of its own, one sender per gateway.
const SENDERS: usize = 3;
const SENDS_PER_SENDER: usize = 40;
/// Pause between two sends of one sender: a steady load, not a burst.
const SEND_PAUSE_MS: u64 = 20;
/// Attempts of one send, each on the next gateway, before the test fails.
const SEND_ATTEMPTS_MAX: usize = 20;
/// Devices connected to the victim only, which never reconnect: their routes leave the table
/// only by the reaper (after a kill) or the release (after a drain).
const PARKED: usize = 4;
/// Longest wait for anything: a frame, a process's exit, the receivers' catch-up.
const WAIT: Duration = Duration::from_secs(20);
/// How long a receiver reads before it checks whether it is done.
const READ_SLICE: Duration = Duration::from_millis(100);
/// Pause before the next gateway after a connect failed.
const RECONNECT_PAUSE: Duration = Duration::from_millis(20);
/// Events per sync page.
const SYNC_PAGE_LEN: u32 = 200;

/// A name no other test process on this machine uses (gateway ids and conversation ids share
/// the NATS server's subjects).
fn unique(tag: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("{tag}-{}-{nanos:08x}", std::process::id())
}

/// Connects and waits for the answer to a ping, so the gateway has registered the connection
/// and claimed its route.
async fn online(base_url: &str, token: &str) -> Result<Ws> {
    let mut ws = Ws::connect(base_url, token).await?;
    ws.send(json!({"type": "ping", "req_id": 0})).await?;
    let pong = ws.next_of("pong", WAIT).await?;
    ensure!(pong["req_id"] == 0, "{pong}");
    Ok(ws)
}

/// What one receiving device saw.
#[derive(Debug, Default)]
struct DeviceLog {
    /// Seqs applied in order: from pushes, or from a sync after a reconnect or a gap.
    applied: Vec<i64>,
    /// Seqs pushed, per connection.
    pushed: Vec<Vec<i64>>,
    /// Close codes of the connections that ended.
    closes: Vec<u16>,
    /// Gateways connected to, in order.
    gateways: Vec<usize>,
    /// Syncs run because a push skipped a seq.
    gap_repairs: usize,
}

impl DeviceLog {
    fn cursor(&self) -> i64 {
        self.applied.last().copied().unwrap_or(0)
    }

    /// Applies `seq` when it is the next one; an older one was applied already.
    fn apply(&mut self, seq: i64) {
        if seq > self.cursor() {
            self.applied.push(seq);
        }
    }
}

/// Reads the log after the device's cursor from `base_url`, up to the head.
async fn sync(client: &Client, conv: &str, log: &mut DeviceLog) -> Result<()> {
    loop {
        let page = client
            .events_after(conv, log.cursor(), Some(SYNC_PAGE_LEN), None)
            .await?;
        for event in &page.events {
            log.apply(event.seq);
        }
        if page.through_seq >= page.head || page.events.is_empty() {
            return Ok(());
        }
    }
}

/// A member device as a client that moves on: it connects to its home gateway and, whenever
/// its connection ends or cannot be opened, to the next gateway round robin; after each
/// connect it syncs from its cursor, and a push that skips a seq makes it sync too. It ends
/// once its cursor reaches the head `done` announces.
async fn receive(
    gateways: Arc<Vec<String>>,
    home: usize,
    token: String,
    conv: String,
    mut done: watch::Receiver<Option<i64>>,
) -> Result<DeviceLog> {
    let mut log = DeviceLog::default();
    let mut at = home;
    let deadline = Instant::now() + WAIT * 2;
    'connections: loop {
        ensure!(Instant::now() < deadline, "no catch-up in time: {log:?}");
        let ws = online(&gateways[at], &token).await;
        let mut ws = match ws {
            Ok(ws) => ws,
            Err(_) => {
                at = (at + 1) % gateways.len();
                tokio::time::sleep(RECONNECT_PAUSE).await;
                continue;
            }
        };
        log.gateways.push(at);
        log.pushed.push(Vec::new());
        let client = Client::new(&gateways[at], &token)?;
        if sync(&client, &conv, &mut log).await.is_err() {
            at = (at + 1) % gateways.len();
            continue;
        }
        loop {
            if done
                .borrow_and_update()
                .is_some_and(|head| log.cursor() >= head)
            {
                return Ok(log);
            }
            ensure!(Instant::now() < deadline, "no catch-up in time: {log:?}");
            match ws.next_or_close(READ_SLICE).await? {
                Next::Quiet => {}
                Next::Closed(code) => {
                    log.closes.push(code);
                    at = (at + 1) % gateways.len();
                    continue 'connections;
                }
                Next::Frame(frame) => {
                    if frame["type"] != "event" || frame["event"]["conv_id"] != conv.as_str() {
                        continue;
                    }
                    let seq = frame["event"]["seq"].as_i64().context("seq")?;
                    if let Some(pushed) = log.pushed.last_mut() {
                        pushed.push(seq);
                    }
                    if seq > log.cursor() + 1 {
                        log.gap_repairs += 1;
                        if sync(&client, &conv, &mut log).await.is_err() {
                            at = (at + 1) % gateways.len();
                            continue 'connections;
                        }
                    }
                    log.apply(seq);
                }
            }
        }
    }
}

/// What the senders saw: each acked request key with its seq, and every error answer.
#[derive(Debug, Default)]
struct SendLog {
    acked: Vec<(String, i64)>,
    /// Errors with an HTTP answer (a refusal of an accepted request); transport errors of a
    /// gateway that is gone are not counted, the send moves on.
    answered_errors: Vec<String>,
}

/// One sender: `SENDS_PER_SENDER` sends, each retried with the same key on the next gateway
/// until acked.
async fn send_load(
    gateways: Arc<Vec<String>>,
    home: usize,
    token: String,
    conv: String,
    tag: String,
    acked_total: Arc<std::sync::atomic::AtomicUsize>,
) -> Result<SendLog> {
    let mut log = SendLog::default();
    let mut at = home;
    for i in 0..SENDS_PER_SENDER {
        let key = format!("{tag}-{i}");
        let mut attempts = 0;
        let seq = loop {
            attempts += 1;
            ensure!(attempts <= SEND_ATTEMPTS_MAX, "send {key} never acked");
            let client = Client::new(&gateways[at], &token)?;
            match client.send(&conv, &key, "x").await {
                Ok(ack) => break ack.seq,
                Err(e) => {
                    if let ClientError::Api { status, code, .. } = &e {
                        log.answered_errors
                            .push(format!("{key} at {at}: {status} {code}"));
                    }
                    at = (at + 1) % gateways.len();
                    tokio::time::sleep(Duration::from_millis(SEND_PAUSE_MS)).await;
                }
            }
        };
        log.acked.push((key, seq));
        acked_total.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(SEND_PAUSE_MS)).await;
    }
    Ok(log)
}

/// The gateways listing of `/v1/admin/gateways`, by id: `(lease_expires_in_ms, routes)`.
async fn gateways_listing(
    admin: &parley_client::AdminClient,
) -> Result<BTreeMap<String, (i64, i64)>> {
    let (status, body) = admin
        .raw(reqwest::Method::GET, "/v1/admin/gateways")
        .send()
        .await?;
    ensure!(status == 200, "{status} {body}");
    let mut listed = BTreeMap::new();
    for g in body["gateways"].as_array().context("gateways")? {
        listed.insert(
            g["gateway_id"].as_str().context("gateway_id")?.to_owned(),
            (
                g["lease_expires_in_ms"].as_i64().context("lease")?,
                g["routes"].as_i64().context("routes")?,
            ),
        );
    }
    Ok(listed)
}

/// How the victim leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Exit {
    Kill,
    Drain,
}

/// Everything both checks share: the cluster, the group, the load, the victim's exit and the
/// delivery checks. Answers the time from the exit to the victim's routes gone.
async fn failover_under_load(bus: ProcessBus, exit: Exit) -> Result<Duration> {
    let prefix = unique("gw-lease");
    let options = GatewayOptions::new(bus, &prefix).with_lease_ms(LEASE_MS);
    let mut nodes = ServerProcess::start_gateways_with(parley_binary(), GATEWAYS, &options).await;
    let urls: Arc<Vec<String>> = Arc::new(nodes.iter().map(|n| n.base_url().to_owned()).collect());
    let admin = nodes[0].admin();
    let victim_id = format!("{prefix}-{VICTIM}");

    // The group: member i's device connects to gateway i % GATEWAYS.
    let members: Vec<String> = (0..MEMBERS).map(|i| format!("u-m{i}")).collect();
    let mut tokens = Vec::new();
    for m in &members {
        tokens.push(nodes[0].user_with_token(m).await);
    }
    let conv = unique("c-lease");
    let creator = admin.device_client(&tokens[0]);
    creator
        .create_conversation(
            &NewConversation::group(members[1..].iter().cloned()).with_conv_id(&conv),
        )
        .await?;
    let mut sender_tokens = Vec::new();
    for m in members.iter().take(SENDERS) {
        sender_tokens.push(admin.create_device(m, "d-send").await?);
    }
    // Parked devices on the victim, outside the group.
    let mut parked = Vec::new();
    for p in 0..PARKED {
        let token = nodes[0].user_with_token(&format!("u-park{p}")).await;
        parked.push(online(&urls[VICTIM], &token).await?);
    }

    let (done_tx, done_rx) = watch::channel(None);
    let mut receivers = Vec::new();
    for (i, token) in tokens.iter().enumerate() {
        receivers.push(tokio::spawn(receive(
            urls.clone(),
            i % GATEWAYS,
            token.clone(),
            conv.clone(),
            done_rx.clone(),
        )));
    }
    let acked_total = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut senders = Vec::new();
    for (k, token) in sender_tokens.iter().enumerate() {
        senders.push(tokio::spawn(send_load(
            urls.clone(),
            k % GATEWAYS,
            token.clone(),
            conv.clone(),
            format!("s{k}"),
            acked_total.clone(),
        )));
    }

    // A third into the load, the victim leaves.
    let third = SENDERS * SENDS_PER_SENDER / 3;
    let load_deadline = Instant::now() + WAIT;
    while acked_total.load(std::sync::atomic::Ordering::Relaxed) < third {
        ensure!(Instant::now() < load_deadline, "the load did not start");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let before = gateways_listing(&admin).await?;
    let victim_routes = before.get(&victim_id).map_or(0, |(_, routes)| *routes);
    ensure!(
        victim_routes >= PARKED as i64,
        "the victim holds its devices' routes: {before:?}"
    );
    let left_at = Instant::now();
    let converged = match exit {
        Exit::Kill => {
            nodes[VICTIM].kill();
            // Negative control of the release: a killed gateway's row and routes stay until
            // its lease expires and a live gateway reaps them.
            let after_kill = gateways_listing(&admin).await?;
            let (lease_left, routes) = after_kill
                .get(&victim_id)
                .copied()
                .with_context(|| format!("the killed gateway's row: {after_kill:?}"))?;
            ensure!(
                lease_left > 0 && routes >= PARKED as i64,
                "right after the kill: {after_kill:?}"
            );
            // Convergence: the victim's routes are gone within two lease periods.
            let limit = Duration::from_millis(2 * LEASE_MS);
            loop {
                let listed = gateways_listing(&admin).await?;
                if listed
                    .get(&victim_id)
                    .is_none_or(|(_, routes)| *routes == 0)
                {
                    break left_at.elapsed();
                }
                ensure!(
                    left_at.elapsed() < limit,
                    "routes of the killed gateway after {limit:?}: {listed:?}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        Exit::Drain => {
            nodes[VICTIM].terminate();
            for ws in &mut parked {
                let (code, _) = ws.until_close(WAIT).await?;
                ensure!(code == 1001, "a parked device closed with {code}");
            }
            // Gone without answering the close: the drain need not wait for their close frames.
            parked.clear();
            let status = nodes[VICTIM]
                .wait_exit(WAIT)
                .await
                .context("the drained gateway did not exit")?;
            ensure!(status.success(), "the drained gateway exited with {status}");
            let drained = left_at.elapsed();
            // The lease was released, not left to expire: right after the exit, no row and no
            // route of the victim (a lease renewed a third of a period ago would still run).
            let listed = gateways_listing(&admin).await?;
            ensure!(
                !listed.contains_key(&victim_id),
                "the drained gateway's row after its exit: {listed:?}"
            );
            drained
        }
    };

    let mut sends = SendLog::default();
    for sender in senders {
        let log = sender.await??;
        sends.acked.extend(log.acked);
        sends.answered_errors.extend(log.answered_errors);
    }
    ensure!(
        sends.acked.len() == SENDERS * SENDS_PER_SENDER,
        "acked {} sends",
        sends.acked.len()
    );
    let mut seqs: Vec<i64> = sends.acked.iter().map(|(_, seq)| *seq).collect();
    seqs.sort_unstable();
    ensure!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "two request keys acked with one seq"
    );
    if exit == Exit::Drain {
        // No send that a gateway accepted failed: the draining gateway answered what it had
        // and refused nothing it took.
        ensure!(
            sends.answered_errors.is_empty(),
            "error answers: {:?}",
            sends.answered_errors
        );
    }
    let head = *seqs.last().context("no sends")?;
    done_tx.send(Some(head))?;

    let mut lost = 0;
    let mut duplicated = 0;
    let mut gaps = 0;
    for (i, receiver) in receivers.into_iter().enumerate() {
        let log = receiver.await??;
        for pushed in &log.pushed {
            duplicated += pushed.windows(2).filter(|w| w[0] >= w[1]).count();
        }
        gaps += log.applied.windows(2).filter(|w| w[1] != w[0] + 1).count();
        lost += seqs
            .iter()
            .filter(|seq| log.applied.binary_search(seq).is_err())
            .count();
        if i % GATEWAYS == VICTIM {
            ensure!(
                log.gateways.len() >= 2 && !log.gateways[1..].contains(&VICTIM),
                "member {i} did not move on: {log:?}"
            );
            if exit == Exit::Drain {
                ensure!(log.closes.first() == Some(&1001), "member {i}: {log:?}");
            }
        }
    }
    ensure!(
        (lost, duplicated, gaps) == (0, 0, 0),
        "lost {lost}, duplicated {duplicated}, gaps {gaps}"
    );
    drop(nodes);
    Ok(converged)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_10_killed_gateway_converges_nats() -> Result<()> {
    let converged =
        failover_under_load(ProcessBus::Nats(SHARED_NATS_URL.into()), Exit::Kill).await?;
    eprintln!(
        "10-killed-gateway-converges (nats): routes of the killed gateway gone {} ms after the kill (lease {LEASE_MS} ms)",
        converged.as_millis()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_10_killed_gateway_converges_pgbus() -> Result<()> {
    let converged = failover_under_load(ProcessBus::Postgres, Exit::Kill).await?;
    eprintln!(
        "10-killed-gateway-converges (pgbus): routes of the killed gateway gone {} ms after the kill (lease {LEASE_MS} ms)",
        converged.as_millis()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_10_graceful_drain_nats() -> Result<()> {
    let drained =
        failover_under_load(ProcessBus::Nats(SHARED_NATS_URL.into()), Exit::Drain).await?;
    eprintln!(
        "10-graceful-drain (nats): drained and released in {} ms",
        drained.as_millis()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_10_graceful_drain_pgbus() -> Result<()> {
    let drained = failover_under_load(ProcessBus::Postgres, Exit::Drain).await?;
    eprintln!(
        "10-graceful-drain (pgbus): drained and released in {} ms",
        drained.as_millis()
    );
    Ok(())
}
