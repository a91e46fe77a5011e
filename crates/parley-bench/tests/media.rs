//! `parley bench --scenario media`, short, against `parley serve` in a process of its own on
//! each store: the report has every field, every download matched what was uploaded, the
//! server's memory was sampled, and the sweep deleted every upload it registered and every
//! blob. No timing is asserted.

use std::path::{Path, PathBuf};
use std::time::Duration;

use parley_testkit::{parley_binary, ServerProcess, StoreKind};
use serde_json::Value;

/// Longest the short run may take, the build of the binary aside.
const RUN_MAX: Duration = Duration::from_secs(180);
/// Uploads of the sweep in the short run.
const SWEEP_UPLOADS: u64 = 120;

fn out_dir() -> PathBuf {
    std::env::temp_dir().join(format!("parley-bench-media-{}", uuid::Uuid::new_v4()))
}

async fn run_media(server: &ServerProcess, out: &Path) -> Value {
    let pid = server.pid().expect("the server runs").to_string();
    let sweep = SWEEP_UPLOADS.to_string();
    let mut cmd = tokio::process::Command::new(parley_binary());
    cmd.arg("bench")
        .args(["--url", server.base_url()])
        .args(["--admin-token", server.admin_token()])
        .args(["--server-pid", &pid])
        .args(["--scenario", "media"])
        .args(["--media-sizes-mib", "1"])
        .args(["--media-in-flight", "1,4"])
        .args(["--media-files", "4"])
        .args(["--media-rss-uploads", "4"])
        .args(["--media-rss-mib", "2"])
        .args(["--media-sweep-uploads", &sweep])
        .arg("--out")
        .arg(out)
        .kill_on_drop(true);
    if let Some(db) = server.db() {
        cmd.args(["--database-url", db.url()]);
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

fn assert_shape(r: &Value, store: &str) {
    assert_eq!(r["scenario"], "media");
    let runs = r["throughput"].as_array().expect("throughput runs");
    assert_eq!(runs.len(), 2, "one size at two counts in flight: {r:#}");
    for run in runs {
        assert_eq!(run["size_mib"], 1);
        assert_eq!(run["files"], 4);
        assert_eq!(run["downloads_verified"], 4, "{run:#}");
        assert_eq!(run["download_mismatches"], 0, "{run:#}");
        for dir in ["upload", "download"] {
            for k in ["server_mib_per_s", "raw_mib_per_s", "ratio_server_to_raw"] {
                assert!(
                    run[dir][k].as_f64().is_some_and(|x| x > 0.0),
                    "{dir}.{k}: {run:#}"
                );
            }
            assert!(run[dir]["held"].is_boolean());
            for path in ["server_ms", "raw_ms"] {
                assert_eq!(run[dir][path]["count"], 4, "{dir}.{path}: {run:#}");
                for p in ["p50", "p95", "p99", "max"] {
                    assert!(run[dir][path][p].as_f64().is_some(), "{dir}.{path}.{p}");
                }
            }
        }
    }
    assert_eq!(r["downloads_verified"], 8);
    assert_eq!(r["download_mismatches"], 0);
    for k in ["upload_ratio_held", "download_ratio_held"] {
        assert!(r[k].is_boolean(), "{k}: {r:#}");
    }
    let rss = &r["rss"];
    assert!(rss["skipped"].is_null(), "{rss:#}");
    assert_eq!(rss["bytes_in_flight"], 4 * 2 * 1024 * 1024);
    let before = rss["server_rss_before_bytes"].as_u64().expect("rss before");
    let peak = rss["server_rss_peak_bytes"].as_u64().expect("rss peak");
    assert!(before > 0 && peak >= before, "{rss:#}");
    assert!(rss["samples"].as_u64().is_some_and(|n| n > 0), "{rss:#}");
    assert!(rss["held"].is_boolean());
    let sweep = &r["sweep"];
    assert_eq!(sweep["store"], store, "{sweep:#}");
    assert_eq!(sweep["uploads"], SWEEP_UPLOADS);
    assert_eq!(sweep["blobs_on_disk_before"], SWEEP_UPLOADS, "{sweep:#}");
    assert_eq!(sweep["media_deleted"], SWEEP_UPLOADS, "{sweep:#}");
    assert_eq!(sweep["blobs_deleted"], SWEEP_UPLOADS, "{sweep:#}");
    assert_eq!(sweep["blobs_left"], 0, "{sweep:#}");
    for k in ["media_per_s", "blobs_per_s", "register_per_s"] {
        assert!(sweep[k].as_f64().is_some_and(|x| x > 0.0), "{k}: {sweep:#}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn media_on_the_embedded_store() {
    let server = ServerProcess::start_on(parley_binary(), StoreKind::Sqlite).await;
    let out = out_dir();
    let r = run_media(&server, &out).await;
    assert_shape(&r, "sqlite");
    let _ = std::fs::remove_dir_all(&out);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn media_on_postgres_drops_its_scratch_database() {
    let server = ServerProcess::start_on(parley_binary(), StoreKind::Postgres).await;
    let out = out_dir();
    let r = run_media(&server, &out).await;
    assert_shape(&r, "postgres");
    let db = server.db().expect("a PostgreSQL server");
    let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(db.url())
        .await
        .expect("connects");
    let left: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_database WHERE datname LIKE 'parley\\_bench\\_media\\_%'",
    )
    .fetch_one(&mut conn)
    .await
    .expect("databases listed");
    assert_eq!(left, 0, "the sweep's scratch database is dropped");
    let _ = std::fs::remove_dir_all(&out);
}
