//! Errors of the bus: only starting one can fail; once started, losses are counted and
//! logged, never returned to the write path.

/// Why a bus could not start.
#[derive(Debug, thiserror::Error)]
pub enum BusError {
    /// The configuration is unusable, e.g. a gateway id out of bounds.
    #[error("bad bus configuration: {0}")]
    Config(String),
    /// The transport could not be reached in time.
    #[error("bus unavailable: {0}")]
    Unavailable(String),
    #[cfg(feature = "postgres")]
    #[error("bus database error: {0}")]
    Database(#[from] sqlx::Error),
}
