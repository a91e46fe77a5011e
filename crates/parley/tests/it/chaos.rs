//! `parley chaos`: a short run on a cluster of its own (PostgreSQL made with initdb, NATS,
//! three gateways) injects faults under load and its history checker finds no anomaly; against
//! gateways that ack before COMMIT (the `test-breaks` build), the checker finds the harm.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

/// Longest a short chaos run may take: the cluster starting, two schedules of 5 s, their
/// healing, catch-up and final reads.
const RUN_MAX: Duration = Duration::from_secs(240);

fn out_dir(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("parley-chaos-{name}-{}", uuid::Uuid::new_v4()))
}

/// Runs `parley chaos --out out` with `args`; answers its exit status and standard error.
async fn run_chaos(out: &Path, args: &[&str]) -> (std::process::ExitStatus, String) {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_parley"));
    cmd.arg("chaos")
        .arg("--out")
        .arg(out)
        .args(args)
        .env_remove("PARLEY_ADMIN_TOKEN")
        .env_remove("PARLEY_DATABASE_URL")
        .kill_on_drop(true);
    let output = tokio::time::timeout(RUN_MAX, cmd.output())
        .await
        .expect("the chaos run stops by itself")
        .expect("the chaos run starts");
    (
        output.status,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn read_json(path: &Path) -> Value {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn sum(object: &Value) -> u64 {
    object
        .as_object()
        .expect("an object of counts")
        .values()
        .map(|v| v.as_u64().expect("a count"))
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_chaos_run_injects_faults_under_load_and_finds_no_anomaly() {
    let out = out_dir("short");
    let (status, stderr) = run_chaos(
        &out,
        &["--schedules", "2", "--seed", "3", "--schedule-s", "5"],
    )
    .await;
    let summary = read_json(&out.join("summary.json"));
    assert!(status.success(), "{status}: {stderr}\n{summary:#}");
    assert_eq!(summary["schedules_run"], 2, "{summary:#}");
    assert_eq!(summary["seed"], 3);
    assert!(
        sum(&summary["faults"]) >= 6,
        "3 to 5 faults a schedule: {summary:#}"
    );
    assert!(summary["operations"].as_u64().unwrap() > 100, "{summary:#}");
    assert_eq!(sum(&summary["anomalies"]), 0, "{summary:#}");
    assert_eq!(
        summary["anomalies"].as_object().unwrap().len(),
        10,
        "every kind listed"
    );
    let unknown = summary["unknown_outcomes"].as_u64().unwrap();
    assert!(summary["recovered"].as_u64().unwrap() <= unknown);
    for index in 0..2 {
        let dir = out.join(format!("schedule-{index:03}"));
        let schedule = read_json(&dir.join("schedule.json"));
        let report = read_json(&dir.join("report.json"));
        let injected = report["faults"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["status"] == "injected")
            .count();
        assert_eq!(
            injected,
            schedule["faults"].as_array().unwrap().len(),
            "every planned fault injected on a cluster of the lab's own: {report:#}"
        );
        let history = std::fs::read_to_string(dir.join("history.jsonl")).unwrap();
        let lines = history.lines().count() as u64;
        assert!(lines >= report["history"]["operations"].as_u64().unwrap());
        assert!(history.contains(r#""type":"final_head""#));
    }
    // Nothing of the lab is left running: its PostgreSQL's pid file is gone.
    assert!(!out.join("lab/pg/data/postmaster.pid").exists());
    std::fs::remove_dir_all(&out).ok();
}

/// The negative control, on a binary built with the `test-breaks` feature (as the tests build
/// it): its gateways ack a send before its COMMIT, so the storms of terminated connections
/// (every fault of every schedule here) cut commits of acked sends, and the checker must find
/// the acked writes missing from the final log (`lost_write`) or pushed but never stored
/// (`phantom`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_catches_gateways_that_ack_before_commit() {
    assert_ack_before_commit_caught("pg_terminate_backend", "5").await;
}

/// The same broken gateways under a second fault: SIGKILL of a gateway, which takes the
/// commits of the sends it already acked down with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_catches_gateways_that_ack_before_commit_across_gateway_kills() {
    assert_ack_before_commit_caught("gateway_kill", "7").await;
}

/// Runs three schedules of `fault` only against gateways that ack before COMMIT, and asserts
/// that the run fails with acked writes missing from the log or pushes of uncommitted events.
async fn assert_ack_before_commit_caught(fault: &str, seed: &str) {
    let out = out_dir(&format!("abc-{seed}"));
    let (status, stderr) = run_chaos(
        &out,
        &[
            "--schedules",
            "3",
            "--seed",
            seed,
            "--schedule-s",
            "5",
            "--test-breaks",
            "ack-before-commit",
            "--faults",
            fault,
        ],
    )
    .await;
    let summary = read_json(&out.join("summary.json"));
    assert!(!status.success(), "anomalies must fail the run: {stderr}");
    assert!(
        summary["faults"][fault].as_u64().is_some_and(|n| n > 0),
        "{summary:#}"
    );
    println!("{fault}: {}", summary["anomalies"]);
    let harm = summary["anomalies"]["lost_write"].as_u64().unwrap_or(0)
        + summary["anomalies"]["phantom"].as_u64().unwrap_or(0);
    assert!(harm > 0, "{summary:#}");
    std::fs::remove_dir_all(&out).ok();
}

/// The packets a partition's rules dropped, from its detail (`…, N packets dropped, healed`).
fn dropped_packets(detail: &str) -> u64 {
    let words: Vec<&str> = detail.split_whitespace().collect();
    words
        .windows(2)
        .find(|w| w[1] == "packets")
        .and_then(|w| w[0].parse().ok())
        .unwrap_or_else(|| panic!("no packet count in {detail:?}"))
}

/// Partitions need root, `ip`, `nsenter` and `nft` (scripts/chaos.sh installs nftables): the
/// gateways run in network namespaces of the lab's own, each partition drops real traffic
/// between a gateway and PostgreSQL or NATS, the history shows no anomaly, and the lab removes
/// every namespace it made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_partitions_gateways_from_postgres_and_nats_without_anomaly() {
    let out = out_dir("partition");
    let (status, stderr) = run_chaos(
        &out,
        &[
            "--schedules",
            "2",
            "--seed",
            "11",
            "--schedule-s",
            "8",
            "--faults",
            "partition",
        ],
    )
    .await;
    let summary = read_json(&out.join("summary.json"));
    assert!(status.success(), "{status}: {stderr}\n{summary:#}");
    assert_eq!(
        summary["faults_skipped"],
        serde_json::json!({}),
        "this test needs root, ip, nsenter and nft: {summary:#}"
    );
    assert!(
        summary["faults"]["partition"].as_u64().unwrap() >= 6,
        "{summary:#}"
    );
    assert_eq!(
        summary["not_injected"],
        serde_json::json!([]),
        "{summary:#}"
    );
    assert_eq!(sum(&summary["anomalies"]), 0, "{summary:#}");
    let (mut dropped, mut namespaces, mut from) = (0, Vec::new(), Vec::new());
    for index in 0..2 {
        let dir = out.join(format!("schedule-{index:03}"));
        let schedule = read_json(&dir.join("schedule.json"));
        for fault in schedule["faults"].as_array().unwrap() {
            from.push(fault["partition_from"].as_str().unwrap().to_owned());
        }
        let report = read_json(&dir.join("report.json"));
        for fault in report["faults"].as_array().unwrap() {
            assert_eq!(fault["status"], "injected", "{report:#}");
            let detail = fault["detail"].as_str().unwrap();
            dropped += dropped_packets(detail);
            let ns = detail
                .split_whitespace()
                .map(|w| w.trim_start_matches('('))
                .find(|w| w.starts_with("parley-chaos-"))
                .unwrap_or_else(|| panic!("no namespace in {detail:?}"));
            namespaces.push(ns.to_owned());
        }
    }
    assert!(
        from.iter().any(|f| f == "postgres") && from.iter().any(|f| f == "nats"),
        "partitions from both: {from:?}"
    );
    assert!(dropped > 0, "the partitions cut real traffic");
    for ns in namespaces {
        assert!(
            !Path::new("/run/netns").join(&ns).exists(),
            "{ns} removed at the end of the run"
        );
    }
    std::fs::remove_dir_all(&out).ok();
}
