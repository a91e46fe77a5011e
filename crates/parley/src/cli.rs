//! The command line: `parley serve`, `parley migrate`, `parley bench` and `parley chaos`. Every serve flag can also be set by
//! the environment variable `PARLEY_<NAME>` (SPEC §6, configuration).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use clap::{Args, Parser, Subcommand, ValueEnum};
use parley_domain::limits::{
    BODY_BYTES_MAX_DEFAULT, PULL_THRESHOLD_DEFAULT, RECALL_WINDOW_MS_DEFAULT,
    REQUEST_BYTES_MAX_DEFAULT,
};

/// Default address of `parley serve`: loopback, so a fresh install is not exposed by accident.
pub const LISTEN_DEFAULT: &str = "127.0.0.1:8080";
/// Default directory of the embedded store.
pub const DATA_DIR_DEFAULT: &str = "./parley-data";
/// The data directory of `serve --demo` when none is given, apart from a real one.
pub const DEMO_DATA_DIR_DEFAULT: &str = "./parley-demo";
/// Default number of PostgreSQL connections of one server process.
pub const POOL_SIZE_DEFAULT: u32 = 16;
pub use parley_server::accounts::throttle::{
    LOGIN_FAILURES_PER_ADDRESS_MAX_DEFAULT, LOGIN_FAILURES_PER_USER_MAX_DEFAULT,
    LOGIN_FAILURE_WINDOW_MS_DEFAULT,
};
pub use parley_server::config::{
    BODY_TIMEOUT_MS_DEFAULT, CONNECTIONS_MAX_DEFAULT, CONNECTIONS_PER_ADDRESS_MAX_DEFAULT,
    GATEWAY_LEASE_MS_DEFAULT, GATEWAY_LEASE_MS_MIN, HEADER_TIMEOUT_MS_DEFAULT,
    HINT_INTERVAL_MS_DEFAULT, HINT_INTERVAL_MS_MAX, KEEPALIVE_IDLE_MS_DEFAULT,
    MEDIA_BODY_TIMEOUT_MS_DEFAULT, MEDIA_GRACE_MS_DEFAULT, PURGE_INTERVAL_MS_DEFAULT,
    TOMBSTONE_TTL_MS_DEFAULT, WRITE_STALL_TIMEOUT_MS_DEFAULT, WS_CLOSE_TIMEOUT_MS_DEFAULT,
    WS_HANDSHAKE_TIMEOUT_MS_DEFAULT,
};
pub use parley_store::pg::IDLE_IN_TRANSACTION_TIMEOUT_MS_DEFAULT;
/// Default time a silent WebSocket connection is kept open.
pub const IDLE_TIMEOUT_MS_DEFAULT: u64 = 60_000;

/// No `Debug`: the arguments hold the admin token and possibly a database password.
#[derive(Parser)]
#[command(name = "parley", version, about = "Parley instant-messaging server")]
pub struct Cli {
    /// Log line format: `text` for people, `json` (one object per line) for log collectors.
    #[arg(
        long,
        global = true,
        env = "PARLEY_LOG_FORMAT",
        value_enum,
        default_value_t = LogFormat::Text
    )]
    pub log_format: LogFormat,

    #[command(subcommand)]
    pub command: Command,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines, coloured only when the output is a terminal.
    Text,
    /// One JSON object per line, with the fields of the current span and its parents.
    Json,
}

#[derive(Subcommand)]
pub enum Command {
    /// Serves the HTTP API; applies the schema first unless --no-migrate is given.
    Serve(Box<ServeArgs>),
    /// Applies the schema to the database and exits.
    Migrate(MigrateArgs),
    /// Manages accounts in the server's own store: `user add`, `user passwd`.
    #[command(subcommand)]
    User(UserCommand),
    /// Drives a running server with load and writes a report.
    Bench(Box<parley_bench::BenchArgs>),
    /// Runs the named checks against a running server and writes result.json and report.html;
    /// exits non-zero when a check failed.
    Verify(VerifyArgs),
    /// Runs seeded fault schedules under load on a cluster of its own and checks the history.
    Chaos(Box<parley_chaos::ChaosArgs>),
}

/// How committed events travel between gateway nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BusKind {
    /// In-process: one node.
    Local,
    /// PostgreSQL notifications between nodes.
    Postgres,
    /// A NATS server between nodes.
    Nats,
}

#[derive(Args)]
pub struct ServeArgs {
    /// Address and port to listen on.
    #[arg(long, env = "PARLEY_LISTEN", default_value = LISTEN_DEFAULT)]
    pub listen: SocketAddr,

    /// PostgreSQL URL, e.g. postgres://postgres@127.0.0.1:5432/parley; absent: the embedded
    /// store in --data-dir.
    #[arg(long, env = "PARLEY_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,

    /// Directory of the embedded store and of the generated admin token; created if missing.
    #[arg(long, env = "PARLEY_DATA_DIR", default_value = DATA_DIR_DEFAULT)]
    pub data_dir: PathBuf,

    /// Secret for the /v1/admin endpoints; absent: generated at the first start, printed once
    /// and kept in --data-dir.
    #[arg(long, env = "PARLEY_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,

    /// Largest message body, in UTF-8 bytes.
    #[arg(long, env = "PARLEY_MAX_BODY_BYTES", default_value_t = BODY_BYTES_MAX_DEFAULT)]
    pub max_body_bytes: usize,

    /// Largest HTTP request body, in bytes.
    #[arg(long, env = "PARLEY_MAX_REQUEST_BYTES", default_value_t = REQUEST_BYTES_MAX_DEFAULT)]
    pub max_request_bytes: usize,

    /// Recall window of new conversations that do not set their own.
    #[arg(long, env = "PARLEY_RECALL_WINDOW_MS", default_value_t = RECALL_WINDOW_MS_DEFAULT)]
    pub recall_window_ms: i64,

    /// Member count from which a new group is delivered by pull.
    #[arg(long, env = "PARLEY_PULL_THRESHOLD", default_value_t = PULL_THRESHOLD_DEFAULT)]
    pub pull_threshold: u32,

    /// Interval between two runs of the retention purge.
    #[arg(long, env = "PARLEY_PURGE_INTERVAL_MS", default_value_t = PURGE_INTERVAL_MS_DEFAULT)]
    pub purge_interval_ms: u64,

    /// How long the request key of a purged message stays answerable.
    #[arg(long, env = "PARLEY_TOMBSTONE_TTL_MS", default_value_t = TOMBSTONE_TTL_MS_DEFAULT)]
    pub tombstone_ttl_ms: u64,

    /// Interval over which hints of a pull conversation are coalesced per device (at most 250).
    #[arg(long, env = "PARLEY_HINT_INTERVAL_MS", default_value_t = HINT_INTERVAL_MS_DEFAULT)]
    pub hint_interval_ms: u64,

    /// Name of this gateway among several.
    #[arg(long, env = "PARLEY_GATEWAY_ID")]
    pub gateway_id: Option<String>,

    /// Length of this gateway's lease (at least 300), renewed every third of it; the routes
    /// of a crashed gateway are reaped within two lease lengths.
    #[arg(long, env = "PARLEY_GATEWAY_LEASE_MS", default_value_t = GATEWAY_LEASE_MS_DEFAULT)]
    pub gateway_lease_ms: u64,

    /// How committed events reach other gateways.
    #[arg(long, env = "PARLEY_BUS", value_enum, default_value_t = BusKind::Local)]
    pub bus: BusKind,

    /// NATS server of --bus nats.
    #[arg(long, env = "PARLEY_NATS_URL", default_value = parley_bus::nats::NATS_URL_DEFAULT)]
    pub nats_url: String,

    /// Retention of new conversations that do not set their own; absent keeps events forever.
    #[arg(long, env = "PARLEY_RETENTION_MS")]
    pub retention_ms: Option<i64>,

    /// Time after which a silent WebSocket connection is closed.
    #[arg(long, env = "PARLEY_IDLE_TIMEOUT_MS", default_value_t = IDLE_TIMEOUT_MS_DEFAULT)]
    pub idle_timeout_ms: u64,

    /// A request head must arrive in full within this time (of the accept for a connection's
    /// first request, of its first byte for later ones).
    #[arg(long, env = "PARLEY_HEADER_TIMEOUT_MS", default_value_t = HEADER_TIMEOUT_MS_DEFAULT)]
    pub header_timeout_ms: u64,

    /// A request body must arrive in full within this time of its head.
    #[arg(long, env = "PARLEY_BODY_TIMEOUT_MS", default_value_t = BODY_TIMEOUT_MS_DEFAULT)]
    pub body_timeout_ms: u64,

    /// An upload's body (POST /v1/media) must arrive in full within this time.
    #[arg(long, env = "PARLEY_MEDIA_BODY_TIMEOUT_MS", default_value_t = MEDIA_BODY_TIMEOUT_MS_DEFAULT)]
    pub media_body_timeout_ms: u64,

    /// Largest upload (POST /v1/media), in bytes; a longer body is refused with 413.
    #[arg(long, env = "PARLEY_MAX_MEDIA_BYTES", default_value_t = parley_media::MEDIA_BYTES_MAX_DEFAULT)]
    pub max_media_bytes: u64,

    /// Most bytes one user's uploads may hold together; absent: no quota.
    #[arg(long, env = "PARLEY_MEDIA_QUOTA_BYTES")]
    pub media_quota_bytes: Option<u64>,

    /// Where uploads are kept: s3://bucket/prefix or file:///path (object_store); absent: the
    /// directory media/ in --data-dir.
    #[arg(long, env = "PARLEY_MEDIA_URL", hide_env_values = true)]
    pub media_url: Option<String>,

    /// An upload no message names is deleted this long after it was uploaded.
    #[arg(long, env = "PARLEY_MEDIA_GRACE_MS", default_value_t = MEDIA_GRACE_MS_DEFAULT)]
    pub media_grace_ms: u64,

    /// At most one offline notification per device and conversation per this interval; a
    /// burst becomes one notification of its latest message.
    #[arg(long, env = "PARLEY_PUSH_COALESCE_MS", default_value_t = parley_server::push::PUSH_COALESCE_MS_DEFAULT)]
    pub push_coalesce_ms: u64,

    /// Accept http:// push endpoints (tests and local push services; https only without it).
    #[arg(long, env = "PARLEY_PUSH_ALLOW_HTTP")]
    pub push_allow_http: bool,

    /// The contact VAPID claims name (mailto: or https:), for push services to reach the
    /// operator.
    #[arg(long, env = "PARLEY_PUSH_SUBJECT", default_value = parley_server::push::PUSH_SUBJECT_DEFAULT)]
    pub push_subject: String,

    /// How long a gateway's claim on notifications lasts; another gateway takes what a dead one
    /// claimed once it runs out (at least 12 s: a send's 10 s timeout and its report).
    #[arg(long, env = "PARLEY_PUSH_LEASE_MS", default_value_t = parley_server::push::PUSH_LEASE_MS_DEFAULT)]
    pub push_lease_ms: u64,

    /// A keep-alive connection with no request started for this long is closed.
    #[arg(long, env = "PARLEY_KEEPALIVE_IDLE_MS", default_value_t = KEEPALIVE_IDLE_MS_DEFAULT)]
    pub keepalive_idle_ms: u64,

    /// A write to a client that makes no progress for this long (the client stopped reading)
    /// closes the connection.
    #[arg(
        long,
        env = "PARLEY_WRITE_STALL_TIMEOUT_MS",
        default_value_t = WRITE_STALL_TIMEOUT_MS_DEFAULT
    )]
    pub write_stall_timeout_ms: u64,

    /// From a WebSocket upgrade request to its answer, authentication included.
    #[arg(
        long,
        env = "PARLEY_WS_HANDSHAKE_TIMEOUT_MS",
        default_value_t = WS_HANDSHAKE_TIMEOUT_MS_DEFAULT
    )]
    pub ws_handshake_timeout_ms: u64,

    /// How long closing a WebSocket may take: its close frame past the frames ahead of it,
    /// and the client's answer.
    #[arg(long, env = "PARLEY_WS_CLOSE_TIMEOUT_MS", default_value_t = WS_CLOSE_TIMEOUT_MS_DEFAULT)]
    pub ws_close_timeout_ms: u64,

    /// Most connections open at once, HTTP and WebSocket; lowered to stay below the
    /// open-file limit.
    #[arg(long, env = "PARLEY_CONNECTIONS_MAX", default_value_t = CONNECTIONS_MAX_DEFAULT)]
    pub connections_max: usize,

    /// Most connections open at once from one client address.
    #[arg(
        long,
        env = "PARLEY_CONNECTIONS_PER_ADDRESS_MAX",
        default_value_t = CONNECTIONS_PER_ADDRESS_MAX_DEFAULT
    )]
    pub connections_per_address_max: usize,

    /// Do not apply the schema at start.
    #[arg(long, env = "PARLEY_NO_MIGRATE")]
    pub no_migrate: bool,

    /// Seeds demo users with passwords (printed), a group and a direct chat on the embedded
    /// store, whose data directory is then ./parley-demo unless --data-dir names another.
    #[arg(long, env = "PARLEY_DEMO", conflicts_with = "database_url")]
    pub demo: bool,

    /// Most PostgreSQL connections this process opens.
    #[arg(long, env = "PARLEY_POOL_SIZE", default_value_t = POOL_SIZE_DEFAULT)]
    pub pool_size: u32,

    /// PostgreSQL ends a connection of this process that stays idle inside a transaction for
    /// this long (`idle_in_transaction_session_timeout`), releasing its locks; 0 turns it off.
    #[arg(
        long,
        env = "PARLEY_PG_IDLE_IN_TRANSACTION_TIMEOUT_MS",
        default_value_t = IDLE_IN_TRANSACTION_TIMEOUT_MS_DEFAULT
    )]
    pub pg_idle_in_transaction_timeout_ms: u64,

    // Abuse limits and browser origins.
    /// Requests per second allowed to one device (sends) and to the admin token, with a burst
    /// of one second's worth; absent or 0 means no limit.
    #[arg(long, env = "PARLEY_RATE_LIMIT_PER_S")]
    pub rate_limit_per_s: Option<u32>,

    // Accounts.
    /// Lets anyone create an account with `POST /v1/auth/register`; off: only the admin API
    /// and `parley user add` create users.
    #[arg(long, env = "PARLEY_OPEN_REGISTRATION")]
    pub open_registration: bool,

    /// Failed password checks of one user id within a window before its logins are refused
    /// (429); 0 turns the per-user throttle off.
    #[arg(
        long,
        env = "PARLEY_LOGIN_FAILURES_PER_USER_MAX",
        default_value_t = LOGIN_FAILURES_PER_USER_MAX_DEFAULT
    )]
    pub login_failures_per_user_max: u32,

    /// Failed password checks from one client address within a window before its logins are
    /// refused (429); 0 turns the per-address throttle off.
    #[arg(
        long,
        env = "PARLEY_LOGIN_FAILURES_PER_ADDRESS_MAX",
        default_value_t = LOGIN_FAILURES_PER_ADDRESS_MAX_DEFAULT
    )]
    pub login_failures_per_address_max: u32,

    /// Length of a failure window of the login throttle, from a key's first failure.
    #[arg(
        long,
        env = "PARLEY_LOGIN_FAILURE_WINDOW_MS",
        default_value_t = LOGIN_FAILURE_WINDOW_MS_DEFAULT
    )]
    pub login_failure_window_ms: u64,

    /// A browser origin (scheme://host[:port]) allowed to open WebSockets besides the server's
    /// own; repeat for several (the environment variable takes them comma-separated); `*`
    /// allows any.
    #[arg(
        long = "ws-allowed-origin",
        env = "PARLEY_WS_ALLOWED_ORIGINS",
        value_delimiter = ','
    )]
    pub ws_allowed_origins: Vec<String>,

    /// Address of a second listener that serves `GET /metrics` without a token, for a
    /// scraper on a private address; absent: metrics only on the main listener, to the admin
    /// token.
    #[arg(long, env = "PARLEY_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,
}

impl ServeArgs {
    /// The data directory in effect: with --demo and no --data-dir, the demo's own, so that
    /// demo users with printed passwords never land in the store of a real server.
    pub fn store_dir(&self) -> PathBuf {
        if self.demo && self.data_dir == Path::new(DATA_DIR_DEFAULT) {
            PathBuf::from(DEMO_DATA_DIR_DEFAULT)
        } else {
            self.data_dir.clone()
        }
    }
}

#[derive(Args)]
pub struct MigrateArgs {
    /// PostgreSQL URL, e.g. postgres://postgres@127.0.0.1:5432/parley; absent: the embedded store.
    #[arg(long, env = "PARLEY_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,

    /// Directory of the embedded store, used when no database URL is given.
    #[arg(long, env = "PARLEY_DATA_DIR", default_value = DATA_DIR_DEFAULT)]
    pub data_dir: PathBuf,
}

/// Account commands; each applies the schema first, like `serve`.
#[derive(Subcommand)]
pub enum UserCommand {
    /// Creates a user with a password; fails if the user exists.
    Add(UserAddArgs),
    /// Sets the password of an existing user; fails if there is no such user.
    Passwd(UserPasswdArgs),
}

/// Where the store is and where the password comes from. No `Debug`: it may hold a database
/// password.
#[derive(Args)]
pub struct UserStoreArgs {
    /// PostgreSQL URL; absent: the embedded store in --data-dir, as `parley serve` picks it.
    #[arg(long, env = "PARLEY_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,

    /// Directory of the embedded store, used when no database URL is given.
    #[arg(long, env = "PARLEY_DATA_DIR", default_value = DATA_DIR_DEFAULT)]
    pub data_dir: PathBuf,

    /// Reads the password from the first line of standard input (without its line ending);
    /// without it the password is taken from PARLEY_PASSWORD.
    #[arg(long)]
    pub password_stdin: bool,
}

#[derive(Args)]
pub struct UserAddArgs {
    /// The user id: 1 to 64 of `A-Z a-z 0-9 . _ - @`.
    pub user_id: String,

    /// The user's display name.
    #[arg(long)]
    pub display_name: Option<String>,

    #[command(flatten)]
    pub store: UserStoreArgs,
}

#[derive(Args)]
pub struct UserPasswdArgs {
    /// The user id.
    pub user_id: String,

    #[command(flatten)]
    pub store: UserStoreArgs,
}

#[derive(Args)]
pub struct VerifyArgs {
    /// Base URL of the server, e.g. http://127.0.0.1:8080.
    #[arg(long)]
    pub url: String,

    /// The server's admin token: verify creates scratch users and devices.
    #[arg(long, env = "PARLEY_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: String,

    /// The server's PostgreSQL, for the checks that read plans, lock rows or use a scratch
    /// schema; without it they are NOT_RUN.
    #[arg(long)]
    pub database_url: Option<String>,

    /// Directory for result.json and report.html (created if missing).
    #[arg(long)]
    pub out: PathBuf,

    /// Runs only this check; repeat for several. The others are listed NOT_RUN.
    #[arg(long = "only", value_name = "ID")]
    pub only: Vec<String>,

    /// After the run, removes scratch data: with --database-url every verify run's rows,
    /// without it this run's device tokens (see docs/VERIFY.md).
    #[arg(long)]
    pub cleanup: bool,

    /// Time one check may take before it counts as failed.
    #[arg(long, default_value_t = parley_verify::CHECK_TIMEOUT_MS_DEFAULT)]
    pub check_timeout_ms: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn serve_defaults_follow_the_spec() {
        let cli = Cli::try_parse_from(["parley", "serve"]).expect("serve parses without flags");
        let Command::Serve(args) = cli.command else {
            panic!("expected serve");
        };
        assert_eq!(args.listen.to_string(), LISTEN_DEFAULT);
        assert_eq!(args.recall_window_ms, 120_000);
        assert_eq!(args.pull_threshold, 500);
        assert_eq!(args.purge_interval_ms, 60_000);
        assert_eq!(args.tombstone_ttl_ms, 604_800_000);
        assert_eq!(args.hint_interval_ms, 100);
        assert_eq!(args.idle_timeout_ms, 60_000);
        assert_eq!(args.pool_size, 16);
        // Bounds a public deployment can use (issue 14): head 10 s, body 30 s, idle 60 s,
        // handshake 10 s at most.
        assert_eq!(args.header_timeout_ms, 10_000);
        assert_eq!(args.body_timeout_ms, 30_000);
        assert_eq!(args.keepalive_idle_ms, 60_000);
        assert_eq!(args.write_stall_timeout_ms, 30_000);
        assert_eq!(args.ws_handshake_timeout_ms, 10_000);
        assert_eq!(args.ws_close_timeout_ms, 5_000);
        assert_eq!(args.connections_max, 10_000);
        assert_eq!(args.connections_per_address_max, 1_000);
        assert_eq!(args.bus, BusKind::Local);
        assert_eq!(args.gateway_lease_ms, 10_000);
        assert!(!args.no_migrate);
        assert_eq!(args.rate_limit_per_s, None);
        assert!(!args.open_registration);
        assert_eq!(args.login_failures_per_user_max, 5);
        assert_eq!(args.login_failures_per_address_max, 20);
        assert_eq!(args.login_failure_window_ms, 60_000);
        assert!(args.ws_allowed_origins.is_empty());
        assert_eq!(args.metrics_listen, None);
        assert_eq!(cli.log_format, LogFormat::Text);
    }

    #[test]
    fn log_format_and_metrics_listener_parse() {
        let cli = Cli::try_parse_from([
            "parley",
            "serve",
            "--log-format",
            "json",
            "--metrics-listen",
            "127.0.0.1:9100",
        ])
        .expect("flags parse");
        assert_eq!(cli.log_format, LogFormat::Json);
        let Command::Serve(args) = cli.command else {
            panic!("expected serve");
        };
        assert_eq!(args.metrics_listen.map(|a| a.port()), Some(9100));
        assert!(Cli::try_parse_from(["parley", "serve", "--log-format", "xml"]).is_err());
    }

    #[test]
    fn allowed_origins_repeat_or_come_comma_separated() {
        let cli = Cli::try_parse_from([
            "parley",
            "serve",
            "--ws-allowed-origin",
            "https://a.example",
            "--ws-allowed-origin",
            "https://b.example,http://localhost:3000",
        ])
        .expect("flags parse");
        let Command::Serve(args) = cli.command else {
            panic!("expected serve");
        };
        assert_eq!(
            args.ws_allowed_origins,
            [
                "https://a.example",
                "https://b.example",
                "http://localhost:3000"
            ]
        );
    }

    #[test]
    fn bench_takes_several_urls_or_gateways_of_its_own() {
        let bench = |args: &[&str]| {
            Cli::try_parse_from(["parley", "bench"].iter().chain(args)).map(|cli| {
                let Command::Bench(args) = cli.command else {
                    panic!("expected bench");
                };
                args
            })
        };
        let args = bench(&[
            "--url",
            "http://a",
            "--url",
            "http://b",
            "--admin-token",
            "t",
        ])
        .expect("several URLs parse");
        assert_eq!(args.url, ["http://a", "http://b"]);
        assert_eq!(args.gateways, None);
        let args = bench(&["--gateways", "3", "--database-url", "postgres://x/db"])
            .expect("gateways need no URL and no token");
        assert_eq!(args.gateways, Some(3));
        assert_eq!(args.bus, parley_bench::GatewayBus::Nats);
        assert!(args.admin_token.is_none() || std::env::var_os("PARLEY_ADMIN_TOKEN").is_some());
        assert!(
            bench(&["--gateways", "3"]).is_err(),
            "gateways need a database"
        );
        assert!(bench(&["--gateways", "0", "--database-url", "postgres://x/db"]).is_err());
        assert!(
            bench(&[
                "--gateways",
                "2",
                "--database-url",
                "postgres://x/db",
                "--url",
                "http://a"
            ])
            .is_err(),
            "gateways of its own or --url, not both"
        );
        assert!(bench(&["--admin-token", "t"]).is_err(), "a URL or gateways");
    }

    #[test]
    fn teaching_limits_are_configurable() {
        let cli = Cli::try_parse_from([
            "parley",
            "serve",
            "--max-body-bytes",
            "6",
            "--max-request-bytes",
            "4096",
            "--bus",
            "nats",
        ])
        .expect("flags parse");
        let Command::Serve(args) = cli.command else {
            panic!("expected serve");
        };
        assert_eq!((args.max_body_bytes, args.max_request_bytes), (6, 4096));
        assert_eq!(args.bus, BusKind::Nats);
    }

    #[test]
    fn chaos_needs_schedules_seed_and_out_and_defaults_the_rest() {
        let chaos = |args: &[&str]| {
            Cli::try_parse_from(["parley", "chaos"].iter().chain(args)).map(|cli| {
                let Command::Chaos(args) = cli.command else {
                    panic!("expected chaos");
                };
                args
            })
        };
        let args = chaos(&["--schedules", "2", "--seed", "7", "--out", "d"])
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((args.schedules, args.seed), (2, 7));
        assert_eq!((args.gateways, args.schedule_s), (3, 20));
        assert_eq!(args.bus, parley_chaos::ChaosBus::Nats);
        assert!(args.database_url.is_none() && args.test_breaks.is_none());
        let args = chaos(&[
            "--schedules",
            "1",
            "--seed",
            "1",
            "--out",
            "d",
            "--bus",
            "postgres",
            "--gateways",
            "2",
            "--schedule-s",
            "5",
            "--test-breaks",
            "ack-before-commit",
            "--faults",
            "gateway_kill,pg_restart",
        ])
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(args.bus, parley_chaos::ChaosBus::Postgres);
        assert_eq!(args.faults, ["gateway_kill", "pg_restart"]);
        assert_eq!(args.test_breaks.as_deref(), Some("ack-before-commit"));
        assert!(
            chaos(&["--seed", "1", "--out", "d"]).is_err(),
            "--schedules"
        );
        assert!(
            chaos(&["--schedules", "1", "--out", "d"]).is_err(),
            "--seed"
        );
        assert!(
            chaos(&["--schedules", "1", "--seed", "1"]).is_err(),
            "--out"
        );
        assert!(chaos(&[
            "--schedules",
            "1",
            "--seed",
            "1",
            "--out",
            "d",
            "--gateways",
            "0"
        ])
        .is_err());
    }
}
