//! Who the client is (`GET /v1/me`, `Client::whoami`), which deliveries are its own, skipping
//! them, and the typed view of the events a real server sends.

use anyhow::{bail, ensure, Result};
use parley_client::{
    code, Delivery, Identity, Incoming, Method, NewConversation, Realtime, RealtimeOptions,
    TypedEvent,
};
use parley_testkit::{test_on_both_stores, ServerConfig, StoreKind, TestServer};

use crate::deliveries::wait_for;

async fn next_event(rt: &mut Realtime) -> Result<Incoming> {
    match wait_for(rt, |d| matches!(d, Delivery::Event(_))).await? {
        Delivery::Event(e) => Ok(e),
        other => bail!("not an event: {other:?}"),
    }
}

test_on_both_stores!(
    #[tokio::test]
    whoami_names_the_token_s_user_and_device
);
async fn whoami_names_the_token_s_user_and_device(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    server.user_with_device("ana").await;
    let tablet = server.device("ana", "tablet").await;
    let me = tablet.whoami().await?;
    ensure!(
        me == Identity {
            user_id: "ana".into(),
            device_id: "tablet".into()
        },
        "{me:?}"
    );
    let (status, body) = tablet.raw(Method::GET, "/v1/me").send().await?;
    ensure!(status == 200, "{status} {body}");
    ensure!(
        body == serde_json::json!({"user_id": "ana", "device_id": "tablet"}),
        "{body}"
    );
    for request in [
        tablet.raw(Method::GET, "/v1/me").without_auth(),
        tablet.raw(Method::GET, "/v1/me").bearer("pd_unknown"),
        tablet
            .raw(Method::GET, "/v1/me")
            .bearer(server.admin_token()),
    ] {
        let (status, body) = request.send().await?;
        ensure!(
            status == 401 && body["error"]["code"] == code::UNAUTHENTICATED,
            "{status} {body}"
        );
    }
    server.admin().revoke_device("ana", "tablet").await?;
    let e = server
        .client(tablet.token())
        .whoami()
        .await
        .expect_err("a revoked token");
    ensure!(e.status() == Some(401), "{e}");
    Ok(())
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    deliveries_say_whose_they_are_and_own_messages_can_be_skipped
);
/// Ana on two devices and ben: each delivery says whether ana's user sent it and whether this
/// very device did; a session that skips own messages sees only ben's, and its cursor still
/// moves past ana's.
async fn deliveries_say_whose_they_are_and_own_messages_can_be_skipped(
    store: StoreKind,
) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let phone = server.user_with_device("ana").await;
    let laptop = server.device("ana", "laptop").await;
    let ben = server.user_with_device("ben").await;
    let chat = phone
        .create_conversation(&NewConversation::direct("ben"))
        .await?;
    let conv = chat.conv_id.as_str();
    let mut on_phone = Realtime::connect(&phone, RealtimeOptions::default()).await?;
    let skipping = RealtimeOptions {
        skip_own_messages: true,
        ..RealtimeOptions::default()
    };
    let mut on_laptop = Realtime::connect(&laptop, skipping).await?;
    ensure!(on_laptop.identity().device_id == "laptop");
    for rt in [&on_phone, &on_laptop] {
        rt.track(conv, chat.epoch, chat.head);
    }

    on_phone.send(conv, "p-1", "from the phone").await?;
    laptop
        .send_with_retry(conv, "l-1", "from the laptop")
        .await?;
    ben.send_with_retry(conv, "b-1", "from ben").await?;

    let mut seen = Vec::new();
    for _ in 0..3 {
        let e = next_event(&mut on_phone).await?;
        seen.push((e.text().map(str::to_owned), e.own, e.own_device));
    }
    let text = |t: &str| Some(t.to_owned());
    ensure!(
        seen == [
            (text("from the phone"), true, true),
            (text("from the laptop"), true, false),
            (text("from ben"), false, false),
        ],
        "{seen:?}"
    );

    let e = next_event(&mut on_laptop).await?;
    ensure!(
        e.text() == Some("from ben") && !e.own && e.seq == 5,
        "the laptop skips ana's messages: {e:?}"
    );
    ensure!(on_laptop.cursor(conv) == Some((chat.epoch, 5)));
    let TypedEvent::Message(message) = e.into_event().into_typed() else {
        bail!("a message");
    };
    ensure!(
        message.sender_user == "ben" && message.client_msg_id == "b-1",
        "{message:?}"
    );
    Ok(())
}

test_on_both_stores!(
    #[tokio::test]
    a_whole_conversation_reads_page_by_page
);
/// More events than one page holds: `all_events` and the page stream read every one, once, in
/// order, pages ending at the head; the typed view covers joins and recalls.
async fn a_whole_conversation_reads_page_by_page(store: StoreKind) -> Result<()> {
    use futures::TryStreamExt;

    const MESSAGES: usize = 620;
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ana = server.user_with_device("ana").await;
    server.user_with_device("ben").await;
    let conv = ana
        .create_conversation(&NewConversation::direct("ben"))
        .await?
        .conv_id;
    for i in 0..MESSAGES {
        ana.send(&conv, &format!("m-{i}"), &format!("message {i}"))
            .await?;
    }
    let recall = ana.recall(&conv, 3).await?;

    let events = ana.all_events(&conv).await?;
    let seqs: Vec<i64> = events.iter().map(|e| e.seq).collect();
    let expected: Vec<i64> = (1..=recall.seq).collect();
    ensure!(seqs == expected, "{} events", seqs.len());
    ensure!(events[2].text().is_none(), "recalled: {:?}", events[2]);
    ensure!(events[3].text() == Some("message 1"));
    match events[0].typed() {
        TypedEvent::Join(join) => ensure!(join.user == "ana", "{join:?}"),
        other => bail!("the first event is ana's join: {other:?}"),
    }
    match events.last().map(|e| e.typed()) {
        Some(TypedEvent::Recall(r)) => ensure!(r.target_seq == 3 && r.sender_user == "ana"),
        other => bail!("the last event is the recall: {other:?}"),
    }

    let pages: Vec<_> = ana.event_pages(&conv, 100).try_collect().await?;
    let sizes: Vec<usize> = pages.iter().map(|p| p.events.len()).collect();
    ensure!(sizes == [500, recall.seq as usize - 600], "{sizes:?}");
    ensure!(pages.last().map(|p| p.through_seq) == Some(recall.seq));
    let rest: Vec<i64> = ana
        .events_from(&conv, 600)
        .map_ok(|e| e.seq)
        .try_collect()
        .await?;
    ensure!(rest == (601..=recall.seq).collect::<Vec<_>>(), "{rest:?}");
    Ok(())
}
