//! Percentile summaries of latency histograms.

use hdrhistogram::Histogram;
use serde::Serialize;

#[derive(Debug, Serialize)]
pub struct Percentiles {
    pub count: u64,
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
}

/// Histograms record microseconds; reports are in milliseconds.
pub fn percentiles_ms(h: &Histogram<u64>) -> Percentiles {
    let ms = |us: u64| us as f64 / 1000.0;
    Percentiles {
        count: h.len(),
        p50: ms(h.value_at_quantile(0.50)),
        p95: ms(h.value_at_quantile(0.95)),
        p99: ms(h.value_at_quantile(0.99)),
        max: ms(h.max()),
    }
}

/// A histogram of microseconds from 1 µs to 10 minutes with 3 significant figures.
pub fn micros_histogram() -> anyhow::Result<Histogram<u64>> {
    Ok(Histogram::new_with_bounds(1, 600_000_000, 3)?)
}

/// Records `d` in microseconds (at least 1, at most the histogram's bound).
pub fn record(h: &mut Histogram<u64>, d: std::time::Duration) {
    let us = (d.as_micros() as u64).clamp(1, h.high());
    // In range by the clamp above.
    let _ = h.record(us);
}

/// Writes `report` as `DIR/report.json`, prints it, and says where it went: the end of the
/// scenarios that have no readable summary of their own.
pub fn publish(dir: &std::path::Path, report: &serde_json::Value) -> anyhow::Result<()> {
    let path = write_json(dir, report)?;
    println!("{}", serde_json::to_string_pretty(report)?);
    println!("report written to {}", path.display());
    Ok(())
}

/// Writes `report` as `DIR/report.json` and returns its path.
pub fn write_json(
    dir: &std::path::Path,
    report: &serde_json::Value,
) -> anyhow::Result<std::path::PathBuf> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join("report.json");
    std::fs::write(&path, serde_json::to_string_pretty(report)? + "\n")?;
    Ok(path)
}

fn f(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Number(n) => match n.as_f64() {
            Some(x) if n.is_f64() => format!("{x:.1}"),
            _ => n.to_string(),
        },
        serde_json::Value::Null => "-".into(),
        other => other.to_string(),
    }
}

fn latency_line(name: &str, p: &serde_json::Value) -> String {
    let ms = |k: &str| match p[k].as_f64() {
        Some(x) => format!("{x:>9.2}"),
        None => format!("{:>9}", "-"),
    };
    format!(
        "  {name:<18} {} {} {} {}   (n = {})",
        ms("p50"),
        ms("p95"),
        ms("p99"),
        ms("max"),
        f(&p["count"])
    )
}

/// The readable end-of-run summary of a load-model report.
pub fn summary(r: &serde_json::Value) -> String {
    let mut out = Vec::new();
    out.push(format!(
        "scenario {}  ({}, {} s)",
        r["scenario"].as_str().unwrap_or("?"),
        r["mode"].as_str().unwrap_or("?"),
        f(&r["duration_s"])
    ));
    let w = &r["world"];
    out.push(format!(
        "simulated: {} users, {} devices online, {} direct chats, {} groups ({}..{} members), hot group {}",
        f(&w["users"]),
        f(&w["devices_online"]),
        f(&w["direct_chats"]),
        f(&w["groups"]),
        f(&w["group_members_min"]),
        f(&w["group_members_max"]),
        f(&w["hot_group_members"]),
    ));
    out.push(format!(
        "sends: {} scheduled, {} acked ({} answered dup after a resend), {} errors",
        f(&r["sends_scheduled"]),
        f(&r["sends_acked"]),
        f(&r["sends_dup_acked"]),
        f(&r["errors"]),
    ));
    let target = match r["target_rate_per_s"].as_f64() {
        Some(t) => format!(" (target {t:.0}/s, held: {})", f(&r["rate_held"])),
        None => String::new(),
    };
    out.push(format!(
        "throughput: {}/s{target}",
        f(&r["throughput_per_s"])
    ));
    out.push(format!(
        "  {:<18} {:>9} {:>9} {:>9} {:>9}",
        "latency (ms)", "p50", "p95", "p99", "max"
    ));
    out.push(latency_line("ack", &r["ack_latency_ms"]));
    out.push(latency_line("push (first)", &r["push_latency_ms"]));
    out.push(latency_line("every delivery", &r["delivery_latency_ms"]));
    let v = &r["violations"];
    out.push(format!(
        "violations: lost {}, duplicated {}, gaps {}, reordered {}, phantom {}  ({} device-conversation pairs checked)",
        f(&v["lost"]),
        f(&v["duplicated"]),
        f(&v["gaps"]),
        f(&v["reordered"]),
        f(&v["phantom"]),
        f(&r["verification"]["checked_pairs"]),
    ));
    if let Some(examples) = v["examples"].as_array() {
        for e in examples {
            out.push(format!("  e.g. {}", e.as_str().unwrap_or("?")));
        }
    }
    match (&r["baseline_tps"], &r["baseline_error"]) {
        (serde_json::Value::Number(_), _) => out.push(format!(
            "baseline: raw send transaction {}/s at concurrency {}; ratio {}",
            f(&r["baseline_tps"]),
            f(&r["baseline_concurrency"]),
            r["ratio_to_baseline"]
                .as_f64()
                .map_or("-".into(), |x| format!("{x:.2}")),
        )),
        (_, serde_json::Value::String(e)) => out.push(format!("baseline: not run ({e})")),
        _ => out.push("baseline: not run (no --database-url)".into()),
    }
    out.join("\n")
}
