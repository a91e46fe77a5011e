//! The second seed's case end to end over HTTP, on a server configured with the seed's teaching
//! limits (6-byte message body, 4096-byte request): group `c-a` of u-a and u-b at head 8, u-c a
//! logged-in non-member, then m-9 "你好", the history pages 9,8,7 / 6,5,4, the hidden-target 404,
//! the replay, the mismatch, the sender field and both size limits.

use std::collections::HashSet;

use anyhow::{ensure, Context, Result};
use parley_client::{code, Client, Method, NewConversation, RawResponse};
use parley_domain::Limits;
use parley_testkit::{test_on_both_stores, ServerConfig, Sql, StoreKind, TestServer};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const CONV: &str = "c-a";
const BODY_BYTES_MAX: usize = 6;
const REQUEST_BYTES_MAX: usize = 4096;

fn teaching_config() -> ServerConfig {
    ServerConfig {
        limits: Limits {
            body_bytes_max: BODY_BYTES_MAX,
            request_bytes_max: REQUEST_BYTES_MAX,
        },
        ..ServerConfig::default()
    }
}

struct Seed {
    server: TestServer,
    ua: Client,
    ub: Client,
    uc: Client,
}

/// c-a created by u-a with u-b (join@1 u-a, join@2 u-b), then six messages of u-a: head 8.
async fn seed(store: StoreKind) -> Result<Seed> {
    let server = TestServer::start_on(store, teaching_config()).await;
    let ua = server.user_with_device("u-a").await;
    let ub = server.user_with_device("u-b").await;
    let uc = server.user_with_device("u-c").await;
    let conv = ua
        .create_conversation(&NewConversation::group(["u-b"]).with_conv_id(CONV))
        .await?;
    ensure!(conv.conv_id == CONV && conv.head == 2, "created: {conv:?}");
    for seq in 3..=8 {
        let ack = ua
            .send(CONV, &format!("m-{seq}"), &format!("msg{seq}"))
            .await?;
        ensure!(ack.seq == seq && !ack.dup, "m-{seq}: {ack:?}");
    }
    Ok(Seed { server, ua, ub, uc })
}

/// `(next_seq, count of events)` of c-a, read by SQL.
async fn counter_and_rows(sql: &Sql) -> Result<(i64, i64)> {
    let next: i64 = sql
        .one(
            "SELECT next_seq FROM conversations WHERE conv_id = $1",
            &[CONV.into()],
        )
        .await?;
    let rows: i64 = sql
        .one(
            "SELECT count(*) FROM events WHERE conv_id = $1",
            &[CONV.into()],
        )
        .await?;
    Ok((next, rows))
}

/// The whole log as u-a sees it, as raw JSON, so any change at all is noticed.
async fn log_json(c: &Client) -> Result<Value> {
    let (status, json) = c
        .raw(
            Method::GET,
            &format!("/v1/conversations/{CONV}/events?after=0&limit=500"),
        )
        .send()
        .await?;
    ensure!(status == 200, "events: {status} {json}");
    Ok(json)
}

async fn post_message(c: &Client, conv: &str, body: impl Into<Vec<u8>>) -> Result<RawResponse> {
    Ok(
        c.raw(Method::POST, &format!("/v1/conversations/{conv}/messages"))
            .body(body)
            .response()
            .await?,
    )
}

fn error_code(r: &RawResponse) -> &str {
    r.json["error"]["code"].as_str().unwrap_or("<none>")
}

fn seqs(page: &Value) -> Vec<i64> {
    page["events"]
        .as_array()
        .map(|es| es.iter().filter_map(|e| e["seq"].as_i64()).collect())
        .unwrap_or_default()
}

test_on_both_stores!(
    #[tokio::test]
    check_seed_m9_accepted_oversize_refused_and_pages_987_654
);
/// The accepted m-9, the refused 9-byte body, and both history pages of the seed.
async fn check_seed_m9_accepted_oversize_refused_and_pages_987_654(store: StoreKind) -> Result<()> {
    let Seed { server, ua, ub, .. } = seed(store).await?;
    let sql = server.sql();
    ensure!(counter_and_rows(sql).await? == (9, 8), "head is not 8");

    // "你好" is 6 UTF-8 bytes: exactly the limit.
    ensure!("你好".len() == 6 && "你好呀".len() == 9);
    let r = post_message(
        &ua,
        CONV,
        json!({"client_msg_id": "m-9", "body": "你好"}).to_string(),
    )
    .await?;
    ensure!(r.status == 200, "m-9: {} {}", r.status, r.text);
    ensure!(
        r.json["seq"] == 9 && r.json["dup"] == false && r.json["conv_id"] == CONV,
        "m-9 ack: {}",
        r.text
    );
    let message_id = r.json["message_id"]
        .as_str()
        .context("m-9 ack without message_id")?
        .to_owned();
    ensure!(counter_and_rows(sql).await? == (10, 9));
    let log_after_m9 = log_json(&ua).await?;

    // "你好呀" is 9 bytes: 413 BODY_TOO_LARGE, under a fresh request key and under m-9 alike
    // (413 outranks the 409 the reused key would otherwise get).
    for key in ["m-10", "m-9"] {
        let r = post_message(
            &ua,
            CONV,
            json!({"client_msg_id": key, "body": "你好呀"}).to_string(),
        )
        .await?;
        ensure!(
            r.status == 413 && error_code(&r) == code::BODY_TOO_LARGE,
            "{key} 你好呀: {} {}",
            r.status,
            r.text
        );
        ensure!(
            counter_and_rows(sql).await? == (10, 9),
            "a refused body wrote something"
        );
        ensure!(log_json(&ua).await? == log_after_m9, "the log changed");
    }

    // History as u-a: newest page of 3, then the exclusive cursor 7.
    let r = ua
        .raw(
            Method::GET,
            &format!("/v1/conversations/{CONV}/events?limit=3"),
        )
        .response()
        .await?;
    ensure!(r.status == 200, "page 1: {} {}", r.status, r.text);
    ensure!(seqs(&r.json) == vec![9, 8, 7], "page 1: {}", r.text);
    ensure!(r.json["next_before"] == 7, "page 1 next_before: {}", r.text);
    ensure!(r.json["head"] == 9, "page 1 head: {}", r.text);
    let top = &r.json["events"][0];
    ensure!(
        top["kind"] == "msg"
            && top["body"] == "你好"
            && top["client_msg_id"] == "m-9"
            && top["message_id"] == message_id.as_str()
            && top["sender_user"] == "u-a"
            && top["sender_device"] == "d1",
        "event 9: {top}"
    );
    let r = ua
        .raw(
            Method::GET,
            &format!("/v1/conversations/{CONV}/events?before=7&limit=3"),
        )
        .response()
        .await?;
    ensure!(r.status == 200, "page 2: {} {}", r.status, r.text);
    ensure!(seqs(&r.json) == vec![6, 5, 4], "page 2: {}", r.text);
    ensure!(r.json["next_before"] == 4, "page 2 next_before: {}", r.text);

    // u-b (joined at 2) reads the same pages.
    let page = ub.history(CONV, None, Some(3)).await?;
    let got: Vec<i64> = page.events.iter().map(|e| e.seq).collect();
    ensure!(
        got == vec![9, 8, 7] && page.next_before == Some(7),
        "u-b: {page:?}"
    );
    let page = ub.history(CONV, Some(7), Some(3)).await?;
    let got: Vec<i64> = page.events.iter().map(|e| e.seq).collect();
    ensure!(got == vec![6, 5, 4], "u-b page 2: {page:?}");

    // Nothing held m-10: it now takes seq 10 as a first send.
    let ack = ua.send(CONV, "m-10", "x").await?;
    ensure!(ack.seq == 10 && !ack.dup, "m-10: {ack:?}");
    Ok(())
}

test_on_both_stores!(
    #[tokio::test]
    check_seed_non_member_answer_equals_unknown_conversation
);
/// u-c, logged in but not a member, gets from c-a byte for byte what anyone gets from a
/// conversation that does not exist, on send, events and get conversation.
async fn check_seed_non_member_answer_equals_unknown_conversation(store: StoreKind) -> Result<()> {
    let Seed { server, ua, uc, .. } = seed(store).await?;
    let m9 = ua.send(CONV, "m-9", "你好").await?;
    ensure!(m9.seq == 9);
    let sql = server.sql();
    let before = counter_and_rows(sql).await?;

    let send_body = json!({"client_msg_id": "m-9", "body": "你好"}).to_string();
    let probes: Vec<(Method, String, Option<String>)> = vec![
        (Method::POST, "messages".into(), Some(send_body)),
        (Method::GET, "events?after=0".into(), None),
        (Method::GET, "events?limit=3".into(), None),
        (Method::GET, "events?before=10&limit=3".into(), None),
        (Method::GET, String::new(), None),
    ];
    for (method, rest, body) in probes {
        let path_for = |conv: &str| {
            if rest.is_empty() {
                format!("/v1/conversations/{conv}")
            } else {
                format!("/v1/conversations/{conv}/{rest}")
            }
        };
        let mut hidden = uc.raw(method.clone(), &path_for(CONV));
        let mut missing = uc.raw(method.clone(), &path_for("c-nope"));
        if let Some(b) = &body {
            hidden = hidden.body(b.clone());
            missing = missing.body(b.clone());
        }
        let hidden = hidden.response().await?;
        let missing = missing.response().await?;
        ensure!(
            hidden.status == 404 && error_code(&hidden) == code::NOT_MEMBER,
            "{method} {rest} on c-a: {} {}",
            hidden.status,
            hidden.text
        );
        ensure!(
            hidden.status == missing.status && hidden.text == missing.text,
            "{method} {rest}: c-a answered {} {} but a missing conversation {} {}",
            hidden.status,
            hidden.text,
            missing.status,
            missing.text
        );
    }
    ensure!(
        counter_and_rows(sql).await? == before,
        "u-c's probes wrote something"
    );
    Ok(())
}

test_on_both_stores!(
    #[tokio::test]
    check_seed_replay_mismatch_and_sender_field
);
/// An identical retry of m-9 is answered from the log; a changed body under m-9 is a mismatch;
/// a request naming a sender is refused. None of them writes.
async fn check_seed_replay_mismatch_and_sender_field(store: StoreKind) -> Result<()> {
    let Seed { server, ua, .. } = seed(store).await?;
    let sql = server.sql();
    let first = ua.send(CONV, "m-9", "你好").await?;
    ensure!(first.seq == 9 && !first.dup, "m-9: {first:?}");
    let log = log_json(&ua).await?;

    let again = ua.send(CONV, "m-9", "你好").await?;
    ensure!(
        again.dup && again.seq == 9 && again.message_id == first.message_id,
        "replay: {again:?} vs {first:?}"
    );

    let r = post_message(
        &ua,
        CONV,
        json!({"client_msg_id": "m-9", "body": "再见"}).to_string(),
    )
    .await?;
    ensure!(
        r.status == 409 && error_code(&r) == code::IDEMPOTENCY_MISMATCH,
        "changed body: {} {}",
        r.status,
        r.text
    );

    let r = post_message(
        &ua,
        CONV,
        r#"{"client_msg_id":"m-10","body":"x","sender_user":"u-b"}"#,
    )
    .await?;
    ensure!(
        r.status == 400 && error_code(&r) == code::BAD_REQUEST,
        "sender field: {} {}",
        r.status,
        r.text
    );

    ensure!(
        counter_and_rows(sql).await? == (10, 9),
        "something was written"
    );
    ensure!(log_json(&ua).await? == log, "the log changed");
    // m-9 is still the original, not overwritten by the mismatch.
    let page = ua.history(CONV, None, Some(1)).await?;
    let top = page.events.first().context("empty page")?;
    ensure!(
        top.seq == 9 && top.body.as_deref() == Some("你好"),
        "event 9: {top:?}"
    );
    // m-10 was never taken by the refused request; the sender is u-a, from the token.
    let ack = ua.send(CONV, "m-10", "x").await?;
    ensure!(ack.seq == 10 && !ack.dup, "m-10: {ack:?}");
    let page = ua.history(CONV, None, Some(1)).await?;
    let top = page.events.first().context("empty page")?;
    ensure!(top.sender_user.as_deref() == Some("u-a"), "{top:?}");
    Ok(())
}

/// A send request padded with JSON whitespace: valid, with a 1-byte message body, and exactly
/// `total` bytes long.
fn padded_send(key: &str, total: usize) -> Vec<u8> {
    let head = format!(r#"{{"client_msg_id":"{key}","#);
    let tail = r#""body":"x"}"#;
    let pad = total - head.len() - tail.len();
    let s = format!("{head}{}{tail}", " ".repeat(pad));
    assert_eq!(s.len(), total);
    s.into_bytes()
}

test_on_both_stores!(
    #[tokio::test]
    check_seed_request_over_4096_bytes_refused
);
/// 4097 bytes of an otherwise valid request: 413 REQUEST_TOO_LARGE and nothing written, also
/// when the body arrives chunked without a length; 4096 bytes are accepted.
async fn check_seed_request_over_4096_bytes_refused(store: StoreKind) -> Result<()> {
    let Seed { server, ua, .. } = seed(store).await?;
    let sql = server.sql();
    let m9 = ua.send(CONV, "m-9", "你好").await?;
    ensure!(m9.seq == 9);
    let log = log_json(&ua).await?;

    let r = post_message(&ua, CONV, padded_send("m-10", REQUEST_BYTES_MAX + 1)).await?;
    ensure!(
        r.status == 413 && error_code(&r) == code::REQUEST_TOO_LARGE,
        "4097 bytes: {} {}",
        r.status,
        r.text
    );
    ensure!(
        counter_and_rows(sql).await? == (10, 9),
        "something was written"
    );

    // The same without Content-Length: chunked transfer over a plain socket.
    let (status, text) = chunked_post(
        server.base_url(),
        ua.token(),
        &format!("/v1/conversations/{CONV}/messages"),
        &padded_send("m-10", REQUEST_BYTES_MAX + 1),
    )
    .await?;
    ensure!(
        status == 413 && text.contains(code::REQUEST_TOO_LARGE),
        "chunked 4097 bytes: {status} {text}"
    );
    ensure!(
        counter_and_rows(sql).await? == (10, 9),
        "something was written"
    );
    ensure!(log_json(&ua).await? == log, "the log changed");

    let r = post_message(&ua, CONV, padded_send("m-10", REQUEST_BYTES_MAX)).await?;
    ensure!(r.status == 200, "4096 bytes: {} {}", r.status, r.text);
    ensure!(r.json["seq"] == 10 && r.json["dup"] == false, "{}", r.text);
    Ok(())
}

/// POSTs `body` with `Transfer-Encoding: chunked` in 512-byte chunks; answers the status and the
/// raw answer text.
async fn chunked_post(
    base_url: &str,
    token: &str,
    path: &str,
    body: &[u8],
) -> Result<(u16, String)> {
    let addr = base_url.trim_start_matches("http://");
    let mut sock = tokio::net::TcpStream::connect(addr).await?;
    let mut req = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    )
    .into_bytes();
    for chunk in body.chunks(512) {
        req.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        req.extend_from_slice(chunk);
        req.extend_from_slice(b"\r\n");
    }
    req.extend_from_slice(b"0\r\n\r\n");
    sock.write_all(&req).await?;
    let mut answer = Vec::new();
    // The server may close after answering; whatever arrived is the answer.
    let _ = sock.read_to_end(&mut answer).await;
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .context("no status line")?;
    Ok((status, text))
}

test_on_both_stores!(
    #[tokio::test]
    check_seed_log_stays_gapless_through_refusals
);
/// The seed's whole case in one log: after every refusal the seqs are still exactly 1..=head.
async fn check_seed_log_stays_gapless_through_refusals(store: StoreKind) -> Result<()> {
    let Seed { server, ua, ub, uc } = seed(store).await?;
    ua.send(CONV, "m-9", "你好").await?;
    let _ = ua.send(CONV, "m-10", "你好呀").await;
    let _ = uc.send(CONV, "m-11", "hi").await;
    let _ = ua.send(CONV, "m-9", "other").await;
    let ack = ub.send(CONV, "m-1", "ok").await?;
    ensure!(ack.seq == 10 && !ack.dup, "u-b: {ack:?}");
    let seqs: Vec<i64> = server
        .sql()
        .column(
            "SELECT seq FROM events WHERE conv_id = $1 ORDER BY seq",
            &[CONV.into()],
        )
        .await?;
    ensure!(seqs == (1..=10).collect::<Vec<i64>>(), "seqs: {seqs:?}");
    let keys: HashSet<Option<String>> = server
        .sql()
        .column(
            "SELECT client_msg_id FROM events WHERE conv_id = $1 AND kind = 'msg'",
            &[CONV.into()],
        )
        .await?
        .into_iter()
        .collect();
    ensure!(keys.len() == 8, "distinct keys: {keys:?}");
    ensure!(counter_and_rows(server.sql()).await? == (11, 10), "counter");
    Ok(())
}
