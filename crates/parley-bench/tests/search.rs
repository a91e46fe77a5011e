//! `parley bench --scenario search`, short, against `parley serve` in a process of its own on
//! each store: 20,000 messages in 200 conversations seeded into the server's own database (its
//! PostgreSQL database, or its data directory beside it), the searcher in 20 of them. The
//! report must show the seed verified, hits for every query, latencies through HTTP and raw at
//! both levels, both send arms run with `/v1/admin/server` agreeing, and no error. No timing is
//! asserted.

use std::path::{Path, PathBuf};
use std::time::Duration;

use parley_testkit::{parley_binary, ServerProcess, StoreKind};
use serde_json::Value;

/// Longest the short run may take, the build of the binary aside.
const RUN_MAX: Duration = Duration::from_secs(180);
const MESSAGES: u64 = 20_000;
const CONVERSATIONS: u64 = 200;
const MEMBER_OF: u64 = 20;
const SEARCHES: u64 = 10;
const SENDS: u64 = 100;
const ROUNDS: u64 = 1;

fn out_dir() -> PathBuf {
    std::env::temp_dir().join(format!("parley-bench-search-{}", uuid::Uuid::new_v4()))
}

async fn run_search(server: &ServerProcess, out: &Path) -> Value {
    let mut cmd = tokio::process::Command::new(parley_binary());
    cmd.arg("bench")
        .args(["--url", server.base_url()])
        .args(["--admin-token", server.admin_token()])
        .args(["--scenario", "search"])
        .args(["--search-messages", &MESSAGES.to_string()])
        .args(["--search-conversations", &CONVERSATIONS.to_string()])
        .args(["--search-member-of", &MEMBER_OF.to_string()])
        .args(["--search-in-flight", "1,4"])
        .args(["--search-count", &SEARCHES.to_string()])
        .args(["--search-send-messages", &SENDS.to_string()])
        .args(["--search-send-rounds", &ROUNDS.to_string()])
        .args(["--concurrency", "4"])
        .arg("--out")
        .arg(out)
        .kill_on_drop(true);
    if let Some(db) = server.db() {
        cmd.args(["--database-url", db.url()]);
    } else {
        let dir = server
            .data_dir()
            .expect("an embedded server has a data directory");
        cmd.arg("--search-data-dir").arg(dir);
    }
    let output = tokio::time::timeout(RUN_MAX, cmd.output())
        .await
        .expect("the benchmark stops by itself")
        .expect("the benchmark starts");
    assert!(
        output.status.success(),
        "bench failed: {}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let text = std::fs::read_to_string(out.join("report.json")).expect("report.json written");
    serde_json::from_str(&text).expect("report.json is JSON")
}

fn positive(v: &Value) -> bool {
    v.as_f64().is_some_and(|x| x > 0.0)
}

fn assert_report(r: &Value, store: &str) {
    assert_eq!(r["scenario"], "search");
    assert_eq!(r["store"], store);
    let seed = &r["seed"];
    assert_eq!(seed["messages"], MESSAGES);
    assert_eq!(seed["msg_events"], MESSAGES, "{seed:#}");
    assert_eq!(seed["indexed_docs"], MESSAGES, "{seed:#}");
    let v = &r["verify"];
    assert_eq!(v["ok"], true, "{v:#}");
    assert_eq!(v["sent_found"], true, "{v:#}");
    assert!(
        v["rare_hits_read_back"].as_u64().is_some_and(|n| n > 0),
        "{v:#}"
    );

    let queries = r["search"]["queries"].as_array().expect("queries");
    let names: Vec<&str> = queries.iter().filter_map(|q| q["name"].as_str()).collect();
    assert_eq!(
        names,
        [
            "rare_word",
            "common_word",
            "prefix",
            "phrase",
            "from_filter"
        ]
    );
    for q in queries {
        let levels = q["levels"].as_array().expect("levels");
        assert_eq!(levels.len(), 2, "{q:#}");
        for lv in levels {
            for path in ["http", "raw"] {
                let p = &lv[path];
                assert_eq!(p["searches"], SEARCHES, "{path}: {q:#}");
                assert_eq!(p["errors"], 0, "{path}: {q:#}");
                assert_eq!(p["latency_ms"]["count"], SEARCHES, "{path}: {q:#}");
                assert!(positive(&p["latency_ms"]["p99"]), "{path}: {q:#}");
                assert!(positive(&p["searches_per_s"]), "{path}: {q:#}");
                assert!(p["hits"].as_u64().is_some_and(|n| n > 0), "hits: {q:#}");
            }
            assert!(positive(&lv["throughput_ratio_http_to_raw"]), "{q:#}");
            assert!(positive(&lv["p50_ratio_raw_to_http"]), "{q:#}");
            assert!(lv["goal_met"].is_boolean());
        }
    }
    assert!(r["search"]["goal_met"].is_boolean());

    let s = &r["send"];
    for arm in ["on", "off"] {
        assert_eq!(s[arm]["sends"], SENDS * ROUNDS, "{arm}: {s:#}");
        assert_eq!(s[arm]["errors"], 0, "{arm}: {s:#}");
        assert!(positive(&s[arm]["sends_per_s"]), "{arm}: {s:#}");
        assert_eq!(s[arm]["ack_ms"]["count"], SENDS * ROUNDS, "{arm}: {s:#}");
    }
    assert!(positive(&s["throughput_ratio_on_to_off"]));
    assert_eq!(s["indexing_reported_matches"], true, "{s:#}");
    assert_eq!(s["indexing_reported_after"], "in_transaction");
    let said: Vec<&str> = s["indexing_reported"]
        .as_array()
        .expect("what the server said")
        .iter()
        .filter_map(|x| x["search_indexing"].as_str())
        .collect();
    assert_eq!(said, ["in_transaction", "off"]);
    assert_eq!(r["errors"], 0, "{r:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_on_the_embedded_store() {
    let server = ServerProcess::start_on(parley_binary(), StoreKind::Sqlite).await;
    let out = out_dir();
    let r = run_search(&server, &out).await;
    assert_report(&r, "sqlite");
    let _ = std::fs::remove_dir_all(&out);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_on_postgres() {
    let server = ServerProcess::start_on(parley_binary(), StoreKind::Postgres).await;
    let out = out_dir();
    let r = run_search(&server, &out).await;
    assert_report(&r, "postgres");
    let _ = std::fs::remove_dir_all(&out);
}
