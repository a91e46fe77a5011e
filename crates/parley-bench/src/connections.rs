//! The connections scenario: `--online` devices (16,000 by default) hold a WebSocket to one
//! server, all members of push groups of `--group-size`. It reports the server's resident
//! memory per idle connection ((RSS with every socket open − RSS before) / sockets), the
//! connect rate, and `--push-rounds` pushes to every connection: each round sends one message
//! into every group at once, and its send-to-last-delivery is the time from the round's start
//! to the last of its frames to arrive. Every connection must receive every round's message;
//! each one missing is a violation.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use crate::online_groups::{check_open_files, OnlineGroups, Sockets};
use crate::report::{micros_histogram, percentiles_ms, publish, record};
use crate::rss::process_rss_bytes;
use crate::target::Target;
use crate::BenchArgs;

/// Sockets of a run unless `--online` says otherwise.
pub const CONNECTIONS_DEFAULT: usize = 16_000;
/// The target of resident server memory per idle connection.
const RSS_PER_CONNECTION_TARGET_BYTES: u64 = 8 * 1024;
/// Pause after the presence frames of the connects settled, before memory is read, so that
/// the connections' first exchanges are over.
const SETTLE_MS: u64 = 2_000;
/// How long one round's deliveries may take before the missing ones count as lost.
const ROUND_TIMEOUT_MS: u64 = 30_000;
/// Pause between rounds, so one round's writes do not overlap the next.
const ROUND_GAP_MS: u64 = 200;

pub async fn run(args: &BenchArgs, target: &Target) -> Result<()> {
    let fo = &args.fanout;
    let sockets = args.online.unwrap_or(CONNECTIONS_DEFAULT);
    if sockets == 0 || !sockets.is_multiple_of(fo.group_size) {
        bail!("--online must be a positive multiple of --group-size");
    }
    let Some(pid) = args.large_group.server_pid else {
        bail!("the connections scenario reads the server's memory: pass --server-pid");
    };
    check_open_files(sockets)?;
    let groups =
        OnlineGroups::create(args, target, "cn", sockets / fo.group_size, fo.group_size).await?;
    let rss_before = process_rss_bytes(pid).context("reading the server's /proc status")?;
    crate::progress::phase(&format!("connecting {sockets} WebSockets"));
    let started = Instant::now();
    let online = Sockets::connect(target.url(), &groups.tokens, fo.connect_concurrency).await?;
    let connect_s = started.elapsed().as_secs_f64();
    crate::progress::phase("waiting for the presence frames of the connects to settle");
    let settled = online.settle().await;
    tokio::time::sleep(Duration::from_millis(SETTLE_MS)).await;
    let rss_open = process_rss_bytes(pid).context("reading the server's /proc status")?;
    crate::progress::phase(&format!("{} pushes to every connection", fo.push_rounds));
    let rounds = push_rounds(args, &groups, &online).await?;
    let seen = online.stop().await?;
    let rss = Rss {
        before: rss_before,
        open: rss_open,
        sockets: sockets as u64,
    };
    let mut report = report(args, &groups, &rss, connect_s, &rounds, &seen)?;
    report["connect_settle_s"] = serde_json::json!(settled.0.as_secs_f64());
    report["presence_frames_of_connects"] = serde_json::json!(settled.1);
    publish(&args.out, &report)
}

/// One round: when it started, and the seq each group's message got.
struct Round {
    started: Instant,
    seqs: Vec<i64>,
}

async fn push_rounds(
    args: &BenchArgs,
    groups: &OnlineGroups,
    online: &Sockets,
) -> Result<Vec<Round>> {
    let per_round = groups.tokens.len() as u64;
    let mut rounds = Vec::with_capacity(args.fanout.push_rounds);
    for r in 0..args.fanout.push_rounds {
        let expected = online.delivered() + per_round;
        let started = Instant::now();
        let sends = groups
            .conv_ids
            .iter()
            .zip(&groups.senders)
            .map(|(conv, sender)| {
                let id = format!("push-{r}");
                async move {
                    sender
                        .send_with_retry(conv, &id, "to every connection")
                        .await
                }
            });
        let acks = futures::future::join_all(sends).await;
        let seqs = acks
            .into_iter()
            .map(|a| Ok(a?.seq))
            .collect::<Result<Vec<i64>>>()
            .context("a push round's send failed")?;
        online
            .wait_for(expected, Duration::from_millis(ROUND_TIMEOUT_MS))
            .await;
        rounds.push(Round { started, seqs });
        tokio::time::sleep(Duration::from_millis(ROUND_GAP_MS)).await;
    }
    Ok(rounds)
}

struct Rss {
    before: u64,
    open: u64,
    sockets: u64,
}

fn report(
    args: &BenchArgs,
    groups: &OnlineGroups,
    rss: &Rss,
    connect_s: f64,
    rounds: &[Round],
    seen: &[crate::online_groups::Deliveries],
) -> Result<Value> {
    let (mut each, mut last) = (micros_histogram()?, micros_histogram()?);
    let mut last_ms = Vec::with_capacity(rounds.len());
    let mut missing = 0u64;
    let mut latest = vec![Duration::ZERO; rounds.len()];
    for (i, deliveries) in seen.iter().enumerate() {
        let g = groups.group_of(i);
        let at: HashMap<i64, Instant> = deliveries.iter().copied().collect();
        for (r, round) in rounds.iter().enumerate() {
            match at.get(&round.seqs[g]) {
                Some(t) => {
                    let d = t.saturating_duration_since(round.started);
                    record(&mut each, d);
                    latest[r] = latest[r].max(d);
                }
                None => missing += 1,
            }
        }
    }
    for d in &latest {
        record(&mut last, *d);
        last_ms.push(d.as_secs_f64() * 1000.0);
    }
    let per_conn = rss.open.saturating_sub(rss.before) / rss.sockets.max(1);
    Ok(json!({
        "scenario": "connections",
        "connections": rss.sockets,
        "groups": groups.conv_ids.len(),
        "group_size": groups.group_size,
        "setup_s": groups.setup_s,
        "connect_s": connect_s,
        "connect_rate_per_s": rss.sockets as f64 / connect_s.max(1e-9),
        "server_rss_before_bytes": rss.before,
        "server_rss_open_bytes": rss.open,
        "server_rss_per_connection_bytes": per_conn,
        "server_rss_per_connection_target_bytes": RSS_PER_CONNECTION_TARGET_BYTES,
        "push_rounds": args.fanout.push_rounds,
        "deliveries_expected": rss.sockets * rounds.len() as u64,
        "deliveries_missing": missing,
        "violations": missing,
        "send_to_last_delivery_ms": percentiles_ms(&last),
        "send_to_last_delivery_ms_by_round": last_ms,
        "send_to_delivery_ms": percentiles_ms(&each),
    }))
}
