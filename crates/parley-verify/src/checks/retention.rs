//! Retention (chapter 11) with the server's own background purge: verify waits for it, so
//! these run only when the server purges often enough (`--purge-interval-ms`).

use std::time::Duration;

use parley_client::{Client, NewConversation};
use serde_json::json;

use super::{refusal, Observed};
use crate::context::Ctx;
use crate::error::{ensure, CheckError};
use crate::ws::{Ws, FRAME_WAIT};

/// Retention of the scratch conversations: short, so their events are due at once.
const RETENTION_MS: i64 = 300;
/// Longest purge interval verify waits for; a longer one makes these checks NOT_RUN.
const PURGE_INTERVAL_MS_MAX: i64 = 5_000;
/// Polling interval while waiting for the purge.
const POLL_MS: u64 = 50;

/// The server's purge interval, or NOT_RUN when it is too long to wait for.
fn purge_interval_ms(ctx: &Ctx) -> Result<i64, CheckError> {
    match ctx.target.limit("purge_interval_ms") {
        Some(ms) if ms <= PURGE_INTERVAL_MS_MAX => Ok(ms),
        other => Err(CheckError::NotRun(format!(
            "the server purges every {other:?} ms; verify waits for at most \
             {PURGE_INTERVAL_MS_MAX} ms (start it with --purge-interval-ms {PURGE_INTERVAL_MS_MAX} or less)"
        ))),
    }
}

/// Polls the conversation until `min_seq` reaches `want`, within retention plus three purge
/// intervals and a margin.
async fn wait_min_seq(ctx: &Ctx, c: &Client, conv: &str, want: i64) -> Result<(), CheckError> {
    let interval = purge_interval_ms(ctx)?;
    let bound = Duration::from_millis((RETENTION_MS + 3 * interval) as u64) + FRAME_WAIT;
    let deadline = tokio::time::Instant::now() + bound;
    loop {
        let view = c.get_conversation(conv).await?;
        if view.min_seq >= want {
            ensure!(
                view.min_seq == want,
                "min_seq {} overshot {want}",
                view.min_seq
            );
            ctx.note(format!("{conv}: min_seq {}", view.min_seq));
            return Ok(());
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "min_seq still {} after {bound:?}",
            view.min_seq
        );
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
}

/// Events past the conversation's retention disappear: `min_seq` rises past them, reads say
/// `truncated`, the head stays, and the next send continues the sequence; a conversation
/// without retention keeps everything.
pub async fn purge_advances_min_seq(ctx: &Ctx) -> Observed {
    purge_interval_ms(ctx)?;
    let ana = ctx.user("ana").await?;
    ctx.user("ben").await?;
    let (ret, keep) = (ctx.id("ret"), ctx.id("keep"));
    ana.create_conversation(
        &NewConversation::group([ctx.id("ben")])
            .with_conv_id(&ret)
            .with_retention_ms(RETENTION_MS),
    )
    .await?;
    ana.create_conversation(&NewConversation::group([ctx.id("ben")]).with_conv_id(&keep))
        .await?;
    for i in 1..=3 {
        ana.send(&ret, &format!("m-{i}"), "fleeting").await?; // 3..=5
        ana.send(&keep, &format!("m-{i}"), "kept").await?;
    }
    wait_min_seq(ctx, &ana, &ret, 6).await?;
    let page = ana.events_after(&ret, 0, None, None).await?;
    ensure!(
        page.events.is_empty() && page.truncated && page.head == 5 && page.min_seq == 6,
        "after the purge: {page:?}"
    );
    let next = ana.send(&ret, "m-4", "later").await?;
    ensure!(next.seq == 6 && !next.dup, "send after the purge: {next:?}");
    let kept = ana.get_conversation(&keep).await?;
    ensure!(
        (kept.min_seq, kept.head) == (1, 5),
        "no-retention conversation: min_seq {} head {}",
        kept.min_seq,
        kept.head
    );
    Ok(
        "min_seq 6, head 5, truncated read; next send seq 6; the other conversation kept 1..=5"
            .into(),
    )
}

/// After the purge, a retry with the same body answers `dup: true, purged: true` with the
/// original seq and message id, over HTTP and WebSocket; another body is
/// IDEMPOTENCY_MISMATCH; nothing is written.
pub async fn retry_after_purge_hits_tombstone(ctx: &Ctx) -> Observed {
    purge_interval_ms(ctx)?;
    let ana = ctx.user("ana").await?;
    let conv = ctx.id("ret");
    ana.create_conversation(
        &NewConversation::group(Vec::<String>::new())
            .with_conv_id(&conv)
            .with_retention_ms(RETENTION_MS),
    )
    .await?;
    let first = ana.send(&conv, "m-1", "hello").await?; // 2
    wait_min_seq(ctx, &ana, &conv, 3).await?;
    let retry = ana.send(&conv, "m-1", "hello").await?;
    ctx.note(format!("HTTP retry → {retry:?}"));
    ensure!(
        retry.seq == 2 && retry.dup && retry.purged && retry.message_id == first.message_id,
        "identical retry: {retry:?}"
    );
    let changed = refusal(&ana.send(&conv, "m-1", "HELLO").await);
    ensure!(
        changed == "409 IDEMPOTENCY_MISMATCH",
        "changed retry: {changed}"
    );
    let mut ws = Ws::connect(&ctx.target.base_url, ana.token()).await?;
    ws.send(json!({"type": "send", "req_id": 1, "conv_id": conv, "client_msg_id": "m-1", "body": "hello"}))
        .await?;
    let ack = ws.next_of("ack", FRAME_WAIT).await?;
    ctx.note(format!("WebSocket retry → {ack}"));
    ensure!(
        ack["seq"] == 2 && ack["dup"] == true && ack["purged"] == true,
        "retry over WebSocket: {ack}"
    );
    let view = ana.get_conversation(&conv).await?;
    ensure!(
        (view.head, view.min_seq) == (2, 3),
        "retries wrote: head {} min_seq {}",
        view.head,
        view.min_seq
    );
    Ok("dup + purged with the original seq 2 and message id (HTTP and WebSocket); changed body 409".into())
}

/// Longest tombstone life verify waits out; a longer one makes the expiry check NOT_RUN.
const TOMBSTONE_TTL_MS_MAX: i64 = 5_000;

/// The purge moves a request key into a tombstone (a retry answers `purged`); the server's
/// own job deletes the tombstone once older than the TTL, and from then on the key is free:
/// the same request is a new message. Retrying is the probe: while the tombstone lives a retry
/// writes nothing.
pub async fn tombstone_expiry(ctx: &Ctx) -> Observed {
    let interval = purge_interval_ms(ctx)?;
    let ttl = match ctx.target.limit("tombstone_ttl_ms") {
        Some(ms) if ms <= TOMBSTONE_TTL_MS_MAX => ms,
        other => {
            return Err(CheckError::NotRun(format!(
                "tombstones live {other:?} ms; verify waits for at most {TOMBSTONE_TTL_MS_MAX} \
                 ms (start the server with --tombstone-ttl-ms {TOMBSTONE_TTL_MS_MAX} or less)"
            )))
        }
    };
    let ana = ctx.user("ana").await?;
    let conv = ctx.id("ttl");
    ana.create_conversation(
        &NewConversation::group(Vec::<String>::new())
            .with_conv_id(&conv)
            .with_retention_ms(RETENTION_MS),
    )
    .await?;
    let first = ana.send(&conv, "m-1", "hello").await?; // 2
    wait_min_seq(ctx, &ana, &conv, 3).await?;
    let bound = Duration::from_millis((ttl + 3 * interval) as u64) + FRAME_WAIT;
    let deadline = tokio::time::Instant::now() + bound;
    let mut purged_answers = 0;
    let fresh = loop {
        let ack = ana.send(&conv, "m-1", "hello").await?;
        if !ack.dup {
            break ack;
        }
        ensure!(
            ack.purged && ack.seq == first.seq && ack.message_id == first.message_id,
            "retry while the tombstone lives: {ack:?}"
        );
        purged_answers += 1;
        ensure!(
            tokio::time::Instant::now() < deadline,
            "the tombstone outlived its TTL of {ttl} ms by more than {bound:?}"
        );
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    };
    ctx.note(format!(
        "{purged_answers} retries answered from the tombstone, then {fresh:?}"
    ));
    ensure!(purged_answers > 0, "no retry was answered from a tombstone");
    ensure!(fresh.seq == 3, "send with an expired key: {fresh:?}");
    Ok(format!(
        "{purged_answers} retries answered purged, then the key was free: new message seq {} \
         (TTL {ttl} ms)",
        fresh.seq
    ))
}

/// While a transaction of the check holds one retention conversation's row lock, the
/// server's purge keeps working: another conversation is purged, and a third, written after
/// that, is purged by a later round, so no round is stuck on the lock; the busy one keeps its
/// events until the lock is released, then is purged too.
pub async fn purge_never_waits_for_a_busy_conversation(ctx: &Ctx) -> Observed {
    ctx.needs_postgres()?;
    purge_interval_ms(ctx)?;
    let mut holder = ctx.db().await?;
    let ana = ctx.user("ana").await?;
    let (busy, free, later) = (ctx.id("busy"), ctx.id("free"), ctx.id("later"));
    for conv in [&busy, &free] {
        ana.create_conversation(
            &NewConversation::group(Vec::<String>::new())
                .with_conv_id(conv)
                .with_retention_ms(RETENTION_MS),
        )
        .await?;
        ana.send(conv, "m-1", "x").await?; // 2
    }
    sqlx::Executor::execute(&mut holder, "BEGIN").await?;
    sqlx::query("SELECT 1 FROM conversations WHERE conv_id = $1 FOR UPDATE")
        .bind(&busy)
        .execute(&mut holder)
        .await?;
    ctx.note(format!("holder: BEGIN; SELECT … FOR UPDATE ({busy})"));
    let outcome = async {
        wait_min_seq(ctx, &ana, &free, 3).await?;
        ana.create_conversation(
            &NewConversation::group(Vec::<String>::new())
                .with_conv_id(&later)
                .with_retention_ms(RETENTION_MS),
        )
        .await?;
        ana.send(&later, "m-1", "x").await?;
        wait_min_seq(ctx, &ana, &later, 3).await?;
        let held = ana.get_conversation(&busy).await?;
        ensure!(
            held.min_seq == 1,
            "the locked conversation was purged: min_seq {}",
            held.min_seq
        );
        Ok::<(), CheckError>(())
    }
    .await;
    sqlx::Executor::execute(&mut holder, "ROLLBACK").await?;
    outcome?;
    wait_min_seq(ctx, &ana, &busy, 3).await?;
    Ok("purged a free and a later conversation while one was locked; the locked one after its release".into())
}
