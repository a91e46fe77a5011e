//! Realtime delivery over WebSocket (chapters 05, 06, 08 and 09).

use std::time::Duration;

use parley_client::{DeliveryMode, NewConversation};
use serde_json::{json, Value};

use super::Observed;
use crate::context::Ctx;
use crate::error::ensure;
use crate::ws::{Ws, FRAME_WAIT};

/// A message reaches every online device of every member, the sender's other devices
/// included, as one `event` frame each.
pub async fn push_to_all_devices(ctx: &Ctx) -> Observed {
    let ana = ctx.user("ana").await?;
    let ana2 = ctx.device("ana", "d2").await?;
    let ben = ctx.user("ben").await?;
    let ben2 = ctx.device("ben", "d2").await?;
    let conv = ctx.id("c");
    ana.create_conversation(&NewConversation::group([ctx.id("ben")]).with_conv_id(&conv))
        .await?;
    let base = &ctx.target.base_url;
    let mut sockets = Vec::new();
    for (name, c) in [("ana/d2", &ana2), ("ben/d1", &ben), ("ben/d2", &ben2)] {
        sockets.push((name, Ws::connect(base, c.token()).await?));
    }
    let ack = ana.send(&conv, "m-1", "to everyone").await?;
    ctx.note(format!("ana/d1: send m-1 → seq {}", ack.seq));
    for (name, ws) in &mut sockets {
        let e = ws.next_of("event", FRAME_WAIT).await?;
        ctx.note(format!("{name} ← {e}"));
        ensure!(
            e["event"]["seq"] == ack.seq && e["event"]["conv_id"] == conv.as_str(),
            "{name} got {e}"
        );
    }
    Ok(format!("seq {} pushed to 3 of 3 other devices", ack.seq))
}

/// A second connection of the same device: the first gets `kicked` and closes with 4001;
/// the second stays and receives pushes.
pub async fn kick_old_connection(ctx: &Ctx) -> Observed {
    let ana = ctx.user("ana").await?;
    let conv = ctx.id("c");
    ana.create_conversation(&NewConversation::group(Vec::<String>::new()).with_conv_id(&conv))
        .await?;
    let base = &ctx.target.base_url;
    let mut old = Ws::connect(base, ana.token()).await?;
    let mut new = Ws::connect(base, ana.token()).await?;
    let (code, frames) = old.until_close(FRAME_WAIT).await?;
    ctx.note(format!("old connection: {frames:?}, close {code}"));
    ensure!(
        code == 4001 && frames.iter().any(|f| f["type"] == "kicked"),
        "old connection: close {code} after {frames:?}"
    );
    let ack = ana.send(&conv, "m-1", "x").await?;
    let e = new.next_of("event", FRAME_WAIT).await?;
    ensure!(e["event"]["seq"] == ack.seq, "new connection got {e}");
    Ok("old: kicked + 4001; new: receives pushes".into())
}

/// Revoking a device's token closes its open socket with 4003.
pub async fn revoked_token_closes_socket(ctx: &Ctx) -> Observed {
    let ana = ctx.user("ana").await?;
    let mut ws = Ws::connect(&ctx.target.base_url, ana.token()).await?;
    ctx.target.admin.revoke_device(&ctx.id("ana"), "d1").await?;
    ctx.note("admin: revoke ana/d1");
    let (code, _) = ws.until_close(FRAME_WAIT).await?;
    ctx.note(format!("socket closed with {code}"));
    ensure!(code == 4003, "close code {code}");
    Ok(format!("closed with {code}"))
}

/// Marking read on one device reaches the user's other online devices as a `read` frame; the
/// marking device gets none; the other devices' views show it.
pub async fn read_reaches_other_devices(ctx: &Ctx) -> Observed {
    let phone = ctx.user("ana").await?;
    let laptop = ctx.device("ana", "laptop").await?;
    let ben = ctx.user("ben").await?;
    let conv = ctx.id("c");
    ben.create_conversation(&NewConversation::group([ctx.id("ana")]).with_conv_id(&conv))
        .await?;
    for i in 0..3 {
        ben.send(&conv, &format!("m-{i}"), "x").await?; // 3, 4, 5
    }
    let base = &ctx.target.base_url;
    let mut ws_phone = Ws::connect(base, phone.token()).await?;
    let mut ws_laptop = Ws::connect(base, laptop.token()).await?;
    let ack = phone.mark_read(&conv, 4).await?;
    ensure!(ack.read_seq == 4, "ack {ack:?}");
    let f = ws_laptop.next_of("read", FRAME_WAIT).await?;
    ctx.note(format!("laptop ← {f}"));
    ensure!(
        f["conv_id"] == conv.as_str() && f["read_seq"] == 4,
        "read frame {f}"
    );
    // A marker after the read: the phone answers the ping, and no read frame came before it.
    ws_phone
        .send(json!({"type": "ping", "req_id": "marker"}))
        .await?;
    let mut before_marker: Vec<Value> = Vec::new();
    loop {
        let Some(v) = ws_phone.next_json(FRAME_WAIT).await? else {
            return Err(crate::error::CheckError::Failed("no pong".into()));
        };
        if v["type"] == "pong" {
            break;
        }
        before_marker.push(v);
    }
    ensure!(
        !before_marker.iter().any(|v| v["type"] == "read"),
        "the marking device got its own read: {before_marker:?}"
    );
    let view = laptop.get_conversation(&conv).await?;
    ensure!(
        view.read_seq == 4 && view.unread == 1,
        "laptop view: read {} unread {}",
        view.read_seq,
        view.unread
    );
    Ok("laptop got read_seq 4; the phone got none; unread 1".into())
}

/// A burst into a pull group reaches a member's device as fewer hints than messages and no
/// events; the last hint names the head after the burst.
pub async fn pull_group_hints_coalesced(ctx: &Ctx) -> Observed {
    const BURST: i64 = 40;
    let ana = ctx.user("ana").await?;
    let ben = ctx.user("ben").await?;
    let conv = ctx.id("c");
    ana.create_conversation(
        &NewConversation::group([ctx.id("ben")])
            .with_conv_id(&conv)
            .with_delivery_mode(DeliveryMode::Pull),
    )
    .await?;
    let mut sender = Ws::connect(&ctx.target.base_url, ana.token()).await?;
    let mut reader = Ws::connect(&ctx.target.base_url, ben.token()).await?;
    for i in 0..BURST {
        sender
            .send(json!({"type": "send", "req_id": i, "conv_id": conv,
                         "client_msg_id": format!("m-{i}"), "body": format!("burst {i}")}))
            .await?;
    }
    for _ in 0..BURST {
        sender.next_of("ack", FRAME_WAIT).await?;
    }
    let head = 2 + BURST;
    let mut heads = Vec::new();
    let mut events = 0;
    while heads.last() != Some(&head) {
        let Some(v) = reader.next_json(FRAME_WAIT).await? else {
            return Err(crate::error::CheckError::Failed(format!(
                "no hint with head {head}; hints {heads:?}"
            )));
        };
        match v["type"].as_str() {
            Some("hint") if v["conv_id"] == conv.as_str() => {
                heads.push(v["head"].as_i64().unwrap_or(0));
            }
            Some("event") => events += 1,
            _ => {}
        }
    }
    ctx.note(format!("ben ← hints with heads {heads:?}, {events} events"));
    ensure!(events == 0, "{events} events pushed in a pull group");
    ensure!(
        heads.windows(2).all(|w| w[0] < w[1]),
        "heads not increasing: {heads:?}"
    );
    ensure!(
        (heads.len() as i64) < BURST,
        "{} hints for {BURST} messages: not coalesced",
        heads.len()
    );
    reader
        .send(json!({"type": "sync", "req_id": "s", "conv_id": conv, "after": 2, "limit": 500}))
        .await?;
    let page = reader.next_of("ack", FRAME_WAIT).await?;
    let pulled = page["events"].as_array().map(Vec::len).unwrap_or(0);
    ensure!(pulled as i64 == BURST, "sync pulled {pulled}");
    let _ = Duration::ZERO;
    Ok(format!(
        "{} hints for {BURST} messages, 0 events; sync pulled {pulled}",
        heads.len()
    ))
}
