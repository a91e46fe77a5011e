//! `parley serve`: open the store, apply the schema, serve HTTP until ctrl-c or SIGTERM.
//!
//! With `--database-url` the store is PostgreSQL; without it, the embedded SQLite store in
//! `--data-dir`. Without `--admin-token` the admin token is the one kept in the data directory,
//! generated and printed once at the first start.

use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context};
use parley_bus::nats::NatsBus;
use parley_bus::pg::{CancellationToken, PgBus};
use parley_bus::{EventBus, LocalBus};
use parley_domain::Limits;
use parley_server::config::{generated_gateway_id, ConnectionLimits, LoginLimits, MediaLimits};
use parley_server::gateway::origin::check_allow_list;
use parley_server::listener::open_files;
use parley_server::{AppState, ServerConfig};
use parley_store::pg::PgStore;
use parley_store::sqlite::SqliteStore;
use parley_store::{Breaks, Store};
use tokio::net::TcpListener;

use crate::cli::{BusKind, ServeArgs, GATEWAY_LEASE_MS_MIN, HINT_INTERVAL_MS_MAX};
use crate::data_dir::{self, TokenSource};
use crate::demo;
use crate::shutdown::shutdown_signal;
use parley_bus::nats::NATS_URL_DEFAULT;

pub async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    if args.bus == BusKind::Postgres && args.database_url.is_none() {
        bail!("--bus postgres needs PostgreSQL: give --database-url (PARLEY_DATABASE_URL)");
    }
    if args.bus == BusKind::Nats && args.database_url.is_none() {
        bail!("--bus nats needs PostgreSQL: give --database-url (PARLEY_DATABASE_URL)");
    }
    // Read once, before anything else starts: a test build's removed guards, refused outright
    // by a build without the `test-breaks` feature (never silently ignored).
    let breaks = Breaks::from_env().context("refusing to start")?;
    if !breaks.is_empty() {
        tracing::warn!("test breaks active: {breaks}");
    }
    let admin_token = resolve_admin_token(&args)?;
    let config = server_config(&args, admin_token)?;
    // Each connection holds an open file: the soft limit is raised to what the system
    // allows, and the connection cap stays below whatever it is.
    match open_files::raise_soft_limit() {
        Ok(limit) => tracing::info!(open_files = limit, "open-file limit"),
        Err(e) => tracing::warn!(error = %e, "open-file limit unknown"),
    }
    let ignored = not_yet_in_effect(&args);
    if !ignored.is_empty() {
        tracing::warn!(flags = ?ignored, "these settings are accepted but not in effect yet");
    }

    let opened = open_store(
        args.database_url.as_deref(),
        &args.store_dir(),
        args.pool_size,
        args.pg_idle_in_transaction_timeout_ms,
    )
    .await?
    .with_breaks(breaks);
    let store = opened.store();
    if args.no_migrate {
        tracing::info!("schema migration skipped (--no-migrate)");
    } else {
        store.migrate().await.context("cannot apply the schema")?;
        tracing::info!("schema is up to date");
    }
    if args.demo {
        demo::seed(
            store.as_ref(),
            |password| {
                Ok(parley_server::accounts::password::hash_blocking(
                    password.as_bytes(),
                )?)
            },
            args.pull_threshold,
            args.recall_window_ms,
        )
        .await
        .context("cannot seed the demo")?;
    }

    let bus_stop = CancellationToken::new();
    let node_bus = match (&opened, args.bus) {
        (OpenedStore::Postgres(pg), BusKind::Postgres) => {
            let gateway_id = config.gateway_id.clone();
            let bus = PgBus::start(pg.pool().clone(), gateway_id, bus_stop.clone())
                .await
                .context("cannot start the postgres event bus")?;
            NodeBus::Postgres(bus)
        }
        (_, BusKind::Nats) => {
            let gateway_id = config.gateway_id.clone();
            let bus = NatsBus::start(&args.nats_url, gateway_id, bus_stop.clone())
                .await
                .context("cannot start the nats event bus")?;
            NodeBus::Nats(bus)
        }
        _ => NodeBus::Local,
    };
    let bus: Arc<dyn EventBus> = match &node_bus {
        NodeBus::Postgres(bus) => Arc::new(bus.clone()),
        NodeBus::Nats(bus) => Arc::new(bus.clone()),
        NodeBus::Local => Arc::new(LocalBus::new()),
    };

    let media = open_media(&args)
        .await
        .context("cannot open the media storage")?;
    let state = AppState::new(store, bus, config).with_media(media);
    let listener = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let addr = listener.local_addr().context("listener has no address")?;
    let metrics = MetricsListener::start(args.metrics_listen, &state).await?;
    tracing::info!(%addr, "parley is listening");
    if args.demo {
        // Standard output, not the log: the logins are for the person at this terminal.
        println!("{}", demo::banner(&format!("http://{addr}/")));
    }
    parley_server::run(listener, state, shutdown_signal())
        .await
        .context("server failed")?;
    if let Some(metrics) = metrics {
        metrics.stop().await;
    }
    // Lets the bus send the announcements still queued before the process exits.
    bus_stop.cancel();
    match node_bus {
        NodeBus::Postgres(bus) => bus.stopped().await,
        NodeBus::Nats(bus) => bus.stopped().await,
        NodeBus::Local => {}
    }
    tracing::info!("parley stopped");
    Ok(())
}

/// The bus between gateways this process started, stopped after the server.
enum NodeBus {
    Local,
    Postgres(PgBus),
    Nats(NatsBus),
}

/// The second listener that serves `/metrics` without a token (`--metrics-listen`).
struct MetricsListener {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl MetricsListener {
    async fn start(
        addr: Option<std::net::SocketAddr>,
        state: &AppState,
    ) -> anyhow::Result<Option<Self>> {
        let Some(addr) = addr else {
            return Ok(None);
        };
        let listener = TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen on {addr} for metrics"))?;
        let bound = listener
            .local_addr()
            .context("metrics listener has no address")?;
        tracing::info!(addr = %bound, "metrics are served without a token");
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        let task = tokio::spawn(parley_server::run_metrics(
            listener,
            state.clone(),
            async move { stopped.cancelled().await },
        ));
        Ok(Some(Self { stop, task }))
    }

    async fn stop(self) {
        self.stop.cancel();
        match self.task.await {
            Ok(Err(e)) => tracing::warn!(error = %e, "metrics listener failed"),
            Err(e) => tracing::warn!(error = %e, "metrics listener task failed"),
            Ok(Ok(())) => {}
        }
    }
}

/// The store a process opened: PostgreSQL, whose pool the PostgreSQL bus shares, or the
/// embedded store.
pub enum OpenedStore {
    Postgres(PgStore),
    Sqlite(SqliteStore),
}

impl OpenedStore {
    /// The store without the guards `breaks` names (a test build only; see
    /// `parley_store::breaks`).
    fn with_breaks(self, breaks: Breaks) -> Self {
        match self {
            Self::Postgres(pg) => Self::Postgres(pg.with_breaks(breaks)),
            Self::Sqlite(sqlite) => {
                if breaks.no_row_lock() || breaks.no_unique_index() {
                    tracing::warn!(
                        "test breaks no-row-lock and no-unique-index change nothing on the \
                         embedded store: its single writer holds the write lock from BEGIN"
                    );
                }
                Self::Sqlite(sqlite.with_breaks(breaks))
            }
        }
    }

    pub fn store(&self) -> Arc<dyn Store> {
        match self {
            Self::Postgres(pg) => Arc::new(pg.clone()),
            Self::Sqlite(sqlite) => Arc::new(sqlite.clone()),
        }
    }
}

/// PostgreSQL when a URL is given (its connections' transactions idle at most
/// `idle_in_transaction_timeout_ms`), else the embedded store in `data_dir` (created if missing).
pub async fn open_store(
    database_url: Option<&str>,
    data_dir: &Path,
    pool_size: u32,
    idle_in_transaction_timeout_ms: u64,
) -> anyhow::Result<OpenedStore> {
    match database_url {
        Some(url) => {
            let store = PgStore::connect_with(url, pool_size, idle_in_transaction_timeout_ms)
                .await
                .context("cannot connect to PostgreSQL")?;
            tracing::info!("store: PostgreSQL");
            Ok(OpenedStore::Postgres(store))
        }
        None => {
            data_dir::ensure_dir(data_dir)?;
            let store = SqliteStore::open_dir(data_dir).await.with_context(|| {
                format!("cannot open the embedded store in {}", data_dir.display())
            })?;
            tracing::info!(path = %store.path().display(), "store: embedded SQLite");
            Ok(OpenedStore::Sqlite(store))
        }
    }
}

/// The admin token: the flag's, else the one kept in the data directory, generated at the
/// first start. A generated token is printed once, on standard output and never to the log.
fn resolve_admin_token(args: &ServeArgs) -> anyhow::Result<String> {
    if let Some(token) = &args.admin_token {
        if token.is_empty() {
            bail!("--admin-token (PARLEY_ADMIN_TOKEN) must not be empty");
        }
        return Ok(token.clone());
    }
    let dir = args.store_dir();
    data_dir::ensure_dir(&dir)?;
    let (token, source) = data_dir::admin_token(&dir)?;
    match source {
        TokenSource::Generated(path) => {
            println!(
                "parley: generated admin token (shown once, kept in {}):",
                path.display()
            );
            println!("{token}");
        }
        TokenSource::Kept(path) => {
            tracing::info!(path = %path.display(), "admin token read from the data directory");
        }
    }
    Ok(token)
}

/// The settings the HTTP edge uses, checked so a mistyped value fails at start, not later.
fn server_config(args: &ServeArgs, admin_token: String) -> anyhow::Result<ServerConfig> {
    if admin_token.is_empty() {
        bail!("the admin token must not be empty");
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
    if args.gateway_lease_ms < GATEWAY_LEASE_MS_MIN {
        bail!("--gateway-lease-ms must be at least {GATEWAY_LEASE_MS_MIN}");
    }
    check_allow_list(&args.ws_allowed_origins)
        .context("--ws-allowed-origin (PARLEY_WS_ALLOWED_ORIGINS)")?;
    let connections = connection_limits(args)?;
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
        gateway_lease_ms: args.gateway_lease_ms,
        idle_timeout_ms: args.idle_timeout_ms,
        purge_interval_ms: args.purge_interval_ms,
        tombstone_ttl_ms: args.tombstone_ttl_ms,
        hint_interval_ms: args.hint_interval_ms,
        rate_limit_per_s: args.rate_limit_per_s.unwrap_or(0),
        ws_allowed_origins: args.ws_allowed_origins.clone(),
        connections,
        open_registration: args.open_registration,
        login: LoginLimits {
            failures_per_user_max: args.login_failures_per_user_max,
            failures_per_address_max: args.login_failures_per_address_max,
            failure_window_ms: args.login_failure_window_ms,
        },
        media: MediaLimits {
            bytes_max: args.max_media_bytes,
            quota_bytes: args.media_quota_bytes,
            grace_ms: args.media_grace_ms,
            ..MediaLimits::default()
        },
        push: parley_server::push::PushConfig {
            coalesce_ms: args.push_coalesce_ms,
            allow_http: args.push_allow_http,
            subject: args.push_subject.clone(),
            lease_ms: args.push_lease_ms,
        },
        ..ServerConfig::default()
    })
}

/// The media backend: `--media-url` when given, else the directory `media` in the data
/// directory. Part files of interrupted uploads are swept here, before any upload starts.
async fn open_media(args: &ServeArgs) -> anyhow::Result<parley_media::MediaBackend> {
    let dir = args.store_dir().join("media");
    data_dir::ensure_dir(&args.store_dir())?;
    if args.media_url.is_none() && args.bus != BusKind::Local {
        // Gateways of one deployment serve each other's messages, so they must share the bytes.
        tracing::warn!(
            "media are kept in this gateway's data directory; give every gateway the same \
             --media-url so each can serve every attachment"
        );
    }
    let (backend, swept) = match &args.media_url {
        Some(url) => parley_media::MediaBackend::open_url(url, &dir.join("parts")).await?,
        None => parley_media::MediaBackend::open_fs(&dir).await?,
    };
    if swept > 0 {
        tracing::info!(swept, "removed the part files of interrupted uploads");
    }
    Ok(backend)
}

/// The connection limits, each at least 1: a limit of 0 would close or refuse everything.
fn connection_limits(args: &ServeArgs) -> anyhow::Result<ConnectionLimits> {
    let timeouts = [
        ("--header-timeout-ms", args.header_timeout_ms),
        ("--body-timeout-ms", args.body_timeout_ms),
        ("--keepalive-idle-ms", args.keepalive_idle_ms),
        ("--write-stall-timeout-ms", args.write_stall_timeout_ms),
        ("--ws-handshake-timeout-ms", args.ws_handshake_timeout_ms),
        ("--ws-close-timeout-ms", args.ws_close_timeout_ms),
    ];
    if let Some((flag, _)) = timeouts.iter().find(|(_, ms)| *ms == 0) {
        bail!("{flag} must be at least 1");
    }
    if args.connections_max == 0 || args.connections_per_address_max == 0 {
        bail!("--connections-max and --connections-per-address-max must be at least 1");
    }
    Ok(ConnectionLimits {
        header_timeout_ms: args.header_timeout_ms,
        body_timeout_ms: args.body_timeout_ms,
        media_body_timeout_ms: args.media_body_timeout_ms,
        keepalive_idle_ms: args.keepalive_idle_ms,
        write_stall_timeout_ms: args.write_stall_timeout_ms,
        ws_handshake_timeout_ms: args.ws_handshake_timeout_ms,
        ws_close_timeout_ms: args.ws_close_timeout_ms,
        connections_max: args.connections_max,
        connections_per_address_max: args.connections_per_address_max,
    })
}

/// Flags that were set but that no part of the server reads yet, so an operator is not misled
/// into thinking they work.
fn not_yet_in_effect(args: &ServeArgs) -> Vec<&'static str> {
    let mut ignored = Vec::new();
    if args.bus != BusKind::Nats && args.nats_url != NATS_URL_DEFAULT {
        ignored.push("--nats-url");
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
    fn a_given_admin_token_is_used_and_must_not_be_empty() {
        assert!(resolve_admin_token(&serve_args(&["--admin-token", ""])).is_err());
        let args = serve_args(&["--admin-token", "t0ken", "--max-body-bytes", "6"]);
        let token = resolve_admin_token(&args).expect("the flag's token");
        assert_eq!(token, "t0ken");
        let config = server_config(&args, token).expect("a valid configuration");
        assert_eq!(config.limits.body_bytes_max, 6);
        assert!(server_config(&args, String::new()).is_err());
    }

    #[test]
    fn without_a_token_the_data_directory_keeps_one() {
        let dir = tempfile::tempdir().expect("temp dir");
        let data = dir.path().join("data");
        let data = data.to_str().expect("utf-8 path");
        let args = serve_args(&["--data-dir", data]);
        let first = resolve_admin_token(&args).expect("generated");
        let again = resolve_admin_token(&args).expect("kept");
        assert_eq!(first, again);
        assert_eq!(first.len(), 64);
    }

    #[test]
    fn retention_and_hint_settings_reach_the_server() {
        let config = server_config(
            &serve_args(&[
                "--purge-interval-ms",
                "500",
                "--tombstone-ttl-ms",
                "3600000",
                "--hint-interval-ms",
                "250",
            ]),
            "t0ken".to_owned(),
        )
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
            ["--gateway-lease-ms", "299"],
            ["--hint-interval-ms", "251"],
            ["--hint-interval-ms", "0"],
            ["--purge-interval-ms", "0"],
        ] {
            let args = serve_args(&[bad[0], bad[1]]);
            assert!(
                server_config(&args, "t0ken".to_owned()).is_err(),
                "{bad:?} was accepted"
            );
        }
        let args = serve_args(&["--purge-interval-ms", "5", "--tombstone-ttl-ms", "9"]);
        assert!(not_yet_in_effect(&args).is_empty());
        let lease = server_config(&serve_args(&["--gateway-lease-ms", "300"]), "t0ken".into())
            .expect("the shortest lease");
        assert_eq!(lease.gateway_lease_ms, 300);
    }

    #[test]
    fn connection_limits_reach_the_server_and_zero_is_refused() {
        let config = server_config(
            &serve_args(&[
                "--header-timeout-ms",
                "2000",
                "--body-timeout-ms",
                "3000",
                "--keepalive-idle-ms",
                "4000",
                "--write-stall-timeout-ms",
                "4500",
                "--ws-handshake-timeout-ms",
                "5000",
                "--ws-close-timeout-ms",
                "6000",
                "--connections-max",
                "700",
                "--connections-per-address-max",
                "70",
            ]),
            "t0ken".to_owned(),
        )
        .expect("a valid configuration");
        assert_eq!(
            config.connections,
            ConnectionLimits {
                header_timeout_ms: 2_000,
                body_timeout_ms: 3_000,
                media_body_timeout_ms: parley_server::config::MEDIA_BODY_TIMEOUT_MS_DEFAULT,
                keepalive_idle_ms: 4_000,
                write_stall_timeout_ms: 4_500,
                ws_handshake_timeout_ms: 5_000,
                ws_close_timeout_ms: 6_000,
                connections_max: 700,
                connections_per_address_max: 70,
            }
        );
        for flag in [
            "--header-timeout-ms",
            "--body-timeout-ms",
            "--keepalive-idle-ms",
            "--write-stall-timeout-ms",
            "--ws-handshake-timeout-ms",
            "--ws-close-timeout-ms",
            "--connections-max",
            "--connections-per-address-max",
        ] {
            let args = serve_args(&[flag, "0"]);
            assert!(
                server_config(&args, "t0ken".to_owned()).is_err(),
                "{flag} 0 was accepted"
            );
        }
    }

    #[test]
    fn rate_limit_and_origins_reach_the_server() {
        let args = serve_args(&[
            "--rate-limit-per-s",
            "20",
            "--ws-allowed-origin",
            "https://chat.example",
        ]);
        let config = server_config(&args, "t0ken".to_owned()).expect("a valid configuration");
        assert_eq!(config.rate_limit_per_s, 20);
        assert_eq!(config.ws_allowed_origins, ["https://chat.example"]);
        assert!(not_yet_in_effect(&args).is_empty());
        let off = server_config(&serve_args(&[]), "t0ken".to_owned()).expect("defaults");
        assert_eq!(off.rate_limit_per_s, 0);
        let args = serve_args(&["--ws-allowed-origin", "chat.example"]);
        assert!(server_config(&args, "t0ken".to_owned()).is_err());
    }

    #[test]
    fn unused_flags_are_reported() {
        let args = serve_args(&[
            "--nats-url",
            "nats://10.0.0.1:4222",
            "--idle-timeout-ms",
            "5",
        ]);
        assert_eq!(not_yet_in_effect(&args), vec!["--nats-url"]);
        assert!(not_yet_in_effect(&serve_args(&[])).is_empty());
        let nats = serve_args(&["--bus", "nats", "--nats-url", "nats://10.0.0.1:4222"]);
        assert!(not_yet_in_effect(&nats).is_empty());
        assert_eq!(nats.nats_url, "nats://10.0.0.1:4222");
        assert_eq!(serve_args(&[]).nats_url, NATS_URL_DEFAULT);
    }
}
