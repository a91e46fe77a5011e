//! Replies, edits, reactions, threads and mentions (docs/RELATIONS.md) on every store: the
//! events they append, what reads fold in, the refusals, and what recall and retention take.

use std::sync::Arc;

use anyhow::{ensure, Context, Result};
use chrono::Duration;
use parley_domain::relations::ReactionCount;
use parley_domain::{
    Body, ClientMsgId, ConvId, ConvKind, DeviceId, Event, EventKind, ReactionKey, Rejection,
    SendRelations, UserId,
};
use parley_store::{
    EditOutcome, EditRequest, EventsQuery, ReactOutcome, ReactRequest, SendOutcome, SendRequest,
    Store, StoreError, ThreadQuery,
};

use super::{event_at as at, events_seen as all, new_conv, send, uid, user};

fn body(s: &str) -> Body {
    Body::parse(s, 16 * 1024).expect("body")
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
        DeviceId::parse("d1").expect("device"),
        ClientMsgId::parse(key).expect("key"),
        body(text),
        rel,
    );
    store.send(&req).await
}

async fn edit(
    store: &dyn Store,
    conv: &ConvId,
    from: &UserId,
    key: &str,
    target: i64,
    text: &str,
) -> Result<EditOutcome, StoreError> {
    let req = EditRequest::new(
        conv.clone(),
        from.clone(),
        DeviceId::parse("d1").expect("device"),
        ClientMsgId::parse(key).expect("key"),
        target,
        body(text),
    );
    store.edit(&req).await
}

async fn react(
    store: &dyn Store,
    conv: &ConvId,
    who: &UserId,
    target: i64,
    key: &str,
    added: bool,
) -> Result<ReactOutcome, StoreError> {
    let req = ReactRequest {
        conv_id: conv.clone(),
        user: who.clone(),
        target_seq: target,
        key: ReactionKey::parse(key).expect("key"),
        added,
    };
    store.react(&req).await
}

fn rejected(r: Result<impl std::fmt::Debug, StoreError>) -> Option<Rejection> {
    match r {
        Err(StoreError::Rejected(why)) => Some(why),
        _ => None,
    }
}

fn counts(e: &Event) -> Vec<(String, i64, bool)> {
    e.relations()
        .reactions
        .iter()
        .map(|ReactionCount { key, count, me }| (key.clone(), *count, *me))
        .collect()
}

/// The seqs of a thread page of `root` as `who` reads it, its `through_seq` and head.
async fn thread_seqs(
    store: &dyn Store,
    conv: &ConvId,
    who: &UserId,
    root: i64,
    query: EventsQuery,
    limit: u32,
) -> Result<(Vec<i64>, i64, i64)> {
    let page = store
        .thread(conv, who, ThreadQuery { root, query }, limit)
        .await?;
    let seqs = page.events.iter().map(|e| e.seq).collect();
    Ok((seqs, page.through_seq, page.head))
}

/// A group of ana, ben and cai (joins 1–3) and ana's message at 4 mentioning ben.
async fn group(store: &dyn Store) -> Result<(ConvId, UserId, UserId, UserId)> {
    let ana = user(store, "u-ana").await?;
    let ben = user(store, "u-ben").await?;
    let cai = user(store, "u-cai").await?;
    let conv = store
        .create_conversation(&new_conv(
            &ana,
            ConvKind::Group,
            Some("c-rel"),
            &[&ben, &cai],
        ))
        .await?
        .conv_id;
    let sent = send_rel(
        store,
        &conv,
        &ana,
        "m-1",
        "hello @u-ben, meet @u-nobody",
        SendRelations::default(),
    )
    .await?;
    ensure!(sent.seq == 4, "first message at {}", sent.seq);
    Ok((conv, ana, ben, cai))
}

/// Each relation appends one event at the next seq; reads fold edits, reactions and thread
/// summaries into the message; edits and reactions are not unread; mentions are counted.
pub async fn relations_fold_into_reads(store: &dyn Store) -> Result<()> {
    let (conv, ana, ben, cai) = group(store).await?;
    let msg = at(store, &conv, &ben, 4).await?;
    ensure!(
        msg.relations().mentions == vec![uid("u-ben")],
        "mentions of members only: {:?}",
        msg.relations().mentions
    );
    let view = store.get_conversation(&conv, &ben).await?;
    ensure!(
        view.mentions == 1 && view.unread == 1,
        "ben's view {view:?}"
    );

    // 5: ben replies to 4.
    let reply = send_rel(
        store,
        &conv,
        &ben,
        "m-2",
        "hi",
        SendRelations {
            reply_to: Some(4),
            ..SendRelations::default()
        },
    )
    .await?;
    ensure!(reply.seq == 5, "reply at {}", reply.seq);
    ensure!(
        reply.event.as_ref().and_then(|e| e.relations().reply_to) == Some(4),
        "the committed event names its target"
    );
    // A retry of the reply is dup; the same key without the reply is a mismatch.
    let again = send_rel(
        store,
        &conv,
        &ben,
        "m-2",
        "hi",
        SendRelations {
            reply_to: Some(4),
            ..SendRelations::default()
        },
    )
    .await?;
    ensure!(again.dup && again.seq == 5, "retry {again:?}");
    let plain = send(store, &conv, &ben, "m-2", "hi").await;
    ensure!(
        rejected(plain) == Some(Rejection::IdempotencyMismatch),
        "the key without its reply"
    );

    // 6: ana edits 4; a retry is dup; the key with another body a mismatch; ben may not.
    let edited = edit(store, &conv, &ana, "e-1", 4, "hello again").await?;
    ensure!((edited.seq, edited.dup) == (6, false), "edit {edited:?}");
    let retry = edit(store, &conv, &ana, "e-1", 4, "hello again").await?;
    ensure!(
        (retry.seq, retry.dup, retry.message_id) == (6, true, edited.message_id),
        "edit retry {retry:?}"
    );
    ensure!(
        rejected(edit(store, &conv, &ana, "e-1", 4, "other").await)
            == Some(Rejection::IdempotencyMismatch),
        "edit key reused for another body"
    );
    ensure!(
        rejected(edit(store, &conv, &ana, "m-1", 4, "x").await)
            == Some(Rejection::IdempotencyMismatch),
        "a message's key used for an edit"
    );
    ensure!(
        rejected(edit(store, &conv, &ben, "e-2", 4, "x").await) == Some(Rejection::NotSender),
        "ben edits ana's message"
    );
    let msg = at(store, &conv, &cai, 4).await?;
    ensure!(
        msg.body.as_deref() == Some("hello again") && msg.relations().edited_at.is_some(),
        "folded edit {msg:?}"
    );
    let edit_event = at(store, &conv, &cai, 6).await?;
    ensure!(
        edit_event.kind == EventKind::Edit
            && edit_event.target_seq == Some(4)
            && edit_event.body.as_deref() == Some("hello again"),
        "edit event {edit_event:?}"
    );

    // 7, 8, 9: reactions; a repeated PUT and a DELETE of nothing write nothing.
    let up = react(store, &conv, &ben, 4, "👍", true).await?;
    ensure!(up.seq == Some(7) && up.event.is_some(), "react {up:?}");
    let up_again = react(store, &conv, &ben, 4, "👍", true).await?;
    ensure!(
        up_again.seq == Some(7) && up_again.event.is_none(),
        "repeated react {up_again:?}"
    );
    react(store, &conv, &cai, 4, "👍", true).await?; // 8
    react(store, &conv, &ben, 4, "🎉", true).await?; // 9
    let none = react(store, &conv, &cai, 4, "🎉", false).await?;
    ensure!(
        none.seq.is_none() && none.event.is_none(),
        "unreact of nothing {none:?}"
    );
    ensure!(
        counts(&at(store, &conv, &ben, 4).await?)
            == vec![("👍".into(), 2, true), ("🎉".into(), 1, true)],
        "ben's counts"
    );
    ensure!(
        counts(&at(store, &conv, &cai, 4).await?)
            == vec![("👍".into(), 2, true), ("🎉".into(), 1, false)],
        "cai's counts"
    );
    let down = react(store, &conv, &ben, 4, "👍", false).await?; // 10
    ensure!(down.seq == Some(10), "unreact {down:?}");
    ensure!(
        counts(&at(store, &conv, &ana, 4).await?)
            == vec![("👍".into(), 1, false), ("🎉".into(), 1, false)],
        "ana's counts after ben took 👍 back"
    );

    // 11, 12: a thread on 4; a reply in it cannot root one.
    let t1 = send_rel(
        store,
        &conv,
        &cai,
        "t-1",
        "in thread",
        SendRelations {
            thread_root: Some(4),
            ..SendRelations::default()
        },
    )
    .await?;
    let t2 = send_rel(
        store,
        &conv,
        &ana,
        "t-2",
        "me too",
        SendRelations {
            thread_root: Some(4),
            ..SendRelations::default()
        },
    )
    .await?;
    ensure!((t1.seq, t2.seq) == (11, 12), "thread replies {t1:?} {t2:?}");
    let nested = send_rel(
        store,
        &conv,
        &ana,
        "t-3",
        "deeper",
        SendRelations {
            thread_root: Some(11),
            ..SendRelations::default()
        },
    )
    .await;
    ensure!(
        matches!(rejected(nested), Some(Rejection::BadRequest(_))),
        "a reply rooted a thread"
    );
    let root = at(store, &conv, &ben, 4).await?;
    let thread = root
        .relations()
        .thread
        .clone()
        .context("no thread summary")?;
    ensure!(
        (thread.reply_count, thread.latest_seq) == (2, 12),
        "thread {thread:?}"
    );
    let after = |after| EventsQuery::After { after, epoch: None };
    let (seqs, through, _) = thread_seqs(store, &conv, &ben, 4, after(0), 2).await?;
    ensure!(
        seqs == vec![4, 11] && through == 11,
        "thread page 1: {seqs:?} through {through}"
    );
    let (seqs, through, head) = thread_seqs(store, &conv, &ben, 4, after(11), 2).await?;
    ensure!(
        seqs == vec![12] && through == head,
        "thread page 2: {seqs:?}"
    );
    let newest = EventsQuery::Before { before: None };
    let (seqs, _, _) = thread_seqs(store, &conv, &ben, 4, newest, 10).await?;
    ensure!(seqs == vec![12, 11, 4], "thread newest page {seqs:?}");

    // The log is gapless; unread counts messages only (4, 5, 11, 12 for a reader at 0).
    let seen: Vec<i64> = all(store, &conv, &ana)
        .await?
        .iter()
        .map(|e| e.seq)
        .collect();
    ensure!(seen == (1..=12).collect::<Vec<_>>(), "ana reads {seen:?}");
    let dan = user(store, "u-dan").await?;
    store.add_member(&conv, &ana, &dan).await?; // 13
    let view = store.get_conversation(&conv, &cai).await?;
    // cai's read position is 11 (their own thread reply); after it: 12 (ana's).
    ensure!(
        view.unread == 1 && view.mentions == 0,
        "cai's view {view:?}"
    );
    let view = store.get_conversation(&conv, &ben).await?;
    // ben's read position is 5 (their reply), past the mention at 4.
    ensure!(
        view.mentions == 0 && view.unread == 2,
        "ben's view {view:?}"
    );
    Ok(())
}

/// A target the actor cannot see answers exactly like one that does not exist; a recalled
/// target is `Recalled`; a non-member is `NotMember`.
pub async fn hidden_target_rule(store: &dyn Store) -> Result<()> {
    let (conv, ana, _ben, _cai) = group(store).await?;
    let dan = user(store, "u-dan").await?;
    store.add_member(&conv, &ana, &dan).await?; // 5
    let reply_to = |seq| SendRelations {
        reply_to: Some(seq),
        ..SendRelations::default()
    };
    let thread = |seq| SendRelations {
        thread_root: Some(seq),
        ..SendRelations::default()
    };
    for (what, hidden, missing) in [
        (
            "reply",
            rejected(send_rel(store, &conv, &dan, "r-1", "x", reply_to(4)).await),
            rejected(send_rel(store, &conv, &dan, "r-2", "x", reply_to(99)).await),
        ),
        (
            "thread",
            rejected(send_rel(store, &conv, &dan, "r-3", "x", thread(4)).await),
            rejected(send_rel(store, &conv, &dan, "r-4", "x", thread(99)).await),
        ),
        (
            "react",
            rejected(react(store, &conv, &dan, 4, "👍", true).await),
            rejected(react(store, &conv, &dan, 99, "👍", true).await),
        ),
        (
            "reply to a join",
            rejected(send_rel(store, &conv, &dan, "r-5", "x", reply_to(5)).await),
            rejected(send_rel(store, &conv, &dan, "r-6", "x", reply_to(98)).await),
        ),
    ] {
        ensure!(
            hidden == Some(Rejection::NotFound("no such message")) && hidden == missing,
            "{what}: hidden {hidden:?}, missing {missing:?}"
        );
    }
    let eve = user(store, "u-eve").await?;
    for r in [
        rejected(react(store, &conv, &eve, 4, "👍", true).await),
        rejected(edit(store, &conv, &eve, "e-1", 4, "x").await),
        rejected(send_rel(store, &conv, &eve, "r-1", "x", reply_to(4)).await),
        rejected(react(store, &cid_none(), &eve, 4, "👍", true).await),
    ] {
        ensure!(r == Some(Rejection::NotMember), "a stranger: {r:?}");
    }
    let head = store.get_conversation(&conv, &ana).await?.head;
    ensure!(head == 5, "refusals wrote: head {head}");
    Ok(())
}

fn cid_none() -> ConvId {
    ConvId::parse("c-none").expect("id")
}

/// A recall takes the bodies of the message's edits, its reactions, its mentions and its
/// place in its thread; nothing can relate to it afterwards, but a retry of an earlier
/// relation is still answered from its key.
pub async fn recall_takes_relations(store: &dyn Store) -> Result<()> {
    let (conv, ana, ben, cai) = group(store).await?;
    edit(store, &conv, &ana, "e-1", 4, "secret v2").await?; // 5
    react(store, &conv, &ben, 4, "👍", true).await?; // 6
    let reply = SendRelations {
        thread_root: Some(4),
        ..SendRelations::default()
    };
    send_rel(store, &conv, &cai, "t-1", "a reply", reply.clone()).await?; // 7
    send_rel(store, &conv, &ben, "t-2", "another", reply.clone()).await?; // 8
    store.recall(&conv, &ben, 8, chrono::Utc::now()).await?; // 9
    let root = at(store, &conv, &ana, 4).await?;
    ensure!(
        root.relations().thread.as_ref().map(|t| t.reply_count) == Some(1),
        "a recalled reply still counts: {root:?}"
    );
    store.recall(&conv, &ana, 4, chrono::Utc::now()).await?; // 10
    let events = all(store, &conv, &ben).await?;
    let body_of = |seq: i64| {
        events
            .iter()
            .find(|e| e.seq == seq)
            .and_then(|e| e.body.clone())
    };
    ensure!(
        body_of(4).is_none() && body_of(5).is_none(),
        "bodies after the recall: {:?} {:?}",
        body_of(4),
        body_of(5)
    );
    ensure!(
        !events
            .iter()
            .any(|e| e.body.as_deref().is_some_and(|b| b.contains("secret"))),
        "a recalled message's text is still readable"
    );
    let msg = at(store, &conv, &ben, 4).await?;
    ensure!(
        msg.recalled && msg.relations().reactions.is_empty() && msg.relations().edited_at.is_none(),
        "recalled message still shows relations: {msg:?}"
    );
    ensure!(
        store.get_conversation(&conv, &ben).await?.mentions == 0,
        "the recalled mention still counts"
    );
    for (what, r) in [
        (
            "edit",
            rejected(edit(store, &conv, &ana, "e-2", 4, "x").await),
        ),
        (
            "react",
            rejected(react(store, &conv, &cai, 4, "🎉", true).await),
        ),
        (
            "thread",
            rejected(send_rel(store, &conv, &cai, "t-3", "x", reply.clone()).await),
        ),
    ] {
        ensure!(r == Some(Rejection::Recalled), "{what} after recall: {r:?}");
    }
    // An identical retry of the edit is still answered from its key.
    let retry = edit(store, &conv, &ana, "e-1", 4, "secret v2").await?;
    ensure!(
        retry.dup && retry.seq == 5,
        "edit retry after recall {retry:?}"
    );
    Ok(())
}

/// Purging a message erases the bodies of its later edits and its reactions; the later events
/// keep their seqs (P1); an edit's key moves to the tombstones like a message's (P2).
pub async fn purge_takes_relations(store: &dyn Store) -> Result<()> {
    let ana = user(store, "u-ana").await?;
    let ben = user(store, "u-ben").await?;
    let mut req = new_conv(&ana, ConvKind::Group, Some("c-ret"), &[&ben]);
    req.retention_ms = Some(super::RETENTION_TEST_MS);
    let conv = store.create_conversation(&req).await?.conv_id;
    send(store, &conv, &ana, "m-1", "old text").await?; // 3
    edit(store, &conv, &ana, "e-1", 3, "old text, edited").await?; // 4
    tokio::time::sleep(std::time::Duration::from_millis(30)).await;
    let late_edit = edit(store, &conv, &ana, "e-2", 3, "late edit").await?; // 5
    react(store, &conv, &ben, 3, "👍", true).await?; // 6
    let cut_at = at(store, &conv, &ana, 5).await?.created_at
        + Duration::milliseconds(super::RETENTION_TEST_MS)
        - Duration::microseconds(1);
    // At `cut_at`, 1..=4 are past retention and 5, 6 are not.
    let report = store.purge_batch(cut_at, 100).await?;
    ensure!(report.events_deleted == 4, "purge {report:?}");
    let events = all(store, &conv, &ana).await?;
    let seqs: Vec<i64> = events.iter().map(|e| e.seq).collect();
    ensure!(seqs == vec![5, 6], "after the purge {seqs:?}");
    ensure!(
        events.iter().all(|e| e.body.is_none()),
        "the late edit of a purged message kept its body: {events:?}"
    );
    let retry = edit(store, &conv, &ana, "e-1", 3, "old text, edited").await?;
    ensure!(
        retry.dup && retry.seq == 4,
        "a purged edit's retry {retry:?}"
    );
    let retry = edit(store, &conv, &ana, "e-2", 3, "late edit").await?;
    ensure!(
        retry.dup && retry.seq == late_edit.seq,
        "the late edit's retry {retry:?}"
    );
    Ok(())
}

/// Concurrent identical reactions and identical edits resolve under the lock: one event each,
/// one `changed` / one `dup = false`.
pub async fn concurrent_relations_resolve_once(store: Arc<dyn Store>) -> Result<()> {
    let (conv, ana, ben, _cai) = group(&*store).await?;
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (store, conv, ben) = (store.clone(), conv.clone(), ben.clone());
        tasks.push(tokio::spawn(async move {
            react(&*store, &conv, &ben, 4, "👍", true).await
        }));
    }
    let mut written = 0;
    for t in tasks {
        if t.await??.event.is_some() {
            written += 1;
        }
    }
    ensure!(written == 1, "{written} reactions written for one");
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (store, conv, ana) = (store.clone(), conv.clone(), ana.clone());
        tasks.push(tokio::spawn(async move {
            edit(&*store, &conv, &ana, "e-1", 4, "once").await
        }));
    }
    let mut fresh = 0;
    let mut seqs = std::collections::BTreeSet::new();
    for t in tasks {
        let out = t.await??;
        seqs.insert(out.seq);
        if !out.dup {
            fresh += 1;
        }
    }
    ensure!(
        fresh == 1 && seqs.len() == 1,
        "{fresh} fresh edits at {seqs:?}"
    );
    let head = store.get_conversation(&conv, &ana).await?.head;
    ensure!(head == 6, "head {head}: one reaction and one edit after 4");
    ensure!(
        counts(&at(&*store, &conv, &ana, 4).await?) == vec![("👍".into(), 1, false)],
        "counts"
    );
    Ok(())
}
