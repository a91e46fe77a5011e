//! P3 and P4 (SPEC §2) under concurrent joins, leaves and sends in one conversation: every
//! membership change is an event of the log, on the same seq counter as the messages, and a
//! user's periods never overlap. Afterwards the log is gapless, each user's joins and leaves
//! alternate in it (at most one open period), and what each user reads is exactly the events
//! inside their periods: from each join to its leave, inclusive, or to the head.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{bail, ensure, Context, Result};
use parley_client::{Client, Method, NewConversation};
use parley_testkit::{test_on_both_stores, ServerConfig, StoreKind, TestServer};
use serde_json::Value;

const CONV: &str = "c-churn";
/// Users who join, send and leave over and over while the owner sends.
const CHURNERS: usize = 5;
/// Join, send, leave rounds of each churner.
const ROUNDS: usize = 4;
/// Messages the owner sends meanwhile.
const OWNER_SENDS: usize = 40;
/// Page size of the reads: the largest the API allows.
const PAGE_LEN: usize = 500;

/// Every event `c` may read in the conversation, in seq order, page by page.
async fn readable(c: &Client) -> Result<Vec<Value>> {
    let mut events = Vec::new();
    let mut after = 0;
    loop {
        let path = format!("/v1/conversations/{CONV}/events?after={after}&limit={PAGE_LEN}");
        let (status, page) = c.raw(Method::GET, &path).send().await?;
        ensure!(status == 200, "events after {after}: {status} {page}");
        let got = page["events"].as_array().context("no events")?;
        events.extend(got.iter().cloned());
        let through = page["through_seq"].as_i64().context("no through_seq")?;
        let head = page["head"].as_i64().context("no head")?;
        if through >= head || through == after {
            return Ok(events);
        }
        after = through;
    }
}

/// A churner's life: `ROUNDS` times the owner adds them, they send one message, they leave.
/// Answers the seqs of its joins, messages and leaves.
async fn churn(owner: Client, me: Client, user: String) -> Result<Vec<(&'static str, i64)>> {
    let mut done = Vec::new();
    for round in 0..ROUNDS {
        done.push(("join", owner.add_member(CONV, &user).await?.seq));
        let key = format!("{user}-r{round}");
        done.push(("msg", me.send(CONV, &key, "hi").await?.seq));
        done.push(("leave", me.remove_member(CONV, &user).await?.seq));
    }
    Ok(done)
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    p3_p4_hold_under_concurrent_joins_leaves_and_sends
);
async fn p3_p4_hold_under_concurrent_joins_leaves_and_sends(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let owner = server.user_with_device("u-own").await;
    owner
        .create_conversation(&NewConversation::group(Vec::<String>::new()).with_conv_id(CONV))
        .await?;
    let mut churners = Vec::new();
    for i in 0..CHURNERS {
        let user = format!("u-c{i}");
        churners.push((user.clone(), server.user_with_device(&user).await));
    }

    let mut tasks = Vec::new();
    for (user, me) in &churners {
        tasks.push(tokio::spawn(churn(owner.clone(), me.clone(), user.clone())));
    }
    let sender = owner.clone();
    let owner_sends = tokio::spawn(async move {
        let mut seqs = Vec::new();
        for i in 0..OWNER_SENDS {
            seqs.push(sender.send(CONV, &format!("o-{i}"), "news").await?.seq);
        }
        anyhow::Ok(seqs)
    });
    let mut answered: BTreeMap<String, Vec<(&'static str, i64)>> = BTreeMap::new();
    for ((user, _), task) in churners.iter().zip(tasks) {
        answered.insert(user.clone(), task.await??);
    }
    let owner_seqs = owner_sends.await??;

    // The log, as the owner (a member throughout) reads it: gapless from 1 (P1).
    let log = readable(&owner).await?;
    let seqs: Vec<i64> = log.iter().filter_map(|e| e["seq"].as_i64()).collect();
    let expected: Vec<i64> = (1..=seqs.len() as i64).collect();
    ensure!(seqs == expected, "the log has holes: {seqs:?}");
    let churn_events = CHURNERS * ROUNDS * 3;
    ensure!(
        seqs.len() == 1 + OWNER_SENDS + churn_events,
        "{} events, expected {}",
        seqs.len(),
        1 + OWNER_SENDS + churn_events
    );
    let at: BTreeMap<i64, &Value> = log
        .iter()
        .map(|e| (e["seq"].as_i64().unwrap_or(0), e))
        .collect();
    for seq in &owner_seqs {
        ensure!(
            at.get(seq)
                .is_some_and(|e| e["kind"] == "msg" && e["sender_user"] == "u-own"),
            "the owner's ack {seq} is not the owner's message in the log"
        );
    }

    for (user, me) in &churners {
        // P4: every answered change is the matching event of the log, on the shared counter.
        for (kind, seq) in &answered[user] {
            let event = at
                .get(seq)
                .with_context(|| format!("{user}'s {kind} {seq} is not in the log"))?;
            let who = if *kind == "msg" {
                &event["sender_user"]
            } else {
                &event["subject_user"]
            };
            ensure!(
                event["kind"] == *kind && who == user.as_str(),
                "{user}'s {kind} answered {seq}, the log has {event}"
            );
        }
        // P3: in the log, the user's joins and leaves alternate, starting with a join.
        let changes: Vec<(i64, &str)> = log
            .iter()
            .filter(|e| e["subject_user"] == user.as_str())
            .filter_map(|e| Some((e["seq"].as_i64()?, e["kind"].as_str()?)))
            .collect();
        let mut periods = Vec::new();
        let mut open: Option<i64> = None;
        for (seq, kind) in &changes {
            match (*kind, open) {
                ("join", None) => open = Some(*seq),
                ("leave", Some(from)) => {
                    periods.push((from, *seq));
                    open = None;
                }
                _ => bail!("{user}: {kind} at {seq} with open period {open:?}: {changes:?}"),
            }
        }
        ensure!(
            open.is_none() && periods.len() == ROUNDS,
            "{user}'s periods {periods:?}"
        );
        // What the user reads is exactly the log inside their periods.
        let visible: BTreeSet<i64> = periods.iter().flat_map(|(from, to)| *from..=*to).collect();
        let read: Vec<i64> = readable(me)
            .await?
            .iter()
            .filter_map(|e| e["seq"].as_i64())
            .collect();
        let read_set: BTreeSet<i64> = read.iter().copied().collect();
        ensure!(
            read_set.len() == read.len() && read_set == visible,
            "{user} reads {read:?}, its periods {periods:?} cover {visible:?}"
        );
    }
    Ok(())
}
