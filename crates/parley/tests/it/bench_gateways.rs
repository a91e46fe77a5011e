//! `parley bench` on gateways it starts itself (`--gateways`): the `gateway-failover`
//! scenario kills one of three gateways under load, on NATS and on PostgreSQL notifications,
//! and nothing acked is lost, repeated or skipped on any member device; the report gives the
//! reconnect percentiles and the convergence of the route table. Without gateways of its own,
//! the scenario is refused.

use std::path::{Path, PathBuf};
use std::time::Duration;

use parley_testkit::TestDb;
use serde_json::Value;

/// Longest a short failover run may take: three gateways starting, the world, the load, the
/// drain, the final check and the wait for convergence.
const RUN_MAX: Duration = Duration::from_secs(240);
/// The machine's NATS server, which scripts/test.sh checks or starts.
const SHARED_NATS_URL: &str = "nats://127.0.0.1:4222";
/// PostgreSQL connections per gateway: three gateways of a test, and the tests running beside
/// it, stay within the server's default 100.
const GATEWAY_POOL_SIZE: &str = "6";

fn out_dir(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("parley-bench-{name}-{}", uuid::Uuid::new_v4()))
}

/// Runs `parley bench` with `args`; answers its exit status, standard output and error.
async fn run_bench(out: &Path, args: &[&str]) -> (std::process::ExitStatus, String, String) {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_parley"));
    cmd.arg("bench")
        .arg("--out")
        .arg(out)
        .args(args)
        .env("PARLEY_POOL_SIZE", GATEWAY_POOL_SIZE)
        .env_remove("PARLEY_ADMIN_TOKEN")
        .kill_on_drop(true);
    let output = tokio::time::timeout(RUN_MAX, cmd.output())
        .await
        .expect("the benchmark stops by itself")
        .expect("the benchmark starts");
    (
        output.status,
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// A short failover run over three gateways on `bus`; answers the report.
async fn failover(bus: &str) -> Value {
    let db = TestDb::create().await;
    let out = out_dir(&format!("failover-{bus}"));
    let (status, stdout, stderr) = run_bench(
        &out,
        &[
            "--scenario",
            "gateway-failover",
            "--gateways",
            "3",
            "--bus",
            bus,
            "--nats-url",
            SHARED_NATS_URL,
            "--database-url",
            db.url(),
            "--gateway-lease-ms",
            "1000",
            "--duration",
            "6",
            "--rate",
            "40",
            "--users",
            "24",
        ],
    )
    .await;
    assert!(
        status.success(),
        "bench failed: {status}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let text = std::fs::read_to_string(out.join("report.json")).expect("report.json written");
    let report: Value = serde_json::from_str(&text).expect("report.json is JSON");
    let _ = std::fs::remove_dir_all(&out);
    report
}

fn assert_failover_report(r: &Value, bus: &str) {
    for field in [
        "reconnect_p50_ms",
        "reconnect_p99_ms",
        "converge_ms",
        "converge_note",
        "lost",
        "duplicated",
        "gaps",
        "killed_gateway",
        "recovery",
    ] {
        assert!(r.get(field).is_some(), "report lacks {field}: {r:#}");
    }
    assert_eq!(r["scenario"], "gateway-failover");
    assert_eq!(
        (r["gateways"].as_u64(), r["bus"].as_str()),
        (Some(3), Some(bus))
    );
    assert_eq!(r["killed_gateway"], "bench-gw-2");
    for v in ["lost", "duplicated", "gaps"] {
        assert_eq!(r[v], 0, "{v}: {:#}", r["violations"]);
    }
    assert_eq!(r["violations"]["total"], 0, "{:#}", r["violations"]);
    assert_eq!(r["errors"], 0, "{:#}", r["errors_by_kind"]);
    assert!(r["sends_acked"].as_u64().is_some_and(|n| n > 0), "{r:#}");
    assert_eq!(r["events_delivered"], r["events_expected"], "{r:#}");
    // Users 2, 5, 8, … (a third of 24) were on the killed gateway, and each came back.
    assert_eq!(r["recovery"]["devices"], 8, "{:#}", r["recovery"]);
    assert_eq!(r["recovery"]["reconnected"], 8, "{:#}", r["recovery"]);
    let (p50, p99) = (&r["reconnect_p50_ms"], &r["reconnect_p99_ms"]);
    assert!(
        p50.as_f64().is_some_and(|p| p > 0.0) && p99.as_f64() >= p50.as_f64(),
        "reconnect p50 {p50}, p99 {p99}"
    );
    // Converged, or the server does not list its gateways, which the note says.
    let converged = r["converge_ms"].as_f64().is_some_and(|ms| ms >= 0.0);
    let not_listed = r["converge_ms"].is_null()
        && r["converge_note"]
            .as_str()
            .is_some_and(|n| n.contains("404"));
    assert!(converged || not_listed, "{:#}", r["converge_note"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_gateway_loses_nothing_on_nats() {
    let r = failover("nats").await;
    assert_failover_report(&r, "nats");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_gateway_loses_nothing_on_postgres() {
    let r = failover("postgres").await;
    assert_failover_report(&r, "postgres");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_needs_gateways_the_bench_started() {
    let out = out_dir("failover-refused");
    let (status, _, stderr) = run_bench(
        &out,
        &[
            "--scenario",
            "gateway-failover",
            "--url",
            "http://127.0.0.1:9",
            "--admin-token",
            "x",
        ],
    )
    .await;
    assert!(!status.success());
    assert!(stderr.contains("--gateways N"), "{stderr}");
    let _ = std::fs::remove_dir_all(&out);
}
