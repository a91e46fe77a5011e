//! Replies, edits, reactions, threads and mentions (docs/RELATIONS.md) through the SDK against
//! a real server on both stores: the HTTP calls and the realtime session's frames, their
//! errors, reads folded by the server, and live events folded by the SDK into the state a
//! fresh read gives.

use anyhow::{ensure, Context, Result};
use parley_client::relations::Messages;
use parley_client::{
    code, Client, ClientError, Delivery, Event, EventKind, NewConversation, Realtime,
    RealtimeOptions, SendOptions, ThreadCursor,
};
use parley_testkit::{test_on_both_stores, ServerConfig, StoreKind, TestServer};

use crate::deliveries::next_delivery;

fn has_code(e: &ClientError, wanted: &str, status: u16) -> bool {
    e.code() == Some(wanted) && e.status() == Some(status)
}

/// The group `g` of ana, ben and cai; answers their clients.
async fn group(server: &TestServer) -> Result<(Client, Client, Client)> {
    let ana = server.user_with_device("ana").await;
    let ben = server.user_with_device("ben").await;
    let cai = server.user_with_device("cai").await;
    ana.create_conversation(&NewConversation::group(["ben", "cai"]).with_conv_id("g"))
        .await?;
    Ok((ana, ben, cai))
}

/// The message at `seq` as `client` reads it now.
async fn read_message(client: &Client, seq: i64) -> Result<Event> {
    let page = client.events_after("g", seq - 1, Some(1), None).await?;
    page.events
        .into_iter()
        .find(|e| e.seq == seq)
        .with_context(|| format!("no message at {seq}"))
}

test_on_both_stores!(
    #[tokio::test]
    replies_and_edits_with_their_refusals
);
async fn replies_and_edits_with_their_refusals(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let (ana, ben, _cai) = group(&server).await?;
    let first = ana.send("g", "a-1", "helo").await?;

    // A reply, retried with the same key and options, then with other options.
    let reply = SendOptions::reply_to(first.seq);
    let r = ben.send_with("g", "b-1", "hi", &reply).await?;
    let again = ben
        .send_with_options_retry("g", "b-1", "hi", &reply)
        .await?;
    ensure!(again.dup && again.seq == r.seq, "{again:?}");
    let e = ben.send("g", "b-1", "hi").await.unwrap_err();
    ensure!(has_code(&e, code::IDEMPOTENCY_MISMATCH, 409), "{e}");
    let read = read_message(&ana, r.seq).await?;
    ensure!(read.reply_to == Some(first.seq), "{read:?}");
    // Targets the sender cannot see are absent alike: no such seq, not a message.
    for hidden in [999, 1] {
        let e = ben
            .send_with(
                "g",
                &format!("b-h{hidden}"),
                "?",
                &SendOptions::reply_to(hidden),
            )
            .await
            .unwrap_err();
        ensure!(has_code(&e, code::NOT_FOUND, 404), "reply to {hidden}: {e}");
    }

    // An edit, its retry, and the same key with another body or a key a message used.
    let edit = ana.edit("g", first.seq, "a-e1", "hello").await?;
    ensure!(
        edit.target_seq == first.seq && edit.seq > r.seq && !edit.dup,
        "{edit:?}"
    );
    let again = ana.edit_with_retry("g", first.seq, "a-e1", "hello").await?;
    ensure!(
        again.dup && again.seq == edit.seq && again.message_id == edit.message_id,
        "{again:?}"
    );
    let e = ana.edit("g", first.seq, "a-e1", "hullo").await.unwrap_err();
    ensure!(has_code(&e, code::IDEMPOTENCY_MISMATCH, 409), "{e}");
    let e = ana.edit("g", first.seq, "a-1", "hello").await.unwrap_err();
    ensure!(has_code(&e, code::IDEMPOTENCY_MISMATCH, 409), "{e}");
    let e = ben.edit("g", first.seq, "b-e1", "mine").await.unwrap_err();
    ensure!(has_code(&e, code::NOT_SENDER, 403), "{e}");
    let e = ana.edit("g", 999, "a-e2", "x").await.unwrap_err();
    ensure!(has_code(&e, code::NOT_FOUND, 404), "{e}");
    let e = ana.edit("g", 1, "a-e3", "x").await.unwrap_err();
    ensure!(
        has_code(&e, code::NOT_FOUND, 404),
        "a join is no message: {e}"
    );

    let read = read_message(&ben, first.seq).await?;
    ensure!(
        read.body.as_deref() == Some("hello") && read.text() == Some("hello"),
        "{read:?}"
    );
    let page = ben.events_after("g", edit.seq - 1, Some(1), None).await?;
    let edit_event = &page.events[0];
    ensure!(edit_event.kind == EventKind::Edit, "{edit_event:?}");
    ensure!(
        read.edited_at.as_deref() == Some(edit_event.created_at.as_str()),
        "edited_at is the edit's time: {read:?} {edit_event:?}"
    );

    // A recalled message can be neither edited, replied to, threaded nor reacted to.
    let gone = ana.send("g", "a-2", "oops").await?;
    ana.recall("g", gone.seq).await?;
    let e = ana.edit("g", gone.seq, "a-e4", "x").await.unwrap_err();
    ensure!(has_code(&e, code::RECALLED, 409), "{e}");
    let e = ben
        .send_with("g", "b-2", "?", &SendOptions::reply_to(gone.seq))
        .await
        .unwrap_err();
    ensure!(has_code(&e, code::RECALLED, 409), "{e}");
    let e = ben
        .send_with("g", "b-3", "?", &SendOptions::in_thread(gone.seq))
        .await
        .unwrap_err();
    ensure!(has_code(&e, code::RECALLED, 409), "{e}");
    let e = ben.react("g", gone.seq, "👍").await.unwrap_err();
    ensure!(has_code(&e, code::RECALLED, 409), "{e}");
    // A retry of the reply that committed before the recall still answers its ack.
    let again = ben.send_with("g", "b-1", "hi", &reply).await?;
    ensure!(again.dup && again.seq == r.seq, "{again:?}");
    Ok(())
}

test_on_both_stores!(
    #[tokio::test]
    reactions_are_idempotent_and_read_per_user
);
async fn reactions_are_idempotent_and_read_per_user(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let (ana, ben, cai) = group(&server).await?;
    let m = ana.send("g", "a-1", "vote").await?;

    let first = ben.react("g", m.seq, "👍").await?;
    ensure!(
        first.changed && first.key == "👍" && first.target_seq == m.seq && first.seq.is_some(),
        "{first:?}"
    );
    let again = ben.react("g", m.seq, "👍").await?;
    ensure!(
        !again.changed && again.seq == first.seq,
        "an unchanged PUT names the existing reaction: {again:?}"
    );
    ana.react("g", m.seq, "👍").await?;
    // A key with characters that must be percent-encoded in the path.
    let odd = "a?b#c%";
    let put = cai.react("g", m.seq, odd).await?;
    ensure!(put.changed && put.key == odd, "{put:?}");

    let counts = |e: &Event| -> Vec<(String, i64, bool)> {
        e.reactions
            .iter()
            .map(|r| (r.key.clone(), r.count, r.me))
            .collect()
    };
    let as_ana = read_message(&ana, m.seq).await?;
    let as_cai = read_message(&cai, m.seq).await?;
    ensure!(
        counts(&as_ana) == [("👍".into(), 2, true), (odd.into(), 1, false)],
        "{as_ana:?}"
    );
    ensure!(
        counts(&as_cai) == [("👍".into(), 2, false), (odd.into(), 1, true)],
        "{as_cai:?}"
    );

    let off = ben.unreact("g", m.seq, "👍").await?;
    ensure!(off.changed && off.seq > put.seq, "{off:?}");
    let off_again = ben.unreact("g", m.seq, "👍").await?;
    ensure!(
        !off_again.changed && off_again.seq.is_none(),
        "{off_again:?}"
    );
    let never = cai.unreact("g", m.seq, "👍").await?;
    ensure!(!never.changed, "{never:?}");
    let as_ben = read_message(&ben, m.seq).await?;
    ensure!(
        counts(&as_ben) == [("👍".into(), 1, false), (odd.into(), 1, false)],
        "{as_ben:?}"
    );
    cai.unreact("g", m.seq, odd).await?;
    let as_cai = read_message(&cai, m.seq).await?;
    ensure!(counts(&as_cai) == [("👍".into(), 1, false)], "{as_cai:?}");

    // Keys the contract refuses.
    for bad in ["a b", "a/b", &"x".repeat(33)] {
        let e = ben.react("g", m.seq, bad).await.unwrap_err();
        ensure!(
            e.status() == Some(400) || e.status() == Some(404),
            "{bad:?}: {e}"
        );
    }
    let e = ben.react("g", 999, "👍").await.unwrap_err();
    ensure!(has_code(&e, code::NOT_FOUND, 404), "{e}");
    Ok(())
}

test_on_both_stores!(
    #[tokio::test]
    thread_pages_hold_the_root_and_its_replies
);
async fn thread_pages_hold_the_root_and_its_replies(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let (ana, ben, cai) = group(&server).await?;
    let root = ana.send("g", "a-1", "topic").await?;
    let in_thread = SendOptions::in_thread(root.seq);
    let r1 = ben.send_with("g", "b-1", "one", &in_thread).await?;
    ana.send("g", "a-2", "beside the thread").await?;
    let r2 = cai.send_with("g", "c-1", "two", &in_thread).await?;
    let r3 = ana.send_with("g", "a-3", "three", &in_thread).await?;

    let page = ben
        .thread("g", root.seq, ThreadCursor::After(0), None)
        .await?;
    let seqs: Vec<i64> = page.events.iter().map(|e| e.seq).collect();
    ensure!(seqs == [root.seq, r1.seq, r2.seq, r3.seq], "{seqs:?}");
    let summary = page.events[0].thread.context("the root has a summary")?;
    ensure!(
        summary.reply_count == 3 && summary.latest_seq == r3.seq,
        "{summary:?}"
    );
    ensure!(page.events[1..]
        .iter()
        .all(|e| e.thread_root == Some(root.seq)));

    let newest = ben
        .thread("g", root.seq, ThreadCursor::Before(None), Some(2))
        .await?;
    let seqs: Vec<i64> = newest.events.iter().map(|e| e.seq).collect();
    ensure!(seqs == [r3.seq, r2.seq], "{newest:?}");
    let older = ben
        .thread(
            "g",
            root.seq,
            ThreadCursor::Before(newest.next_before),
            Some(2),
        )
        .await?;
    let seqs: Vec<i64> = older.events.iter().map(|e| e.seq).collect();
    ensure!(seqs == [r1.seq, root.seq], "{older:?}");

    // A recalled reply leaves the count; the summary's latest seq stays.
    ben.recall("g", r1.seq).await?;
    let root_read = read_message(&cai, root.seq).await?;
    let summary = root_read.thread.context("two replies remain")?;
    ensure!(
        summary.reply_count == 2 && summary.latest_seq == r3.seq,
        "{summary:?}"
    );

    // Threads are one level deep, and a root must be visible.
    let e = ben
        .send_with("g", "b-2", "deeper", &SendOptions::in_thread(r2.seq))
        .await
        .unwrap_err();
    ensure!(has_code(&e, code::BAD_REQUEST, 400), "{e}");
    let e = ben
        .thread("g", r2.seq, ThreadCursor::After(0), None)
        .await
        .unwrap_err();
    ensure!(has_code(&e, code::NOT_FOUND, 404), "{e}");
    let e = ben
        .thread("g", 999, ThreadCursor::After(0), None)
        .await
        .unwrap_err();
    ensure!(has_code(&e, code::NOT_FOUND, 404), "{e}");
    Ok(())
}

test_on_both_stores!(
    #[tokio::test]
    mentions_are_counted_in_the_conversation_list
);
async fn mentions_are_counted_in_the_conversation_list(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let (ana, ben, cai) = group(&server).await?;
    let by_word = ana
        .send("g", "a-1", "hi @ben, mail cai@example.com")
        .await?;
    let listed = ana
        .send_with(
            "g",
            "a-2",
            "see this",
            &SendOptions::default().with_mentions(["cai"]),
        )
        .await?;
    ana.send("g", "a-3", "nobody here, @dan.").await?;
    let e = ana
        .send_with(
            "g",
            "a-2",
            "see this",
            &SendOptions::default().with_mentions(["ben"]),
        )
        .await
        .unwrap_err();
    ensure!(has_code(&e, code::IDEMPOTENCY_MISMATCH, 409), "{e}");

    let mentions = |client: &Client| {
        let client = client.clone();
        async move {
            let list = client.list_conversations(None).await?;
            let g = list
                .conversations
                .into_iter()
                .find(|c| c.conv_id == "g")
                .context("g listed")?;
            anyhow::Ok((g.mentions, g.unread))
        }
    };
    ensure!(mentions(&ben).await? == (1, 3), "ben");
    ensure!(mentions(&cai).await? == (1, 3), "cai");
    ensure!(mentions(&ana).await?.0 == 0, "the sender is never counted");
    let read = read_message(&ben, by_word.seq).await?;
    ensure!(read.mentions == ["ben"], "{read:?}");
    let read = read_message(&ben, listed.seq).await?;
    ensure!(read.mentions == ["cai"], "{read:?}");

    ben.mark_read("g", by_word.seq).await?;
    ensure!(mentions(&ben).await? == (0, 2), "read past the mention");
    ana.recall("g", listed.seq).await?;
    ensure!(mentions(&cai).await?.0 == 0, "a recall takes its mentions");
    let one = ben.get_conversation("g").await?;
    ensure!(one.mentions == 0, "{one:?}");
    Ok(())
}

/// Reads `want` events of `g` from the session, in the order delivered.
async fn events_of_g(rt: &mut Realtime, want: usize) -> Result<Vec<Event>> {
    let mut events = Vec::new();
    while events.len() < want {
        if let Delivery::Event(e) = next_delivery(rt)
            .await
            .with_context(|| format!("waiting for event {} of {want}", events.len() + 1))?
        {
            if e.conv_id == "g" {
                events.push(e.into_event());
            }
        }
    }
    Ok(events)
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    a_session_folds_live_relations_into_what_a_read_gives
);
async fn a_session_folds_live_relations_into_what_a_read_gives(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let (ana, ben, cai) = group(&server).await?;
    let start = ben.get_conversation("g").await?;
    let mut rt_ben = Realtime::connect(&ben, RealtimeOptions::default()).await?;
    rt_ben.track("g", start.epoch, start.head);
    let rt_ana = Realtime::connect(&ana, RealtimeOptions::default()).await?;
    let rt_cai = Realtime::connect(&cai, RealtimeOptions::default()).await?;

    // Every write over the WebSocket: sends with relations, edits, reactions.
    let root = rt_ana.send("g", "a-1", "plan v1").await?;
    let other = rt_cai.send("g", "c-1", "lunch?").await?;
    let ack = rt_ben.react("g", root.seq, "👍").await?;
    ensure!(ack.changed, "{ack:?}");
    let reply = rt_cai
        .send_with(
            "g",
            "c-2",
            "agreed @ben",
            &SendOptions::in_thread(root.seq).with_mentions(["ana"]),
        )
        .await?;
    let edit = rt_ana.edit("g", root.seq, "a-e1", "plan v2").await?;
    let again = rt_ana.edit("g", root.seq, "a-e1", "plan v2").await?;
    ensure!(again.dup && again.seq == edit.seq, "{again:?}");
    rt_cai.react("g", root.seq, "🎉").await?;
    rt_ana.react("g", other.seq, "🍜").await?;
    rt_ben.react("g", other.seq, "🍜").await?;
    let e = rt_ben
        .edit("g", root.seq, "b-e1", "mine")
        .await
        .unwrap_err();
    ensure!(has_code(&e, code::NOT_SENDER, 403), "{e}");
    let off = rt_cai.unreact("g", root.seq, "🎉").await?;
    ensure!(off.changed, "{off:?}");
    let answer = rt_ben
        .send_with("g", "b-1", "yes", &SendOptions::reply_to(other.seq))
        .await?;
    rt_ana.edit("g", other.seq, "a-e2", "x").await.unwrap_err();
    let late = rt_cai
        .send_with("g", "c-3", "me too", &SendOptions::in_thread(root.seq))
        .await?;
    cai.recall("g", late.seq).await?;
    let head = ben.get_conversation("g").await?.head;

    // Ben's session delivers each event once, in seq order, and folds into his messages.
    let want = (head - start.head) as usize;
    let events = events_of_g(&mut rt_ben, want).await?;
    let seqs: Vec<i64> = events.iter().map(|e| e.seq).collect();
    let expected: Vec<i64> = (start.head + 1..=head).collect();
    ensure!(seqs == expected, "{seqs:?}");
    let kinds: Vec<EventKind> = events.iter().map(|e| e.kind).collect();
    use EventKind::{Edit, Msg, React, Unreact};
    let expected_kinds = [
        Msg, Msg, React, Msg, Edit, React, React, React, Unreact, Msg, Msg,
    ];
    ensure!(kinds[..expected_kinds.len()] == expected_kinds, "{kinds:?}");
    ensure!(events[3].seq == reply.seq && events[9].seq == answer.seq);

    let mut live = Messages::new();
    for e in &events {
        live.fold(e, "ben");
        // Folding an event twice changes nothing (a catch-up overlapping pushes).
        let before = live.clone();
        live.fold(e, "ben");
        ensure!(live == before, "seq {} folded twice", e.seq);
    }

    let page = ben.events_after("g", start.head, None, None).await?;
    let mut read = Messages::new();
    read.insert_page(&page);
    let live_msgs: Vec<&Event> = live.iter().collect();
    let read_msgs: Vec<&Event> = read.iter().collect();
    ensure!(
        live_msgs == read_msgs,
        "folded live:\n{live_msgs:#?}\nread:\n{read_msgs:#?}"
    );
    let root_now = read.get(root.seq).context("root")?;
    ensure!(root_now.body.as_deref() == Some("plan v2") && root_now.edited_at.is_some());
    ensure!(
        root_now.thread.map(|t| (t.reply_count, t.latest_seq)) == Some((1, late.seq)),
        "{root_now:?}"
    );
    let reactions: Vec<_> = read
        .get(other.seq)
        .context("other")?
        .reactions
        .iter()
        .map(|r| (r.key.as_str(), r.count, r.me))
        .collect();
    ensure!(reactions == [("🍜", 2, true)], "{reactions:?}");
    Ok(())
}
