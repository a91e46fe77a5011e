//! Scenario `reconnect-storm`: every device drops its connection at once, in the middle of an
//! open-loop load, and comes back.
//!
//! Halfway through the run every session is told to reconnect at the same moment (the SDK
//! drops the socket, reconnects after its first backoff pause and catches every tracked
//! conversation up through events-after). Sends in flight on the dropped connections are
//! resent by the SDK with the same `client_msg_id`. The report adds how long the devices took
//! to be connected again and to have every message acked before the storm, and the final
//! check shows whether anything was lost, repeated or reordered on the way.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use futures::{stream, StreamExt};
use rand::rngs::StdRng;
use rand::SeedableRng;
use serde_json::json;

use super::baseline::{BaselinePlan, Shape};
use super::devices::DeviceLog;
use super::harness::{self, Common};
use super::load::{open_loop, Ack, LoadCounters, OpenLoop};
use super::report::{micros_histogram, percentiles_ms, record};
use super::world::{log_uniform_sizes, WorldPlan};
use super::{seed_peak, BenchArgs};

const RATE_DEFAULT: f64 = 250.0;
const USERS_DEFAULT: usize = 600;
const ONLINE_DEFAULT: usize = 400;
const GROUPS: usize = 20;
const GROUP_MEMBERS_MIN: usize = 10;
const GROUP_MEMBERS_MAX: usize = 100;
const IN_FLIGHT_MAX: usize = 2_048;
const LATE_MAX: Duration = Duration::from_secs(30);
/// Reconnect commands queued at once.
const RECONNECTS_IN_FLIGHT: usize = 256;

/// Per device: time from the storm to its new connection, and to holding every message that
/// was acked before the storm.
fn recovery(logs: &[DeviceLog], acks: &[Ack], storm: Instant) -> Result<serde_json::Value> {
    let acked_at: HashMap<(u32, i64), Instant> =
        acks.iter().map(|a| ((a.conv, a.seq), a.acked)).collect();
    let mut reconnect_h = micros_histogram()?;
    let mut caught_up_h = micros_histogram()?;
    let (mut reconnected, mut stopped) = (0u64, 0u64);
    for log in logs {
        stopped += log.stopped.len() as u64;
        let Some(back) = log.reconnected.iter().copied().find(|&t| t >= storm) else {
            continue;
        };
        reconnected += 1;
        record(&mut reconnect_h, back - storm);
        let caught_up = log
            .received
            .iter()
            .filter(|r| r.at >= storm)
            .filter(|r| acked_at.get(&(r.conv, r.seq)).is_some_and(|&t| t < storm))
            .map(|r| r.at)
            .max()
            .unwrap_or(back)
            .max(back);
        record(&mut caught_up_h, caught_up - storm);
    }
    Ok(json!({
        "devices": logs.len(),
        "reconnected": reconnected,
        "sessions_stopped": stopped,
        "reconnect_ms": percentiles_ms(&reconnect_h),
        "caught_up_ms": percentiles_ms(&caught_up_h),
        "caught_up_means": "the device holds every message acked before the storm",
    }))
}

pub async fn run(args: &BenchArgs) -> Result<()> {
    let mut rng = StdRng::seed_from_u64(args.seed);
    let users = args.users.unwrap_or(USERS_DEFAULT);
    let online = args.online.unwrap_or(ONLINE_DEFAULT.min(users)).min(users);
    let world_plan = WorldPlan {
        users,
        online,
        directs: (online / 2).min(online * (online - 1) / 2),
        group_sizes: log_uniform_sizes(
            &mut rng,
            GROUPS,
            GROUP_MEMBERS_MIN.min(users),
            GROUP_MEMBERS_MAX.min(users),
        ),
        hot_group: None,
    };
    let setup = harness::setup(args, world_plan, &mut rng).await?;
    let rate = args.rate.unwrap_or(RATE_DEFAULT);
    let duration = Duration::from_secs(args.duration);
    let cfg = OpenLoop {
        rate_per_s: rate,
        duration,
        in_flight_max: IN_FLIGHT_MAX,
        late_max: LATE_MAX,
        seed: args.seed,
    };
    let counters = Arc::new(LoadCounters::default());
    let load = open_loop(
        &setup.devices.handles,
        &setup.conv_ids,
        seed_peak::picker(&setup.world),
        cfg,
        0,
        counters.clone(),
    );
    let handles = setup.devices.handles.clone();
    let storm = async {
        tokio::time::sleep(duration / 2).await;
        let at = Instant::now();
        stream::iter(handles.iter())
            .for_each_concurrent(RECONNECTS_IN_FLIGHT, |h| async move {
                // A stopped session has nothing to reconnect; the check will show it.
                let _ = h.reconnect().await;
            })
            .await;
        at
    };
    let label = format!(
        "reconnect-storm: {rate}/s for {} s, every device drops at {} s",
        args.duration,
        args.duration / 2
    );
    let (outcome, storm_at) = harness::with_progress(&label, duration, &setup, &counters, async {
        tokio::join!(load, storm)
    })
    .await;
    let (world, concluded) = harness::conclude(setup, &outcome.acks).await;
    let latencies = harness::latencies(&concluded.logs, &outcome.acks)?;
    let concurrency = harness::open_loop_concurrency(&outcome);
    let baseline = harness::baseline(
        args,
        &[BaselinePlan {
            shape: Shape::Many {
                convs: world.convs.len(),
            },
            concurrency,
            duration: Duration::from_secs(args.duration.min(10)),
        }],
    )
    .await
    .map(|r| {
        r.map_err(|e| format!("{e:#}"))
            .and_then(|mut v| v.pop().ok_or_else(|| "no result".to_owned()))
    });
    let mut report = harness::report(&Common {
        scenario: "reconnect-storm",
        mode: "open_loop",
        target_rate_per_s: Some(rate),
        world: &world,
        outcome: &outcome,
        concluded: &concluded,
        latencies: &latencies,
        throughput_per_s: outcome.throughput(),
        baseline: baseline.as_ref().map(|r| r.as_ref().map_err(Clone::clone)),
    });
    report["storm_at_s"] = json!(outcome.started.map(|s| (storm_at - s).as_secs_f64()));
    report["recovery"] = recovery(&concluded.logs, &outcome.acks, storm_at)?;
    harness::emit(args, report, &latencies, Some(rate))
}
