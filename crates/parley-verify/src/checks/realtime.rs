//! Realtime delivery over WebSocket (chapters 05, 06, 08 and 09).

use std::time::{Duration, Instant};

use parley_client::{DeliveryMode, NewConversation};
use serde_json::{json, Value};

use super::Observed;
use crate::context::Ctx;
use crate::error::{ensure, CheckError};
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

/// Re-issuing a device's token (`POST /v1/admin/users/{user_id}/devices` again) revokes the old
/// one: the old token's socket closes with 4003 and the old token no longer connects; the new
/// one does; the socket of the user's other device stays open.
pub async fn reissued_token_closes_socket(ctx: &Ctx) -> Observed {
    let old = ctx.user("ana").await?;
    let other = ctx.device("ana", "d2").await?;
    let base = &ctx.target.base_url;
    let mut ws = Ws::connect(base, old.token()).await?;
    let mut other_ws = Ws::connect(base, other.token()).await?;
    let new_token = ctx.target.admin.create_device(&ctx.id("ana"), "d1").await?;
    ctx.note("admin: re-issue ana/d1");
    ensure!(
        new_token != old.token(),
        "the re-issue answered the old token"
    );
    let (code, _) = ws.until_close(FRAME_WAIT).await?;
    ctx.note(format!("old token's socket closed with {code}"));
    ensure!(code == 4003, "close code {code}");
    match Ws::connect(base, old.token()).await {
        Ok(_) => {
            return Err(CheckError::Failed(
                "the old token connected after the re-issue".into(),
            ))
        }
        Err(e) => {
            ctx.note(format!("old token refused: {e}"));
            ensure!(
                e.to_string().contains("401"),
                "the old token refused with {e}"
            );
        }
    }
    Ws::connect(base, &new_token).await?;
    ctx.note("the new token connected");
    other_ws
        .send(json!({"type": "ping", "req_id": "other"}))
        .await?;
    ensure!(
        other_ws.next_of("pong", FRAME_WAIT).await?["req_id"] == "other",
        "the other device's socket was closed too"
    );
    Ok(format!(
        "old socket closed with {code}; other device still connected"
    ))
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
            return Err(CheckError::Failed("no pong".into()));
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

/// Frames a reader collects until one satisfies `last`, then whatever follows within
/// `quiet`, each with its arrival time.
async fn frames_until(
    ws: &mut Ws,
    last: impl Fn(&Value) -> bool,
    quiet: Duration,
) -> Result<Vec<(Instant, Value)>, CheckError> {
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + FRAME_WAIT;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let Some(v) = ws.next_json(left).await? else {
            let types: Vec<String> = seen
                .iter()
                .map(|(_, v): &(Instant, Value)| v.to_string())
                .collect();
            return Err(CheckError::Failed(format!(
                "the awaited frame never came; saw {types:?}"
            )));
        };
        let done = last(&v);
        seen.push((Instant::now(), v));
        if done {
            break;
        }
    }
    while let Some(v) = ws.next_json(quiet).await? {
        seen.push((Instant::now(), v));
    }
    Ok(seen)
}

fn is_hint(v: &Value, conv: &str, head: i64) -> bool {
    v["type"] == "hint" && v["conv_id"] == conv && v["head"] == head
}

/// How much two hints' arrival times may fall short of the interval through delivery jitter.
const HINT_JITTER_MS: u64 = 100;
/// Messages of the pull burst; they commit far faster than one per hint interval.
const BURST_MESSAGES: i64 = 40;

/// A burst into a pull group reaches each device of a member as a few `hint` frames and no
/// `event`: heads increase to the head after the burst, at most one hint per interval (the
/// server's `hint_interval_ms`), every device its own. The device then pulls every message
/// with `sync`; a push group beside it still gets full events; after a quiet interval a lone
/// message is hinted at once.
pub async fn pull_group_hints_coalesced(ctx: &Ctx) -> Observed {
    let interval_ms = ctx.target.limit("hint_interval_ms").unwrap_or(0).max(1) as u64;
    let interval = Duration::from_millis(interval_ms);
    let ana = ctx.user("ana").await?;
    let ben1 = ctx.user("ben").await?;
    let ben2 = ctx.device("ben", "d2").await?;
    let (pull, push) = (ctx.id("pull"), ctx.id("push"));
    ana.create_conversation(
        &NewConversation::group([ctx.id("ben")])
            .with_conv_id(&pull)
            .with_delivery_mode(DeliveryMode::Pull),
    )
    .await?;
    ana.create_conversation(&NewConversation::group([ctx.id("ben")]).with_conv_id(&push))
        .await?;
    let base = &ctx.target.base_url;
    let mut sender = Ws::connect(base, ana.token()).await?;
    let ws1 = Ws::connect(base, ben1.token()).await?;
    let ws2 = Ws::connect(base, ben2.token()).await?;
    let head = 2 + BURST_MESSAGES;
    // Readers timestamp frames as they arrive, while the burst is sent.
    let watch = |mut ws: Ws, conv: String| {
        tokio::spawn(async move {
            let frames = frames_until(&mut ws, |v| is_hint(v, &conv, head), 2 * interval).await;
            frames.map(|f| (ws, f))
        })
    };
    let (watch1, watch2) = (watch(ws1, pull.clone()), watch(ws2, pull.clone()));
    for i in 0..BURST_MESSAGES {
        sender
            .send(json!({"type": "send", "req_id": i, "conv_id": pull,
                         "client_msg_id": format!("m-{i}"), "body": format!("burst {i}")}))
            .await?;
    }
    for _ in 0..BURST_MESSAGES {
        let ack = sender.next_of("ack", FRAME_WAIT).await?;
        ensure!(ack["dup"] == false, "burst ack {ack}");
    }
    let joined = |r: Result<_, tokio::task::JoinError>| {
        r.map_err(|e| CheckError::Failed(format!("reader task: {e}")))
    };
    let (mut ws1, frames1) = joined(watch1.await)??;
    let (mut ws2, frames2) = joined(watch2.await)??;
    let mut seen = Vec::new();
    for (name, frames) in [("d1", frames1), ("d2", frames2)] {
        let events = frames.iter().filter(|(_, v)| v["type"] == "event").count();
        ensure!(events == 0, "{name}: {events} events in a pull group");
        let hints: Vec<(Instant, i64)> = frames
            .iter()
            .filter(|(_, v)| v["type"] == "hint" && v["conv_id"] == pull.as_str())
            .filter_map(|(at, v)| Some((*at, v["head"].as_i64()?)))
            .collect();
        let heads: Vec<i64> = hints.iter().map(|(_, h)| *h).collect();
        ctx.note(format!("ben/{name} ← hints {heads:?}"));
        ensure!(
            heads.windows(2).all(|w| w[0] < w[1]) && heads.last() == Some(&head),
            "{name}: heads {heads:?}, expected increasing up to {head}"
        );
        ensure!(
            (heads.len() as i64) < BURST_MESSAGES,
            "{name}: {} hints for {BURST_MESSAGES} messages: not coalesced",
            heads.len()
        );
        // One hint per interval at most: n hints span at least (n - 1) intervals.
        let span = hints[hints.len() - 1].0 - hints[0].0;
        let allowed = 1
            + (span + Duration::from_millis(HINT_JITTER_MS)).as_millis()
                / interval.as_millis().max(1);
        ensure!(
            heads.len() as u128 <= allowed,
            "{name}: {} hints within {span:?} at a {interval:?} interval (heads {heads:?})",
            heads.len()
        );
        seen.push(heads.len());
    }
    ws1.send(json!({"type": "sync", "req_id": "s", "conv_id": pull, "after": 2, "limit": 500}))
        .await?;
    let page = ws1.next_of("ack", FRAME_WAIT).await?;
    let bodies: Vec<&str> = page["events"]
        .as_array()
        .map(|es| es.iter().filter_map(|e| e["body"].as_str()).collect())
        .unwrap_or_default();
    // Frames of one connection run concurrently, so sends pipelined without waiting for their
    // acks may commit in any order (docs/API.md): the pull must bring every one of them, in
    // whatever order they were given seqs.
    let mut pulled = bodies.clone();
    pulled.sort_unstable();
    let mut sent: Vec<String> = (0..BURST_MESSAGES).map(|i| format!("burst {i}")).collect();
    sent.sort_unstable();
    ensure!(
        pulled == sent && page["head"] == head,
        "pulled {} bodies ({} of the burst), head {}",
        bodies.len(),
        pulled
            .iter()
            .filter(|b| sent.iter().any(|s| s == *b))
            .count(),
        page["head"]
    );
    ana.send(&push, "p-1", "pushed").await?;
    let pushed = ws1.next_of("event", FRAME_WAIT).await?;
    ensure!(
        pushed["event"]["conv_id"] == push.as_str() && pushed["event"]["body"] == "pushed",
        "push group: {pushed}"
    );
    // The quiet interval is the condition under test: the next hint must not wait for an
    // interval to end.
    tokio::time::sleep(2 * interval).await;
    let sent = Instant::now();
    ana.send(&pull, "m-lone", "lone").await?;
    let hint = ws2.next_of("hint", FRAME_WAIT).await?;
    let latency = sent.elapsed();
    ctx.note(format!(
        "lone message: hint after {latency:?} (interval {interval:?})"
    ));
    ensure!(
        hint["head"] == head + 1,
        "lone hint {hint}, expected head {}",
        head + 1
    );
    Ok(format!(
        "{:?} hints for {BURST_MESSAGES} messages on two devices, 0 events; sync pulled \
         {}; the push group pushed; a lone message hinted after {} ms",
        seen,
        bodies.len(),
        latency.as_millis()
    ))
}

/// Bytes the kernel's socket buffers may hold between the server and a client that does not
/// read (send and receive buffers, generously): pushes beyond the queue that still fit there.
const SOCKET_BUFFERS_BYTES_MAX: i64 = 32 * 1024 * 1024;
/// Most messages the slow-consumer check sends; more makes it NOT_RUN.
const SLOW_MESSAGES_MAX: i64 = 6_000;
/// How far the sender runs ahead of the fast reader, in messages.
const SLOW_LEAD: usize = 4;
/// Room in a send request beside the body.
const REQUEST_OVERHEAD_BYTES: i64 = 256;

/// A client that never reads fills its bounded queue and is disconnected, while another
/// member's deliveries are complete and in order. The sender stays a few messages ahead of
/// the fast reader, so the fast one is never the slow one.
pub async fn slow_consumer_isolated(ctx: &Ctx) -> Observed {
    let queue = ctx.target.limit("ws_outbound_queue_len_max").unwrap_or(0);
    let body_len = ctx
        .target
        .limit("body_bytes_max")
        .unwrap_or(0)
        .min(ctx.target.limit("request_bytes_max").unwrap_or(0) - REQUEST_OVERHEAD_BYTES);
    if queue <= 0 || body_len <= 0 {
        return Err(CheckError::Failed(format!(
            "the server reports queue {queue}, body {body_len}"
        )));
    }
    let messages = queue + SOCKET_BUFFERS_BYTES_MAX / body_len + 16;
    if messages > SLOW_MESSAGES_MAX {
        return Err(CheckError::NotRun(format!(
            "overflowing a queue of {queue} frames of at most {body_len} bytes takes {messages} \
             messages; verify sends at most {SLOW_MESSAGES_MAX}"
        )));
    }
    let ana = ctx.user("ana").await?;
    let fast = ctx.user("fast").await?;
    let slow = ctx.user("slow").await?;
    let conv = ctx.id("c");
    ana.create_conversation(
        &NewConversation::group([ctx.id("fast"), ctx.id("slow")]).with_conv_id(&conv),
    )
    .await?;
    let mut ws_fast = Ws::connect(&ctx.target.base_url, fast.token()).await?;
    // From here on the slow client does not read until the end.
    let mut ws_slow = Ws::connect(&ctx.target.base_url, slow.token()).await?;
    let body = "x".repeat(body_len as usize);
    let total = messages as usize;
    let (read_tx, mut read_rx) = tokio::sync::watch::channel(0usize);
    let reader = tokio::spawn(async move {
        let mut seqs = Vec::with_capacity(total);
        while seqs.len() < total {
            let push = ws_fast.next_of("event", 4 * FRAME_WAIT).await?;
            seqs.push(push["event"]["seq"].as_i64().unwrap_or(-1));
            let _ = read_tx.send(seqs.len());
        }
        Ok::<Vec<i64>, CheckError>(seqs)
    });
    for i in 0..total {
        let caught_up = read_rx.wait_for(|read| read + SLOW_LEAD >= i);
        match tokio::time::timeout(4 * FRAME_WAIT, caught_up).await {
            Ok(Ok(_)) => {}
            _ => {
                return Err(CheckError::Failed(format!(
                    "the fast client stopped reading at {i}"
                )))
            }
        }
        ana.send(&conv, &format!("m-{i}"), &body).await?;
    }
    let seqs = reader
        .await
        .map_err(|e| CheckError::Failed(format!("reader task: {e}")))??;
    ensure!(
        seqs == (4..4 + messages).collect::<Vec<i64>>(),
        "the fast client's pushes were not complete and in order"
    );
    ctx.note(format!(
        "{messages} messages of {body_len} bytes; the fast client got all, in order"
    ));
    // The slow client now reads what reached it: its stream must end before the last message.
    let bound = FRAME_WAIT
        + std::time::Duration::from_millis(
            ctx.target.limit("ws_close_timeout_ms").unwrap_or(0).max(0) as u64,
        );
    let mut got = 0;
    let end = loop {
        match ws_slow.next_or_end(bound).await? {
            crate::ws::Next::Frame(v) => {
                if v["type"] == "event" {
                    got += 1;
                }
            }
            crate::ws::Next::Ended(code) => break code,
            crate::ws::Next::Quiet => {
                return Err(CheckError::Failed(format!(
                    "the slow client is still connected after {got} of {messages} events"
                )))
            }
        }
    };
    ctx.note(format!("slow client: {got} events, then ended with {end}"));
    ensure!(
        (got as i64) < messages,
        "the slow client received all {messages} events: nothing was bounded"
    );
    ensure!(
        end == 4008 || end == 1006,
        "the slow client's connection ended with {end}"
    );
    Ok(format!(
        "fast client: {messages} of {messages} in order; slow client cut off after {got} with {end}"
    ))
}
