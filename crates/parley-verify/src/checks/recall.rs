//! Recall (chapter 11), over HTTP.

use std::time::Duration;

use parley_client::NewConversation;

use super::{refusal, Observed};
use crate::context::Ctx;
use crate::error::ensure;

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
