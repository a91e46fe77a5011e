//! Errors of the store layer.

use parley_domain::Rejection;

/// Clone: one failure of a batched transaction is every request's answer.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The request was understood and refused; nothing was written.
    #[error(transparent)]
    Rejected(#[from] Rejection),
    /// The store could not be reached or failed before anything was committed. Retrying is safe.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The store failed while committing: the write may or may not have landed (P6). The client
    /// learns the truth by retrying with the same request key.
    #[error("commit outcome unknown: {0}")]
    OutcomeUnknown(String),
    /// Schema migration failed.
    #[error("migration failed: {0}")]
    Migration(String),
}

impl StoreError {
    pub fn rejected(&self) -> Option<&Rejection> {
        match self {
            Self::Rejected(r) => Some(r),
            _ => None,
        }
    }
}

impl From<sqlx::Error> for StoreError {
    /// A database error before the commit point: the transaction is rolled back, so nothing
    /// was written.
    fn from(e: sqlx::Error) -> Self {
        Self::Unavailable(e.to_string())
    }
}
