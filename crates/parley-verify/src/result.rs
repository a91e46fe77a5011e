//! `result.json`: one entry per check, with the server's own description.

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Status {
    #[serde(rename = "PASS")]
    Pass,
    #[serde(rename = "FAIL")]
    Fail,
    #[serde(rename = "NOT_RUN")]
    NotRun,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "PASS",
            Status::Fail => "FAIL",
            Status::NotRun => "NOT_RUN",
        }
    }
}

/// One check's outcome. `transcript` (what was sent and received) goes to the report only.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CheckResult {
    pub id: String,
    pub chapter: String,
    pub claim: String,
    pub expected: String,
    pub observed: String,
    pub status: Status,
    /// Why a check failed or did not run; null when it passed.
    pub reason: Option<String>,
    pub duration_ms: u64,
    #[serde(skip)]
    pub transcript: Vec<String>,
}

/// The server as it described itself (`GET /v1/admin/server`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ServerReport {
    pub version: Value,
    pub store: Value,
    pub bus: Value,
    pub limits: Value,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    #[serde(rename = "PASS")]
    pub pass: usize,
    #[serde(rename = "FAIL")]
    pub fail: usize,
    #[serde(rename = "NOT_RUN")]
    pub not_run: usize,
    pub total: usize,
}

/// The whole of `result.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunResult {
    pub server: ServerReport,
    /// RFC 3339.
    pub started_at: String,
    pub checks: Vec<CheckResult>,
    pub counts: Counts,
}

impl RunResult {
    pub fn count(checks: &[CheckResult]) -> Counts {
        let of = |s| checks.iter().filter(|c| c.status == s).count();
        Counts {
            pass: of(Status::Pass),
            fail: of(Status::Fail),
            not_run: of(Status::NotRun),
            total: checks.len(),
        }
    }
}
