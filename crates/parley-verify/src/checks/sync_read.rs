//! Incremental sync (chapter 07), read positions (chapter 09), member rights (chapter 08) and
//! the retry of a lost ack (chapter 06), over HTTP.

use parley_client::{EventKind, NewConversation};

use super::{read_whole_log, refusal, Observed};
use crate::context::Ctx;
use crate::error::ensure;

/// The feed with the token of an earlier answer returns only the conversations that changed
/// since; a bad token is 400.
pub async fn sync_feed_only_changed(ctx: &Ctx) -> Observed {
    let ana = ctx.user("ana").await?;
    let ben = ctx.user("ben").await?;
    let convs: Vec<String> = (1..=3).map(|i| ctx.id(&format!("c{i}"))).collect();
    for conv in &convs {
        ben.create_conversation(&NewConversation::group([ctx.id("ana")]).with_conv_id(conv))
            .await?;
    }
    let all = ana.list_conversations(None).await?;
    ensure!(
        all.conversations.len() == 3,
        "first feed: {} conversations",
        all.conversations.len()
    );
    ben.send(&convs[1], "m-1", "hello").await?;
    let changed = ana.list_conversations(Some(&all.sync_token)).await?;
    let ids: Vec<&str> = changed
        .conversations
        .iter()
        .map(|c| c.conv_id.as_str())
        .collect();
    ctx.note(format!("feed since the first token → {ids:?}"));
    ensure!(ids == [convs[1].as_str()], "changed: {ids:?}");
    let c = &changed.conversations[0];
    ensure!(
        c.unread == 1 && c.head == 3,
        "unread {} head {}",
        c.unread,
        c.head
    );
    let (status, body) = ana
        .raw(
            parley_client::Method::GET,
            "/v1/conversations?since=nonsense",
        )
        .send()
        .await?;
    ensure!(
        status == 400 && body["error"]["code"] == "BAD_REQUEST",
        "bad token: {status} {body}"
    );
    Ok("1 of 3 conversations in the feed after one change; bad token 400".into())
}

/// A device that was offline catches up by pages of events-after from its cursor: every
/// event, once, in order.
pub async fn offline_device_catches_up(ctx: &Ctx) -> Observed {
    const MISSED: i64 = 120;
    let ana = ctx.user("ana").await?;
    let ben = ctx.user("ben").await?;
    let conv = ctx.id("c");
    ana.create_conversation(&NewConversation::group([ctx.id("ben")]).with_conv_id(&conv))
        .await?;
    let cursor = ben.events_after(&conv, 0, None, None).await?.through_seq;
    for i in 0..MISSED {
        ana.send(&conv, &format!("m-{i}"), "x").await?;
    }
    let mut after = cursor;
    let mut got = Vec::new();
    let mut pages = 0;
    loop {
        let page = ben.events_after(&conv, after, Some(50), None).await?;
        pages += 1;
        got.extend(page.events.iter().map(|e| e.seq));
        after = page.through_seq;
        if after >= page.head {
            break;
        }
    }
    ctx.note(format!(
        "caught up from {cursor} in {pages} pages: {} events",
        got.len()
    ));
    ensure!(
        got == (cursor + 1..=2 + MISSED).collect::<Vec<i64>>(),
        "caught up {got:?}"
    );
    Ok(format!(
        "{} events in {pages} pages, in order, once each",
        got.len()
    ))
}

/// A read position never moves back: a lower mark answers the current position.
pub async fn read_monotonic(ctx: &Ctx) -> Observed {
    let ana = ctx.user("ana").await?;
    let ben = ctx.user("ben").await?;
    let conv = ctx.id("c");
    ben.create_conversation(&NewConversation::group([ctx.id("ana")]).with_conv_id(&conv))
        .await?;
    for i in 0..4 {
        ben.send(&conv, &format!("m-{i}"), "x").await?; // 3..=6
    }
    let up = ana.mark_read(&conv, 5).await?;
    let back = ana.mark_read(&conv, 3).await?;
    let beyond = ana.mark_read(&conv, 100).await?;
    ctx.note(format!(
        "mark 5 → {up:?}; mark 3 → {back:?}; mark 100 → {beyond:?}"
    ));
    ensure!(up.read_seq == 5, "mark 5: {up:?}");
    ensure!(back.read_seq == 5, "mark 3 moved it back: {back:?}");
    ensure!(beyond.read_seq == 6, "mark beyond the head: {beyond:?}");
    let view = ana.get_conversation(&conv).await?;
    ensure!(view.read_seq == 6 && view.unread == 0, "view {view:?}");
    Ok("5, then 3 → 5, then 100 → 6 (clamped to the head)".into())
}

/// A member's own message counts as read: their read position moves to it.
pub async fn own_send_advances_read(ctx: &Ctx) -> Observed {
    let ana = ctx.user("ana").await?;
    let ben = ctx.user("ben").await?;
    let conv = ctx.id("c");
    ben.create_conversation(&NewConversation::group([ctx.id("ana")]).with_conv_id(&conv))
        .await?;
    ben.send(&conv, "m-1", "x").await?; // 3
    ben.send(&conv, "m-2", "x").await?; // 4
    let before = ana.get_conversation(&conv).await?;
    let ack = ana.send(&conv, "m-a", "mine").await?; // 5
    let after = ana.get_conversation(&conv).await?;
    ctx.note(format!(
        "ana before: read {} unread {}; sends seq {}; after: read {} unread {}",
        before.read_seq, before.unread, ack.seq, after.read_seq, after.unread
    ));
    ensure!(before.unread == 2, "unread before: {}", before.unread);
    ensure!(
        after.read_seq == ack.seq && after.unread == 0,
        "after the own send: read {} unread {}",
        after.read_seq,
        after.unread
    );
    Ok(format!(
        "read_seq {} after sending seq {}",
        after.read_seq, ack.seq
    ))
}

/// Unread counts only messages inside the member's periods: none from before the join,
/// none after the leave.
pub async fn unread_respects_membership(ctx: &Ctx) -> Observed {
    let ana = ctx.user("ana").await?;
    let cai = ctx.user("cai").await?;
    let conv = ctx.id("c");
    ana.create_conversation(&NewConversation::group(Vec::<String>::new()).with_conv_id(&conv))
        .await?;
    for i in 0..3 {
        ana.send(&conv, &format!("m-{i}"), "before cai").await?; // 2..=4
    }
    ana.add_member(&conv, &ctx.id("cai")).await?; // 5
    ana.send(&conv, "m-3", "with cai").await?; // 6
    let view = cai.get_conversation(&conv).await?;
    ctx.note(format!("cai after joining at 5: unread {}", view.unread));
    ensure!(view.unread == 1, "unread after the join: {}", view.unread);
    cai.remove_member(&conv, &ctx.id("cai")).await?; // 7
    ana.send(&conv, "m-4", "after cai").await?; // 8
    let mine = ana.get_conversation(&conv).await?;
    ensure!(mine.unread == 0, "sender's unread: {}", mine.unread);
    Ok("1 unread for the message inside the period; 0 of the 3 before the join".into())
}

/// A plain member cannot remove another member: 403 FORBIDDEN, and nothing changes.
pub async fn member_cannot_remove_others(ctx: &Ctx) -> Observed {
    let ana = ctx.user("ana").await?;
    let ben = ctx.user("ben").await?;
    ctx.user("cai").await?;
    let conv = ctx.id("c");
    ana.create_conversation(
        &NewConversation::group([ctx.id("ben"), ctx.id("cai")]).with_conv_id(&conv),
    )
    .await?;
    let r = refusal(&ben.remove_member(&conv, &ctx.id("cai")).await);
    let r2 = refusal(&ben.remove_member(&conv, &ctx.id("ana")).await);
    ctx.note(format!("ben removes cai → {r}; ben removes ana → {r2}"));
    ensure!(r == "403 FORBIDDEN" && r2 == "403 FORBIDDEN", "{r}; {r2}");
    let head = ana.get_conversation(&conv).await?.head;
    ensure!(head == 3, "head {head}");
    Ok(format!("{r}; head unchanged at {head}"))
}

/// The client lost the ack and retries with the same request key: the same message, `dup`,
/// one event.
pub async fn retry_after_lost_ack(ctx: &Ctx) -> Observed {
    let ana = ctx.user("ana").await?;
    let conv = ctx.id("c");
    ana.create_conversation(&NewConversation::group(Vec::<String>::new()).with_conv_id(&conv))
        .await?;
    let first = ana.send(&conv, "m-1", "once").await?;
    let again = ana.send_with_retry(&conv, "m-1", "once").await?;
    ctx.note(format!("first {first:?}; retry {again:?}"));
    ensure!(
        again.dup && again.seq == first.seq && again.message_id == first.message_id,
        "retry: {again:?} vs {first:?}"
    );
    let msgs = read_whole_log(&ana, &conv)
        .await?
        .iter()
        .filter(|e| e.kind == EventKind::Msg)
        .count();
    ensure!(msgs == 1, "{msgs} messages");
    Ok(format!(
        "dup=true, seq {}, same message_id, 1 message",
        again.seq
    ))
}
