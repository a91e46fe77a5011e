//! Scenario `gateway-failover`: a steady open-loop load over one group whose member devices
//! are spread over the gateways the benchmark started (`--gateways`), and one gateway killed
//! with SIGKILL halfway through, as a crash would.
//!
//! The devices of the killed gateway move to the next one (`devices.rs`): they resync by
//! cursor, and their sends cut off by the kill are resent there with the same
//! `client_msg_id`. The report adds, over those devices, the time from the kill to their new
//! connection (`reconnect_p50_ms`, `reconnect_p99_ms`); the time from the kill until the route
//! table holds nothing of the killed gateway (`converge_ms`, polled from
//! `GET /v1/admin/gateways` on a surviving gateway); and the violations of the final check
//! (`lost`, `duplicated`, `gaps`: every acked send reaches every member device exactly once, in
//! order), any of which fails the run.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use parley_client::{AdminClient, Method};
use rand::rngs::StdRng;
use rand::Rng;
use serde_json::{json, Value};

use crate::gateways::Gateways;
use crate::harness::{Finished, LoadModel, Loaded, Setup};
use crate::load::{OpenLoop, Picker, SendPlan};
use crate::reconnect_storm::recovery;
use crate::world::{ConvClass, World, WorldPlan};
use crate::BenchArgs;

const RATE_DEFAULT: f64 = 50.0;
/// Members of the group, all online unless --online says otherwise: every send reaches each,
/// so 60 members at 50 sends/s make 3,000 deliveries/s.
const USERS_DEFAULT: usize = 60;
/// Pause between two looks at the route table after the kill.
const CONVERGE_POLL_MS: u64 = 100;
/// Longest wait for the route table to converge, in leases: a dead gateway's routes are
/// reaped within two lease periods; the rest is margin for a loaded machine.
const CONVERGE_WAIT_LEASES: u64 = 10;
/// … but never less than this, for servers that ignore the lease the benchmark asks for.
const CONVERGE_WAIT_MS_MIN: u64 = 30_000;
/// The route table of the gateways.
const GATEWAYS_PATH: &str = "/v1/admin/gateways";

/// How the route table forgot the killed gateway.
#[derive(Debug, Clone)]
pub enum Convergence {
    /// The killed gateway had no routes left (`no_routes`) or was no longer listed
    /// (`gone`) this long after the kill.
    Converged {
        ms: f64,
        how: &'static str,
    },
    /// The server does not list its gateways (404).
    NotListed,
    /// Still routes of the killed gateway when the wait ended.
    NotWithin {
        waited_ms: u64,
        routes: i64,
    },
    Failed(String),
}

/// What the load hands on to the report.
pub struct Failover {
    pub killed_id: String,
    /// Index of the killed gateway among the URLs.
    pub killed: usize,
    pub gateways: usize,
    pub killed_at: Instant,
    pub convergence: Convergence,
}

/// The routes the table lists for `gateway_id`: `None` when it is not listed.
fn routes_of(table: &Value, gateway_id: &str) -> Result<Option<i64>> {
    let listed = table["gateways"]
        .as_array()
        .context("the answer has no `gateways` list")?;
    Ok(listed
        .iter()
        .find(|g| g["gateway_id"] == gateway_id)
        .map(|g| g["routes"].as_i64().unwrap_or(0)))
}

/// Polls the route table on a surviving gateway until it holds nothing of `gateway_id`.
async fn converge(
    admin: &AdminClient,
    gateway_id: &str,
    killed_at: Instant,
    wait: Duration,
) -> Convergence {
    let mut routes = -1;
    loop {
        match admin.raw(Method::GET, GATEWAYS_PATH).send().await {
            Ok((404, _)) => return Convergence::NotListed,
            Ok((200, table)) => match routes_of(&table, gateway_id) {
                Ok(None) => return converged(killed_at, "gone"),
                Ok(Some(0)) => return converged(killed_at, "no_routes"),
                Ok(Some(n)) => routes = n,
                Err(e) => return Convergence::Failed(format!("{e:#}: {table}")),
            },
            // A slow or refused look is tried again until the wait ends.
            Ok((status, _)) => tracing::debug!(status, "the route table did not answer"),
            Err(e) => tracing::debug!(status = ?e.status(), "the route table did not answer"),
        }
        if killed_at.elapsed() >= wait {
            return Convergence::NotWithin {
                waited_ms: wait.as_millis() as u64,
                routes,
            };
        }
        tokio::time::sleep(Duration::from_millis(CONVERGE_POLL_MS)).await;
    }
}

fn converged(killed_at: Instant, how: &'static str) -> Convergence {
    Convergence::Converged {
        ms: killed_at.elapsed().as_secs_f64() * 1000.0,
        how,
    }
}

/// Sends to the group from a random online member.
fn picker(world: &World) -> Result<Picker> {
    let Some(&conv) = world.of_class(ConvClass::Hot).first() else {
        bail!("the world has no group to send to");
    };
    let online = world.convs[conv as usize].online.clone();
    Ok(Arc::new(move |rng: &mut StdRng| SendPlan {
        conv,
        device: online[rng.gen_range(0..online.len())],
    }))
}

/// The gateways the benchmark started, at least two.
fn started_gateways(setup: &Setup) -> Result<Arc<Gateways>> {
    match &setup.target.gateways {
        Some(g) if g.urls().len() >= 2 => Ok(g.clone()),
        _ => bail!(NEEDS_GATEWAYS),
    }
}

const NEEDS_GATEWAYS: &str = "gateway-failover kills a gateway, so it runs only on gateways \
                              the benchmark starts itself: --gateways N (N >= 2) with \
                              --database-url, instead of --url";

pub struct GatewayFailover;

impl LoadModel for GatewayFailover {
    type Notes = Failover;

    fn world(&self, args: &BenchArgs, _: &mut StdRng) -> Result<WorldPlan> {
        if args.gateways.unwrap_or(0) < 2 {
            bail!(NEEDS_GATEWAYS);
        }
        let users = args.users.unwrap_or(USERS_DEFAULT);
        let online = args.online.unwrap_or(users).min(users);
        Ok(WorldPlan {
            users,
            online,
            directs: 0,
            group_sizes: Vec::new(),
            hot_group: Some(users),
        })
    }

    async fn load(&self, args: &BenchArgs, setup: &Setup) -> Result<Loaded<Failover>> {
        let gateways = started_gateways(setup)?;
        let rate = args.rate.unwrap_or(RATE_DEFAULT);
        let duration = Duration::from_secs(args.duration);
        // The last gateway dies: the first, where the world was built, survives to answer.
        let killed = gateways.urls().len() - 1;
        let killed_id = gateways.ids()[killed].clone();
        let admin = setup.target.admin()?;
        let wait = Duration::from_millis(
            (args.gateway_lease_ms * CONVERGE_WAIT_LEASES).max(CONVERGE_WAIT_MS_MIN),
        );
        let kill = async {
            tokio::time::sleep(duration / 2).await;
            let killed_at = Instant::now();
            let convergence = match gateways.kill(killed).await {
                Ok(()) => converge(&admin, &killed_id, killed_at, wait).await,
                Err(e) => Convergence::Failed(format!("{e:#}")),
            };
            (killed_at, convergence)
        };
        let label = format!(
            "gateway-failover: {rate}/s for {} s over {} gateways, {killed_id} killed at {} s",
            args.duration,
            gateways.urls().len(),
            args.duration / 2
        );
        let cfg = OpenLoop::new(rate, duration, args.seed);
        let picker = picker(&setup.world)?;
        let (outcome, (killed_at, convergence)) = setup.open_loop(&label, picker, cfg, kill).await;
        if let Convergence::Failed(e) = &convergence {
            bail!("killing {killed_id} or reading the route table failed: {e}");
        }
        Ok(Loaded::of(
            "gateway-failover",
            "open_loop",
            Some(rate),
            outcome,
            Failover {
                killed_id,
                killed,
                gateways: gateways.urls().len(),
                killed_at,
                convergence,
            },
        ))
    }

    fn report(
        &self,
        args: &BenchArgs,
        report: &mut Value,
        run: &Finished<'_, Failover>,
    ) -> Result<()> {
        let f = &run.loaded.notes;
        let logs = &run.concluded.logs;
        // Device `d` started on gateway `d % n`: those of the killed one had to move.
        let moved = logs
            .iter()
            .enumerate()
            .filter(|(d, _)| d % f.gateways == f.killed)
            .map(|(_, log)| log);
        let mut recovery = recovery(moved, &run.loaded.outcome.acks, f.killed_at)?;
        recovery["caught_up_means"] = json!("the device holds every message acked before the kill");
        let (converge_ms, converge_note) = match &f.convergence {
            Convergence::Converged { ms, how } => (json!(ms), json!(how)),
            Convergence::NotListed => (
                Value::Null,
                json!(format!(
                    "GET {GATEWAYS_PATH} answered 404: this server does not list its gateways"
                )),
            ),
            Convergence::NotWithin { waited_ms, routes } => (
                Value::Null,
                json!(format!(
                    "{routes} routes of the killed gateway left after {waited_ms} ms"
                )),
            ),
            Convergence::Failed(e) => (Value::Null, json!(e)),
        };
        let v = &run.concluded.verification.violations;
        report["gateways"] = json!(f.gateways);
        report["bus"] = json!(args.bus.as_arg());
        report["gateway_lease_ms"] = json!(args.gateway_lease_ms);
        report["killed_gateway"] = json!(f.killed_id);
        report["killed_at_s"] = json!(run
            .loaded
            .outcome
            .started
            .map(|s| (f.killed_at - s).as_secs_f64()));
        report["reconnect_p50_ms"] = recovery["reconnect_ms"]["p50"].clone();
        report["reconnect_p99_ms"] = recovery["reconnect_ms"]["p99"].clone();
        report["converge_ms"] = converge_ms;
        report["converge_note"] = converge_note;
        report["lost"] = json!(v.lost);
        report["duplicated"] = json!(v.duplicated);
        report["gaps"] = json!(v.gaps);
        report["recovery"] = recovery;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// A server answering `GET /v1/admin/gateways` with `answers` in turn (the last one
    /// repeated), one connection per request; answers its base URL.
    async fn route_table(answers: Vec<(u16, Value)>) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            for i in 0.. {
                let Ok((mut conn, _)) = listener.accept().await else {
                    return;
                };
                let mut head = vec![0u8; 4096];
                let _ = conn.read(&mut head).await;
                let (status, body) = &answers[i.min(answers.len() - 1)];
                let body = body.to_string();
                let reply = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(reply.as_bytes()).await;
            }
        });
        url
    }

    fn listing(routes: i64) -> (u16, Value) {
        let gateways = json!([
            {"gateway_id": "bench-gw-0", "lease_expires_in_ms": 900, "routes": 5},
            {"gateway_id": "bench-gw-2", "lease_expires_in_ms": -100, "routes": routes},
        ]);
        (200, json!({ "gateways": gateways }))
    }

    async fn converge_on(answers: Vec<(u16, Value)>, wait_ms: u64) -> Convergence {
        let admin = AdminClient::new(&route_table(answers).await, "t").unwrap();
        converge(
            &admin,
            "bench-gw-2",
            Instant::now(),
            Duration::from_millis(wait_ms),
        )
        .await
    }

    #[tokio::test]
    async fn convergence_waits_until_the_killed_gateway_has_no_routes() {
        let c = converge_on(vec![listing(3), listing(1), listing(0)], 10_000).await;
        assert!(
            matches!(c, Convergence::Converged { how: "no_routes", ms } if ms >= 200.0),
            "two polls with routes left, {CONVERGE_POLL_MS} ms apart: {c:?}"
        );
        let gone = (
            200,
            json!({"gateways": [{"gateway_id": "bench-gw-0", "routes": 5}]}),
        );
        let c = converge_on(vec![listing(2), gone], 10_000).await;
        assert!(
            matches!(c, Convergence::Converged { how: "gone", .. }),
            "{c:?}"
        );
    }

    #[tokio::test]
    async fn a_table_that_keeps_routes_or_is_missing_gives_no_figure() {
        let c = converge_on(vec![listing(4)], 300).await;
        assert!(
            matches!(c, Convergence::NotWithin { routes: 4, .. }),
            "the negative control: routes never reaped: {c:?}"
        );
        let c = converge_on(vec![(404, json!({"error": "NOT_FOUND"}))], 10_000).await;
        assert!(matches!(c, Convergence::NotListed), "{c:?}");
    }

    #[test]
    fn a_gateway_without_routes_or_listing_has_converged() {
        let table = json!({"gateways": [
            {"gateway_id": "bench-gw-0", "lease_expires_in_ms": 1500, "routes": 20},
            {"gateway_id": "bench-gw-2", "lease_expires_in_ms": -300, "routes": 0},
        ]});
        assert_eq!(routes_of(&table, "bench-gw-0").unwrap(), Some(20));
        assert_eq!(routes_of(&table, "bench-gw-2").unwrap(), Some(0));
        assert_eq!(routes_of(&table, "bench-gw-1").unwrap(), None);
        assert!(routes_of(&json!({"other": []}), "bench-gw-1").is_err());
    }
}
