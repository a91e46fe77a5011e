//! A Parley server in a process of its own: `parley serve` on a fresh store of either kind at a
//! free port of 127.0.0.1, which a test kills with SIGKILL and starts again on the same data and
//! port, as an operator's supervisor would. [`TestServer`](crate::TestServer) runs in the test's
//! own process and cannot die that way.
//!
//! [`ServerProcess::start_gateways_with`] starts several such processes as gateways on one
//! PostgreSQL database, joined by a bus between processes (PostgreSQL or NATS), each of which
//! a test can kill with SIGKILL or stop with SIGTERM ([`ServerProcess::start_gateways`]: on
//! PostgreSQL's bus with the default lease).

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parley_client::{AdminClient, Client};
use tempfile::TempDir;

use crate::db::TestDb;
use crate::server::{random_admin_token, StoreKind, TEST_DEVICE_ID};

/// How long a fresh process may take to answer `/healthz`: it opens the store and applies the
/// schema first, which on a loaded 2-core machine takes a few seconds.
pub const PROCESS_START_WAIT_MS: u64 = 20_000;
/// Pause between two `/healthz` probes of a starting process.
const READY_PROBE_INTERVAL_MS: u64 = 50;

/// A port of 127.0.0.1 that was free a moment ago.
pub fn free_addr() -> io::Result<SocketAddr> {
    TcpListener::bind("127.0.0.1:0")?.local_addr()
}

/// Waits until the server at `base_url` answers `/healthz`, failing if `child` exits first or
/// `PROCESS_START_WAIT_MS` passes.
pub async fn wait_ready(child: &mut Child, base_url: &str) -> io::Result<()> {
    let probe = Client::new(base_url, "none").map_err(io::Error::other)?;
    let deadline = Instant::now() + Duration::from_millis(PROCESS_START_WAIT_MS);
    loop {
        if let Some(status) = child.try_wait()? {
            return Err(io::Error::other(format!(
                "the server exited before it was ready: {status}"
            )));
        }
        if probe.healthz().await.is_ok() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(io::Error::other(format!(
                "the server did not answer /healthz within {PROCESS_START_WAIT_MS} ms"
            )));
        }
        tokio::time::sleep(Duration::from_millis(READY_PROBE_INTERVAL_MS)).await;
    }
}

/// Pause between two checks of whether a signalled process exited.
const EXIT_PROBE_INTERVAL_MS: u64 = 20;

/// Where the process keeps its data; kept as long as the process value, across restarts.
enum Data {
    /// The embedded store in a temporary directory, removed when the value is dropped.
    Dir(TempDir),
    /// A database of its own, or one that gateways share (dropped with the last of them).
    Postgres(Arc<TestDb>),
}

/// The bus that joins gateway processes on one database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessBus {
    /// `--bus postgres`: notifications on the shared database.
    Postgres,
    /// `--bus nats --nats-url <url>`.
    Nats(String),
}

/// How [`ServerProcess::start_gateways_with`] starts each gateway.
#[derive(Debug, Clone)]
pub struct GatewayOptions {
    pub bus: ProcessBus,
    /// `--gateway-lease-ms`; the server's default when `None`.
    pub lease_ms: Option<u64>,
    /// Gateway `i` is named `<prefix>-<i>`. Give each test its own prefix: on a shared NATS
    /// server, gateways of parallel tests must not share ids.
    pub gateway_id_prefix: String,
    /// Further `serve` flags, the same for every gateway.
    pub extra_args: Vec<String>,
    /// Environment variables of every gateway beside the test's own, e.g. `PARLEY_TEST_BREAKS`.
    pub env: Vec<(String, String)>,
}

impl GatewayOptions {
    /// Gateways on `bus`, named `<gateway_id_prefix>-<i>`, with the default lease.
    pub fn new(bus: ProcessBus, gateway_id_prefix: impl Into<String>) -> Self {
        Self {
            bus,
            lease_ms: None,
            gateway_id_prefix: gateway_id_prefix.into(),
            extra_args: Vec::new(),
            env: Vec::new(),
        }
    }

    /// Sets `name` to `value` in every gateway's environment.
    pub fn with_env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((name.into(), value.into()));
        self
    }

    pub fn with_lease_ms(mut self, lease_ms: u64) -> Self {
        self.lease_ms = Some(lease_ms);
        self
    }

    /// The `serve` flags of gateway `index`.
    fn args(&self, index: usize) -> Vec<String> {
        let mut args = vec![
            "--gateway-id".to_owned(),
            format!("{}-{index}", self.gateway_id_prefix),
        ];
        match &self.bus {
            ProcessBus::Postgres => args.extend(["--bus".into(), "postgres".into()]),
            ProcessBus::Nats(url) => {
                args.extend([
                    "--bus".into(),
                    "nats".into(),
                    "--nats-url".into(),
                    url.clone(),
                ]);
            }
        }
        if let Some(ms) = self.lease_ms {
            args.extend(["--gateway-lease-ms".into(), ms.to_string()]);
        }
        args.extend(self.extra_args.iter().cloned());
        args
    }
}

/// `parley serve` (or another executable taking its flags) in a child process.
pub struct ServerProcess {
    program: PathBuf,
    data: Data,
    addr: SocketAddr,
    base_url: String,
    admin_token: String,
    admin: AdminClient,
    /// `serve` flags besides the listener, the admin token and the store.
    args: Vec<String>,
    /// Environment variables beside the test's own.
    env: Vec<(String, String)>,
    child: Option<Child>,
    /// The data directory of a process on PostgreSQL (its media), removed with the value.
    scratch: TempDir,
}

impl ServerProcess {
    /// Starts `program serve` on a fresh store of `kind` with a random admin token, and waits
    /// until it answers.
    ///
    /// # Panics
    /// When the store cannot be created or the process does not start.
    pub async fn start_on(program: impl Into<PathBuf>, kind: StoreKind) -> ServerProcess {
        let data = match kind {
            StoreKind::Postgres => Data::Postgres(Arc::new(TestDb::create().await)),
            StoreKind::Sqlite => Data::Dir(
                tempfile::tempdir()
                    .unwrap_or_else(|e| panic!("cannot create a temporary directory: {e}")),
            ),
        };
        let mut server = Self::unstarted(program.into(), data, random_admin_token(), Vec::new());
        server.start().await;
        server
    }

    /// Starts `count` processes of `program serve` on one fresh PostgreSQL database, each a
    /// gateway (`--bus postgres`, gateway ids `gw-0`, `gw-1`, …, the default lease) with its
    /// own port, one after the other. They share one admin token.
    ///
    /// # Panics
    /// When PostgreSQL is unreachable or a process does not start.
    pub async fn start_gateways(program: impl Into<PathBuf>, count: usize) -> Vec<ServerProcess> {
        let options = GatewayOptions::new(ProcessBus::Postgres, "gw");
        Self::start_gateways_with(program, count, &options).await
    }

    /// Starts `count` gateways of `program serve` on one fresh PostgreSQL database, with one
    /// admin token, as `options` says (bus, lease, gateway ids), and waits until each answers.
    /// The first applies the schema; the others start with `--no-migrate` once it has. The
    /// database is dropped with the last of them.
    ///
    /// # Panics
    /// When the database cannot be created or a process does not start.
    pub async fn start_gateways_with(
        program: impl Into<PathBuf>,
        count: usize,
        options: &GatewayOptions,
    ) -> Vec<ServerProcess> {
        let program = program.into();
        let db = Arc::new(TestDb::create().await);
        let admin_token = random_admin_token();
        let mut gateways = Vec::with_capacity(count);
        for index in 0..count {
            let mut args = options.args(index);
            if index > 0 {
                args.push("--no-migrate".into());
            }
            let data = Data::Postgres(db.clone());
            let mut gateway = Self::unstarted(program.clone(), data, admin_token.clone(), args);
            gateway.env = options.env.clone();
            gateway.start().await;
            gateways.push(gateway);
        }
        gateways
    }

    fn unstarted(program: PathBuf, data: Data, admin_token: String, args: Vec<String>) -> Self {
        let addr = free_addr().unwrap_or_else(|e| panic!("no free port on 127.0.0.1: {e}"));
        let base_url = format!("http://{addr}");
        let admin = AdminClient::new(&base_url, &admin_token)
            .unwrap_or_else(|e| panic!("cannot build an admin client for {base_url}: {e}"));
        ServerProcess {
            program,
            data,
            addr,
            base_url,
            admin_token,
            admin,
            args,
            env: Vec::new(),
            child: None,
            scratch: tempfile::tempdir()
                .unwrap_or_else(|e| panic!("cannot make a scratch directory: {e}")),
        }
    }

    /// `http://127.0.0.1:<port>`; the same across restarts.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// A client of the admin endpoints.
    pub fn admin(&self) -> AdminClient {
        self.admin.clone()
    }

    /// The PostgreSQL database of a process on PostgreSQL; `None` on the embedded store.
    pub fn db(&self) -> Option<&TestDb> {
        match &self.data {
            Data::Postgres(db) => Some(&**db),
            Data::Dir(_) => None,
        }
    }

    /// The data directory of a process on the embedded store; `None` on PostgreSQL.
    pub fn data_dir(&self) -> Option<&Path> {
        match &self.data {
            Data::Dir(dir) => Some(dir.path()),
            Data::Postgres(_) => None,
        }
    }

    /// The process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Creates `user_id` and issues a token for its device `d1`.
    ///
    /// # Panics
    /// When the admin API refuses.
    pub async fn user_with_token(&self, user_id: &str) -> String {
        if let Err(e) = self.admin.create_user(user_id, None).await {
            panic!("admin could not create user {user_id}: {e}");
        }
        match self.admin.create_device(user_id, TEST_DEVICE_ID).await {
            Ok(token) => token,
            Err(e) => panic!("admin could not issue a token for {user_id}: {e}"),
        }
    }

    /// Creates `user_id` with its device `d1` and returns a client logged in as that device.
    pub async fn user_with_device(&self, user_id: &str) -> Client {
        let token = self.user_with_token(user_id).await;
        self.admin.device_client(&token)
    }

    /// Kills the process with SIGKILL, as a crash or `kill -9` would, and reaps it.
    ///
    /// # Panics
    /// When the process cannot be signalled.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child
                .kill()
                .unwrap_or_else(|e| panic!("cannot kill the server process: {e}"));
            // Reaping only collects the exit status; a failure leaves a zombie, nothing more.
            let _ = child.wait();
        }
    }

    /// Sends SIGTERM, the signal of an orderly stop (a drain), and returns at once; see
    /// [`ServerProcess::wait_exit`].
    ///
    /// # Panics
    /// When the process is not running or cannot be signalled.
    pub fn terminate(&self) {
        let pid = self
            .pid()
            .expect("terminate of a server that is not running");
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(pid.to_string())
            .status()
            .unwrap_or_else(|e| panic!("cannot run kill: {e}"));
        assert!(status.success(), "kill -TERM {pid} failed: {status}");
    }

    /// Waits at most `wait` for the process to exit and reaps it; `None` when it still runs
    /// (it is left running).
    ///
    /// # Panics
    /// When the process is not running or its status cannot be read.
    pub async fn wait_exit(&mut self, wait: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + wait;
        loop {
            let child = self
                .child
                .as_mut()
                .expect("wait_exit of a server that is not running");
            let exited = child
                .try_wait()
                .unwrap_or_else(|e| panic!("cannot read the server's status: {e}"));
            if let Some(status) = exited {
                self.child = None;
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(EXIT_PROBE_INTERVAL_MS)).await;
        }
    }

    /// Starts the process again on the same data and port, and waits until it answers.
    ///
    /// # Panics
    /// When it is still running or does not start.
    pub async fn restart(&mut self) {
        assert!(self.child.is_none(), "restart of a server that still runs");
        self.start().await;
    }

    async fn start(&mut self) {
        let mut command = Command::new(&self.program);
        command
            .arg("serve")
            .arg("--listen")
            .arg(self.addr.to_string())
            .arg("--admin-token")
            .arg(&self.admin_token)
            .args(&self.args)
            .env("RUST_LOG", "warn")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        match &self.data {
            Data::Dir(dir) => command.arg("--data-dir").arg(dir.path()),
            Data::Postgres(db) => command
                .arg("--database-url")
                .arg(db.url())
                .arg("--data-dir")
                .arg(self.scratch.path()),
        };
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.program.display()));
        let ready = wait_ready(&mut child, &self.base_url).await;
        self.child = Some(child);
        if let Err(e) = ready {
            self.kill();
            panic!("{} serve on {}: {e}", self.program.display(), self.addr);
        }
    }
}

impl Drop for ServerProcess {
    /// A test that ends, or fails, leaves no server behind.
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
