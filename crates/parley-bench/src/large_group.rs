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
use futures::{SinkExt, StreamExt, TryStreamExt};
use parley_client::{AdminClient, Client, DeliveryMode, NewConversation};
use serde_json::{json, Value};
use tokio::sync::Mutex;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

use super::report::{micros_histogram, percentiles_ms};
use super::BenchArgs;

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
/// Linux reports process CPU times in ticks of 1/100 s (USER_HZ) on every architecture Parley
/// targets.
const CLOCK_TICKS_PER_S: u64 = 100;

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
    /// Process id of the server, whose CPU time is read from /proc (large-group).
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// Requests in flight while creating users, devices and members (large-group).
    #[arg(long, default_value_t = 32)]
    pub setup_concurrency: usize,
    /// Count only the PostgreSQL backends connected to this database, so other clients of the
    /// same server stay out of the CPU figure (large-group).
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

/// Runs `f(i)` for `0..n`, at most `k` at once, and answers the results in the order of `i`.
async fn bounded<T, F, Fut>(n: usize, k: usize, f: F) -> Result<Vec<T>>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    futures::stream::iter((0..n).map(f))
        .buffered(k.max(1))
        .try_collect()
        .await
}

/// User plus system CPU time of one process, in milliseconds.
fn process_cpu_ms(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces; the fields after it are positional (proc(5)).
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) * 1000 / CLOCK_TICKS_PER_S)
}

/// CPU time of the PostgreSQL processes, in milliseconds, by pid: every process named
/// `postgres`, or with `database` only the backends serving it (their title names it).
fn postgres_cpu_ms(database: Option<&str>) -> HashMap<u32, u64> {
    let mut out = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        let serves = |db: &str| {
            let title = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            // "postgres: [<cluster>: ]<user> <database> <client> <state>", NUL-padded.
            title
                .split(|c: char| c.is_whitespace() || c == '\0')
                .any(|word| word == db)
        };
        if comm.trim() == "postgres" && database.is_none_or(serves) {
            if let Some(ms) = process_cpu_ms(pid) {
                out.insert(pid, ms);
            }
        }
    }
    out
}

/// PostgreSQL CPU spent between two readings; processes that started in between count whole.
fn postgres_delta_ms(before: &HashMap<u32, u64>, after: &HashMap<u32, u64>) -> u64 {
    after
        .iter()
        .map(|(pid, ms)| ms.saturating_sub(before.get(pid).copied().unwrap_or(0)))
        .sum()
}

fn ws_url(base: &str) -> String {
    format!(
        "{}/v1/ws",
        base.trim_end_matches('/').replacen("http", "ws", 1)
    )
}

/// One online device until `stop`: push mode records event frames; pull mode answers each
/// hint with a fetch from its cursor (one in flight, refetching if a newer head was hinted
/// meanwhile) and records the messages each fetch returned.
async fn device(
    url: String,
    token: String,
    conv_id: String,
    cursor: i64,
    delivered: Arc<AtomicU64>,
    stop: CancellationToken,
) -> Result<DeviceLog> {
    let mut req = url.into_client_request()?;
    req.headers_mut()
        .insert("authorization", format!("Bearer {token}").parse()?);
    let (ws, _) = tokio_tungstenite::connect_async(req)
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

pub async fn run(args: &BenchArgs) -> Result<()> {
    let lg = &args.large_group;
    if lg.group_online + 1 > lg.group_members || lg.send_rate <= 0.0 {
        bail!("--group-online must be below --group-members, and --send-rate positive");
    }
    let tag = uuid::Uuid::new_v4().simple().to_string()[..6].to_owned();
    let admin = AdminClient::new(&args.url, &args.admin_token)?;
    let names: Vec<String> = (0..lg.group_members)
        .map(|i| format!("lg{tag}-{i}"))
        .collect();

    // Setup: users, devices for the sender (member 0) and the online members, the group.
    let setup = Instant::now();
    bounded(names.len(), lg.setup_concurrency, |i| {
        let (admin, name) = (admin.clone(), names[i].clone());
        async move {
            admin.create_user(&name, None).await?;
            Ok(())
        }
    })
    .await
    .context("creating users")?;
    let tokens: Vec<String> = bounded(lg.group_online + 1, lg.setup_concurrency, |i| {
        let (admin, name) = (admin.clone(), names[i].clone());
        async move { Ok(admin.create_device(&name, "d1").await?) }
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
        let (sender, conv_id, name) = (sender.clone(), conv_id.clone(), rest[i].clone());
        async move {
            sender.add_member(&conv_id, &name).await?;
            Ok(())
        }
    })
    .await
    .context("adding members")?;
    let conv = sender.get_conversation(&conv_id).await?;
    let setup_s = setup.elapsed().as_secs_f64();

    // Devices on real sockets.
    let delivered = Arc::new(AtomicU64::new(0));
    let stop = CancellationToken::new();
    let url = ws_url(&args.url);
    let mut devices = Vec::with_capacity(lg.group_online);
    for token in &tokens[1..] {
        devices.push(tokio::spawn(device(
            url.clone(),
            token.clone(),
            conv_id.clone(),
            conv.head,
            delivered.clone(),
            stop.clone(),
        )));
        // Connecting one by one keeps the accept queue short on a small machine.
        tokio::task::yield_now().await;
    }
    tokio::time::sleep(Duration::from_millis(WARMUP_SETTLE_MS)).await;

    for i in 0..WARMUP_MESSAGES {
        sender
            .send_with_retry(&conv_id, &format!("warm-{i}"), "warm-up")
            .await?;
    }
    tokio::time::sleep(Duration::from_millis(WARMUP_SETTLE_MS)).await;
    let warm_deliveries = delivered.load(Ordering::Relaxed);

    // The measured window.
    let cpu_before = lg.server_pid.and_then(process_cpu_ms);
    let bench_before = process_cpu_ms(std::process::id());
    let pg_db = lg.postgres_database.as_deref();
    let pg_before = postgres_cpu_ms(pg_db);
    let sends: Arc<Mutex<Vec<(i64, Instant, Instant)>>> = Arc::default();
    let started = Instant::now();
    let mut ticker = tokio::time::interval(Duration::from_secs_f64(1.0 / lg.send_rate));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut tasks = Vec::with_capacity(args.messages);
    for i in 0..args.messages {
        ticker.tick().await;
        let (sender, conv_id, sends): (Client, String, _) =
            (sender.clone(), conv_id.clone(), sends.clone());
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
    let sent = sends.lock().await.len() as u64;
    let expected = warm_deliveries + sent * lg.group_online as u64;
    let deadline = Instant::now() + Duration::from_millis(DRAIN_TIMEOUT_MS);
    while delivered.load(Ordering::Relaxed) < expected && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(DRAIN_POLL_MS)).await;
    }
    let window = started.elapsed();
    let cpu_after = lg.server_pid.and_then(process_cpu_ms);
    let bench_after = process_cpu_ms(std::process::id());
    let pg_ms = postgres_delta_ms(&pg_before, &postgres_cpu_ms(pg_db));
    stop.cancel();

    let mut logs = Vec::with_capacity(devices.len());
    for d in devices {
        logs.push(d.await??);
    }
    let sends = sends.lock().await;
    if sends.is_empty() {
        bail!("no send was acked");
    }
    let starts: HashMap<i64, Instant> = sends.iter().map(|(seq, s, _)| (*seq, *s)).collect();
    let (mut delivery_h, mut ack_h) = (micros_histogram()?, micros_histogram()?);
    for (_, start, acked) in sends.iter() {
        ack_h.record((*acked - *start).as_micros().max(1) as u64)?;
    }
    let mut received = 0u64;
    for log in &logs {
        for (seq, at) in &log.delivered {
            if let Some(start) = starts.get(seq) {
                received += 1;
                delivery_h.record(at.saturating_duration_since(*start).as_micros().max(1) as u64)?;
            }
        }
    }
    let delta = |a: Option<u64>, b: Option<u64>| Some(b?.saturating_sub(a?));
    let server_cpu_ms = delta(cpu_before, cpu_after);
    let per_msg = |ms: u64| ms as f64 / sent as f64;
    let sum = |f: fn(&DeviceLog) -> u64| logs.iter().map(f).sum::<u64>();
    let report = json!({
        "scenario": "large-group",
        "delivery": format!("{:?}", lg.delivery).to_lowercase(),
        "group_members": lg.group_members,
        "group_online": lg.group_online,
        "messages": args.messages,
        "sends_acked": sent,
        "send_rate_per_s": lg.send_rate,
        "setup_s": setup_s,
        "window_s": window.as_secs_f64(),
        "deliveries_expected": sent * lg.group_online as u64,
        "deliveries_received": received,
        "deliveries_missing": (sent * lg.group_online as u64).saturating_sub(received),
        "send_to_delivery_ms": percentiles_ms(&delivery_h),
        "ack_latency_ms": percentiles_ms(&ack_h),
        "server_cpu_ms": server_cpu_ms,
        "server_cpu_ms_per_message": server_cpu_ms.map(per_msg),
        "postgres_cpu_scope": pg_db.map_or("all postgres processes".to_owned(), |db| format!("backends of {db}")),
        "postgres_cpu_ms": pg_ms,
        "postgres_cpu_ms_per_message": per_msg(pg_ms),
        // The load generator shares the machine; its own CPU says how much it took.
        "bench_cpu_ms": delta(bench_before, bench_after),
        "event_frames": sum(|l| l.events),
        "hint_frames": sum(|l| l.hints),
        "fetches": sum(|l| l.fetches),
    });
    std::fs::create_dir_all(&args.out)?;
    let path = args.out.join("report.json");
    std::fs::write(&path, serde_json::to_string_pretty(&report)?)?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    println!("report written to {}", path.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_times_are_read_from_proc() {
        let me = std::process::id();
        // Burn a little CPU so the reading is positive on any clock.
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_add(i * i);
        }
        assert!(x > 0);
        let ms = process_cpu_ms(me).expect("own /proc/<pid>/stat");
        assert!(ms > 0, "cpu ms {ms}");
        assert_eq!(process_cpu_ms(u32::MAX), None);
        let before = HashMap::from([(1, 10), (2, 5)]);
        let after = HashMap::from([(1, 15), (3, 7)]);
        assert_eq!(postgres_delta_ms(&before, &after), 12);
    }
}
