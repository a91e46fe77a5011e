//! The checks that need the deployment's PostgreSQL (`--database-url`): the plan of the range
//! read, the negative controls in a scratch schema, the stuck transaction's bound and the epoch
//! bump. Nothing here writes outside the check's own scratch schema or scratch conversation.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parley_client::{Client, ClientOptions, NewConversation};
use parley_store::pg::{connect_options, EVENTS_RANGE_ASC_SQL, SEND_LOCK_SQL};
use sqlx::{Connection, Executor, PgConnection};
use tokio::sync::Barrier;

use super::{refusal, Observed};
use crate::context::Ctx;
use crate::error::{ensure, CheckError};
use crate::ws::{Ws, FRAME_WAIT};

/// Conversations and events per conversation of the plan check's representative data.
const PLAN_CONVERSATIONS: i64 = 1_000;
const PLAN_EVENTS_PER_CONVERSATION: i64 = 100;
/// Writers racing in the check-then-insert control.
const CONTROL_WRITERS: usize = 8;
/// How much later than the idle timeout the blocked send may finish: PostgreSQL checks the
/// timeout on a timer, then the send retries its lock.
const STUCK_SLACK_MS: u64 = 5_000;

/// A scratch schema of the check, dropped when the guard's `drop_now` runs.
struct Scratch {
    conn: PgConnection,
    schema: String,
}

impl Scratch {
    async fn create(ctx: &Ctx) -> Result<Scratch, CheckError> {
        let mut conn = ctx.db().await?;
        let schema = ctx.id("s").replace('-', "_");
        conn.execute(format!("CREATE SCHEMA {schema}").as_str())
            .await?;
        conn.execute(format!("SET search_path TO {schema}").as_str())
            .await?;
        ctx.note(format!("SQL: CREATE SCHEMA {schema}"));
        Ok(Scratch { conn, schema })
    }

    async fn drop_now(mut self, ctx: &Ctx) -> Result<(), CheckError> {
        let statement = format!("DROP SCHEMA {} CASCADE", self.schema);
        self.conn.execute(statement.as_str()).await?;
        ctx.note(format!("SQL: {statement}"));
        Ok(())
    }
}

/// A connection of its own in the scratch schema.
async fn connect_in(ctx: &Ctx, schema: &str) -> Result<PgConnection, CheckError> {
    let mut conn = ctx.db().await?;
    conn.execute(format!("SET search_path TO {schema}").as_str())
        .await?;
    Ok(conn)
}

/// The store's own range read, planned over 100,000 analysed events in a copy of the `events`
/// table (its indexes included) in a scratch schema: the plan uses `events_pkey`.
pub async fn history_uses_pk(ctx: &Ctx) -> Observed {
    ctx.needs_postgres()?;
    let mut s = Scratch::create(ctx).await?;
    let outcome = plan_in(ctx, &mut s.conn).await;
    s.drop_now(ctx).await?;
    outcome
}

async fn plan_in(ctx: &Ctx, conn: &mut PgConnection) -> Observed {
    conn.execute("CREATE TABLE events (LIKE public.events INCLUDING ALL)")
        .await?;
    sqlx::query(
        "INSERT INTO events (conv_id, seq, kind, message_id, sender_user, client_msg_id, \
         request_hash, body, msg_ordinal) \
         SELECT 'c-' || c, s, 'msg', gen_random_uuid(), 'u-' || (s % 7), 'm-' || s, 'h', \
         repeat('x', 40), s FROM generate_series(1, $1) AS c, generate_series(1, $2) AS s",
    )
    .bind(PLAN_CONVERSATIONS)
    .bind(PLAN_EVENTS_PER_CONVERSATION)
    .execute(&mut *conn)
    .await?;
    conn.execute("ANALYZE events").await?;
    let explain = format!("EXPLAIN {EVENTS_RANGE_ASC_SQL}");
    let lines: Vec<String> = sqlx::query_scalar(&explain)
        .bind("c-500")
        .bind(11i64)
        .bind(100i64)
        .bind(50i64)
        .fetch_all(&mut *conn)
        .await?;
    ctx.note(format!("SQL: {explain}"));
    for l in &lines {
        ctx.note(format!("plan: {l}"));
    }
    let uses_pk = lines.iter().any(|l| l.contains("events_pkey"));
    let seq_scan = lines.iter().any(|l| l.contains("Seq Scan"));
    let top = lines.first().cloned().unwrap_or_default();
    ensure!(uses_pk && !seq_scan, "plan: {lines:?}");
    Ok(format!("uses events_pkey, no Seq Scan: {}", top.trim()))
}

/// Negative control: check-then-insert without the unique constraint, racing writers each in
/// its own transaction, stores the same request key more than once.
pub async fn control_check_then_insert_duplicates(ctx: &Ctx) -> Observed {
    let mut s = Scratch::create(ctx).await?;
    let outcome = check_then_insert_in(ctx, &mut s).await;
    s.drop_now(ctx).await?;
    outcome
}

async fn check_then_insert_in(ctx: &Ctx, s: &mut Scratch) -> Observed {
    s.conn
        .execute(
            "CREATE TABLE control_events \
             (conv_id text, sender_user text, client_msg_id text, seq bigint)",
        )
        .await?;
    let mut writers = Vec::new();
    for _ in 0..CONTROL_WRITERS {
        writers.push(connect_in(ctx, &s.schema).await?);
    }
    let barrier = Arc::new(Barrier::new(CONTROL_WRITERS));
    let mut tasks = Vec::new();
    for (i, mut conn) in writers.into_iter().enumerate() {
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            let mut tx = conn.begin().await?;
            barrier.wait().await;
            let n: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM control_events \
                 WHERE conv_id = 'c' AND sender_user = 'u' AND client_msg_id = 'm'",
            )
            .fetch_one(&mut *tx)
            .await?;
            // Every writer has checked before any inserts: the interleaving the race can
            // produce, forced, so the control shows the failure on every run rather than when
            // the scheduler happens to interleave the writers.
            barrier.wait().await;
            if n == 0 {
                sqlx::query("INSERT INTO control_events VALUES ('c', 'u', 'm', $1)")
                    .bind(i as i64)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            Ok::<(), sqlx::Error>(())
        }));
    }
    for t in tasks {
        t.await
            .map_err(|e| CheckError::Failed(format!("writer task: {e}")))??;
    }
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM control_events")
        .fetch_one(&mut s.conn)
        .await?;
    ctx.note(format!(
        "{CONTROL_WRITERS} racing check-then-insert writers → {rows} rows"
    ));
    ensure!(
        rows > 1,
        "the control did not show the failure: {rows} row(s) for one request key"
    );
    Ok(format!(
        "{rows} rows for one request key ({CONTROL_WRITERS} writers)"
    ))
}

/// Negative control: a database sequence with 3 of 10 transactions rolled back leaves 7 rows
/// with max 10, a gap the conversation counter does not have.
pub async fn control_sequence_gaps(ctx: &Ctx) -> Observed {
    let mut s = Scratch::create(ctx).await?;
    let outcome = sequence_gaps_in(ctx, &mut s.conn).await;
    s.drop_now(ctx).await?;
    outcome
}

async fn sequence_gaps_in(ctx: &Ctx, conn: &mut PgConnection) -> Observed {
    conn.execute("CREATE SEQUENCE control_seq").await?;
    conn.execute("CREATE TABLE control_seq_events (seq bigint PRIMARY KEY)")
        .await?;
    for i in 1..=10 {
        let mut tx = conn.begin().await?;
        sqlx::query("INSERT INTO control_seq_events VALUES (nextval('control_seq'))")
            .execute(&mut *tx)
            .await?;
        if [3, 6, 9].contains(&i) {
            tx.rollback().await?;
        } else {
            tx.commit().await?;
        }
    }
    let (n, m): (i64, i64) =
        sqlx::query_as("SELECT count(*), coalesce(max(seq), 0) FROM control_seq_events")
            .fetch_one(&mut *conn)
            .await?;
    ctx.note(format!(
        "10 transactions, 3 rolled back → {n} rows, max {m}"
    ));
    ensure!(n == 7 && m == 10, "{n} rows with max {m}");
    Ok(format!("{n} rows, max {m}"))
}

/// A transaction that holds a conversation's row lock and then idles, on a connection built
/// the way the server builds its own (`parley_store::pg::connect_options` with the timeout the
/// server reports), is ended by PostgreSQL within the bound; the send it blocked then goes
/// through. No session of the database is idle in a transaction for longer than the bound.
pub async fn stuck_transaction_bounded(ctx: &Ctx) -> Observed {
    ctx.needs_postgres()?;
    let Some(url) = ctx.target.database_url.clone() else {
        return Err(CheckError::NotRun(crate::context::NEEDS_DATABASE.into()));
    };
    let timeout_ms = ctx.target.limit("pg_idle_in_transaction_timeout_ms");
    ctx.note(format!(
        "server reports pg_idle_in_transaction_timeout_ms = {timeout_ms:?}"
    ));
    let timeout_ms = match timeout_ms {
        Some(t) if t > 0 => t as u64,
        other => {
            return Err(CheckError::Failed(format!(
                "the server sets no idle-in-transaction timeout: {other:?}"
            )))
        }
    };
    let bound_ms = timeout_ms + STUCK_SLACK_MS;
    let mut db = ctx.db().await?;
    let lingering: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
         AND state LIKE 'idle in transaction%' AND now() - state_change > $1 * interval '1 ms'",
    )
    .bind(bound_ms as f64)
    .fetch_one(&mut db)
    .await?;
    ctx.note(format!(
        "sessions idle in a transaction longer than {bound_ms} ms: {lingering}"
    ));
    ensure!(
        lingering == 0,
        "{lingering} sessions idle in a transaction for longer than {bound_ms} ms"
    );

    let ana = ctx.user("ana").await?;
    let conv = ctx.id("c");
    ana.create_conversation(&NewConversation::group(Vec::<String>::new()).with_conv_id(&conv))
        .await?;
    let options = connect_options(&url, timeout_ms)
        .map_err(|e| CheckError::Failed(format!("connect options: {e}")))?;
    let mut stuck = PgConnection::connect_with(&options).await?;
    let setting: String = sqlx::query_scalar("SHOW idle_in_transaction_session_timeout")
        .fetch_one(&mut stuck)
        .await?;
    ctx.note(format!(
        "stuck connection: idle_in_transaction_session_timeout = {setting}"
    ));
    stuck.execute("BEGIN").await?;
    sqlx::query(SEND_LOCK_SQL)
        .bind(&conv)
        .fetch_one(&mut stuck)
        .await?;
    let locked_at = Instant::now();
    ctx.note(format!(
        "stuck connection: BEGIN; {SEND_LOCK_SQL} ({conv}); then idle"
    ));

    // The blocked send waits longer than a default request timeout allows.
    let patient = Client::with_options(
        &ctx.target.base_url,
        ana.token(),
        ClientOptions {
            request_timeout_ms: bound_ms + STUCK_SLACK_MS,
            ..ClientOptions::default()
        },
    )?;
    let sent = tokio::time::timeout(
        Duration::from_millis(bound_ms),
        patient.send(&conv, "m-1", "after the stuck one"),
    )
    .await;
    let waited = locked_at.elapsed();
    let sent = match sent {
        Err(_) => {
            return Err(CheckError::Failed(format!(
                "the send stayed blocked for {bound_ms} ms: the stuck lock was not released"
            )))
        }
        Ok(r) => r?,
    };
    ctx.note(format!("send after {waited:?} → seq {}", sent.seq));
    ensure!(sent.seq == 2, "send: {sent:?}");
    ensure!(
        waited >= Duration::from_millis(timeout_ms / 2),
        "the send did not wait for the lock ({waited:?}): the lock was not held"
    );
    let after = stuck.execute("SELECT 1").await;
    ctx.note(format!("stuck connection afterwards: {after:?}"));
    ensure!(after.is_err(), "the stuck connection is still alive");
    Ok(format!(
        "timeout {timeout_ms} ms; the blocked send went through after {} ms; the holder was \
         ended; no session idle in a transaction longer than {bound_ms} ms",
        waited.as_millis()
    ))
}

/// Bumping the epoch (the log was rebuilt) invalidates every cursor: events-after with the old
/// epoch answers 409 EPOCH_CHANGED over HTTP and over WebSocket.
pub async fn epoch_invalidates_cursor(ctx: &Ctx) -> Observed {
    ctx.needs_postgres()?;
    let mut db = ctx.db().await?;
    let ana = ctx.user("ana").await?;
    let conv = ctx.id("c");
    ana.create_conversation(&NewConversation::group(Vec::<String>::new()).with_conv_id(&conv))
        .await?;
    ana.send(&conv, "m-1", "x").await?;
    let page = ana.events_after(&conv, 0, Some(1), None).await?;
    ensure!(page.epoch == 1 && page.head == 2, "before: {page:?}");
    sqlx::query("UPDATE conversations SET epoch = epoch + 1 WHERE conv_id = $1")
        .bind(&conv)
        .execute(&mut db)
        .await?;
    ctx.note(format!(
        "SQL: UPDATE conversations SET epoch = epoch + 1 ({conv})"
    ));
    let stale = refusal(&ana.events_after(&conv, 2, Some(1), Some(1)).await);
    ctx.note(format!("events after 2 at epoch 1 → {stale}"));
    ensure!(stale == "409 EPOCH_CHANGED", "stale cursor: {stale}");
    let fresh = ana.events_after(&conv, 0, Some(2), None).await?;
    ensure!(
        fresh.epoch == 2 && fresh.events.len() == 2,
        "refetch: epoch {} events {}",
        fresh.epoch,
        fresh.events.len()
    );
    let mut ws = Ws::connect(&ctx.target.base_url, ana.token()).await?;
    ws.send(
        serde_json::json!({"type": "sync", "req_id": 1, "conv_id": conv, "after": 2, "epoch": 1}),
    )
    .await?;
    let e = ws.next_of("error", FRAME_WAIT).await?;
    ctx.note(format!("ws sync at epoch 1 → {e}"));
    ensure!(e["code"] == "EPOCH_CHANGED" && e["req_id"] == 1, "ws: {e}");
    Ok("HTTP 409 EPOCH_CHANGED, WebSocket error EPOCH_CHANGED, refetch at epoch 2".into())
}

/// Longest wait for the send to block on the held lock.
const BLOCKED_WAIT_MS: u64 = 5_000;
/// Polling interval while waiting for the send to block.
const BLOCKED_POLL_MS: u64 = 20;

/// No push before commit: while a transaction of the check holds the conversation's row
/// lock, a send over WebSocket blocks in the database (observed: a session waits on the
/// check's), and the other member's socket gets no event up to a marker sent after that; once
/// the lock is released the ack and the push arrive, with the same seq.
pub async fn ack_after_commit(ctx: &Ctx) -> Observed {
    ctx.needs_postgres()?;
    let mut holder = ctx.db().await?;
    let mut db = ctx.db().await?;
    let ana = ctx.user("ana").await?;
    let ben = ctx.user("ben").await?;
    let conv = ctx.id("c");
    ana.create_conversation(&NewConversation::group([ctx.id("ben")]).with_conv_id(&conv))
        .await?;
    let mut sender = Ws::connect(&ctx.target.base_url, ana.token()).await?;
    let mut watcher = Ws::connect(&ctx.target.base_url, ben.token()).await?;
    let holder_pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut holder)
        .await?;
    holder.execute("BEGIN").await?;
    sqlx::query(SEND_LOCK_SQL)
        .bind(&conv)
        .fetch_one(&mut holder)
        .await?;
    ctx.note(format!(
        "holder (pid {holder_pid}): BEGIN; {SEND_LOCK_SQL} ({conv})"
    ));
    sender
        .send(
            serde_json::json!({"type": "send", "req_id": 1, "conv_id": conv,
                                 "client_msg_id": "m-1", "body": "hello"}),
        )
        .await?;
    let deadline = Instant::now() + Duration::from_millis(BLOCKED_WAIT_MS);
    loop {
        let blocked: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))",
        )
        .bind(holder_pid)
        .fetch_one(&mut db)
        .await?;
        if blocked > 0 {
            ctx.note(format!("{blocked} session(s) wait on the holder"));
            break;
        }
        if Instant::now() > deadline {
            holder.execute("ROLLBACK").await?;
            return Err(CheckError::Failed(format!(
                "the send never waited on the held lock within {BLOCKED_WAIT_MS} ms"
            )));
        }
        tokio::time::sleep(Duration::from_millis(BLOCKED_POLL_MS)).await;
    }
    watcher
        .send(serde_json::json!({"type": "ping", "req_id": "marker"}))
        .await?;
    let mut early = Vec::new();
    loop {
        let Some(v) = watcher.next_json(FRAME_WAIT).await? else {
            holder.execute("ROLLBACK").await?;
            return Err(CheckError::Failed("no pong to the marker".into()));
        };
        if v["type"] == "pong" {
            break;
        }
        early.push(v);
    }
    holder.execute("COMMIT").await?;
    ctx.note(format!(
        "watcher before the commit: {early:?}; holder COMMIT"
    ));
    ensure!(
        !early.iter().any(|v| v["type"] == "event"),
        "pushed before the commit: {early:?}"
    );
    let ack = sender.next_of("ack", FRAME_WAIT).await?;
    let push = watcher.next_of("event", FRAME_WAIT).await?;
    ctx.note(format!("after the commit: ack {ack}; push {push}"));
    ensure!(
        ack["req_id"] == 1 && ack["seq"] == 3 && ack["dup"] == false,
        "ack {ack}"
    );
    ensure!(
        push["event"]["seq"] == 3 && push["event"]["body"] == "hello",
        "push {push}"
    );
    Ok("the send blocked on the held lock; no event before it was released; then ack and push of seq 3".into())
}
