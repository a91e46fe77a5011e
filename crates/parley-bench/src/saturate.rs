//! Scenario `saturate`: closed loop over many direct chats with rising concurrency (1, 2, 4, …
//! up to `--max-concurrency`) until throughput stops rising: two levels in a row that do not
//! beat the best so far by 5 %. The report's throughput is the best level's; the baseline runs
//! the raw send transaction over as many direct chats at every concurrency reached, and the
//! ratio compares the two at the best level's concurrency.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use rand::rngs::StdRng;
use rand::Rng;
use serde_json::{json, Value};

use crate::baseline::{BaselinePlan, Shape};
use crate::conclude::latencies;
use crate::harness::{Finished, LoadModel, Loaded, Setup};
use crate::load::{ClosedLoop, LoadOutcome, Picker, SendPlan};
use crate::progress::phase;
use crate::report::percentiles_ms;
use crate::world::{ConvClass, World, WorldPlan};
use crate::BenchArgs;

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

/// A send to a random direct chat from one of its two members.
fn picker(world: &World) -> Picker {
    let directs = world.of_class(ConvClass::Direct);
    let online_of: Vec<Vec<u32>> = world.convs.iter().map(|c| c.online.clone()).collect();
    Arc::new(move |rng: &mut StdRng| {
        let conv = directs[rng.gen_range(0..directs.len())];
        let members = &online_of[conv as usize];
        SendPlan {
            conv,
            device: members[rng.gen_range(0..members.len())],
        }
    })
}

/// The levels the ramp ran, each with its concurrency, and how long each lasted.
pub struct Ramp {
    levels: Vec<(usize, LoadOutcome)>,
    step: Duration,
}

pub struct Saturate;

impl LoadModel for Saturate {
    type Notes = Ramp;

    fn world(&self, args: &BenchArgs, _: &mut StdRng) -> Result<WorldPlan> {
        let users = args.users.unwrap_or(USERS_DEFAULT);
        let online = args.online.unwrap_or(users).min(users);
        Ok(WorldPlan {
            users,
            online,
            directs: online.min(online * (online - 1) / 2),
            group_sizes: Vec::new(),
            hot_group: None,
        })
    }

    /// Raises the concurrency level by level until the throughput stops rising. Every send
    /// is verified; the latencies and the comparison are the best level's.
    async fn load(&self, args: &BenchArgs, setup: &Setup) -> Result<Loaded<Ramp>> {
        let picker = picker(&setup.world);
        let levels = levels(args.max_concurrency);
        let step = STEP_MIN.max(Duration::from_secs(args.duration) / levels.len() as u32);
        let mut ran: Vec<(usize, LoadOutcome)> = Vec::new();
        for (i, &workers) in levels.iter().enumerate() {
            let cfg = ClosedLoop {
                workers,
                duration: step,
                seed: args.seed + i as u64,
            };
            let label = format!("saturate: concurrency {workers}, {} s", step.as_secs());
            let out = setup
                .closed_loop(&label, picker.clone(), cfg, i as u64 * IDS_PER_LEVEL)
                .await;
            phase(&format!(
                "concurrency {workers}: {:.0} acked/s",
                out.throughput()
            ));
            ran.push((workers, out));
            if stopped_rising(&throughputs(&ran)).is_some() {
                break;
            }
        }
        let best = best_level(&throughputs(&ran));
        let all = LoadOutcome::merged(ran.iter().map(|(_, o)| o));
        let mut loaded = Loaded::of(
            "saturate",
            "closed_loop",
            None,
            all,
            Ramp { levels: ran, step },
        );
        loaded.measured = Some(loaded.notes.levels[best].1.acks.clone());
        loaded.throughput_per_s = loaded.notes.levels[best].1.throughput();
        loaded.compared_run = best;
        Ok(loaded)
    }

    /// The raw transaction over as many direct chats, at every concurrency the ramp reached.
    fn baseline(&self, _: &BenchArgs, world: &World, loaded: &Loaded<Ramp>) -> Vec<BaselinePlan> {
        let ramp = &loaded.notes;
        ramp.levels
            .iter()
            .map(|&(concurrency, _)| BaselinePlan {
                shape: Shape::Many {
                    convs: world.plan.directs,
                },
                concurrency,
                duration: ramp.step,
            })
            .collect()
    }

    fn report(&self, _: &BenchArgs, report: &mut Value, run: &Finished<'_, Ramp>) -> Result<()> {
        let ramp = &run.loaded.notes;
        let base = run.baseline.and_then(|b| b.as_ref().ok());
        let level_rows: Vec<Value> = ramp
            .levels
            .iter()
            .enumerate()
            .map(|(i, (concurrency, o))| {
                let lat = latencies(&[], &o.acks).ok();
                let base = base.and_then(|b| b.get(i));
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
        report["peak_concurrency"] = json!(ramp.levels[run.loaded.compared_run].0);
        report["step_s"] = json!(ramp.step.as_secs_f64());
        report["levels"] = json!(level_rows);
        report["latency_note"] = json!("latency percentiles are those of the best level");
        Ok(())
    }
}

fn throughputs(levels: &[(usize, LoadOutcome)]) -> Vec<f64> {
    levels.iter().map(|(_, o)| o.throughput()).collect()
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
