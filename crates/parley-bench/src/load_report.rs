//! The report of a load-model run: the fields every scenario has, where it ran, and the
//! plots and `report.json` it writes.

use anyhow::Result;
use serde_json::{json, Value};

use crate::baseline::BaselineResult;
use crate::conclude::{Concluded, Latencies};
use crate::load::LoadOutcome;
use crate::plots;
use crate::report::{percentiles_ms, summary, write_json};
use crate::world::World;
use crate::BenchArgs;

/// The history the checker judged, beside `report.json` (`docs/HISTORY.md`).
pub const HISTORY_FILE: &str = "history.jsonl";

/// An open-loop rate is held when the throughput reaches this share of it …
const HELD_THROUGHPUT_SHARE: f64 = 0.99;
/// … and the 99th percentile of the ack latency, from the due time, stays within a second.
const HELD_ACK_P99_US: u64 = 1_000_000;

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
            "other": v.other,
            "total": v.total(),
            "examples": v.examples,
        },
        "verification": {
            "checked_pairs": c.concluded.verification.checked_pairs,
            "anomalies": c.concluded.verification.anomalies,
            "history": HISTORY_FILE,
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

/// Writes the history the checker judged to [`HISTORY_FILE`] in the output directory.
pub fn write_history(args: &BenchArgs, history: &[parley_history::Record]) -> Result<()> {
    std::fs::create_dir_all(&args.out)?;
    let file = std::fs::File::create(args.out.join(HISTORY_FILE))?;
    let mut out = std::io::BufWriter::new(file);
    parley_history::write_history(&mut out, history)?;
    std::io::Write::flush(&mut out)?;
    Ok(())
}
