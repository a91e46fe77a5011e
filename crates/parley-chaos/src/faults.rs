//! Injecting the faults of one schedule, one after the other, each healed at its end.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::Serialize;
use sqlx::Connection;

use crate::cluster::Cluster;
use crate::load::Load;
use crate::schedule::{Fault, FaultKind, PartitionFrom, Schedule};

/// Pause between two rounds of `pg_terminate_backend`: gateways reconnect within it, so
/// connections die in the middle of their work, between a send's statements and its COMMIT.
const TERMINATE_INTERVAL_MS: u64 = 20;
/// Longest storm of terminations: long enough to cut many sends, short enough that the
/// gateways' leases (2 s) survive it.
const TERMINATE_STORM_MS_MAX: u64 = 1_500;

/// What became of one fault of the schedule.
#[derive(Debug, Clone, Serialize)]
pub struct FaultOutcome {
    pub kind: FaultKind,
    /// When it was planned and when it started and ended, in ms after the load started.
    pub at_ms: u64,
    pub started_ms: u64,
    pub ended_ms: u64,
    /// `injected`, `skipped` (not possible in this cluster) or `failed` (the lab could not
    /// inject or heal it).
    pub status: &'static str,
    pub detail: String,
}

/// Runs every fault of `schedule` at its time, measured from `started`.
pub async fn run_faults(
    schedule: &Schedule,
    cluster: &mut Cluster,
    load: &Load,
    started: Instant,
) -> Vec<FaultOutcome> {
    let mut outcomes = Vec::new();
    for fault in &schedule.faults {
        tokio::time::sleep_until((started + Duration::from_millis(fault.at_ms)).into()).await;
        let started_ms = started.elapsed().as_millis() as u64;
        tracing::info!(kind = fault.kind.as_str(), started_ms, "fault");
        let (status, detail) = match inject(fault, cluster, load).await {
            Ok(Some(detail)) => ("injected", detail),
            Ok(None) => ("skipped", skip_reason(fault.kind, cluster)),
            Err(e) => ("failed", format!("{e:#}")),
        };
        if status == "failed" {
            tracing::warn!(kind = fault.kind.as_str(), %detail, "a fault failed");
        }
        outcomes.push(FaultOutcome {
            kind: fault.kind,
            at_ms: fault.at_ms,
            started_ms,
            ended_ms: started.elapsed().as_millis() as u64,
            status,
            detail,
        });
    }
    outcomes
}

fn skip_reason(kind: FaultKind, cluster: &Cluster) -> String {
    match kind {
        FaultKind::PgRestart => {
            "the database was given (--database-url): the lab restarts only its own PostgreSQL"
                .to_owned()
        }
        FaultKind::NatsRestart => {
            "the bus is PostgreSQL's: there is no NATS server to restart".to_owned()
        }
        FaultKind::Partition => cluster
            .network_unavailable
            .clone()
            .unwrap_or_else(|| "no network namespaces".to_owned()),
        _ => "not possible in this cluster".to_owned(),
    }
}

/// Injects one fault and heals it; `None` when it is not possible in this cluster.
async fn inject(fault: &Fault, cluster: &mut Cluster, load: &Load) -> Result<Option<String>> {
    let hold = Duration::from_millis(fault.duration_ms);
    match fault.kind {
        FaultKind::Partition => {
            let from = fault.partition_from.unwrap_or(PartitionFrom::Postgres);
            let port = match from {
                PartitionFrom::Postgres => cluster.postgres.as_ref().map(|pg| pg.port()),
                PartitionFrom::Nats => cluster.nats.as_ref().map(|nats| nats.port()),
            };
            let (Some(net), Some(port)) = (cluster.network.as_mut(), port) else {
                return Ok(None);
            };
            let index = fault.gateway.unwrap_or(0);
            let detail = net.partition(index, port)?;
            tokio::time::sleep(hold).await;
            let dropped = net.heal(index)?;
            Ok(Some(format!(
                "chaos-gw-{index} cut from {} ({detail}), {dropped} packets dropped, healed",
                from.as_str()
            )))
        }
        FaultKind::GatewayKill => {
            let gateway = gateway(cluster, fault)?;
            gateway.kill().await?;
            tokio::time::sleep(hold).await;
            gateway.restart().await?;
            Ok(Some(format!("{} killed, restarted", gateway.id)))
        }
        FaultKind::GatewayPause => {
            let gateway = gateway(cluster, fault)?;
            gateway.pause()?;
            tokio::time::sleep(hold).await;
            gateway.resume()?;
            Ok(Some(format!("{} stopped, continued", gateway.id)))
        }
        FaultKind::PgTerminateBackend => {
            let mut conn = cluster.connect().await?;
            let storm = hold.min(Duration::from_millis(TERMINATE_STORM_MS_MAX));
            let until = Instant::now() + storm;
            let (mut rounds, mut terminated) = (0u64, 0i64);
            loop {
                terminated += sqlx::query_scalar::<_, i64>(
                    "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) \
                     FROM pg_stat_activity \
                     WHERE datname = current_database() AND pid <> pg_backend_pid()",
                )
                .fetch_one(&mut conn)
                .await
                .context("terminating the gateways' connections")?;
                rounds += 1;
                if Instant::now() >= until {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(TERMINATE_INTERVAL_MS)).await;
            }
            // Closing is a courtesy to the server; the connection is dropped either way.
            let _ = conn.close().await;
            Ok(Some(format!(
                "{terminated} connections terminated in {rounds} rounds over {} ms",
                storm.as_millis()
            )))
        }
        FaultKind::PgRestart => {
            let Some(pg) = cluster.postgres.as_mut() else {
                return Ok(None);
            };
            pg.restart().await?;
            Ok(Some("pg_ctl restart -m fast".to_owned()))
        }
        FaultKind::NatsRestart => {
            let Some(nats) = cluster.nats.as_mut() else {
                return Ok(None);
            };
            nats.kill().await?;
            tokio::time::sleep(hold).await;
            nats.ensure_running().await?;
            Ok(Some(format!(
                "nats-server killed, restarted on {}",
                nats.url()
            )))
        }
        FaultKind::StuckRowLock => {
            let conv_id = load.conv_id(load.hot).to_owned();
            let mut conn = cluster.connect().await?;
            let mut tx = conn.begin().await?;
            sqlx::query("SELECT 1 FROM conversations WHERE conv_id = $1 FOR UPDATE")
                .bind(&conv_id)
                .execute(&mut *tx)
                .await
                .context("locking the hot conversation's row")?;
            tokio::time::sleep(hold).await;
            tx.rollback().await.context("rolling the lock back")?;
            Ok(Some(format!("row of {conv_id} locked, rolled back")))
        }
        FaultKind::PushServiceDown => {
            let attempts = cluster.push.attempts();
            cluster.push.down();
            tokio::time::sleep(hold).await;
            cluster.push.up();
            let refused = cluster.push.attempts() - attempts;
            Ok(Some(format!(
                "push service answered 503 to {refused} notifications, then took them again"
            )))
        }
        FaultKind::ClientDisconnect => {
            let device = fault.device.unwrap_or(0);
            let abort_after_ms = fault.abort_after_ms.unwrap_or(0);
            load.disconnect(device, abort_after_ms)?;
            tokio::time::sleep(hold).await;
            Ok(Some(format!(
                "device {device} dropped its session, next send aborted after {abort_after_ms} ms"
            )))
        }
    }
}

fn gateway<'a>(cluster: &'a mut Cluster, fault: &Fault) -> Result<&'a mut crate::procs::Gateway> {
    let index = fault.gateway.unwrap_or(0);
    cluster
        .gateways
        .get_mut(index)
        .with_context(|| format!("no gateway {index}"))
}
