//! `parley verify`: every named check of SPEC §12 and of the later chapters (`04-…` to `11-…`),
//! run black box over HTTP and WebSocket against a running deployment, in scratch users and
//! conversations of its own (ids `verify-<run>-…`), written as `result.json` and `report.html`.
//!
//! The cargo tests run the same checks by id against a test server (`run_one`), so each check's
//! logic exists once. A check the deployment cannot support (no database URL, one gateway) or
//! that is not written yet is reported `NOT_RUN` with the reason, never left out.

mod checks;
pub use checks::media::PNG_1X1;
mod cleanup;
mod context;
mod error;
mod registry;
mod report;
mod result;
mod runner;
mod ws;

pub use cleanup::{cleanup, CleanupReport};
pub use context::{Ctx, Target};
pub use error::{CheckError, VerifyError};
pub use registry::{registry, CheckDef, Needs};
pub use report::render_html;
pub use result::{CheckResult, Counts, RunResult, ServerReport, Status};
pub use runner::{run, run_one, write_outputs, RunOptions, CHECK_TIMEOUT_MS_DEFAULT};
