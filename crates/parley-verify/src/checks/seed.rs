//! The first seed's case (chapter 04) and the leave of chapter 08, over HTTP.

use parley_client::{EventKind, Method, NewConversation};

use super::{read_whole_log, refusal, seq_kinds, Observed};
use crate::context::Ctx;
use crate::error::ensure;

/// ana creates a group with ben (join@1, join@2); ana's first message gets seq 3.
pub async fn normal_history(ctx: &Ctx) -> Observed {
    let ana = ctx.user("ana").await?;
    let ben = ctx.user("ben").await?;
    let conv = ctx.id("c");
    let created = ana
        .create_conversation(&NewConversation::group([ctx.id("ben")]).with_conv_id(&conv))
        .await?;
    ctx.note(format!(
        "ana: create {conv} with ben → head {}",
        created.head
    ));
    let ack = ana.send(&conv, "m-1", "hello").await?;
    ctx.note(format!("ana: send m-1 → {ack:?}"));
    ensure!(ack.seq == 3 && !ack.dup, "first message: {ack:?}");
    let ana_sees = seq_kinds(&read_whole_log(&ana, &conv).await?);
    let ben_sees = seq_kinds(&read_whole_log(&ben, &conv).await?);
    ctx.note(format!("ana reads {ana_sees:?}; ben reads {ben_sees:?}"));
    ensure!(
        ana_sees
            == [
                (1, EventKind::Join),
                (2, EventKind::Join),
                (3, EventKind::Msg)
            ],
        "ana sees {ana_sees:?}"
    );
    ensure!(
        ben_sees == [(2, EventKind::Join), (3, EventKind::Msg)],
        "ben sees {ben_sees:?}"
    );
    Ok(format!(
        "message seq {}; ana sees {ana_sees:?}; ben sees {ben_sees:?}",
        ack.seq
    ))
}

/// cai, not a member, sends: NOT_MEMBER, and the head stays 3.
pub async fn non_member_rejected(ctx: &Ctx) -> Observed {
    let ana = ctx.user("ana").await?;
    ctx.user("ben").await?;
    let cai = ctx.user("cai").await?;
    let conv = ctx.id("c");
    ana.create_conversation(&NewConversation::group([ctx.id("ben")]).with_conv_id(&conv))
        .await?;
    ana.send(&conv, "m-1", "hello").await?;
    let r = cai.send(&conv, "m-x", "let me in").await;
    let got = refusal(&r);
    ctx.note(format!("cai: send → {got}"));
    ensure!(got == "404 NOT_MEMBER", "cai's send: {got}");
    let head = ana.get_conversation(&conv).await?.head;
    ensure!(head == 3, "head after the refusal: {head}");
    Ok(format!("cai's send: {got}; head {head}"))
}

/// A conversation that does not exist answers exactly like one the caller is not in.
pub async fn unknown_conv_same_error(ctx: &Ctx) -> Observed {
    let ana = ctx.user("ana").await?;
    let cai = ctx.user("cai").await?;
    let conv = ctx.id("c");
    let missing = ctx.id("nope");
    ana.create_conversation(&NewConversation::group(Vec::<String>::new()).with_conv_id(&conv))
        .await?;
    ana.send(&conv, "m-1", "hello").await?;
    let body = r#"{"client_msg_id":"m-1","body":"hi"}"#;
    let probes = [
        (Method::POST, "messages", Some(body)),
        (Method::GET, "events?after=0", None),
        (Method::GET, "events?limit=3", None),
        (Method::GET, "", None),
    ];
    for (method, rest, body) in probes {
        let path = |c: &str| {
            if rest.is_empty() {
                format!("/v1/conversations/{c}")
            } else {
                format!("/v1/conversations/{c}/{rest}")
            }
        };
        let mut hidden = cai.raw(method.clone(), &path(&conv));
        let mut absent = cai.raw(method.clone(), &path(&missing));
        if let Some(b) = body {
            hidden = hidden.body(b);
            absent = absent.body(b);
        }
        let hidden = hidden.response().await?;
        let absent = absent.response().await?;
        ctx.note(format!(
            "{method} {rest}: hidden {} {} / missing {} {}",
            hidden.status, hidden.text, absent.status, absent.text
        ));
        ensure!(
            hidden.status == 404 && hidden.json["error"]["code"] == "NOT_MEMBER",
            "{method} {rest} on a hidden conversation: {} {}",
            hidden.status,
            hidden.text
        );
        ensure!(
            hidden.status == absent.status && hidden.text == absent.text,
            "{method} {rest}: hidden {} {} but missing {} {}",
            hidden.status,
            hidden.text,
            absent.status,
            absent.text
        );
    }
    Ok("4 probes: hidden and missing answered byte for byte alike (404 NOT_MEMBER)".into())
}

/// The same request key with another body: IDEMPOTENCY_MISMATCH, nothing written.
pub async fn idempotency_mismatch(ctx: &Ctx) -> Observed {
    let ana = ctx.user("ana").await?;
    let conv = ctx.id("c");
    ana.create_conversation(&NewConversation::group(Vec::<String>::new()).with_conv_id(&conv))
        .await?;
    let first = ana.send(&conv, "m-1", "first").await?;
    let r = ana.send(&conv, "m-1", "other").await;
    let got = refusal(&r);
    ctx.note(format!(
        "ana: send m-1 \"first\" → seq {}; again \"other\" → {got}",
        first.seq
    ));
    ensure!(got == "409 IDEMPOTENCY_MISMATCH", "changed body: {got}");
    let log = read_whole_log(&ana, &conv).await?;
    let msgs: Vec<_> = log.iter().filter(|e| e.kind == EventKind::Msg).collect();
    ensure!(
        msgs.len() == 1 && msgs[0].body.as_deref() == Some("first"),
        "log after the mismatch: {msgs:?}"
    );
    Ok(format!("{got}; one message, body unchanged"))
}

/// The leaver sees their leave event and nothing after it.
pub async fn leave_closes_interval(ctx: &Ctx) -> Observed {
    let ana = ctx.user("ana").await?;
    let ben = ctx.user("ben").await?;
    let conv = ctx.id("c");
    ana.create_conversation(&NewConversation::group([ctx.id("ben")]).with_conv_id(&conv))
        .await?;
    ana.send(&conv, "m-1", "before").await?; // 3
    let left = ben.remove_member(&conv, &ctx.id("ben")).await?; // 4
    ctx.note(format!("ben: leave → seq {}", left.seq));
    ana.send(&conv, "m-2", "after").await?; // 5
    let sees = seq_kinds(&ben.history(&conv, None, Some(50)).await?.events);
    let mut sees = sees;
    sees.sort_by_key(|(seq, _)| *seq);
    ctx.note(format!("ben reads {sees:?}"));
    ensure!(
        sees == [
            (2, EventKind::Join),
            (3, EventKind::Msg),
            (4, EventKind::Leave)
        ],
        "ben sees {sees:?}"
    );
    let late = refusal(&ben.send(&conv, "m-3", "late").await);
    ensure!(late == "404 NOT_MEMBER", "former member's send: {late}");
    Ok(format!("ben sees {sees:?}; later send {late}"))
}
