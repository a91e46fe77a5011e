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
use rand::Rng;
use serde_json::{json, Value};

use crate::baseline::{BaselinePlan, BaselineResult, Shape};
use crate::harness::{self, Finished, LoadModel, Loaded, Setup};
use crate::load::{ClosedLoop, OpenLoop, SendPlan};
use crate::world::{World, WorldPlan};
use crate::BenchArgs;

/// The conversation's ceiling implied by the raw transaction: one send holds the row lock
/// from the moment the lock is granted until its commit returned, i.e. for the check, the
/// insert and the commit (and the lock statement's answer, not counted here).
fn lock_ceiling(b: &BaselineResult) -> Value {
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

pub struct HotConversation;

impl LoadModel for HotConversation {
    type Notes = ();

    fn world(&self, args: &BenchArgs, _: &mut StdRng) -> Result<WorldPlan> {
        let senders = args.senders;
        if senders < 2 {
            bail!("hot-conversation needs at least 2 senders");
        }
        Ok(WorldPlan {
            users: senders,
            online: senders,
            directs: 0,
            group_sizes: Vec::new(),
            hot_group: Some(senders),
        })
    }

    async fn load(&self, args: &BenchArgs, setup: &Setup) -> Result<Loaded<()>> {
        let senders = args.senders;
        let members = setup.world.convs[0].online.clone();
        let picker = Arc::new(move |rng: &mut StdRng| SendPlan {
            conv: 0,
            device: members[rng.gen_range(0..members.len())],
        });
        let duration = Duration::from_secs(args.duration);
        let (outcome, mode) = match args.rate {
            Some(rate) => {
                let label = format!("hot-conversation: {rate}/s into one group of {senders}");
                let cfg = OpenLoop::new(rate, duration, args.seed);
                let (out, ()) = setup.open_loop(&label, picker, cfg, async {}).await;
                (out, "open_loop")
            }
            None => {
                let label = format!("hot-conversation: {senders} senders, closed loop, one group");
                let cfg = ClosedLoop {
                    workers: senders,
                    duration,
                    seed: args.seed,
                };
                (
                    setup.closed_loop(&label, picker, cfg, 0).await,
                    "closed_loop",
                )
            }
        };
        Ok(Loaded::of("hot-conversation", mode, args.rate, outcome, ()))
    }

    /// The raw transaction on one conversation, at the concurrency the load put on it.
    fn baseline(&self, args: &BenchArgs, _: &World, loaded: &Loaded<()>) -> Vec<BaselinePlan> {
        let concurrency = match args.rate {
            Some(_) => harness::open_loop_concurrency(&loaded.outcome),
            None => args.senders,
        };
        vec![BaselinePlan {
            shape: Shape::One,
            concurrency,
            duration: harness::baseline_duration(args),
        }]
    }

    fn report(&self, args: &BenchArgs, report: &mut Value, run: &Finished<'_, ()>) -> Result<()> {
        report["senders"] = json!(args.senders);
        if let Some(Ok(runs)) = run.baseline {
            if let Some(b) = runs.first() {
                report["hot_conversation_ceiling"] = lock_ceiling(b);
            }
        }
        Ok(())
    }
}
