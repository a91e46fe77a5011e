//! The end-to-end encryption scenario (`--scenario e2ee`; docs/PERFORMANCE.md, "End-to-end
//! encryption"): what MLS costs a send and what a Commit costs a large group, through the SDK's
//! `E2ee` (feature `e2ee`), in one run against one server.
//!
//! 1. **Sends**: a plain group and an encrypted conversation of the same `--e2ee-group-size`
//!    users (one device each). `--concurrency` of them (at most all) send, each a closed loop of
//!    one send at a time: plain sends (`POST /messages`, `Client::send_with_retry`) against
//!    encrypted ones (`E2ee::send`: encrypt, keep in the key store, `POST /mls`),
//!    `--e2ee-messages` of each in halves (plain, encrypted, plain, encrypted) so drift falls on
//!    both. Sends per second, ack latency, and the ratios encrypted ÷ plain. Every encrypted
//!    message must then decrypt at a member that syncs the conversation.
//! 2. **Commits**: an encrypted conversation of `--e2ee-commit-group` devices (100), all but the
//!    creator added by one Commit: its time (claim of the key packages, Commit and Welcome
//!    built, posted and merged) and its request's size (the JSON body, rebuilt from the log: the
//!    Commit as its creator reads it, the Welcome as an added device reads it). Each added
//!    device joins by `E2ee::sync`. Then `--e2ee-commits` self-updates (`E2ee::update`) by the
//!    creator, each timed, and each applied by one other member (`E2ee::sync`), timed. At the
//!    end every member syncs and must be at the creator's epoch, `1 + --e2ee-commits`.

use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use clap::Args;
use hdrhistogram::Histogram;
use parley_client::e2ee::{Content, E2ee};
use parley_client::{new_client_msg_id, Client, NewConversation};
use serde_json::{json, Value};

use crate::fixtures::{bounded, run_tag, user_with_device};
use crate::progress::phase;
use crate::report::{micros_histogram, percentiles_ms, publish, record};
use crate::target::Target;
use crate::BenchArgs;

/// Devices set up (opened, key packages published, joined) at once.
const SETUP_IN_FLIGHT: usize = 8;
/// The body of every send, plain and encrypted: a short chat message.
const BODY: &str = "a benchmark message of about sixty-four bytes, plain or encrypted.";

/// The options of the e2ee scenario; its senders are `--concurrency` (at most the group).
#[derive(Args, Debug, Clone)]
pub struct E2eeArgs {
    /// Users (one device each) of the plain group and of the encrypted conversation the sends
    /// are measured in (e2ee).
    #[arg(long = "e2ee-group-size", default_value_t = 10)]
    pub e2ee_group_size: usize,
    /// Sends of each kind, plain and encrypted (e2ee).
    #[arg(long = "e2ee-messages", default_value_t = 2_000)]
    pub e2ee_messages: usize,
    /// Devices of the encrypted conversation the Commits are measured in (e2ee).
    #[arg(long = "e2ee-commit-group", default_value_t = 100)]
    pub e2ee_commit_group: usize,
    /// Self-update Commits in that conversation, each applied by one other member (e2ee).
    #[arg(long = "e2ee-commits", default_value_t = 20)]
    pub e2ee_commits: usize,
}

/// One kind of send's measurements.
struct Arm {
    latency: Histogram<u64>,
    wall: Duration,
    sends: usize,
    acked: usize,
    errors: u64,
}

impl Arm {
    fn new() -> Result<Self> {
        Ok(Arm {
            latency: micros_histogram()?,
            wall: Duration::ZERO,
            sends: 0,
            acked: 0,
            errors: 0,
        })
    }

    fn per_s(&self) -> f64 {
        self.acked as f64 / self.wall.as_secs_f64().max(1e-9)
    }

    fn json(&self) -> Value {
        json!({
            "sends": self.sends,
            "acked": self.acked,
            "errors": self.errors,
            "wall_s": self.wall.as_secs_f64(),
            "sends_per_s": self.per_s(),
            "ack_ms": percentiles_ms(&self.latency),
        })
    }
}

/// `n` sends split over `senders` closed loops (`send(i)` is sender `i`'s send), into `arm`.
async fn closed_loops<F, Fut>(arm: &mut Arm, n: usize, senders: usize, send: F)
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let started = Instant::now();
    let loops = (0..senders).map(|s| {
        let mine = n / senders + usize::from(s < n % senders);
        let send = &send;
        async move {
            let mut out = Vec::with_capacity(mine);
            for _ in 0..mine {
                let t = Instant::now();
                let r = send(s).await;
                out.push((t.elapsed(), r));
            }
            out
        }
    });
    let done = futures::future::join_all(loops).await;
    arm.wall += started.elapsed();
    arm.sends += n;
    for (d, r) in done.into_iter().flatten() {
        match r {
            Ok(()) => {
                record(&mut arm.latency, d);
                arm.acked += 1;
            }
            Err(e) => {
                arm.errors += 1;
                tracing::warn!(error = format!("{e:#}"), "a send failed");
            }
        }
    }
}

fn ratio(a: f64, b: f64) -> Option<f64> {
    (b > 0.0).then(|| a / b)
}

pub async fn run(args: &BenchArgs, target: &Target) -> Result<()> {
    let a = &args.e2ee;
    ensure!(
        a.e2ee_group_size >= 2 && a.e2ee_commit_group >= 2,
        "--e2ee-group-size and --e2ee-commit-group need at least 2 devices"
    );
    ensure!(
        a.e2ee_commit_group <= 101,
        "--e2ee-commit-group is at most 101: one Commit adds all but the creator, and a Welcome names at most 100 devices"
    );
    ensure!(
        a.e2ee_messages >= 2 && a.e2ee_commits >= 1,
        "--e2ee-messages needs at least 2 and --e2ee-commits at least 1"
    );
    target.check_ready().await?;
    let tag = format!("e2{}", run_tag(6));
    let admin = target.admin()?;
    let keys = tempfile::Builder::new()
        .prefix("parley-bench-e2ee-")
        .tempdir()
        .context("a directory for the devices' key stores")?;
    let users_n = a.e2ee_group_size.max(a.e2ee_commit_group);
    let users: Vec<String> = (0..users_n).map(|i| format!("{tag}u{i}")).collect();

    phase(&format!(
        "{users_n} users with a device each: key stores opened, two key packages published each"
    ));
    let setup = Instant::now();
    let devices: Vec<E2ee> = bounded(users_n, SETUP_IN_FLIGHT, |i| {
        let (admin, user, dir) = (&admin, &users[i], keys.path().join(format!("d{i}")));
        async move {
            let token = user_with_device(admin, user).await?;
            let e = E2ee::open(admin.device_client(&token), dir).await?;
            e.publish_key_packages(2).await?;
            Ok(e)
        }
    })
    .await?;
    let setup_s = setup.elapsed().as_secs_f64();

    let sends = send_arms(args, &users, &devices).await?;
    let commits = commit_group(a, &users, &devices).await?;

    let errors = sends["plain"]["errors"].as_u64().unwrap_or(0)
        + sends["encrypted"]["errors"].as_u64().unwrap_or(0);
    let report = json!({
        "scenario": "e2ee",
        "url": target.url(),
        "params": {
            "group_size": a.e2ee_group_size,
            "messages": a.e2ee_messages,
            "senders": sends["senders"],
            "commit_group": a.e2ee_commit_group,
            "commits": a.e2ee_commits,
            "body_bytes": BODY.len(),
        },
        "setup_s": setup_s,
        "send": sends,
        "commit": commits,
        "errors": errors,
    });
    println!("{}", summary(&report));
    publish(&args.out, &report)?;
    if report["send"]["decrypted_all"] != json!(true) {
        bail!("not every encrypted message decrypted at the reading member (see send)");
    }
    if report["commit"]["converged"] != json!(true) {
        bail!("the members of the commit group did not converge on one epoch (see commit)");
    }
    if errors > 0 {
        bail!("{errors} sends failed (see the report)");
    }
    Ok(())
}

/// Plain sends against encrypted sends among the first `--e2ee-group-size` devices.
async fn send_arms(args: &BenchArgs, users: &[String], devices: &[E2ee]) -> Result<Value> {
    let a = &args.e2ee;
    let n = a.e2ee_group_size;
    let members: Vec<&str> = users[1..n].iter().map(String::as_str).collect();
    let senders = args.concurrency.clamp(1, n);

    phase(&format!(
        "a plain group and an encrypted conversation of {n} devices"
    ));
    let plain = devices[0]
        .client()
        .create_conversation(&NewConversation::group(members.iter().copied()))
        .await
        .context("creating the plain group")?;
    let enc = devices[0].create_conversation().await?;
    devices[0]
        .add_users(&enc.conv_id, &members)
        .await
        .context("adding the send group's members")?;
    bounded(n - 1, SETUP_IN_FLIGHT, |i| {
        let (d, conv) = (&devices[i + 1], &enc.conv_id);
        async move {
            d.sync(conv).await?;
            ensure!(d.is_member(conv).await?, "{:?} did not join", d.me());
            Ok(())
        }
    })
    .await?;

    let plain_send = |s: usize| {
        let (c, conv): (&Client, &str) = (devices[s].client(), &plain.conv_id);
        async move {
            c.send_with_retry(conv, &new_client_msg_id(), BODY).await?;
            Ok(())
        }
    };
    let enc_send = |s: usize| {
        let (d, conv) = (&devices[s], &enc.conv_id);
        async move {
            d.send(conv, BODY).await?;
            Ok(())
        }
    };
    // A few sends of each first, so neither arm pays for cold connections.
    closed_loops(&mut Arm::new()?, senders, senders, plain_send).await;
    let mut warm = Arm::new()?;
    closed_loops(&mut warm, senders, senders, enc_send).await;
    let (mut p, mut e) = (Arm::new()?, Arm::new()?);
    let half = a.e2ee_messages / 2;
    for k in [half, a.e2ee_messages - half] {
        phase(&format!(
            "{k} plain sends, then {k} encrypted, {senders} senders one at a time each"
        ));
        closed_loops(&mut p, k, senders, plain_send).await;
        closed_loops(&mut e, k, senders, enc_send).await;
    }

    // Every encrypted message, the warm-up's included, decrypts at the last member.
    phase("the last member reads the encrypted conversation");
    let reader = &devices[n - 1];
    let read = Instant::now();
    let items = reader.sync(&enc.conv_id).await?;
    let read_s = read.elapsed().as_secs_f64();
    let texts = items
        .iter()
        .filter(|d| matches!(d.content, Content::Text(ref t) if t == BODY))
        .count();
    let undecryptable = items
        .iter()
        .filter(|d| matches!(d.content, Content::Undecryptable { .. }))
        .count();
    let expected = e.acked + warm.acked;
    let (pp, ep) = (percentiles_ms(&p.latency), percentiles_ms(&e.latency));
    Ok(json!({
        "senders": senders,
        "plain_conv": plain.conv_id,
        "encrypted_conv": enc.conv_id,
        "plain": p.json(),
        "encrypted": e.json(),
        "throughput_ratio_encrypted_to_plain": ratio(e.per_s(), p.per_s()),
        "p50_ratio_encrypted_to_plain": ratio(ep.p50, pp.p50),
        "p99_ratio_encrypted_to_plain": ratio(ep.p99, pp.p99),
        "reader_decrypted": texts,
        "reader_undecryptable": undecryptable,
        "reader_expected": expected,
        "reader_sync_s": read_s,
        "decrypted_all": texts == expected && undecryptable == 0,
    }))
}

/// The JSON body of the Commit at `seq` that added devices with the Welcome at `welcome_seq`,
/// as it was posted: the Commit read back by its creator, the Welcome by a device it names.
async fn commit_request_bytes(
    creator: &E2ee,
    added: &E2ee,
    conv: &str,
    seq: i64,
    welcome_seq: i64,
    add_users: &[&str],
) -> Result<Value> {
    let commit = creator
        .client()
        .events_after(conv, seq - 1, Some(1), None)
        .await?
        .events
        .into_iter()
        .find(|ev| ev.seq == seq)
        .context("the Commit read back")?;
    let welcome = added
        .client()
        .events_after(conv, welcome_seq - 1, Some(1), None)
        .await?
        .events
        .into_iter()
        .find(|ev| ev.seq == welcome_seq)
        .context("the Welcome read back")?;
    let commit_b64 = commit.mls_message.context("the Commit has its message")?;
    let welcome_b64 = welcome
        .mls_message
        .context("the Welcome has its message for a device it names")?;
    let body = json!({
        "client_msg_id": new_client_msg_id(),
        "kind": "commit",
        "epoch": commit.mls_epoch,
        "message": commit_b64,
        "welcome": {"message": welcome_b64, "devices": welcome.mls_devices},
        "add_users": add_users,
    });
    let b64_len = |s: &str| s.len() / 4 * 3 - s.bytes().rev().take_while(|&c| c == b'=').count();
    Ok(json!({
        "request_bytes": serde_json::to_vec(&body)?.len(),
        "commit_message_bytes": b64_len(&commit_b64),
        "welcome_message_bytes": b64_len(&welcome_b64),
        "welcome_devices": welcome.mls_devices.len(),
    }))
}

/// The Commit costs in a conversation of the first `--e2ee-commit-group` devices.
async fn commit_group(a: &E2eeArgs, users: &[String], devices: &[E2ee]) -> Result<Value> {
    let n = a.e2ee_commit_group;
    let (creator, applier) = (&devices[0], &devices[1]);
    let members: Vec<&str> = users[1..n].iter().map(String::as_str).collect();
    phase(&format!(
        "an encrypted conversation of {n} devices: one Commit adds {}",
        n - 1
    ));
    let conv = creator.create_conversation().await?.conv_id;
    let t = Instant::now();
    let add = creator
        .add_users(&conv, &members)
        .await
        .context("the Commit that adds the group")?
        .context("the add Commit had nothing to add")?;
    let add_ms = t.elapsed().as_secs_f64() * 1000.0;

    let joins: Vec<Duration> = bounded(n - 1, SETUP_IN_FLIGHT, |i| {
        let (d, conv) = (&devices[i + 1], &conv);
        async move {
            let t = Instant::now();
            d.sync(conv).await?;
            let took = t.elapsed();
            ensure!(d.is_member(conv).await?, "{:?} did not join", d.me());
            Ok(took)
        }
    })
    .await?;
    let mut join_h = micros_histogram()?;
    for d in joins {
        record(&mut join_h, d);
    }
    let size = match add.welcome_seq {
        Some(w) => commit_request_bytes(creator, applier, &conv, add.seq, w, &members).await?,
        None => bail!("the add Commit was acked without a Welcome"),
    };

    phase(&format!(
        "{} self-update Commits in the group of {n}, each applied by one other member",
        a.e2ee_commits
    ));
    let (mut commit_h, mut apply_h) = (micros_histogram()?, micros_histogram()?);
    let mut applier_in_step = true;
    for _ in 0..a.e2ee_commits {
        let t = Instant::now();
        creator.update(&conv).await.context("a self-update")?;
        record(&mut commit_h, t.elapsed());
        let t = Instant::now();
        applier
            .sync(&conv)
            .await
            .context("applying a self-update")?;
        record(&mut apply_h, t.elapsed());
        applier_in_step &= applier.epoch(&conv).await? == creator.epoch(&conv).await?;
    }

    phase(&format!("every one of the {n} members reads to the end"));
    let epochs: Vec<u64> = bounded(n, SETUP_IN_FLIGHT, |i| {
        let (d, conv) = (&devices[i], &conv);
        async move {
            d.sync(conv).await?;
            Ok(d.epoch(conv).await?)
        }
    })
    .await?;
    let expected = 1 + a.e2ee_commits as u64;
    let converged = applier_in_step && epochs.iter().all(|&e| e == expected);
    let members_seen = creator.members(&conv).await?.len();
    Ok(json!({
        "conv": conv,
        "devices": n,
        "members_seen_by_creator": members_seen,
        "add": {
            "devices_added": n - 1,
            "ms": add_ms,
            "seq": add.seq,
            "welcome_seq": add.welcome_seq,
        },
        "add_size": size,
        "join_ms": percentiles_ms(&join_h),
        "update_commit_ms": percentiles_ms(&commit_h),
        "update_apply_ms": percentiles_ms(&apply_h),
        "epoch_expected": expected,
        "epochs_min": epochs.iter().min(),
        "epochs_max": epochs.iter().max(),
        "converged": converged && members_seen == n,
    }))
}

fn summary(r: &Value) -> String {
    let f = |v: &Value, d: usize| v.as_f64().map_or("-".into(), |x| format!("{x:.d$}"));
    let s = &r["send"];
    let c = &r["commit"];
    let arm = |name: &str| {
        let x = &s[name];
        format!(
            "{name:<9} {:>7}/s  ack p50 {:>7} ms  p99 {:>7} ms  ({} acked of {}, {} errors)",
            f(&x["sends_per_s"], 0),
            f(&x["ack_ms"]["p50"], 2),
            f(&x["ack_ms"]["p99"], 2),
            x["acked"],
            x["sends"],
            x["errors"]
        )
    };
    [
        format!(
            "sends in a group of {} devices, {} senders one at a time each:",
            r["params"]["group_size"], s["senders"]
        ),
        arm("plain"),
        arm("encrypted"),
        format!(
            "encrypted ÷ plain: throughput {}, p50 {}, p99 {}; the last member decrypted {} of {} ({} undecryptable)",
            f(&s["throughput_ratio_encrypted_to_plain"], 2),
            f(&s["p50_ratio_encrypted_to_plain"], 2),
            f(&s["p99_ratio_encrypted_to_plain"], 2),
            s["reader_decrypted"],
            s["reader_expected"],
            s["reader_undecryptable"]
        ),
        format!(
            "group of {} devices: the Commit adding {} took {} ms, request {} bytes (Commit {} B, Welcome {} B); joins p50 {} ms, p99 {} ms",
            c["devices"],
            c["add"]["devices_added"],
            f(&c["add"]["ms"], 1),
            c["add_size"]["request_bytes"],
            c["add_size"]["commit_message_bytes"],
            c["add_size"]["welcome_message_bytes"],
            f(&c["join_ms"]["p50"], 1),
            f(&c["join_ms"]["p99"], 1)
        ),
        format!(
            "self-update Commit: build+post p50 {} ms, p99 {} ms; applied by another member p50 {} ms, p99 {} ms (n = {})",
            f(&c["update_commit_ms"]["p50"], 2),
            f(&c["update_commit_ms"]["p99"], 2),
            f(&c["update_apply_ms"]["p50"], 2),
            f(&c["update_apply_ms"]["p99"], 2),
            c["update_commit_ms"]["count"]
        ),
        format!(
            "epochs: expected {}, members {}..{}; converged: {}",
            c["epoch_expected"], c["epochs_min"], c["epochs_max"], c["converged"]
        ),
        format!("errors: {}", r["errors"]),
    ]
    .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flags_parse() {
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
            "e2ee",
            "--e2ee-group-size",
            "4",
            "--e2ee-commit-group",
            "20",
        ]);
        assert_eq!(cli.bench.scenario, crate::Scenario::E2ee);
        let a = &cli.bench.e2ee;
        assert_eq!(
            (
                a.e2ee_group_size,
                a.e2ee_messages,
                a.e2ee_commit_group,
                a.e2ee_commits
            ),
            (4, 2_000, 20, 20)
        );
    }
}
