//! The large-group scenario (chapter 08): one group of `--group-members` users, of whom
//! `--group-online` hold a device on a real WebSocket, created `push` or `pull`
//! (`--delivery`). One member sends `--messages` messages over HTTP at `--send-rate` per
//! second.
//!
//! Send-to-delivery is measured per message and online device, from the start of the send:
//! in push mode to the arrival of the event frame; in pull mode to the completion of the
//! device's fetch (a `sync` request on its socket, sent when a hint arrives) whose answer holds
//! the message. Server CPU per message is the server process's user and system time over the
//! measured window (from `/proc/<pid>/stat`, `--server-pid`) divided by the messages; the CPU
//! time of PostgreSQL's processes is reported beside it, since pull moves work into reads, and
//! so is the benchmark's own, since it shares the machine.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use futures::{SinkExt, StreamExt};
use parley_client::{Client, DeliveryMode, NewConversation};
use serde_json::{json, Value};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

use crate::cpu::{CpuReadings, CpuSpent};
use crate::fixtures::{self, bounded, run_tag};
use crate::report::{micros_histogram, percentiles_ms, publish, record};
use crate::target::Target;
use crate::BenchArgs;

/// Initial members named in the create request; the rest join by one add each. 2,000 ids keep
/// the request well under the default 64 KiB request limit.
const CREATE_MEMBERS_MAX: usize = 2_000;
/// Messages sent and delivered before measuring: the gateway loads its member cache on the
/// first one.
const WARMUP_MESSAGES: usize = 5;
/// Pause after the warm-up, so its deliveries are over before the window opens.
const WARMUP_SETTLE_MS: u64 = 1_000;
/// How long deliveries may trail the last ack before the missing ones count as lost.
const DRAIN_TIMEOUT_MS: u64 = 20_000;
/// How often the drain looks at the delivery count.
const DRAIN_POLL_MS: u64 = 20;
/// Largest page of one fetch.
const FETCH_LIMIT: u32 = 500;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Delivery {
    Push,
    Pull,
}

#[derive(Args, Debug, Clone)]
pub struct LargeGroupArgs {
    /// Members of the group (large-group).
    #[arg(long, default_value_t = 5_000)]
    pub group_members: usize,
    /// Members with a device online on a WebSocket (large-group).
    #[arg(long, default_value_t = 500)]
    pub group_online: usize,
    /// Delivery mode the group is created with (large-group).
    #[arg(long, value_enum, default_value = "push")]
    pub delivery: Delivery,
    /// Messages per second, sent on a fixed schedule (large-group).
    #[arg(long, default_value_t = 20.0)]
    pub send_rate: f64,
    /// Process id of the server, whose CPU time and memory are read from /proc (large-group,
    /// connections, fanout, media, push).
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// Requests in flight while creating users, devices and members (large-group, connections,
    /// fanout, push).
    #[arg(long, default_value_t = 32)]
    pub setup_concurrency: usize,
    /// Count only the PostgreSQL backends connected to this database, so other clients of the
    /// same server stay out of the CPU figure (large-group, fanout, push).
    #[arg(long)]
    pub postgres_database: Option<String>,
}

/// What one online device saw: when each message reached it, and how much it took.
#[derive(Default)]
struct DeviceLog {
    delivered: Vec<(i64, Instant)>,
    hints: u64,
    fetches: u64,
    events: u64,
}

pub async fn run(args: &BenchArgs, target: &Target) -> Result<()> {
    let lg = &args.large_group;
    if lg.group_online + 1 > lg.group_members || lg.send_rate <= 0.0 {
        bail!("--group-online must be below --group-members, and --send-rate positive");
    }
    let group = setup(args, target).await?;
    let online = Online::connect(target.url(), &group).await;
    let warm_deliveries = warm_up(&group, &online).await?;
    let window = measure(args, &group, &online, warm_deliveries).await?;
    let logs = online.stop().await?;
    publish(&args.out, &report(args, &group, &window, &logs)?)
}

/// The group, and the tokens of the sender (first) and the online members.
struct Group {
    tokens: Vec<String>,
    sender: Client,
    conv_id: String,
    head: i64,
    setup_s: f64,
}

/// Users, devices for the sender (member 0) and the online members, and the group.
async fn setup(args: &BenchArgs, target: &Target) -> Result<Group> {
    let lg = &args.large_group;
    let tag = run_tag(6);
    let admin = target.admin()?;
    let names: Vec<String> = (0..lg.group_members)
        .map(|i| format!("lg{tag}-{i}"))
        .collect();
    let started = Instant::now();
    bounded(names.len(), lg.setup_concurrency, |i| {
        let (admin, name) = (&admin, &names[i]);
        async move {
            admin.create_user(name, None).await?;
            Ok(())
        }
    })
    .await
    .context("creating users")?;
    let tokens: Vec<String> = bounded(lg.group_online + 1, lg.setup_concurrency, |i| {
        let (admin, name) = (&admin, &names[i]);
        async move { Ok(admin.create_device(name, fixtures::DEVICE_ID).await?) }
    })
    .await
    .context("issuing device tokens")?;
    let sender = admin.device_client(&tokens[0]);
    let conv_id = format!("lg-{tag}");
    let mode = match lg.delivery {
        Delivery::Push => DeliveryMode::Push,
        Delivery::Pull => DeliveryMode::Pull,
    };
    let first: Vec<&str> = names[1..names.len().min(CREATE_MEMBERS_MAX)]
        .iter()
        .map(String::as_str)
        .collect();
    sender
        .create_conversation(
            &NewConversation::group(first)
                .with_conv_id(&conv_id)
                .with_delivery_mode(mode),
        )
        .await
        .context("creating the group")?;
    let rest = &names[names.len().min(CREATE_MEMBERS_MAX)..];
    bounded(rest.len(), lg.setup_concurrency, |i| {
        let (sender, conv_id, name) = (&sender, &conv_id, &rest[i]);
        async move {
            sender.add_member(conv_id, name).await?;
            Ok(())
        }
    })
    .await
    .context("adding members")?;
    let head = sender.get_conversation(&conv_id).await?.head;
    Ok(Group {
        setup_s: started.elapsed().as_secs_f64(),
        tokens,
        sender,
        conv_id,
        head,
    })
}

/// The online members' devices, each on a real socket in a task of its own.
struct Online {
    delivered: Arc<AtomicU64>,
    stop: CancellationToken,
    devices: Vec<JoinHandle<Result<DeviceLog>>>,
}

impl Online {
    async fn connect(url: &str, group: &Group) -> Online {
        let delivered = Arc::new(AtomicU64::new(0));
        let stop = CancellationToken::new();
        let mut devices = Vec::with_capacity(group.tokens.len() - 1);
        for token in &group.tokens[1..] {
            devices.push(tokio::spawn(device(
                url.to_owned(),
                token.clone(),
                group.conv_id.clone(),
                group.head,
                delivered.clone(),
                stop.clone(),
            )));
            // Connecting one by one keeps the accept queue short on a small machine.
            tokio::task::yield_now().await;
        }
        tokio::time::sleep(Duration::from_millis(WARMUP_SETTLE_MS)).await;
        Online {
            delivered,
            stop,
            devices,
        }
    }

    fn delivered(&self) -> u64 {
        self.delivered.load(Ordering::Relaxed)
    }

    /// Stops every device and collects what each saw.
    async fn stop(self) -> Result<Vec<DeviceLog>> {
        self.stop.cancel();
        let mut logs = Vec::with_capacity(self.devices.len());
        for d in self.devices {
            logs.push(d.await??);
        }
        Ok(logs)
    }
}

/// A few messages before measuring, delivered and settled; answers their deliveries.
async fn warm_up(group: &Group, online: &Online) -> Result<u64> {
    for i in 0..WARMUP_MESSAGES {
        group
            .sender
            .send_with_retry(&group.conv_id, &format!("warm-{i}"), "warm-up")
            .await?;
    }
    tokio::time::sleep(Duration::from_millis(WARMUP_SETTLE_MS)).await;
    Ok(online.delivered())
}

/// The measured window: its acked sends (seq, start, ack), its length and the CPU spent.
struct Window {
    sends: Vec<(i64, Instant, Instant)>,
    length: Duration,
    cpu: CpuSpent,
}

/// Sends `--messages` at `--send-rate` on a fixed schedule and waits for their deliveries.
async fn measure(
    args: &BenchArgs,
    group: &Group,
    online: &Online,
    warm_deliveries: u64,
) -> Result<Window> {
    let lg = &args.large_group;
    let pg_db = lg.postgres_database.as_deref();
    let before = CpuReadings::now(lg.server_pid, pg_db);
    let sends: Arc<Mutex<Vec<(i64, Instant, Instant)>>> = Arc::default();
    let started = Instant::now();
    let mut ticker = tokio::time::interval(Duration::from_secs_f64(1.0 / lg.send_rate));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut tasks = Vec::with_capacity(args.messages);
    for i in 0..args.messages {
        ticker.tick().await;
        let (sender, conv_id, sends) = (group.sender.clone(), group.conv_id.clone(), sends.clone());
        tasks.push(tokio::spawn(async move {
            let start = Instant::now();
            let ack = sender
                .send_with_retry(&conv_id, &format!("m-{i}"), "large group message")
                .await;
            if let Ok(ack) = ack {
                sends.lock().await.push((ack.seq, start, Instant::now()));
            }
        }));
    }
    for t in tasks {
        t.await?;
    }
    let sends = std::mem::take(&mut *sends.lock().await);
    let expected = warm_deliveries + sends.len() as u64 * lg.group_online as u64;
    let deadline = Instant::now() + Duration::from_millis(DRAIN_TIMEOUT_MS);
    while online.delivered() < expected && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(DRAIN_POLL_MS)).await;
    }
    let length = started.elapsed();
    let cpu = CpuReadings::now(lg.server_pid, pg_db).since(&before);
    Ok(Window { sends, length, cpu })
}

fn report(args: &BenchArgs, group: &Group, window: &Window, logs: &[DeviceLog]) -> Result<Value> {
    let lg = &args.large_group;
    if window.sends.is_empty() {
        bail!("no send was acked");
    }
    let starts: HashMap<i64, Instant> = window.sends.iter().map(|(seq, s, _)| (*seq, *s)).collect();
    let (mut delivery_h, mut ack_h) = (micros_histogram()?, micros_histogram()?);
    for (_, start, acked) in &window.sends {
        record(&mut ack_h, *acked - *start);
    }
    let mut received = 0u64;
    for log in logs {
        for (seq, at) in &log.delivered {
            if let Some(start) = starts.get(seq) {
                received += 1;
                record(&mut delivery_h, at.saturating_duration_since(*start));
            }
        }
    }
    let sent = window.sends.len() as u64;
    let expected = sent * lg.group_online as u64;
    let cpu = &window.cpu;
    let per_msg = |ms: u64| ms as f64 / sent as f64;
    let sum = |f: fn(&DeviceLog) -> u64| logs.iter().map(f).sum::<u64>();
    let pg_scope = lg
        .postgres_database
        .as_deref()
        .map_or("all postgres processes".to_owned(), |db| {
            format!("backends of {db}")
        });
    Ok(json!({
        "scenario": "large-group",
        "delivery": format!("{:?}", lg.delivery).to_lowercase(),
        "group_members": lg.group_members,
        "group_online": lg.group_online,
        "messages": args.messages,
        "sends_acked": sent,
        "send_rate_per_s": lg.send_rate,
        "setup_s": group.setup_s,
        "window_s": window.length.as_secs_f64(),
        "deliveries_expected": expected,
        "deliveries_received": received,
        "deliveries_missing": expected.saturating_sub(received),
        "send_to_delivery_ms": percentiles_ms(&delivery_h),
        "ack_latency_ms": percentiles_ms(&ack_h),
        "server_cpu_ms": cpu.server_ms,
        "server_cpu_ms_per_message": cpu.server_ms.map(per_msg),
        "postgres_cpu_scope": pg_scope,
        "postgres_cpu_ms": cpu.postgres_ms,
        "postgres_cpu_ms_per_message": per_msg(cpu.postgres_ms),
        // The load generator shares the machine; its own CPU says how much it took.
        "bench_cpu_ms": cpu.bench_ms,
        "event_frames": sum(|l| l.events),
        "hint_frames": sum(|l| l.hints),
        "fetches": sum(|l| l.fetches),
    }))
}

/// One online device until `stop`: push mode records event frames; pull mode answers each
/// hint with a fetch from its cursor (one in flight, refetching if a newer head was hinted
/// meanwhile) and records the messages each fetch returned.
async fn device(
    base_url: String,
    token: String,
    conv_id: String,
    cursor: i64,
    delivered: Arc<AtomicU64>,
    stop: CancellationToken,
) -> Result<DeviceLog> {
    let ws = fixtures::connect(&base_url, &token)
        .await
        .context("device WebSocket")?;
    let (mut sink, mut stream) = ws.split();
    // The connection is registered once the server answers a request on it.
    sink.send(Message::Text(
        json!({"type": "ping", "req_id": "ready"})
            .to_string()
            .into(),
    ))
    .await?;
    let mut log = DeviceLog::default();
    let mut ready = false;
    let (mut cursor, mut hinted, mut fetching, mut req_id) = (cursor, cursor, false, 0u64);
    loop {
        let msg = tokio::select! {
            _ = stop.cancelled() => break,
            msg = stream.next() => msg,
        };
        let Some(Ok(msg)) = msg else {
            bail!("a device's WebSocket closed during the run");
        };
        let at = Instant::now();
        let Message::Text(text) = msg else { continue };
        let Ok(v) = serde_json::from_str::<Value>(text.as_str()) else {
            continue;
        };
        match v["type"].as_str() {
            Some("pong") => ready = true,
            Some("event") if v["event"]["kind"] == "msg" => {
                log.events += 1;
                if let Some(seq) = v["event"]["seq"].as_i64() {
                    log.delivered.push((seq, at));
                    delivered.fetch_add(1, Ordering::Relaxed);
                }
            }
            Some("hint") => {
                log.hints += 1;
                hinted = hinted.max(v["head"].as_i64().unwrap_or(hinted));
            }
            Some("ack") if v.get("events").is_some() => {
                fetching = false;
                for e in v["events"].as_array().into_iter().flatten() {
                    if let (Some(seq), true) = (e["seq"].as_i64(), e["kind"] == "msg") {
                        log.delivered.push((seq, at));
                        delivered.fetch_add(1, Ordering::Relaxed);
                    }
                }
                cursor = v["through_seq"].as_i64().unwrap_or(cursor);
            }
            _ => {}
        }
        if ready && !fetching && hinted > cursor {
            req_id += 1;
            log.fetches += 1;
            fetching = true;
            let fetch = json!({"type": "sync", "req_id": req_id, "conv_id": conv_id,
                               "after": cursor, "limit": FETCH_LIMIT});
            sink.send(Message::Text(fetch.to_string().into())).await?;
        }
    }
    Ok(log)
}
