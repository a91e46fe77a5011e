//! Child processes of the lab: the NATS server and the gateways. Each is started in a process
//! group of its own (so a Ctrl-C at the terminal reaches the lab, which then stops them in
//! order) and killed when its value is dropped.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use parley_client::{Client, ClientOptions, RetryPolicy};
use tokio::process::{Child, Command};

use crate::netns::GatewayNet;
use crate::push::{PUSH_COALESCE_MS, PUSH_LEASE_MS};

/// How long a started gateway may take to answer `/readyz`: the first applies the schema,
/// which on a loaded 2-core machine takes seconds.
pub const GATEWAY_START_WAIT_MS: u64 = 30_000;
/// How long a started NATS server may take to accept connections.
const NATS_START_WAIT_MS: u64 = 10_000;
/// Pause between two probes of a starting process.
const PROBE_INTERVAL_MS: u64 = 50;
/// Log filter of a gateway unless RUST_LOG says otherwise: its log goes to a file, where
/// warnings are what one looks for after a run.
const GATEWAY_LOG_FILTER_DEFAULT: &str = "warn";
/// The lease of the lab's gateways: a killed gateway's routes are reaped within seconds.
pub const GATEWAY_LEASE_MS: u64 = 2_000;
/// Longest wait for one readiness probe: a paused gateway must not hold the probe for the
/// client's default 10 s.
const PROBE_TIMEOUT_MS: u64 = 1_000;
/// The NATS server of Debian's package.
pub const NATS_SERVER_DEFAULT: &str = "/usr/sbin/nats-server";

/// A port of 127.0.0.1 that was free a moment ago.
pub fn free_addr() -> Result<SocketAddr> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

/// Sends `signal` (`KILL`, `STOP`, `CONT`) to `pid` with `kill(1)`.
fn signal(pid: u32, signal: &str) -> Result<()> {
    let status = std::process::Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .context("running kill")?;
    if !status.success() {
        bail!("kill -{signal} {pid} failed: {status}");
    }
    Ok(())
}

/// A log file in `dir`, appended to across restarts.
fn log_file(dir: &Path, name: &str) -> Result<(std::fs::File, std::fs::File)> {
    let path = dir.join(name);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    Ok((file.try_clone()?, file))
}

/// The lab's own NATS server on a fixed port, restarted on the same port as a fault.
pub struct LabNats {
    program: PathBuf,
    addr: SocketAddr,
    dir: PathBuf,
    child: Option<Child>,
}

impl LabNats {
    /// Starts the server on `ip` (127.0.0.1, or the hub address of the lab's network).
    pub async fn start(program: &Path, dir: &Path, ip: IpAddr) -> Result<LabNats> {
        let mut nats = LabNats {
            program: program.to_owned(),
            addr: SocketAddr::new(ip, free_addr()?.port()),
            dir: dir.to_owned(),
            child: None,
        };
        nats.spawn().await?;
        Ok(nats)
    }

    /// `nats://<ip>:<port>`.
    pub fn url(&self) -> String {
        format!("nats://{}", self.addr)
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Kills the server with SIGKILL and reaps it.
    pub async fn kill(&mut self) -> Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill().await.context("killing nats-server")?;
        }
        Ok(())
    }

    /// Starts the server again unless it runs; answers whether it had to.
    pub async fn ensure_running(&mut self) -> Result<bool> {
        if let Some(child) = self.child.as_mut() {
            if child.try_wait()?.is_none() {
                return Ok(false);
            }
            self.child = None;
        }
        self.spawn().await?;
        Ok(true)
    }

    async fn spawn(&mut self) -> Result<()> {
        let (out, err) = log_file(&self.dir, "nats-server.log")?;
        let child = Command::new(&self.program)
            .args(["-a", &self.addr.ip().to_string()])
            .args(["-p", &self.addr.port().to_string()])
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", self.program.display()))?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_millis(NATS_START_WAIT_MS);
        loop {
            if tokio::net::TcpStream::connect(self.addr).await.is_ok() {
                return Ok(());
            }
            if let Some(child) = self.child.as_mut() {
                if let Some(status) = child.try_wait()? {
                    self.child = None;
                    bail!(
                        "nats-server exited at start: {status} (is port {} taken?)",
                        self.addr
                    );
                }
            }
            if Instant::now() >= deadline {
                bail!(
                    "nats-server did not listen on {} within {NATS_START_WAIT_MS} ms",
                    self.addr
                );
            }
            tokio::time::sleep(Duration::from_millis(PROBE_INTERVAL_MS)).await;
        }
    }
}

/// What every gateway of the lab shares.
#[derive(Clone)]
pub struct GatewayCommon {
    pub program: PathBuf,
    pub database_url: String,
    pub admin_token: String,
    /// `nats` or `postgres`.
    pub bus: String,
    pub nats_url: Option<String>,
    pub log_dir: PathBuf,
    /// `PARLEY_TEST_BREAKS` of the gateways, when given.
    pub test_breaks: Option<String>,
}

/// One gateway process on a fixed port, killed, paused and restarted as faults.
pub struct Gateway {
    pub index: usize,
    pub id: String,
    pub url: String,
    addr: SocketAddr,
    common: GatewayCommon,
    /// The network namespace it runs in, when the lab has its own network.
    netns: Option<PathBuf>,
    child: Option<Child>,
    paused: bool,
}

impl Gateway {
    /// Starts gateway `index` (`migrate`: the first applies the schema) and waits until ready;
    /// with `net` in that network namespace, listening on its address.
    pub async fn start(
        common: &GatewayCommon,
        index: usize,
        migrate: bool,
        net: Option<&GatewayNet>,
    ) -> Result<Gateway> {
        let port = free_addr()?.port();
        let addr = match net {
            Some(net) => SocketAddr::new(IpAddr::V4(net.addr), port),
            None => SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port),
        };
        let mut gateway = Gateway {
            index,
            id: format!("chaos-gw-{index}"),
            url: format!("http://{addr}"),
            addr,
            common: common.clone(),
            netns: net.map(GatewayNet::path),
            child: None,
            paused: false,
        };
        gateway.spawn(migrate).await?;
        Ok(gateway)
    }

    async fn spawn(&mut self, migrate: bool) -> Result<()> {
        let c = &self.common;
        let (out, err) = log_file(&c.log_dir, &format!("{}.log", self.id))?;
        // nsenter enters the namespace and execs the gateway: the child's pid is the gateway's
        // own, so kills and pauses reach it.
        let mut command = match &self.netns {
            Some(ns) => {
                let mut command = Command::new("nsenter");
                command
                    .arg(format!("--net={}", ns.display()))
                    .arg("--")
                    .arg(&c.program);
                command
            }
            None => Command::new(&c.program),
        };
        command
            .arg("serve")
            .args(["--listen", &self.addr.to_string()])
            .args(["--gateway-id", &self.id])
            .args(["--bus", &c.bus])
            .args(["--gateway-lease-ms", &GATEWAY_LEASE_MS.to_string()])
            // The run's push service listens on http://127.0.0.1 (`push.rs`).
            .arg("--push-allow-http")
            .args(["--push-coalesce-ms", &PUSH_COALESCE_MS.to_string()])
            .args(["--push-lease-ms", &PUSH_LEASE_MS.to_string()])
            // Secrets go in the environment, where other users of the machine cannot read them.
            .env("PARLEY_DATABASE_URL", &c.database_url)
            .env("PARLEY_ADMIN_TOKEN", &c.admin_token)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .kill_on_drop(true);
        if let Some(url) = &c.nats_url {
            command.args(["--nats-url", url]);
        }
        if let Some(breaks) = &c.test_breaks {
            command.env("PARLEY_TEST_BREAKS", breaks);
        }
        if std::env::var_os("RUST_LOG").is_none() {
            command.env("RUST_LOG", GATEWAY_LOG_FILTER_DEFAULT);
        }
        if !migrate {
            command.arg("--no-migrate");
        }
        let mut child = command
            .spawn()
            .with_context(|| format!("starting gateway {}", self.id))?;
        let ready = wait_ready(&mut child, &self.url).await;
        self.child = Some(child);
        self.paused = false;
        ready.with_context(|| {
            format!(
                "gateway {} at {} (log: {})",
                self.id,
                self.url,
                c.log_dir.join(format!("{}.log", self.id)).display()
            )
        })
    }

    /// SIGKILL, as a crash would, and reaps it.
    pub async fn kill(&mut self) -> Result<()> {
        if let Some(mut child) = self.child.take() {
            child
                .kill()
                .await
                .with_context(|| format!("killing {}", self.id))?;
        }
        self.paused = false;
        Ok(())
    }

    /// SIGSTOP: the process holds its sockets and answers nothing.
    pub fn pause(&mut self) -> Result<()> {
        let pid = self
            .pid()
            .context("pausing a gateway that is not running")?;
        signal(pid, "STOP")?;
        self.paused = true;
        Ok(())
    }

    /// SIGCONT after a pause.
    pub fn resume(&mut self) -> Result<()> {
        if let (true, Some(pid)) = (self.paused, self.pid()) {
            signal(pid, "CONT")?;
        }
        self.paused = false;
        Ok(())
    }

    /// Starts it again on the same port after a kill, and waits until ready.
    pub async fn restart(&mut self) -> Result<()> {
        self.kill().await?;
        self.spawn(false).await
    }

    /// Heals the gateway: resumed if paused, started again if it is not running (killed, or
    /// exited on its own: answered `true`).
    pub async fn heal(&mut self) -> Result<bool> {
        self.resume()?;
        let exited = match self.child.as_mut() {
            Some(child) => child.try_wait()?.is_some(),
            None => false,
        };
        if exited || self.child.is_none() {
            self.child = None;
            self.spawn(false).await?;
        }
        Ok(exited)
    }

    fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(Child::id)
    }
}

/// A client for readiness probes, with a short timeout.
fn probe(url: &str) -> Result<Client> {
    let options = ClientOptions {
        request_timeout_ms: PROBE_TIMEOUT_MS,
        connect_timeout_ms: PROBE_TIMEOUT_MS,
        retry: RetryPolicy::none(),
    };
    Ok(Client::with_options(url, "none", options)?)
}

/// Waits until the gateway at `url` answers `/readyz`, failing if it exits first or
/// [`GATEWAY_START_WAIT_MS`] passes.
pub async fn wait_ready(child: &mut Child, url: &str) -> Result<()> {
    let probe = probe(url)?;
    let deadline = Instant::now() + Duration::from_millis(GATEWAY_START_WAIT_MS);
    loop {
        if let Some(status) = child.try_wait()? {
            bail!("exited before it was ready: {status}");
        }
        if probe.readyz().await.is_ok() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("not ready within {GATEWAY_START_WAIT_MS} ms");
        }
        tokio::time::sleep(Duration::from_millis(PROBE_INTERVAL_MS)).await;
    }
}

/// Waits until every URL answers `/readyz`, within [`GATEWAY_START_WAIT_MS`].
pub async fn wait_all_ready(urls: &[String]) -> Result<()> {
    let deadline = Instant::now() + Duration::from_millis(GATEWAY_START_WAIT_MS);
    for url in urls {
        let probe = probe(url)?;
        loop {
            if probe.readyz().await.is_ok() {
                break;
            }
            if Instant::now() >= deadline {
                bail!("{url} not ready within {GATEWAY_START_WAIT_MS} ms after healing");
            }
            tokio::time::sleep(Duration::from_millis(PROBE_INTERVAL_MS)).await;
        }
    }
    Ok(())
}
