//! The push scenario (`--scenario push`; docs/PERFORMANCE.md, "Offline notifications: push"):
//! offline notifications to many devices that hold no socket, delivered by Web Push to a push
//! service in this process (`parley_push::receiver::TestPushService`, a real HTTP server on
//! 127.0.0.1 that checks each request's VAPID token and decrypts its payload).
//!
//! `--users` users (10,000 by default), each with one device, in groups of
//! `--push-group-size` (100) whose first member sends. No device connects, so every member
//! device is offline. In one run, against one server:
//!
//! 1. **Baseline**: every group's sender sends `--push-messages` messages, round robin over the
//!    groups, `--concurrency` in flight, while no device has a push target: the send throughput
//!    and the server's CPU without notifications (the outbox rows are still written and
//!    expanded to nobody).
//! 2. Every device registers a Web Push subscription of the push service
//!    (`Client::register_web_push`); the server must run with `--push-allow-http`.
//! 3. **Burst**: the same sends again, now with every member device owed a notification. The
//!    send throughput against the baseline's; notifications counted as they arrive at the push
//!    service, until every device has one for the latest seq of its group; notifications per
//!    second (first to last arrival); time from each send's ack (its commit) to the arrival of
//!    the notification naming its `(conv_id, seq)`; the server's CPU time (`/proc/<pid>/stat`,
//!    `--server-pid`) per notification, gross and net of the baseline's.
//! 4. **Paced**: `--push-paced` single messages, one group after another, each waited for at
//!    every member device: commit to notification with an idle pipeline.
//!
//! Coalescing: the server is meant to run with `--push-coalesce-ms 0`, so that the only
//! merging is the store's own (a device's pending notification of a conversation takes the
//! newer seq while it waits in the queue). The bench cannot read the server's interval; it
//! reports the shortest gap it saw between two notifications of one device and conversation,
//! which the interval bounds from below.
//!
//! The check: every member device (the sender's excepted) got a notification for the latest
//! seq of its group, none got the same `(conv_id, seq)` twice, every notification names a seq
//! the run sent into that device's group, each is signed with the server's VAPID key
//! (`vapid_key()`), the push service refused nothing, and every paced message reached every
//! member device.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use futures::{StreamExt, TryStreamExt};
use hdrhistogram::Histogram;
use parley_client::Client;
use parley_push::receiver::{Received, TestPushService};
use serde_json::{json, Value};

use crate::cpu::{CpuReadings, CpuSpent};
use crate::fixtures::bounded;
use crate::media::load_average;
use crate::online_groups::OnlineGroups;
use crate::progress::phase;
use crate::report::{micros_histogram, percentiles_ms, publish, record};
use crate::server_metrics::PushCounters;
use crate::target::Target;
use crate::BenchArgs;

/// Users (one device each) unless `--users` says otherwise.
pub const USERS_DEFAULT: usize = 10_000;
/// Pause after the baseline's sends, inside its CPU window: the worker expands their outbox
/// rows (to nobody) before any device registers, so none of them can turn into a notification.
const BASELINE_SETTLE_MS: u64 = 2_000;
/// Pause after the registrations, so their writes are over before the burst's window opens.
const REGISTER_SETTLE_MS: u64 = 1_000;
/// How often the drain looks at the push service's request counter (an atomic).
const DRAIN_POLL_MS: u64 = 20;
/// Arrivals quiet for this long prompt a full check of what arrived.
const DRAIN_QUIET_MS: u64 = 300;
/// A full check at least this often while notifications still arrive.
const DRAIN_CHECK_EVERY_MS: u64 = 5_000;
/// The drain gives up when nothing arrived for this long.
const DRAIN_STALL_MS: u64 = 30_000;
/// Longest drain of the burst.
const DRAIN_MAX_MS: u64 = 900_000;
/// Longest wait for one paced message's notifications.
const PACED_TIMEOUT_MS: u64 = 30_000;
/// How often a paced message's wait looks at the request counter.
const PACED_POLL_MS: u64 = 2;
/// Wait after the last expected notification before the final count: stragglers and
/// duplicates would arrive in it.
const GRACE_MS: u64 = 1_500;

/// The options of the push scenario; the users are `--users`, the sends in flight
/// `--concurrency`.
#[derive(Args, Debug, Clone)]
pub struct PushArgs {
    /// Members of each group, every one with a device registered for Web Push (push).
    #[arg(long = "push-group-size", default_value_t = 100)]
    pub push_group_size: usize,
    /// Messages each group's sender sends in the baseline and again in the burst (push).
    #[arg(long = "push-messages", default_value_t = 10)]
    pub push_messages: usize,
    /// Messages sent one at a time after the burst, each waited for at every member device
    /// (push).
    #[arg(long = "push-paced", default_value_t = 20)]
    pub push_paced: usize,
}

/// One acked send.
#[derive(Clone, Copy)]
struct Sent {
    group: usize,
    seq: i64,
    acked: Instant,
}

/// The sends of one phase.
struct Sends {
    sent: Vec<Sent>,
    wall: Duration,
    ack: Histogram<u64>,
}

impl Sends {
    fn per_s(&self) -> f64 {
        self.sent.len() as f64 / self.wall.as_secs_f64().max(1e-9)
    }
}

/// Where members and groups are: member `i` is device `d{i}` of the push service, in group
/// `i / group_size`, whose sender is its first member.
struct Layout {
    group_size: usize,
    conv_index: HashMap<String, usize>,
}

impl Layout {
    fn new(groups: &OnlineGroups) -> Self {
        Layout {
            group_size: groups.group_size,
            conv_index: groups
                .conv_ids
                .iter()
                .enumerate()
                .map(|(k, c)| (c.clone(), k))
                .collect(),
        }
    }

    fn groups(&self) -> usize {
        self.conv_index.len()
    }

    /// Member devices owed notifications: every member but each group's sender.
    fn receivers(&self) -> usize {
        self.groups() * (self.group_size - 1)
    }

    fn is_sender(&self, member: usize) -> bool {
        member.is_multiple_of(self.group_size)
    }
}

fn subscription_name(member: usize) -> String {
    format!("d{member}")
}

fn member_of(name: &str) -> Option<usize> {
    name.strip_prefix('d')?.parse().ok()
}

/// `(member, conv_id, seq)` of a notification, when its name and payload say so.
fn key_of(r: &Received) -> Option<(usize, &str, i64)> {
    Some((
        member_of(&r.name)?,
        r.payload["conv_id"].as_str()?,
        r.payload["seq"].as_i64()?,
    ))
}

pub async fn run(args: &BenchArgs, target: &Target) -> Result<()> {
    let p = &args.push;
    let users = args.users.unwrap_or(USERS_DEFAULT);
    if p.push_group_size < 2
        || users == 0
        || !users.is_multiple_of(p.push_group_size)
        || p.push_messages == 0
    {
        bail!("--users must be a positive multiple of --push-group-size (at least 2), and --push-messages positive");
    }
    target.check_ready().await?;
    let load_before = load_average();
    let service = TestPushService::start()
        .await
        .context("starting the push service")?;
    let groups = OnlineGroups::create(
        args,
        target,
        "pn",
        users / p.push_group_size,
        p.push_group_size,
    )
    .await?;
    let layout = Layout::new(&groups);
    let vapid_key = groups.senders[0]
        .vapid_key()
        .await
        .context("reading the server's VAPID key")?;
    let lg = &args.large_group;
    let cpu_now = || CpuReadings::now(lg.server_pid, lg.postgres_database.as_deref());

    phase(&format!(
        "baseline: {} messages into each of {} groups, no push target registered",
        p.push_messages,
        layout.groups()
    ));
    let before = cpu_now();
    let baseline = send_round_robin(&groups, p.push_messages, args.concurrency, "base").await?;
    tokio::time::sleep(Duration::from_millis(BASELINE_SETTLE_MS)).await;
    let baseline_cpu = cpu_now().since(&before);
    let baseline_window = baseline.wall + Duration::from_millis(BASELINE_SETTLE_MS);

    register(args, &groups, &service).await?;
    tokio::time::sleep(Duration::from_millis(REGISTER_SETTLE_MS)).await;

    phase(&format!(
        "burst: the same sends, {} member devices offline with Web Push",
        layout.receivers()
    ));
    let counters_before = PushCounters::read(target).await?;
    let before = cpu_now();
    let burst_started = Instant::now();
    let burst = send_round_robin(&groups, p.push_messages, args.concurrency, "push").await?;
    let latest = latest_seqs(&layout, &burst.sent);
    phase(&format!(
        "waiting for every member device's notification of its group's latest seq ({} devices)",
        layout.receivers()
    ));
    let drained = drain(&service, &layout, &latest).await;
    let burst_window = burst_started.elapsed();
    let burst_cpu = cpu_now().since(&before);
    let burst_received = service.received().len();

    let paced = paced(&groups, &layout, &service, p.push_paced).await?;
    tokio::time::sleep(Duration::from_millis(GRACE_MS)).await;
    let counters = PushCounters::read(target).await?.since(&counters_before);
    let received = service.received();
    let attempts = service.attempts();

    let mut all_sent = burst.sent.clone();
    all_sent.extend(paced.iter().map(|(s, _)| *s));
    let check = check(&layout, &all_sent, &received, attempts, &vapid_key, &paced);
    let report = report(&Measured {
        args,
        layout: &layout,
        baseline: &baseline,
        baseline_window,
        baseline_cpu: &baseline_cpu,
        burst: &burst,
        burst_started,
        burst_window,
        burst_cpu: &burst_cpu,
        burst_received,
        drained,
        paced: &paced,
        received: &received,
        counters: &counters,
        check,
        setup_s: groups.setup_s,
        load: (load_before, load_average()),
    })?;
    println!("{}", summary(&report));
    publish(&args.out, &report)?;
    let violations = report["check"]["violations"].as_u64().unwrap_or(0);
    if violations > 0 {
        bail!("{violations} violations in the notifications (see check in the report)");
    }
    Ok(())
}

/// `per_group` messages into every group, round robin (message `i` into group `i mod
/// groups`), `in_flight` at once; `key` keeps the request keys of phases apart.
async fn send_round_robin(
    groups: &OnlineGroups,
    per_group: usize,
    in_flight: usize,
    key: &str,
) -> Result<Sends> {
    let n = groups.conv_ids.len() * per_group;
    let started = Instant::now();
    let done: Vec<(Sent, Duration)> = futures::stream::iter(0..n)
        .map(|i| {
            let g = i % groups.conv_ids.len();
            let (sender, conv) = (&groups.senders[g], &groups.conv_ids[g]);
            async move { send_one(sender, conv, g, &format!("{key}-{i}")).await }
        })
        .buffer_unordered(in_flight.max(1))
        .try_collect()
        .await?;
    let wall = started.elapsed();
    let mut ack = micros_histogram()?;
    for (_, d) in &done {
        record(&mut ack, *d);
    }
    Ok(Sends {
        sent: done.into_iter().map(|(s, _)| s).collect(),
        wall,
        ack,
    })
}

/// One send with retries; answers it and its time from start to ack.
async fn send_one(sender: &Client, conv: &str, group: usize, id: &str) -> Result<(Sent, Duration)> {
    let started = Instant::now();
    let ack = sender
        .send_with_retry(conv, id, &format!("notification bench {id}"))
        .await
        .context("a send")?;
    let acked = Instant::now();
    Ok((
        Sent {
            group,
            seq: ack.seq,
            acked,
        },
        acked - started,
    ))
}

/// Every device registers a subscription of the push service, named after its member index.
async fn register(
    args: &BenchArgs,
    groups: &OnlineGroups,
    service: &TestPushService,
) -> Result<()> {
    let n = groups.tokens.len();
    phase(&format!("registering {n} Web Push subscriptions"));
    let admin = &groups.senders[0];
    bounded(n, args.large_group.setup_concurrency, |i| {
        let client = admin.with_token(&groups.tokens[i]);
        let sub = service.subscribe(&subscription_name(i));
        async move {
            client
                .register_web_push(&sub.endpoint, &sub.p256dh, &sub.auth)
                .await
                .context("registering a Web Push subscription of the bench's push service on 127.0.0.1 (is the server running with --push-allow-http?)")?;
            Ok(())
        }
    })
    .await?;
    Ok(())
}

/// The latest acked seq of each group.
fn latest_seqs(layout: &Layout, sent: &[Sent]) -> Vec<i64> {
    let mut latest = vec![0; layout.groups()];
    for s in sent {
        latest[s.group] = latest[s.group].max(s.seq);
    }
    latest
}

/// Member devices that have no notification of their group's `latest` seq.
fn missing_latest(layout: &Layout, latest: &[i64], received: &[Received]) -> usize {
    let mut have: HashSet<usize> = HashSet::new();
    for r in received {
        let Some((member, conv, seq)) = key_of(r) else {
            continue;
        };
        let group = member / layout.group_size;
        if !layout.is_sender(member)
            && layout.conv_index.get(conv) == Some(&group)
            && latest.get(group) == Some(&seq)
        {
            have.insert(member);
        }
    }
    layout.receivers() - have.len().min(layout.receivers())
}

/// How the drain ended.
#[derive(Clone, Copy)]
struct Drained {
    complete: bool,
    waited: Duration,
}

/// Waits until every member device has a notification of its group's latest seq, or nothing
/// arrived for [`DRAIN_STALL_MS`]. The request counter is read every few milliseconds; the
/// whole record (a copy of every notification) only when arrivals pause or every few seconds.
async fn drain(service: &TestPushService, layout: &Layout, latest: &[i64]) -> Drained {
    let started = Instant::now();
    let mut seen = service.attempts();
    let mut last_change = Instant::now();
    let mut last_check = Instant::now();
    let mut checked_at = u64::MAX;
    loop {
        tokio::time::sleep(Duration::from_millis(DRAIN_POLL_MS)).await;
        let now = service.attempts();
        if now != seen {
            (seen, last_change) = (now, Instant::now());
        }
        let quiet = last_change.elapsed() >= Duration::from_millis(DRAIN_QUIET_MS);
        let due = last_check.elapsed() >= Duration::from_millis(DRAIN_CHECK_EVERY_MS);
        if (quiet && checked_at != now) || due {
            (last_check, checked_at) = (Instant::now(), now);
            if missing_latest(layout, latest, &service.received()) == 0 {
                return Drained {
                    complete: true,
                    waited: started.elapsed(),
                };
            }
        }
        if last_change.elapsed() >= Duration::from_millis(DRAIN_STALL_MS)
            || started.elapsed() >= Duration::from_millis(DRAIN_MAX_MS)
        {
            return Drained {
                complete: false,
                waited: started.elapsed(),
            };
        }
    }
}

/// `count` single messages, group after group, each waited for until the push service took
/// as many requests as the group has member devices (or [`PACED_TIMEOUT_MS`] passed).
async fn paced(
    groups: &OnlineGroups,
    layout: &Layout,
    service: &TestPushService,
    count: usize,
) -> Result<Vec<(Sent, bool)>> {
    if count == 0 {
        return Ok(Vec::new());
    }
    phase(&format!(
        "paced: {count} single messages, each waited for at its {} member devices",
        layout.group_size - 1
    ));
    let mut out = Vec::with_capacity(count);
    for j in 0..count {
        let g = j % groups.conv_ids.len();
        let before = service.attempts();
        let (sent, _) = send_one(
            &groups.senders[g],
            &groups.conv_ids[g],
            g,
            &format!("paced-{j}"),
        )
        .await?;
        let want = before + layout.group_size as u64 - 1;
        let deadline = Instant::now() + Duration::from_millis(PACED_TIMEOUT_MS);
        while service.attempts() < want && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(PACED_POLL_MS)).await;
        }
        out.push((sent, service.attempts() >= want));
    }
    Ok(out)
}

/// What the check found.
#[derive(Default)]
struct Check {
    /// Member devices with a notification of their group's latest seq (over every phase).
    with_latest: usize,
    /// Extra copies of a `(device, conv_id, seq)` already received.
    duplicates: usize,
    /// Notifications whose device, conversation or seq the run did not send to that device.
    phantom: usize,
    /// Notifications signed with another key than the server's.
    wrong_key: usize,
    /// Requests the push service refused (no such subscription, a bad VAPID token, a body that
    /// does not decrypt, …).
    refused: u64,
    /// Paced messages that did not reach every member device in time.
    paced_incomplete: usize,
    /// (device, paced message) pairs with no notification of exactly that seq.
    paced_missing: usize,
    /// Notifications of a lower seq than one the same device already had from that
    /// conversation (reported, not a violation: a notification says "news up to seq").
    out_of_order: usize,
    /// Shortest time between two notifications of one device and conversation.
    min_gap: Option<Duration>,
}

impl Check {
    fn violations(&self, receivers: usize) -> u64 {
        (receivers.saturating_sub(self.with_latest)
            + self.duplicates
            + self.phantom
            + self.wrong_key
            + self.paced_missing) as u64
            + self.refused
    }
}

fn check(
    layout: &Layout,
    sent: &[Sent],
    received: &[Received],
    attempts: u64,
    vapid_key: &str,
    paced: &[(Sent, bool)],
) -> Check {
    let latest = latest_seqs(layout, sent);
    let sent_seqs: HashSet<(usize, i64)> = sent.iter().map(|s| (s.group, s.seq)).collect();
    let mut c = Check {
        refused: attempts.saturating_sub(received.len() as u64),
        paced_incomplete: paced.iter().filter(|(_, all)| !all).count(),
        ..Check::default()
    };
    let mut seen: HashSet<(usize, i64)> = HashSet::new();
    let mut last: HashMap<usize, (i64, Instant)> = HashMap::new();
    let mut with_latest: HashSet<usize> = HashSet::new();
    for r in received {
        if r.vapid_key != vapid_key {
            c.wrong_key += 1;
        }
        let Some((member, conv, seq)) = key_of(r) else {
            c.phantom += 1;
            continue;
        };
        let group = member / layout.group_size;
        let ours = layout.conv_index.get(conv) == Some(&group)
            && !layout.is_sender(member)
            && sent_seqs.contains(&(group, seq));
        if !ours {
            c.phantom += 1;
            continue;
        }
        if !seen.insert((member, seq)) {
            c.duplicates += 1;
        }
        if latest[group] == seq {
            with_latest.insert(member);
        }
        if let Some((prev_seq, prev_at)) = last.get(&member) {
            if seq < *prev_seq {
                c.out_of_order += 1;
            }
            let gap = r.at.saturating_duration_since(*prev_at);
            c.min_gap = Some(c.min_gap.map_or(gap, |m| m.min(gap)));
        }
        let high = last.get(&member).map_or(seq, |(s, _)| (*s).max(seq));
        last.insert(member, (high, r.at));
    }
    c.with_latest = with_latest.len();
    for (s, _) in paced {
        let members = s.group * layout.group_size + 1..(s.group + 1) * layout.group_size;
        c.paced_missing += members.filter(|m| !seen.contains(&(*m, s.seq))).count();
    }
    c
}

/// Everything the report is made of.
struct Measured<'a> {
    args: &'a BenchArgs,
    layout: &'a Layout,
    baseline: &'a Sends,
    baseline_window: Duration,
    baseline_cpu: &'a CpuSpent,
    burst: &'a Sends,
    burst_started: Instant,
    burst_window: Duration,
    burst_cpu: &'a CpuSpent,
    /// Notifications recorded when the drain ended.
    burst_received: usize,
    drained: Drained,
    paced: &'a [(Sent, bool)],
    received: &'a [Received],
    counters: &'a PushCounters,
    check: Check,
    setup_s: f64,
    load: (Option<f64>, Option<f64>),
}

/// The histograms of ack to notification, of the burst's sends and of the paced ones, and
/// the burst's first and last arrival.
struct Arrivals {
    burst: Histogram<u64>,
    paced: Histogram<u64>,
    /// Notifications that arrived before their send's ack reached the bench (recorded as 0).
    before_ack: u64,
    first: Option<Instant>,
    last: Option<Instant>,
    burst_count: u64,
}

fn arrivals(m: &Measured<'_>) -> Result<Arrivals> {
    let index = |sent: &mut dyn Iterator<Item = Sent>| -> HashMap<(usize, i64), Instant> {
        sent.map(|s| ((s.group, s.seq), s.acked)).collect()
    };
    let burst_acks = index(&mut m.burst.sent.iter().copied());
    let paced_acks = index(&mut m.paced.iter().map(|(s, _)| *s));
    let mut a = Arrivals {
        burst: micros_histogram()?,
        paced: micros_histogram()?,
        before_ack: 0,
        first: None,
        last: None,
        burst_count: 0,
    };
    for r in m.received {
        let Some((member, conv, seq)) = key_of(r) else {
            continue;
        };
        let Some(&group) = m.layout.conv_index.get(conv) else {
            continue;
        };
        if member / m.layout.group_size != group {
            continue;
        }
        let (acked, h) = if let Some(at) = burst_acks.get(&(group, seq)) {
            a.burst_count += 1;
            a.first = Some(a.first.map_or(r.at, |f| f.min(r.at)));
            a.last = Some(a.last.map_or(r.at, |l| l.max(r.at)));
            (at, &mut a.burst)
        } else if let Some(at) = paced_acks.get(&(group, seq)) {
            (at, &mut a.paced)
        } else {
            continue;
        };
        if r.at < *acked {
            a.before_ack += 1;
        }
        record(h, r.at.saturating_duration_since(*acked));
    }
    Ok(a)
}

fn per_s(n: u64, d: Duration) -> Option<f64> {
    (d > Duration::ZERO).then(|| n as f64 / d.as_secs_f64())
}

fn cpu_json(cpu: &CpuSpent, window: Duration) -> Value {
    json!({
        "window_s": window.as_secs_f64(),
        "server_cpu_ms": cpu.server_ms,
        "postgres_cpu_ms": cpu.postgres_ms,
        "bench_cpu_ms": cpu.bench_ms,
    })
}

fn sends_json(s: &Sends) -> Value {
    json!({
        "sends": s.sent.len(),
        "wall_s": s.wall.as_secs_f64(),
        "sends_per_s": s.per_s(),
        "ack_ms": percentiles_ms(&s.ack),
    })
}

fn report(m: &Measured<'_>) -> Result<Value> {
    let a = arrivals(m)?;
    let c = &m.check;
    let first_to_last = match (a.first, a.last) {
        (Some(f), Some(l)) => l.saturating_duration_since(f),
        _ => Duration::ZERO,
    };
    let send_to_last = a.last.map_or(Duration::ZERO, |l| {
        l.saturating_duration_since(m.burst_started)
    });
    let notifications = a.burst_count;
    let us_per = |ms: Option<u64>| ms.map(|ms| ms as f64 * 1000.0 / notifications.max(1) as f64);
    let net_ms = match (m.burst_cpu.server_ms, m.baseline_cpu.server_ms) {
        (Some(b), Some(base)) => Some(b.saturating_sub(base)),
        _ => None,
    };
    let receivers = m.layout.receivers();
    let sends = m.burst.sent.len() as u64;
    let ratio = m.burst.per_s() / m.baseline.per_s().max(1e-9);
    let paced_sends = m.paced.len();
    Ok(json!({
        "scenario": "push",
        "load_average_1m_before": m.load.0,
        "load_average_1m_after": m.load.1,
        "users": m.layout.groups() * m.layout.group_size,
        "groups": m.layout.groups(),
        "group_size": m.layout.group_size,
        "member_devices_offline": receivers,
        "messages_per_group": m.args.push.push_messages,
        "sends_in_flight": m.args.concurrency,
        "setup_s": m.setup_s,
        "coalescing": {
            "note": "the bench cannot read the server's --push-coalesce-ms; two notifications of one device and conversation are at least that far apart",
            "min_gap_same_device_conversation_ms": c.min_gap.map(|d| d.as_secs_f64() * 1000.0),
        },
        "baseline": {
            "what": "the same sends with no push target registered",
            "sends": sends_json(m.baseline),
            "cpu": cpu_json(m.baseline_cpu, m.baseline_window),
        },
        "burst": {
            "sends": sends_json(m.burst),
            "cpu": cpu_json(m.burst_cpu, m.burst_window),
            "drain_complete": m.drained.complete,
            "drain_s": m.drained.waited.as_secs_f64(),
            "notifications_most": sends * (m.layout.group_size as u64 - 1),
            "notifications": notifications,
            "notifications_at_drain_end": m.burst_received,
            "first_to_last_arrival_s": first_to_last.as_secs_f64(),
            "first_send_to_last_arrival_s": send_to_last.as_secs_f64(),
            "notifications_per_s": per_s(notifications, first_to_last),
            "notifications_per_s_from_first_send": per_s(notifications, send_to_last),
            "ack_to_notification_ms": percentiles_ms(&a.burst),
            "server_cpu_us_per_notification": us_per(m.burst_cpu.server_ms),
            "server_cpu_us_per_notification_net_of_baseline": us_per(net_ms),
            "postgres_cpu_us_per_notification": us_per(Some(m.burst_cpu.postgres_ms)),
            "bench_cpu_us_per_notification": us_per(m.burst_cpu.bench_ms),
        },
        "send_throughput_ratio_with_to_without_notifications": ratio,
        "paced": {
            "messages": paced_sends,
            "notifications_expected": paced_sends * (m.layout.group_size - 1),
            "ack_to_notification_ms": percentiles_ms(&a.paced),
        },
        "notifications_before_ack": a.before_ack,
        "notifications_received": m.received.len(),
        "server": {
            "delivered": m.counters.delivered,
            "by_outcome": m.counters.by_outcome,
            "commit_to_send_count": m.counters.commit_to_send_count,
            "commit_to_send_mean_ms": m.counters.mean_ms(),
            "commit_to_send_p50_le_ms": m.counters.quantile_le_ms(0.50),
            "commit_to_send_p99_le_ms": m.counters.quantile_le_ms(0.99),
            "delivered_matches_received": m.counters.delivered == m.received.len() as u64,
        },
        "check": {
            "member_devices": receivers,
            "with_latest_seq": c.with_latest,
            "missing_latest_seq": receivers.saturating_sub(c.with_latest),
            "duplicates": c.duplicates,
            "phantom": c.phantom,
            "wrong_vapid_key": c.wrong_key,
            "refused_by_push_service": c.refused,
            "paced_incomplete": c.paced_incomplete,
            "paced_missing": c.paced_missing,
            "out_of_order": c.out_of_order,
            "violations": c.violations(receivers),
        },
    }))
}

/// The readable end-of-run summary.
fn summary(r: &Value) -> String {
    let f = |v: &Value, digits: usize| {
        v.as_f64()
            .map_or("-".to_owned(), |x| format!("{x:.digits$}"))
    };
    let pct = |p: &Value| {
        format!(
            "p50 {} / p95 {} / p99 {} / max {} ms (n = {})",
            f(&p["p50"], 1),
            f(&p["p95"], 1),
            f(&p["p99"], 1),
            f(&p["max"], 1),
            p["count"]
        )
    };
    let (b, base) = (&r["burst"], &r["baseline"]);
    let c = &r["check"];
    let s = &r["server"];
    [
        format!(
            "push: {} member devices offline with Web Push ({} groups of {}), {} messages per group, {} sends in flight",
            r["member_devices_offline"], r["groups"], r["group_size"], r["messages_per_group"], r["sends_in_flight"]
        ),
        format!(
            "sends without push targets: {} at {}/s; with: {} at {}/s; ratio {}",
            base["sends"]["sends"],
            f(&base["sends"]["sends_per_s"], 0),
            b["sends"]["sends"],
            f(&b["sends"]["sends_per_s"], 0),
            f(&r["send_throughput_ratio_with_to_without_notifications"], 2)
        ),
        format!(
            "burst: {} notifications (at most {}) in {} s first to last arrival: {}/s ({}/s from the first send); drain complete {}",
            b["notifications"],
            b["notifications_most"],
            f(&b["first_to_last_arrival_s"], 2),
            f(&b["notifications_per_s"], 0),
            f(&b["notifications_per_s_from_first_send"], 0),
            b["drain_complete"]
        ),
        format!("  ack to notification, burst: {}", pct(&b["ack_to_notification_ms"])),
        format!("  ack to notification, paced: {}", pct(&r["paced"]["ack_to_notification_ms"])),
        format!(
            "server CPU over the burst: {} ms, {} µs per notification, {} µs net of the baseline's {} ms; PostgreSQL {} µs, bench (push service included) {} µs per notification",
            b["cpu"]["server_cpu_ms"],
            f(&b["server_cpu_us_per_notification"], 1),
            f(&b["server_cpu_us_per_notification_net_of_baseline"], 1),
            base["cpu"]["server_cpu_ms"],
            f(&b["postgres_cpu_us_per_notification"], 1),
            f(&b["bench_cpu_us_per_notification"], 1)
        ),
        format!(
            "server: delivered {} (matches received: {}), commit to send mean {} ms, p50 ≤ {} ms, p99 ≤ {} ms",
            s["delivered"],
            s["delivered_matches_received"],
            f(&s["commit_to_send_mean_ms"], 1),
            f(&s["commit_to_send_p50_le_ms"], 0),
            f(&s["commit_to_send_p99_le_ms"], 0)
        ),
        format!(
            "check: {} of {} member devices got their group's latest seq; duplicates {}, phantom {}, wrong VAPID key {}, refused {}, paced missing {} (out of order {}); violations {}",
            c["with_latest_seq"],
            c["member_devices"],
            c["duplicates"],
            c["phantom"],
            c["wrong_vapid_key"],
            c["refused_by_push_service"],
            c["paced_missing"],
            c["out_of_order"],
            c["violations"]
        ),
    ]
    .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(groups: usize, group_size: usize) -> Layout {
        Layout {
            group_size,
            conv_index: (0..groups).map(|k| (format!("g{k}"), k)).collect(),
        }
    }

    fn note(member: usize, conv: &str, seq: i64, at: Instant) -> Received {
        Received {
            name: subscription_name(member),
            payload: json!({"conv_id": conv, "seq": seq, "unread": 1, "badge": 1, "kind": "message"}),
            raw: Vec::new(),
            ttl: 60,
            urgency: None,
            topic: None,
            vapid_key: "k".into(),
            at,
        }
    }

    #[test]
    fn the_check_finds_missing_latest_duplicates_and_phantoms() {
        // Two groups of three: members 0 and 3 send, 1, 2, 4, 5 receive.
        let l = layout(2, 3);
        let t = Instant::now();
        let sent = [
            Sent {
                group: 0,
                seq: 5,
                acked: t,
            },
            Sent {
                group: 0,
                seq: 6,
                acked: t,
            },
            Sent {
                group: 1,
                seq: 9,
                acked: t,
            },
        ];
        let ms = |n| t + Duration::from_millis(n);
        let received = vec![
            note(1, "g0", 5, ms(1)),
            note(1, "g0", 6, ms(3)),
            note(2, "g0", 6, ms(2)),
            note(2, "g0", 6, ms(4)), // a duplicate
            note(4, "g1", 9, ms(2)), // member 5 has nothing: one missing
            note(4, "g0", 6, ms(5)), // not member 4's group: phantom
            note(0, "g0", 6, ms(5)), // the sender: phantom
            note(1, "g0", 4, ms(9)), // a seq not sent: phantom
        ];
        let c = check(&l, &sent, &received, 9, "k", &[]);
        assert_eq!(l.receivers(), 4);
        assert_eq!(c.with_latest, 3);
        assert_eq!(c.duplicates, 1);
        assert_eq!(c.phantom, 3);
        assert_eq!(c.refused, 1);
        assert_eq!(c.out_of_order, 0);
        assert_eq!(c.min_gap, Some(Duration::from_millis(2)));
        assert_eq!(c.violations(l.receivers()), 1 + 1 + 3 + 1);
        assert_eq!(missing_latest(&l, &latest_seqs(&l, &sent), &received), 1);
    }

    #[test]
    fn paced_messages_are_owed_to_every_member_but_the_sender() {
        let l = layout(1, 3);
        let t = Instant::now();
        let s = Sent {
            group: 0,
            seq: 2,
            acked: t,
        };
        let received = vec![note(1, "g0", 2, t), note(2, "g0", 1, t)];
        let c = check(
            &l,
            &[Sent { seq: 1, ..s }, s],
            &received,
            2,
            "other",
            &[(s, false)],
        );
        assert_eq!((c.paced_incomplete, c.paced_missing), (1, 1));
        assert_eq!(c.with_latest, 1);
        assert_eq!(c.wrong_key, 2);
    }

    #[test]
    fn the_flags_parse_beside_every_other_scenarios() {
        use clap::{CommandFactory, Parser};
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            bench: BenchArgs,
        }
        Cli::command().debug_assert();
        let cli = Cli::parse_from([
            "bench",
            "--url",
            "http://127.0.0.1:1",
            "--admin-token",
            "t",
            "--scenario",
            "push",
            "--push-group-size",
            "10",
            "--push-messages",
            "3",
            "--push-paced",
            "4",
        ]);
        assert_eq!(cli.bench.scenario, crate::Scenario::Push);
        let p = &cli.bench.push;
        assert_eq!(
            (p.push_group_size, p.push_messages, p.push_paced),
            (10, 3, 4)
        );
    }

    #[test]
    fn subscription_names_map_back_to_members() {
        assert_eq!(member_of(&subscription_name(42)), Some(42));
        assert_eq!(member_of("x1"), None);
    }
}
