//! The lab's cluster: its own PostgreSQL (or the database it was given), its own NATS server
//! (with `--bus nats`) and N gateways of the parley executable, kept across schedules. Faults
//! act on it and [`Cluster::heal`] undoes whatever is left of them.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use rand::RngCore;
use sqlx::{Connection, PgConnection};

use crate::postgres::{LabPostgres, DATABASE};
use crate::procs::{free_addr, wait_all_ready, Gateway, GatewayCommon, LabNats};

/// How the cluster is made.
pub struct ClusterConfig {
    pub program: PathBuf,
    pub nats_server: PathBuf,
    pub gateways: usize,
    /// `nats` or `postgres`.
    pub bus: String,
    /// A database to use instead of a PostgreSQL of the lab's own.
    pub database_url: Option<String>,
    pub test_breaks: Option<String>,
    /// Scratch directory: PostgreSQL's data, the logs.
    pub dir: PathBuf,
}

/// The running cluster.
pub struct Cluster {
    // Field order is drop order: gateways first, then NATS, then PostgreSQL.
    pub gateways: Vec<Gateway>,
    pub nats: Option<LabNats>,
    pub postgres: Option<LabPostgres>,
    pub database_url: String,
    pub admin_token: String,
}

/// A random admin token for the run.
fn admin_token() -> String {
    let mut bytes = [0u8; 24];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Cluster {
    pub async fn start(config: &ClusterConfig) -> Result<Cluster> {
        let logs = config.dir.join("logs");
        std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
        let (postgres, database_url) = match &config.database_url {
            Some(url) => (None, url.clone()),
            None => {
                let port = free_addr()?.port();
                let pg = LabPostgres::start(&config.dir.join("pg"), port)
                    .context("starting the lab's PostgreSQL")?;
                create_database(&pg.url("postgres")).await?;
                let url = pg.url(DATABASE);
                (Some(pg), url)
            }
        };
        let nats = if config.bus == "nats" {
            Some(LabNats::start(&config.nats_server, &logs).await?)
        } else {
            None
        };
        let common = GatewayCommon {
            program: config.program.clone(),
            database_url: database_url.clone(),
            admin_token: admin_token(),
            bus: config.bus.clone(),
            nats_url: nats.as_ref().map(LabNats::url),
            log_dir: logs,
            test_breaks: config.test_breaks.clone(),
        };
        let mut cluster = Cluster {
            gateways: Vec::new(),
            nats,
            postgres,
            database_url,
            admin_token: common.admin_token.clone(),
        };
        for i in 0..config.gateways {
            // The first applies the schema; the others start once it has.
            let gateway = Gateway::start(&common, i, i == 0).await?;
            cluster.gateways.push(gateway);
        }
        Ok(cluster)
    }

    /// The gateways' base URLs.
    pub fn urls(&self) -> Vec<String> {
        self.gateways.iter().map(|g| g.url.clone()).collect()
    }

    /// Undoes every fault: PostgreSQL and NATS running, every gateway resumed and running
    /// (started again if it exited on its own), then waits until every gateway is ready.
    /// Answers what it had to repair beyond the faults' own healing.
    pub async fn heal(&mut self) -> Result<Vec<String>> {
        let mut repaired = Vec::new();
        if let Some(pg) = self.postgres.as_mut() {
            if pg.ensure_running()? {
                repaired.push("postgres was down".to_owned());
            }
        }
        if let Some(nats) = self.nats.as_mut() {
            if nats.ensure_running().await? {
                repaired.push("nats-server was down".to_owned());
            }
        }
        for gateway in &mut self.gateways {
            if gateway.heal().await? {
                repaired.push(format!("{} had exited", gateway.id));
            }
        }
        wait_all_ready(&self.urls()).await?;
        Ok(repaired)
    }

    /// A connection to the gateways' database, for the database faults.
    pub async fn connect(&self) -> Result<PgConnection> {
        PgConnection::connect(&self.database_url)
            .await
            .context("connecting to the gateways' database")
    }

    /// Where the gateways' logs are.
    pub fn log_dir(dir: &Path) -> PathBuf {
        dir.join("logs")
    }
}

/// Creates the gateways' database in the lab's own PostgreSQL.
async fn create_database(admin_url: &str) -> Result<()> {
    let mut conn = PgConnection::connect(admin_url)
        .await
        .context("connecting to the lab's PostgreSQL")?;
    sqlx::query(&format!("CREATE DATABASE {DATABASE}"))
        .execute(&mut conn)
        .await
        .context("creating the database")?;
    Ok(())
}
