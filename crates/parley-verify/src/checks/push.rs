//! Chapter 14: notifications for devices that are offline (docs/PUSH.md). Each check runs its
//! own push service on this machine (`parley_push::TestPushService`): it checks the VAPID
//! signature and decrypts every notification, so what a check reads is what a browser would
//! show. The server must accept `http://` endpoints (`--push-allow-http`) and reach this
//! machine; otherwise the checks are NOT_RUN.

use std::time::Duration;

use parley_client::{Client, NewConversation, SendOptions};
use parley_push::receiver::{Mode, Received, TestPushService};

use super::Observed;
use crate::context::Ctx;
use crate::error::{ensure, CheckError};

/// How long a notification may take to arrive: the server polls for work every 200 ms and
/// the first retry of a refused one waits a second.
const ARRIVAL_WAIT: Duration = Duration::from_secs(15);
/// How long a check waits for notifications that must not come: longer than the server's
/// default coalescing interval (3 s) plus a retry.
const SILENCE_WAIT: Duration = Duration::from_secs(5);

/// A push service of this check.
async fn service() -> Result<TestPushService, CheckError> {
    TestPushService::start()
        .await
        .map_err(|e| CheckError::NotRun(format!("cannot start a push service here: {e}")))
}

/// Registers `client`'s device with a subscription of `svc` named `name`.
async fn subscribe(svc: &TestPushService, client: &Client, name: &str) -> Result<(), CheckError> {
    let sub = svc.subscribe(name);
    match client
        .register_web_push(&sub.endpoint, &sub.p256dh, &sub.auth)
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if e.status() == Some(400) && e.to_string().contains("http") => {
            Err(CheckError::NotRun(format!(
                "the server refuses the http:// endpoint of this check's push service (start it \
                 with --push-allow-http): {e}"
            )))
        }
        Err(e) => Err(e.into()),
    }
}

fn field<'a>(r: &'a Received, name: &str) -> &'a serde_json::Value {
    &r.payload[name]
}

fn describe(received: &[Received]) -> String {
    let items: Vec<String> = received
        .iter()
        .map(|r| {
            format!(
                "{}:{}@{} {}",
                r.name,
                field(r, "conv_id").as_str().unwrap_or("?"),
                field(r, "seq"),
                field(r, "kind").as_str().unwrap_or("?")
            )
        })
        .collect();
    format!("[{}]", items.join(", "))
}

/// ana and ben in a new group of this check.
async fn pair(ctx: &Ctx, name: &str) -> Result<(String, Client, Client), CheckError> {
    let ana = ctx.user("ana").await?;
    let ben = ctx.user("ben").await?;
    let conv = ctx.id(name);
    ana.create_conversation(&NewConversation::group([ctx.id("ben")]).with_conv_id(&conv))
        .await?;
    Ok((conv, ana, ben))
}

/// A message to an offline member reaches their registered browser, encrypted for it and
/// signed with the deployment's VAPID key; the sender's own devices are not notified.
pub async fn webpush_delivered(ctx: &Ctx) -> Observed {
    let svc = service().await?;
    let (conv, ana, ben) = pair(ctx, "c").await?;
    subscribe(&svc, &ben, "ben").await?;
    subscribe(&svc, &ana, "ana").await?;
    let vapid = ben.vapid_key().await?;
    let ack = ana.send(&conv, "k1", "hello ben").await?;
    ctx.note(format!("ana sent seq {}", ack.seq));
    let got = svc.wait_for(1, ARRIVAL_WAIT).await;
    ensure!(got.len() == 1, "notifications {}", describe(&got));
    let n = &got[0];
    ensure!(
        n.name == "ben",
        "sent to {} (the sender's own device?)",
        n.name
    );
    ensure!(
        field(n, "conv_id") == conv.as_str() && field(n, "seq") == ack.seq,
        "payload {}",
        n.payload
    );
    ensure!(
        field(n, "sender") == ctx.id("ana").as_str()
            && field(n, "preview") == "hello ben"
            && field(n, "kind") == "message"
            && field(n, "unread") == 1
            && field(n, "badge").as_i64().unwrap_or(0) >= 1,
        "payload {}",
        n.payload
    );
    ensure!(
        n.vapid_key == vapid,
        "signed by {} not {vapid}",
        n.vapid_key
    );
    ensure!(
        n.ttl > 0 && n.topic.is_some() && n.urgency.as_deref() == Some("normal"),
        "ttl {} topic {:?} urgency {:?}",
        n.ttl,
        n.topic,
        n.urgency
    );
    tokio::time::sleep(SILENCE_WAIT).await;
    let all = svc.received();
    ensure!(all.len() == 1, "later notifications {}", describe(&all));
    Ok(format!(
        "ben notified of seq {} (decrypted, VAPID-signed, ttl {}, topic set); ana not",
        ack.seq, n.ttl
    ))
}

/// Notifications follow commits only: a refused send (a request key reused with another
/// body, a non-member's send) notifies no one, and every notification names a committed
/// message with its committed text.
pub async fn outbox_after_commit(ctx: &Ctx) -> Observed {
    let svc = service().await?;
    let (conv, ana, ben) = pair(ctx, "c").await?;
    let cai = ctx.user("cai").await?;
    subscribe(&svc, &ben, "ben").await?;
    let ack = ana.send(&conv, "k1", "the committed text").await?;
    let reused = ana.send(&conv, "k1", "a refused text").await;
    ensure!(
        reused.as_ref().err().and_then(|e| e.code()) == Some("IDEMPOTENCY_MISMATCH"),
        "reused key: {reused:?}"
    );
    let stranger = cai.send(&conv, "k2", "a stranger's text").await;
    ensure!(stranger.is_err(), "a non-member's send was accepted");
    let got = svc.wait_for(1, ARRIVAL_WAIT).await;
    tokio::time::sleep(SILENCE_WAIT).await;
    let all = svc.received();
    ensure!(
        all.len() == 1 && !got.is_empty(),
        "notifications {}",
        describe(&all)
    );
    let n = &all[0];
    ensure!(
        field(n, "seq") == ack.seq && field(n, "preview") == "the committed text",
        "payload {}",
        n.payload
    );
    let page = ben.events_after(&conv, 0, Some(100), None).await?;
    let committed = page
        .events
        .iter()
        .any(|e| e.seq == ack.seq && e.body.as_deref() == Some("the committed text"));
    ensure!(committed, "seq {} is not in the log as notified", ack.seq);
    Ok(format!(
        "one notification, seq {} with its committed text; the refused sends none",
        ack.seq
    ))
}

/// A notification refused by the push service is retried; if the user read the message on
/// another device meanwhile, the retry is dropped. A later message is notified again.
pub async fn no_push_after_read(ctx: &Ctx) -> Observed {
    let svc = service().await?;
    let (conv, ana, ben) = pair(ctx, "c").await?;
    subscribe(&svc, &ben, "ben").await?;
    let laptop = ctx.device("ben", "laptop").await?;
    svc.set_mode(Mode::Down);
    let first = ana.send(&conv, "k1", "read elsewhere").await?;
    let deadline = tokio::time::Instant::now() + ARRIVAL_WAIT;
    while svc.attempts() == 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    ensure!(svc.attempts() > 0, "no attempt reached the push service");
    laptop.mark_read(&conv, first.seq).await?;
    svc.set_mode(Mode::Up);
    tokio::time::sleep(SILENCE_WAIT).await;
    let early = svc.received();
    ensure!(
        early.is_empty(),
        "notified of a message read on the laptop: {}",
        describe(&early)
    );
    let second = ana.send(&conv, "k2", "unread").await?;
    let got = svc.wait_for(1, ARRIVAL_WAIT).await;
    ensure!(
        got.len() == 1 && field(&got[0], "seq") == second.seq,
        "after the read: {}",
        describe(&got)
    );
    Ok(format!(
        "seq {} refused (503), read on the laptop, never notified after {} attempt(s); seq {} notified",
        first.seq,
        svc.attempts() - 1,
        second.seq
    ))
}

/// Levels: a muted conversation is silent, one at `mentions` rings only for a mention or a
/// reply to one's own message, the default rings for every message of others.
pub async fn muted_silent(ctx: &Ctx) -> Observed {
    let svc = service().await?;
    let ana = ctx.user("ana").await?;
    let ben = ctx.user("ben").await?;
    let ben_id = ctx.id("ben");
    let mut convs = Vec::new();
    for name in ["muted", "replies", "mentions", "all"] {
        let conv = ctx.id(name);
        ana.create_conversation(&NewConversation::group([ben_id.clone()]).with_conv_id(&conv))
            .await?;
        convs.push(conv);
    }
    let [muted, replies, mentions, all] = [&convs[0], &convs[1], &convs[2], &convs[3]];
    ben.set_notification_level(muted, "none").await?;
    ben.set_notification_level(replies, "mentions").await?;
    ben.set_notification_level(mentions, "mentions").await?;
    ensure!(
        ben.notification_level(replies).await? == "mentions"
            && ben.notification_level(all).await? == "all",
        "levels not kept"
    );
    let bad = ben.set_notification_level(all, "loud").await;
    ensure!(
        bad.as_ref().err().and_then(|e| e.status()) == Some(400),
        "level loud: {bad:?}"
    );
    // Ben's own message, before he registers: his device is not notified of his own.
    let own = ben.send(replies, "b1", "my question").await?;
    subscribe(&svc, &ben, "ben").await?;
    ana.send(muted, "m1", "muted talk").await?;
    ana.send(replies, "r1", "not for ben").await?;
    ana.send_with(replies, "r2", "the answer", &SendOptions::reply_to(own.seq))
        .await?;
    let mention = SendOptions {
        mentions: Some(vec![ben_id.clone()]),
        ..SendOptions::default()
    };
    ana.send(mentions, "n1", "not for ben either").await?;
    ana.send_with(mentions, "n2", "ben, look", &mention).await?;
    ana.send(all, "a1", "for everyone").await?;
    let _ = svc.wait_for(3, ARRIVAL_WAIT).await;
    tokio::time::sleep(SILENCE_WAIT).await;
    let got = svc.received();
    let mut seen: Vec<(String, String)> = got
        .iter()
        .map(|r| {
            (
                field(r, "conv_id").as_str().unwrap_or("").to_owned(),
                field(r, "kind").as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    seen.sort();
    let mut want = vec![
        (replies.clone(), "reply".to_owned()),
        (mentions.clone(), "mention".to_owned()),
        (all.clone(), "message".to_owned()),
    ];
    want.sort();
    ensure!(seen == want, "notifications {}", describe(&got));
    Ok("muted silent; mentions level rang for the reply and the mention only; all rang".into())
}
