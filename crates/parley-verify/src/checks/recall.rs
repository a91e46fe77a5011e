//! Recall (chapter 11), over HTTP.

use std::time::Duration;

use parley_client::{Method, NewConversation};
use serde_json::{json, Value};

use super::{refusal, Observed};
use crate::context::Ctx;
use crate::error::{ensure, CheckError};
use crate::ws::{Ws, FRAME_WAIT};

/// The recall window of the window check's conversation: short, so it is over quickly.
const SHORT_WINDOW_MS: i64 = 300;

/// A recall inside the window erases the body for every reader and appends a recall event.
pub async fn recall_erases_body(ctx: &Ctx) -> Observed {
    let ana = ctx.user("ana").await?;
    let ben = ctx.user("ben").await?;
    let conv = ctx.id("c");
    ana.create_conversation(&NewConversation::group([ctx.id("ben")]).with_conv_id(&conv))
        .await?;
    let sent = ana.send(&conv, "m-1", "secret").await?;
    let ack = ana.recall(&conv, sent.seq).await?;
    ctx.note(format!("recall {} → {ack:?}", sent.seq));
    ensure!(
        ack.target_seq == sent.seq && ack.seq == sent.seq + 1,
        "ack {ack:?}"
    );
    for (name, c) in [("ana", &ana), ("ben", &ben)] {
        let page = c.events_after(&conv, 0, None, None).await?;
        let target = page.events.iter().find(|e| e.seq == sent.seq);
        ensure!(
            target.is_some_and(|e| e.recalled && e.body.is_none()),
            "{name} reads {target:?}"
        );
        ensure!(
            !page
                .events
                .iter()
                .any(|e| e.body.as_deref() == Some("secret")),
            "{name} still reads the body"
        );
    }
    Ok(format!(
        "seq {} recalled: no body for either reader",
        sent.seq
    ))
}

/// A second recall of the same message answers the first recall's event and appends none.
pub async fn recall_idempotent(ctx: &Ctx) -> Observed {
    let ana = ctx.user("ana").await?;
    let conv = ctx.id("c");
    ana.create_conversation(&NewConversation::group(Vec::<String>::new()).with_conv_id(&conv))
        .await?;
    let sent = ana.send(&conv, "m-1", "x").await?;
    let first = ana.recall(&conv, sent.seq).await?;
    let again = ana.recall(&conv, sent.seq).await?;
    ctx.note(format!("recall → {first:?}; again → {again:?}"));
    ensure!(first == again, "second recall {again:?} vs {first:?}");
    let head = ana.get_conversation(&conv).await?.head;
    ensure!(head == first.seq, "head {head} after two recalls");
    Ok(format!("both answered seq {}; head {head}", first.seq))
}

/// A recall after the conversation's window is refused with RECALL_WINDOW_EXPIRED; the body
/// stays.
pub async fn recall_window(ctx: &Ctx) -> Observed {
    let ana = ctx.user("ana").await?;
    let conv = ctx.id("c");
    ana.create_conversation(
        &NewConversation::group(Vec::<String>::new())
            .with_conv_id(&conv)
            .with_recall_window_ms(SHORT_WINDOW_MS),
    )
    .await?;
    let sent = ana.send(&conv, "m-1", "kept").await?;
    // The window is a span of the store's clock from the message's creation: waiting it out
    // twice over is the event under test, not a stand-in for one.
    tokio::time::sleep(Duration::from_millis(2 * SHORT_WINDOW_MS as u64)).await;
    let outcome = refusal(&ana.recall(&conv, sent.seq).await);
    ctx.note(format!(
        "recall after {SHORT_WINDOW_MS} ms window → {outcome}"
    ));
    ensure!(
        outcome == "409 RECALL_WINDOW_EXPIRED",
        "late recall: {outcome}"
    );
    let page = ana.events_after(&conv, 0, None, None).await?;
    let kept = page
        .events
        .iter()
        .any(|e| e.body.as_deref() == Some("kept"));
    ensure!(kept, "the body is gone after a refused recall");
    Ok(format!("{outcome}; body kept"))
}

/// Every frame `ws` receives before the answer to a ping sent now: a marker after the event
/// under test, instead of a quiet window.
async fn frames_before_marker(ws: &mut Ws) -> Result<Vec<Value>, CheckError> {
    ws.send(json!({"type": "ping", "req_id": "marker"})).await?;
    let mut seen = Vec::new();
    loop {
        let Some(v) = ws.next_json(FRAME_WAIT).await? else {
            return Err(CheckError::Failed(format!("no pong; saw {seen:?}")));
        };
        if v["type"] == "pong" && v["req_id"] == "marker" {
            return Ok(seen);
        }
        seen.push(v);
    }
}

/// The recall over HTTP end to end: it answers `{seq, target_seq}`, its event is pushed like
/// any other, the target reads as recalled without a body (and, with the database, its stored
/// body is gone); recalling again answers the same and pushes nothing; another member gets
/// NOT_SENDER, a join NOT_FOUND, a bad seq BAD_REQUEST; past the conversation's own window
/// RECALL_WINDOW_EXPIRED, and the refused target keeps its body.
pub async fn recall_over_http(ctx: &Ctx) -> Observed {
    let ana = ctx.user("ana").await?;
    let ben = ctx.user("ben").await?;
    let (conv, short) = (ctx.id("r"), ctx.id("short"));
    ana.create_conversation(&NewConversation::group([ctx.id("ben")]).with_conv_id(&conv))
        .await?;
    ana.create_conversation(
        &NewConversation::group([ctx.id("ben")])
            .with_conv_id(&short)
            .with_recall_window_ms(SHORT_WINDOW_MS),
    )
    .await?;
    let mut ws = Ws::connect(&ctx.target.base_url, ben.token()).await?;
    ana.send(&conv, "m-1", "secret words").await?; // 3
    let e = ws.next_of("event", FRAME_WAIT).await?;
    ensure!(e["event"]["seq"] == 3, "pushed message: {e}");
    let recall_path = |c: &str, seq: &str| format!("/v1/conversations/{c}/events/{seq}/recall");
    let r = ana
        .raw(Method::POST, &recall_path(&conv, "3"))
        .response()
        .await?;
    ctx.note(format!("POST recall 3 → {} {}", r.status, r.text));
    ensure!(
        r.status == 200 && r.json == json!({"seq": 4, "target_seq": 3}),
        "recall: {} {}",
        r.status,
        r.text
    );
    let pushed = ws.next_of("event", FRAME_WAIT).await?;
    let e = &pushed["event"];
    ensure!(
        e["seq"] == 4
            && e["kind"] == "recall"
            && e["target_seq"] == 3
            && e["sender_user"] == ctx.id("ana").as_str(),
        "pushed recall: {pushed}"
    );
    let again = ana
        .raw(Method::POST, &recall_path(&conv, "3"))
        .response()
        .await?;
    ensure!(
        again.status == 200 && again.json == r.json,
        "recall again: {} {}",
        again.status,
        again.text
    );
    let extra = frames_before_marker(&mut ws).await?;
    ensure!(extra.is_empty(), "a repeated recall pushed {extra:?}");
    let page = ben.events_after(&conv, 2, None, None).await?;
    let target = page.events.first();
    ensure!(
        target.is_some_and(|t| t.seq == 3
            && t.kind == parley_client::EventKind::Msg
            && t.recalled
            && t.body.is_none()),
        "recalled target: {target:?}"
    );
    ensure!(page.head == 4, "head {}", page.head);
    let mut stored_gone = String::new();
    if ctx.target.database_url.is_some() && ctx.target.store() == "postgres" {
        let mut db = ctx.db().await?;
        let stored: Option<String> =
            sqlx::query_scalar("SELECT body FROM events WHERE conv_id = $1 AND seq = 3")
                .bind(&conv)
                .fetch_one(&mut db)
                .await?;
        ctx.note(format!("SQL: stored body {stored:?}"));
        ensure!(stored.is_none(), "stored body after recall: {stored:?}");
        stored_gone = "; stored body NULL".into();
    }
    for (who, seq, want) in [
        (&ben, "3", "403 NOT_SENDER"),
        (&ana, "1", "404 NOT_FOUND"),
        (&ana, "x", "400 BAD_REQUEST"),
    ] {
        let r = who
            .raw(Method::POST, &recall_path(&conv, seq))
            .response()
            .await?;
        let got = format!(
            "{} {}",
            r.status,
            r.json["error"]["code"].as_str().unwrap_or("")
        );
        ctx.note(format!("recall {seq} → {got}"));
        ensure!(got == want, "recall {seq}: {got}, expected {want}");
    }
    ana.send(&short, "s-1", "too late").await?; // 3
                                                // The window is a span of the store's clock: waiting it out is the condition under test.
    tokio::time::sleep(Duration::from_millis(2 * SHORT_WINDOW_MS as u64)).await;
    let late = refusal(&ana.recall(&short, 3).await);
    ensure!(
        late == "409 RECALL_WINDOW_EXPIRED",
        "recall after the window: {late}"
    );
    let head = ana.get_conversation(&short).await?.head;
    ensure!(head == 3, "a refused recall wrote: head {head}");
    let top = ana.history(&short, None, Some(1)).await?;
    let kept = top.events.first();
    ensure!(
        kept.is_some_and(|e| !e.recalled && e.body.as_deref() == Some("too late")),
        "refused target: {kept:?}"
    );
    Ok(format!(
        "recall → seq 4 pushed; again → same, nothing pushed; NOT_SENDER / NOT_FOUND / \
         BAD_REQUEST; late → {late}{stored_gone}"
    ))
}
