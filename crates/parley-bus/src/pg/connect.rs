//! The bus's own connections to PostgreSQL, each with a bounded wait.

use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use sqlx::{Connection, PgConnection};

use super::{BUS_CONNECT_TIMEOUT_MS, NOTIFY_CHANNEL};
use crate::BusError;

pub(super) async fn connect(options: &PgConnectOptions) -> Result<PgConnection, BusError> {
    match tokio::time::timeout(
        Duration::from_millis(BUS_CONNECT_TIMEOUT_MS),
        PgConnection::connect_with(options),
    )
    .await
    {
        Ok(conn) => Ok(conn?),
        Err(_) => Err(BusError::Unavailable(format!(
            "no connection to PostgreSQL within {BUS_CONNECT_TIMEOUT_MS} ms"
        ))),
    }
}

/// A listener on [`NOTIFY_CHANNEL`] over a pool of one connection of its own, fresh for every
/// attempt so a suspect connection is never reused. Reconnecting is left to the caller
/// (`eager_reconnect(false)`), so every reconnect is seen and logged.
pub(super) async fn listen(options: &PgConnectOptions) -> Result<PgListener, BusError> {
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .min_connections(0)
        .max_lifetime(None)
        .idle_timeout(None)
        .acquire_timeout(Duration::from_millis(BUS_CONNECT_TIMEOUT_MS))
        .connect_lazy_with(options.clone());
    let attempt = async {
        let mut listener = PgListener::connect_with(&pool).await?;
        listener.eager_reconnect(false);
        listener.listen(NOTIFY_CHANNEL).await?;
        Ok::<_, sqlx::Error>(listener)
    };
    match tokio::time::timeout(Duration::from_millis(BUS_CONNECT_TIMEOUT_MS), attempt).await {
        Ok(listener) => Ok(listener?),
        Err(_) => Err(BusError::Unavailable(format!(
            "could not LISTEN within {BUS_CONNECT_TIMEOUT_MS} ms"
        ))),
    }
}

/// The notifier's connection: named for `pg_stat_activity`, and committing asynchronously, since
/// a notification lost in a crash costs nothing that sync does not repair.
pub(super) fn notify_options(options: &PgConnectOptions, gateway_id: &str) -> PgConnectOptions {
    options
        .clone()
        .application_name(&format!("parley-notify {gateway_id}"))
        .options([("synchronous_commit", "off")])
}

/// The listener's connection, named for `pg_stat_activity`.
pub(super) fn listen_options(options: &PgConnectOptions, gateway_id: &str) -> PgConnectOptions {
    options
        .clone()
        .application_name(&format!("parley-listen {gateway_id}"))
}
