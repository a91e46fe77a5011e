//! `parley chaos`: randomized fault schedules under load, judged by the history checker.
//!
//! The lab starts its own cluster ([`cluster`]: a PostgreSQL of its own made with `initdb`
//! and `pg_ctl` on a free port, or the database it is given; a NATS server of its own; N
//! gateways of the running executable), then runs `--schedules` schedules on it, one after
//! the other. Each schedule drives a steady load through the SDK ([`load`]) for
//! `--schedule-s` seconds while the faults of a seeded random schedule ([`schedule`]) hit
//! the cluster ([`faults`]); then every fault is healed, every device catches up, the final
//! log of every conversation is read, and `parley_history::check` judges the history. Each
//! user also has an offline device subscribed at the run's push service ([`push`]); once the
//! schedule quiesced, [`push_check`] judges what it was notified of (nothing lost, nothing
//! doubled). Each schedule writes
//! `schedule-NNN/{schedule.json,history.jsonl,push.jsonl,report.json}`; the run writes
//! `summary.json` after every schedule and fails when any anomaly was found. See
//! docs/EVIDENCE.md.

pub mod cluster;
pub mod faults;
pub mod load;
pub mod netns;
pub mod postgres;
pub mod procs;
pub mod push;
pub mod push_check;
pub mod recorder;
pub mod schedule;
mod summary;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use serde::Serialize;
use serde_json::json;

use crate::cluster::{Cluster, ClusterConfig};
use crate::load::{Load, DEVICES_LEN};
use crate::push_check::{PushAnomaly, PushReport};
use crate::recorder::Recorder;
use crate::schedule::{FaultKind, Plan};
pub use crate::summary::Summary;

/// Most gateways of the lab: each is a server process on the same machine.
pub const GATEWAYS_MAX: i64 = 16;
/// Longest schedule: a run of 100 schedules must stay within an hour.
pub const SCHEDULE_S_MAX: i64 = 600;

/// The bus between the lab's gateways.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ChaosBus {
    /// A NATS server the lab starts itself.
    Nats,
    /// PostgreSQL notifications on the shared database.
    Postgres,
}

impl ChaosBus {
    /// The value of `parley serve --bus`.
    pub fn as_arg(self) -> &'static str {
        match self {
            ChaosBus::Nats => "nats",
            ChaosBus::Postgres => "postgres",
        }
    }
}

/// No `Debug`: the database URL may hold a password.
#[derive(Args, Clone)]
pub struct ChaosArgs {
    /// Schedules to run, one after the other, on one cluster.
    #[arg(long)]
    pub schedules: usize,
    /// Seed of the fault schedules: the same seed gives the same schedule.json files.
    #[arg(long)]
    pub seed: u64,
    /// A PostgreSQL database to use instead of an instance of the lab's own; the PostgreSQL
    /// restart fault is then skipped.
    #[arg(long)]
    pub database_url: Option<String>,
    /// The bus between the gateways.
    #[arg(long, value_enum, default_value = "nats")]
    pub bus: ChaosBus,
    /// Gateway processes of the cluster.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=GATEWAYS_MAX as u64))]
    pub gateways: u64,
    /// Seconds of load per schedule, while its faults run.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=SCHEDULE_S_MAX as u64))]
    pub schedule_s: u64,
    /// Directory of the results (and of the lab's scratch files, under `lab/`).
    #[arg(long)]
    pub out: PathBuf,
    /// Run the gateways on loopback instead of in network namespaces of the lab's own; the
    /// `partition` fault is then skipped (namespaces need root, `ip`, `nsenter` and `nft`).
    #[arg(long)]
    pub no_netns: bool,
    /// The executable of the gateways (default: this one).
    #[arg(long, hide = true)]
    pub parley_bin: Option<PathBuf>,
    /// Passed to the gateways as PARLEY_TEST_BREAKS (a build with the `test-breaks` feature).
    #[arg(long, hide = true)]
    pub test_breaks: Option<String>,
    /// Only these fault kinds, comma-separated (default: every kind).
    #[arg(long, hide = true, value_delimiter = ',')]
    pub faults: Vec<String>,
    /// The NATS server program.
    #[arg(long, hide = true, default_value = procs::NATS_SERVER_DEFAULT)]
    pub nats_server: PathBuf,
}

/// Runs the lab; fails when a schedule found an anomaly or could not run. Ctrl-C or SIGTERM
/// stops it, and every process it started, cleanly.
pub async fn chaos(args: ChaosArgs) -> Result<()> {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("listening for SIGTERM")?;
    let summary = tokio::select! {
        summary = run(&args) => summary?,
        _ = tokio::signal::ctrl_c() => bail!("interrupted; the lab's processes were stopped"),
        _ = terminate.recv() => bail!("terminated; the lab's processes were stopped"),
    };
    println!("{}", serde_json::to_string_pretty(&summary)?);
    let anomalies: u64 =
        summary.anomalies.values().sum::<u64>() + summary.push_anomalies.values().sum::<u64>();
    if anomalies > 0 {
        bail!(
            "{anomalies} anomalies in {} schedules: see {}",
            summary.schedules_with_anomalies.len(),
            args.out.join("summary.json").display()
        );
    }
    if !summary.schedule_errors.is_empty() {
        bail!(
            "{} schedules could not run: see {}",
            summary.schedule_errors.len(),
            args.out.join("summary.json").display()
        );
    }
    Ok(())
}

fn kinds(args: &ChaosArgs) -> Result<Vec<FaultKind>> {
    args.faults
        .iter()
        .map(|name| {
            FaultKind::parse(name.trim()).with_context(|| format!("no fault kind {name:?}"))
        })
        .collect()
}

/// Makes `dir` traversable by others, so PostgreSQL (run as its own user) reaches its data
/// below it.
fn open_for_postgres(dir: &Path) -> Result<()> {
    let mut permissions = std::fs::metadata(dir)?.permissions();
    permissions.set_mode(permissions.mode() | 0o711);
    std::fs::set_permissions(dir, permissions)
        .with_context(|| format!("making {} traversable", dir.display()))
}

async fn run(args: &ChaosArgs) -> Result<Summary> {
    let kinds = kinds(args)?;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let out = args.out.canonicalize()?;
    let lab = out.join("lab");
    if lab.exists() {
        // The scratch directory of an earlier run: its PostgreSQL is stopped with the run.
        std::fs::remove_dir_all(&lab).with_context(|| format!("removing {}", lab.display()))?;
    }
    std::fs::create_dir_all(&lab)?;
    open_for_postgres(&out)?;
    open_for_postgres(&lab)?;
    let program = match &args.parley_bin {
        Some(p) => p.clone(),
        None => std::env::current_exe().context("finding the parley executable")?,
    };
    let config = ClusterConfig {
        program,
        nats_server: args.nats_server.clone(),
        gateways: args.gateways as usize,
        bus: args.bus.as_arg().to_owned(),
        database_url: args.database_url.clone(),
        test_breaks: args.test_breaks.clone(),
        netns: !args.no_netns,
        dir: lab,
    };
    let started = Instant::now();
    let mut cluster = Cluster::start(&config)
        .await
        .context("starting the lab's cluster")?;
    let plan = Plan {
        run_seed: args.seed,
        schedule_ms: args.schedule_s * 1000,
        gateways: config.gateways,
        devices: DEVICES_LEN,
        kinds,
        nats: args.bus == ChaosBus::Nats,
    };
    let run_tag = format!(
        "chaos{}-{}",
        args.seed,
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis())
    );
    let mut summary = Summary::new(args, config.gateways, cluster.network.is_some());
    // Each schedule's offline devices and the duplicates counted for them so far: a
    // notification resent after its gateway's lease ran out may arrive schedules later.
    let mut observed: Vec<(usize, Vec<String>, u64)> = Vec::new();
    for index in 0..args.schedules {
        let dir = out.join(format!("schedule-{index:03}"));
        std::fs::create_dir_all(&dir)?;
        let schedule = schedule::generate(&plan, index);
        write_json(&dir.join("schedule.json"), &schedule)?;
        let tag = format!("{run_tag}-s{index:03}");
        let result = run_schedule(&schedule, &mut cluster, &tag, &dir).await;
        match result {
            Ok(done) => {
                eprintln!(
                    "schedule {index:03}: {} operations, {} anomalies, {} unknown outcomes ({} recovered), faults {:?}",
                    done.report.operations,
                    done.report.total(),
                    done.report.unknown_outcomes,
                    done.report.recovered,
                    done.faults.iter().map(|f| (f.kind.as_str(), f.status)).collect::<Vec<_>>(),
                );
                eprintln!(
                    "schedule {index:03}: notifications: {} received, {} of {} owed delivered, {} push anomalies {:?}, settled in {} ms",
                    done.push.received,
                    done.push.delivered,
                    done.push.expected,
                    done.push.total(),
                    done.push.anomalies,
                    done.push.settle_ms,
                );
                summary.add(index, &done.faults, &done.report, done.repaired.len());
                summary.add_push(index, &done.push);
                observed.push((
                    index,
                    done.observers,
                    done.push.count(PushAnomaly::Duplicated),
                ));
            }
            Err(e) => {
                let error = format!("{e:#}");
                eprintln!("schedule {index:03} could not run: {error}");
                write_json(&dir.join("report.json"), &json!({ "error": error }))?;
                summary
                    .schedule_errors
                    .push(json!({"schedule": index, "error": error}));
                // The next schedule needs a healed cluster; without one the run ends here.
                cluster
                    .heal()
                    .await
                    .context("healing after a failed schedule")?;
                summary.schedules_run += 1;
            }
        }
        let notifications = cluster.push.notifications(started);
        for (schedule, devices, counted) in &mut observed {
            let now = push_check::duplicates(devices, &notifications);
            if now > *counted {
                eprintln!(
                    "schedule {schedule:03}: {} more duplicated notifications arrived later",
                    now - *counted
                );
                summary.add_late_push_duplicates(*schedule, now - *counted);
                *counted = now;
            }
        }
        summary.duration_s = started.elapsed().as_secs_f64();
        write_json(&out.join("summary.json"), &summary)?;
    }
    Ok(summary)
}

/// What one schedule produced.
struct Done {
    faults: Vec<faults::FaultOutcome>,
    report: parley_history::Report,
    repaired: Vec<String>,
    /// The notification checker's report.
    push: PushReport,
    /// The schedule's offline devices.
    observers: Vec<String>,
}

async fn run_schedule(
    schedule: &schedule::Schedule,
    cluster: &mut Cluster,
    tag: &str,
    dir: &Path,
) -> Result<Done> {
    let rec = Arc::new(Recorder::new());
    let urls = cluster.urls();
    let load = Load::start(&urls, &cluster.admin_token, tag, rec.clone(), &cluster.push)
        .await
        .context("setting up the schedule's users and conversations")?;
    let started = Instant::now();
    let until = started + Duration::from_millis(schedule.schedule_ms);
    tracing::info!(schedule = schedule.index, "load and faults");
    let (faults, ()) = tokio::join!(
        faults::run_faults(schedule, cluster, &load, started),
        load.run(until, schedule.seed),
    );
    tracing::info!(schedule = schedule.index, "healing");
    let repaired = cluster.heal().await.context("healing the cluster")?;
    tracing::info!(schedule = schedule.index, "catching up");
    let finished = load
        .finish()
        .await
        .context("catching up and reading the final logs");
    let records = rec.records();
    let path = dir.join("history.jsonl");
    let mut file = std::io::BufWriter::new(
        std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?,
    );
    parley_history::write_history(&mut file, &records)?;
    finished?;
    let report = parley_history::check(&records);
    tracing::info!(schedule = schedule.index, "waiting for owed notifications");
    let observers = load.observers();
    let read_seqs = load
        .read_positions()
        .await
        .context("reading the read positions at the end")?;
    let (push, received) = cluster
        .push
        .settle(&observers, &records, &read_seqs, started)
        .await;
    write_jsonl(&dir.join("push.jsonl"), &received)?;
    write_json(
        &dir.join("report.json"),
        &ScheduleReport {
            schedule: schedule.index,
            seed: schedule.seed,
            load_s: schedule.schedule_ms as f64 / 1000.0,
            total_s: started.elapsed().as_secs_f64(),
            faults: &faults,
            repaired: &repaired,
            history: &report,
            push: &push,
        },
    )?;
    Ok(Done {
        faults,
        report,
        repaired,
        push,
        observers: observers.into_iter().map(|o| o.device).collect(),
    })
}

/// `report.json` of one schedule.
#[derive(Serialize)]
struct ScheduleReport<'a> {
    schedule: usize,
    seed: u64,
    load_s: f64,
    total_s: f64,
    faults: &'a [faults::FaultOutcome],
    /// What healing had to repair beyond the faults' own ends (a gateway that exited).
    repaired: &'a [String],
    /// The checker's report (docs/HISTORY.md).
    history: &'a parley_history::Report,
    /// The notification checker's report (`push_check.rs`).
    push: &'a PushReport,
}

/// One JSON object per line.
fn write_jsonl<T: Serialize>(path: &Path, values: &[T]) -> Result<()> {
    let mut text = String::new();
    for value in values {
        text.push_str(&serde_json::to_string(value)?);
        text.push('\n');
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

fn write_json(path: &Path, value: &impl Serialize) -> Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))
}
