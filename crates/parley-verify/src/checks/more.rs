//! Checks of chapters 05, 07, 08, 09 and 11 added after the first port: read state on every
//! device, the pull threshold, concurrent read marks, periods bounding reads, and the route
//! surviving the old connection's cleanup.

use std::sync::Arc;

use parley_client::{DeliveryMode, EventKind, NewConversation};
use tokio::sync::Barrier;

use super::{read_whole_log, seq_kinds, Observed};
use crate::context::Ctx;
use crate::error::{ensure, CheckError};
use crate::ws::{Ws, FRAME_WAIT};

/// Largest pull threshold verify builds a group for: each member is a user created through
/// the admin API.
const PULL_THRESHOLD_MAX: i64 = 1_000;
/// Concurrent read marks of the monotonic check.
const CONCURRENT_MARKS: i64 = 24;
/// Reconnections of the same device in the route check.
const RECONNECTS: usize = 3;

/// After a mark on one device, every device of the user reads the same position: in the
/// conversation's view and in the feed.
pub async fn read_state_across_devices(ctx: &Ctx) -> Observed {
    let phone = ctx.user("ana").await?;
    let laptop = ctx.device("ana", "laptop").await?;
    let ben = ctx.user("ben").await?;
    let conv = ctx.id("c");
    ben.create_conversation(&NewConversation::group([ctx.id("ana")]).with_conv_id(&conv))
        .await?;
    for i in 0..4 {
        ben.send(&conv, &format!("m-{i}"), "x").await?; // 3..=6
    }
    let feed = laptop.list_conversations(None).await?;
    phone.mark_read(&conv, 5).await?;
    let view = laptop.get_conversation(&conv).await?;
    let changed = laptop.list_conversations(Some(&feed.sync_token)).await?;
    let in_feed = changed
        .conversations
        .iter()
        .find(|c| c.conv_id == conv)
        .map(|c| (c.read_seq, c.unread));
    ctx.note(format!(
        "phone marks 5; laptop view read {} unread {}; laptop feed {in_feed:?}",
        view.read_seq, view.unread
    ));
    ensure!(
        view.read_seq == 5 && view.unread == 1,
        "laptop view: read {} unread {}",
        view.read_seq,
        view.unread
    );
    ensure!(
        in_feed == Some((5, 1)),
        "laptop feed since its last sync: {in_feed:?}"
    );
    Ok("read_seq 5, unread 1 on the other device's view and feed".into())
}

/// A group grows to the server's pull threshold: the join that reaches it switches delivery
/// to pull; a member's socket then gets a hint and no event.
pub async fn threshold_switches_to_pull(ctx: &Ctx) -> Observed {
    let threshold = ctx.target.limit("pull_threshold").unwrap_or(0);
    if !(3..=PULL_THRESHOLD_MAX).contains(&threshold) {
        return Err(CheckError::NotRun(format!(
            "the server's pull threshold is {threshold}; verify builds groups of 3 to \
             {PULL_THRESHOLD_MAX} members"
        )));
    }
    let ana = ctx.user("ana").await?;
    let ben = ctx.user("ben").await?;
    // Members without devices: ana, ben and `threshold - 3` more make one below the threshold.
    let mut members = vec![ctx.id("ben")];
    for i in 0..threshold - 3 {
        let id = ctx.id(&format!("m{i}"));
        ctx.target.admin.create_user(&id, None).await?;
        members.push(id);
    }
    let last = ctx.id("last");
    ctx.target.admin.create_user(&last, None).await?;
    let conv = ctx.id("c");
    let created = ana
        .create_conversation(&NewConversation::group(members).with_conv_id(&conv))
        .await?;
    ctx.note(format!(
        "created with {} members: {:?}",
        threshold - 1,
        created.delivery_mode
    ));
    ensure!(
        created.delivery_mode == DeliveryMode::Push,
        "{} members below a threshold of {threshold}: {:?}",
        threshold - 1,
        created.delivery_mode
    );
    let mut ws = Ws::connect(&ctx.target.base_url, ben.token()).await?;
    let before = ana.send(&conv, "m-0", "while push").await?;
    let pushed = ws.next_of("event", FRAME_WAIT).await?;
    ensure!(
        pushed["event"]["seq"] == before.seq && pushed["event"]["body"] == "while push",
        "push before the threshold: {pushed}"
    );
    let join = ana.add_member(&conv, &last).await?.seq;
    let view = ana.get_conversation(&conv).await?;
    ctx.note(format!("join @{join} → {:?}", view.delivery_mode));
    ensure!(
        view.delivery_mode == DeliveryMode::Pull,
        "{threshold} members: {:?}",
        view.delivery_mode
    );
    let sent = ana.send(&conv, "m-1", "after the switch").await?;
    let mut heads = Vec::new();
    loop {
        let Some(v) = ws.next_json(FRAME_WAIT).await? else {
            return Err(CheckError::Failed(format!(
                "no hint with head {}; hints {heads:?}",
                sent.seq
            )));
        };
        ensure!(
            v["type"] != "event",
            "an event was pushed after the switch: {v}"
        );
        if v["type"] == "hint" && v["conv_id"] == conv.as_str() {
            heads.push(v["head"].as_i64().unwrap_or(0));
            if heads.last() == Some(&sent.seq) {
                break;
            }
        }
    }
    ctx.note(format!("ben ← hints {heads:?} after the switch"));
    ensure!(
        heads.first() == Some(&join),
        "the join @{join} was not the first hint: {heads:?}"
    );
    Ok(format!(
        "push with {} members; pull from the join @{join} reaching {threshold}; hint, no event",
        threshold - 1
    ))
}

/// Concurrent marks of one user from several devices: the position ends at the highest, and
/// no answer is below an answer that came before it on the same device.
pub async fn read_position_monotonic(ctx: &Ctx) -> Observed {
    let ana = ctx.user("ana").await?;
    let ana2 = ctx.device("ana", "d2").await?;
    let ben = ctx.user("ben").await?;
    let conv = ctx.id("c");
    ben.create_conversation(&NewConversation::group([ctx.id("ana")]).with_conv_id(&conv))
        .await?;
    for i in 0..CONCURRENT_MARKS {
        ben.send(&conv, &format!("m-{i}"), "x").await?; // 3..
    }
    let head = 2 + CONCURRENT_MARKS;
    let barrier = Arc::new(Barrier::new(CONCURRENT_MARKS as usize));
    let mut tasks = Vec::new();
    for i in 0..CONCURRENT_MARKS {
        let c = if i % 2 == 0 {
            ana.clone()
        } else {
            ana2.clone()
        };
        let (conv, barrier) = (conv.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            c.mark_read(&conv, 3 + i).await.map(|a| (3 + i, a.read_seq))
        }));
    }
    for t in tasks {
        let (asked, got) = t
            .await
            .map_err(|e| CheckError::Failed(format!("mark task: {e}")))??;
        ensure!(got >= asked, "marked {asked}, answered {got}");
    }
    let view = ana.get_conversation(&conv).await?;
    ctx.note(format!(
        "{CONCURRENT_MARKS} concurrent marks 3..={head} → read_seq {}",
        view.read_seq
    ));
    ensure!(
        view.read_seq == head && view.unread == 0,
        "after the marks: read {} unread {}",
        view.read_seq,
        view.unread
    );
    let back = ana2.mark_read(&conv, 3).await?;
    ensure!(back.read_seq == head, "moved back: {back:?}");
    Ok(format!(
        "read_seq {head} (the highest); every answer ≥ its mark"
    ))
}

/// A member who left and came back reads their two periods and nothing in between.
pub async fn periods_bound_reads(ctx: &Ctx) -> Observed {
    let ana = ctx.user("ana").await?;
    let ben = ctx.user("ben").await?;
    let conv = ctx.id("c");
    ana.create_conversation(&NewConversation::group([ctx.id("ben")]).with_conv_id(&conv))
        .await?;
    ana.send(&conv, "m-1", "first period").await?; // 3
    ben.remove_member(&conv, &ctx.id("ben")).await?; // 4
    ana.send(&conv, "m-2", "while away").await?; // 5
    ana.add_member(&conv, &ctx.id("ben")).await?; // 6
    ana.send(&conv, "m-3", "second period").await?; // 7
    let sees = seq_kinds(&read_whole_log(&ben, &conv).await?);
    ctx.note(format!("ben reads {sees:?}"));
    let want = [
        (2, EventKind::Join),
        (3, EventKind::Msg),
        (4, EventKind::Leave),
        (6, EventKind::Join),
        (7, EventKind::Msg),
    ];
    ensure!(sees == want, "ben reads {sees:?}");
    let page = ben.history(&conv, None, Some(50)).await?;
    ensure!(
        !page.events.iter().any(|e| e.seq == 5),
        "history shows seq 5: {:?}",
        seq_kinds(&page.events)
    );
    Ok("2, 3, 4 then 6, 7: nothing of the gap".into())
}

/// The same device reconnects several times: each old connection is kicked and cleaned up,
/// and the newest still receives pushes afterwards.
pub async fn old_cleanup_keeps_new_route(ctx: &Ctx) -> Observed {
    let ana = ctx.user("ana").await?;
    let ben = ctx.user("ben").await?;
    let conv = ctx.id("c");
    ben.create_conversation(&NewConversation::group([ctx.id("ana")]).with_conv_id(&conv))
        .await?;
    let base = &ctx.target.base_url;
    let mut current = Ws::connect(base, ana.token()).await?;
    for round in 0..RECONNECTS {
        let mut next = Ws::connect(base, ana.token()).await?;
        let (code, _) = current.until_close(FRAME_WAIT).await?;
        ensure!(code == 4001, "round {round}: old connection closed {code}");
        // The closed connection's cleanup has run once its close is seen; a push must still
        // find the new one.
        let ack = ben.send(&conv, &format!("m-{round}"), "x").await?;
        let e = next.next_of("event", FRAME_WAIT).await?;
        ctx.note(format!(
            "round {round}: old closed {code}; new ← seq {}",
            e["event"]["seq"]
        ));
        ensure!(e["event"]["seq"] == ack.seq, "round {round}: {e}");
        current = next;
    }
    Ok(format!(
        "{RECONNECTS} reconnects: each new connection kept receiving"
    ))
}

/// A former member's cursor stops at their leave; after they rejoin, events-after from the
/// leave skips the invisible range: the page starts at the rejoin and `through_seq` follows it.
pub async fn through_seq_skips_invisible(ctx: &Ctx) -> Observed {
    let ana = ctx.user("ana").await?;
    let ben = ctx.user("ben").await?;
    let conv = ctx.id("c");
    ana.create_conversation(&NewConversation::group([ctx.id("ben")]).with_conv_id(&conv))
        .await?;
    ana.send(&conv, "m-3", "x").await?; // 3
    ben.remove_member(&conv, &ctx.id("ben")).await?; // 4
    for i in 5..=6 {
        ana.send(&conv, &format!("m-{i}"), "x").await?;
    }
    let away = ben.events_after(&conv, 4, Some(50), None).await?;
    ctx.note(format!(
        "away: events {:?} through {} head {}",
        seq_kinds(&away.events),
        away.through_seq,
        away.head
    ));
    ensure!(
        away.events.is_empty() && away.through_seq == 4 && away.head == 4,
        "former member: through {} head {} events {:?}",
        away.through_seq,
        away.head,
        seq_kinds(&away.events)
    );
    ana.add_member(&conv, &ctx.id("ben")).await?; // 7
    ana.send(&conv, "m-8", "x").await?; // 8
    let page = ben.events_after(&conv, 4, Some(50), None).await?;
    let seqs: Vec<i64> = page.events.iter().map(|e| e.seq).collect();
    ensure!(
        seqs == [7, 8] && page.through_seq == 8 && page.head == 8,
        "after the rejoin: {seqs:?} through {} head {}",
        page.through_seq,
        page.head
    );
    let one = ben.events_after(&conv, 4, Some(1), None).await?;
    let first: Vec<i64> = one.events.iter().map(|e| e.seq).collect();
    ensure!(
        first == [7] && one.through_seq == 7,
        "page of one: {first:?} through {}",
        one.through_seq
    );
    Ok("away: through 4 = head 4; after the rejoin 7, 8 through 8; a page of one through 7".into())
}

/// 68 concurrent sends: 48 distinct, 12 under one key with two bodies, 8 from a non-member.
/// Each is answered on its own: the distinct ones and one winner of the shared key take
/// consecutive seqs, the shared key's replays get the winner's answer and the other body
/// IDEMPOTENCY_MISMATCH, the non-member NOT_MEMBER.
pub async fn concurrent_mixed_sends_answered_each(ctx: &Ctx) -> Observed {
    const SENDS: usize = 68;
    let ana = ctx.user("ana").await?;
    let ben = ctx.user("ben").await?;
    let cat = ctx.user("cat").await?;
    let conv = ctx.id("c");
    ana.create_conversation(&NewConversation::group([ctx.id("ben")]).with_conv_id(&conv))
        .await?;
    let start = Arc::new(Barrier::new(SENDS));
    let mut tasks = Vec::new();
    for i in 0..SENDS {
        let (from, key, body) = match i {
            0..=47 => (
                if i % 2 == 0 { ana.clone() } else { ben.clone() },
                format!("m-{i}"),
                "x",
            ),
            48..=55 => (ana.clone(), "m-shared".to_owned(), "first body"),
            56..=59 => (ana.clone(), "m-shared".to_owned(), "other body"),
            _ => (cat.clone(), format!("m-cat-{i}"), "x"),
        };
        let (conv, start) = (conv.clone(), start.clone());
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            (i, body, from.send(&conv, &key, body).await)
        }));
    }
    let mut written = Vec::new();
    let mut shared_ok = Vec::new();
    let mut mismatches = Vec::new();
    for t in tasks {
        let (i, body, outcome) = t
            .await
            .map_err(|e| CheckError::Failed(format!("send task: {e}")))?;
        let code = outcome
            .as_ref()
            .err()
            .and_then(|e| e.code().map(str::to_owned));
        match (i, outcome) {
            (0..=47, Ok(ack)) if !ack.dup => written.push(ack.seq),
            (48..=59, Ok(ack)) => shared_ok.push((body, ack)),
            (48..=59, Err(_)) if code.as_deref() == Some("IDEMPOTENCY_MISMATCH") => {
                mismatches.push(body)
            }
            (60.., Err(_)) if code.as_deref() == Some("NOT_MEMBER") => {}
            (i, other) => {
                return Err(CheckError::Failed(format!(
                    "send {i}: unexpected {other:?}"
                )))
            }
        }
    }
    let winners: Vec<_> = shared_ok.iter().filter(|(_, a)| !a.dup).collect();
    ensure!(
        winners.len() == 1,
        "shared key written {} times",
        winners.len()
    );
    let (winning_body, winner) = winners[0].clone();
    written.push(winner.seq);
    ensure!(
        shared_ok.iter().all(|(b, a)| *b == winning_body
            && a.seq == winner.seq
            && a.message_id == winner.message_id),
        "a replay of the shared key got another answer than the winner"
    );
    let expected_ok = if winning_body == "first body" { 8 } else { 4 };
    ensure!(
        mismatches.iter().all(|b| *b != winning_body)
            && shared_ok.len() + mismatches.len() == 12
            && shared_ok.len() == expected_ok,
        "shared key: {} replays, {} mismatches, winner {winning_body:?}",
        shared_ok.len(),
        mismatches.len()
    );
    written.sort_unstable();
    ensure!(
        written == (3..=51).collect::<Vec<i64>>(),
        "seqs not consecutive: {written:?}"
    );
    ctx.note(format!(
        "{SENDS} sends: 49 written (3..=51), shared key won by {winning_body:?}, {} mismatches, 8 NOT_MEMBER",
        mismatches.len()
    ));
    Ok(format!(
        "49 messages at 3..=51; shared key: 1 winner, {} replays, {} mismatches; 8 NOT_MEMBER",
        shared_ok.len() - 1,
        mismatches.len()
    ))
}
