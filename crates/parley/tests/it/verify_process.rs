//! `parley verify` as a process against `parley serve` as a process: exit code 0, a
//! `result.json` that parses with every check of the registry once and a valid status, a
//! `report.html`; with `--cleanup` on PostgreSQL (`--database-url`) the database checks run and
//! no scratch row is left, on the embedded store the scratch devices are revoked.

use std::collections::BTreeMap;

use anyhow::{ensure, Context, Result};
use parley_testkit::{ServerProcess, StoreKind};
use serde_json::Value;
use sqlx::Connection;
use tokio::process::Command;

async fn verify_against(store: StoreKind) -> Result<()> {
    let server = ServerProcess::start_on(env!("CARGO_BIN_EXE_parley"), store).await;
    let out = tempfile::tempdir()?;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_parley"));
    cmd.arg("verify")
        .args(["--url", server.base_url()])
        .args(["--admin-token", server.admin_token()])
        .arg("--out")
        .arg(out.path())
        .env_remove("PARLEY_ADMIN_TOKEN");
    cmd.arg("--cleanup");
    if let Some(db) = server.db() {
        cmd.args(["--database-url", db.url()]);
    }
    let output = cmd.output().await?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    println!("{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    ensure!(output.status.success(), "verify exited {:?}", output.status);

    let text = std::fs::read_to_string(out.path().join("result.json"))?;
    let result: Value = serde_json::from_str(&text)?;
    let checks = result["checks"].as_array().context("no checks")?;
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for c in checks {
        let id = c["id"].as_str().context("check without id")?;
        *seen.entry(id.to_owned()).or_default() += 1;
        let status = c["status"].as_str().unwrap_or_default();
        ensure!(
            ["PASS", "NOT_RUN"].contains(&status),
            "{id}: {status} {}",
            c["reason"]
        );
        for field in ["chapter", "claim", "expected", "observed", "duration_ms"] {
            ensure!(!c[field].is_null(), "{id} has no {field}");
        }
        ensure!(
            (status == "PASS") == c["reason"].is_null(),
            "{id}: {status} with reason {}",
            c["reason"]
        );
    }
    let ids: Vec<&str> = parley_verify::registry().iter().map(|c| c.id).collect();
    ensure!(
        seen.len() == ids.len(),
        "{} ids of {}",
        seen.len(),
        ids.len()
    );
    for id in ids {
        ensure!(
            seen.get(id) == Some(&1),
            "{id} appears {:?} times",
            seen.get(id)
        );
    }
    let store_name = match store {
        StoreKind::Postgres => "postgres",
        StoreKind::Sqlite => "sqlite",
    };
    ensure!(
        result["server"]["store"] == store_name,
        "{}",
        result["server"]
    );
    ensure!(result["counts"]["FAIL"] == 0 && result["counts"]["PASS"].as_u64() > Some(20));
    let report = std::fs::read_to_string(out.path().join("report.html"))?;
    ensure!(report.contains("04-normal-history") && report.starts_with("<!DOCTYPE html>"));

    let db_check = checks
        .iter()
        .find(|c| c["id"] == "04-history-uses-pk")
        .context("no plan check")?;
    if let Some(db) = server.db() {
        ensure!(db_check["status"] == "PASS", "{db_check}");
        let mut conn = sqlx::PgConnection::connect(db.url()).await?;
        let left: i64 = sqlx::query_scalar(
            "SELECT (SELECT count(*) FROM users WHERE user_id LIKE 'verify-%') \
             + (SELECT count(*) FROM conversations WHERE conv_id LIKE 'verify-%')",
        )
        .fetch_one(&mut conn)
        .await?;
        ensure!(left == 0, "{left} scratch rows left after --cleanup");
        ensure!(stdout.contains("rows deleted from users"), "{stdout}");
    } else {
        ensure!(db_check["status"] == "NOT_RUN" && db_check["reason"] == "needs --database-url");
        // Without the database, cleanup revokes the scratch devices: their tokens stop working.
        ensure!(stdout.contains("devices revoked"), "{stdout}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_process_against_serve_on_sqlite() -> Result<()> {
    verify_against(StoreKind::Sqlite).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_process_against_serve_on_postgres_with_cleanup() -> Result<()> {
    verify_against(StoreKind::Postgres).await
}

/// A failed check makes the exit code non-zero and is reported with its reason: a check
/// given 1 ms cannot finish.
#[tokio::test]
async fn verify_exits_non_zero_when_a_check_fails() -> Result<()> {
    let server = ServerProcess::start_on(env!("CARGO_BIN_EXE_parley"), StoreKind::Sqlite).await;
    let out = tempfile::tempdir()?;
    let status = Command::new(env!("CARGO_BIN_EXE_parley"))
        .args(["verify", "--url", server.base_url()])
        .args(["--admin-token", server.admin_token()])
        .args([
            "--only",
            "04-seq-gapless",
            "--check-timeout-ms",
            "1",
            "--out",
        ])
        .arg(out.path())
        .env_remove("PARLEY_ADMIN_TOKEN")
        .status()
        .await?;
    ensure!(status.code() == Some(1), "verify exited {status:?}");
    let result: Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("result.json"))?)?;
    let check = result["checks"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["id"] == "04-seq-gapless"))
        .context("no 04-seq-gapless")?;
    ensure!(
        check["status"] == "FAIL" && check["reason"] == "timed out after 1 ms",
        "{check}"
    );
    ensure!(result["counts"]["FAIL"] == 1, "{}", result["counts"]);

    // A wrong admin token cannot start a run at all.
    let status = Command::new(env!("CARGO_BIN_EXE_parley"))
        .args([
            "verify",
            "--url",
            server.base_url(),
            "--admin-token",
            "wrong",
            "--out",
        ])
        .arg(out.path())
        .env_remove("PARLEY_ADMIN_TOKEN")
        .status()
        .await?;
    ensure!(!status.success(), "verify with a wrong token exited 0");
    Ok(())
}
