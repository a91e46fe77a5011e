//! Scenario `relations`: the seed's peak (`seed-peak`'s world and rate) twice in one run,
//! first with plain sends only, then with 20 % of the operations reactions and 5 % edits of
//! earlier own messages (docs/RELATIONS.md), beside 75 % plain sends. The report compares the
//! ack latency of the two halves against the same server and world: the mixed half should
//! hold the rate with an ack p99 within 20 % of the plain half's. A warm-up of plain sends
//! (`--duration`, at most 10 s) comes first and is measured by neither half.
//!
//! A reaction toggles: a device that has reacted with the key to the message takes it back
//! (an `unreact`), otherwise adds it, so every operation writes one event. Its target is one
//! of the last messages acked in the conversation, its key one of a few emoji. An edit goes
//! to one of the last messages the device itself sent in the conversation. Every operation is
//! an event that each online member device receives; all are drained and verified like sends
//! (an edit through its request key, a reaction as an event of the final log).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::Result;
use hdrhistogram::Histogram;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use tokio::task::JoinSet;

use crate::devices::DeviceHandle;
use crate::harness::{Finished, LoadModel, Loaded, Setup};
use crate::load::{
    client_msg_id, error_kind, open_loop, Ack, LoadCounters, LoadOutcome, Op, OpenLoop, Pacer,
    Picker, SendPlan, BODY,
};
use crate::progress::with_progress;
use crate::report::{micros_histogram, percentiles_ms, record};
use crate::seed_peak;
use crate::BenchArgs;

/// Share of the mixed half's operations that are reactions (added or taken back) …
pub const SHARE_REACT: f64 = 0.20;
/// … and edits of an earlier own message; the rest are plain sends.
pub const SHARE_EDIT: f64 = 0.05;
/// The mixed half holds when its ack p99 is at most this multiple of the plain half's.
pub const ACK_P99_RATIO_MAX: f64 = 1.20;
/// Reaction keys drawn from.
const KEYS: [&str; 6] = ["👍", "❤️", "😂", "🎉", "👀", "🙏"];
/// A reaction's target is one of this many last messages acked in its conversation, an
/// edit's one of the last this many its device sent there.
const RECENT: usize = 32;
/// The ids of the mixed half's operations start here, above any plain send's …
const MIXED_FIRST_ID: u64 = 1 << 40;
/// … and those of the warm-up's sends here.
const WARM_UP_FIRST_ID: u64 = 1 << 41;
/// Longest warm-up before the plain half, in seconds (at most `--duration`).
const WARM_UP_S_MAX: u64 = 10;

pub struct Relations;

/// The messages acked so far, for the targets of reactions and edits.
#[derive(Default)]
struct Targets {
    /// Per conversation, the last acked messages' seqs.
    by_conv: HashMap<u32, VecDeque<i64>>,
    /// Per (conversation, device), the last messages the device sent there.
    own: HashMap<(u32, u32), VecDeque<i64>>,
    /// `(conv, target seq, device, key)` reactions standing now.
    reacted: HashSet<(u32, i64, u32, usize)>,
}

impl Targets {
    fn note_send(&mut self, conv: u32, device: u32, seq: i64) {
        for list in [
            self.by_conv.entry(conv).or_default(),
            self.own.entry((conv, device)).or_default(),
        ] {
            list.push_back(seq);
            if list.len() > RECENT {
                list.pop_front();
            }
        }
    }

    fn pick(list: Option<&VecDeque<i64>>, rng: &mut StdRng) -> Option<i64> {
        let list = list.filter(|l| !l.is_empty())?;
        Some(list[rng.gen_range(0..list.len())])
    }
}

/// What one operation of the mixed half does.
#[derive(Debug, Clone, Copy)]
enum Action {
    Send,
    Edit {
        target: i64,
    },
    React {
        target: i64,
        key: usize,
        remove: bool,
    },
}

/// What the mixed half reports beside the acks.
#[derive(Default)]
struct MixedNotes {
    /// Operations chosen as reactions or edits that found no target yet and sent instead.
    fell_back_to_send: u64,
    /// Reactions answered `changed: false` (a resend after a committed attempt).
    unchanged_reactions: u64,
}

pub struct Notes {
    plain: LoadOutcome,
    mixed_acks: Vec<Ack>,
    mixed: MixedNotes,
    rate: f64,
}

impl LoadModel for Relations {
    type Notes = Notes;

    fn world(&self, args: &BenchArgs, rng: &mut StdRng) -> Result<crate::world::WorldPlan> {
        seed_peak::SeedPeak.world(args, rng)
    }

    async fn load(&self, args: &BenchArgs, setup: &Setup) -> Result<Loaded<Notes>> {
        let rate = args.rate.unwrap_or(seed_peak::RATE_DEFAULT);
        let duration = Duration::from_secs(args.duration);
        let picker = seed_peak::picker(&setup.world);
        // A warm-up of plain sends first, measured by neither half: the first seconds after
        // the devices connect are slower (cold caches and pools), which would flatter the
        // half that comes second.
        let warm_s = args.duration.min(WARM_UP_S_MAX);
        let warm_cfg = OpenLoop::new(rate, Duration::from_secs(warm_s), args.seed.wrapping_add(2));
        let warm_counters = Arc::new(LoadCounters::default());
        let warm_label = format!("relations, warm-up: {rate}/s for {warm_s} s, not measured");
        let warm_up = open_loop(
            &setup.devices.handles,
            &setup.conv_ids,
            picker.clone(),
            warm_cfg,
            WARM_UP_FIRST_ID,
            warm_counters.clone(),
        );
        let warm = with_progress(
            &warm_label,
            warm_cfg.duration,
            &setup.devices.counters,
            &warm_counters,
            warm_up,
        )
        .await;
        let cfg = OpenLoop::new(rate, duration, args.seed);
        let label = format!(
            "relations, plain half: {rate}/s for {} s, open loop",
            args.duration
        );
        let (plain, ()) = setup.open_loop(&label, picker.clone(), cfg, async {}).await;
        let targets = Arc::new(Mutex::new(Targets::default()));
        {
            let mut t = targets.lock().unwrap_or_else(PoisonError::into_inner);
            for a in warm.acks.iter().chain(&plain.acks) {
                t.note_send(a.conv, a.device, a.seq);
            }
        }
        let label = format!(
            "relations, mixed half ({:.0} % reactions, {:.0} % edits): {rate}/s for {} s",
            SHARE_REACT * 100.0,
            SHARE_EDIT * 100.0,
            args.duration
        );
        let counters = Arc::new(LoadCounters::default());
        let cfg = OpenLoop::new(rate, duration, args.seed.wrapping_add(1));
        let mixed = mixed_loop(setup, picker, cfg, targets, counters.clone());
        let (mixed, notes) =
            with_progress(&label, duration, &setup.devices.counters, &counters, mixed).await;
        let all = LoadOutcome::merged([&warm, &plain, &mixed]);
        // The report's rate and latencies are the mixed half's; the plain half is beside it.
        Ok(Loaded {
            scenario: "relations",
            mode: "open_loop",
            target_rate_per_s: Some(rate),
            throughput_per_s: mixed.throughput(),
            measured: Some(mixed.acks.clone()),
            compared_run: 0,
            outcome: all,
            notes: Notes {
                plain,
                mixed_acks: mixed.acks,
                mixed: notes,
                rate,
            },
        })
    }

    fn report(&self, _: &BenchArgs, report: &mut Value, run: &Finished<'_, Notes>) -> Result<()> {
        let notes = &run.loaded.notes;
        let plain = ack_histogram(notes.plain.acks.iter())?;
        let mixed_all = ack_histogram(notes.mixed_acks.iter())?;
        let of = |op: Op| ack_histogram(notes.mixed_acks.iter().filter(move |a| a.op == op));
        let (sends, edits, reacts) = (of(Op::Send)?, of(Op::Edit)?, of(Op::React)?);
        let p = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1000.0;
        let ratio = |q: f64| {
            let base = p(&plain, q);
            (base > 0.0).then(|| p(&mixed_all, q) / base)
        };
        let p99_ratio = ratio(0.99);
        let plain_throughput = notes.plain.throughput();
        let plain_held = notes.plain.error_count() == 0
            && notes.plain.acks.len() as u64 == notes.plain.scheduled
            && plain_throughput >= 0.99 * notes.rate;
        let held = report["rate_held"].as_bool().unwrap_or(false)
            && p99_ratio.is_some_and(|r| r <= ACK_P99_RATIO_MAX);
        report["relations"] = json!({
            "mix": {"send": 1.0 - SHARE_REACT - SHARE_EDIT, "react": SHARE_REACT, "edit": SHARE_EDIT},
            "plain": {
                "throughput_per_s": plain_throughput,
                "rate_held": plain_held,
                "sends_acked": notes.plain.acks.len(),
                "errors_by_kind": notes.plain.errors,
                "ack_latency_ms": percentiles_ms(&plain),
            },
            "mixed": {
                "ops_acked": notes.mixed_acks.len(),
                "ack_latency_ms": percentiles_ms(&mixed_all),
                "send_ack_latency_ms": percentiles_ms(&sends),
                "edit_ack_latency_ms": percentiles_ms(&edits),
                "react_ack_latency_ms": percentiles_ms(&reacts),
                "fell_back_to_send": notes.mixed.fell_back_to_send,
                "unchanged_reactions": notes.mixed.unchanged_reactions,
            },
            "ack_p50_ratio_mixed_to_plain": ratio(0.50),
            "ack_p99_ratio_mixed_to_plain": p99_ratio,
            "ack_p99_ratio_max": ACK_P99_RATIO_MAX,
            "held": held,
        });
        report["send_shares"] = json!({
            "direct": seed_peak::SHARE_DIRECT,
            "groups": seed_peak::SHARE_GROUPS,
            "hot_group": 1.0 - seed_peak::SHARE_DIRECT - seed_peak::SHARE_GROUPS,
        });
        Ok(())
    }
}

fn ack_histogram<'a>(acks: impl Iterator<Item = &'a Ack>) -> Result<Histogram<u64>> {
    let mut h = micros_histogram()?;
    for a in acks {
        record(&mut h, a.acked.saturating_duration_since(a.due));
    }
    Ok(h)
}

/// Chooses what operation `i` of the mixed half does, from `plan` (the picker's conversation
/// and device) and the targets known now; a reaction's toggle is taken here, before it is
/// issued, so two operations of one device never race for one reaction.
fn choose(plan: SendPlan, targets: &Mutex<Targets>, rng: &mut StdRng) -> (Action, bool) {
    let x: f64 = rng.gen();
    let mut t = targets.lock().unwrap_or_else(PoisonError::into_inner);
    if x < SHARE_REACT {
        if let Some(target) = Targets::pick(t.by_conv.get(&plan.conv), rng) {
            let key = rng.gen_range(0..KEYS.len());
            let standing = (plan.conv, target, plan.device, key);
            let remove = !t.reacted.insert(standing);
            if remove {
                t.reacted.remove(&standing);
            }
            return (
                Action::React {
                    target,
                    key,
                    remove,
                },
                false,
            );
        }
        return (Action::Send, true);
    }
    if x < SHARE_REACT + SHARE_EDIT {
        if let Some(target) = Targets::pick(t.own.get(&(plan.conv, plan.device)), rng) {
            return (Action::Edit { target }, false);
        }
        return (Action::Send, true);
    }
    (Action::Send, false)
}

struct MixedSink {
    acks: Vec<Ack>,
    errors: std::collections::BTreeMap<String, u64>,
    finished: Option<Instant>,
    notes: MixedNotes,
}

/// The mixed half in open loop, as [`crate::load::open_loop`] runs sends: operation `i` is due
/// at `start + i / rate` and its latency counts from then.
async fn mixed_loop(
    setup: &Setup,
    picker: Picker,
    cfg: OpenLoop,
    targets: Arc<Mutex<Targets>>,
    counters: Arc<LoadCounters>,
) -> (LoadOutcome, MixedNotes) {
    let pacer = Pacer::new(&cfg);
    let total = pacer.total;
    let sink = Arc::new(Mutex::new(MixedSink {
        acks: Vec::new(),
        errors: Default::default(),
        finished: None,
        notes: MixedNotes::default(),
    }));
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let mut tasks = JoinSet::new();
    let started = pacer.started;
    for i in 0..total {
        let Some((due, permit)) = pacer.next(i).await else {
            let mut s = sink.lock().unwrap_or_else(PoisonError::into_inner);
            *s.errors.entry("NOT_ISSUED".into()).or_default() += total - i;
            break;
        };
        let plan = picker(&mut rng);
        let (action, fell_back) = choose(plan, &targets, &mut rng);
        if fell_back {
            sink.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .notes
                .fell_back_to_send += 1;
        }
        let handle = setup.devices.handles[plan.device as usize].clone();
        let conv_id = setup.conv_ids[plan.conv as usize].clone();
        let (sink, counters, targets) = (sink.clone(), counters.clone(), targets.clone());
        let id = MIXED_FIRST_ID + i;
        tasks.spawn(async move {
            let op = Op1 {
                handle,
                conv_id,
                plan,
                id,
                due,
                action,
            };
            op.run(&sink, &counters, &targets).await;
            drop(permit);
        });
    }
    let all = async { while tasks.join_next().await.is_some() {} };
    if tokio::time::timeout(Duration::from_secs(60), all)
        .await
        .is_err()
    {
        let unfinished = tasks.len() as u64;
        tasks.abort_all();
        let mut s = sink.lock().unwrap_or_else(PoisonError::into_inner);
        *s.errors.entry("UNFINISHED".into()).or_default() += unfinished;
    }
    let mut s = sink.lock().unwrap_or_else(PoisonError::into_inner);
    let outcome = LoadOutcome {
        acks: std::mem::take(&mut s.acks),
        errors: std::mem::take(&mut s.errors),
        scheduled: total,
        started: Some(started),
        finished: s.finished.or(Some(started)),
    };
    (outcome, std::mem::take(&mut s.notes))
}

/// One operation of the mixed half.
struct Op1 {
    handle: DeviceHandle,
    conv_id: Arc<str>,
    plan: SendPlan,
    id: u64,
    due: Instant,
    action: Action,
}

impl Op1 {
    async fn run(self, sink: &Mutex<MixedSink>, counters: &LoadCounters, targets: &Mutex<Targets>) {
        let issued = Instant::now();
        counters.issued.fetch_add(1, Ordering::Relaxed);
        let key = client_msg_id(self.id);
        let conv = &*self.conv_id;
        // (seq of the event written, dup, op); `None` seq: nothing written.
        let answer = match self.action {
            Action::Send => self
                .handle
                .send(conv, &key, BODY)
                .await
                .map(|a| (Some(a.seq), a.dup, Op::Send)),
            Action::Edit { target } => self
                .handle
                .current()
                .edit(conv, target, &key, &format!("{BODY} (edited {})", self.id))
                .await
                .map(|a| (Some(a.seq), a.dup, Op::Edit)),
            Action::React {
                target,
                key,
                remove,
            } => {
                let h = self.handle.current();
                let ack = if remove {
                    h.unreact(conv, target, KEYS[key]).await
                } else {
                    h.react(conv, target, KEYS[key]).await
                };
                // An unchanged answer comes from a resend after a committed attempt: the
                // event exists, but only an added reaction names its seq.
                ack.map(|a| {
                    (
                        if a.changed || !remove { a.seq } else { None },
                        !a.changed,
                        Op::React,
                    )
                })
            }
        };
        let now = Instant::now();
        let mut s = sink.lock().unwrap_or_else(PoisonError::into_inner);
        s.finished = Some(s.finished.map_or(now, |f| f.max(now)));
        match answer {
            Ok((Some(seq), dup, op)) => {
                counters.acked.fetch_add(1, Ordering::Relaxed);
                if op == Op::React && dup {
                    s.notes.unchanged_reactions += 1;
                }
                s.acks.push(Ack {
                    id: self.id,
                    conv: self.plan.conv,
                    device: self.plan.device,
                    seq,
                    due: self.due,
                    issued,
                    acked: now,
                    dup,
                    op,
                });
                if op == Op::Send {
                    targets
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .note_send(self.plan.conv, self.plan.device, seq);
                }
            }
            Ok((None, _, _)) => {
                counters.errors.fetch_add(1, Ordering::Relaxed);
                s.notes.unchanged_reactions += 1;
                *s.errors.entry("UNREACT_SEQ_UNKNOWN".into()).or_default() += 1;
            }
            Err(e) => {
                counters.errors.fetch_add(1, Ordering::Relaxed);
                *s.errors.entry(error_kind(&e)).or_default() += 1;
            }
        }
    }
}
