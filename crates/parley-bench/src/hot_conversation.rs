//! Scenario `hot-conversation`: every sender on one conversation.
//!
//! A group of `--senders` members (16 by default), every one online and sending. Closed loop by
//! default, one send in flight per sender, so the result is the conversation's ceiling; with
//! `--rate` it runs in open loop at that rate instead. Every send takes the same row lock, so
//! the rate is bounded by how long one send transaction holds it: the baseline runs the raw
//! transaction on one conversation at the same concurrency and times each statement.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Result};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

use super::baseline::{BaselinePlan, BaselineResult, Shape};
use super::harness::{self, Common};
use super::load::{closed_loop, open_loop, ClosedLoop, LoadCounters, OpenLoop, SendPlan};
use super::world::WorldPlan;
use super::BenchArgs;

const IN_FLIGHT_MAX: usize = 2_048;
const LATE_MAX: Duration = Duration::from_secs(30);

/// The conversation's ceiling implied by the raw transaction: one send holds the row lock
/// from the moment the lock is granted until its commit returned, i.e. for the check, the
/// insert and the commit (and the lock statement's answer, not counted here).
fn lock_ceiling(b: &BaselineResult) -> serde_json::Value {
    let s = &b.statement_mean_ms;
    let hold_ms = s.check + s.insert + s.commit;
    json!({
        "lock_hold_ms_estimate": hold_ms,
        "ceiling_per_s_estimate": if hold_ms > 0.0 { 1000.0 / hold_ms } else { 0.0 },
        "explanation": "every send to the conversation takes its row lock; a send holds it \
                        from the lock statement's grant through the check, the insert and \
                        COMMIT (which waits for the WAL flush), so sends to one conversation \
                        commit one after another and the rate is at most 1 / hold time",
    })
}

pub async fn run(args: &BenchArgs) -> Result<()> {
    let senders = args.senders;
    if senders < 2 {
        bail!("hot-conversation needs at least 2 senders");
    }
    let mut rng = StdRng::seed_from_u64(args.seed);
    let world_plan = WorldPlan {
        users: senders,
        online: senders,
        directs: 0,
        group_sizes: Vec::new(),
        hot_group: Some(senders),
    };
    let setup = harness::setup(args, world_plan, &mut rng).await?;
    let members = setup.world.convs[0].online.clone();
    let picker = Arc::new(move |rng: &mut StdRng| SendPlan {
        conv: 0,
        device: members[rng.gen_range(0..members.len())],
    });
    let counters = Arc::new(LoadCounters::default());
    let duration = Duration::from_secs(args.duration);
    let (outcome, mode) = match args.rate {
        Some(rate) => {
            let cfg = OpenLoop {
                rate_per_s: rate,
                duration,
                in_flight_max: IN_FLIGHT_MAX,
                late_max: LATE_MAX,
                seed: args.seed,
            };
            let load = open_loop(
                &setup.devices.handles,
                &setup.conv_ids,
                picker,
                cfg,
                0,
                counters.clone(),
            );
            let label = format!("hot-conversation: {rate}/s into one group of {senders}");
            let out = harness::with_progress(&label, duration, &setup, &counters, load).await;
            (out, "open_loop")
        }
        None => {
            let cfg = ClosedLoop {
                workers: senders,
                duration,
                seed: args.seed,
            };
            let load = closed_loop(
                &setup.devices.handles,
                &setup.conv_ids,
                picker,
                cfg,
                0,
                counters.clone(),
            );
            let label = format!("hot-conversation: {senders} senders, closed loop, one group");
            let out = harness::with_progress(&label, duration, &setup, &counters, load).await;
            (out, "closed_loop")
        }
    };
    let (world, concluded) = harness::conclude(setup, &outcome.acks).await;
    let latencies = harness::latencies(&concluded.logs, &outcome.acks)?;
    let concurrency = match args.rate {
        Some(_) => harness::open_loop_concurrency(&outcome),
        None => senders,
    };
    let baseline = harness::baseline(
        args,
        &[BaselinePlan {
            shape: Shape::One,
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
        scenario: "hot-conversation",
        mode,
        target_rate_per_s: args.rate,
        world: &world,
        outcome: &outcome,
        concluded: &concluded,
        latencies: &latencies,
        throughput_per_s: outcome.throughput(),
        baseline: baseline.as_ref().map(|r| r.as_ref().map_err(Clone::clone)),
    });
    report["senders"] = json!(senders);
    if let Some(Ok(b)) = &baseline {
        report["hot_conversation_ceiling"] = lock_ceiling(b);
    }
    harness::emit(args, report, &latencies, args.rate)
}
