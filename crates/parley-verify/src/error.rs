//! Errors of a check (its claim did not hold, or something it needed failed) and of a run.

use parley_client::ClientError;

/// Why a check did not pass. `NotRun` is not a failure: the deployment lacks what the check
/// needs.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The claim did not hold: what was seen instead.
    #[error("{0}")]
    Failed(String),
    /// The check cannot run here; the reason.
    #[error("{0}")]
    NotRun(String),
    #[error("request failed: {0}")]
    Client(#[from] ClientError),
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    #[error("websocket: {0}")]
    WebSocket(String),
}

/// Why a whole run could not start or write its results.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error("cannot reach the server: {0}")]
    Client(#[from] ClientError),
    #[error("the server's description is not what verify reads: {0}")]
    Description(String),
    #[error("cannot write {path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot encode the results: {0}")]
    Encode(#[from] serde_json::Error),
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
}

/// Fails the check with a formatted message unless the condition holds.
macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err($crate::error::CheckError::Failed(format!($($fmt)+)));
        }
    };
}
pub(crate) use ensure;
