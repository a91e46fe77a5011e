//! 11-access-time-matrix: every conversation endpoint and every WebSocket operation, checked
//! against membership periods at the time of access (P10, P11), for four callers of one
//! group: a member, a former member, a member who left and rejoined, and a user who never
//! was a member (compared with a conversation that does not exist).
//!
//! The log of `c-m` (ana owns it):
//! 1 join ana, 2 join ben, 3 join ret, 4 m-1 (ana), 5 b-1 (ben), 6 leave ret, 7 m-2 (ana),
//! 8 leave ben, 9 m-3 (ana), 10 join ret, 11 m-4 (ana).
//! So ben sees 2..=8, ret sees 3..=6 and 10.., out sees nothing.

use std::time::Duration;

use crate::ws_support::Ws;
use anyhow::{ensure, Context, Result};
use parley_client::{code, Client, Method, NewConversation, RawResponse};
use parley_testkit::{test_on_both_stores, ServerConfig, StoreKind, TestServer};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(5);
/// How long a socket must stay silent to count as having received nothing more.
const QUIET: Duration = Duration::from_millis(300);

async fn call(
    c: &Client,
    method: &Method,
    path: &str,
    body: Option<&Value>,
) -> Result<RawResponse> {
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
fn endpoints() -> Vec<(Method, &'static str, Option<Value>)> {
    vec![
        (Method::GET, "", None),
        (Method::GET, "/events?after=0", None),
        (Method::GET, "/events?after=0&limit=2&epoch=1", None),
        (Method::GET, "/events?before=6&limit=2", None),
        (Method::GET, "/events", None),
        (
            Method::POST,
            "/messages",
            Some(json!({"client_msg_id": "probe-1", "body": "let me in"})),
        ),
        (Method::POST, "/members", Some(json!({"user_id": "u-x"}))),
        (Method::DELETE, "/members/u-ana", None),
        (Method::DELETE, "/members/u-out", None),
        (
            Method::PUT,
            "/members/u-ret",
            Some(json!({"role": "admin"})),
        ),
        (Method::POST, "/read", Some(json!({"seq": 4}))),
        (Method::POST, "/events/4/recall", None),
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
async fn ask(ws: &mut Ws, frame: &Value) -> Result<Value> {
    ws.send(frame.clone()).await?;
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let v = ws.next_json(left).await?.context("no answer")?;
        if (v["type"] == "ack" || v["type"] == "error") && v["req_id"] == frame["req_id"] {
            return Ok(v);
        }
    }
}

/// The seqs of every `event` frame until the socket stays quiet.
async fn pushed_seqs(ws: &mut Ws, until_seq: Option<i64>) -> Result<Vec<i64>> {
    let mut out = Vec::new();
    if let Some(last) = until_seq {
        loop {
            let e = ws.next_of("event", WAIT).await?;
            let seq = e["event"]["seq"].as_i64().context("seq")?;
            out.push(seq);
            if seq == last {
                break;
            }
        }
    }
    while let Some(v) = ws.next_json(QUIET).await? {
        if v["type"] == "event" {
            out.push(v["event"]["seq"].as_i64().context("seq")?);
        }
    }
    Ok(out)
}

async fn ready(ws: &mut Ws) -> Result<()> {
    ws.send(json!({"type": "ping", "req_id": "ready"})).await?;
    ws.next_of("pong", WAIT).await?;
    Ok(())
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    check_11_access_time_matrix
);
async fn check_11_access_time_matrix(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ana = server.user_with_device("u-ana").await;
    let ben = server.user_with_device("u-ben").await;
    let ret = server.user_with_device("u-ret").await;
    let out = server.user_with_device("u-out").await;
    server.user_with_device("u-x").await;
    ana.create_conversation(&NewConversation::group(["u-ben", "u-ret"]).with_conv_id("c-m"))
        .await?;
    // Sockets opened while ben and ret are members: the checks happen at access, not at connect.
    let mut ws_ben = Ws::connect(server.base_url(), ben.token()).await?;
    let mut ws_ret = Ws::connect(server.base_url(), ret.token()).await?;
    let mut ws_out = Ws::connect(server.base_url(), out.token()).await?;
    for ws in [&mut ws_ben, &mut ws_ret, &mut ws_out] {
        ready(ws).await?;
    }
    ensure!(ana.send("c-m", "m-1", "one").await?.seq == 4);
    ensure!(ben.send("c-m", "b-1", "ben's own").await?.seq == 5);
    ensure!(ret.remove_member("c-m", "u-ret").await?.seq == 6);
    ensure!(ana.send("c-m", "m-2", "two").await?.seq == 7);
    ensure!(ben.remove_member("c-m", "u-ben").await?.seq == 8);
    ensure!(ana.send("c-m", "m-3", "three").await?.seq == 9);
    ensure!(ana.add_member("c-m", "u-ret").await?.seq == 10);
    ensure!(ana.send("c-m", "m-4", "four").await?.seq == 11);

    // Pushes follow the periods: ben's stop at his leave, ret's skip the gap.
    let ret_pushed = pushed_seqs(&mut ws_ret, Some(11)).await?;
    ensure!(
        ret_pushed == vec![4, 5, 6, 10, 11],
        "ret was pushed {ret_pushed:?}"
    );
    let ben_pushed = pushed_seqs(&mut ws_ben, None).await?;
    ensure!(
        ben_pushed == vec![4, 5, 6, 7, 8],
        "ben was pushed {ben_pushed:?}"
    );
    let out_pushed = pushed_seqs(&mut ws_out, None).await?;
    ensure!(out_pushed.is_empty(), "out was pushed {out_pushed:?}");

    // 1. Never a member: every endpoint and operation answers exactly like an unknown
    //    conversation, and it is NOT_MEMBER.
    let mut never_answers = Vec::new();
    for (method, rest, body) in endpoints() {
        let hidden = call(
            &out,
            &method,
            &format!("/v1/conversations/c-m{rest}"),
            body.as_ref(),
        )
        .await?;
        let missing = call(
            &out,
            &method,
            &format!("/v1/conversations/c-none{rest}"),
            body.as_ref(),
        )
        .await?;
        ensure!(
            hidden.status == 404 && hidden.json["error"]["code"] == code::NOT_MEMBER,
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
    for (hidden_op, missing_op) in ws_ops("c-m").iter().zip(ws_ops("c-none").iter()) {
        let hidden = ask(&mut ws_out, hidden_op).await?;
        let missing = ask(&mut ws_out, missing_op).await?;
        ensure!(
            hidden["type"] == "error" && hidden["code"] == code::NOT_MEMBER,
            "never-member {hidden_op}: {hidden}"
        );
        ensure!(
            hidden == missing,
            "{hidden_op}: {hidden} vs unknown conversation {missing}"
        );
    }

    // 2. Former member: reads stop at the end of ben's period; every write to the
    //    conversation is refused exactly like a never-member's.
    let view = call(&ben, &Method::GET, "/v1/conversations/c-m", None).await?;
    ensure!(
        view.status == 200
            && view.json["head"] == 8
            && view.json.get("members").is_none()
            && view.json["last_event"]["seq"] == 8,
        "former member's view: {}",
        view.text
    );
    let page = call(
        &ben,
        &Method::GET,
        "/v1/conversations/c-m/events?after=0",
        None,
    )
    .await?;
    ensure!(
        seqs(&page.json) == vec![2, 3, 4, 5, 6, 7, 8]
            && page.json["head"] == 8
            && page.json["through_seq"] == 8,
        "former member after 0: {}",
        page.text
    );
    let page = call(
        &ben,
        &Method::GET,
        "/v1/conversations/c-m/events?after=8",
        None,
    )
    .await?;
    ensure!(
        seqs(&page.json).is_empty(),
        "former member after 8: {}",
        page.text
    );
    let page = call(&ben, &Method::GET, "/v1/conversations/c-m/events", None).await?;
    ensure!(
        seqs(&page.json) == vec![8, 7, 6, 5, 4, 3, 2] && page.json["next_before"].is_null(),
        "former member's newest page: {}",
        page.text
    );
    let page = call(
        &ben,
        &Method::GET,
        "/v1/conversations/c-m/events?before=6&limit=2",
        None,
    )
    .await?;
    ensure!(
        seqs(&page.json) == vec![5, 4] && page.json["next_before"] == 4,
        "former member before 6: {}",
        page.text
    );
    for (i, (method, rest, body)) in endpoints().into_iter().enumerate() {
        if method == Method::GET || rest == "/read" {
            continue;
        }
        let r = call(
            &ben,
            &method,
            &format!("/v1/conversations/c-m{rest}"),
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
    let r = call(
        &ben,
        &Method::POST,
        "/v1/conversations/c-m/events/5/recall",
        None,
    )
    .await?;
    ensure!(
        r.status == 404 && r.json["error"]["code"] == code::NOT_MEMBER,
        "former member recalls own message: {}",
        r.text
    );
    // A replay commits nothing and is answered before the membership check (SPEC §6).
    let replay = ben.send("c-m", "b-1", "ben's own").await?;
    ensure!(
        replay.dup && replay.seq == 5,
        "former member's replay: {replay:?}"
    );
    // The read position is the user's own, not the conversation's: it may still move, but
    // only inside the former member's periods.
    let r = call(
        &ben,
        &Method::POST,
        "/v1/conversations/c-m/read",
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
        &json!({"type": "sync", "req_id": 1, "conv_id": "c-m", "after": 0}),
    )
    .await?;
    ensure!(
        sync["type"] == "ack" && seqs(&sync) == vec![2, 3, 4, 5, 6, 7, 8] && sync["head"] == 8,
        "former member's sync: {sync}"
    );
    let sent = ask(
        &mut ws_ben,
        &json!({"type": "send", "req_id": 2, "conv_id": "c-m", "client_msg_id": "late", "body": "late"}),
    )
    .await?;
    ensure!(
        sent["type"] == "error" && sent["code"] == code::NOT_MEMBER,
        "former member's send: {sent}"
    );
    let read = ask(
        &mut ws_ben,
        &json!({"type": "read", "req_id": 3, "conv_id": "c-m", "seq": 100}),
    )
    .await?;
    ensure!(
        read["type"] == "ack" && read["read_seq"] == 8,
        "former member's read: {read}"
    );

    // 3. Rejoined member: the gap between the periods is invisible in every read.
    let page = call(
        &ret,
        &Method::GET,
        "/v1/conversations/c-m/events?after=0",
        None,
    )
    .await?;
    ensure!(
        seqs(&page.json) == vec![3, 4, 5, 6, 10, 11] && page.json["through_seq"] == 11,
        "rejoined after 0: {}",
        page.text
    );
    let page = call(
        &ret,
        &Method::GET,
        "/v1/conversations/c-m/events?after=6&limit=1",
        None,
    )
    .await?;
    ensure!(
        seqs(&page.json) == vec![10] && page.json["through_seq"] == 10,
        "rejoined after 6: {}",
        page.text
    );
    let page = call(
        &ret,
        &Method::GET,
        "/v1/conversations/c-m/events?limit=3",
        None,
    )
    .await?;
    ensure!(
        seqs(&page.json) == vec![11, 10, 6] && page.json["next_before"] == 6,
        "rejoined newest page: {}",
        page.text
    );
    let page = call(
        &ret,
        &Method::GET,
        "/v1/conversations/c-m/events?before=6&limit=3",
        None,
    )
    .await?;
    ensure!(
        seqs(&page.json) == vec![5, 4, 3] && page.json["next_before"].is_null(),
        "rejoined before 6: {}",
        page.text
    );
    let view = ret.get_conversation("c-m").await?;
    ensure!(
        view.head == 11 && view.unread == 3,
        "rejoined view: head {} unread {} (m-1, b-1, m-4 are the visible messages of others)",
        view.head,
        view.unread
    );
    let sync = ask(
        &mut ws_ret,
        &json!({"type": "sync", "req_id": 1, "conv_id": "c-m", "after": 0}),
    )
    .await?;
    ensure!(
        seqs(&sync) == vec![3, 4, 5, 6, 10, 11],
        "rejoined sync: {sync}"
    );
    let sent = ask(
        &mut ws_ret,
        &json!({"type": "send", "req_id": 2, "conv_id": "c-m", "client_msg_id": "back", "body": "back"}),
    )
    .await?;
    ensure!(
        sent["type"] == "ack" && sent["seq"] == 12,
        "rejoined member's send: {sent}"
    );
    Ok(())
}
