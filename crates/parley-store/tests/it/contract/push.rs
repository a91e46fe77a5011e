//! Offline notifications in the store (docs/PUSH.md): the outbox row a message's commit writes,
//! its expansion into notifications owed to devices (recipients, levels, coalescing, dedupe),
//! claims under leases, and the outcomes reported back. Times are the callers' milliseconds, so
//! every step below runs at a time of the test's choosing.

use std::collections::BTreeSet;

use anyhow::{ensure, Context, Result};
use parley_domain::{
    Body, ClientMsgId, ConvId, ConvKind, DeviceId, ReactionKey, Rejection, SendRelations, UserId,
};
use parley_store::{
    EditRequest, NotifyLevel, PushJob, PushOutcome, PushResult, PushTarget, ReactRequest, Route,
    SendOutcome, SendRequest, Store, StoreError,
};
use parley_testkit::{Sql, SqlArg};

use super::{event_at, new_conv, send, user};

/// A moment of the tests' clock, in milliseconds.
const T0: i64 = 1_000_000;
/// The coalescing interval the tests expand and report with.
const COALESCE_MS: i64 = 5_000;
/// The lease of every claim.
const LEASE_MS: i64 = 10_000;
/// More than any test queues.
const BATCH: u32 = 100;

fn dev(s: &str) -> DeviceId {
    DeviceId::parse(s).expect("device id")
}

fn webpush(user: &UserId, device: &str, generation: u32) -> PushTarget {
    PushTarget::WebPush {
        endpoint: format!("https://push.example/{user}/{device}/{generation}"),
        p256dh: format!("p256dh-{user}-{device}"),
        auth: format!("auth-{user}-{device}"),
    }
}

/// A device of `user` with a token of its own (`d1` exists from `user`).
async fn device(store: &dyn Store, user: &UserId, name: &str) -> Result<DeviceId> {
    let d = dev(name);
    store
        .issue_device_token(user, &d, &format!("hash-{user}-{name}"))
        .await?;
    Ok(d)
}

/// Gives the device a Web Push target and answers it.
async fn target(store: &dyn Store, user: &UserId, device: &str) -> Result<PushTarget> {
    let t = webpush(user, device, 1);
    store.set_push_target((user, &dev(device)), &t, T0).await?;
    Ok(t)
}

async fn send_rel(
    store: &dyn Store,
    conv: &ConvId,
    from: &UserId,
    key: &str,
    text: &str,
    rel: SendRelations,
) -> Result<SendOutcome, StoreError> {
    let req = SendRequest::related(
        conv.clone(),
        from.clone(),
        dev("d1"),
        ClientMsgId::parse(key).expect("key"),
        Body::parse(text, 16 * 1024).expect("body"),
        rel,
    );
    store.send(&req).await
}

/// (outbox rows, pending rows)
async fn backlog(store: &dyn Store) -> Result<(i64, i64)> {
    let b = store.push_backlog().await?;
    Ok((b.outbox_len, b.pending_len))
}

async fn expand(store: &dyn Store, now_ms: i64) -> Result<u64> {
    Ok(store.expand_push_outbox(now_ms, COALESCE_MS, BATCH).await?)
}

async fn claim(store: &dyn Store, lease: &str, now_ms: i64) -> Result<Vec<PushJob>> {
    Ok(store.claim_push(lease, now_ms, LEASE_MS, BATCH).await?)
}

/// The one job a claim must answer.
async fn claim_one(store: &dyn Store, lease: &str, now_ms: i64) -> Result<PushJob> {
    let mut jobs = claim(store, lease, now_ms).await?;
    ensure!(
        jobs.len() == 1,
        "claim {lease} at {now_ms}: {} jobs, expected 1: {jobs:?}",
        jobs.len()
    );
    Ok(jobs.remove(0))
}

async fn report(store: &dyn Store, job: &PushJob, result: PushResult, now_ms: i64) -> Result<()> {
    let outcome = PushOutcome {
        job: job.clone(),
        result,
    };
    Ok(store.report_push(&[outcome], now_ms, COALESCE_MS).await?)
}

/// Who a claim notified: (user, device, seq, reason).
type Notified = BTreeSet<(String, String, i64, &'static str)>;

fn notified(jobs: &[PushJob]) -> Notified {
    jobs.iter()
        .map(|j| {
            let reason = j.message.as_ref().map_or("gone", |m| m.reason.as_str());
            (
                j.user_id.to_string(),
                j.device_id.to_string(),
                j.seq,
                reason,
            )
        })
        .collect()
}

fn expect(rows: &[(&UserId, &str, i64, &'static str)]) -> Notified {
    rows.iter()
        .map(|(u, d, s, r)| (u.to_string(), (*d).to_owned(), *s, *r))
        .collect()
}

/// Expands at `now_ms`, checks one pending row per notification, claims them all and drops
/// them (a drop records nothing sent): who the last messages notify.
async fn round(store: &dyn Store, now_ms: i64) -> Result<Vec<PushJob>> {
    expand(store, now_ms).await?;
    let (outbox, pending) = backlog(store).await?;
    let jobs = claim(store, &format!("round-{now_ms}"), now_ms).await?;
    ensure!(
        outbox == 0 && pending == jobs.len() as i64,
        "round at {now_ms}: outbox {outbox}, pending {pending}, claimed {}",
        jobs.len()
    );
    let outcomes: Vec<PushOutcome> = jobs
        .iter()
        .map(|job| PushOutcome {
            job: job.clone(),
            result: PushResult::Dropped,
        })
        .collect();
    store.report_push(&outcomes, now_ms, COALESCE_MS).await?;
    ensure!(backlog(store).await?.1 == 0, "dropped rows stayed pending");
    Ok(jobs)
}

/// ana and ben in a direct chat, ben's `d1` with a push target.
async fn pair(store: &dyn Store) -> Result<(ConvId, UserId, UserId)> {
    let ana = user(store, "u-ana").await?;
    let ben = user(store, "u-ben").await?;
    let conv = store
        .create_conversation(&new_conv(&ana, ConvKind::Direct, None, &[&ben]))
        .await?
        .conv_id;
    target(store, &ben, "d1").await?;
    Ok((conv, ana, ben))
}

/// A committed message writes exactly one outbox row; refused sends, replays, edits,
/// reactions and joins write none; the expansion takes the rows in batches.
pub async fn outbox_follows_commits(store: &dyn Store) -> Result<()> {
    let ana = user(store, "u-ana").await?;
    let ben = user(store, "u-ben").await?;
    let cai = user(store, "u-cai").await?;
    let conv = store
        .create_conversation(&new_conv(&ana, ConvKind::Group, Some("c-outbox"), &[&ben]))
        .await?
        .conv_id;
    ensure!(backlog(store).await? == (0, 0), "joins wrote outbox rows");
    let m1 = send(store, &conv, &ana, "m-1", "hello").await?;
    ensure!(
        backlog(store).await?.0 == 1,
        "a message wrote {:?} outbox rows",
        backlog(store).await?
    );
    let replay = send(store, &conv, &ana, "m-1", "hello").await?;
    ensure!(replay.dup, "replay: {replay:?}");
    let mismatch = send(store, &conv, &ana, "m-1", "HELLO").await;
    ensure!(
        matches!(
            &mismatch,
            Err(StoreError::Rejected(Rejection::IdempotencyMismatch))
        ),
        "mismatch: {mismatch:?}"
    );
    let outsider = send(store, &conv, &cai, "m-x", "intrude").await;
    ensure!(
        matches!(&outsider, Err(StoreError::Rejected(Rejection::NotMember))),
        "non-member: {outsider:?}"
    );
    ensure!(
        backlog(store).await?.0 == 1,
        "a replay or a refused send wrote an outbox row"
    );
    let edit = EditRequest::new(
        conv.clone(),
        ana.clone(),
        dev("d1"),
        ClientMsgId::parse("e-1")?,
        m1.seq,
        Body::parse("hello, edited", 1024)?,
    );
    store.edit(&edit).await?;
    let react = ReactRequest {
        conv_id: conv.clone(),
        user: ben.clone(),
        target_seq: m1.seq,
        key: ReactionKey::parse("👍")?,
        added: true,
    };
    ensure!(store.react(&react).await?.event.is_some(), "no reaction");
    store.add_member(&conv, &ana, &cai).await?;
    ensure!(
        backlog(store).await?.0 == 1,
        "an edit, a reaction or a join wrote an outbox row: {:?}",
        backlog(store).await?
    );
    send(store, &conv, &ana, "m-2", "again").await?;
    ensure!(backlog(store).await?.0 == 2, "second message");
    let first = store.expand_push_outbox(T0, COALESCE_MS, 1).await?;
    ensure!(
        first == 1 && backlog(store).await?.0 == 1,
        "a batch of 1 expanded {first}"
    );
    let rest = expand(store, T0).await?;
    ensure!(
        rest == 1 && backlog(store).await? == (0, 0),
        "rest {rest}, backlog {:?} (no one has a target)",
        backlog(store).await?
    );
    ensure!(expand(store, T0).await? == 0, "an empty outbox expanded");
    Ok(())
}

/// The expansion queues one row per device of each other member whose period holds the
/// message, that has a push target and whose level lets it through; the claim tells why.
pub async fn expand_picks_recipients(store: &dyn Store) -> Result<()> {
    let ana = user(store, "u-ana").await?;
    let ben = user(store, "u-ben").await?;
    let cai = user(store, "u-cai").await?;
    let dan = user(store, "u-dan").await?;
    let eve = user(store, "u-eve").await?;
    let fay = user(store, "u-fay").await?;
    let conv = store
        .create_conversation(&new_conv(
            &ana,
            ConvKind::Group,
            Some("c-push"),
            &[&ben, &cai, &dan, &fay],
        ))
        .await?
        .conv_id;
    device(store, &ana, "d2").await?;
    device(store, &ben, "d2").await?;
    device(store, &ben, "d3").await?; // no target
    for (u, d) in [
        (&ana, "d1"),
        (&ana, "d2"),
        (&ben, "d1"),
        (&cai, "d1"),
        (&dan, "d1"),
        (&eve, "d1"),
        (&fay, "d1"),
    ] {
        target(store, u, d).await?;
    }
    let gateway = PushTarget::Gateway {
        url: "https://gateway.example/_matrix/push/v1/notify".into(),
        pushkey: "ben-pushkey".into(),
        app_id: "org.parley.test".into(),
    };
    store
        .set_push_target((&ben, &dev("d2")), &gateway, T0)
        .await?;
    store.remove_member(&conv, &fay, &fay).await?;
    store
        .set_notify_level(&conv, &cai, NotifyLevel::None)
        .await?;
    store
        .set_notify_level(&conv, &dan, NotifyLevel::Mentions)
        .await?;

    // A plain message: ben's two devices with targets; eve joined after it.
    let m1 = send(store, &conv, &ana, "m-1", "hello").await?.seq;
    store.add_member(&conv, &ana, &eve).await?;
    let jobs = round(store, T0).await?;
    let got = notified(&jobs);
    let want = expect(&[(&ben, "d1", m1, "message"), (&ben, "d2", m1, "message")]);
    ensure!(
        got == want,
        "plain message notified {got:?}, expected {want:?}"
    );
    let bens_d2 = jobs.iter().find(|j| j.device_id.as_str() == "d2");
    ensure!(
        bens_d2.is_some_and(|j| j.target == gateway),
        "ben's d2 claimed with {bens_d2:?}"
    );

    // Mentions: dan (level mentions) rings, cai (level none) does not.
    let m2 = send_rel(
        store,
        &conv,
        &ana,
        "m-2",
        "hi @u-dan, @u-ben and @u-cai",
        SendRelations::default(),
    )
    .await?
    .seq;
    let got = notified(&round(store, T0 + 1).await?);
    let want = expect(&[
        (&ben, "d1", m2, "mention"),
        (&ben, "d2", m2, "mention"),
        (&dan, "d1", m2, "mention"),
        (&eve, "d1", m2, "message"),
    ]);
    ensure!(got == want, "mention notified {got:?}, expected {want:?}");

    // dan's own message: every device of the others but none of dan's.
    let m3 = send(store, &conv, &dan, "m-3", "dan here").await?.seq;
    let got = notified(&round(store, T0 + 2).await?);
    let want = expect(&[
        (&ana, "d1", m3, "message"),
        (&ana, "d2", m3, "message"),
        (&ben, "d1", m3, "message"),
        (&ben, "d2", m3, "message"),
        (&eve, "d1", m3, "message"),
    ]);
    ensure!(
        got == want,
        "dan's message notified {got:?}, expected {want:?}"
    );

    // A reply to dan's message rings dan; a reply to ana's does not.
    let reply = |to| SendRelations {
        reply_to: Some(to),
        ..SendRelations::default()
    };
    let m4 = send_rel(store, &conv, &ben, "m-4", "re", reply(m3))
        .await?
        .seq;
    let got = notified(&round(store, T0 + 3).await?);
    let want = expect(&[
        (&ana, "d1", m4, "message"),
        (&ana, "d2", m4, "message"),
        (&dan, "d1", m4, "reply"),
        (&eve, "d1", m4, "message"),
    ]);
    ensure!(
        got == want,
        "reply to dan notified {got:?}, expected {want:?}"
    );
    let m5 = send_rel(store, &conv, &ben, "m-5", "re ana", reply(m1))
        .await?
        .seq;
    let got = notified(&round(store, T0 + 4).await?);
    let want = expect(&[
        (&ana, "d1", m5, "reply"),
        (&ana, "d2", m5, "reply"),
        (&eve, "d1", m5, "message"),
    ]);
    ensure!(
        got == want,
        "reply to ana notified {got:?}, expected {want:?}"
    );
    Ok(())
}

/// Messages expanded before a claim coalesce into one row with the latest seq; after a sent
/// notification the next one waits until the coalescing interval passed.
pub async fn coalesce_into_latest(store: &dyn Store) -> Result<()> {
    let (conv, ana, _ben) = pair(store).await?;
    send(store, &conv, &ana, "m-1", "one").await?;
    let m2 = send(store, &conv, &ana, "m-2", "two").await?.seq;
    ensure!(expand(store, T0).await? == 2, "two outbox rows");
    ensure!(
        backlog(store).await? == (0, 1),
        "a burst of two: {:?}",
        backlog(store).await?
    );
    let job = claim_one(store, "l-1", T0).await?;
    ensure!(job.seq == m2, "coalesced to seq {}, expected {m2}", job.seq);
    let sent_at = T0 + 100;
    report(store, &job, PushResult::Sent { at_ms: sent_at }, sent_at).await?;
    ensure!(backlog(store).await?.1 == 0, "a sent row stayed");

    // The next message waits out the interval after the last send.
    let m3 = send(store, &conv, &ana, "m-3", "three").await?.seq;
    expand(store, sent_at + 100).await?;
    let due = sent_at + COALESCE_MS;
    let early = claim(store, "l-2", due - 1).await?;
    ensure!(
        early.is_empty(),
        "claimed before the interval passed: {early:?}"
    );
    let job = claim_one(store, "l-3", due).await?;
    ensure!(job.seq == m3, "after the interval: seq {}", job.seq);

    // A message queued while the row is leased: the send of the older seq leaves the row,
    // which waits for the interval after that send.
    let m4 = send(store, &conv, &ana, "m-4", "four").await?.seq;
    expand(store, due + 100).await?;
    ensure!(backlog(store).await?.1 == 1, "a second row for the device");
    ensure!(
        claim(store, "l-4", due + 100).await?.is_empty(),
        "a leased row claimed again"
    );
    let sent_at = due + 200;
    report(store, &job, PushResult::Sent { at_ms: sent_at }, sent_at).await?;
    ensure!(
        backlog(store).await?.1 == 1,
        "the newer message went with the older one's send"
    );
    let due = sent_at + COALESCE_MS;
    ensure!(
        claim(store, "l-5", due - 1).await?.is_empty(),
        "the newer message did not wait for the interval"
    );
    let job = claim_one(store, "l-6", due).await?;
    ensure!(
        job.seq == m4 && job.attempts == 0,
        "the newer message: seq {} attempts {}",
        job.seq,
        job.attempts
    );
    report(store, &job, PushResult::Sent { at_ms: due }, due).await?;
    ensure!(
        backlog(store).await? == (0, 0),
        "left {:?}",
        backlog(store).await?
    );
    Ok(())
}

/// Puts the outbox row of `(conv, seq)` back, as a second expansion of the message would find.
async fn requeue(sql: &Sql, conv: &ConvId, seq: i64) -> Result<()> {
    sql.execute(
        "INSERT INTO push_outbox (conv_id, seq) VALUES ($1, $2)",
        &[SqlArg::Text(conv.as_str()), SqlArg::Int(seq)],
    )
    .await
    .context("requeue an outbox row")?;
    Ok(())
}

/// Nothing at or below the seq last sent to a device is queued again: not by a second
/// expansion of the same messages, not after a late report of an older seq. `sql` reaches the
/// store's tables, to put expanded outbox rows back.
pub async fn dedupe_never_requeues(store: &dyn Store, sql: &Sql) -> Result<()> {
    let (conv, ana, _ben) = pair(store).await?;
    let m1 = send(store, &conv, &ana, "m-1", "one").await?.seq;
    let m2 = send(store, &conv, &ana, "m-2", "two").await?.seq;
    expand(store, T0).await?;
    let older = claim_one(store, "l-1", T0).await?;
    ensure!(older.seq == m2, "claimed seq {}", older.seq);
    report(store, &older, PushResult::Sent { at_ms: T0 }, T0).await?;
    ensure!(expand(store, T0 + 1).await? == 0, "expanded twice");

    let later = T0 + 10 * COALESCE_MS;
    requeue(sql, &conv, m1).await?;
    requeue(sql, &conv, m2).await?;
    ensure!(expand(store, later).await? == 2, "the requeued rows");
    ensure!(
        backlog(store).await? == (0, 0),
        "a sent seq or an older one was queued again: {:?}",
        backlog(store).await?
    );

    let m3 = send(store, &conv, &ana, "m-3", "three").await?.seq;
    expand(store, later).await?;
    let job = claim_one(store, "l-2", later).await?;
    ensure!(job.seq == m3, "claimed seq {}", job.seq);
    report(store, &job, PushResult::Sent { at_ms: later }, later).await?;
    // Late reports of the older seq, its lease long gone.
    report(
        store,
        &older,
        PushResult::Sent { at_ms: later + 1 },
        later + 1,
    )
    .await?;
    report(
        store,
        &older,
        PushResult::Retry { due_ms: later + 2 },
        later + 1,
    )
    .await?;
    ensure!(
        backlog(store).await? == (0, 0),
        "a late report queued something: {:?}",
        backlog(store).await?
    );
    let much_later = later + 10 * COALESCE_MS;
    requeue(sql, &conv, m3).await?;
    requeue(sql, &conv, m2).await?;
    expand(store, much_later).await?;
    ensure!(
        backlog(store).await? == (0, 0) && claim(store, "l-3", much_later).await?.is_empty(),
        "after a late report of seq {m2}, seq {m3} was queued again"
    );
    Ok(())
}

/// `All` is kept as no row; the other levels as one.
pub async fn levels_stored_sparsely(store: &dyn Store, sql: &Sql) -> Result<()> {
    let (conv, _ana, ben) = pair(store).await?;
    let rows = || async {
        sql.one::<i64>("SELECT COUNT(*) FROM notify_levels", &[])
            .await
            .context("count levels")
    };
    ensure!(rows().await? == 0, "levels before any was set");
    store
        .set_notify_level(&conv, &ben, NotifyLevel::Mentions)
        .await?;
    ensure!(rows().await? == 1, "mentions level rows");
    store
        .set_notify_level(&conv, &ben, NotifyLevel::All)
        .await?;
    ensure!(
        rows().await? == 0 && store.notify_level(&conv, &ben).await? == NotifyLevel::All,
        "all kept as a row"
    );
    Ok(())
}

/// A claimed job tells what the message is as of the claim: its current body, its sender,
/// whether the device is online, the user's read position and privacy; `None` once recalled.
pub async fn claim_reports_state(store: &dyn Store) -> Result<()> {
    let ana = user(store, "u-ana").await?;
    let ben = user(store, "u-ben").await?;
    let mut req = new_conv(&ana, ConvKind::Group, Some("c-state"), &[&ben]);
    req.title = Some("Team".into());
    let conv = store.create_conversation(&req).await?.conv_id;
    let ben_target = target(store, &ben, "d1").await?;
    let bens_d1 = dev("d1");

    // An offline device, nothing read, privacy off, the body as edited since.
    let m1 = send(store, &conv, &ana, "m-1", "first").await?;
    let edit = EditRequest::new(
        conv.clone(),
        ana.clone(),
        dev("d1"),
        ClientMsgId::parse("e-1")?,
        m1.seq,
        Body::parse("first, edited", 1024)?,
    );
    store.edit(&edit).await?;
    expand(store, T0).await?;
    let job = claim_one(store, "l-1", T0).await?;
    let committed = event_at(store, &conv, &ben, m1.seq).await?.created_at;
    let message = job.message.as_ref().context("the message is there")?;
    ensure!(
        job.user_id == ben
            && job.device_id == bens_d1
            && job.conv_id == conv
            && job.seq == m1.seq
            && job.attempts == 0
            && job.lease == "l-1"
            && job.target == ben_target
            && !job.online
            && !job.privacy
            && job.read_seq < m1.seq
            && job.title.as_deref() == Some("Team"),
        "first job: {job:?}"
    );
    ensure!(
        message.sender == ana
            && message.body.as_deref() == Some("first, edited")
            && message.message_id == Some(m1.message_id)
            && message.committed_at == committed,
        "first message: {message:?}, committed at {committed}"
    );
    report(store, &job, PushResult::Dropped, T0).await?;

    // Online over a route; privacy on.
    let route = Route {
        user_id: ben.clone(),
        device_id: bens_d1.clone(),
        gateway_id: "gw-1".into(),
        conn_id: "c-1".into(),
    };
    store.claim_route(&route).await?;
    store.set_push_privacy(&ben, true).await?;
    let m2 = send(store, &conv, &ana, "m-2", "second").await?.seq;
    expand(store, T0 + 1).await?;
    let job = claim_one(store, "l-2", T0 + 1).await?;
    ensure!(
        job.seq == m2 && job.online && job.privacy,
        "online job: {job:?}"
    );
    report(store, &job, PushResult::Dropped, T0 + 1).await?;
    ensure!(
        store.release_route(&ben, &bens_d1, "c-1").await?,
        "route release"
    );

    // Read on another device between the expansion and the claim.
    let m3 = send(store, &conv, &ana, "m-3", "third").await?.seq;
    expand(store, T0 + 2).await?;
    store.mark_read(&conv, &ben, m3).await?;
    let job = claim_one(store, "l-3", T0 + 2).await?;
    ensure!(
        job.seq == m3 && job.read_seq == m3 && !job.online,
        "read job: {job:?}"
    );
    report(store, &job, PushResult::Dropped, T0 + 2).await?;

    // Recalled between the expansion and the claim.
    let m4 = send(store, &conv, &ana, "m-4", "fourth").await?.seq;
    expand(store, T0 + 3).await?;
    store.recall(&conv, &ana, m4, chrono::Utc::now()).await?;
    let job = claim_one(store, "l-4", T0 + 3).await?;
    ensure!(
        job.seq == m4 && job.message.is_none(),
        "recalled job: {job:?}"
    );
    report(store, &job, PushResult::Dropped, T0 + 3).await?;

    // Recalled before the expansion: nothing is queued.
    let m5 = send(store, &conv, &ana, "m-5", "fifth").await?.seq;
    store.recall(&conv, &ana, m5, chrono::Utc::now()).await?;
    expand(store, T0 + 4).await?;
    ensure!(
        backlog(store).await? == (0, 0),
        "a recalled message was queued: {:?}",
        backlog(store).await?
    );
    Ok(())
}

/// A lease keeps a row from other claims until it runs out; then another lease takes it, and
/// the first lease's reports change nothing of it, except that a send is recorded as sent.
pub async fn lease_guards_reports(store: &dyn Store) -> Result<()> {
    let (conv, ana, _ben) = pair(store).await?;
    let m1 = send(store, &conv, &ana, "m-1", "one").await?.seq;
    expand(store, T0).await?;
    let first = claim_one(store, "l-1", T0).await?;
    let until = T0 + LEASE_MS;
    ensure!(
        claim(store, "l-2", T0 + 1).await?.is_empty()
            && claim(store, "l-2", until - 1).await?.is_empty(),
        "a second claim took a leased row"
    );
    let second = claim_one(store, "l-2", until + 1).await?;
    ensure!(
        second.seq == m1 && second.lease == "l-2" && second.attempts == 0,
        "after the lease ran out: {second:?}"
    );
    let until2 = until + 1 + LEASE_MS;

    // The first lease reports late: a retry, a send, a drop. None releases, reschedules or
    // deletes the row of the second.
    let late = until + 100;
    report(store, &first, PushResult::Retry { due_ms: late }, late).await?;
    report(store, &first, PushResult::Sent { at_ms: late }, late).await?;
    report(store, &first, PushResult::Dropped, late).await?;
    ensure!(
        backlog(store).await?.1 == 1,
        "a report under the old lease deleted the row"
    );
    ensure!(
        claim(store, "l-3", until2 - 1).await?.is_empty(),
        "a report under the old lease released the row"
    );
    let third = claim_one(store, "l-3", until2 + 1).await?;
    ensure!(
        third.attempts == 0 && third.lease == "l-3",
        "the old lease's retry counted: {third:?}"
    );
    report(store, &third, PushResult::Dropped, until2 + 1).await?;
    ensure!(backlog(store).await?.1 == 0, "the current lease's drop");

    // The old lease's send was recorded: the next message waits out the interval after it.
    let coalesce = 100 * LEASE_MS;
    send(store, &conv, &ana, "m-2", "two").await?;
    store
        .expand_push_outbox(until2 + 2, coalesce, BATCH)
        .await?;
    ensure!(
        claim(store, "l-4", late + coalesce - 1).await?.is_empty(),
        "the old lease's send was not recorded"
    );
    claim_one(store, "l-5", late + coalesce).await?;
    Ok(())
}

/// A retry hands the row back with one more attempt, due when asked; a gone endpoint deletes
/// the device's target and everything queued for it, unless a new target replaced it.
pub async fn retry_and_gone(store: &dyn Store) -> Result<()> {
    let ana = user(store, "u-ana").await?;
    let ben = user(store, "u-ben").await?;
    let g1 = store
        .create_conversation(&new_conv(&ana, ConvKind::Group, Some("c-g1"), &[&ben]))
        .await?
        .conv_id;
    let g2 = store
        .create_conversation(&new_conv(&ana, ConvKind::Group, Some("c-g2"), &[&ben]))
        .await?
        .conv_id;
    target(store, &ben, "d1").await?;
    device(store, &ben, "d2").await?;
    let m1 = send(store, &g1, &ana, "m-1", "one").await?.seq;
    expand(store, T0).await?;
    let job = claim_one(store, "l-1", T0).await?;
    report(
        store,
        &job,
        PushResult::Retry { due_ms: T0 + 3_000 },
        T0 + 10,
    )
    .await?;
    ensure!(
        claim(store, "l-2", T0 + 2_999).await?.is_empty(),
        "claimed before the retry was due"
    );
    let job = claim_one(store, "l-3", T0 + 3_000).await?;
    ensure!(
        job.seq == m1 && job.attempts == 1,
        "after one retry: {job:?}"
    );
    report(
        store,
        &job,
        PushResult::Retry { due_ms: T0 + 4_000 },
        T0 + 3_010,
    )
    .await?;

    // ben's d2 gets a target; a message to g2 queues for both devices.
    let d2_first = target(store, &ben, "d2").await?;
    let m2 = send(store, &g2, &ana, "m-2", "two").await?.seq;
    expand(store, T0 + 4_000).await?;
    ensure!(backlog(store).await?.1 == 3, "rows of two devices");
    let jobs = claim(store, "l-4", T0 + 4_000).await?;
    let find = |d: &str, c: &ConvId| {
        jobs.iter()
            .find(|j| j.device_id.as_str() == d && &j.conv_id == c)
            .cloned()
            .with_context(|| format!("no job for {d} in {c}: {jobs:?}"))
    };
    let d1_g1 = find("d1", &g1)?;
    let d2_g2 = find("d2", &g2)?;
    ensure!(
        jobs.len() == 3 && d1_g1.attempts == 2 && d2_g2.seq == m2,
        "jobs: {jobs:?}"
    );

    // d1's endpoint is gone: its target and both of its rows go, d2's stays.
    report(store, &d1_g1, PushResult::Gone, T0 + 4_010).await?;
    ensure!(
        store.push_target((&ben, &dev("d1"))).await?.is_none(),
        "a gone target stayed"
    );
    ensure!(
        store.push_target((&ben, &dev("d2"))).await? == Some(d2_first.clone()),
        "another device's target went"
    );
    ensure!(
        backlog(store).await?.1 == 1,
        "d1's rows after gone: pending {}",
        backlog(store).await?.1
    );

    // d2 registered a new endpoint before the old one's 410 came back: the new target stays,
    // and the queued notification goes to it.
    let d2_second = webpush(&ben, "d2", 2);
    store
        .set_push_target((&ben, &dev("d2")), &d2_second, T0 + 4_020)
        .await?;
    report(store, &d2_g2, PushResult::Gone, T0 + 4_030).await?;
    ensure!(
        store.push_target((&ben, &dev("d2"))).await? == Some(d2_second.clone()),
        "gone for the old endpoint deleted the new target"
    );
    ensure!(
        backlog(store).await?.1 == 1,
        "gone for the old endpoint deleted the notification queued for the new one"
    );
    let job = claim_one(store, "l-5", T0 + 4_030).await?;
    ensure!(
        job.seq == m2 && job.target == d2_second && job.attempts == 0,
        "the requeued notification: {job:?}"
    );
    Ok(())
}

/// Targets are set, replaced and deleted, and go with the device's token; levels and privacy
/// round trip.
pub async fn targets_levels_privacy(store: &dyn Store) -> Result<()> {
    let (conv, ana, ben) = pair(store).await?;
    let bens_d1 = dev("d1");
    let d1 = (&ben, &bens_d1);
    ensure!(
        store.push_target(d1).await? == Some(webpush(&ben, "d1", 1)),
        "set target"
    );
    let gateway = PushTarget::Gateway {
        url: "https://gateway.example/notify".into(),
        pushkey: "key".into(),
        app_id: "app".into(),
    };
    store.set_push_target(d1, &gateway, T0).await?;
    ensure!(
        store.push_target(d1).await? == Some(gateway.clone()),
        "replaced target"
    );
    send(store, &conv, &ana, "m-1", "one").await?;
    expand(store, T0).await?;
    ensure!(backlog(store).await?.1 == 1, "queued");
    ensure!(store.delete_push_target(d1).await?, "delete answered false");
    ensure!(
        store.push_target(d1).await?.is_none() && backlog(store).await?.1 == 0,
        "after delete: {:?}, pending {}",
        store.push_target(d1).await?,
        backlog(store).await?.1
    );
    ensure!(!store.delete_push_target(d1).await?, "deleted twice");

    // A revoked device and a device with a new token lose their targets and what was queued.
    target(store, &ben, "d1").await?;
    send(store, &conv, &ana, "m-2", "two").await?;
    expand(store, T0 + 1).await?;
    ensure!(backlog(store).await?.1 == 1, "queued again");
    store.revoke_device(&ben, &bens_d1).await?;
    ensure!(
        store.push_target(d1).await?.is_none() && backlog(store).await?.1 == 0,
        "after revoke: {:?}, pending {}",
        store.push_target(d1).await?,
        backlog(store).await?.1
    );
    let bens_d2 = device(store, &ben, "d2").await?;
    target(store, &ben, "d2").await?;
    store
        .issue_device_token(&ben, &bens_d2, "hash-ben-d2-again")
        .await?;
    ensure!(
        store.push_target((&ben, &bens_d2)).await?.is_none(),
        "a new token kept the old holder's target"
    );

    // Levels: all by default, per conversation.
    let other = store
        .create_conversation(&new_conv(&ana, ConvKind::Group, Some("c-other"), &[&ben]))
        .await?
        .conv_id;
    ensure!(
        store.notify_level(&conv, &ben).await? == NotifyLevel::All,
        "default level"
    );
    for level in [NotifyLevel::Mentions, NotifyLevel::None, NotifyLevel::All] {
        store.set_notify_level(&conv, &ben, level).await?;
        let got = store.notify_level(&conv, &ben).await?;
        ensure!(got == level, "set {level:?}, got {got:?}");
    }
    store
        .set_notify_level(&conv, &ben, NotifyLevel::None)
        .await?;
    ensure!(
        store.notify_level(&other, &ben).await? == NotifyLevel::All
            && store.notify_level(&conv, &ana).await? == NotifyLevel::All,
        "a level leaked to another conversation or member"
    );

    // Privacy.
    ensure!(!store.push_privacy(&ben).await?, "default privacy");
    store.set_push_privacy(&ben, true).await?;
    ensure!(store.push_privacy(&ben).await?, "privacy on");
    ensure!(!store.push_privacy(&ana).await?, "privacy leaked to ana");
    store.set_push_privacy(&ben, false).await?;
    ensure!(!store.push_privacy(&ben).await?, "privacy off");
    Ok(())
}

/// `14-no-push-after-read` in the store: ben reads a message on his laptop after it was
/// expanded for his phone; the phone's claimed job reports it read, so the gateway drops it.
/// The negative control `push-ignores-read` makes this fail with "read position …".
pub async fn read_drops_notification(store: &dyn Store) -> Result<()> {
    let (conv, ana, ben) = pair(store).await?;
    device(store, &ben, "laptop").await?;
    let seq = send(store, &conv, &ana, "m-1", "read me").await?.seq;
    expand(store, T0).await?;
    let read = store.mark_read(&conv, &ben, seq).await?;
    ensure!(read == seq, "ben's mark answered {read}, expected {seq}");
    let job = claim_one(store, "l-1", T0).await?;
    ensure!(
        job.user_id == ben && job.seq == seq,
        "claimed {job:?}, expected ben's seq {seq}"
    );
    ensure!(
        job.read_seq >= seq,
        "read position: the claim reports read_seq {} for seq {seq}, which ben already read on \
         another device",
        job.read_seq
    );
    Ok(())
}
