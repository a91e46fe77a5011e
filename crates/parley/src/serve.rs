//! `parley serve`: connect the store, apply the schema, serve HTTP until ctrl-c or SIGTERM.

use std::sync::Arc;

use anyhow::{bail, Context};
use parley_bus::{EventBus, LocalBus};
use parley_domain::Limits;
use parley_server::config::generated_gateway_id;
use parley_server::{AppState, ServerConfig};
use parley_store::pg::{CancellationToken, PgBus, PgStore};
use parley_store::Store;
use tokio::net::TcpListener;

use crate::cli::{BusKind, ServeArgs, DATA_DIR_DEFAULT, HINT_INTERVAL_MS_MAX};
use crate::shutdown::shutdown_signal;

/// Example shown when no database URL is given.
const DATABASE_URL_EXAMPLE: &str = "postgres://postgres@127.0.0.1:5432/parley";

pub async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let Some(database_url) = args.database_url.as_deref() else {
        bail!(
            "no --database-url (PARLEY_DATABASE_URL) given: the embedded store is not available \
             yet, so Parley needs PostgreSQL, e.g. --database-url {DATABASE_URL_EXAMPLE}"
        );
    };
    let config = server_config(&args)?;
    if args.bus == BusKind::Nats {
        bail!(
            "--bus nats is not available yet; use --bus local (one node) or --bus postgres \
             (a few nodes on one database)"
        );
    }
    let ignored = not_yet_in_effect(&args);
    if !ignored.is_empty() {
        tracing::warn!(flags = ?ignored, "these settings are accepted but not in effect yet");
    }

    let store = PgStore::connect(database_url, args.pool_size)
        .await
        .context("cannot connect to PostgreSQL")?;
    if args.no_migrate {
        tracing::info!("schema migration skipped (--no-migrate)");
    } else {
        store.migrate().await.context("cannot apply the schema")?;
        tracing::info!("schema is up to date");
    }

    let bus_stop = CancellationToken::new();
    let pg_bus = match args.bus {
        BusKind::Postgres => {
            let gateway_id = config.gateway_id.clone();
            let bus = PgBus::start(store.pool().clone(), gateway_id, bus_stop.clone())
                .await
                .context("cannot start the postgres event bus")?;
            Some(bus)
        }
        BusKind::Local | BusKind::Nats => None,
    };
    let bus: Arc<dyn EventBus> = match &pg_bus {
        Some(pg_bus) => Arc::new(pg_bus.clone()),
        None => Arc::new(LocalBus::new()),
    };

    let state = AppState::new(Arc::new(store), bus, config);
    let listener = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let addr = listener.local_addr().context("listener has no address")?;
    tracing::info!(%addr, "parley is listening");
    parley_server::run(listener, state, shutdown_signal())
        .await
        .context("server failed")?;
    // Lets the bus send the announcements still queued before the process exits.
    bus_stop.cancel();
    if let Some(pg_bus) = pg_bus {
        pg_bus.stopped().await;
    }
    tracing::info!("parley stopped");
    Ok(())
}

/// The settings the HTTP edge uses, checked so a mistyped value fails at start, not later.
fn server_config(args: &ServeArgs) -> anyhow::Result<ServerConfig> {
    let Some(admin_token) = args.admin_token.clone() else {
        bail!(
            "no --admin-token (PARLEY_ADMIN_TOKEN) given: generating one is not available yet, \
             so choose a long random secret for the admin endpoints"
        );
    };
    if admin_token.is_empty() {
        bail!("--admin-token (PARLEY_ADMIN_TOKEN) must not be empty");
    }
    if args.max_body_bytes == 0 || args.max_request_bytes == 0 {
        bail!("--max-body-bytes and --max-request-bytes must be at least 1");
    }
    if args.recall_window_ms < 0 {
        bail!("--recall-window-ms must not be negative");
    }
    if args.retention_ms.is_some_and(|ms| ms <= 0) {
        bail!("--retention-ms must be positive");
    }
    if args.pool_size == 0 {
        bail!("--pool-size must be at least 1");
    }
    if args.purge_interval_ms == 0 || args.tombstone_ttl_ms == 0 {
        bail!("--purge-interval-ms and --tombstone-ttl-ms must be at least 1");
    }
    if !(1..=HINT_INTERVAL_MS_MAX).contains(&args.hint_interval_ms) {
        bail!("--hint-interval-ms must be between 1 and {HINT_INTERVAL_MS_MAX} (SPEC §8)");
    }
    Ok(ServerConfig {
        limits: Limits {
            body_bytes_max: args.max_body_bytes,
            request_bytes_max: args.max_request_bytes,
        },
        admin_token,
        recall_window_ms: args.recall_window_ms,
        pull_threshold: args.pull_threshold,
        retention_ms: args.retention_ms,
        // One id names this node in the gateways and routes tables.
        gateway_id: args.gateway_id.clone().unwrap_or_else(generated_gateway_id),
        idle_timeout_ms: args.idle_timeout_ms,
        purge_interval_ms: args.purge_interval_ms,
        tombstone_ttl_ms: args.tombstone_ttl_ms,
        hint_interval_ms: args.hint_interval_ms,
        ..ServerConfig::default()
    })
}

/// Flags that were set but that no part of the server reads yet, so an operator is not misled
/// into thinking they work.
fn not_yet_in_effect(args: &ServeArgs) -> Vec<&'static str> {
    let mut ignored = Vec::new();
    if args.nats_url.is_some() {
        ignored.push("--nats-url");
    }
    if args.rate_limit_per_s.is_some() {
        ignored.push("--rate-limit-per-s");
    }
    if args.data_dir.as_os_str() != DATA_DIR_DEFAULT {
        ignored.push("--data-dir");
    }
    ignored
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;

    fn serve_args(flags: &[&str]) -> ServeArgs {
        let argv = ["parley", "serve"].iter().chain(flags);
        match Cli::try_parse_from(argv).map(|c| c.command) {
            Ok(Command::Serve(args)) => *args,
            _ => panic!("flags {flags:?} should parse as serve"),
        }
    }

    #[test]
    fn the_admin_token_is_required_and_not_empty() {
        assert!(server_config(&serve_args(&[])).is_err());
        assert!(server_config(&serve_args(&["--admin-token", ""])).is_err());
        let config = server_config(&serve_args(&[
            "--admin-token",
            "t0ken",
            "--max-body-bytes",
            "6",
        ]))
        .expect("a valid configuration");
        assert_eq!(config.limits.body_bytes_max, 6);
    }

    #[test]
    fn retention_and_hint_settings_reach_the_server() {
        let config = server_config(&serve_args(&[
            "--admin-token",
            "t0ken",
            "--purge-interval-ms",
            "500",
            "--tombstone-ttl-ms",
            "3600000",
            "--hint-interval-ms",
            "250",
        ]))
        .expect("a valid configuration");
        assert_eq!(
            (
                config.purge_interval_ms,
                config.tombstone_ttl_ms,
                config.hint_interval_ms
            ),
            (500, 3_600_000, 250)
        );
        for bad in [
            ["--hint-interval-ms", "251"],
            ["--hint-interval-ms", "0"],
            ["--purge-interval-ms", "0"],
        ] {
            let args = serve_args(&["--admin-token", "t0ken", bad[0], bad[1]]);
            assert!(server_config(&args).is_err(), "{bad:?} was accepted");
        }
        let args = serve_args(&["--purge-interval-ms", "5", "--tombstone-ttl-ms", "9"]);
        assert!(not_yet_in_effect(&args).is_empty());
    }

    #[test]
    fn unused_flags_are_reported() {
        let args = serve_args(&[
            "--nats-url",
            "nats://127.0.0.1:4222",
            "--idle-timeout-ms",
            "5",
        ]);
        assert_eq!(not_yet_in_effect(&args), vec!["--nats-url"]);
        assert!(not_yet_in_effect(&serve_args(&[])).is_empty());
    }
}
