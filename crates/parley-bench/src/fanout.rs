//! The fanout scenario: push groups of `--group-size` members (1,000 by default), every member
//! with a device on a real WebSocket (`--online` in all, 2,000 by default), and messages sent
//! over HTTP round robin into the groups at `--rate` per second for `--duration` seconds, on a
//! fixed schedule. It reports the server's CPU time (user plus system, from
//! `/proc/<pid>/stat`, `--server-pid`) per delivered event frame over the measured window, and
//! send-to-delivery per frame. Every member must receive every message; each one missing is a
//! violation.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use tokio::sync::Mutex;

use crate::cpu::{CpuReadings, CpuSpent};
use crate::online_groups::{check_open_files, Deliveries, OnlineGroups, Sockets};
use crate::report::{micros_histogram, percentiles_ms, publish, record};
use crate::target::Target;
use crate::BenchArgs;

/// Sockets of a run unless `--online` says otherwise: two groups of 1,000.
pub const ONLINE_DEFAULT: usize = 2_000;
/// Messages per second, over all groups, unless `--rate` says otherwise.
pub const RATE_DEFAULT: f64 = 50.0;
/// The target of server CPU per delivered frame.
const CPU_PER_DELIVERY_TARGET_US: f64 = 2.0;
/// How long deliveries may trail the last ack before the missing ones count as lost.
const DRAIN_TIMEOUT_MS: u64 = 30_000;
/// How long the warm-up (one message per group, which loads the gateway's member caches) may
/// take to arrive.
const WARMUP_TIMEOUT_MS: u64 = 30_000;
/// Pause after the warm-up, so its writes are over before the window opens.
const WARMUP_SETTLE_MS: u64 = 1_000;

/// A measured send: its group, the seq it got, and when it was scheduled.
type Sent = (usize, i64, Instant);

pub async fn run(args: &BenchArgs, target: &Target) -> Result<()> {
    let fo = &args.fanout;
    let sockets = args.online.unwrap_or(ONLINE_DEFAULT);
    let rate = args.rate.unwrap_or(RATE_DEFAULT);
    if sockets == 0 || !sockets.is_multiple_of(fo.group_size) || rate <= 0.0 {
        bail!("--online must be a positive multiple of --group-size, and --rate positive");
    }
    if args.large_group.server_pid.is_none() {
        bail!("the fanout scenario reads the server's CPU time: pass --server-pid");
    }
    check_open_files(sockets)?;
    let groups =
        OnlineGroups::create(args, target, "fo", sockets / fo.group_size, fo.group_size).await?;
    crate::progress::phase(&format!("connecting {sockets} WebSockets"));
    let online = Sockets::connect(target.url(), &groups.tokens, fo.connect_concurrency).await?;
    crate::progress::phase("waiting for the presence frames of the connects to settle");
    let settled = online.settle().await;
    warm_up(&groups, &online).await?;
    crate::progress::phase(&format!(
        "{rate} messages/s for {} s into {} groups",
        args.duration,
        groups.conv_ids.len()
    ));
    let window = measure(args, &groups, &online, rate).await?;
    let seen = online.stop().await?;
    let mut report = report(args, &groups, rate, &window, &seen)?;
    report["connect_settle_s"] = json!(settled.0.as_secs_f64());
    report["presence_frames_of_connects"] = json!(settled.1);
    publish(&args.out, &report)
}

/// One message per group, delivered to every member, then a pause.
async fn warm_up(groups: &OnlineGroups, online: &Sockets) -> Result<()> {
    for (conv, sender) in groups.conv_ids.iter().zip(&groups.senders) {
        sender.send_with_retry(conv, "warm-up", "warm-up").await?;
    }
    let all = online
        .wait_for(
            groups.tokens.len() as u64,
            Duration::from_millis(WARMUP_TIMEOUT_MS),
        )
        .await;
    if !all {
        bail!("the warm-up did not reach every connection");
    }
    tokio::time::sleep(Duration::from_millis(WARMUP_SETTLE_MS)).await;
    Ok(())
}

struct Window {
    sent: Vec<Sent>,
    length: Duration,
    deliveries: u64,
    cpu: CpuSpent,
}

async fn measure(
    args: &BenchArgs,
    groups: &OnlineGroups,
    online: &Sockets,
    rate: f64,
) -> Result<Window> {
    let lg = &args.large_group;
    let messages = (rate * args.duration as f64).ceil() as usize;
    let delivered_before = online.delivered();
    let before = CpuReadings::now(lg.server_pid, lg.postgres_database.as_deref());
    let started = Instant::now();
    let sent: Arc<Mutex<Vec<Sent>>> = Arc::default();
    let mut ticker = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut tasks = Vec::with_capacity(messages);
    for i in 0..messages {
        ticker.tick().await;
        let g = i % groups.conv_ids.len();
        let (sender, conv, sent) = (
            groups.senders[g].clone(),
            groups.conv_ids[g].clone(),
            sent.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let start = Instant::now();
            let ack = sender
                .send_with_retry(&conv, &format!("m-{i}"), "fanout message")
                .await;
            if let Ok(ack) = ack {
                sent.lock().await.push((g, ack.seq, start));
            }
        }));
    }
    for t in tasks {
        t.await.context("a send task")?;
    }
    let sent = std::mem::take(&mut *sent.lock().await);
    let expected = delivered_before + sent.len() as u64 * groups.group_size as u64;
    online
        .wait_for(expected, Duration::from_millis(DRAIN_TIMEOUT_MS))
        .await;
    let length = started.elapsed();
    let cpu = CpuReadings::now(lg.server_pid, lg.postgres_database.as_deref()).since(&before);
    Ok(Window {
        sent,
        length,
        deliveries: online.delivered() - delivered_before,
        cpu,
    })
}

fn report(
    args: &BenchArgs,
    groups: &OnlineGroups,
    rate: f64,
    w: &Window,
    seen: &[Deliveries],
) -> Result<Value> {
    if w.sent.is_empty() {
        bail!("no send was acked");
    }
    let mut h = micros_histogram()?;
    let mut missing = 0u64;
    for (i, deliveries) in seen.iter().enumerate() {
        let g = groups.group_of(i);
        let at: HashMap<i64, Instant> = deliveries.iter().copied().collect();
        for (_, seq, start) in w.sent.iter().filter(|(sg, _, _)| *sg == g) {
            match at.get(seq) {
                Some(t) => record(&mut h, t.saturating_duration_since(*start)),
                None => missing += 1,
            }
        }
    }
    let sent = w.sent.len() as u64;
    let per_delivery_us = w
        .cpu
        .server_ms
        .map(|ms| ms as f64 * 1000.0 / w.deliveries.max(1) as f64);
    Ok(json!({
        "scenario": "fanout",
        "groups": groups.conv_ids.len(),
        "group_size": groups.group_size,
        "online": groups.tokens.len(),
        "rate_per_s": rate,
        "duration_s": args.duration,
        "setup_s": groups.setup_s,
        "window_s": w.length.as_secs_f64(),
        "sends_acked": sent,
        "deliveries_expected": sent * groups.group_size as u64,
        "deliveries_received": w.deliveries,
        "deliveries_missing": missing,
        "violations": missing,
        "deliveries_per_s": w.deliveries as f64 / w.length.as_secs_f64().max(1e-9),
        "send_to_delivery_ms": percentiles_ms(&h),
        "server_cpu_ms": w.cpu.server_ms,
        "server_cpu_us_per_delivery": per_delivery_us,
        "server_cpu_us_per_delivery_target": CPU_PER_DELIVERY_TARGET_US,
        "server_cpu_ms_per_message": w.cpu.server_ms.map(|ms| ms as f64 / sent as f64),
        "postgres_cpu_ms": w.cpu.postgres_ms,
        // The load generator shares the machine; its own CPU says how much it took.
        "bench_cpu_ms": w.cpu.bench_ms,
    }))
}
