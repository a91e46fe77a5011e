//! `parley bench --scenario push`, short, against `parley serve` in a process of its own on
//! each store, run with `--push-allow-http --push-coalesce-ms 0`: the report has every field,
//! every member device got a notification of its group's latest seq, none got one twice, every
//! paced message reached every member device, the server's own count of delivered
//! notifications equals what the push service received, and the server's CPU was read. No
//! timing is asserted.

use std::path::{Path, PathBuf};
use std::time::Duration;

use parley_testkit::{parley_binary, ServerProcess, StoreKind};
use serde_json::Value;

/// Longest the short run may take, the build of the binary aside.
const RUN_MAX: Duration = Duration::from_secs(180);
const USERS: u64 = 40;
const GROUP_SIZE: u64 = 10;
const MESSAGES: u64 = 3;
const PACED: u64 = 4;
const IN_FLIGHT: u64 = 4;

/// A scratch directory of one run.
fn out_dir() -> PathBuf {
    std::env::temp_dir().join(format!("parley-bench-push-{}", uuid::Uuid::new_v4()))
}

/// `parley serve` with the push flags the scenario needs. `ServerProcess` starts any
/// executable that takes `serve`'s flags; this one hands them on to the real binary with two
/// more (an `exec`, so the process id is the server's and its CPU time is what is read).
fn serve_with_push_flags(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).expect("a scratch directory");
    let path = dir.join("parley-serve-push");
    let script = format!(
        "#!/bin/sh\nexec '{}' \"$@\" --push-allow-http --push-coalesce-ms 0\n",
        parley_binary().display()
    );
    std::fs::write(&path, script).expect("the wrapper is written");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
        .expect("the wrapper is executable");
    path
}

async fn run_push(server: &ServerProcess, out: &Path) -> Value {
    let pid = server.pid().expect("the server runs").to_string();
    let mut cmd = tokio::process::Command::new(parley_binary());
    cmd.arg("bench")
        .args(["--url", server.base_url()])
        .args(["--admin-token", server.admin_token()])
        .args(["--server-pid", &pid])
        .args(["--scenario", "push"])
        .args(["--users", &USERS.to_string()])
        .args(["--push-group-size", &GROUP_SIZE.to_string()])
        .args(["--push-messages", &MESSAGES.to_string()])
        .args(["--push-paced", &PACED.to_string()])
        .args(["--concurrency", &IN_FLIGHT.to_string()])
        .arg("--out")
        .arg(out)
        .kill_on_drop(true);
    if let Some(db) = server.db() {
        cmd.args(["--postgres-database", db.name()]);
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

fn assert_report(r: &Value) {
    let groups = USERS / GROUP_SIZE;
    let member_devices = groups * (GROUP_SIZE - 1);
    let sends = groups * MESSAGES;
    assert_eq!(r["scenario"], "push");
    assert_eq!(r["users"], USERS);
    assert_eq!(r["groups"], groups);
    assert_eq!(r["member_devices_offline"], member_devices);
    for phase in ["baseline", "burst"] {
        let s = &r[phase]["sends"];
        assert_eq!(s["sends"], sends, "{phase}: {s:#}");
        assert!(positive(&s["sends_per_s"]), "{phase}: {s:#}");
        assert_eq!(s["ack_ms"]["count"], sends, "{phase}: {s:#}");
        assert!(
            r[phase]["cpu"]["server_cpu_ms"].is_u64(),
            "{phase}: the server's CPU was read: {r:#}"
        );
    }
    assert!(positive(
        &r["send_throughput_ratio_with_to_without_notifications"]
    ));

    let b = &r["burst"];
    assert_eq!(b["drain_complete"], true, "{b:#}");
    let notifications = b["notifications"].as_u64().expect("a count");
    // Every member device gets at least its group's latest seq; at most every send's.
    assert!(
        (member_devices..=sends * (GROUP_SIZE - 1)).contains(&notifications),
        "{notifications} notifications: {b:#}"
    );
    assert_eq!(b["notifications_most"], sends * (GROUP_SIZE - 1));
    assert_eq!(b["ack_to_notification_ms"]["count"], notifications, "{b:#}");
    assert!(positive(&b["notifications_per_s_from_first_send"]), "{b:#}");
    assert!(b["server_cpu_us_per_notification"].is_f64(), "{b:#}");

    let paced = &r["paced"];
    assert_eq!(paced["messages"], PACED);
    assert_eq!(paced["notifications_expected"], PACED * (GROUP_SIZE - 1));
    assert_eq!(
        paced["ack_to_notification_ms"]["count"],
        PACED * (GROUP_SIZE - 1),
        "{paced:#}"
    );

    let total = r["notifications_received"].as_u64().expect("a count");
    assert_eq!(total, notifications + PACED * (GROUP_SIZE - 1), "{r:#}");
    let server = &r["server"];
    assert_eq!(server["delivered"], total, "{server:#}");
    assert_eq!(server["delivered_matches_received"], true);
    assert_eq!(server["commit_to_send_count"], total, "{server:#}");
    assert!(positive(&server["commit_to_send_mean_ms"]), "{server:#}");

    let c = &r["check"];
    assert_eq!(c["member_devices"], member_devices);
    assert_eq!(c["with_latest_seq"], member_devices, "{c:#}");
    for k in [
        "missing_latest_seq",
        "duplicates",
        "phantom",
        "wrong_vapid_key",
        "refused_by_push_service",
        "paced_incomplete",
        "paced_missing",
        "violations",
    ] {
        assert_eq!(c[k], 0, "{k}: {c:#}");
    }
    let gap = &r["coalescing"]["min_gap_same_device_conversation_ms"];
    assert!(gap.is_f64(), "devices had several notifications: {r:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_on_the_embedded_store() {
    let scratch = out_dir();
    let serve = serve_with_push_flags(&scratch);
    let server = ServerProcess::start_on(serve, StoreKind::Sqlite).await;
    let r = run_push(&server, &scratch.join("out")).await;
    assert_report(&r);
    let _ = std::fs::remove_dir_all(&scratch);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_on_postgres() {
    let scratch = out_dir();
    let serve = serve_with_push_flags(&scratch);
    let server = ServerProcess::start_on(serve, StoreKind::Postgres).await;
    let r = run_push(&server, &scratch.join("out")).await;
    assert_report(&r);
    let _ = std::fs::remove_dir_all(&scratch);
}
