//! The lab's cluster: its own PostgreSQL (or the database it was given), its own NATS server
//! (with `--bus nats`), the run's push service (`push.rs`) and N gateways of the parley
//! executable, kept across schedules. Faults act on it and [`Cluster::heal`] undoes whatever
//! is left of them.

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use rand::RngCore;
use sqlx::{Connection, PgConnection};

use crate::netns::LabNetwork;
use crate::postgres::{LabPostgres, DATABASE};
use crate::procs::{free_addr, wait_all_ready, Gateway, GatewayCommon, LabNats};
use crate::push::PushLab;

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
    /// Whether to run the gateways in network namespaces of the lab's own (`netns.rs`), so
    /// the `partition` fault can cut them off; off with `--no-netns`.
    pub netns: bool,
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
    /// The push service the gateways send offline notifications to; dropped after the
    /// gateways, before their namespaces.
    pub push: PushLab,
    /// The namespaces the gateways run in; dropped last, after every process in them.
    pub network: Option<LabNetwork>,
    /// Why the lab has no network of its own (the `partition` fault is then skipped).
    pub network_unavailable: Option<String>,
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
        let unavailable = if !config.netns {
            Some("the lab's network is off (--no-netns)".to_owned())
        } else if config.database_url.is_some() {
            Some("the database was given (--database-url): the lab partitions only from its own PostgreSQL".to_owned())
        } else {
            LabNetwork::unavailable()
        };
        let (network, network_unavailable) = match unavailable {
            Some(reason) => (None, Some(reason)),
            None => match LabNetwork::create(config.gateways) {
                Ok(net) => (Some(net), None),
                Err(e) => (
                    None,
                    Some(format!("making network namespaces failed: {e:#}")),
                ),
            },
        };
        if let Some(reason) = &network_unavailable {
            eprintln!("parley chaos: gateways on loopback, no partition faults: {reason}");
        }
        let hub = network.as_ref().map(|n| (n.hub_addr(), n.cidr()));
        let (postgres, database_url, gateway_database_url) = match &config.database_url {
            Some(url) => (None, url.clone(), url.clone()),
            None => {
                let port = free_addr()?.port();
                let pg = LabPostgres::start(&config.dir.join("pg"), port, hub.clone())
                    .context("starting the lab's PostgreSQL")?;
                create_database(&pg.url("postgres")).await?;
                let url = pg.url(DATABASE);
                // The gateways in namespaces reach PostgreSQL at the hub address.
                let gateway_url = match &hub {
                    Some((addr, _)) => url.replace("@127.0.0.1:", &format!("@{addr}:")),
                    None => url.clone(),
                };
                (Some(pg), url, gateway_url)
            }
        };
        let namespaces: Vec<PathBuf> = network
            .as_ref()
            .map(|n| n.gateways.iter().map(|g| g.path()).collect())
            .unwrap_or_default();
        let push = PushLab::start(&namespaces).await?;
        let nats_ip = match &hub {
            Some((addr, _)) => IpAddr::V4(*addr),
            None => IpAddr::V4(Ipv4Addr::LOCALHOST),
        };
        let nats = if config.bus == "nats" {
            Some(LabNats::start(&config.nats_server, &logs, nats_ip).await?)
        } else {
            None
        };
        let common = GatewayCommon {
            program: config.program.clone(),
            database_url: gateway_database_url,
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
            push,
            network,
            network_unavailable,
        };
        for i in 0..config.gateways {
            let net = cluster.network.as_ref().map(|n| n.gateways[i].clone());
            // The first applies the schema; the others start once it has.
            let gateway = Gateway::start(&common, i, i == 0, net.as_ref()).await?;
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
        if self.push.up() {
            repaired.push("the push service was down".to_owned());
        }
        if let Some(net) = self.network.as_mut() {
            let healed = net.heal_all()?;
            if healed > 0 {
                repaired.push(format!("{healed} partitions were left"));
            }
        }
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
