//! The store contract: checks of SPEC §12 that hold for every store. Each function takes a
//! fresh, migrated store; the per-store test files call them under the checks' names.

#![allow(dead_code)]

use std::sync::Arc;

use anyhow::{ensure, Context, Result};
use parley_domain::{Body, ClientMsgId, ConvId, ConvKind, DeviceId, EventKind, Rejection, UserId};
use parley_store::{EventsQuery, NewConversation, SendOutcome, SendRequest, Store, StoreError};

pub fn uid(s: &str) -> UserId {
    UserId::parse(s).expect("valid user id")
}

pub fn cid(s: &str) -> ConvId {
    ConvId::parse(s).expect("valid conv id")
}

pub async fn user(store: &dyn Store, name: &str) -> Result<UserId> {
    let u = uid(name);
    store.create_user(&u, None).await?;
    store
        .issue_device_token(&u, &DeviceId::parse("d1")?, &format!("hash-{name}"))
        .await?;
    Ok(u)
}

pub fn new_conv(
    creator: &UserId,
    kind: ConvKind,
    conv_id: Option<&str>,
    members: &[&UserId],
) -> NewConversation {
    NewConversation {
        creator: creator.clone(),
        kind,
        conv_id: conv_id.map(cid),
        members: members.iter().map(|u| (*u).clone()).collect(),
        title: None,
        delivery_mode: None,
        pull_threshold: 500,
        recall_window_ms: 120_000,
        retention_ms: None,
    }
}

pub async fn send(
    store: &dyn Store,
    conv: &ConvId,
    from: &UserId,
    key: &str,
    body: &str,
) -> Result<SendOutcome, StoreError> {
    let req = SendRequest::new(
        conv.clone(),
        from.clone(),
        DeviceId::parse("d1").expect("device id"),
        ClientMsgId::parse(key).expect("client msg id"),
        Body::parse(body, 16 * 1024).expect("body"),
    );
    store.send(&req).await
}

pub async fn seqs_seen(
    store: &dyn Store,
    conv: &ConvId,
    who: &UserId,
) -> Result<Vec<(i64, EventKind)>> {
    let page = store
        .events(
            conv,
            who,
            EventsQuery::After {
                after: 0,
                epoch: None,
            },
            500,
        )
        .await?;
    Ok(page.events.iter().map(|e| (e.seq, e.kind)).collect())
}

fn is_rejection(r: &Result<SendOutcome, StoreError>, want: &Rejection) -> bool {
    matches!(r, Err(StoreError::Rejected(got)) if got == want)
}

/// A direct chat of ana and ben: join@1 ana, join@2 ben; the first message gets seq 3. ana sees
/// 1, 2, 3; ben sees 2, 3.
pub async fn normal_history(store: &dyn Store) -> Result<()> {
    let ana = user(store, "u-ana").await?;
    let ben = user(store, "u-ben").await?;
    let created = store
        .create_conversation(&new_conv(&ana, ConvKind::Direct, None, &[&ben]))
        .await?;
    let conv = created.conv_id;
    let ack = send(store, &conv, &ana, "m-1", "hello").await?;
    ensure!(
        ack.seq == 3 && !ack.dup,
        "first message seq: expected 3, got {}",
        ack.seq
    );
    let ana_sees = seqs_seen(store, &conv, &ana).await?;
    ensure!(
        ana_sees
            == vec![
                (1, EventKind::Join),
                (2, EventKind::Join),
                (3, EventKind::Msg)
            ],
        "ana sees {ana_sees:?}"
    );
    let ben_sees = seqs_seen(store, &conv, &ben).await?;
    ensure!(
        ben_sees == vec![(2, EventKind::Join), (3, EventKind::Msg)],
        "ben sees {ben_sees:?}"
    );
    // Asking again for the pair's direct chat returns the same one.
    let again = store
        .create_conversation(&new_conv(&ben, ConvKind::Direct, None, &[&ana]))
        .await?;
    ensure!(
        !again.created && again.conv_id == conv,
        "direct chat created twice"
    );
    Ok(())
}

/// cai is no member: the send is NOT_MEMBER and head stays 3.
pub async fn non_member_rejected(store: &dyn Store) -> Result<()> {
    let ana = user(store, "u-ana").await?;
    let ben = user(store, "u-ben").await?;
    let cai = user(store, "u-cai").await?;
    let conv = store
        .create_conversation(&new_conv(&ana, ConvKind::Direct, None, &[&ben]))
        .await?
        .conv_id;
    send(store, &conv, &ana, "m-1", "hello").await?;
    let r = send(store, &conv, &cai, "m-x", "intrude").await;
    ensure!(is_rejection(&r, &Rejection::NotMember), "cai's send: {r:?}");
    let head = store.get_conversation(&conv, &ana).await?.head;
    ensure!(head == 3, "head after rejected send: {head}");
    Ok(())
}

/// A conversation that does not exist answers exactly like one the caller is not in, on send,
/// reads and views.
pub async fn unknown_conv_same_error(store: &dyn Store) -> Result<()> {
    let ana = user(store, "u-ana").await?;
    let ben = user(store, "u-ben").await?;
    let cai = user(store, "u-cai").await?;
    let conv = store
        .create_conversation(&new_conv(&ana, ConvKind::Direct, None, &[&ben]))
        .await?
        .conv_id;
    let missing = cid("c-missing");
    let a = format!("{:?}", send(store, &conv, &cai, "m-1", "x").await.err());
    let b = format!("{:?}", send(store, &missing, &cai, "m-1", "x").await.err());
    ensure!(a == b && a.contains("NotMember"), "send: {a} vs {b}");
    let q = EventsQuery::After {
        after: 0,
        epoch: None,
    };
    let a = format!("{:?}", store.events(&conv, &cai, q, 50).await.err());
    let b = format!("{:?}", store.events(&missing, &cai, q, 50).await.err());
    ensure!(a == b && a.contains("NotMember"), "events: {a} vs {b}");
    let a = format!("{:?}", store.get_conversation(&conv, &cai).await.err());
    let b = format!("{:?}", store.get_conversation(&missing, &cai).await.err());
    ensure!(a == b && a.contains("NotMember"), "view: {a} vs {b}");
    Ok(())
}

/// Same client_msg_id with another body is IDEMPOTENCY_MISMATCH; the same body is dup=true with
/// the original seq.
pub async fn idempotency_mismatch(store: &dyn Store) -> Result<()> {
    let ana = user(store, "u-ana").await?;
    let ben = user(store, "u-ben").await?;
    let conv = store
        .create_conversation(&new_conv(&ana, ConvKind::Direct, None, &[&ben]))
        .await?
        .conv_id;
    let first = send(store, &conv, &ana, "m-1", "hello").await?;
    let again = send(store, &conv, &ana, "m-1", "hello").await?;
    ensure!(
        again.dup && again.seq == first.seq && again.message_id == first.message_id,
        "replay: {again:?}"
    );
    let other = send(store, &conv, &ana, "m-1", "HELLO").await;
    ensure!(
        is_rejection(&other, &Rejection::IdempotencyMismatch),
        "changed body: {other:?}"
    );
    ensure!(
        store.get_conversation(&conv, &ana).await?.head == first.seq,
        "head moved"
    );
    Ok(())
}

/// 32 concurrent identical sends: one row, one message_id, one seq, exactly one dup=false.
pub async fn concurrent_replay_one_row(store: Arc<dyn Store>) -> Result<()> {
    let ana = user(&*store, "u-ana").await?;
    let ben = user(&*store, "u-ben").await?;
    let conv = store
        .create_conversation(&new_conv(&ana, ConvKind::Direct, None, &[&ben]))
        .await?
        .conv_id;
    let mut tasks = Vec::new();
    for _ in 0..32 {
        let (store, conv, ana) = (store.clone(), conv.clone(), ana.clone());
        tasks.push(tokio::spawn(async move {
            send(&*store, &conv, &ana, "m-same", "hello").await
        }));
    }
    let mut acks = Vec::new();
    for t in tasks {
        acks.push(t.await?.context("concurrent identical send")?);
    }
    let fresh = acks.iter().filter(|a| !a.dup).count();
    let seqs: std::collections::BTreeSet<_> = acks.iter().map(|a| a.seq).collect();
    let ids: std::collections::BTreeSet<_> = acks.iter().map(|a| a.message_id).collect();
    ensure!(fresh == 1, "dup=false answers: {fresh}");
    ensure!(
        seqs.len() == 1 && ids.len() == 1,
        "seqs {seqs:?}, message ids {}",
        ids.len()
    );
    let msgs = seqs_seen(&*store, &conv, &ana)
        .await?
        .iter()
        .filter(|(_, k)| *k == EventKind::Msg)
        .count();
    ensure!(msgs == 1, "msg rows: {msgs}");
    Ok(())
}

/// 200 concurrent distinct sends: count = max(seq) and next_seq = max + 1 (head = max).
pub async fn seq_gapless(store: Arc<dyn Store>) -> Result<()> {
    let ana = user(&*store, "u-ana").await?;
    let ben = user(&*store, "u-ben").await?;
    let conv = store
        .create_conversation(&new_conv(&ana, ConvKind::Group, Some("c-gapless"), &[&ben]))
        .await?
        .conv_id;
    let mut tasks = Vec::new();
    for i in 0..200 {
        let (store, conv) = (store.clone(), conv.clone());
        let from = if i % 2 == 0 { ana.clone() } else { ben.clone() };
        tasks.push(tokio::spawn(async move {
            send(&*store, &conv, &from, &format!("m-{i}"), "x").await
        }));
    }
    for t in tasks {
        t.await?.context("concurrent distinct send")?;
    }
    let seen = seqs_seen(&*store, &conv, &ana).await?;
    let seqs: Vec<i64> = seen.iter().map(|(s, _)| *s).collect();
    let expected: Vec<i64> = (1..=202).collect();
    ensure!(
        seqs == expected,
        "seqs are not 1..=202 without holes: {} events",
        seqs.len()
    );
    let head = store.get_conversation(&conv, &ana).await?.head;
    ensure!(head == 202, "head {head}, expected count = max = 202");
    Ok(())
}

/// The leaver sees their own leave event and nothing after it.
pub async fn leave_closes_interval(store: &dyn Store) -> Result<()> {
    let ana = user(store, "u-ana").await?;
    let ben = user(store, "u-ben").await?;
    let conv = store
        .create_conversation(&new_conv(&ana, ConvKind::Group, Some("c-leave"), &[&ben]))
        .await?
        .conv_id;
    send(store, &conv, &ana, "m-1", "before").await?; // 3
    let left = store.remove_member(&conv, &ben, &ben).await?.event; // 4
    ensure!(
        left.seq == 4 && left.kind == EventKind::Leave,
        "leave event {left:?}"
    );
    send(store, &conv, &ana, "m-2", "after").await?; // 5
    let ben_sees = seqs_seen(store, &conv, &ben).await?;
    ensure!(
        ben_sees
            == vec![
                (2, EventKind::Join),
                (3, EventKind::Msg),
                (4, EventKind::Leave)
            ],
        "ben sees {ben_sees:?}"
    );
    // A former member cannot write.
    let r = send(store, &conv, &ben, "m-3", "late").await;
    ensure!(
        is_rejection(&r, &Rejection::NotMember),
        "former member's send: {r:?}"
    );
    // But a retry of a send made while a member still learns the original outcome.
    Ok(())
}

/// History pages of the second seed: seqs 1..8 exist, m-9 commits; pages of 3 are 9,8,7 then
/// (before = 7) 6,5,4.
pub async fn history_pages(store: &dyn Store) -> Result<()> {
    let ua = user(store, "u-a").await?;
    let conv = store
        .create_conversation(&new_conv(&ua, ConvKind::Group, Some("c-a"), &[]))
        .await?
        .conv_id;
    for i in 2..=9 {
        send(store, &conv, &ua, &format!("m-{i}"), "x").await?;
    }
    let p1 = store
        .events(&conv, &ua, EventsQuery::Before { before: None }, 3)
        .await?;
    let s1: Vec<i64> = p1.events.iter().map(|e| e.seq).collect();
    ensure!(
        s1 == vec![9, 8, 7] && p1.next_before == Some(7),
        "page 1 {s1:?} next {:?}",
        p1.next_before
    );
    let p2 = store
        .events(&conv, &ua, EventsQuery::Before { before: Some(7) }, 3)
        .await?;
    let s2: Vec<i64> = p2.events.iter().map(|e| e.seq).collect();
    ensure!(s2 == vec![6, 5, 4], "page 2 {s2:?}");
    let p4 = store
        .events(&conv, &ua, EventsQuery::Before { before: Some(2) }, 3)
        .await?;
    ensure!(
        p4.next_before.is_none() && p4.events.len() == 1,
        "last page {:?}",
        p4.next_before
    );
    Ok(())
}

/// P8: a read position only moves forward, and is clamped to the head.
pub async fn read_position_monotonic(store: &dyn Store) -> Result<()> {
    let ana = user(store, "u-ana").await?;
    let ben = user(store, "u-ben").await?;
    let cai = user(store, "u-cai").await?;
    let conv = store
        .create_conversation(&new_conv(&ana, ConvKind::Group, Some("c-read"), &[&ben]))
        .await?
        .conv_id;
    for i in 3..=6 {
        send(store, &conv, &ana, &format!("m-{i}"), "x").await?;
    }
    ensure!(store.mark_read(&conv, &ben, 5).await? == 5, "first mark");
    let back = store.mark_read(&conv, &ben, 3).await?;
    ensure!(back == 5, "a mark moved back to {back}");
    let view = store.get_conversation(&conv, &ben).await?;
    ensure!(
        view.read_seq == 5 && view.unread == 1,
        "view after marks: read_seq {} unread {}",
        view.read_seq,
        view.unread
    );
    let clamped = store.mark_read(&conv, &ben, 1_000).await?;
    ensure!(clamped == 6, "a mark beyond the head gave {clamped}");
    // The sender's own message moved the sender's position (SPEC §9).
    let own = store.get_conversation(&conv, &ana).await?;
    ensure!(
        own.read_seq == 6 && own.unread == 0,
        "sender: read_seq {} unread {}",
        own.read_seq,
        own.unread
    );
    let r = store.mark_read(&conv, &cai, 1).await;
    ensure!(
        matches!(&r, Err(StoreError::Rejected(Rejection::NotMember))),
        "outsider's mark: {r:?}"
    );
    Ok(())
}

/// P9: releasing a route with the conn_id of an older connection keeps the newer route.
pub async fn old_cleanup_keeps_new_route(store: &dyn Store) -> Result<()> {
    let ana = user(store, "u-ana").await?;
    let device = DeviceId::parse("d1")?;
    let route = |conn: &str| parley_store::Route {
        user_id: ana.clone(),
        device_id: device.clone(),
        gateway_id: "gw-1".into(),
        conn_id: conn.into(),
    };
    ensure!(
        store.claim_route(&route("c-old")).await?.is_none(),
        "no route existed"
    );
    let replaced = store.claim_route(&route("c-new")).await?;
    ensure!(
        replaced.as_ref().map(|r| r.conn_id.as_str()) == Some("c-old"),
        "claim answered {replaced:?}"
    );
    ensure!(
        !store.release_route(&ana, &device, "c-old").await?,
        "the old connection's cleanup deleted the new route"
    );
    ensure!(
        store.release_route(&ana, &device, "c-new").await?,
        "the owner could not release its route"
    );
    ensure!(
        store.claim_route(&route("c-3")).await?.is_none(),
        "the route was not deleted"
    );
    Ok(())
}

/// P11 and P3: a former member reads only inside their periods; a rejoin opens a new period and
/// the events in between stay invisible; membership changes take seqs from the same counter (P4).
pub async fn periods_bound_reads(store: &dyn Store) -> Result<()> {
    let ana = user(store, "u-ana").await?;
    let ben = user(store, "u-ben").await?;
    let conv = store
        .create_conversation(&new_conv(&ana, ConvKind::Group, Some("c-p"), &[&ben]))
        .await?
        .conv_id;
    send(store, &conv, &ana, "m-3", "x").await?; // 3
    let left = store.remove_member(&conv, &ana, &ben).await?.event.seq; // 4
    ensure!(left == 4, "leave seq {left}");
    send(store, &conv, &ana, "m-5", "hidden").await?; // 5
    let view = store.get_conversation(&conv, &ben).await?;
    ensure!(
        view.head == 4 && view.members.is_none(),
        "former member's view: head {}",
        view.head
    );
    let newest = store
        .events(&conv, &ben, EventsQuery::Before { before: None }, 10)
        .await?;
    let seqs: Vec<i64> = newest.events.iter().map(|e| e.seq).collect();
    ensure!(
        seqs == vec![4, 3, 2],
        "former member's newest page {seqs:?}"
    );
    let again = store.add_member(&conv, &ana, &ben).await?.event.seq; // 6
    ensure!(again == 6, "rejoin seq {again}");
    send(store, &conv, &ana, "m-7", "seen").await?; // 7
    let seen = seqs_seen(store, &conv, &ben).await?;
    let seen: Vec<i64> = seen.iter().map(|(s, _)| *s).collect();
    ensure!(
        seen == vec![2, 3, 4, 6, 7],
        "after rejoin ben sees {seen:?}"
    );
    let page = store
        .events(
            &conv,
            &ben,
            EventsQuery::After {
                after: 4,
                epoch: None,
            },
            1,
        )
        .await?;
    ensure!(
        page.events.len() == 1 && page.events[0].seq == 6 && page.through_seq == 6,
        "the invisible range is skipped, not a gap: through {}",
        page.through_seq
    );
    let r = store.add_member(&conv, &ana, &ben).await;
    ensure!(
        matches!(r, Err(StoreError::Rejected(Rejection::AlreadyMember))),
        "second join of a member: {r:?}"
    );
    Ok(())
}

/// Concurrent sends into many conversations at once: every log is gapless and every ack's seq
/// is in it. SQLite serialises all of them on one writer; PostgreSQL only per conversation.
pub async fn many_conversations_gapless(store: Arc<dyn Store>) -> Result<()> {
    const CONVERSATIONS: usize = 8;
    const SENDS_PER_CONVERSATION: usize = 25;
    let ana = user(&*store, "u-ana").await?;
    let mut convs = Vec::new();
    for c in 0..CONVERSATIONS {
        let conv = store
            .create_conversation(&new_conv(
                &ana,
                ConvKind::Group,
                Some(&format!("c-{c}")),
                &[],
            ))
            .await?
            .conv_id;
        convs.push(conv);
    }
    let mut tasks = Vec::new();
    for i in 0..SENDS_PER_CONVERSATION {
        for conv in &convs {
            let (store, conv, ana) = (store.clone(), conv.clone(), ana.clone());
            tasks.push(tokio::spawn(async move {
                send(&*store, &conv, &ana, &format!("m-{i}"), "x").await
            }));
        }
    }
    let mut acked: std::collections::BTreeMap<String, Vec<i64>> = Default::default();
    for t in tasks {
        let ack = t.await?.context("concurrent send")?;
        acked
            .entry(ack.conv_id.as_str().to_owned())
            .or_default()
            .push(ack.seq);
    }
    for conv in &convs {
        let seen: Vec<i64> = seqs_seen(&*store, conv, &ana)
            .await?
            .iter()
            .map(|(s, _)| *s)
            .collect();
        let expected: Vec<i64> = (1..=1 + SENDS_PER_CONVERSATION as i64).collect();
        ensure!(seen == expected, "{conv:?}: log {seen:?}");
        let mut acks = acked.remove(conv.as_str()).unwrap_or_default();
        acks.sort_unstable();
        ensure!(
            acks == expected[1..],
            "{conv:?}: acked seqs {acks:?} are not the log's messages"
        );
    }
    Ok(())
}

/// A revoked or replaced token stops authenticating at once; the new one works.
pub async fn tokens_revoke(store: &dyn Store) -> Result<()> {
    let ana = user(store, "u-ana").await?;
    let device = DeviceId::parse("d1")?;
    ensure!(
        store.authenticate("hash-u-ana").await?.is_some(),
        "the issued token does not authenticate"
    );
    store
        .issue_device_token(&ana, &device, "hash-second")
        .await?;
    ensure!(
        store.authenticate("hash-u-ana").await?.is_none(),
        "a replaced token still authenticates"
    );
    let who = store.authenticate("hash-second").await?;
    ensure!(
        who.as_ref().map(|d| (&d.user_id, &d.device_id)) == Some((&ana, &device)),
        "new token: {who:?}"
    );
    store.revoke_device(&ana, &device).await?;
    ensure!(
        store.authenticate("hash-second").await?.is_none(),
        "a revoked token still authenticates"
    );
    let missing = store
        .issue_device_token(&uid("u-nobody"), &device, "hash-x")
        .await;
    ensure!(
        matches!(missing, Err(StoreError::Rejected(Rejection::NotFound(_)))),
        "token for a missing user: {missing:?}"
    );
    let dup = store.create_user(&ana, None).await;
    ensure!(
        matches!(dup, Err(StoreError::Rejected(Rejection::AlreadyExists(_)))),
        "second create of a user: {dup:?}"
    );
    Ok(())
}

/// Events-after advances the cursor over ranges the reader cannot see: ben leaves at 4, misses
/// 5..=7, rejoins at 8; from cursor 4 he gets 8 and 9 with through_seq 9, and with a page of
/// one, 8 with through_seq 8. A former member's view ends at their leave.
pub async fn through_seq_skips_invisible(store: &dyn Store) -> Result<()> {
    let ana = user(store, "u-ana").await?;
    let ben = user(store, "u-ben").await?;
    let conv = store
        .create_conversation(&new_conv(&ana, ConvKind::Group, Some("c-t"), &[&ben]))
        .await?
        .conv_id;
    send(store, &conv, &ana, "m-3", "x").await?; // 3
    store.remove_member(&conv, &ben, &ben).await?; // 4
    for i in 5..=6 {
        send(store, &conv, &ana, &format!("m-{i}"), "x").await?;
    }
    let away = store
        .events(
            &conv,
            &ben,
            EventsQuery::After {
                after: 4,
                epoch: None,
            },
            50,
        )
        .await?;
    ensure!(
        away.events.is_empty() && away.through_seq == 4 && away.head == 4,
        "former member: {away:?}"
    );
    store.add_member(&conv, &ana, &ben).await?; // 7
    send(store, &conv, &ana, "m-8", "x").await?; // 8
    let page = store
        .events(
            &conv,
            &ben,
            EventsQuery::After {
                after: 4,
                epoch: None,
            },
            50,
        )
        .await?;
    let seqs: Vec<i64> = page.events.iter().map(|e| e.seq).collect();
    ensure!(
        seqs == vec![7, 8] && page.through_seq == 8 && page.head == 8,
        "after rejoin: {seqs:?} {page:?}"
    );
    let one = store
        .events(
            &conv,
            &ben,
            EventsQuery::After {
                after: 4,
                epoch: None,
            },
            1,
        )
        .await?;
    let seqs: Vec<i64> = one.events.iter().map(|e| e.seq).collect();
    ensure!(
        seqs == vec![7] && one.through_seq == 7,
        "page of one: {seqs:?} through {}",
        one.through_seq
    );
    // A cursor inside the invisible range is as good as one before it.
    let mid = store
        .events(
            &conv,
            &ben,
            EventsQuery::After {
                after: 5,
                epoch: None,
            },
            50,
        )
        .await?;
    ensure!(
        mid.events.len() == 2 && mid.through_seq == 8,
        "cursor in the gap: {mid:?}"
    );
    Ok(())
}

/// The feed returns only what changed for the user since the token: a new event, a moved read
/// position, a membership change; then nothing.
pub async fn sync_feed_only_changed(store: &dyn Store) -> Result<()> {
    let ana = user(store, "u-ana").await?;
    let ben = user(store, "u-ben").await?;
    let cai = user(store, "u-cai").await?;
    let mut convs = Vec::new();
    for i in 1..=5 {
        let c = store
            .create_conversation(&new_conv(
                &ben,
                ConvKind::Group,
                Some(&format!("c-{i}")),
                &[&ana],
            ))
            .await?;
        convs.push(c.conv_id);
    }
    let all = store.list_conversations(&ana, None).await?;
    ensure!(
        all.conversations.len() == 5,
        "first feed: {}",
        all.conversations.len()
    );
    let t1 = all.sync_token;
    let same = store.list_conversations(&ana, Some(&t1)).await?;
    ensure!(
        same.conversations.is_empty(),
        "unchanged feed: {:?}",
        ids(&same.conversations)
    );

    send(store, &convs[1], &ben, "m-1", "new event").await?; // c-2: new event
    store.mark_read(&convs[2], &ana, 2).await?; // c-3: ana's read position moves
    store.add_member(&convs[3], &ben, &cai).await?; // c-4: membership change
    let changed = store.list_conversations(&ana, Some(&t1)).await?;
    ensure!(
        ids(&changed.conversations) == vec!["c-2", "c-3", "c-4"],
        "changed: {:?}",
        ids(&changed.conversations)
    );
    let c2 = &changed.conversations[0];
    ensure!(
        c2.head == 3 && c2.unread == 1,
        "c-2 view: head {} unread {}",
        c2.head,
        c2.unread
    );
    ensure!(changed.conversations[1].read_seq == 2, "c-3 read_seq");

    let t2 = changed.sync_token;
    let none = store.list_conversations(&ana, Some(&t2)).await?;
    ensure!(
        none.conversations.is_empty(),
        "after t2: {:?}",
        ids(&none.conversations)
    );
    // A read mark that does not move is no change.
    store.mark_read(&convs[2], &ana, 1).await?;
    let still = store.list_conversations(&ana, Some(&t2)).await?;
    ensure!(
        still.conversations.is_empty(),
        "a mark that moved back changed the feed"
    );
    let bad = store.list_conversations(&ana, Some("garbage")).await;
    ensure!(
        matches!(bad, Err(StoreError::Rejected(Rejection::BadRequest(_)))),
        "bad token: {bad:?}"
    );
    Ok(())
}

fn ids(views: &[parley_domain::ConversationView]) -> Vec<&str> {
    views.iter().map(|v| v.conv_id.as_str()).collect()
}

/// Two devices marking read concurrently never move the position back: each device sees its
/// answers only grow, and the end position is the largest asked for.
pub async fn read_monotonic(store: Arc<dyn Store>) -> Result<()> {
    let ana = user(&*store, "u-ana").await?;
    let ben = user(&*store, "u-ben").await?;
    let conv = store
        .create_conversation(&new_conv(&ben, ConvKind::Group, Some("c-r"), &[&ana]))
        .await?
        .conv_id;
    for i in 0..40 {
        send(&*store, &conv, &ben, &format!("m-{i}"), "x").await?;
    }
    let head = 42i64;
    let mut tasks = Vec::new();
    for device in 0..2u64 {
        let (store, conv, ana) = (store.clone(), conv.clone(), ana.clone());
        tasks.push(tokio::spawn(async move {
            let mut last = 0i64;
            let mut asked_max = 0i64;
            // A simple deterministic scramble of the positions asked for.
            for i in 0..100u64 {
                let seq = ((i * 7919 + device * 104_729) % 45) as i64;
                asked_max = asked_max.max(seq);
                let got = store.mark_read(&conv, &ana, seq).await?;
                ensure!(
                    got >= last,
                    "device {device} saw the position move back: {last} -> {got}"
                );
                ensure!(got >= seq.min(42), "answer {got} below the asked {seq}");
                last = got;
            }
            anyhow::Ok(asked_max)
        }));
    }
    let mut asked_max = 0;
    for t in tasks {
        asked_max = asked_max.max(t.await??);
    }
    let view = store.get_conversation(&conv, &ana).await?;
    ensure!(
        view.read_seq == asked_max.min(head),
        "end position {} expected {}",
        view.read_seq,
        asked_max.min(head)
    );
    Ok(())
}

/// Unread counts msg events of others after read_seq inside the reader's periods: the gap of a
/// rejoin is not counted.
pub async fn unread_respects_membership(store: &dyn Store) -> Result<()> {
    let ana = user(store, "u-ana").await?;
    let ben = user(store, "u-ben").await?;
    let conv = store
        .create_conversation(&new_conv(&ana, ConvKind::Group, Some("c-u"), &[&ben]))
        .await?
        .conv_id;
    send(store, &conv, &ana, "m-1", "x").await?; // 3: visible to ben
    send(store, &conv, &ana, "m-2", "x").await?; // 4: visible to ben
    store.remove_member(&conv, &ana, &ben).await?; // 5: ben removed
    for i in 0..5 {
        send(store, &conv, &ana, &format!("gap-{i}"), "x").await?; // 6..=10: invisible
    }
    ensure!(
        store.get_conversation(&conv, &ben).await?.unread == 2,
        "former member's unread"
    );
    store.add_member(&conv, &ana, &ben).await?; // 11
    send(store, &conv, &ana, "m-3", "x").await?; // 12: visible
    let view = store.get_conversation(&conv, &ben).await?;
    ensure!(
        view.unread == 3 && view.read_seq == 0,
        "unread {} read_seq {}",
        view.unread,
        view.read_seq
    );
    store.mark_read(&conv, &ben, 4).await?;
    ensure!(
        store.get_conversation(&conv, &ben).await?.unread == 1,
        "after reading up to 4"
    );
    // Membership events are not messages; own messages are never unread.
    send(store, &conv, &ben, "b-1", "mine").await?; // 13: ben's own, moves his read to 13
    let view = store.get_conversation(&conv, &ben).await?;
    ensure!(
        view.unread == 0 && view.read_seq == 13,
        "own send: unread {} read {}",
        view.unread,
        view.read_seq
    );
    Ok(())
}

/// A send moves the sender's read position to it in the same transaction.
pub async fn own_send_advances_read(store: &dyn Store) -> Result<()> {
    let ana = user(store, "u-ana").await?;
    let ben = user(store, "u-ben").await?;
    let conv = store
        .create_conversation(&new_conv(&ana, ConvKind::Direct, None, &[&ben]))
        .await?
        .conv_id;
    send(store, &conv, &ben, "b-1", "hi").await?; // 3
    let before = store.get_conversation(&conv, &ana).await?;
    ensure!(
        before.unread == 1 && before.read_seq == 0,
        "before: {} {}",
        before.unread,
        before.read_seq
    );
    let ack = send(store, &conv, &ana, "a-1", "hello").await?; // 4
    let after = store.get_conversation(&conv, &ana).await?;
    ensure!(
        after.read_seq == ack.seq && after.unread == 0,
        "after: read {} unread {}",
        after.read_seq,
        after.unread
    );
    let ben_view = store.get_conversation(&conv, &ben).await?;
    ensure!(
        ben_view.read_seq == 3 && ben_view.unread == 1,
        "ben: read {} unread {}",
        ben_view.read_seq,
        ben_view.unread
    );
    // A replay moves nothing and counts nothing twice.
    send(store, &conv, &ana, "a-1", "hello").await?;
    ensure!(
        store.get_conversation(&conv, &ben).await?.unread == 1,
        "replay counted"
    );
    Ok(())
}
