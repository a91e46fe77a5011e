//! Scenario `saturate`: closed loop over many direct chats with rising concurrency (1, 2, 4, …
//! up to `--max-concurrency`) until throughput stops rising: two levels in a row that do not
//! beat the best so far by 5 %. The report's throughput is the best level's; the baseline runs
//! the raw send transaction over as many direct chats at every concurrency reached, and the
//! ratio compares the two at the best level's concurrency.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

use super::baseline::{BaselinePlan, Shape};
use super::harness::{self, Common};
use super::load::{closed_loop, Ack, ClosedLoop, LoadCounters, LoadOutcome, SendPlan};
use super::report::percentiles_ms;
use super::world::{ConvClass, WorldPlan};
use super::BenchArgs;

const USERS_DEFAULT: usize = 400;
/// A level must beat the best throughput so far by this factor to count as rising.
const RISE_MIN: f64 = 1.05;
/// Levels in a row that did not rise, after which the ramp stops.
const FLAT_LEVELS_MAX: usize = 2;
const STEP_MIN: Duration = Duration::from_secs(3);
/// Send ids of level `i` start at `i * IDS_PER_LEVEL`.
const IDS_PER_LEVEL: u64 = 1_000_000_000;

/// Concurrency levels: powers of two up to `max`, and `max` itself.
fn levels(max: usize) -> Vec<usize> {
    let mut out: Vec<usize> = std::iter::successors(Some(1usize), |c| c.checked_mul(2))
        .take_while(|&c| c < max)
        .collect();
    out.push(max.max(1));
    out
}

/// Index of the best level once the ramp may stop, i.e. after `FLAT_LEVELS_MAX` levels in
/// a row that did not beat the best so far by `RISE_MIN`.
fn stopped_rising(throughputs: &[f64]) -> Option<usize> {
    let mut best = 0;
    let mut flat = 0;
    for (i, &t) in throughputs.iter().enumerate().skip(1) {
        if t >= throughputs[best] * RISE_MIN {
            best = i;
            flat = 0;
        } else {
            flat += 1;
            if t > throughputs[best] {
                best = i;
            }
            if flat >= FLAT_LEVELS_MAX {
                return Some(best);
            }
        }
    }
    None
}

fn best_level(throughputs: &[f64]) -> usize {
    (0..throughputs.len())
        .max_by(|&a, &b| throughputs[a].total_cmp(&throughputs[b]))
        .unwrap_or(0)
}

pub async fn run(args: &BenchArgs) -> Result<()> {
    let mut rng = StdRng::seed_from_u64(args.seed);
    let users = args.users.unwrap_or(USERS_DEFAULT);
    let online = args.online.unwrap_or(users).min(users);
    let world_plan = WorldPlan {
        users,
        online,
        directs: online.min(online * (online - 1) / 2),
        group_sizes: Vec::new(),
        hot_group: None,
    };
    let setup = harness::setup(args, world_plan, &mut rng).await?;
    let directs = setup.world.of_class(ConvClass::Direct);
    let online_of: Vec<Vec<u32>> = setup.world.convs.iter().map(|c| c.online.clone()).collect();
    let picker = Arc::new(move |rng: &mut StdRng| {
        let conv = directs[rng.gen_range(0..directs.len())];
        let members = &online_of[conv as usize];
        SendPlan {
            conv,
            device: members[rng.gen_range(0..members.len())],
        }
    });

    let levels = levels(args.max_concurrency);
    let step = STEP_MIN.max(Duration::from_secs(args.duration) / levels.len() as u32);
    let mut outcomes: Vec<(usize, LoadOutcome)> = Vec::new();
    for (i, &workers) in levels.iter().enumerate() {
        let counters = Arc::new(LoadCounters::default());
        let load = closed_loop(
            &setup.devices.handles,
            &setup.conv_ids,
            picker.clone(),
            ClosedLoop {
                workers,
                duration: step,
                seed: args.seed + i as u64,
            },
            i as u64 * IDS_PER_LEVEL,
            counters.clone(),
        );
        let label = format!("saturate: concurrency {workers}, {} s", step.as_secs());
        let out = harness::with_progress(&label, step, &setup, &counters, load).await;
        harness::phase(&format!(
            "concurrency {workers}: {:.0} acked/s",
            out.throughput()
        ));
        outcomes.push((workers, out));
        let throughputs: Vec<f64> = outcomes.iter().map(|(_, o)| o.throughput()).collect();
        if stopped_rising(&throughputs).is_some() {
            break;
        }
    }
    let throughputs: Vec<f64> = outcomes.iter().map(|(_, o)| o.throughput()).collect();
    let best = best_level(&throughputs);
    let peak_concurrency = outcomes[best].0;

    // All levels together, for the check and the timeline.
    let mut all = LoadOutcome {
        started: outcomes.first().and_then(|(_, o)| o.started),
        finished: outcomes.last().and_then(|(_, o)| o.finished),
        ..LoadOutcome::default()
    };
    for (_, o) in &outcomes {
        all.acks.extend_from_slice(&o.acks);
        all.scheduled += o.scheduled;
        for (k, n) in &o.errors {
            *all.errors.entry(k.clone()).or_default() += n;
        }
    }
    let (world, concluded) = harness::conclude(setup, &all.acks).await;
    let peak_acks: Vec<Ack> = outcomes[best].1.acks.clone();
    let latencies = harness::latencies(&concluded.logs, &peak_acks)?;

    let plans: Vec<BaselinePlan> = outcomes
        .iter()
        .map(|&(concurrency, _)| BaselinePlan {
            shape: Shape::Many {
                convs: world.plan.directs,
            },
            concurrency,
            duration: step,
        })
        .collect();
    let baseline = harness::baseline(args, &plans)
        .await
        .map(|r| r.map_err(|e| format!("{e:#}")));
    let level_rows: Vec<serde_json::Value> = outcomes
        .iter()
        .enumerate()
        .map(|(i, (concurrency, o))| {
            let lat = harness::latencies(&[], &o.acks).ok();
            let base = baseline
                .as_ref()
                .and_then(|b| b.as_ref().ok())
                .and_then(|b| b.get(i));
            json!({
                "concurrency": concurrency,
                "throughput_per_s": o.throughput(),
                "sends_acked": o.acks.len(),
                "errors": o.error_count(),
                "ack_latency_ms": lat.map(|l| percentiles_ms(&l.ack)),
                "baseline_tps": base.map(|b| b.tps),
                "ratio_to_baseline": base.map(|b| if b.tps > 0.0 { o.throughput() / b.tps } else { 0.0 }),
            })
        })
        .collect();
    let peak_baseline = baseline.as_ref().map(|r| {
        r.as_ref()
            .map_err(Clone::clone)
            .and_then(|v| v.get(best).ok_or_else(|| "no result".to_owned()))
    });
    let mut report = harness::report(&Common {
        scenario: "saturate",
        mode: "closed_loop",
        target_rate_per_s: None,
        world: &world,
        outcome: &all,
        concluded: &concluded,
        latencies: &latencies,
        throughput_per_s: throughputs[best],
        baseline: peak_baseline,
    });
    report["peak_concurrency"] = json!(peak_concurrency);
    report["step_s"] = json!(step.as_secs_f64());
    report["levels"] = json!(level_rows);
    report["latency_note"] = json!("latency percentiles are those of the best level");
    harness::emit(args, report, &latencies, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_double_up_to_the_maximum() {
        assert_eq!(levels(64), [1, 2, 4, 8, 16, 32, 64]);
        assert_eq!(levels(48), [1, 2, 4, 8, 16, 32, 48]);
        assert_eq!(levels(1), [1]);
    }

    #[test]
    fn the_ramp_stops_after_two_flat_levels() {
        assert_eq!(stopped_rising(&[100.0, 200.0, 390.0]), None);
        assert_eq!(stopped_rising(&[100.0, 200.0, 205.0]), None);
        assert_eq!(stopped_rising(&[100.0, 200.0, 205.0, 190.0]), Some(2));
        assert_eq!(
            stopped_rising(&[100.0, 200.0, 205.0, 260.0, 250.0]),
            None,
            "a rise resets the count"
        );
        assert_eq!(best_level(&[1.0, 3.0, 2.0]), 1);
    }
}
