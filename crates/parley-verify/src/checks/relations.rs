//! Replies, edits, reactions, threads and mentions (chapter 12, docs/RELATIONS.md), over HTTP
//! and WebSocket. The relation endpoints are called as raw requests, so each check reads the
//! contract's JSON exactly as a client of any language would.

use parley_client::{Client, Event, EventKind, Method, NewConversation};
use serde_json::{json, Value};

use super::{read_whole_log, Observed};
use crate::context::Ctx;
use crate::error::{ensure, CheckError};
use crate::ws::{Ws, FRAME_WAIT};

/// Identical concurrent reactions and edits in `12-relations-resolve-once`.
const RACERS: usize = 16;

/// `method path` with an optional JSON body as `c`: the status and the JSON answer.
async fn call(
    c: &Client,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> Result<(u16, Value), CheckError> {
    let mut req = c.raw(method, path);
    if let Some(b) = body {
        req = req.body(b.to_string());
    }
    Ok(req.send().await?)
}

/// The status and code of an answer: `200` or `404 NOT_FOUND`.
fn outcome((status, v): &(u16, Value)) -> String {
    match v["error"]["code"].as_str() {
        Some(code) => format!("{status} {code}"),
        None => status.to_string(),
    }
}

async fn send(
    c: &Client,
    conv: &str,
    key: &str,
    body: &str,
    extra: Value,
) -> Result<(u16, Value), CheckError> {
    let mut req = json!({"client_msg_id": key, "body": body});
    if let (Some(obj), Some(extra)) = (req.as_object_mut(), extra.as_object()) {
        obj.extend(extra.clone());
    }
    call(
        c,
        Method::POST,
        &format!("/v1/conversations/{conv}/messages"),
        Some(req),
    )
    .await
}

async fn edit(
    c: &Client,
    conv: &str,
    seq: i64,
    key: &str,
    body: &str,
) -> Result<(u16, Value), CheckError> {
    call(
        c,
        Method::POST,
        &format!("/v1/conversations/{conv}/events/{seq}/edit"),
        Some(json!({"client_msg_id": key, "body": body})),
    )
    .await
}

/// `PUT` (`add`) or `DELETE` of reaction `key`, percent-encoded in the path.
async fn react(
    c: &Client,
    conv: &str,
    seq: i64,
    key: &str,
    add: bool,
) -> Result<(u16, Value), CheckError> {
    let method = if add { Method::PUT } else { Method::DELETE };
    let key: String = key.bytes().map(|b| format!("%{b:02X}")).collect();
    call(
        c,
        method,
        &format!("/v1/conversations/{conv}/events/{seq}/reactions/{key}"),
        None,
    )
    .await
}

/// The event at `seq` as `c` reads it.
async fn read_at(c: &Client, conv: &str, seq: i64) -> Result<Event, CheckError> {
    read_whole_log(c, conv)
        .await?
        .into_iter()
        .find(|e| e.seq == seq)
        .ok_or_else(|| CheckError::Failed(format!("no event {seq} in {conv}")))
}

/// `(key, count, me)` of a message's reactions.
fn counts(e: &Event) -> Vec<(String, i64, bool)> {
    e.reactions
        .iter()
        .map(|r| (r.key.clone(), r.count, r.me))
        .collect()
}

/// The conversation object as `c` reads it.
async fn view(c: &Client, conv: &str) -> Result<Value, CheckError> {
    let (status, v) = call(c, Method::GET, &format!("/v1/conversations/{conv}"), None).await?;
    ensure!(status == 200, "conversation {conv}: {status} {v}");
    Ok(v)
}

/// A group of ana, ben and cai (joins 1–3) and ana's message at 4 that mentions ben.
async fn group(ctx: &Ctx) -> Result<(String, Client, Client, Client), CheckError> {
    let ana = ctx.user("ana").await?;
    let ben = ctx.user("ben").await?;
    let cai = ctx.user("cai").await?;
    let conv = ctx.id("c");
    ana.create_conversation(
        &NewConversation::group([ctx.id("ben"), ctx.id("cai")]).with_conv_id(&conv),
    )
    .await?;
    let hello = format!("hello @{}", ctx.id("ben"));
    let sent = send(&ana, &conv, "m-1", &hello, json!({})).await?;
    ensure!(
        sent.0 == 200 && sent.1["seq"] == 4,
        "first message: {}",
        sent.1
    );
    Ok((conv, ana, ben, cai))
}

/// A reply names its target, an edit changes what every reader reads, reactions are counted
/// per key with the reader's own, a thread's root carries its summary, and none of the edits or
/// reactions counts as unread.
pub async fn relations_fold_into_reads(ctx: &Ctx) -> Observed {
    let (conv, ana, ben, cai) = group(ctx).await?;
    let reply = send(&ben, &conv, "m-2", "hi", json!({"reply_to": 4})).await?; // 5
    ensure!(reply.0 == 200 && reply.1["seq"] == 5, "reply: {}", reply.1);
    let edited = edit(&ana, &conv, 4, "e-1", "hello, edited").await?; // 6
    ensure!(
        edited.0 == 200 && edited.1["seq"] == 6 && edited.1["target_seq"] == 4,
        "edit: {}",
        edited.1
    );
    for (who, key) in [(&ben, "👍"), (&cai, "👍"), (&ben, "🎉")] {
        let r = react(who, &conv, 4, key, true).await?; // 7, 8, 9
        ensure!(r.0 == 200 && r.1["changed"] == true, "react: {}", r.1);
    }
    let thread = send(&cai, &conv, "t-1", "in a thread", json!({"thread_root": 4})).await?; // 10
    ensure!(thread.0 == 200, "thread reply: {}", thread.1);
    let msg = read_at(&cai, &conv, 4).await?;
    ctx.note(format!("cai reads 4: {msg:?}"));
    ensure!(
        msg.body.as_deref() == Some("hello, edited") && msg.edited_at.is_some(),
        "the edit is not folded in: {msg:?}"
    );
    ensure!(
        counts(&msg) == vec![("👍".into(), 2, true), ("🎉".into(), 1, false)],
        "cai's reaction counts {:?}",
        counts(&msg)
    );
    ensure!(
        msg.thread
            .is_some_and(|t| t.reply_count == 1 && t.latest_seq == 10),
        "thread summary {:?}",
        msg.thread
    );
    let ben_counts = counts(&read_at(&ben, &conv, 4).await?);
    ensure!(
        ben_counts == vec![("👍".into(), 2, true), ("🎉".into(), 1, true)],
        "ben's reaction counts {ben_counts:?}"
    );
    let reply = read_at(&ana, &conv, 5).await?;
    ensure!(reply.reply_to == Some(4), "the reply reads {reply:?}");
    let log = read_whole_log(&ana, &conv).await?;
    let seqs: Vec<i64> = log.iter().map(|e| e.seq).collect();
    ensure!(
        seqs == (1..=10).collect::<Vec<_>>(),
        "the log is not 1..=10: {seqs:?}"
    );
    let kinds: Vec<EventKind> = log.iter().skip(5).map(|e| e.kind).collect();
    ensure!(
        kinds
            == [
                EventKind::Edit,
                EventKind::React,
                EventKind::React,
                EventKind::React,
                EventKind::Msg
            ],
        "kinds 6..=10: {kinds:?}"
    );
    // ben read up to 5 (his reply): after it only cai's thread reply is a message.
    let ben_view = view(&ben, &conv).await?;
    ensure!(
        ben_view["unread"] == 1 && ben_view["head"] == 10,
        "ben's unread counts edits or reactions: {ben_view}"
    );
    Ok(format!(
        "body folded, reactions {:?}, thread {:?}, log 1..=10, ben unread 1",
        counts(&msg),
        msg.thread
    ))
}

/// A target the actor cannot see (before their period, not a message) answers exactly like a
/// seq that does not exist, on every relation write; a stranger gets `NOT_MEMBER` like a
/// missing conversation; nothing is written.
pub async fn hidden_target(ctx: &Ctx) -> Observed {
    let (conv, ana, _ben, _cai) = group(ctx).await?;
    let dan = ctx.user("dan").await?;
    ana.add_member(&conv, &ctx.id("dan")).await?; // 5
    let mut seen = Vec::new();
    for (what, hidden, missing) in [
        (
            "reply",
            send(&dan, &conv, "r-1", "x", json!({"reply_to": 4})).await?,
            send(&dan, &conv, "r-2", "x", json!({"reply_to": 99})).await?,
        ),
        (
            "thread",
            send(&dan, &conv, "r-3", "x", json!({"thread_root": 4})).await?,
            send(&dan, &conv, "r-4", "x", json!({"thread_root": 99})).await?,
        ),
        (
            "react",
            react(&dan, &conv, 4, "👍", true).await?,
            react(&dan, &conv, 99, "👍", true).await?,
        ),
        (
            "edit",
            edit(&dan, &conv, 4, "e-1", "x").await?,
            edit(&dan, &conv, 99, "e-2", "x").await?,
        ),
        (
            "reply to a join",
            send(&dan, &conv, "r-5", "x", json!({"reply_to": 5})).await?,
            send(&dan, &conv, "r-6", "x", json!({"reply_to": 98})).await?,
        ),
    ] {
        ctx.note(format!("{what}: hidden {hidden:?}, missing {missing:?}"));
        ensure!(
            outcome(&hidden) == "404 NOT_FOUND" && hidden == missing,
            "{what}: hidden {} {}, missing {} {}",
            hidden.0,
            hidden.1,
            missing.0,
            missing.1
        );
        seen.push(what);
    }
    let eve = ctx.user("eve").await?;
    let none = ctx.id("none");
    let stranger = react(&eve, &conv, 4, "👍", true).await?;
    let unknown = react(&eve, &none, 4, "👍", true).await?;
    ensure!(
        outcome(&stranger) == "404 NOT_MEMBER" && stranger == unknown,
        "a stranger {stranger:?}, a missing conversation {unknown:?}"
    );
    let head = view(&ana, &conv).await?["head"].clone();
    ensure!(head == 5, "refusals wrote: head {head}");
    Ok(format!(
        "{} hidden targets answered like missing ones; stranger = missing conversation; head 5",
        seen.len()
    ))
}

/// An edit is keyed like a send: a retry answers it with `dup`, another body under the key is
/// a mismatch, another member's edit `NOT_SENDER`; after a recall the edits' bodies are gone
/// and the message cannot be edited, reacted to or replied to (`RECALLED`).
pub async fn edit_keyed_and_recall_erases(ctx: &Ctx) -> Observed {
    let (conv, ana, ben, _cai) = group(ctx).await?;
    let first = edit(&ana, &conv, 4, "e-1", "secret v2").await?; // 5
    let retry = edit(&ana, &conv, 4, "e-1", "secret v2").await?;
    ensure!(
        first.0 == 200 && first.1["dup"] == false && retry.0 == 200 && retry.1["dup"] == true,
        "edit {} retry {}",
        first.1,
        retry.1
    );
    ensure!(
        retry.1["seq"] == first.1["seq"] && retry.1["message_id"] == first.1["message_id"],
        "a retry answered another edit: {} vs {}",
        retry.1,
        first.1
    );
    let mismatch = edit(&ana, &conv, 4, "e-1", "other").await?;
    let not_sender = edit(&ben, &conv, 4, "e-3", "mine now").await?;
    ensure!(
        outcome(&mismatch) == "409 IDEMPOTENCY_MISMATCH",
        "same key, other body: {mismatch:?}"
    );
    ensure!(
        outcome(&not_sender) == "403 NOT_SENDER",
        "another member's edit: {not_sender:?}"
    );
    ana.recall(&conv, 4).await?; // 6
    let log = read_whole_log(&ben, &conv).await?;
    ensure!(
        !log.iter().any(|e| e
            .body
            .as_deref()
            .is_some_and(|b| b.contains("secret") || b.contains("hello"))),
        "a recalled message's text is still readable: {log:?}"
    );
    let refused = [
        ("edit", edit(&ana, &conv, 4, "e-4", "x").await?),
        ("react", react(&ben, &conv, 4, "👍", true).await?),
        (
            "reply",
            send(&ben, &conv, "r-1", "x", json!({"reply_to": 4})).await?,
        ),
    ];
    for (what, r) in &refused {
        ensure!(
            outcome(r) == "409 RECALLED",
            "{what} of a recalled message: {r:?}"
        );
    }
    let again = edit(&ana, &conv, 4, "e-1", "secret v2").await?;
    ensure!(
        again.0 == 200 && again.1["dup"] == true,
        "the edit's retry after the recall: {}",
        again.1
    );
    Ok("dup retry, IDEMPOTENCY_MISMATCH, NOT_SENDER; after recall: no body anywhere, RECALLED ×3, retry still dup".into())
}

/// Identical concurrent reactions and edits resolve under the conversation's lock: one event
/// each, one `changed` and one `dup: false`; a repeated `DELETE` changes nothing.
pub async fn relations_resolve_once(ctx: &Ctx) -> Observed {
    let (conv, ana, ben, _cai) = group(ctx).await?;
    let reacts = futures::future::join_all((0..RACERS).map(|_| react(&ben, &conv, 4, "👍", true)));
    let edits = futures::future::join_all((0..RACERS).map(|_| edit(&ana, &conv, 4, "e-1", "once")));
    let (reacts, edits) = futures::join!(reacts, edits);
    let mut changed = 0;
    for r in reacts {
        let r = r?;
        ensure!(r.0 == 200, "a racing reaction: {r:?}");
        changed += usize::from(r.1["changed"] == true);
    }
    let mut fresh = 0;
    for e in edits {
        let e = e?;
        ensure!(e.0 == 200, "a racing edit: {e:?}");
        fresh += usize::from(e.1["dup"] == false);
    }
    ensure!(
        changed == 1 && fresh == 1,
        "{changed} reactions changed, {fresh} edits fresh"
    );
    let head = view(&ana, &conv).await?["head"].clone();
    ensure!(head == 6, "head {head}: one reaction and one edit after 4");
    let down = react(&ben, &conv, 4, "👍", false).await?;
    let again = react(&ben, &conv, 4, "👍", false).await?;
    ensure!(
        down.1["changed"] == true && again.1["changed"] == false && again.1["seq"].is_null(),
        "delete {} then {}",
        down.1,
        again.1
    );
    let msg = read_at(&ana, &conv, 4).await?;
    ensure!(
        msg.reactions.is_empty(),
        "reactions left {:?}",
        msg.reactions
    );
    Ok(format!(
        "{RACERS} racing reactions → 1 event, {RACERS} racing edits → 1 event; head 6; delete twice → one unreact"
    ))
}

/// Edits and reactions reach online devices as events in seq order, exactly once, and a device
/// that was away catches them up from its cursor exactly once and in order, also in pages of 2.
pub async fn relations_pushed_and_caught_up(ctx: &Ctx) -> Observed {
    let (conv, ana, ben, cai) = group(ctx).await?;
    let mut ws = Ws::connect(&ctx.target.base_url, cai.token()).await?;
    ws.send(json!({"type": "ping", "req_id": "ready"})).await?;
    ws.next_of("pong", FRAME_WAIT).await?;
    edit(&ana, &conv, 4, "e-1", "v2").await?; // 5
    react(&ben, &conv, 4, "👍", true).await?; // 6
    react(&ben, &conv, 4, "👍", false).await?; // 7
                                               // The message at seq 4 was acked before cai connected, but its push may still be on its way
                                               // (fan-out follows the ack), so events up to 4 are left out: a device drops what it holds.
    let mut pushed = Vec::new();
    collect_events(&mut ws, &mut pushed, 3).await?;
    ws.send(
        json!({"type": "edit", "req_id": "w1", "conv_id": conv, "seq": 4,
                   "client_msg_id": "e-x", "body": "not mine"}),
    )
    .await?;
    let refused = next_error_keeping_events(&mut ws, &mut pushed).await?;
    ensure!(
        refused["code"] == "NOT_SENDER",
        "cai's edit frame of ana's message: {refused}"
    );
    ws.send(json!({"type": "react", "req_id": "w2", "conv_id": conv, "seq": 4, "key": "🎉"}))
        .await?; // 8
    collect_events(&mut ws, &mut pushed, 4).await?;
    ctx.note(format!("cai was pushed {pushed:?}"));
    let want: Vec<(i64, String)> = [(5, "edit"), (6, "react"), (7, "unreact"), (8, "react")]
        .iter()
        .map(|(s, k)| (*s, (*k).to_owned()))
        .collect();
    ensure!(pushed == want, "pushed {pushed:?}, want {want:?}");
    let mut after = 0;
    let mut caught = Vec::new();
    loop {
        let page = ben.events_after(&conv, after, Some(2), None).await?;
        caught.extend(page.events.iter().map(|e| (e.seq, e.kind)));
        if page.through_seq >= page.head {
            break;
        }
        after = page.through_seq;
    }
    let seqs: Vec<i64> = caught.iter().map(|(s, _)| *s).collect();
    ensure!(
        seqs == (2..=8).collect::<Vec<_>>(),
        "ben caught up {caught:?}"
    );
    Ok(format!(
        "pushed {pushed:?}; caught up 2..=8 once in pages of 2"
    ))
}

/// Events at or below this seq were committed before the check's device connected.
const PUSHED_BEFORE_CONNECT_SEQ_MAX: i64 = 4;

/// Reads frames until `into` holds `len` pushed events as `(seq, kind)`, or nothing more comes.
async fn collect_events(
    ws: &mut Ws,
    into: &mut Vec<(i64, String)>,
    len: usize,
) -> Result<(), CheckError> {
    while into.len() < len {
        let Some(frame) = ws.next_json(FRAME_WAIT).await? else {
            return Ok(());
        };
        keep_event(&frame, into);
    }
    Ok(())
}

/// Reads frames until an error frame, keeping the events pushed before it, so no event frame
/// is dropped while the check waits for the refusal.
async fn next_error_keeping_events(
    ws: &mut Ws,
    into: &mut Vec<(i64, String)>,
) -> Result<Value, CheckError> {
    loop {
        let Some(frame) = ws.next_json(FRAME_WAIT).await? else {
            return Err(CheckError::Failed("no error frame came".into()));
        };
        if frame["type"] == "error" {
            return Ok(frame);
        }
        keep_event(&frame, into);
    }
}

fn keep_event(frame: &Value, into: &mut Vec<(i64, String)>) {
    if frame["type"] != "event" {
        return;
    }
    let seq = frame["event"]["seq"].as_i64().unwrap_or(-1);
    if seq > PUSHED_BEFORE_CONNECT_SEQ_MAX {
        into.push((
            seq,
            frame["event"]["kind"].as_str().unwrap_or("").to_owned(),
        ));
    }
}

/// A thread's page holds its root and its replies only, by the log's cursors; a reply in a
/// thread cannot root one; a root the reader cannot see is `NOT_FOUND`.
pub async fn thread_pages(ctx: &Ctx) -> Observed {
    let (conv, ana, ben, cai) = group(ctx).await?;
    send(&ben, &conv, "m-2", "outside", json!({})).await?; // 5
    for (i, who) in [&ben, &cai, &ana].into_iter().enumerate() {
        let r = send(
            who,
            &conv,
            &format!("t-{i}"),
            "inside",
            json!({"thread_root": 4}),
        )
        .await?;
        ensure!(r.0 == 200, "thread reply {i}: {}", r.1);
    } // 6, 7, 8
    let nested = send(&ana, &conv, "t-9", "deeper", json!({"thread_root": 6})).await?;
    ensure!(
        outcome(&nested) == "400 BAD_REQUEST",
        "a reply rooted a thread: {nested:?}"
    );
    let path = |q: &str| format!("/v1/conversations/{conv}/events?thread=4&{q}");
    let (_, p1) = call(&ben, Method::GET, &path("after=0&limit=2"), None).await?;
    let (_, p2) = call(
        &ben,
        Method::GET,
        &path(&format!("after={}&limit=2", p1["through_seq"])),
        None,
    )
    .await?;
    let (_, newest) = call(&ben, Method::GET, &path("limit=10"), None).await?;
    let seqs = |p: &Value| -> Vec<i64> {
        p["events"]
            .as_array()
            .map(|es| es.iter().filter_map(|e| e["seq"].as_i64()).collect())
            .unwrap_or_default()
    };
    ctx.note(format!(
        "pages {:?} {:?}, newest {:?}",
        seqs(&p1),
        seqs(&p2),
        seqs(&newest)
    ));
    ensure!(
        seqs(&p1) == vec![4, 6] && seqs(&p2) == vec![7, 8] && seqs(&newest) == vec![8, 7, 6, 4],
        "thread pages {:?} {:?} {:?}",
        seqs(&p1),
        seqs(&p2),
        seqs(&newest)
    );
    let dan = ctx.user("dan").await?;
    ana.add_member(&conv, &ctx.id("dan")).await?;
    let hidden = call(&dan, Method::GET, &path("after=0"), None).await?;
    ensure!(
        outcome(&hidden) == "404 NOT_FOUND",
        "a late member's thread of an earlier root: {hidden:?}"
    );
    Ok("thread pages [4, 6], [7, 8], newest [8, 7, 6, 4]; nested root 400; hidden root 404".into())
}

/// Mentions of members are kept and counted per member after their read position; reading
/// past them clears the count; a recall takes them back.
pub async fn mentions_counted(ctx: &Ctx) -> Observed {
    let (conv, ana, ben, cai) = group(ctx).await?; // 4 mentions ben
    let given = send(
        &ana,
        &conv,
        "m-2",
        "for both",
        json!({"mentions": [ctx.id("ben"), ctx.id("cai"), ctx.id("nobody")]}),
    )
    .await?; // 5
    ensure!(given.0 == 200, "send with mentions: {}", given.1);
    let msg = read_at(&cai, &conv, 5).await?;
    ensure!(
        msg.mentions == vec![ctx.id("ben"), ctx.id("cai")],
        "mentions kept {:?}",
        msg.mentions
    );
    let (b, c) = (view(&ben, &conv).await?, view(&cai, &conv).await?);
    ensure!(
        b["mentions"] == 2 && c["mentions"] == 1 && view(&ana, &conv).await?["mentions"] == 0,
        "counts ben {} cai {}",
        b["mentions"],
        c["mentions"]
    );
    ben.mark_read(&conv, 4).await?;
    ensure!(
        view(&ben, &conv).await?["mentions"] == 1,
        "ben read past one mention"
    );
    ana.recall(&conv, 5).await?;
    let (b, c) = (view(&ben, &conv).await?, view(&cai, &conv).await?);
    ensure!(
        b["mentions"] == 0 && c["mentions"] == 0,
        "after the recall: ben {} cai {}",
        b["mentions"],
        c["mentions"]
    );
    let (_, list) = call(&cai, Method::GET, "/v1/conversations", None).await?;
    ensure!(
        list["conversations"]
            .as_array()
            .is_some_and(|cs| cs.iter().all(|c| c["mentions"].is_i64())),
        "the list has no mentions counts: {list}"
    );
    Ok("ben 2, cai 1, ana 0; ben read one → 1; recall → 0".into())
}
