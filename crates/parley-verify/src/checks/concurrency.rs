//! Concurrent sends over HTTP (chapter 04): replays resolve to one row, distinct sends leave a
//! gapless log, and the write ceiling of one hot conversation.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parley_client::{Client, EventKind, NewConversation, SendAck};
use tokio::sync::Barrier;

use super::{read_whole_log, Observed};
use crate::context::Ctx;
use crate::error::{ensure, CheckError};

/// Identical sends of the replay check (SPEC §12).
const REPLAYS: usize = 32;
/// Distinct sends of the gapless check (SPEC §12).
const DISTINCT_SENDS: usize = 200;
/// Senders of the write-ceiling measurement, each with one send in flight at a time.
const CEILING_SENDERS: usize = 16;
/// How long the write ceiling is measured.
const CEILING_MS: u64 = 3_000;

/// Sends all `(client, client_msg_id, body)` at once: every task waits at one barrier first.
/// Answers every outcome, in order.
async fn send_all_at_once(
    sends: Vec<(Client, String, String)>,
    conv: &str,
) -> Result<Vec<SendAck>, CheckError> {
    let barrier = Arc::new(Barrier::new(sends.len()));
    let mut tasks = Vec::with_capacity(sends.len());
    for (client, key, body) in sends {
        let barrier = barrier.clone();
        let conv = conv.to_owned();
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            client.send(&conv, &key, &body).await
        }));
    }
    let mut acks = Vec::with_capacity(tasks.len());
    for (i, task) in tasks.into_iter().enumerate() {
        match task.await {
            Ok(Ok(ack)) => acks.push(ack),
            Ok(Err(e)) => return Err(CheckError::Failed(format!("send {i} refused: {e}"))),
            Err(e) => return Err(CheckError::Failed(format!("send task {i}: {e}"))),
        }
    }
    Ok(acks)
}

/// 32 concurrent identical sends: one message, one message id, one seq, exactly one dup=false.
pub async fn concurrent_replay_one_row(ctx: &Ctx) -> Observed {
    let ana = ctx.user("ana").await?;
    let conv = ctx.id("c");
    ana.create_conversation(&NewConversation::group(Vec::<String>::new()).with_conv_id(&conv))
        .await?;
    let sends = (0..REPLAYS)
        .map(|_| (ana.clone(), "m-same".to_owned(), "same body".to_owned()))
        .collect();
    let acks = send_all_at_once(sends, &conv).await?;
    let firsts = acks.iter().filter(|a| !a.dup).count();
    let seqs: HashSet<i64> = acks.iter().map(|a| a.seq).collect();
    let ids: HashSet<&str> = acks.iter().map(|a| a.message_id.as_str()).collect();
    ctx.note(format!(
        "{REPLAYS} identical sends → {firsts} dup=false, seqs {seqs:?}, {} message ids",
        ids.len()
    ));
    ensure!(firsts == 1, "{firsts} answers with dup=false");
    ensure!(seqs == HashSet::from([2]), "seqs: {seqs:?}");
    ensure!(ids.len() == 1, "message ids: {ids:?}");
    let log = read_whole_log(&ana, &conv).await?;
    let msgs: Vec<_> = log.iter().filter(|e| e.kind == EventKind::Msg).collect();
    ensure!(msgs.len() == 1, "{} messages in the log", msgs.len());
    let mut rows = None;
    if ctx.target.database_url.is_some() {
        let mut db = ctx.db().await?;
        let n: i64 =
            sqlx::query_scalar("SELECT count(*) FROM events WHERE conv_id = $1 AND kind = 'msg'")
                .bind(&conv)
                .fetch_one(&mut db)
                .await?;
        ctx.note(format!("SQL: {n} msg rows"));
        ensure!(n == 1, "{n} msg rows by SQL");
        rows = Some(n);
    }
    Ok(format!(
        "1 message (seq 2), 1 message_id, {firsts} dup=false of {REPLAYS}{}",
        rows.map(|n| format!(", {n} row by SQL"))
            .unwrap_or_default()
    ))
}

/// 200 concurrent distinct sends from four members: acked seqs are exactly the next 200, the
/// log reads gapless and the head is its last seq.
pub async fn seq_gapless(ctx: &Ctx) -> Observed {
    let mut clients = Vec::new();
    for name in ["a", "b", "c", "d"] {
        clients.push(ctx.user(name).await?);
    }
    let conv = ctx.id("c");
    let created = clients[0]
        .create_conversation(
            &NewConversation::group([ctx.id("b"), ctx.id("c"), ctx.id("d")]).with_conv_id(&conv),
        )
        .await?;
    let joins = created.head;
    ensure!(joins == 4, "created with head {joins}");
    let sends = (0..DISTINCT_SENDS)
        .map(|i| {
            let c = clients[i % clients.len()].clone();
            (c, format!("m-{i}"), format!("body {i}"))
        })
        .collect();
    let acks = send_all_at_once(sends, &conv).await?;
    ensure!(acks.iter().all(|a| !a.dup), "a distinct send answered dup");
    let acked: BTreeSet<i64> = acks.iter().map(|a| a.seq).collect();
    let expected: BTreeSet<i64> = (joins + 1..=joins + DISTINCT_SENDS as i64).collect();
    ctx.note(format!(
        "{DISTINCT_SENDS} distinct sends → {} distinct seqs {:?}..{:?}",
        acked.len(),
        acked.first(),
        acked.last()
    ));
    ensure!(
        acked == expected,
        "acked seqs are not {joins}+1..: {acked:?}"
    );
    let log = read_whole_log(&clients[0], &conv).await?;
    let seqs: Vec<i64> = log.iter().map(|e| e.seq).collect();
    let head = *seqs.last().unwrap_or(&0);
    ensure!(
        seqs == (1..=head).collect::<Vec<i64>>(),
        "the log has a hole or a repeat: {seqs:?}"
    );
    let view = clients[0].get_conversation(&conv).await?;
    ensure!(view.head == head, "view head {} vs log {head}", view.head);
    let mut counter = String::new();
    if ctx.target.database_url.is_some() {
        let mut db = ctx.db().await?;
        let (next, count): (i64, i64) = sqlx::query_as(
            "SELECT c.next_seq, (SELECT count(*) FROM events e WHERE e.conv_id = c.conv_id)
             FROM conversations c WHERE c.conv_id = $1",
        )
        .bind(&conv)
        .fetch_one(&mut db)
        .await?;
        ctx.note(format!("SQL: next_seq {next}, rows {count}"));
        ensure!(
            count == head && next == head + 1,
            "SQL: {count} rows, next_seq {next}, head {head}"
        );
        counter = format!(", next_seq {next}");
    }
    Ok(format!("count = max(seq) = {head}{counter}"))
}

/// Replays and distinct sends mixed at once: each request key maps to one event, the log is
/// gapless.
pub async fn mixed_replays_and_distinct_sends(ctx: &Ctx) -> Observed {
    let ana = ctx.user("a").await?;
    let ben = ctx.user("b").await?;
    let conv = ctx.id("c");
    ana.create_conversation(&NewConversation::group([ctx.id("b")]).with_conv_id(&conv))
        .await?;
    let mut sends = Vec::new();
    for k in 0..10 {
        for _ in 0..4 {
            sends.push((ana.clone(), format!("k-{k}"), format!("a{k}")));
            sends.push((ben.clone(), format!("k-{k}"), format!("b{k}")));
        }
    }
    let acks = send_all_at_once(sends, &conv).await?;
    let firsts = acks.iter().filter(|a| !a.dup).count();
    let seqs: BTreeSet<i64> = acks.iter().map(|a| a.seq).collect();
    ctx.note(format!(
        "80 sends of 20 keys → {firsts} firsts, seqs {seqs:?}"
    ));
    ensure!(firsts == 20, "{firsts} answers with dup=false");
    ensure!(seqs == (3..=22).collect(), "acked seqs: {seqs:?}");
    let log = read_whole_log(&ana, &conv).await?;
    let got: Vec<i64> = log.iter().map(|e| e.seq).collect();
    ensure!(got == (1..=22).collect::<Vec<i64>>(), "log: {got:?}");
    Ok("20 keys → 20 messages, seqs 3..=22, log 1..=22".into())
}

/// Concurrent sends to many conversations at once: each conversation's log is gapless on its
/// own.
pub async fn concurrent_sends_to_many_conversations(ctx: &Ctx) -> Observed {
    const CONVS: usize = 8;
    const PER_CONV: usize = 12;
    let ana = ctx.user("ana").await?;
    let mut convs = Vec::new();
    for i in 0..CONVS {
        let conv = ctx.id(&format!("c{i}"));
        ana.create_conversation(&NewConversation::group(Vec::<String>::new()).with_conv_id(&conv))
            .await?;
        convs.push(conv);
    }
    let barrier = Arc::new(Barrier::new(CONVS * PER_CONV));
    let mut tasks = Vec::new();
    for conv in &convs {
        for k in 0..PER_CONV {
            let (ana, conv, barrier) = (ana.clone(), conv.clone(), barrier.clone());
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                ana.send(&conv, &format!("m-{k}"), "x").await
            }));
        }
    }
    for t in tasks {
        t.await
            .map_err(|e| CheckError::Failed(format!("send task: {e}")))??;
    }
    for conv in &convs {
        let seqs: Vec<i64> = read_whole_log(&ana, conv)
            .await?
            .iter()
            .map(|e| e.seq)
            .collect();
        ensure!(
            seqs == (1..=1 + PER_CONV as i64).collect::<Vec<i64>>(),
            "{conv}: {seqs:?}"
        );
    }
    ctx.note(format!(
        "{} sends over {CONVS} conversations",
        CONVS * PER_CONV
    ));
    Ok(format!(
        "{CONVS} conversations × {PER_CONV} sends: every log 1..={}",
        1 + PER_CONV
    ))
}

/// Closed loop: `CEILING_SENDERS` senders, each sending its next message as soon as the last
/// is acked, into one conversation for `CEILING_MS`. A measurement: it passes when every send
/// was answered and the log holds them gaplessly.
pub async fn hot_conversation_write_ceiling(ctx: &Ctx) -> Observed {
    let ana = ctx.user("ana").await?;
    let conv = ctx.id("hot");
    ana.create_conversation(&NewConversation::group(Vec::<String>::new()).with_conv_id(&conv))
        .await?;
    let start = Instant::now();
    let until = start + Duration::from_millis(CEILING_MS);
    let mut tasks = Vec::new();
    for s in 0..CEILING_SENDERS {
        let (ana, conv) = (ana.clone(), conv.clone());
        tasks.push(tokio::spawn(async move {
            let mut sent = 0u64;
            while Instant::now() < until {
                ana.send(&conv, &format!("s{s}-{sent}"), "x").await?;
                sent += 1;
            }
            Ok::<u64, parley_client::ClientError>(sent)
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t
            .await
            .map_err(|e| CheckError::Failed(format!("sender task: {e}")))??;
    }
    let elapsed = start.elapsed();
    let rate = total as f64 / elapsed.as_secs_f64();
    let head = ana.get_conversation(&conv).await?.head;
    ensure!(
        head == 1 + total as i64,
        "{total} acked sends but head {head}"
    );
    ctx.note(format!(
        "{CEILING_SENDERS} closed-loop senders, {total} sends in {elapsed:?}"
    ));
    Ok(format!(
        "{rate:.0} sends/s into one conversation ({total} sends, {CEILING_SENDERS} concurrent \
         senders, {:.1} s); head {head}",
        elapsed.as_secs_f64()
    ))
}
