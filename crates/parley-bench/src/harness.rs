//! The phases of every load-model scenario, run in order by [`run`]: build the world, bring
//! its devices online, run the scenario's load, drain and verify, run the baseline, report.
//!
//! A scenario ([`LoadModel`]) supplies only what is its own: the world it needs, the load it
//! runs, the raw transactions it compares with, and the fields it adds to the report.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Result};
use rand::rngs::StdRng;
use rand::SeedableRng;
use serde_json::Value;

use crate::baseline::{self, BaselinePlan, BaselineResult, Shape};
use crate::conclude::{conclude, latencies, Concluded};
use crate::cpu::{CpuReadings, CpuSpent};
use crate::devices::Devices;
use crate::load::{
    closed_loop, open_loop, Ack, ClosedLoop, LoadCounters, LoadOutcome, OpenLoop, Picker,
};
use crate::load_report::{self, Common};
use crate::progress::{bar, phase, with_progress};
use crate::server_metrics::ServerCounters;
use crate::target::Target;
use crate::world::{self, World, WorldPlan};
use crate::BenchArgs;

/// Most transactions the server runs at once: its default PostgreSQL pool (`--pool-size`).
/// An open-loop baseline never runs more, however many sends queue in front of the server.
pub const SERVER_POOL_SIZE_DEFAULT: usize = 16;
/// Longest baseline run, in seconds: the raw transaction's rate settles well within it.
const BASELINE_S_MAX: u64 = 10;

/// A load-model scenario.
pub trait LoadModel {
    /// What the load phase hands on to the report (the levels of a ramp, the moment of a
    /// storm, …).
    type Notes;

    /// The world to build and bring online.
    fn world(&self, args: &BenchArgs, rng: &mut StdRng) -> Result<WorldPlan>;

    /// Runs the load on the online devices.
    fn load(
        &self,
        args: &BenchArgs,
        setup: &Setup,
    ) -> impl Future<Output = Result<Loaded<Self::Notes>>>;

    /// The raw-transaction runs to compare with: by default one over as many conversations
    /// as the world has, at the concurrency the load put on the server.
    fn baseline(
        &self,
        args: &BenchArgs,
        world: &World,
        loaded: &Loaded<Self::Notes>,
    ) -> Vec<BaselinePlan> {
        vec![BaselinePlan {
            shape: Shape::Many {
                convs: world.convs.len(),
            },
            concurrency: open_loop_concurrency(&loaded.outcome),
            duration: baseline_duration(args),
        }]
    }

    /// Adds the scenario's own fields to the report.
    fn report(
        &self,
        args: &BenchArgs,
        report: &mut Value,
        run: &Finished<'_, Self::Notes>,
    ) -> Result<()>;
}

/// What a load did.
pub struct Loaded<N> {
    pub scenario: &'static str,
    /// `open_loop` or `closed_loop`.
    pub mode: &'static str,
    pub target_rate_per_s: Option<f64>,
    /// Every send of the run: all are verified, and the timeline shows them.
    pub outcome: LoadOutcome,
    /// The sends the latency percentiles are of, when not all of them.
    pub measured: Option<Vec<Ack>>,
    pub throughput_per_s: f64,
    /// Which of the baseline's runs the throughput is compared with.
    pub compared_run: usize,
    pub notes: N,
}

impl<N> Loaded<N> {
    /// A load whose every send is measured and compared with the baseline's one run.
    pub fn of(
        scenario: &'static str,
        mode: &'static str,
        target_rate_per_s: Option<f64>,
        outcome: LoadOutcome,
        notes: N,
    ) -> Self {
        Self {
            scenario,
            mode,
            target_rate_per_s,
            throughput_per_s: outcome.throughput(),
            outcome,
            measured: None,
            compared_run: 0,
            notes,
        }
    }

    fn measured_acks(&self) -> &[Ack] {
        self.measured.as_deref().unwrap_or(&self.outcome.acks)
    }
}

/// Everything a run produced, for the scenario's own report fields.
pub struct Finished<'a, N> {
    pub loaded: &'a Loaded<N>,
    pub concluded: &'a Concluded,
    /// Every baseline run, or why there is none (`None`: no `--database-url`).
    pub baseline: Option<&'a Result<Vec<BaselineResult>, String>>,
}

/// Runs a load-model scenario from the world to the report.
pub async fn run<S: LoadModel>(args: &BenchArgs, target: &Target, scenario: &S) -> Result<()> {
    let mut rng = StdRng::seed_from_u64(args.seed);
    let plan = scenario.world(args, &mut rng)?;
    let setup = setup(target, plan, &mut rng).await?;
    let server_pid = args.large_group.server_pid;
    let pg_database = args.large_group.postgres_database.as_deref();
    let cpu_before = CpuReadings::now(server_pid, pg_database);
    // Counters are optional: a server whose metrics cannot be read still gets its report.
    let counters_before = ServerCounters::read(&setup.target).await.ok();
    let loaded = scenario.load(args, &setup).await?;
    let load_cpu = CpuReadings::now(server_pid, pg_database).since(&cpu_before);
    let load_counters = match (counters_before, ServerCounters::read(&setup.target).await) {
        (Some(before), Ok(after)) => Some(after.since(&before)),
        _ => None,
    };
    let Setup {
        world,
        devices,
        connect_settle_s,
        ..
    } = setup;
    let concluded = conclude(&world, devices, &loaded.outcome.acks).await;
    let latencies = latencies(&concluded.logs, loaded.measured_acks())?;
    let baseline = run_baseline(args, &scenario.baseline(args, &world, &loaded))
        .await
        .map(|r| r.map_err(|e| format!("{e:#}")));
    let compared = baseline.as_ref().map(|r| {
        r.as_ref().map_err(Clone::clone).and_then(|runs| {
            runs.get(loaded.compared_run)
                .ok_or_else(|| "no result".to_owned())
        })
    });
    let mut report = load_report::report(&Common {
        scenario: loaded.scenario,
        mode: loaded.mode,
        target_rate_per_s: loaded.target_rate_per_s,
        world: &world,
        outcome: &loaded.outcome,
        concluded: &concluded,
        latencies: &latencies,
        throughput_per_s: loaded.throughput_per_s,
        baseline: compared,
    });
    report["connect_settle_s"] = serde_json::json!(connect_settle_s);
    report["load_cpu_ms"] = load_cpu_report(&load_cpu);
    report["pull_fetches"] = load_counters.map_or(Value::Null, |c| fetches_report(&c, &load_cpu));
    scenario.report(
        args,
        &mut report,
        &Finished {
            loaded: &loaded,
            concluded: &concluded,
            baseline: baseline.as_ref(),
        },
    )?;
    load_report::emit(args, report, &latencies, loaded.target_rate_per_s)?;
    load_report::write_history(args, &concluded.verification.history)?;
    let violations = concluded.verification.violations.total();
    if violations > 0 {
        bail!(
            "{violations} violations (lost, duplicated, gaps, reordered or phantom deliveries): \
             see {}",
            args.out.join("report.json").display()
        );
    }
    Ok(())
}

/// CPU of the load phase: the server's (with --server-pid), PostgreSQL's (the backends of
/// --postgres-database when given) and the load generator's own.
fn load_cpu_report(cpu: &CpuSpent) -> Value {
    serde_json::json!({
        "server": cpu.server_ms,
        "postgres": cpu.postgres_ms,
        "load_generator": cpu.bench_ms,
    })
}

/// The events-after fetches of the load phase (the pull devices' fetches after hints, and
/// any catch-up), by what answered them, with PostgreSQL's CPU of the whole phase per fetch:
/// an upper bound of a fetch's cost, since the phase's sends are in it too.
fn fetches_report(c: &ServerCounters, cpu: &CpuSpent) -> Value {
    let fetches = c.fetches();
    let per_fetch = |ms: u64| (fetches > 0).then(|| ms as f64 / fetches as f64);
    serde_json::json!({
        "total": fetches,
        "from_window": c.window_hits,
        "from_store": c.window_misses,
        "window_hit_ratio": (fetches > 0).then(|| c.window_hits as f64 / fetches as f64),
        "postgres_cpu_ms_per_fetch_max": per_fetch(cpu.postgres_ms),
    })
}

/// The world and its devices, online and tracking.
pub struct Setup {
    /// The gateways the devices are spread over.
    pub target: Target,
    pub world: World,
    pub devices: Devices,
    pub conv_ids: Vec<Arc<str>>,
    /// How long the presence frames of the devices' connects took to settle before the load.
    pub connect_settle_s: f64,
}

impl Setup {
    /// Runs an open-loop load with the progress display, and `alongside` at the same time
    /// (e.g. a storm of reconnects); answers both outcomes.
    pub async fn open_loop<T>(
        &self,
        label: &str,
        picker: Picker,
        cfg: OpenLoop,
        alongside: impl Future<Output = T>,
    ) -> (LoadOutcome, T) {
        let counters = Arc::new(LoadCounters::default());
        let load = open_loop(
            &self.devices.handles,
            &self.conv_ids,
            picker,
            cfg,
            0,
            counters.clone(),
        );
        let both = async { tokio::join!(load, alongside) };
        with_progress(label, cfg.duration, &self.devices.counters, &counters, both).await
    }

    /// Runs a closed-loop load with the progress display; its sends are numbered from
    /// `first_id`.
    pub async fn closed_loop(
        &self,
        label: &str,
        picker: Picker,
        cfg: ClosedLoop,
        first_id: u64,
    ) -> LoadOutcome {
        let counters = Arc::new(LoadCounters::default());
        let load = closed_loop(
            &self.devices.handles,
            &self.conv_ids,
            picker,
            cfg,
            first_id,
            counters.clone(),
        );
        with_progress(label, cfg.duration, &self.devices.counters, &counters, load).await
    }
}

/// Builds the world through the admin API and connects its online devices, spread over the
/// gateways round robin.
async fn setup(target: &Target, plan: WorldPlan, rng: &mut StdRng) -> Result<Setup> {
    target.check_ready().await?;
    let admins = target.admins()?;
    phase(&format!(
        "creating {} users, {} devices, {} direct chats, {} groups{}",
        plan.users,
        plan.online,
        plan.directs,
        plan.group_sizes.len(),
        plan.hot_group
            .map_or(String::new(), |h| format!(" and a hot group of {h}"))
    ));
    let pb = bar(world::setup_requests(&plan), "requests");
    let step = || pb.inc(1);
    let world = world::build(&admins, plan, rng, &step).await?;
    pb.finish_and_clear();
    phase(&format!("connecting {} devices", world.clients.len()));
    let pb = bar(world.clients.len() as u64, "devices");
    let step = || pb.inc(1);
    let devices = Devices::connect(&world, &target.urls, &step).await?;
    pb.finish_and_clear();
    phase("waiting for the presence frames of the connects to settle");
    let settle = devices.settle().await;
    let conv_ids = world
        .convs
        .iter()
        .map(|c| Arc::from(c.id.as_str()))
        .collect();
    Ok(Setup {
        target: target.clone(),
        world,
        devices,
        conv_ids,
        connect_settle_s: settle.as_secs_f64(),
    })
}

/// The concurrency an open-loop run put on the database: the mean number of sends in flight
/// (Little's law), rounded up, but never more than the server's pool runs at once.
pub fn open_loop_concurrency(outcome: &LoadOutcome) -> usize {
    (outcome.mean_in_flight().ceil() as usize).clamp(1, SERVER_POOL_SIZE_DEFAULT)
}

/// How long a baseline run lasts: as long as the load, at most [`BASELINE_S_MAX`].
pub fn baseline_duration(args: &BenchArgs) -> Duration {
    Duration::from_secs(args.duration.min(BASELINE_S_MAX))
}

/// Runs the baseline if `--database-url` was given: the results or why it did not run.
async fn run_baseline(
    args: &BenchArgs,
    plans: &[BaselinePlan],
) -> Option<Result<Vec<BaselineResult>>> {
    let url = args.database_url.as_deref()?;
    phase(&format!(
        "baseline: the raw send transaction against PostgreSQL at concurrency {}",
        plans
            .iter()
            .map(|p| p.concurrency.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    ));
    Some(baseline::run_many(url, plans).await)
}
