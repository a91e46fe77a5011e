//! The store contract: checks of SPEC §12 that hold for every store. Each function takes a
//! fresh, migrated store; the per-store test files call them under the checks' names.

#![allow(dead_code)]

pub mod gateway_leases;
pub mod media;
pub mod mls;
pub mod presence;
pub mod push;
pub mod relations;
pub mod search;

use std::sync::Arc;

use anyhow::{ensure, Context, Result};
use chrono::{DateTime, Duration, Utc};
use parley_domain::{
    Body, ClientMsgId, ConvId, ConvKind, DeliveryMode, DeviceId, Event, EventKind, Rejection, Role,
    UserId,
};
use parley_store::{
    EventsQuery, MemberSnapshot, NewConversation, PurgeReport, RecallOutcome, SendOutcome,
    SendRequest, Store, StoreError,
};

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

fn is_rejection<T>(r: &Result<T, StoreError>, want: &Rejection) -> bool {
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
/// The password hash column: empty for a user created without one, set at creation or later,
/// replaced by a later set, never for a missing user, and the same for an unknown user as for a
/// user without a password (the login answers both alike).
pub async fn password_hashes(store: &dyn Store) -> Result<()> {
    let plain = uid("u-plain");
    store.create_user(&plain, None).await?;
    ensure!(
        store.password_hash(&plain).await?.is_none(),
        "a user created without a password has a hash"
    );
    ensure!(
        store.password_hash(&uid("u-nobody")).await?.is_none(),
        "an unknown user has a hash"
    );
    let ana = uid("u-ana");
    let created = store
        .create_user_with_password(&ana, Some("Ana"), "$argon2id$first")
        .await?;
    ensure!(
        created.display_name.as_deref() == Some("Ana"),
        "{created:?}"
    );
    ensure!(
        store.password_hash(&ana).await?.as_deref() == Some("$argon2id$first"),
        "the hash given at creation is not stored"
    );
    let again = store
        .create_user_with_password(&ana, None, "$argon2id$other")
        .await;
    ensure!(
        matches!(
            again,
            Err(StoreError::Rejected(Rejection::AlreadyExists(_)))
        ),
        "second creation: {again:?}"
    );
    ensure!(
        store.password_hash(&ana).await?.as_deref() == Some("$argon2id$first"),
        "a refused creation changed the hash"
    );
    store.set_password_hash(&ana, "$argon2id$second").await?;
    store.set_password_hash(&plain, "$argon2id$plain").await?;
    ensure!(
        store.password_hash(&ana).await?.as_deref() == Some("$argon2id$second"),
        "the hash was not replaced"
    );
    ensure!(
        store.password_hash(&plain).await?.as_deref() == Some("$argon2id$plain"),
        "a user without a password could not be given one"
    );
    let missing = store
        .set_password_hash(&uid("u-nobody"), "$argon2id$x")
        .await;
    ensure!(
        matches!(missing, Err(StoreError::Rejected(Rejection::NotFound(_)))),
        "hash for a missing user: {missing:?}"
    );
    ensure!(
        store.password_hash(&uid("u-nobody")).await?.is_none(),
        "a refused set created a user"
    );
    Ok(())
}

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

/// Every event `who` can see, ascending, in full.
pub async fn events_seen(store: &dyn Store, conv: &ConvId, who: &UserId) -> Result<Vec<Event>> {
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
    Ok(page.events)
}

/// The committed event at `seq`, as `who` sees it.
pub async fn event_at(store: &dyn Store, conv: &ConvId, who: &UserId, seq: i64) -> Result<Event> {
    events_seen(store, conv, who)
        .await?
        .into_iter()
        .find(|e| e.seq == seq)
        .with_context(|| format!("no event at seq {seq}"))
}

fn is_kind_rejection<T>(r: &Result<T, StoreError>, want: fn(&Rejection) -> bool) -> bool {
    matches!(r, Err(StoreError::Rejected(got)) if want(got))
}

/// 08-threshold-switches-to-pull: a group whose mode the member count decides becomes `pull`
/// at the join that brings it to `pull_threshold` members and stays so when members leave; a
/// mode chosen at creation is kept; the member snapshot of gateways reports the same mode and
/// whether it may still switch.
pub async fn threshold_switches_to_pull(store: &dyn Store) -> Result<()> {
    let u1 = user(store, "u-1").await?;
    let u2 = user(store, "u-2").await?;
    let u3 = user(store, "u-3").await?;
    let u4 = user(store, "u-4").await?;
    let mode = |v: &parley_domain::ConversationView| v.delivery_mode;

    let mut req = new_conv(&u1, ConvKind::Group, Some("c-t"), &[&u2]);
    req.pull_threshold = 3;
    let conv = store.create_conversation(&req).await?.conv_id;
    let view = store.get_conversation(&conv, &u1).await?;
    ensure!(mode(&view) == DeliveryMode::Push, "2 members: {view:?}");
    let snap = store.current_members(&conv).await?;
    ensure!(
        snap.delivery_mode == DeliveryMode::Push && snap.pull_threshold == Some(3),
        "snapshot at 2 members: {snap:?}"
    );
    ensure!(
        MemberSnapshot::mode_after_join(snap.delivery_mode, snap.pull_threshold, 3)
            == DeliveryMode::Pull,
        "the gateway rule does not switch at the threshold"
    );

    let join = store.add_member(&conv, &u1, &u3).await?.event;
    ensure!(join.seq == 3, "join seq {}", join.seq);
    let view = store.get_conversation(&conv, &u2).await?;
    ensure!(mode(&view) == DeliveryMode::Pull, "3 members: {view:?}");
    let snap = store.current_members(&conv).await?;
    ensure!(
        snap.delivery_mode == DeliveryMode::Pull
            && snap.pull_threshold.is_none()
            && snap.head == 3
            && snap.members.len() == 3,
        "snapshot at 3 members: {snap:?}"
    );
    store.remove_member(&conv, &u3, &u3).await?;
    let view = store.get_conversation(&conv, &u1).await?;
    ensure!(
        mode(&view) == DeliveryMode::Pull,
        "a leave switched back: {view:?}"
    );

    // Created at the threshold: pull from the start.
    let mut req = new_conv(&u1, ConvKind::Group, Some("c-big"), &[&u2, &u3]);
    req.pull_threshold = 3;
    let big = store.create_conversation(&req).await?.conv_id;
    let view = store.get_conversation(&big, &u1).await?;
    ensure!(
        mode(&view) == DeliveryMode::Pull,
        "created with 3: {view:?}"
    );

    // A mode given at creation is kept, whatever the count.
    let mut req = new_conv(&u1, ConvKind::Group, Some("c-fixed"), &[&u2, &u3]);
    req.pull_threshold = 2;
    req.delivery_mode = Some(DeliveryMode::Push);
    let fixed = store.create_conversation(&req).await?.conv_id;
    store.add_member(&fixed, &u1, &u4).await?;
    let view = store.get_conversation(&fixed, &u1).await?;
    ensure!(mode(&view) == DeliveryMode::Push, "explicit push: {view:?}");
    let snap = store.current_members(&fixed).await?;
    ensure!(
        snap.pull_threshold.is_none() && snap.delivery_mode == DeliveryMode::Push,
        "explicit push snapshot: {snap:?}"
    );

    // A direct chat is push and never switches.
    let mut req = new_conv(&u1, ConvKind::Direct, None, &[&u2]);
    req.pull_threshold = 1;
    let direct = store.create_conversation(&req).await?.conv_id;
    let snap = store.current_members(&direct).await?;
    ensure!(
        snap.delivery_mode == DeliveryMode::Push && snap.pull_threshold.is_none(),
        "direct snapshot: {snap:?}"
    );
    Ok(())
}

/// 08-member-cannot-remove-others: a plain member may leave but may not remove, add or set
/// roles (FORBIDDEN, nothing written); an admin removes plain members only; the owner removes
/// anyone.
pub async fn member_cannot_remove_others(store: &dyn Store) -> Result<()> {
    let owner = user(store, "u-own").await?;
    let m1 = user(store, "u-m1").await?;
    let m2 = user(store, "u-m2").await?;
    let m3 = user(store, "u-m3").await?;
    let conv = store
        .create_conversation(&new_conv(&owner, ConvKind::Group, Some("c-r"), &[&m1, &m2]))
        .await?
        .conv_id;
    let forbidden = |r: &Rejection| matches!(r, Rejection::Forbidden(_));

    let r = store.remove_member(&conv, &m1, &m2).await;
    ensure!(
        is_kind_rejection(&r, forbidden),
        "member removes member: {r:?}"
    );
    let r = store.remove_member(&conv, &m1, &owner).await;
    ensure!(
        is_kind_rejection(&r, forbidden),
        "member removes owner: {r:?}"
    );
    let r = store.add_member(&conv, &m1, &m3).await;
    ensure!(is_kind_rejection(&r, forbidden), "member adds: {r:?}");
    let r = store.set_role(&conv, &m1, &m2, Role::Admin).await;
    ensure!(
        is_kind_rejection(&r, forbidden),
        "member sets a role: {r:?}"
    );
    let view = store.get_conversation(&conv, &owner).await?;
    ensure!(view.head == 3, "a refusal wrote: head {}", view.head);
    let members = view.members.unwrap_or_default().len();
    ensure!(members == 3, "members after refusals: {members}");

    // The owner adds m3 and makes m2 an admin; the admin removes m3 but not the owner.
    store.add_member(&conv, &owner, &m3).await?; // 4
    store.set_role(&conv, &owner, &m2, Role::Admin).await?;
    let r = store.remove_member(&conv, &m2, &owner).await;
    ensure!(
        is_kind_rejection(&r, forbidden),
        "admin removes owner: {r:?}"
    );
    let removed = store.remove_member(&conv, &m2, &m3).await?.event;
    ensure!(
        removed.seq == 5 && removed.subject_user.as_ref() == Some(&m3),
        "admin removes member: {removed:?}"
    );
    // A member may always leave.
    let left = store.remove_member(&conv, &m1, &m1).await?.event;
    ensure!(left.seq == 6, "member leaves: {left:?}");
    // The owner removes an admin.
    let removed = store.remove_member(&conv, &owner, &m2).await?.event;
    ensure!(removed.seq == 7, "owner removes admin: {removed:?}");
    let view = store.get_conversation(&conv, &owner).await?;
    let members: Vec<UserId> = view
        .members
        .unwrap_or_default()
        .into_iter()
        .map(|m| m.user_id)
        .collect();
    ensure!(
        members == vec![owner.clone()],
        "members at the end: {members:?}"
    );
    Ok(())
}

async fn recall(
    store: &dyn Store,
    conv: &ConvId,
    who: &UserId,
    seq: i64,
    now: DateTime<Utc>,
) -> Result<RecallOutcome, StoreError> {
    store.recall(conv, who, seq, now).await
}

/// Window of the recall checks: one second, so `now` can be placed on either side of it.
const RECALL_TEST_WINDOW_MS: i64 = 1_000;

/// 11-recall-window: a recall at exactly `created_at + recall_window_ms` is accepted; one
/// millisecond later it is RECALL_WINDOW_EXPIRED and writes nothing. The window is the
/// conversation's own.
pub async fn recall_window(store: &dyn Store) -> Result<()> {
    let ana = user(store, "u-ana").await?;
    let ben = user(store, "u-ben").await?;
    let mut req = new_conv(&ana, ConvKind::Group, Some("c-w"), &[&ben]);
    req.recall_window_ms = RECALL_TEST_WINDOW_MS;
    let conv = store.create_conversation(&req).await?.conv_id;
    let window = Duration::milliseconds(RECALL_TEST_WINDOW_MS);

    let m1 = send(store, &conv, &ana, "m-1", "first").await?;
    let at = m1.event.as_ref().context("m-1 event")?.created_at;
    let ok = recall(store, &conv, &ana, m1.seq, at + window).await?;
    ensure!(
        ok.seq == 4 && ok.target_seq == 3 && ok.event.is_some(),
        "recall at the window's end: {ok:?}"
    );

    let m2 = send(store, &conv, &ana, "m-2", "second").await?; // 5
    let at = m2.event.as_ref().context("m-2 event")?.created_at;
    let late = recall(
        store,
        &conv,
        &ana,
        m2.seq,
        at + window + Duration::milliseconds(1),
    )
    .await;
    ensure!(
        is_rejection(&late, &Rejection::RecallWindowExpired),
        "recall 1 ms after the window: {late:?}"
    );
    let view = store.get_conversation(&conv, &ana).await?;
    ensure!(view.head == 5, "a refused recall wrote: head {}", view.head);
    let e = event_at(store, &conv, &ben, 5).await?;
    ensure!(
        !e.recalled && e.body.as_deref() == Some("second"),
        "the refused target changed: {e:?}"
    );
    Ok(())
}

/// 11-recall-erases-body: the recall event follows at the next seq with `target_seq`; the
/// target reads as `recalled` with no body for every member and no longer counts as unread; an
/// identical retry of the original send is still `dup` (its fingerprint was kept) and another
/// body is IDEMPOTENCY_MISMATCH. Answers the conversation and the target's seq, so a store's
/// own test can look at the stored row.
pub async fn recall_erases_body(store: &dyn Store) -> Result<(ConvId, i64)> {
    let ana = user(store, "u-ana").await?;
    let ben = user(store, "u-ben").await?;
    let conv = store
        .create_conversation(&new_conv(&ana, ConvKind::Group, Some("c-e"), &[&ben]))
        .await?
        .conv_id;
    let m1 = send(store, &conv, &ana, "m-1", "secret words").await?; // 3
    send(store, &conv, &ana, "m-2", "still here").await?; // 4
    let before = store.get_conversation(&conv, &ben).await?.unread;
    ensure!(before == 2, "ben's unread before the recall: {before}");

    let token = store.list_conversations(&ben, None).await?.sync_token;
    let out = recall(store, &conv, &ana, m1.seq, Utc::now()).await?;
    let ev = out.event.clone().context("the recall wrote no event")?;
    let feed = store.list_conversations(&ben, Some(&token)).await?;
    ensure!(
        feed.conversations.len() == 1 && feed.conversations[0].unread == 1,
        "feed after the recall: {:?}",
        feed.conversations
    );
    ensure!(
        (out.seq, out.target_seq) == (5, 3)
            && ev.seq == 5
            && ev.kind == EventKind::Recall
            && ev.target_seq == Some(3)
            && ev.sender_user.as_ref() == Some(&ana)
            && ev.body.is_none(),
        "recall outcome {out:?} event {ev:?}"
    );
    for who in [&ana, &ben] {
        let target = event_at(store, &conv, who, 3).await?;
        ensure!(
            target.kind == EventKind::Msg
                && target.recalled
                && target.body.is_none()
                && target.message_id == Some(m1.message_id),
            "target as {who}: {target:?}"
        );
        let stored = event_at(store, &conv, who, 5).await?;
        ensure!(
            stored.kind == EventKind::Recall && stored.target_seq == Some(3),
            "stored recall as {who}: {stored:?}"
        );
    }
    let view = store.get_conversation(&conv, &ben).await?;
    ensure!(
        view.unread == 1 && view.head == 5,
        "ben after the recall: unread {} head {}",
        view.unread,
        view.head
    );
    let retry = send(store, &conv, &ana, "m-1", "secret words").await?;
    ensure!(
        retry.dup && retry.seq == 3 && retry.message_id == m1.message_id,
        "identical retry after recall: {retry:?}"
    );
    let other = send(store, &conv, &ana, "m-1", "other words").await;
    ensure!(
        is_rejection(&other, &Rejection::IdempotencyMismatch),
        "changed retry after recall: {other:?}"
    );
    Ok((conv, m1.seq))
}

/// 11-recall-idempotent: recalling again answers the same recall seq and writes nothing, also
/// after the window; the other refusals are NOT_SENDER (another member's message), NOT_MEMBER
/// (never a member, unknown conversation, left), NOT_FOUND (no visible msg at that seq).
pub async fn recall_idempotent(store: &dyn Store) -> Result<()> {
    let ana = user(store, "u-ana").await?;
    let ben = user(store, "u-ben").await?;
    let cai = user(store, "u-cai").await?;
    let conv = store
        .create_conversation(&new_conv(&ana, ConvKind::Group, Some("c-i"), &[&ben]))
        .await?
        .conv_id;
    let m1 = send(store, &conv, &ana, "m-1", "oops").await?; // 3
    let first = recall(store, &conv, &ana, m1.seq, Utc::now()).await?; // 4
    ensure!(first.seq == 4 && first.event.is_some(), "first: {first:?}");
    let again = recall(store, &conv, &ana, m1.seq, Utc::now()).await?;
    ensure!(
        again.seq == 4 && again.target_seq == 3 && again.event.is_none(),
        "again: {again:?}"
    );
    let late = recall(store, &conv, &ana, m1.seq, Utc::now() + Duration::days(30)).await?;
    ensure!(
        late.seq == 4 && late.event.is_none(),
        "again after the window: {late:?}"
    );
    let head = store.get_conversation(&conv, &ana).await?.head;
    ensure!(head == 4, "repeated recalls wrote: head {head}");

    let b1 = send(store, &conv, &ben, "b-1", "ben's").await?; // 5
    let r = recall(store, &conv, &ana, b1.seq, Utc::now()).await;
    ensure!(
        is_rejection(&r, &Rejection::NotSender),
        "recall of ben's: {r:?}"
    );
    let r = recall(store, &conv, &cai, b1.seq, Utc::now()).await;
    ensure!(is_rejection(&r, &Rejection::NotMember), "non-member: {r:?}");
    let unknown = recall(store, &cid("c-none"), &cai, 3, Utc::now()).await;
    ensure!(
        format!("{:?}", r.err()) == format!("{:?}", unknown.err()),
        "unknown conversation answers differently from a non-member"
    );
    for seq in [0, 1, 4, 99] {
        let r = recall(store, &conv, &ana, seq, Utc::now()).await;
        ensure!(
            is_kind_rejection(&r, |r| matches!(r, Rejection::NotFound(_))),
            "recall of seq {seq}: {r:?}"
        );
    }
    // A sender who left may no longer recall.
    store.remove_member(&conv, &ben, &ben).await?; // 6
    let r = recall(store, &conv, &ben, b1.seq, Utc::now()).await;
    ensure!(
        is_rejection(&r, &Rejection::NotMember),
        "former member: {r:?}"
    );
    let head = store.get_conversation(&conv, &ana).await?.head;
    ensure!(head == 6, "refusals wrote: head {head}");
    Ok(())
}

/// Retention of the purge checks; `now` is placed relative to stored `created_at` values.
pub const RETENTION_TEST_MS: i64 = 60_000;
/// A pause that makes later events' `created_at` strictly larger than earlier ones'.
const CLOCK_STEP_MS: u64 = 30;

fn with_retention(mut req: NewConversation) -> NewConversation {
    req.retention_ms = Some(RETENTION_TEST_MS);
    req
}

/// The moment at which the event at `seq` has just become older than retention.
async fn past_retention_of(
    store: &dyn Store,
    conv: &ConvId,
    who: &UserId,
    seq: i64,
) -> Result<DateTime<Utc>> {
    let e = event_at(store, conv, who, seq).await?;
    Ok(e.created_at + Duration::milliseconds(RETENTION_TEST_MS) + Duration::microseconds(1))
}

fn contiguous(seqs: &[i64]) -> bool {
    seqs.windows(2).all(|w| w[1] == w[0] + 1)
}

/// 11-purge-advances-min-seq: the purge deletes in seq order, at most one batch per
/// conversation and call, only events past retention; `min_seq` rises past them and the rest
/// still runs from `min_seq` to the head without a hole (P1); reads say `truncated`, history
/// stops at `min_seq`, a conversation without retention is untouched, and new sends continue
/// the sequence. Purging everything leaves `min_seq = next_seq`.
pub async fn purge_advances_min_seq(store: &dyn Store) -> Result<()> {
    let ana = user(store, "u-ana").await?;
    let ben = user(store, "u-ben").await?;
    let conv = store
        .create_conversation(&with_retention(new_conv(
            &ana,
            ConvKind::Group,
            Some("c-ret"),
            &[&ben],
        )))
        .await?
        .conv_id;
    let keep = store
        .create_conversation(&new_conv(&ana, ConvKind::Group, Some("c-keep"), &[&ben]))
        .await?
        .conv_id;
    for i in 1..=10 {
        send(store, &conv, &ana, &format!("m-{i}"), "old").await?; // 3..=12
        send(store, &keep, &ana, &format!("m-{i}"), "kept").await?;
    }
    tokio::time::sleep(std::time::Duration::from_millis(CLOCK_STEP_MS)).await;
    send(store, &conv, &ana, "m-11", "new").await?; // 13
    send(store, &conv, &ana, "m-12", "new").await?; // 14
                                                    // Everything before seq 13 is past retention at `now`; 13 and 14 are not.
    let now = past_retention_of(store, &conv, &ana, 13).await? - Duration::microseconds(1);
    let token = store.list_conversations(&ben, None).await?.sync_token;

    let r1 = store.purge_batch(now, 5).await?;
    let want = PurgeReport {
        conversations: 1,
        events_deleted: 5,
        tombstones_written: 3,
        conversations_busy: 0,
        more: true,
    };
    ensure!(r1 == want, "round 1: {r1:?}");
    let page = store
        .events(
            &conv,
            &ana,
            EventsQuery::After {
                after: 0,
                epoch: None,
            },
            500,
        )
        .await?;
    let seqs: Vec<i64> = page.events.iter().map(|e| e.seq).collect();
    ensure!(
        page.min_seq == 6 && page.truncated && page.head == 14,
        "after round 1: min_seq {} truncated {} head {}",
        page.min_seq,
        page.truncated,
        page.head
    );
    ensure!(
        seqs.first() == Some(&6) && seqs.last() == Some(&14) && contiguous(&seqs),
        "P1 after round 1: {seqs:?}"
    );
    // A moved min_seq is a change of the sync feed (SPEC §5); the other conversation is not.
    let feed = store.list_conversations(&ben, Some(&token)).await?;
    let changed: Vec<(&str, i64)> = feed
        .conversations
        .iter()
        .map(|v| (v.conv_id.as_str(), v.min_seq))
        .collect();
    ensure!(
        changed == vec![("c-ret", 6)],
        "feed after the purge: {changed:?}"
    );

    let r2 = store.purge_batch(now, 5).await?;
    ensure!(
        (r2.events_deleted, r2.tombstones_written, r2.more) == (5, 5, true),
        "round 2: {r2:?}"
    );
    let r3 = store.purge_batch(now, 5).await?;
    ensure!(
        (r3.events_deleted, r3.tombstones_written, r3.more) == (2, 2, false),
        "round 3 (stops before the younger seq 13): {r3:?}"
    );
    let r4 = store.purge_batch(now, 5).await?;
    ensure!(r4 == PurgeReport::default(), "round 4: {r4:?}");

    let seen = seqs_seen(store, &conv, &ben).await?;
    ensure!(
        seen == vec![(13, EventKind::Msg), (14, EventKind::Msg)],
        "ben sees {seen:?}"
    );
    let view = store.get_conversation(&conv, &ben).await?;
    ensure!(
        (view.min_seq, view.head, view.unread) == (13, 14, 2),
        "view: min_seq {} head {} unread {}",
        view.min_seq,
        view.head,
        view.unread
    );
    let newest = store
        .events(&conv, &ben, EventsQuery::Before { before: None }, 3)
        .await?;
    let newest_seqs: Vec<i64> = newest.events.iter().map(|e| e.seq).collect();
    ensure!(
        newest_seqs == vec![14, 13] && newest.next_before.is_none(),
        "history after purge: {newest_seqs:?} next {:?}",
        newest.next_before
    );
    let below = store
        .events(&conv, &ben, EventsQuery::Before { before: Some(13) }, 3)
        .await?;
    ensure!(
        below.events.is_empty() && below.next_before.is_none(),
        "history below min_seq: {:?}",
        below.events
    );
    let untouched = store.get_conversation(&keep, &ana).await?;
    ensure!(
        (untouched.min_seq, untouched.head) == (1, 12),
        "no-retention conversation: min_seq {} head {}",
        untouched.min_seq,
        untouched.head
    );

    // The sequence continues after a purge (P1, P5).
    let next = send(store, &conv, &ana, "m-13", "after").await?;
    ensure!(next.seq == 15, "send after purge: {}", next.seq);

    // Purging everything: min_seq = next_seq, reads are empty and truncated, sends continue.
    let later = past_retention_of(store, &conv, &ana, 15).await?;
    let all = store.purge_batch(later, 500).await?;
    ensure!(
        all.events_deleted == 3 && !all.more,
        "purge of the rest: {all:?}"
    );
    let page = store
        .events(
            &conv,
            &ana,
            EventsQuery::After {
                after: 0,
                epoch: None,
            },
            500,
        )
        .await?;
    ensure!(
        page.events.is_empty() && page.min_seq == 16 && page.head == 15 && page.truncated,
        "empty log: min_seq {} head {} truncated {}",
        page.min_seq,
        page.head,
        page.truncated
    );
    let view = store.get_conversation(&conv, &ana).await?;
    ensure!(
        view.last_event.is_none() && view.unread == 0,
        "view of an empty log: {view:?}"
    );
    let after_all = send(store, &conv, &ana, "m-14", "fresh").await?;
    ensure!(
        after_all.seq == 16,
        "send after purging all: {}",
        after_all.seq
    );
    let seen = seqs_seen(store, &conv, &ben).await?;
    ensure!(seen == vec![(16, EventKind::Msg)], "ben sees {seen:?}");
    Ok(())
}

/// 11-retry-after-purge-hits-tombstone: after the purge, an identical retry answers
/// `dup = true, purged = true` with the original seq and message id (also for a recalled
/// message, and for a sender who has since left), another body is IDEMPOTENCY_MISMATCH, and
/// no retry writes anything (P2 after retention).
pub async fn retry_after_purge_hits_tombstone(store: &dyn Store) -> Result<()> {
    let ana = user(store, "u-ana").await?;
    let ben = user(store, "u-ben").await?;
    let conv = store
        .create_conversation(&with_retention(new_conv(
            &ana,
            ConvKind::Group,
            Some("c-tomb"),
            &[&ben],
        )))
        .await?
        .conv_id;
    let m1 = send(store, &conv, &ana, "m-1", "hello").await?; // 3
    let m2 = send(store, &conv, &ana, "m-2", "bye").await?; // 4
    let b1 = send(store, &conv, &ben, "b-1", "yo").await?; // 5
    recall(store, &conv, &ana, m2.seq, Utc::now()).await?; // 6
    let now = past_retention_of(store, &conv, &ana, 6).await?;
    let report = store.purge_batch(now, 500).await?;
    ensure!(
        (report.events_deleted, report.tombstones_written) == (6, 3),
        "purge: {report:?}"
    );
    ensure!(
        store.get_conversation(&conv, &ana).await?.min_seq == 7,
        "min_seq after purging all"
    );

    let retry = send(store, &conv, &ana, "m-1", "hello").await?;
    ensure!(
        retry.dup
            && retry.purged
            && retry.seq == m1.seq
            && retry.message_id == m1.message_id
            && retry.event.is_none(),
        "identical retry: {retry:?}"
    );
    let other = send(store, &conv, &ana, "m-1", "HELLO").await;
    ensure!(
        is_rejection(&other, &Rejection::IdempotencyMismatch),
        "changed retry: {other:?}"
    );
    let recalled = send(store, &conv, &ana, "m-2", "bye").await?;
    ensure!(
        recalled.dup && recalled.purged && recalled.seq == m2.seq,
        "retry of a recalled, purged message: {recalled:?}"
    );
    store.remove_member(&conv, &ben, &ben).await?; // 7
    let left = send(store, &conv, &ben, "b-1", "yo").await?;
    ensure!(
        left.dup && left.purged && left.seq == b1.seq && left.message_id == b1.message_id,
        "retry by a sender who left: {left:?}"
    );
    let head = store.get_conversation(&conv, &ana).await?.head;
    ensure!(head == 7, "retries wrote: head {head}");
    Ok(())
}

/// 11-tombstone-expiry: `expire_tombstones(t)` deletes exactly the tombstones purged before
/// `t`; the others still answer retries. A request key whose tombstone expired is free again
/// (the TTL is chosen longer than any client retries), so a send with it is a new message.
pub async fn tombstone_expiry(store: &dyn Store) -> Result<()> {
    let ana = user(store, "u-ana").await?;
    let old = store
        .create_conversation(&with_retention(new_conv(
            &ana,
            ConvKind::Group,
            Some("c-old"),
            &[],
        )))
        .await?
        .conv_id;
    send(store, &old, &ana, "a-1", "one").await?; // 2
    send(store, &old, &ana, "a-2", "two").await?; // 3
    let t1 = past_retention_of(store, &old, &ana, 3).await?;
    tokio::time::sleep(std::time::Duration::from_millis(CLOCK_STEP_MS)).await;
    let young = store
        .create_conversation(&with_retention(new_conv(
            &ana,
            ConvKind::Group,
            Some("c-young"),
            &[],
        )))
        .await?
        .conv_id;
    let y1 = send(store, &young, &ana, "y-1", "three").await?; // 2
    let first = store.purge_batch(t1, 500).await?;
    ensure!(
        (first.conversations, first.tombstones_written) == (1, 2),
        "purge at t1 touched only c-old: {first:?}"
    );
    let t2 = t1 + Duration::hours(1);
    let second = store.purge_batch(t2, 500).await?;
    ensure!(
        (second.conversations, second.tombstones_written) == (1, 1),
        "purge at t2: {second:?}"
    );

    let expired = store
        .expire_tombstones(t1 + Duration::milliseconds(1))
        .await?;
    ensure!(expired == 2, "expired at t1: {expired}, expected 2");
    let again = store
        .expire_tombstones(t1 + Duration::milliseconds(1))
        .await?;
    ensure!(again == 0, "expired twice: {again}");
    let kept = send(store, &young, &ana, "y-1", "three").await?;
    ensure!(
        kept.dup && kept.purged && kept.seq == y1.seq,
        "a live tombstone stopped answering: {kept:?}"
    );
    // The expired key is free: the same request is a new message now.
    let reused = send(store, &old, &ana, "a-1", "one").await?;
    ensure!(
        !reused.dup && !reused.purged && reused.seq == 4,
        "send with an expired key: {reused:?}"
    );
    let rest = store
        .expire_tombstones(t2 + Duration::milliseconds(1))
        .await?;
    ensure!(rest == 1, "expired at t2: {rest}, expected 1");
    Ok(())
}

/// Concurrent sends to one conversation, all started at once, each answered on its own
/// (SPEC §4, batching: a refused request must not fail the others): 48 distinct sends from
/// two members, 12 sends of one key (8 with one body, 4 with another) and 8 from a
/// non-member. The distinct sends and the one winner of the shared key take consecutive
/// seqs; the shared key's other requests are replays of the winner or mismatches; the
/// non-member writes nothing.
pub async fn concurrent_mixed_sends_answered_each(store: Arc<dyn Store>) -> Result<ConvId> {
    let ana = user(&*store, "u-ana").await?;
    let ben = user(&*store, "u-ben").await?;
    let cat = user(&*store, "u-cat").await?;
    let conv = store
        .create_conversation(&new_conv(&ana, ConvKind::Group, Some("c-mixed"), &[&ben]))
        .await?
        .conv_id;
    let head_before = 2;
    let start = Arc::new(tokio::sync::Barrier::new(68));
    let mut tasks = Vec::new();
    for i in 0..68usize {
        let (store, conv, start) = (store.clone(), conv.clone(), start.clone());
        let (from, key, body) = match i {
            0..=47 => (
                if i % 2 == 0 { ana.clone() } else { ben.clone() },
                format!("m-{i}"),
                "x".to_owned(),
            ),
            48..=55 => (ana.clone(), "m-shared".to_owned(), "first body".to_owned()),
            56..=59 => (ana.clone(), "m-shared".to_owned(), "other body".to_owned()),
            _ => (cat.clone(), format!("m-cat-{i}"), "x".to_owned()),
        };
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            (
                i,
                body.clone(),
                send(&*store, &conv, &from, &key, &body).await,
            )
        }));
    }
    let mut written = Vec::new();
    let mut shared_ok = Vec::new();
    let mut mismatches = Vec::new();
    for t in tasks {
        let (i, body, outcome) = t.await?;
        match (i, outcome) {
            (0..=47, Ok(ack)) => {
                ensure!(!ack.dup, "distinct send {i} answered dup");
                written.push(ack.seq);
            }
            (48..=59, Ok(ack)) => shared_ok.push((body, ack)),
            (48..=59, Err(e)) if e.rejected() == Some(&Rejection::IdempotencyMismatch) => {
                mismatches.push(body)
            }
            (60.., Err(e)) if e.rejected() == Some(&Rejection::NotMember) => {}
            (i, other) => anyhow::bail!("send {i}: unexpected answer {other:?}"),
        }
    }
    let winners: Vec<_> = shared_ok.iter().filter(|(_, a)| !a.dup).collect();
    ensure!(
        winners.len() == 1,
        "shared key written {} times",
        winners.len()
    );
    let (winning_body, winner) = winners[0];
    written.push(winner.seq);
    ensure!(
        shared_ok.iter().all(|(b, a)| b == winning_body
            && a.seq == winner.seq
            && a.message_id == winner.message_id),
        "a replay of the shared key got another answer than the winner"
    );
    ensure!(
        mismatches.iter().all(|b| b != winning_body)
            && shared_ok.len() + mismatches.len() == 12
            && shared_ok.len() == if winning_body == "first body" { 8 } else { 4 },
        "shared key: {} replays, {} mismatches, winner {winning_body:?}",
        shared_ok.len(),
        mismatches.len()
    );
    written.sort_unstable();
    let expected: Vec<i64> = (head_before + 1..=head_before + 49).collect();
    ensure!(written == expected, "seqs not consecutive: {written:?}");
    let page = store
        .events(
            &conv,
            &ana,
            EventsQuery::After {
                after: 0,
                epoch: None,
            },
            500,
        )
        .await?;
    ensure!(
        page.head == head_before + 49 && page.events.len() == 51,
        "head {} with {} events",
        page.head,
        page.events.len()
    );
    ensure!(
        page.events
            .iter()
            .all(|e| e.sender_user.as_ref() != Some(&cat)),
        "the non-member wrote"
    );
    Ok(conv)
}

/// Concurrent sends to six conversations at once, each answered on its own: per conversation
/// the writes take consecutive seqs after its joins, a replay of a key answers the original,
/// and a non-member's sends write nothing. Returns the conversations.
pub async fn concurrent_sends_to_many_conversations(store: Arc<dyn Store>) -> Result<Vec<ConvId>> {
    const CONVS: usize = 6;
    const SENDS_PER_CONV: usize = 10;
    let ana = user(&*store, "u-ana").await?;
    let ben = user(&*store, "u-ben").await?;
    let cat = user(&*store, "u-cat").await?;
    let mut convs = Vec::new();
    for c in 0..CONVS {
        let id = format!("c-many-{c}");
        let created = store
            .create_conversation(&new_conv(&ana, ConvKind::Group, Some(&id), &[&ben]))
            .await?;
        convs.push(created.conv_id);
    }
    // Per conversation: 10 distinct sends, 2 replays of the first, 1 from the non-member.
    let total = CONVS * (SENDS_PER_CONV + 3);
    let start = Arc::new(tokio::sync::Barrier::new(total));
    let mut tasks = Vec::new();
    for conv in &convs {
        for i in 0..SENDS_PER_CONV + 3 {
            let (store, conv, start) = (store.clone(), conv.clone(), start.clone());
            let (from, key) = match i {
                0..SENDS_PER_CONV => (
                    if i % 2 == 0 { ana.clone() } else { ben.clone() },
                    format!("m-{i}"),
                ),
                n if n < SENDS_PER_CONV + 2 => (ana.clone(), "m-0".to_owned()),
                _ => (cat.clone(), "m-cat".to_owned()),
            };
            tasks.push(tokio::spawn(async move {
                start.wait().await;
                let outcome = send(&*store, &conv, &from, &key, "x").await;
                (conv, from, key, outcome)
            }));
        }
    }
    let mut written: std::collections::HashMap<ConvId, Vec<i64>> = Default::default();
    let mut first_key: std::collections::HashMap<ConvId, Vec<SendOutcome>> = Default::default();
    for t in tasks {
        let (conv, from, key, outcome) = t.await?;
        match outcome {
            Ok(ack) if key == "m-0" => first_key.entry(conv).or_default().push(ack),
            Ok(ack) => {
                ensure!(!ack.dup && from != cat, "{conv}/{key}: {ack:?}");
                written.entry(conv).or_default().push(ack.seq);
            }
            Err(e) if from == cat && e.rejected() == Some(&Rejection::NotMember) => {}
            Err(e) => anyhow::bail!("{conv}/{key}: {e:?}"),
        }
    }
    for conv in &convs {
        let acks = first_key.get(conv).context("answers for m-0")?;
        let fresh: Vec<_> = acks.iter().filter(|a| !a.dup).collect();
        ensure!(
            acks.len() == 3 && fresh.len() == 1,
            "{conv}: m-0 answered {} times, {} fresh",
            acks.len(),
            fresh.len()
        );
        ensure!(
            acks.iter()
                .all(|a| a.seq == fresh[0].seq && a.message_id == fresh[0].message_id),
            "{conv}: a replay of m-0 got another answer"
        );
        let mut seqs = written.get(conv).cloned().unwrap_or_default();
        seqs.push(fresh[0].seq);
        seqs.sort_unstable();
        let expected: Vec<i64> = (3..3 + SENDS_PER_CONV as i64).collect();
        ensure!(seqs == expected, "{conv}: seqs {seqs:?}");
        let page = store
            .events(
                conv,
                &ana,
                EventsQuery::After {
                    after: 0,
                    epoch: None,
                },
                500,
            )
            .await?;
        ensure!(
            page.head == 2 + SENDS_PER_CONV as i64 && page.events.len() == 2 + SENDS_PER_CONV,
            "{conv}: head {} with {} events",
            page.head,
            page.events.len()
        );
    }
    Ok(convs)
}
