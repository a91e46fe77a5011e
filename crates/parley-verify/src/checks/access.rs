//! 11-access-time-matrix: every conversation endpoint and every WebSocket operation, checked
//! against membership periods at the time of access (P10, P11), for four callers of one
//! group: a member, a former member, a member who left and rejoined, and a user who never was
//! a member (compared with a conversation that does not exist).
//!
//! The log of the group (ana owns it): 1 join ana, 2 join ben, 3 join ret, 4 m-1 (ana), 5 b-1
//! (ben), 6 leave ret, 7 m-2 (ana), 8 leave ben, 9 m-3 (ana), 10 join ret, 11 m-4 (ana). So ben
//! sees 2..=8, ret sees 3..=6 and 10.., out sees nothing.

use parley_client::{Client, Method, NewConversation, RawResponse};
use serde_json::{json, Value};

use super::Observed;
use crate::context::Ctx;
use crate::error::{ensure, CheckError};
use crate::ws::{Ws, FRAME_WAIT};

async fn call(
    c: &Client,
    method: &Method,
    path: &str,
    body: Option<&Value>,
) -> Result<RawResponse, CheckError> {
    let mut req = c.raw(method.clone(), path);
    if let Some(b) = body {
        req = req.json(b);
    }
    Ok(req.response().await?)
}

fn seqs(page: &Value) -> Vec<i64> {
    page["events"]
        .as_array()
        .map(|es| es.iter().filter_map(|e| e["seq"].as_i64()).collect())
        .unwrap_or_default()
}

/// Every endpoint of one conversation: (method, path after `/v1/conversations/{id}`, body).
fn endpoints(ctx: &Ctx) -> Vec<(Method, String, Option<Value>)> {
    vec![
        (Method::GET, String::new(), None),
        (Method::GET, "/events?after=0".into(), None),
        (Method::GET, "/events?after=0&limit=2&epoch=1".into(), None),
        (Method::GET, "/events?before=6&limit=2".into(), None),
        (Method::GET, "/events".into(), None),
        (
            Method::POST,
            "/messages".into(),
            Some(json!({"client_msg_id": "probe-1", "body": "let me in"})),
        ),
        (
            Method::POST,
            "/members".into(),
            Some(json!({"user_id": ctx.id("x")})),
        ),
        (Method::DELETE, format!("/members/{}", ctx.id("ana")), None),
        (Method::DELETE, format!("/members/{}", ctx.id("out")), None),
        (
            Method::PUT,
            format!("/members/{}", ctx.id("ret")),
            Some(json!({"role": "admin"})),
        ),
        (Method::POST, "/read".into(), Some(json!({"seq": 4}))),
        (Method::POST, "/events/4/recall".into(), None),
    ]
}

/// The WebSocket operations that name a conversation.
fn ws_ops(conv: &str) -> Vec<Value> {
    vec![
        json!({"type": "send", "req_id": "op", "conv_id": conv, "client_msg_id": "probe-ws", "body": "let me in"}),
        json!({"type": "read", "req_id": "op", "conv_id": conv, "seq": 4}),
        json!({"type": "sync", "req_id": "op", "conv_id": conv, "after": 0}),
        json!({"type": "sync", "req_id": "op", "conv_id": conv, "after": 3, "limit": 1, "epoch": 1}),
    ]
}

/// The answer to one WebSocket request: the ack or error frame with its `req_id`.
async fn ask(ws: &mut Ws, frame: &Value) -> Result<Value, CheckError> {
    ws.send(frame.clone()).await?;
    let deadline = tokio::time::Instant::now() + FRAME_WAIT;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let Some(v) = ws.next_json(left).await? else {
            return Err(CheckError::Failed(format!("no answer to {frame}")));
        };
        if (v["type"] == "ack" || v["type"] == "error") && v["req_id"] == frame["req_id"] {
            return Ok(v);
        }
    }
}

/// The seqs of every `event` frame received before the answer to a ping sent now (a marker
/// after the last event that could arrive, instead of a quiet window).
async fn pushed_before_marker(ws: &mut Ws) -> Result<Vec<i64>, CheckError> {
    ws.send(json!({"type": "ping", "req_id": "marker"})).await?;
    let mut out = Vec::new();
    loop {
        let Some(v) = ws.next_json(FRAME_WAIT).await? else {
            return Err(CheckError::Failed("no pong to the marker".into()));
        };
        if v["type"] == "pong" && v["req_id"] == "marker" {
            return Ok(out);
        }
        if v["type"] == "event" {
            out.push(v["event"]["seq"].as_i64().unwrap_or(0));
        }
    }
}

pub async fn access_time_matrix(ctx: &Ctx) -> Observed {
    let ana = ctx.user("ana").await?;
    let ben = ctx.user("ben").await?;
    let ret = ctx.user("ret").await?;
    let out = ctx.user("out").await?;
    ctx.user("x").await?;
    let (c, none) = (ctx.id("m"), ctx.id("none"));
    ana.create_conversation(
        &NewConversation::group([ctx.id("ben"), ctx.id("ret")]).with_conv_id(&c),
    )
    .await?;
    // Sockets opened while ben and ret are members: the checks happen at access, not at connect.
    let base = &ctx.target.base_url;
    let mut ws_ben = Ws::connect(base, ben.token()).await?;
    let mut ws_ret = Ws::connect(base, ret.token()).await?;
    let mut ws_out = Ws::connect(base, out.token()).await?;
    ensure!(ana.send(&c, "m-1", "one").await?.seq == 4, "m-1");
    ensure!(ben.send(&c, "b-1", "ben's own").await?.seq == 5, "b-1");
    ensure!(
        ret.remove_member(&c, &ctx.id("ret")).await?.seq == 6,
        "ret leaves"
    );
    ensure!(ana.send(&c, "m-2", "two").await?.seq == 7, "m-2");
    ensure!(
        ben.remove_member(&c, &ctx.id("ben")).await?.seq == 8,
        "ben leaves"
    );
    ensure!(ana.send(&c, "m-3", "three").await?.seq == 9, "m-3");
    ensure!(
        ana.add_member(&c, &ctx.id("ret")).await?.seq == 10,
        "ret rejoins"
    );
    ensure!(ana.send(&c, "m-4", "four").await?.seq == 11, "m-4");

    // Pushes follow the periods: ben's stop at his leave, ret's skip the gap. Every push of
    // seq 11 was fanned out before ret's socket got it; the markers come after it.
    let mut ret_pushed = Vec::new();
    while ret_pushed.last() != Some(&11) {
        let e = ws_ret.next_of("event", FRAME_WAIT).await?;
        ret_pushed.push(e["event"]["seq"].as_i64().unwrap_or(0));
    }
    ret_pushed.extend(pushed_before_marker(&mut ws_ret).await?);
    ensure!(
        ret_pushed == [4, 5, 6, 10, 11],
        "ret was pushed {ret_pushed:?}"
    );
    let ben_pushed = pushed_before_marker(&mut ws_ben).await?;
    ensure!(
        ben_pushed == [4, 5, 6, 7, 8],
        "ben was pushed {ben_pushed:?}"
    );
    let out_pushed = pushed_before_marker(&mut ws_out).await?;
    ensure!(out_pushed.is_empty(), "out was pushed {out_pushed:?}");
    ctx.note(format!(
        "pushed: ret {ret_pushed:?}, ben {ben_pushed:?}, out {out_pushed:?}"
    ));

    // 1. Never a member: every endpoint and operation answers exactly like an unknown
    //    conversation, and it is NOT_MEMBER.
    let mut never_answers = Vec::new();
    for (method, rest, body) in endpoints(ctx) {
        let hidden = call(
            &out,
            &method,
            &format!("/v1/conversations/{c}{rest}"),
            body.as_ref(),
        )
        .await?;
        let missing = call(
            &out,
            &method,
            &format!("/v1/conversations/{none}{rest}"),
            body.as_ref(),
        )
        .await?;
        ensure!(
            hidden.status == 404 && hidden.json["error"]["code"] == "NOT_MEMBER",
            "never-member {method} {rest}: {} {}",
            hidden.status,
            hidden.text
        );
        ensure!(
            (hidden.status, &hidden.text) == (missing.status, &missing.text),
            "{method} {rest}: never-member {} {} but unknown conversation {} {}",
            hidden.status,
            hidden.text,
            missing.status,
            missing.text
        );
        never_answers.push(hidden);
    }
    for (hidden_op, missing_op) in ws_ops(&c).iter().zip(ws_ops(&none).iter()) {
        let hidden = ask(&mut ws_out, hidden_op).await?;
        let missing = ask(&mut ws_out, missing_op).await?;
        ensure!(
            hidden["type"] == "error" && hidden["code"] == "NOT_MEMBER",
            "never-member {hidden_op}: {hidden}"
        );
        ensure!(
            hidden == missing,
            "{hidden_op}: {hidden} vs unknown conversation {missing}"
        );
    }
    ctx.note("never-member: 12 endpoints and 4 operations answered like a missing conversation");

    // 2. Former member: reads stop at the end of ben's period; every write is refused
    //    exactly like a never-member's.
    let view = call(&ben, &Method::GET, &format!("/v1/conversations/{c}"), None).await?;
    ensure!(
        view.status == 200
            && view.json["head"] == 8
            && view.json.get("members").is_none()
            && view.json["last_event"]["seq"] == 8,
        "former member's view: {}",
        view.text
    );
    let events = |q: &str| format!("/v1/conversations/{c}/events{q}");
    let page = call(&ben, &Method::GET, &events("?after=0"), None).await?;
    ensure!(
        seqs(&page.json) == [2, 3, 4, 5, 6, 7, 8]
            && page.json["head"] == 8
            && page.json["through_seq"] == 8,
        "former member after 0: {}",
        page.text
    );
    let page = call(&ben, &Method::GET, &events("?after=8"), None).await?;
    ensure!(
        seqs(&page.json).is_empty(),
        "former member after 8: {}",
        page.text
    );
    let page = call(&ben, &Method::GET, &events(""), None).await?;
    ensure!(
        seqs(&page.json) == [8, 7, 6, 5, 4, 3, 2] && page.json["next_before"].is_null(),
        "former member's newest page: {}",
        page.text
    );
    let page = call(&ben, &Method::GET, &events("?before=6&limit=2"), None).await?;
    ensure!(
        seqs(&page.json) == [5, 4] && page.json["next_before"] == 4,
        "former member before 6: {}",
        page.text
    );
    for (i, (method, rest, body)) in endpoints(ctx).into_iter().enumerate() {
        if method == Method::GET || rest == "/read" {
            continue;
        }
        let r = call(
            &ben,
            &method,
            &format!("/v1/conversations/{c}{rest}"),
            body.as_ref(),
        )
        .await?;
        let never = &never_answers[i];
        ensure!(
            (r.status, &r.text) == (never.status, &never.text),
            "former member {method} {rest}: {} {} (a never-member gets {} {})",
            r.status,
            r.text,
            never.status,
            never.text
        );
    }
    let r = call(&ben, &Method::POST, &events("/5/recall"), None).await?;
    ensure!(
        r.status == 404 && r.json["error"]["code"] == "NOT_MEMBER",
        "former member recalls own message: {}",
        r.text
    );
    // A replay commits nothing and is answered before the membership check (SPEC §6).
    let replay = ben.send(&c, "b-1", "ben's own").await?;
    ensure!(
        replay.dup && replay.seq == 5,
        "former member's replay: {replay:?}"
    );
    // The read position is the user's own: it may still move, but only inside the periods.
    let r = call(
        &ben,
        &Method::POST,
        &format!("/v1/conversations/{c}/read"),
        Some(&json!({"seq": 100})),
    )
    .await?;
    ensure!(
        r.status == 200 && r.json == json!({"read_seq": 8}),
        "former member marks read: {} {}",
        r.status,
        r.text
    );
    let sync = ask(
        &mut ws_ben,
        &json!({"type": "sync", "req_id": 1, "conv_id": c, "after": 0}),
    )
    .await?;
    ensure!(
        sync["type"] == "ack" && seqs(&sync) == [2, 3, 4, 5, 6, 7, 8] && sync["head"] == 8,
        "former member's sync: {sync}"
    );
    let sent = ask(
        &mut ws_ben,
        &json!({"type": "send", "req_id": 2, "conv_id": c, "client_msg_id": "late", "body": "late"}),
    )
    .await?;
    ensure!(
        sent["type"] == "error" && sent["code"] == "NOT_MEMBER",
        "former member's send: {sent}"
    );
    let read = ask(
        &mut ws_ben,
        &json!({"type": "read", "req_id": 3, "conv_id": c, "seq": 100}),
    )
    .await?;
    ensure!(
        read["type"] == "ack" && read["read_seq"] == 8,
        "former member's read: {read}"
    );
    ctx.note("former member: reads 2..=8, writes refused like a never-member, replay answered");

    // 3. Rejoined member: the gap between the periods is invisible in every read.
    let page = call(&ret, &Method::GET, &events("?after=0"), None).await?;
    ensure!(
        seqs(&page.json) == [3, 4, 5, 6, 10, 11] && page.json["through_seq"] == 11,
        "rejoined after 0: {}",
        page.text
    );
    let page = call(&ret, &Method::GET, &events("?after=6&limit=1"), None).await?;
    ensure!(
        seqs(&page.json) == [10] && page.json["through_seq"] == 10,
        "rejoined after 6: {}",
        page.text
    );
    let page = call(&ret, &Method::GET, &events("?limit=3"), None).await?;
    ensure!(
        seqs(&page.json) == [11, 10, 6] && page.json["next_before"] == 6,
        "rejoined newest page: {}",
        page.text
    );
    let page = call(&ret, &Method::GET, &events("?before=6&limit=3"), None).await?;
    ensure!(
        seqs(&page.json) == [5, 4, 3] && page.json["next_before"].is_null(),
        "rejoined before 6: {}",
        page.text
    );
    let view = ret.get_conversation(&c).await?;
    ensure!(
        view.head == 11 && view.unread == 3,
        "rejoined view: head {} unread {} (m-1, b-1, m-4 are the visible messages of others)",
        view.head,
        view.unread
    );
    let sync = ask(
        &mut ws_ret,
        &json!({"type": "sync", "req_id": 1, "conv_id": c, "after": 0}),
    )
    .await?;
    ensure!(seqs(&sync) == [3, 4, 5, 6, 10, 11], "rejoined sync: {sync}");
    let sent = ask(
        &mut ws_ret,
        &json!({"type": "send", "req_id": 2, "conv_id": c, "client_msg_id": "back", "body": "back"}),
    )
    .await?;
    ensure!(
        sent["type"] == "ack" && sent["seq"] == 12,
        "rejoined member's send: {sent}"
    );
    Ok(
        "never-member = unknown conversation on 12 endpoints and 4 operations; former member \
        reads 2..=8 and cannot write; rejoined member reads 3..=6, 10.. and writes 12; pushes \
        follow the periods"
            .into(),
    )
}
