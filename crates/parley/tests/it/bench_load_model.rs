//! `parley bench` against a real server: a short run of a load-model scenario writes a report
//! with every expected field, no error and no violation, and its plots.

use std::path::PathBuf;
use std::time::Duration;

use parley_testkit::TestServer;
use serde_json::Value;

/// Longest a short scenario may take, setup, drain, check and baseline included.
const RUN_MAX: Duration = Duration::from_secs(240);

fn out_dir(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("parley-bench-{name}-{}", uuid::Uuid::new_v4()))
}

/// Runs `parley bench` against `server` with `extra` arguments, writing to `out`; fails unless it
/// exits 0. Answers its standard output and its report.
async fn run_bench(server: &TestServer, out: &PathBuf, extra: &[&str]) -> (String, Value) {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_parley"));
    cmd.arg("bench")
        .args(["--url", server.base_url()])
        .args(["--admin-token", server.admin_token()])
        .arg("--out")
        .arg(out)
        .args(extra)
        .kill_on_drop(true);
    let output = tokio::time::timeout(RUN_MAX, cmd.output())
        .await
        .expect("the benchmark stops by itself")
        .expect("the benchmark starts");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "bench failed: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        output.status
    );
    let text = std::fs::read_to_string(out.join("report.json")).expect("report.json written");
    let report: Value = serde_json::from_str(&text).expect("report.json is JSON");
    (stdout, report)
}

async fn bench(server: &TestServer, out: &PathBuf, extra: &[&str]) -> Value {
    let (stdout, report) = run_bench(server, out, extra).await;
    assert!(stdout.contains("violations: lost 0"), "summary:\n{stdout}");
    assert_history_clean(out, &report);
    report
}

/// The history beside the report holds every ack and every member's range, and the checker
/// finds in it what the report says it found.
fn assert_history_clean(out: &std::path::Path, report: &Value) {
    let file = std::fs::File::open(out.join("history.jsonl")).expect("history.jsonl written");
    let history =
        parley_history::read_history(std::io::BufReader::new(file)).expect("history.jsonl parses");
    let oks = history
        .iter()
        .filter(|r| matches!(r, parley_history::Record::Ok(_)))
        .count();
    assert_eq!(Some(oks as u64), report["sends_acked"].as_u64());
    let members = history
        .iter()
        .filter(|r| matches!(r, parley_history::Record::Member(_)))
        .count();
    assert_eq!(
        Some(members as u64),
        report["verification"]["checked_pairs"].as_u64()
    );
    let checked = parley_history::check(&history);
    assert_eq!(checked.total(), 0, "{checked:#?}");
    assert_eq!(
        serde_json::to_value(&checked.anomalies).expect("anomalies serialise"),
        report["verification"]["anomalies"]
    );
}

fn assert_clean(r: &Value) {
    for field in [
        "scenario",
        "duration_s",
        "target_rate_per_s",
        "sends_acked",
        "throughput_per_s",
        "errors",
        "ack_latency_ms",
        "push_latency_ms",
        "violations",
        "baseline_tps",
        "ratio_to_baseline",
        "world",
    ] {
        assert!(r.get(field).is_some(), "report lacks {field}: {r:#}");
    }
    for lat in ["ack_latency_ms", "push_latency_ms"] {
        for p in ["p50", "p95", "p99", "max"] {
            assert!(
                r[lat][p].as_f64().is_some_and(|v| v > 0.0),
                "{lat}.{p}: {r:#}"
            );
        }
    }
    for v in ["lost", "duplicated", "gaps", "reordered", "phantom"] {
        assert_eq!(r["violations"][v], 0, "{v}: {:#}", r["violations"]);
    }
    assert_eq!(r["errors"], 0, "{:#}", r["errors_by_kind"]);
    assert!(r["sends_acked"].as_u64().is_some_and(|n| n > 0));
    assert!(r["verification"]["checked_pairs"]
        .as_u64()
        .is_some_and(|n| n > 0));
    assert_eq!(r["events_delivered"], r["events_expected"]);
    for plot in r["plots"].as_array().expect("plots listed") {
        let svg = std::fs::read_to_string(plot.as_str().expect("a path")).expect("plot written");
        assert!(svg.starts_with("<svg"), "{plot}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_peak_runs_clean_and_compares_with_the_raw_transaction() {
    let server = TestServer::start_default().await;
    let out = out_dir("seed-peak");
    let r = bench(
        &server,
        &out,
        &[
            "--scenario",
            "seed-peak",
            "--duration",
            "3",
            "--rate",
            "100",
            "--users",
            "60",
            "--online",
            "40",
            "--database-url",
            server.db().url(),
        ],
    )
    .await;
    assert_clean(&r);
    assert_eq!(r["scenario"], "seed-peak");
    assert_eq!(r["target_rate_per_s"], 100.0);
    assert_eq!(r["sends_scheduled"], 300);
    assert!(r["baseline_tps"].as_f64().is_some_and(|t| t > 0.0), "{r:#}");
    assert!(r["ratio_to_baseline"].as_f64().is_some_and(|t| t > 0.0));
    assert!(
        r["world"]["hot_group_members"] == 60,
        "the hot group holds every user"
    );
    // The baseline's scratch schema is gone; the server's tables are untouched.
    let schemas: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'parley_bench_base_%'",
    )
    .fetch_one(server.pg_store().pool())
    .await
    .expect("schemas listed");
    assert_eq!(schemas, 0);
    let _ = std::fs::remove_dir_all(&out);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnect_storm_loses_nothing() {
    let server = TestServer::start_default().await;
    let out = out_dir("reconnect-storm");
    let r = bench(
        &server,
        &out,
        &[
            "--scenario",
            "reconnect-storm",
            "--duration",
            "4",
            "--rate",
            "100",
            "--users",
            "40",
            "--online",
            "30",
        ],
    )
    .await;
    assert_clean(&r);
    assert_eq!(r["recovery"]["reconnected"], 30, "{:#}", r["recovery"]);
    assert!(
        r["baseline_tps"].is_null(),
        "no --database-url, no baseline"
    );
    let _ = std::fs::remove_dir_all(&out);
    server.stop().await;
}

/// Runs the relations scenario and answers its report. Its history holds an `ok` for every
/// send and edit but none for reactions, which have no request key, so it is checked here
/// rather than by [`assert_history_clean`].
async fn bench_relations(server: &TestServer, out: &PathBuf, extra: &[&str]) -> Value {
    let args: Vec<&str> = ["--scenario", "relations"]
        .iter()
        .chain(extra)
        .copied()
        .collect();
    let (_, report) = run_bench(server, out, &args).await;
    let file = std::fs::File::open(out.join("history.jsonl")).expect("history.jsonl written");
    let history =
        parley_history::read_history(std::io::BufReader::new(file)).expect("history.jsonl parses");
    let oks = history
        .iter()
        .filter(|r| matches!(r, parley_history::Record::Ok(_)))
        .count() as u64;
    let reactions = report["relations"]["mixed"]["react_ack_latency_ms"]["count"]
        .as_u64()
        .expect("reactions counted");
    assert_eq!(Some(oks + reactions), report["sends_acked"].as_u64());
    let checked = parley_history::check(&history);
    assert_eq!(checked.total(), 0, "{checked:#?}");
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relations_mixes_reactions_and_edits_beside_plain_sends() {
    let server = TestServer::start_default().await;
    let out = out_dir("relations");
    let r = bench_relations(
        &server,
        &out,
        &[
            "--duration",
            "3",
            "--rate",
            "100",
            "--users",
            "60",
            "--online",
            "40",
        ],
    )
    .await;
    assert_clean(&r);
    assert_eq!(r["scenario"], "relations");
    // A warm-up of 300 sends, then both halves in full: 300 plain sends, 300 operations of
    // the mix.
    assert_eq!(r["sends_scheduled"], 900);
    let rel = &r["relations"];
    assert_eq!(rel["plain"]["sends_acked"], 300, "{rel:#}");
    assert_eq!(rel["mixed"]["ops_acked"], 300, "{rel:#}");
    for lat in [
        "send_ack_latency_ms",
        "react_ack_latency_ms",
        "edit_ack_latency_ms",
    ] {
        assert!(
            rel["mixed"][lat]["count"].as_u64().is_some_and(|n| n > 0),
            "{lat}: {rel:#}"
        );
    }
    assert!(rel["ack_p99_ratio_mixed_to_plain"]
        .as_f64()
        .is_some_and(|x| x > 0.0));
    assert!(rel["held"].is_boolean(), "{rel:#}");
    let _ = std::fs::remove_dir_all(&out);
    server.stop().await;
}
