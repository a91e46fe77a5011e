//! Runs checks one after another (a check's measurement is not disturbed by another's load),
//! each under a timeout, and writes `result.json` and `report.html`.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parley_client::Method;

use crate::context::{Ctx, Target, NEEDS_DATABASE};
use crate::error::{CheckError, VerifyError};
use crate::registry::{registry, CheckDef, Needs};
use crate::result::{CheckResult, RunResult, ServerReport, Status};

/// Default time one check may take before it counts as failed.
pub const CHECK_TIMEOUT_MS_DEFAULT: u64 = 60_000;
/// The reason of every check that has no code in verify yet.
pub const NOT_IMPLEMENTED: &str = "not implemented in verify";
/// Why a negative control over Parley's own paths is not run against a deployment.
pub const NEEDS_TEST_BUILD: &str =
    "a negative control: needs a build with the test-only feature test-breaks (cargo test)";

/// Which checks to run and how long each may take.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Ids to run; empty runs every check. The others are listed NOT_RUN.
    pub only: Vec<String>,
    pub check_timeout_ms: u64,
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            only: Vec::new(),
            check_timeout_ms: CHECK_TIMEOUT_MS_DEFAULT,
        }
    }
}

/// How many gateways `/v1/admin/gateways` lists; 0 when it cannot be read.
async fn gateway_count(target: &Target) -> usize {
    match target
        .admin
        .raw(Method::GET, "/v1/admin/gateways")
        .send()
        .await
    {
        Ok((200, json)) => json["gateways"].as_array().map(Vec::len).unwrap_or(0),
        _ => 0,
    }
}

fn result_of(
    def: &CheckDef,
    status: Status,
    observed: String,
    reason: Option<String>,
) -> CheckResult {
    CheckResult {
        id: def.id.to_owned(),
        chapter: def.chapter.to_owned(),
        claim: def.claim.to_owned(),
        expected: def.expected.to_owned(),
        observed,
        status,
        reason,
        duration_ms: 0,
        transcript: Vec::new(),
    }
}

/// Runs one check: NOT_RUN when the deployment lacks what it needs or it has no code, else
/// its outcome within `timeout`.
async fn run_def(
    target: &Arc<Target>,
    def: &CheckDef,
    gateways: usize,
    timeout: Duration,
) -> CheckResult {
    let not_run = |reason: String| result_of(def, Status::NotRun, String::new(), Some(reason));
    // A check without code says so first, whatever the deployment has: no reason about
    // gateways or the database may suggest it would run otherwise.
    let Some(run) = def.run else {
        return not_run(match def.needs {
            Needs::TestBuild => NEEDS_TEST_BUILD.into(),
            Needs::Gateways(n) => format!("{NOT_IMPLEMENTED} (it needs {n} gateways)"),
            Needs::Database => format!("{NOT_IMPLEMENTED} (it needs --database-url)"),
            Needs::Api => NOT_IMPLEMENTED.into(),
        });
    };
    match def.needs {
        Needs::Database if target.database_url.is_none() => return not_run(NEEDS_DATABASE.into()),
        Needs::Gateways(n) if gateways < n => {
            return not_run(format!(
                "needs {n} gateways; /v1/admin/gateways lists {gateways}"
            ))
        }
        _ => {}
    }
    let ctx = Ctx::new(target.clone());
    let start = Instant::now();
    let outcome = tokio::time::timeout(timeout, run(&ctx)).await;
    let duration_ms = start.elapsed().as_millis() as u64;
    let mut result = match outcome {
        Ok(Ok(observed)) => result_of(def, Status::Pass, observed, None),
        Ok(Err(CheckError::NotRun(reason))) => not_run(reason),
        Ok(Err(e)) => result_of(def, Status::Fail, e.to_string(), Some(e.to_string())),
        Err(_) => {
            let reason = format!("timed out after {} ms", timeout.as_millis());
            result_of(def, Status::Fail, String::new(), Some(reason))
        }
    };
    result.duration_ms = duration_ms;
    result.transcript = ctx.transcript();
    tracing::info!(
        id = def.id,
        status = result.status.as_str(),
        duration_ms,
        "check"
    );
    result
}

/// Runs every check of the registry (or those of `options.only`), in order.
pub async fn run(target: Arc<Target>, options: &RunOptions) -> RunResult {
    let started_at = chrono::Utc::now().to_rfc3339();
    let gateways = gateway_count(&target).await;
    let timeout = Duration::from_millis(options.check_timeout_ms);
    let mut checks = Vec::new();
    for def in registry() {
        let chosen = options.only.is_empty() || options.only.iter().any(|id| id == def.id);
        if chosen {
            checks.push(run_def(&target, &def, gateways, timeout).await);
        } else {
            checks.push(result_of(
                &def,
                Status::NotRun,
                String::new(),
                Some("not selected by --only".into()),
            ));
        }
    }
    let s = &target.server;
    RunResult {
        server: ServerReport {
            version: s["version"].clone(),
            store: s["store"].clone(),
            bus: s["bus"].clone(),
            limits: s["limits"].clone(),
        },
        started_at,
        counts: RunResult::count(&checks),
        checks,
    }
}

/// Runs the check `id` alone (the cargo tests' entry): `None` for an unknown id.
pub async fn run_one(target: Arc<Target>, id: &str) -> Option<CheckResult> {
    let def = crate::registry::find(id)?;
    let gateways = gateway_count(&target).await;
    Some(
        run_def(
            &target,
            &def,
            gateways,
            Duration::from_millis(CHECK_TIMEOUT_MS_DEFAULT),
        )
        .await,
    )
}

/// Writes `dir/result.json` and `dir/report.html`, creating `dir`.
pub fn write_outputs(dir: &Path, result: &RunResult, run_tag: &str) -> Result<(), VerifyError> {
    let write = |name: &str, bytes: &[u8]| {
        let path = dir.join(name);
        std::fs::write(&path, bytes).map_err(|source| VerifyError::Write {
            path: path.display().to_string(),
            source,
        })
    };
    std::fs::create_dir_all(dir).map_err(|source| VerifyError::Write {
        path: dir.display().to_string(),
        source,
    })?;
    write("result.json", &serde_json::to_vec_pretty(result)?)?;
    write(
        "report.html",
        crate::report::render_html(result, run_tag).as_bytes(),
    )?;
    Ok(())
}
