//! The PostgreSQL pool with the wait for a connection measured apart from the statements run
//! on it, and reported to the store's observer (`observer.rs`).

use std::time::Instant;

use sqlx::pool::PoolConnection;
use sqlx::{PgPool, Postgres};

use super::PgTx;
use crate::error::StoreError;
use crate::observer::ObserverSlot;

#[derive(Clone)]
pub(crate) struct TimedPool {
    pool: PgPool,
    observer: ObserverSlot,
}

impl TimedPool {
    pub(crate) fn new(pool: PgPool, observer: ObserverSlot) -> Self {
        Self { pool, observer }
    }

    pub(crate) fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// A pooled connection; the time spent waiting for it is reported, a timeout included.
    pub(crate) async fn acquire(&self) -> Result<PoolConnection<Postgres>, StoreError> {
        let start = Instant::now();
        let conn = self.pool.acquire().await;
        self.observer.pool_wait(start.elapsed());
        Ok(conn?)
    }

    /// A transaction on a pooled connection: `Pool::begin` does the same, acquire then BEGIN,
    /// but this way only the acquire is timed.
    pub(crate) async fn begin(&self) -> Result<PgTx<'static>, StoreError> {
        let conn = self.acquire().await?;
        Ok(sqlx::Transaction::begin(conn, None).await?)
    }

    pub(crate) fn observer(&self) -> &ObserverSlot {
        &self.observer
    }
}
