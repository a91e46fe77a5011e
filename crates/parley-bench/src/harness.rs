//! What every load-model scenario shares: building the world and bringing its devices
//! online, the progress display, draining the pushes after the load, the final sync and
//! check, the latency histograms, the baseline, and the report with its plots.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use parley_client::AdminClient;
use rand::rngs::StdRng;
use serde_json::{json, Value};

use super::baseline::{self, BaselinePlan, BaselineResult};
use super::devices::{DeviceLog, Devices};
use super::load::{Ack, LoadCounters, LoadOutcome};
use super::plots;
use super::report::{micros_histogram, percentiles_ms, record, summary, write_json};
use super::verify::{verify, Verification};
use super::world::{self, World, WorldPlan};
use super::BenchArgs;

/// Longest wait after the load for the pushes still on their way.
const DRAIN_MAX: Duration = Duration::from_secs(90);
/// The drain gives up when no event arrived for this long. Longer than the SDK's ping
/// interval (20 s), after which a device retries a catch-up that failed.
const DRAIN_STALL_MAX: Duration = Duration::from_secs(25);
/// Most transactions the server runs at once: its default PostgreSQL pool (`--pool-size`).
/// An open-loop baseline never runs more, however many sends queue in front of the server.
pub const SERVER_POOL_SIZE_DEFAULT: usize = 16;
/// An open-loop rate is held when the throughput reaches this share of it …
const HELD_THROUGHPUT_SHARE: f64 = 0.99;
/// … and the 99th percentile of the ack latency, from the due time, stays within a second.
const HELD_ACK_P99_US: u64 = 1_000_000;
/// Refresh of the progress display.
const TICK: Duration = Duration::from_millis(250);

pub fn phase(msg: &str) {
    eprintln!("==> {msg}");
}

fn bar(len: u64, unit: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    let template = format!("{{spinner}} [{{bar:32}}] {{pos}}/{{len}} {unit}  {{msg}}");
    if let Ok(style) = ProgressStyle::with_template(&template) {
        pb.set_style(style.progress_chars("=> "));
    }
    pb
}

/// The world and its devices, online and tracking.
pub struct Setup {
    pub world: World,
    pub devices: Devices,
    pub conv_ids: Vec<Arc<str>>,
}

pub async fn setup(args: &BenchArgs, plan: WorldPlan, rng: &mut StdRng) -> Result<Setup> {
    let admin = AdminClient::new(&args.url, &args.admin_token)?;
    admin
        .device_client("")
        .readyz()
        .await
        .with_context(|| format!("the server at {} is not ready", args.url))?;
    phase(&format!(
        "creating {} users, {} devices, {} direct chats, {} groups{}",
        plan.users,
        plan.online,
        plan.directs,
        plan.group_sizes.len(),
        plan.hot_group
            .map_or(String::new(), |h| format!(" and a hot group of {h}"))
    ));
    let pb = bar(world::setup_requests(&plan), "requests");
    let step = || pb.inc(1);
    let world = world::build(&admin, plan, rng, &step).await?;
    pb.finish_and_clear();
    phase(&format!("connecting {} devices", world.clients.len()));
    let pb = bar(world.clients.len() as u64, "devices");
    let step = || pb.inc(1);
    let devices = Devices::connect(&world, &step).await?;
    pb.finish_and_clear();
    let conv_ids = world
        .convs
        .iter()
        .map(|c| Arc::from(c.id.as_str()))
        .collect();
    Ok(Setup {
        world,
        devices,
        conv_ids,
    })
}

/// Runs `load` while a progress bar over `duration` shows acks, errors and deliveries.
pub async fn with_progress<F: Future>(
    label: &str,
    duration: Duration,
    setup: &Setup,
    counters: &LoadCounters,
    load: F,
) -> F::Output {
    phase(label);
    let pb = bar(duration.as_secs().max(1), "s");
    let started = Instant::now();
    let events = &setup.devices.counters;
    let ticker = async {
        loop {
            tokio::time::sleep(TICK).await;
            let elapsed = started.elapsed();
            pb.set_position(elapsed.as_secs().min(duration.as_secs().max(1)));
            let acked = counters.acked.load(Ordering::Relaxed);
            pb.set_message(format!(
                "acked {acked} ({:.0}/s), in flight {}, errors {}, events delivered {}",
                acked as f64 / elapsed.as_secs_f64().max(1e-3),
                counters.in_flight(),
                counters.errors.load(Ordering::Relaxed),
                events.events.load(Ordering::Relaxed),
            ));
        }
    };
    let out = tokio::select! {
        out = load => out,
        () = ticker => unreachable!("the ticker never ends"),
    };
    pb.finish_and_clear();
    out
}

/// The concurrency an open-loop run put on the database: the mean number of sends in flight
/// (Little's law), rounded up, but never more than the server's pool runs at once.
pub fn open_loop_concurrency(outcome: &LoadOutcome) -> usize {
    (outcome.mean_in_flight().ceil() as usize).clamp(1, SERVER_POOL_SIZE_DEFAULT)
}

/// Events the devices should receive for `acks`: each distinct acked seq once per online
/// member device, the sender's own device included.
pub fn expected_events(world: &World, acks: &[Ack]) -> u64 {
    let mut seen = std::collections::HashSet::new();
    acks.iter()
        .filter(|a| seen.insert((a.conv, a.seq)))
        .map(|a| world.convs[a.conv as usize].online.len() as u64)
        .sum()
}

/// Waits until the devices received `expected` events, or stop arriving.
pub async fn drain(devices: &Devices, expected: u64) -> (u64, f64) {
    phase(&format!(
        "waiting for {expected} events to reach the devices"
    ));
    let started = Instant::now();
    let mut last = devices.counters.events.load(Ordering::Relaxed);
    let mut last_change = Instant::now();
    loop {
        let now = devices.counters.events.load(Ordering::Relaxed);
        if now >= expected {
            break (now, started.elapsed().as_secs_f64());
        }
        if now != last {
            (last, last_change) = (now, Instant::now());
        }
        if last_change.elapsed() > DRAIN_STALL_MAX || started.elapsed() > DRAIN_MAX {
            break (now, started.elapsed().as_secs_f64());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Latency histograms of a run: ack (due to ack), push (due to the first arrival at a
/// device other than the sender's) and every delivery (due to each such arrival).
pub struct Latencies {
    pub ack: Histogram<u64>,
    pub push: Histogram<u64>,
    pub delivery: Histogram<u64>,
}

pub fn latencies(logs: &[DeviceLog], acks: &[Ack]) -> Result<Latencies> {
    let mut ack = micros_histogram()?;
    let mut by_seq: HashMap<(u32, i64), usize> = HashMap::with_capacity(acks.len());
    for (i, a) in acks.iter().enumerate() {
        record(&mut ack, a.acked.saturating_duration_since(a.due));
        by_seq.insert((a.conv, a.seq), i);
    }
    let mut first: Vec<Option<Instant>> = vec![None; acks.len()];
    let mut delivery = micros_histogram()?;
    for (d, log) in logs.iter().enumerate() {
        for r in &log.received {
            let Some(&i) = by_seq.get(&(r.conv, r.seq)) else {
                continue;
            };
            let a = &acks[i];
            if a.device as usize == d {
                continue;
            }
            record(&mut delivery, r.at.saturating_duration_since(a.due));
            first[i] = Some(first[i].map_or(r.at, |f| f.min(r.at)));
        }
    }
    let mut push = micros_histogram()?;
    for (a, f) in acks.iter().zip(first) {
        if let Some(f) = f {
            record(&mut push, f.saturating_duration_since(a.due));
        }
    }
    Ok(Latencies {
        ack,
        push,
        delivery,
    })
}

/// After the load: drain, close the sessions, final sync and check.
pub struct Concluded {
    pub logs: Vec<DeviceLog>,
    pub verification: Verification,
    pub expected_events: u64,
    pub received_events: u64,
    pub drain_s: f64,
}

pub async fn conclude(setup: Setup, acks: &[Ack]) -> (World, Concluded) {
    let expected = expected_events(&setup.world, acks);
    let (received, drain_s) = drain(&setup.devices, expected).await;
    let logs = setup.devices.close().await;
    phase("final sync of every device's conversations and check");
    let verification = verify(&setup.world, &logs, acks).await;
    (
        setup.world,
        Concluded {
            logs,
            verification,
            expected_events: expected,
            received_events: received,
            drain_s,
        },
    )
}

/// Runs the baseline if `--database-url` was given: the result or why it did not run.
pub async fn baseline(
    args: &BenchArgs,
    plans: &[BaselinePlan],
) -> Option<Result<Vec<BaselineResult>>> {
    let url = args.database_url.as_deref()?;
    phase(&format!(
        "baseline: the raw send transaction against PostgreSQL at concurrency {}",
        plans
            .iter()
            .map(|p| p.concurrency.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    ));
    Some(baseline::run_many(url, plans).await)
}

/// The fields every load-model report has.
pub struct Common<'a> {
    pub scenario: &'a str,
    pub mode: &'a str,
    pub target_rate_per_s: Option<f64>,
    pub world: &'a World,
    pub outcome: &'a LoadOutcome,
    pub concluded: &'a Concluded,
    pub latencies: &'a Latencies,
    pub throughput_per_s: f64,
    /// The baseline this scenario compares with, and at which concurrency.
    pub baseline: Option<Result<&'a BaselineResult, String>>,
}

pub fn report(c: &Common<'_>) -> Value {
    let errors = c.outcome.error_count() + c.concluded.verification.sync_failures;
    let dup = c.outcome.acks.iter().filter(|a| a.dup).count();
    let v = &c.concluded.verification.violations;
    let (baseline_tps, baseline_concurrency, ratio, detail, baseline_error) = match &c.baseline {
        Some(Ok(b)) => (
            json!(b.tps),
            json!(b.concurrency),
            json!(if b.tps > 0.0 {
                c.throughput_per_s / b.tps
            } else {
                0.0
            }),
            json!(b),
            Value::Null,
        ),
        Some(Err(e)) => (Value::Null, Value::Null, Value::Null, Value::Null, json!(e)),
        None => (
            Value::Null,
            Value::Null,
            Value::Null,
            Value::Null,
            Value::Null,
        ),
    };
    // Held: every scheduled send acked, none failed, the acks kept up with the schedule, and
    // no queue built up behind it (99 % of the sends acked within a second of their due time).
    let rate_held = c.target_rate_per_s.map(|t| {
        errors == 0
            && c.outcome.acks.len() as u64 == c.outcome.scheduled
            && c.throughput_per_s >= HELD_THROUGHPUT_SHARE * t
            && c.latencies.ack.value_at_quantile(0.99) <= HELD_ACK_P99_US
    });
    json!({
        "scenario": c.scenario,
        "mode": c.mode,
        "duration_s": c.outcome.elapsed_s(),
        "target_rate_per_s": c.target_rate_per_s,
        "rate_held": rate_held,
        "sends_scheduled": c.outcome.scheduled,
        "sends_acked": c.outcome.acks.len(),
        "sends_dup_acked": dup,
        "throughput_per_s": c.throughput_per_s,
        "mean_in_flight": c.outcome.mean_in_flight(),
        "errors": errors,
        "errors_by_kind": c.outcome.errors,
        "ack_latency_ms": percentiles_ms(&c.latencies.ack),
        "push_latency_ms": percentiles_ms(&c.latencies.push),
        "delivery_latency_ms": percentiles_ms(&c.latencies.delivery),
        "events_expected": c.concluded.expected_events,
        "events_delivered": c.concluded.received_events,
        "drain_s": c.concluded.drain_s,
        "violations": {
            "lost": v.lost,
            "duplicated": v.duplicated,
            "gaps": v.gaps,
            "reordered": v.reordered,
            "phantom": v.phantom,
            "total": v.total(),
            "examples": v.examples,
        },
        "verification": {
            "checked_pairs": c.concluded.verification.checked_pairs,
            "sync_failures": c.concluded.verification.sync_failures,
        },
        "baseline_tps": baseline_tps,
        "baseline_concurrency": baseline_concurrency,
        "ratio_to_baseline": ratio,
        "baseline": detail,
        "baseline_error": baseline_error,
        "world": c.world.summary(),
        "throughput_timeline_per_s": c.outcome.per_second(),
        "machine": machine(),
        "latency_from": if c.mode == "open_loop" {
            "the scheduled send time"
        } else {
            "the moment the send was made"
        },
    })
}

/// What the report says about where it ran.
pub fn machine() -> Value {
    // Other work on the machine skews every figure; the load average at the end says how much.
    let loadavg = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_owned));
    json!({
        "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        "load_average_1m_at_end": loadavg,
        "note": "the load generator runs on the same machine as the server and PostgreSQL, \
                 so all three share its cores",
    })
}

/// Writes the plots and `report.json`, and prints the summary.
pub fn emit(
    args: &BenchArgs,
    mut report: Value,
    lat: &Latencies,
    target: Option<f64>,
) -> Result<()> {
    std::fs::create_dir_all(&args.out)?;
    let scenario = report["scenario"].as_str().unwrap_or("bench").to_owned();
    let per_second: Vec<u64> =
        serde_json::from_value(report["throughput_timeline_per_s"].clone()).unwrap_or_default();
    let mut plots = Vec::new();
    match plots::latency(
        &args.out,
        &format!("{scenario}: latency by percentile"),
        &[
            ("ack", &lat.ack),
            ("push (first recipient)", &lat.push),
            ("every delivery", &lat.delivery),
        ],
    ) {
        Ok(p) => plots.push(p.display().to_string()),
        Err(e) => tracing::warn!(error = %e, "latency plot failed"),
    }
    match plots::throughput(
        &args.out,
        &format!("{scenario}: throughput over time"),
        &per_second,
        target,
    ) {
        Ok(p) => plots.push(p.display().to_string()),
        Err(e) => tracing::warn!(error = %e, "throughput plot failed"),
    }
    report["plots"] = json!(plots);
    let path = write_json(&args.out, &report)?;
    println!("{}", summary(&report));
    println!("report written to {}", path.display());
    Ok(())
}
