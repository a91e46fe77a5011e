//! `parley bench --scenario e2ee`, short, against `parley serve` on the embedded store in a
//! process of its own: 40 plain and 40 encrypted sends in a group of 4 devices, 4 senders, and
//! the Commits of a group of 20 devices (one Commit adds 19, then 3 self-updates). The report
//! must show every send acked, the ratios computed, every encrypted message decrypted by a
//! member, the add Commit's request measured, and every member at the same epoch. No timing is
//! asserted.

use std::path::PathBuf;
use std::time::Duration;

use parley_testkit::{parley_binary, ServerProcess, StoreKind};
use serde_json::Value;

/// Longest the short run may take, the build of the binary aside.
const RUN_MAX: Duration = Duration::from_secs(120);
const GROUP: u64 = 4;
const MESSAGES: u64 = 40;
const COMMIT_GROUP: u64 = 20;
const COMMITS: u64 = 3;

fn positive(v: &Value) -> bool {
    v.as_f64().is_some_and(|x| x > 0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2ee_on_the_embedded_store() {
    let server = ServerProcess::start_on(parley_binary(), StoreKind::Sqlite).await;
    let out: PathBuf =
        std::env::temp_dir().join(format!("parley-bench-e2ee-{}", uuid::Uuid::new_v4()));
    let mut cmd = tokio::process::Command::new(parley_binary());
    cmd.arg("bench")
        .args(["--url", server.base_url()])
        .args(["--admin-token", server.admin_token()])
        .args(["--scenario", "e2ee"])
        .args(["--e2ee-group-size", &GROUP.to_string()])
        .args(["--e2ee-messages", &MESSAGES.to_string()])
        .args(["--e2ee-commit-group", &COMMIT_GROUP.to_string()])
        .args(["--e2ee-commits", &COMMITS.to_string()])
        .args(["--concurrency", "8"])
        .arg("--out")
        .arg(&out)
        .kill_on_drop(true);
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
    let r: Value = serde_json::from_str(&text).expect("report.json is JSON");
    assert_eq!(r["scenario"], "e2ee");

    let s = &r["send"];
    // --concurrency 8 is clamped to the group's 4 devices.
    assert_eq!(s["senders"], GROUP, "{s:#}");
    for arm in ["plain", "encrypted"] {
        let a = &s[arm];
        assert_eq!(a["sends"], MESSAGES, "{arm}: {a:#}");
        assert_eq!(a["acked"], MESSAGES, "{arm}: {a:#}");
        assert_eq!(a["errors"], 0, "{arm}: {a:#}");
        assert_eq!(a["ack_ms"]["count"], MESSAGES, "{arm}: {a:#}");
        assert!(positive(&a["sends_per_s"]), "{arm}: {a:#}");
        assert!(positive(&a["ack_ms"]["p99"]), "{arm}: {a:#}");
    }
    for ratio in [
        "throughput_ratio_encrypted_to_plain",
        "p50_ratio_encrypted_to_plain",
        "p99_ratio_encrypted_to_plain",
    ] {
        assert!(positive(&s[ratio]), "{ratio}: {s:#}");
    }
    // The measured sends and the warm-up's one per sender, all read by the last member.
    assert_eq!(s["reader_expected"], MESSAGES + GROUP, "{s:#}");
    assert_eq!(s["reader_decrypted"], MESSAGES + GROUP, "{s:#}");
    assert_eq!(s["reader_undecryptable"], 0, "{s:#}");
    assert_eq!(s["decrypted_all"], true, "{s:#}");

    let c = &r["commit"];
    assert_eq!(c["devices"], COMMIT_GROUP, "{c:#}");
    assert_eq!(c["members_seen_by_creator"], COMMIT_GROUP, "{c:#}");
    assert_eq!(c["add"]["devices_added"], COMMIT_GROUP - 1, "{c:#}");
    assert!(positive(&c["add"]["ms"]), "{c:#}");
    assert_eq!(c["add_size"]["welcome_devices"], COMMIT_GROUP - 1, "{c:#}");
    let size = &c["add_size"];
    let request = size["request_bytes"].as_u64().expect("request_bytes");
    let parts = size["commit_message_bytes"].as_u64().expect("commit bytes")
        + size["welcome_message_bytes"]
            .as_u64()
            .expect("welcome bytes");
    // The body carries both messages in base64: more than their decoded size.
    assert!(request > parts && parts > 0, "{size:#}");
    assert_eq!(c["join_ms"]["count"], COMMIT_GROUP - 1, "{c:#}");
    assert_eq!(c["update_commit_ms"]["count"], COMMITS, "{c:#}");
    assert_eq!(c["update_apply_ms"]["count"], COMMITS, "{c:#}");
    assert!(positive(&c["update_commit_ms"]["p99"]), "{c:#}");
    assert!(positive(&c["update_apply_ms"]["p99"]), "{c:#}");
    assert_eq!(c["epoch_expected"], 1 + COMMITS, "{c:#}");
    assert_eq!(c["epochs_min"], 1 + COMMITS, "{c:#}");
    assert_eq!(c["epochs_max"], 1 + COMMITS, "{c:#}");
    assert_eq!(c["converged"], true, "{c:#}");
    assert_eq!(r["errors"], 0, "{r:#}");
    let _ = std::fs::remove_dir_all(&out);
}
