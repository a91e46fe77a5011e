//! A Parley server in a process of its own: `parley serve` on a fresh store of either kind at a
//! free port of 127.0.0.1, which a test kills with SIGKILL and starts again on the same data and
//! port, as an operator's supervisor would. [`TestServer`](crate::TestServer) runs in the test's
//! own process and cannot die that way. [`ServerProcess::start_gateways`] runs several such
//! processes as gateways of one PostgreSQL database, so a test can kill one while the others
//! serve.

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
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

/// Where the process keeps its data; kept as long as the process value, across restarts.
enum Data {
    /// The embedded store in a temporary directory, removed when the value is dropped.
    Dir(TempDir),
    Postgres(TestDb),
}

/// `parley serve` (or another executable taking its flags) in a child process.
pub struct ServerProcess {
    program: PathBuf,
    data: Data,
    addr: SocketAddr,
    base_url: String,
    admin_token: String,
    admin: AdminClient,
    /// The gateway id of a process of [`ServerProcess::start_gateways`], which runs with
    /// `--bus postgres`; `None` for a lone server on the in-process bus.
    gateway_id: Option<String>,
    child: Option<Child>,
}

impl ServerProcess {
    /// Starts `program serve` on a fresh store of `kind` with a random admin token, and waits
    /// until it answers.
    ///
    /// # Panics
    /// When the store cannot be created or the process does not start.
    pub async fn start_on(program: impl Into<PathBuf>, kind: StoreKind) -> ServerProcess {
        let data = match kind {
            StoreKind::Postgres => Data::Postgres(TestDb::create().await),
            StoreKind::Sqlite => Data::Dir(
                tempfile::tempdir()
                    .unwrap_or_else(|e| panic!("cannot create a temporary directory: {e}")),
            ),
        };
        Self::start_with(program.into(), data, random_admin_token(), None).await
    }

    /// Starts `count` processes of `program serve` on one fresh PostgreSQL database, each a
    /// gateway (`--bus postgres`, gateway ids `gw-0`, `gw-1`, …) with its own port, one after
    /// the other (each applies the schema before it answers). They share one admin token.
    ///
    /// # Panics
    /// When PostgreSQL is unreachable or a process does not start.
    pub async fn start_gateways(program: impl Into<PathBuf>, count: usize) -> Vec<ServerProcess> {
        let program = program.into();
        let db = TestDb::create().await;
        let admin_token = random_admin_token();
        let mut servers = Vec::with_capacity(count);
        for node in 0..count {
            let data = Data::Postgres(db.clone());
            let gateway_id = Some(format!("gw-{node}"));
            servers.push(
                Self::start_with(program.clone(), data, admin_token.clone(), gateway_id).await,
            );
        }
        servers
    }

    async fn start_with(
        program: PathBuf,
        data: Data,
        admin_token: String,
        gateway_id: Option<String>,
    ) -> ServerProcess {
        let addr = free_addr().unwrap_or_else(|e| panic!("no free port on 127.0.0.1: {e}"));
        let base_url = format!("http://{addr}");
        let admin = AdminClient::new(&base_url, &admin_token)
            .unwrap_or_else(|e| panic!("cannot build an admin client for {base_url}: {e}"));
        let mut server = ServerProcess {
            program,
            data,
            addr,
            base_url,
            admin_token,
            admin,
            gateway_id,
            child: None,
        };
        server.start().await;
        server
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
            Data::Postgres(db) => Some(db),
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
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        match &self.data {
            Data::Dir(dir) => command.arg("--data-dir").arg(dir.path()),
            Data::Postgres(db) => command.arg("--database-url").arg(db.url()),
        };
        if let Some(gateway_id) = &self.gateway_id {
            command
                .arg("--bus")
                .arg("postgres")
                .arg("--gateway-id")
                .arg(gateway_id);
        }
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
