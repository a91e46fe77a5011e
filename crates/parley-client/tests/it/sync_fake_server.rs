//! The catch-up against a scripted HTTP server, for what a real server does only rarely: an
//! epoch change, a purge below the device's cursor, a log that keeps growing while it is read,
//! a server that stops making progress, a failure halfway. No database is needed.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use anyhow::{ensure, Context, Result};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use parley_client::{code, CatchUpOptions, Client, Event, SyncState};
use serde_json::{json, Value};
use tokio::net::TcpListener;

/// One scripted conversation: events `min_seq..=head` all visible, unless `hidden`.
#[derive(Debug, Clone)]
struct Conv {
    epoch: i64,
    min_seq: i64,
    head: i64,
    hidden: Vec<(i64, i64)>,
    /// Answers of events-after still to fail with 503 UNAVAILABLE.
    fail_next: u32,
    /// Each answer reports the head this far beyond what it returns (a log written faster than
    /// it is read).
    running_ahead: i64,
    /// Answers claim to have examined nothing (`through_seq = after`).
    stuck: bool,
}

impl Conv {
    fn new(head: i64) -> Self {
        Self {
            epoch: 1,
            min_seq: 1,
            head,
            hidden: Vec::new(),
            fail_next: 0,
            running_ahead: 0,
            stuck: false,
        }
    }

    fn visible(&self, seq: i64) -> bool {
        !self
            .hidden
            .iter()
            .any(|(lo, hi)| (*lo..=*hi).contains(&seq))
    }
}

#[derive(Default)]
struct Script {
    convs: BTreeMap<String, Conv>,
    /// The `since` of every feed call, in order.
    feed_calls: Vec<Option<String>>,
    /// `(conv_id, after)` of every events-after call, in order.
    events_calls: Vec<(String, i64)>,
}

type Shared = Arc<Mutex<Script>>;

fn event(conv_id: &str, epoch: i64, seq: i64) -> Value {
    json!({
        "conv_id": conv_id, "seq": seq, "kind": "msg", "created_at": "2024-01-01T00:00:00Z",
        "message_id": format!("e{epoch}-{seq}"), "sender_user": "ben", "sender_device": "d1",
        "client_msg_id": format!("c{seq}"), "body": "hi"
    })
}

fn conversation(conv_id: &str, c: &Conv) -> Value {
    json!({
        "conv_id": conv_id, "kind": "group", "delivery_mode": "push", "head": c.head,
        "min_seq": c.min_seq, "epoch": c.epoch, "read_seq": 0, "unread": 0,
        "recall_window_ms": 120000
    })
}

fn refusal(status: StatusCode, code: &str) -> Response {
    let body = json!({"error": {"code": code, "message": code}});
    (status, Json(body)).into_response()
}

/// Every conversation, every time: the feed may list conversations that did not change.
async fn feed(State(script): State<Shared>, Query(q): Query<HashMap<String, String>>) -> Response {
    let mut script = script.lock().unwrap();
    script.feed_calls.push(q.get("since").cloned());
    let conversations: Vec<Value> = script
        .convs
        .iter()
        .map(|(id, c)| conversation(id, c))
        .collect();
    let token = format!("t{}", script.feed_calls.len());
    Json(json!({"conversations": conversations, "sync_token": token})).into_response()
}

async fn one(State(script): State<Shared>, Path(conv_id): Path<String>) -> Response {
    let script = script.lock().unwrap();
    match script.convs.get(&conv_id) {
        Some(c) => Json(conversation(&conv_id, c)).into_response(),
        None => refusal(StatusCode::NOT_FOUND, code::NOT_MEMBER),
    }
}

/// Events-after as SPEC §5 describes it.
async fn events(
    State(script): State<Shared>,
    Path(conv_id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let mut script = script.lock().unwrap();
    let after: i64 = q.get("after").and_then(|v| v.parse().ok()).unwrap_or(0);
    let limit: i64 = q.get("limit").and_then(|v| v.parse().ok()).unwrap_or(50);
    script.events_calls.push((conv_id.clone(), after));
    let Some(c) = script.convs.get_mut(&conv_id) else {
        return refusal(StatusCode::NOT_FOUND, code::NOT_MEMBER);
    };
    if c.fail_next > 0 {
        c.fail_next -= 1;
        return refusal(StatusCode::SERVICE_UNAVAILABLE, code::UNAVAILABLE);
    }
    let epoch: Option<i64> = q.get("epoch").and_then(|v| v.parse().ok());
    if epoch.is_some_and(|e| e != c.epoch) {
        return refusal(StatusCode::CONFLICT, code::EPOCH_CHANGED);
    }
    let truncated = after < c.min_seq - 1;
    let mut page = Vec::new();
    let mut through_seq = c.head;
    for seq in (after + 1).max(c.min_seq)..=c.head {
        if c.visible(seq) {
            page.push(event(&conv_id, c.epoch, seq));
            if page.len() as i64 == limit {
                through_seq = seq;
                break;
            }
        }
    }
    if c.stuck {
        page.clear();
        through_seq = after;
    }
    let head = c.head + c.running_ahead;
    if c.running_ahead > 0 {
        // The log grows by what was just read.
        c.head = head.max(through_seq + c.running_ahead);
    }
    Json(json!({
        "events": page, "head": head, "min_seq": c.min_seq, "epoch": c.epoch,
        "through_seq": through_seq, "truncated": truncated, "next_before": null
    }))
    .into_response()
}

struct Fake {
    script: Shared,
    client: Client,
}

impl Fake {
    async fn start(convs: &[(&str, Conv)]) -> Result<Self> {
        let script: Shared = Arc::default();
        {
            let mut s = script.lock().unwrap();
            for (id, c) in convs {
                s.convs.insert((*id).to_owned(), c.clone());
            }
        }
        let app = Router::new()
            .route("/v1/conversations", get(feed))
            .route("/v1/conversations/{conv_id}", get(one))
            .route("/v1/conversations/{conv_id}/events", get(events))
            .with_state(script.clone());
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let base_url = format!("http://{}", listener.local_addr()?);
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok(Self {
            script,
            client: Client::new(&base_url, "tok")?,
        })
    }

    fn edit(&self, conv_id: &str, f: impl FnOnce(&mut Conv)) {
        f(self.script.lock().unwrap().convs.get_mut(conv_id).unwrap());
    }

    fn events_calls(&self) -> Vec<(String, i64)> {
        std::mem::take(&mut self.script.lock().unwrap().events_calls)
    }
}

fn seqs(events: &[Event]) -> Vec<i64> {
    events.iter().map(|e| e.seq).collect()
}

fn log(state: &SyncState, conv_id: &str) -> Result<Vec<i64>> {
    Ok(seqs(state.events(conv_id).context("unknown conversation")?))
}

#[tokio::test]
async fn a_long_log_comes_in_pages_and_hidden_ranges_pass_the_cursor() -> Result<()> {
    let mut c = Conv::new(1_200);
    c.hidden = vec![(101, 700)];
    let fake = Fake::start(&[("c", c)]).await?;
    let mut state = SyncState::new();
    let report = fake.client.catch_up(&mut state).await?;
    ensure!(report.pages == 2 && report.events == 600, "{report:?}");
    let kept = log(&state, "c")?;
    ensure!(kept.len() == 600 && kept[99] == 100 && kept[100] == 701);
    // The second page starts after the last event of the full first page.
    let after: Vec<i64> = fake.events_calls().iter().map(|(_, a)| *a).collect();
    ensure!(after == [0, 1_100], "{after:?}");
    ensure!(state.cursor("c") == Some((1, 1_200)));

    // Smaller pages, from a fresh state.
    let mut state = SyncState::new();
    let options = CatchUpOptions {
        page_len: 100,
        ..CatchUpOptions::default()
    };
    let report = fake.client.catch_up_with(&mut state, options).await?;
    ensure!(report.pages == 6 && report.events == 600, "{report:?}");
    Ok(())
}

#[tokio::test]
async fn an_epoch_change_restarts_the_conversation() -> Result<()> {
    let fake = Fake::start(&[("c", Conv::new(10)), ("d", Conv::new(3))]).await?;
    let mut state = SyncState::new();
    fake.client.catch_up(&mut state).await?;
    ensure!(log(&state, "c")? == (1..=10).collect::<Vec<_>>());
    fake.events_calls();

    fake.edit("c", |c| {
        c.epoch = 2;
        c.head = 4;
    });
    let report = fake.client.catch_up(&mut state).await?;
    ensure!(
        report.epoch_resets == ["c"] && report.changed == ["c"],
        "{report:?}"
    );
    ensure!(log(&state, "c")? == [1, 2, 3, 4]);
    let ids: Vec<_> = state
        .events("c")
        .unwrap_or_default()
        .iter()
        .map(|e| e.message_id.clone())
        .collect();
    ensure!(ids
        .iter()
        .all(|id| id.as_deref().is_some_and(|id| id.starts_with("e2-"))));
    ensure!(state.cursor("c") == Some((2, 4)));
    // The refused call, then the new epoch from 0.
    let calls = fake.events_calls();
    ensure!(calls == [("c".into(), 10), ("c".into(), 0)], "{calls:?}");
    Ok(())
}

#[tokio::test]
async fn a_purge_below_the_cursor_restarts_the_log_at_min_seq() -> Result<()> {
    let fake = Fake::start(&[("c", Conv::new(10))]).await?;
    let mut state = SyncState::new();
    fake.client.catch_up(&mut state).await?;
    fake.edit("c", |c| {
        c.min_seq = 20;
        c.head = 25;
    });
    let report = fake.client.catch_up(&mut state).await?;
    ensure!(
        report.truncated == ["c"] && report.events == 6,
        "{report:?}"
    );
    ensure!(log(&state, "c")? == [20, 21, 22, 23, 24, 25]);
    Ok(())
}

#[tokio::test]
async fn a_conversation_new_to_the_device_starts_at_min_seq() -> Result<()> {
    let mut c = Conv::new(30);
    c.min_seq = 11;
    let fake = Fake::start(&[("c", c)]).await?;
    let mut state = SyncState::new();
    let report = fake.client.catch_up(&mut state).await?;
    ensure!(
        report.truncated.is_empty() && report.events == 20,
        "{report:?}"
    );
    ensure!(log(&state, "c")?.first() == Some(&11));
    Ok(())
}

#[tokio::test]
async fn the_page_loop_is_bounded() -> Result<()> {
    let mut growing = Conv::new(1_000);
    growing.running_ahead = 1_000;
    let mut stuck = Conv::new(50);
    stuck.stuck = true;
    let fake = Fake::start(&[("growing", growing), ("stuck", stuck), ("ok", Conv::new(5))]).await?;
    let mut state = SyncState::new();
    let report = fake.client.catch_up(&mut state).await?;
    ensure!(report.unfinished == ["growing", "stuck"], "{report:?}");
    let calls = fake.events_calls();
    let count = |id: &str| calls.iter().filter(|(c, _)| c == id).count();
    // The first answer's head was 2,000 beyond the cursor: 4 pages plus the slack.
    ensure!(count("growing") == 4 + 3, "{calls:?}");
    ensure!(count("stuck") == 1, "{calls:?}");
    ensure!(state.conversation("growing").is_some_and(|c| c.stale));
    ensure!(state.token().is_some(), "the others completed");

    // Unfinished conversations continue from their cursor next time.
    fake.edit("growing", |c| c.running_ahead = 0);
    fake.edit("stuck", |c| c.stuck = false);
    let report = fake.client.catch_up(&mut state).await?;
    ensure!(report.unfinished.is_empty(), "{report:?}");
    for id in ["growing", "stuck"] {
        let kept = log(&state, id)?;
        ensure!(kept.windows(2).all(|w| w[1] == w[0] + 1) && kept.first() == Some(&1));
        ensure!(state
            .conversation(id)
            .is_some_and(|c| !c.stale && c.cursor == c.head));
    }
    Ok(())
}

#[tokio::test]
async fn a_failure_keeps_progress_and_the_token_and_the_next_call_resumes() -> Result<()> {
    let fake = Fake::start(&[("a", Conv::new(700)), ("b", Conv::new(3))]).await?;
    let mut state = SyncState::new();
    fake.client.catch_up(&mut state).await?;
    let token = state.token().map(str::to_owned);
    fake.edit("a", |c| {
        c.head = 1_500;
        c.fail_next = 0;
    });
    fake.edit("b", |c| {
        c.head = 5;
        c.fail_next = 1;
    });
    let e = fake.client.catch_up(&mut state).await.unwrap_err();
    ensure!(e.code() == Some(code::UNAVAILABLE), "{e}");
    ensure!(
        state.token().map(str::to_owned) == token,
        "the token did not move"
    );
    ensure!(
        state.cursor("a") == Some((1, 1_500)),
        "a's progress is kept"
    );

    let report = fake.client.catch_up(&mut state).await?;
    ensure!(report.events == 2, "only b's two events remain: {report:?}");
    ensure!(log(&state, "a")? == (1..=1_500).collect::<Vec<_>>());
    ensure!(log(&state, "b")? == [1, 2, 3, 4, 5]);
    let since: Vec<_> = fake.script.lock().unwrap().feed_calls.clone();
    ensure!(
        since[1] == since[2],
        "the failed call's token is asked again: {since:?}"
    );
    Ok(())
}
