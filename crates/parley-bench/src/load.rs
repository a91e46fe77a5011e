//! Load generation over the devices' realtime sessions.
//!
//! Open loop ([`open_loop`]): send `i` is due at `start + i / rate`, whatever happened to the
//! sends before it. Latency counts from that due time, so a stall of the server (or of the
//! scheduler waiting for an in-flight slot) shows up in the percentiles instead of silently
//! slowing the offered load down. In-flight sends are bounded; the schedule stops at the end
//! of the duration, and sends that could not even be issued within a grace period afterwards
//! are counted as errors.
//!
//! Closed loop ([`closed_loop`]): a fixed number of workers, each sending its next message as
//! soon as the previous one was acked; latency counts from the moment of sending.
//!
//! Sends go through [`DeviceHandle::send`] (the SDK's realtime send), which resends with the
//! same `client_msg_id` after a lost connection or an unknown outcome, also on the device's
//! next gateway when it moved.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use parley_client::ClientError;
use rand::rngs::StdRng;
use rand::SeedableRng;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::devices::DeviceHandle;

/// Text of every benchmark message.
pub const BODY: &str = "benchmark message body";
/// Longest wait, after the schedule ended, for the sends still in flight.
const FINISH_WAIT_MS: u64 = 60_000;
/// Sends in flight at most in open loop: far above what a target rate needs at sane latencies
/// (1,250/s at 100 ms is 125), so it bounds memory, not the load.
pub const OPEN_LOOP_IN_FLIGHT_MAX: usize = 2_048;
/// How late after the end of its schedule an open-loop send may still be issued.
pub const OPEN_LOOP_LATE_MS_MAX: u64 = 30_000;

/// One send to make: which conversation, from which device.
#[derive(Debug, Clone, Copy)]
pub struct SendPlan {
    pub conv: u32,
    pub device: u32,
}

/// Chooses the next send.
pub type Picker = Arc<dyn Fn(&mut StdRng) -> SendPlan + Send + Sync>;

/// What an acked operation wrote: every one is an event of the log, delivered to the
/// conversation's online devices.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Op {
    /// A message, keyed by its `client_msg_id`.
    #[default]
    Send,
    /// An edit of an earlier own message, keyed like a send (docs/RELATIONS.md).
    Edit,
    /// A reaction added or taken back: an event without a request key.
    React,
}

/// An acked send (or, in the relations scenario, an edit or a reaction).
#[derive(Debug, Clone, Copy)]
pub struct Ack {
    /// The number in the message's `client_msg_id` (`m<id>`).
    pub id: u64,
    pub conv: u32,
    pub device: u32,
    pub seq: i64,
    /// When the send was due (open loop) or made (closed loop): latency counts from here.
    pub due: Instant,
    /// When it was handed to the session.
    pub issued: Instant,
    pub acked: Instant,
    /// The server answered from a committed earlier attempt (the SDK resent it).
    pub dup: bool,
    pub op: Op,
}

/// The `client_msg_id` of send `id`.
pub fn client_msg_id(id: u64) -> String {
    format!("m{id}")
}

/// Live counters, read by the progress display.
#[derive(Debug, Default)]
pub struct LoadCounters {
    pub issued: AtomicU64,
    pub acked: AtomicU64,
    pub errors: AtomicU64,
}

impl LoadCounters {
    pub fn in_flight(&self) -> u64 {
        let done = self.acked.load(Ordering::Relaxed) + self.errors.load(Ordering::Relaxed);
        self.issued.load(Ordering::Relaxed).saturating_sub(done)
    }
}

#[derive(Debug, Default)]
pub struct LoadOutcome {
    pub acks: Vec<Ack>,
    /// Failed sends by error code (or kind), after the SDK's own retries.
    pub errors: BTreeMap<String, u64>,
    /// Sends the schedule planned (open loop) or made (closed loop).
    pub scheduled: u64,
    pub started: Option<Instant>,
    /// When the last send finished.
    pub finished: Option<Instant>,
}

impl LoadOutcome {
    pub fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }

    /// Seconds from the start of the schedule to the last answer.
    pub fn elapsed_s(&self) -> f64 {
        match (self.started, self.finished) {
            (Some(s), Some(f)) => (f - s).as_secs_f64(),
            _ => 0.0,
        }
    }

    /// Acked sends per second of elapsed time.
    pub fn throughput(&self) -> f64 {
        let s = self.elapsed_s();
        if s > 0.0 {
            self.acks.len() as f64 / s
        } else {
            0.0
        }
    }

    /// Mean sends in flight (Little's law: the sum of the time each spent in flight over the
    /// elapsed time).
    pub fn mean_in_flight(&self) -> f64 {
        let s = self.elapsed_s();
        if s <= 0.0 {
            return 0.0;
        }
        let busy: f64 = self
            .acks
            .iter()
            .map(|a| (a.acked - a.issued).as_secs_f64())
            .sum();
        busy / s
    }

    /// The outcomes of runs one after the other as one: every ack and error, from the first
    /// start to the last finish.
    pub fn merged<'a>(runs: impl IntoIterator<Item = &'a LoadOutcome>) -> LoadOutcome {
        let mut all = LoadOutcome::default();
        for run in runs {
            all.started = all.started.or(run.started);
            all.finished = run.finished.or(all.finished);
            all.acks.extend_from_slice(&run.acks);
            all.scheduled += run.scheduled;
            for (kind, n) in &run.errors {
                *all.errors.entry(kind.clone()).or_default() += n;
            }
        }
        all
    }

    /// Acks per whole second since the start.
    pub fn per_second(&self) -> Vec<u64> {
        let Some(start) = self.started else {
            return Vec::new();
        };
        let mut buckets: Vec<u64> = Vec::new();
        for a in &self.acks {
            let s = (a.acked - start).as_secs() as usize;
            if buckets.len() <= s {
                buckets.resize(s + 1, 0);
            }
            buckets[s] += 1;
        }
        buckets
    }
}

#[derive(Default)]
struct Sink {
    acks: Vec<Ack>,
    errors: BTreeMap<String, u64>,
    finished: Option<Instant>,
}

pub(crate) fn error_kind(e: &ClientError) -> String {
    match e.code() {
        Some(code) => code.to_owned(),
        None => match e {
            ClientError::NoAnswer { .. } => "NO_ANSWER".into(),
            ClientError::Disconnected { .. } => "DISCONNECTED".into(),
            ClientError::SessionStopped { .. } => "SESSION_STOPPED".into(),
            ClientError::Timeout(_) => "TIMEOUT".into(),
            _ => "CLIENT_ERROR".into(),
        },
    }
}

/// One send through `handle`, recorded in `sink`.
async fn send_one(
    handle: DeviceHandle,
    conv_id: Arc<str>,
    plan: SendPlan,
    id: u64,
    due: Instant,
    sink: Arc<Mutex<Sink>>,
    counters: Arc<LoadCounters>,
) {
    let issued = Instant::now();
    counters.issued.fetch_add(1, Ordering::Relaxed);
    let answer = handle.send(&conv_id, &client_msg_id(id), BODY).await;
    let now = Instant::now();
    let mut sink = sink.lock().unwrap_or_else(PoisonError::into_inner);
    sink.finished = Some(sink.finished.map_or(now, |f| f.max(now)));
    match answer {
        Ok(ack) => {
            counters.acked.fetch_add(1, Ordering::Relaxed);
            sink.acks.push(Ack {
                id,
                conv: plan.conv,
                device: plan.device,
                seq: ack.seq,
                due,
                issued,
                acked: now,
                dup: ack.dup,
                op: Op::Send,
            });
        }
        Err(e) => {
            counters.errors.fetch_add(1, Ordering::Relaxed);
            *sink.errors.entry(error_kind(&e)).or_default() += 1;
        }
    }
}

fn finish(sink: Arc<Mutex<Sink>>, scheduled: u64, started: Instant) -> LoadOutcome {
    let sink = std::mem::take(&mut *sink.lock().unwrap_or_else(PoisonError::into_inner));
    LoadOutcome {
        acks: sink.acks,
        errors: sink.errors,
        scheduled,
        started: Some(started),
        finished: sink.finished.or(Some(started)),
    }
}

async fn wait_all(tasks: &mut JoinSet<()>, sink: &Mutex<Sink>) {
    let all = async { while tasks.join_next().await.is_some() {} };
    if tokio::time::timeout(Duration::from_millis(FINISH_WAIT_MS), all)
        .await
        .is_err()
    {
        let unfinished = tasks.len() as u64;
        tasks.abort_all();
        let mut sink = sink.lock().unwrap_or_else(PoisonError::into_inner);
        *sink.errors.entry("UNFINISHED".into()).or_default() += unfinished;
    }
}

/// Settings of an open-loop run.
#[derive(Debug, Clone, Copy)]
pub struct OpenLoop {
    pub rate_per_s: f64,
    pub duration: Duration,
    /// Sends in flight at most; the scheduler waits for a slot (and the wait counts in the
    /// latency of the sends that waited).
    pub in_flight_max: usize,
    /// How late after the end of the schedule a send may still be issued.
    pub late_max: Duration,
    pub seed: u64,
}

impl OpenLoop {
    /// `rate_per_s` for `duration`, with the usual bounds on sends in flight and lateness.
    pub fn new(rate_per_s: f64, duration: Duration, seed: u64) -> Self {
        Self {
            rate_per_s,
            duration,
            in_flight_max: OPEN_LOOP_IN_FLIGHT_MAX,
            late_max: Duration::from_millis(OPEN_LOOP_LATE_MS_MAX),
            seed,
        }
    }
}

/// The schedule of an open loop: operation `i` is due at `started + i / rate`, and it waits for
/// one of `in_flight_max` slots, at most until the schedule's end plus `late_max`.
pub(crate) struct Pacer {
    /// Operations the schedule holds.
    pub total: u64,
    pub started: Instant,
    interval: Duration,
    slots: Arc<Semaphore>,
    give_up: Instant,
}

impl Pacer {
    /// A schedule of `cfg` starting now.
    pub fn new(cfg: &OpenLoop) -> Self {
        let started = Instant::now();
        Self {
            total: (cfg.rate_per_s * cfg.duration.as_secs_f64()).floor() as u64,
            started,
            interval: Duration::from_secs_f64(1.0 / cfg.rate_per_s.max(1e-9)),
            slots: Arc::new(Semaphore::new(cfg.in_flight_max.max(1))),
            give_up: started + cfg.duration + cfg.late_max,
        }
    }

    /// Waits until operation `i` is due and a slot is free: its due time and the slot, or
    /// `None` once the schedule gave up waiting (the rest are not issued).
    pub async fn next(&self, i: u64) -> Option<(Instant, tokio::sync::OwnedSemaphorePermit)> {
        let due = self.started + self.interval.mul_f64(i as f64);
        if due > Instant::now() {
            tokio::time::sleep_until(due.into()).await;
        }
        let permit = tokio::select! {
            permit = self.slots.clone().acquire_owned() => permit.ok(),
            () = tokio::time::sleep_until(self.give_up.into()) => None,
        };
        permit.map(|p| (due, p))
    }
}

/// Sends at a fixed rate, whatever the answers do. `first_id` numbers the sends.
pub async fn open_loop(
    handles: &[DeviceHandle],
    conv_ids: &[Arc<str>],
    picker: Picker,
    cfg: OpenLoop,
    first_id: u64,
    counters: Arc<LoadCounters>,
) -> LoadOutcome {
    let pacer = Pacer::new(&cfg);
    let total = pacer.total;
    let sink: Arc<Mutex<Sink>> = Arc::default();
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
        let (handle, conv_id) = (
            handles[plan.device as usize].clone(),
            conv_ids[plan.conv as usize].clone(),
        );
        let (sink, counters) = (sink.clone(), counters.clone());
        tasks.spawn(async move {
            send_one(handle, conv_id, plan, first_id + i, due, sink, counters).await;
            drop(permit);
        });
    }
    wait_all(&mut tasks, &sink).await;
    finish(sink, total, started)
}

/// Settings of a closed-loop run.
#[derive(Debug, Clone, Copy)]
pub struct ClosedLoop {
    pub workers: usize,
    pub duration: Duration,
    pub seed: u64,
}

/// `workers` senders, each with one send in flight, for `duration`. Worker `w` numbers its
/// sends from `first_id + w * ids_per_worker`.
pub async fn closed_loop(
    handles: &[DeviceHandle],
    conv_ids: &[Arc<str>],
    picker: Picker,
    cfg: ClosedLoop,
    first_id: u64,
    counters: Arc<LoadCounters>,
) -> LoadOutcome {
    let sink: Arc<Mutex<Sink>> = Arc::default();
    let made = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let stop = started + cfg.duration;
    let mut tasks = JoinSet::new();
    for w in 0..cfg.workers {
        let (handles, conv_ids) = (handles.to_vec(), conv_ids.to_vec());
        let (picker, sink, counters, made) =
            (picker.clone(), sink.clone(), counters.clone(), made.clone());
        let seed = cfg.seed.wrapping_mul(1_000_003).wrapping_add(w as u64);
        tasks.spawn(async move {
            let mut rng = StdRng::seed_from_u64(seed);
            while Instant::now() < stop {
                let plan = picker(&mut rng);
                let id = first_id + made.fetch_add(1, Ordering::Relaxed);
                let handle = handles[plan.device as usize].clone();
                let conv_id = conv_ids[plan.conv as usize].clone();
                let due = Instant::now();
                send_one(
                    handle,
                    conv_id,
                    plan,
                    id,
                    due,
                    sink.clone(),
                    counters.clone(),
                )
                .await;
            }
        });
    }
    wait_all(&mut tasks, &sink).await;
    finish(sink, made.load(Ordering::Relaxed), started)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throughput_counts_acks_over_the_elapsed_time() {
        let start = Instant::now();
        let ack = |ms: u64| Ack {
            id: ms,
            conv: 0,
            device: 0,
            seq: 1,
            due: start,
            issued: start,
            acked: start + Duration::from_millis(ms),
            dup: false,
            op: Op::Send,
        };
        let out = LoadOutcome {
            acks: vec![ack(100), ack(1_500), ack(2_000)],
            started: Some(start),
            finished: Some(start + Duration::from_secs(2)),
            ..LoadOutcome::default()
        };
        assert!((out.throughput() - 1.5).abs() < 1e-9);
        assert_eq!(out.per_second(), vec![1, 1, 1]);
        // 0.1 + 1.5 + 2.0 seconds in flight over 2 seconds.
        assert!((out.mean_in_flight() - 1.8).abs() < 1e-9);
    }

    #[test]
    fn merged_runs_span_from_the_first_start_to_the_last_finish() {
        let start = Instant::now();
        let at = |s: u64| Some(start + Duration::from_secs(s));
        let ack = |id: u64| Ack {
            id,
            conv: 0,
            device: 0,
            seq: id as i64,
            due: start,
            issued: start,
            acked: start,
            dup: false,
            op: Op::Send,
        };
        let first = LoadOutcome {
            acks: vec![ack(1), ack(2)],
            errors: BTreeMap::from([("UNAVAILABLE".into(), 1)]),
            scheduled: 3,
            started: at(0),
            finished: at(3),
        };
        let second = LoadOutcome {
            acks: vec![ack(3)],
            errors: BTreeMap::from([("UNAVAILABLE".into(), 2), ("TIMEOUT".into(), 1)]),
            scheduled: 4,
            started: at(3),
            finished: at(6),
        };
        let all = LoadOutcome::merged([&first, &second]);
        assert_eq!(all.acks.iter().map(|a| a.id).collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(all.scheduled, 7);
        assert_eq!((all.started, all.finished), (at(0), at(6)));
        assert_eq!(
            all.errors,
            BTreeMap::from([("UNAVAILABLE".into(), 3), ("TIMEOUT".into(), 1)])
        );
        assert_eq!(LoadOutcome::merged([]).elapsed_s(), 0.0);
    }
}
