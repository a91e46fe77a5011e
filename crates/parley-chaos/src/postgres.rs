//! The lab's own PostgreSQL: `initdb` in a scratch directory, `pg_ctl` on a free port of
//! 127.0.0.1, never the machine's shared cluster. It is restarted as a fault and stopped when
//! its value is dropped (an error, Ctrl-C, the end of the run).
//!
//! PostgreSQL refuses to run as root; as root, the lab runs `initdb` and `pg_ctl` as the user
//! `postgres` (`runuser -u postgres --`) and gives that user the scratch directory.

use std::io::Write;
use std::net::Ipv4Addr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

/// Where Debian puts the PostgreSQL programs when `pg_config` is missing.
const BINDIR_GLOB_PARENT: &str = "/usr/lib/postgresql";
/// The operating system user PostgreSQL runs as when the lab runs as root.
const PG_USER: &str = "postgres";
/// The database the gateways share.
pub const DATABASE: &str = "parley_chaos";
/// How long `pg_ctl` may wait for a start, stop or restart, in seconds.
const PG_CTL_WAIT_S: &str = "60";

/// A PostgreSQL instance of the lab's own.
pub struct LabPostgres {
    bindir: PathBuf,
    data: PathBuf,
    port: u16,
    /// `listen_addresses`: 127.0.0.1, and the hub address of the lab's network when it has one.
    listen: String,
    as_postgres: bool,
    running: bool,
}

/// Whether this process runs as root: the owner of `/proc/self` is its effective user.
pub(crate) fn is_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// The directory of `initdb` and `pg_ctl`: `pg_config --bindir`, else the newest version
/// under `/usr/lib/postgresql`.
fn bindir() -> Result<PathBuf> {
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if out.status.success() && dir.join("initdb").exists() {
            return Ok(dir);
        }
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir(BINDIR_GLOB_PARENT)
        .with_context(|| format!("no pg_config and no {BINDIR_GLOB_PARENT}"))?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|bin| bin.join("initdb").exists())
        .collect();
    versions.sort();
    versions
        .pop()
        .context("no initdb found: install PostgreSQL's server programs")
}

impl LabPostgres {
    /// Creates a cluster in `dir` (which must not hold one) and starts it on `port`; with
    /// `hub` (an address and the network allowed to connect from it, see `netns.rs`) it also
    /// listens on that address and trusts that network.
    pub fn start(dir: &Path, port: u16, hub: Option<(Ipv4Addr, String)>) -> Result<LabPostgres> {
        let as_postgres = is_root();
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut pg = LabPostgres {
            bindir: bindir()?,
            data: dir.join("data"),
            port,
            listen: match &hub {
                Some((addr, _)) => format!("127.0.0.1,{addr}"),
                None => "127.0.0.1".to_owned(),
            },
            as_postgres,
            running: false,
        };
        if as_postgres {
            let status = Command::new("chown")
                .args(["-R", PG_USER])
                .arg(dir)
                .status()
                .context("running chown")?;
            if !status.success() {
                bail!("chown {PG_USER} {} failed: {status}", dir.display());
            }
        }
        let data = pg.data.to_string_lossy().into_owned();
        pg.run(
            "initdb",
            &["-D", &data, "-A", "trust", "-U", "postgres", "--no-sync"],
        )?;
        if let Some((_, cidr)) = &hub {
            let hba = pg.data.join("pg_hba.conf");
            let mut file = std::fs::OpenOptions::new()
                .append(true)
                .open(&hba)
                .with_context(|| format!("opening {}", hba.display()))?;
            writeln!(file, "host all all {cidr} trust")?;
        }
        pg.pg_ctl_start()?;
        Ok(pg)
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `postgres://postgres@127.0.0.1:<port>/<database>`.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// `pg_ctl restart -m fast`: every connection is cut, the instance is back when it returns.
    pub async fn restart(&mut self) -> Result<()> {
        let data = self.data.to_string_lossy().into_owned();
        let (log, options) = (self.log_path(), self.server_options());
        self.run_async(
            "pg_ctl",
            &[
                "restart",
                "-m",
                "fast",
                "-w",
                "-t",
                PG_CTL_WAIT_S,
                "-D",
                &data,
                "-l",
                &log,
                "-o",
                &options,
            ],
        )
        .await?;
        self.running = true;
        Ok(())
    }

    /// Starts the instance again if it is not running (`pg_ctl status`).
    pub fn ensure_running(&mut self) -> Result<bool> {
        let data = self.data.to_string_lossy().into_owned();
        if self.run("pg_ctl", &["status", "-D", &data]).is_ok() {
            return Ok(false);
        }
        self.pg_ctl_start()?;
        Ok(true)
    }

    /// The server's own options: only loopback (and the lab's hub address), its socket in the scratch directory (the
    /// machine's socket directory belongs to the shared cluster), and room for the gateways'
    /// pools.
    fn server_options(&self) -> String {
        let socket_dir = self.data.parent().unwrap_or(&self.data).display();
        format!(
            "-p {} -c listen_addresses={} -k {socket_dir} -c max_connections=200 -c fsync=off",
            self.port, self.listen
        )
    }

    /// The server's log. Every start and restart names it: without it the server would
    /// inherit `pg_ctl`'s output pipes, and waiting for `pg_ctl` would wait for the server.
    fn log_path(&self) -> String {
        let dir = self.data.parent().unwrap_or(&self.data);
        dir.join("postgres.log").to_string_lossy().into_owned()
    }

    fn pg_ctl_start(&mut self) -> Result<()> {
        let data = self.data.to_string_lossy().into_owned();
        let (log, options) = (self.log_path(), self.server_options());
        self.run(
            "pg_ctl",
            &[
                "start",
                "-w",
                "-t",
                PG_CTL_WAIT_S,
                "-D",
                &data,
                "-l",
                &log,
                "-o",
                &options,
            ],
        )?;
        self.running = true;
        Ok(())
    }

    /// The command that runs one PostgreSQL program, as `postgres` when the lab is root.
    fn command(&self, program: &str, args: &[&str]) -> Command {
        let path = self.bindir.join(program);
        let mut command = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", PG_USER, "--"]).arg(&path);
            c
        } else {
            Command::new(&path)
        };
        command.args(args).stdin(std::process::Stdio::null());
        command
    }

    /// [`LabPostgres::run`] without blocking the runtime, and cancelled with its future (a
    /// Ctrl-C during a restart).
    async fn run_async(&self, program: &str, args: &[&str]) -> Result<()> {
        let mut command = tokio::process::Command::from(self.command(program, args));
        let out = command
            .kill_on_drop(true)
            .output()
            .await
            .with_context(|| format!("running {program}"))?;
        check(program, args, &out)
    }

    /// Runs one PostgreSQL program and waits for it.
    fn run(&self, program: &str, args: &[&str]) -> Result<()> {
        let out = self
            .command(program, args)
            .output()
            .with_context(|| format!("running {program}"))?;
        check(program, args, &out)
    }
}

/// Fails unless the program succeeded, with its error output.
fn check(program: &str, args: &[&str], out: &std::process::Output) -> Result<()> {
    if !out.status.success() {
        bail!(
            "{program} {} failed ({}): {}",
            args.first().unwrap_or(&""),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

impl Drop for LabPostgres {
    /// The instance never outlives the lab: `pg_ctl stop -m immediate`.
    fn drop(&mut self) {
        if self.running {
            let data = self.data.to_string_lossy().into_owned();
            if let Err(e) = self.run("pg_ctl", &["stop", "-m", "immediate", "-D", &data]) {
                eprintln!("stopping the lab's PostgreSQL: {e:#}");
            }
        }
    }
}
