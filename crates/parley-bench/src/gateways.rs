//! Gateways the benchmark starts itself (`--gateways N`): N `parley serve` processes of the
//! running executable on one PostgreSQL database, joined by the chosen bus, each with its own
//! gateway id (`bench-gw-<i>`) and a short lease. They are killed when the benchmark ends,
//! whatever its outcome, and when their value is dropped (an error while starting them, a
//! panic); the failover scenario kills one of them mid-run with SIGKILL.

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures::future::try_join_all;
use parley_client::Client;
use tokio::process::{Child, Command};
use tokio::sync::Mutex;

use crate::{BenchArgs, GatewayBus};

/// Most gateways one benchmark starts: each is a server process on the same machine.
pub const GATEWAYS_MAX: i64 = 16;
/// NATS server of `--bus nats` when --nats-url is absent: the machine's own.
pub const NATS_URL_DEFAULT: &str = "nats://127.0.0.1:4222";
/// Lease of a started gateway: a killed gateway's routes are reaped within two leases, so a
/// run of tens of seconds sees the route table converge.
pub const LEASE_MS_DEFAULT: u64 = 2_000;
/// How long a started gateway may take to answer `/readyz`: the first applies the schema,
/// which on a loaded 2-core machine takes seconds.
const START_WAIT_MS: u64 = 30_000;
/// Pause between two `/readyz` probes of a starting gateway.
const READY_PROBE_INTERVAL_MS: u64 = 50;
/// The lease is passed in the environment, so a server that does not know it starts anyway.
const LEASE_ENV: &str = "PARLEY_GATEWAY_LEASE_MS";
/// Log filter of a started gateway unless RUST_LOG says otherwise: its log goes to a file in
/// --out, where warnings are what one looks for after a run.
const GATEWAY_LOG_FILTER_DEFAULT: &str = "warn";

/// The id of the `i`-th started gateway.
pub fn gateway_id(i: usize) -> String {
    format!("bench-gw-{i}")
}

struct Gateway {
    id: String,
    url: String,
    /// `None` once killed.
    child: Option<Child>,
}

/// The started gateways, in the order of their URLs.
pub struct Gateways {
    urls: Vec<String>,
    ids: Vec<String>,
    running: Mutex<Vec<Gateway>>,
}

/// What every started gateway shares.
struct Common<'a> {
    program: &'a Path,
    database_url: &'a str,
    admin_token: &'a str,
    bus: GatewayBus,
    nats_url: &'a str,
    lease_ms: u64,
    out: &'a Path,
}

impl Gateways {
    /// Starts `count` gateways and waits until each answers `/readyz`: the first alone, since
    /// it applies the schema, then the others together.
    pub async fn start(args: &BenchArgs, count: usize, admin_token: &str) -> Result<Gateways> {
        if count > 1 && args.bus == GatewayBus::Local {
            bail!("{count} gateways need a bus between them: --bus postgres or --bus nats");
        }
        let Some(database_url) = args.database_url.as_deref() else {
            bail!("--gateways needs --database-url, the PostgreSQL database they share");
        };
        let program = std::env::current_exe().context("finding the parley executable")?;
        std::fs::create_dir_all(&args.out)
            .with_context(|| format!("creating {}", args.out.display()))?;
        let common = Common {
            program: &program,
            database_url,
            admin_token,
            bus: args.bus,
            nats_url: &args.nats_url,
            lease_ms: args.gateway_lease_ms,
            out: &args.out,
        };
        let first = spawn(&common, 0, true).await?;
        let mut started = vec![first];
        let rest = try_join_all((1..count).map(|i| spawn(&common, i, false))).await?;
        started.extend(rest);
        Ok(Gateways {
            urls: started.iter().map(|g| g.url.clone()).collect(),
            ids: started.iter().map(|g| g.id.clone()).collect(),
            running: Mutex::new(started),
        })
    }

    /// Base URLs, `http://127.0.0.1:<port>`.
    pub fn urls(&self) -> &[String] {
        &self.urls
    }

    /// Gateway ids, in the order of [`Gateways::urls`].
    pub fn ids(&self) -> &[String] {
        &self.ids
    }

    /// Kills gateway `i` with SIGKILL, as a crash would, and reaps it.
    pub async fn kill(&self, i: usize) -> Result<()> {
        let mut running = self.running.lock().await;
        let gateway = running
            .get_mut(i)
            .with_context(|| format!("no gateway {i}"))?;
        let Some(mut child) = gateway.child.take() else {
            bail!("gateway {} was killed already", gateway.id);
        };
        child
            .kill()
            .await
            .with_context(|| format!("killing gateway {}", gateway.id))
    }

    /// Kills every gateway still running.
    pub async fn stop(&self) {
        let mut running = self.running.lock().await;
        for gateway in running.iter_mut() {
            if let Some(mut child) = gateway.child.take() {
                if let Err(e) = child.kill().await {
                    tracing::warn!(gateway = %gateway.id, error = %e, "a gateway did not stop");
                }
            }
        }
    }
}

/// A port of 127.0.0.1 that was free a moment ago.
fn free_addr() -> Result<SocketAddr> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

/// Starts gateway `i` and waits for its `/readyz`.
async fn spawn(c: &Common<'_>, i: usize, migrate: bool) -> Result<Gateway> {
    let id = gateway_id(i);
    let addr = free_addr().context("finding a free port")?;
    let url = format!("http://{addr}");
    let log_path = c.out.join(format!("{id}.log"));
    let log = std::fs::File::create(&log_path)
        .with_context(|| format!("creating {}", log_path.display()))?;
    let mut command = Command::new(c.program);
    command
        .arg("serve")
        .args(["--listen", &addr.to_string()])
        .args(["--gateway-id", &id])
        .args(["--bus", c.bus.as_arg()])
        // Secrets go in the environment, where other users of the machine cannot read them.
        .env("PARLEY_DATABASE_URL", c.database_url)
        .env("PARLEY_ADMIN_TOKEN", c.admin_token)
        .env("PARLEY_NATS_URL", c.nats_url)
        .env(LEASE_ENV, c.lease_ms.to_string())
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .kill_on_drop(true);
    if std::env::var_os("RUST_LOG").is_none() {
        command.env("RUST_LOG", GATEWAY_LOG_FILTER_DEFAULT);
    }
    if !migrate {
        command.arg("--no-migrate");
    }
    let mut child = command
        .spawn()
        .with_context(|| format!("starting gateway {id}"))?;
    wait_ready(&mut child, &url)
        .await
        .with_context(|| format!("gateway {id} at {url} (log: {})", log_path.display()))?;
    Ok(Gateway {
        id,
        url,
        child: Some(child),
    })
}

/// Waits until the gateway at `url` answers `/readyz`, failing if it exits first or
/// [`START_WAIT_MS`] passes.
async fn wait_ready(child: &mut Child, url: &str) -> Result<()> {
    let probe = Client::new(url, "none")?;
    let deadline = Instant::now() + Duration::from_millis(START_WAIT_MS);
    loop {
        if let Some(status) = child.try_wait()? {
            bail!("exited before it was ready: {status}");
        }
        if probe.readyz().await.is_ok() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("not ready within {START_WAIT_MS} ms");
        }
        tokio::time::sleep(Duration::from_millis(READY_PROBE_INTERVAL_MS)).await;
    }
}
