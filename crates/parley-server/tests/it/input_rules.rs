//! Input rules that hold on both stores and on both transports: texts no store can keep, numbers
//! written one way, ids that a URL would resolve away, the media type of bodies, and sync tokens
//! that no answer of this server handed out. Each refusal is a 400 (or 415) that writes nothing.

use std::time::Duration;

use crate::http_contract::expect_error;
use crate::ws_support::Ws;
use anyhow::{ensure, Result};
use parley_client::{code, Client, Method, NewConversation, RawResponse};
use parley_testkit::{test_on_both_stores, ServerConfig, Sql, StoreKind, TestServer};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(5);

async fn post(c: &Client, path: &str, body: &Value) -> Result<RawResponse> {
    Ok(c.raw(Method::POST, path).json(body).response().await?)
}

async fn get(c: &Client, path: &str) -> Result<RawResponse> {
    Ok(c.raw(Method::GET, path).response().await?)
}

/// The error frame answering `frame`, or a failure naming what came instead.
async fn ws_error(ws: &mut Ws, frame: Value) -> Result<Value> {
    ws.send(frame.clone()).await?;
    let answer = ws.next_json(WAIT).await?;
    let Some(answer) = answer else {
        anyhow::bail!("no answer to {frame}");
    };
    ensure!(
        answer["type"] == "error" && answer["req_id"] == frame["req_id"],
        "{frame}: answered {answer}"
    );
    Ok(answer)
}

/// Rows of the tables a refused request could have written.
async fn written(sql: &Sql) -> Result<(i64, i64, i64)> {
    let events: i64 = sql.one("SELECT count(*) FROM events", &[]).await?;
    let convs: i64 = sql.one("SELECT count(*) FROM conversations", &[]).await?;
    let users: i64 = sql.one("SELECT count(*) FROM users", &[]).await?;
    Ok((events, convs, users))
}

test_on_both_stores!(
    #[tokio::test]
    check_zero_character_400_on_http_and_ws
);
/// U+0000 in a message body, a title or a display name is 400 `BAD_REQUEST` over HTTP and over
/// WebSocket, on both stores, and nothing is written. (PostgreSQL cannot store it and used to
/// answer 503 `UNAVAILABLE`, which clients retry forever; SQLite stored it.)
async fn check_zero_character_400_on_http_and_ws(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ana = server.user_with_device("u-ana").await;
    server.user_with_device("u-ben").await;
    ana.create_conversation(&NewConversation::group(["u-ben"]).with_conv_id("c-1"))
        .await?;
    let before = written(server.sql()).await?;

    let send = "/v1/conversations/c-1/messages";
    for body in [
        json!({"client_msg_id": "m-0", "body": "a\u{0}b"}),
        json!({"client_msg_id": "m-0", "body": "\u{0}"}),
        json!({"client_msg_id": "m-\u{0}", "body": "hi"}),
    ] {
        let r = post(&ana, send, &body).await?;
        expect_error(&r, 400, code::BAD_REQUEST, &format!("send {body}"))?;
    }
    let r = post(
        &ana,
        "/v1/conversations",
        &json!({"kind": "group", "members": ["u-ben"], "conv_id": "c-2", "title": "t\u{0}"}),
    )
    .await?;
    expect_error(&r, 400, code::BAD_REQUEST, "title")?;
    let admin = server.client(server.admin_token());
    let r = post(
        &admin,
        "/v1/admin/users",
        &json!({"user_id": "u-cai", "display_name": "c\u{0}i"}),
    )
    .await?;
    expect_error(&r, 400, code::BAD_REQUEST, "display_name")?;

    let mut ws = Ws::connect(server.base_url(), ana.token()).await?;
    let answer = ws_error(
        &mut ws,
        json!({"type": "send", "req_id": "z", "conv_id": "c-1", "client_msg_id": "m-1",
               "body": "a\u{0}b"}),
    )
    .await?;
    ensure!(answer["code"] == code::BAD_REQUEST, "ws send: {answer}");

    ensure!(
        written(server.sql()).await? == before,
        "a refused request wrote"
    );
    // The same texts without the zero character go through.
    ensure!(ana.send("c-1", "m-0", "a b").await?.seq == 3, "plain send");
    Ok(())
}

test_on_both_stores!(
    #[tokio::test]
    check_numbers_are_read_alike_on_http_and_ws
);
/// A cursor, an epoch or a seq is a whole number written as JSON writes it: HTTP refuses
/// `after=-1`, `+3` and `03` and WebSocket refuses `after: -5`, each with 400.
async fn check_numbers_are_read_alike_on_http_and_ws(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ana = server.user_with_device("u-ana").await;
    server.user_with_device("u-ben").await;
    ana.create_conversation(&NewConversation::group(["u-ben"]).with_conv_id("c-1"))
        .await?;
    let sent = ana.send("c-1", "m-1", "hi").await?;
    ensure!(sent.seq == 3, "{sent:?}");
    let before = written(server.sql()).await?;

    for seq in ["+3", "03", "-3", "3.0", "%2B3"] {
        let path = format!("/v1/conversations/c-1/events/{seq}/recall");
        let r = ana.raw(Method::POST, &path).response().await?;
        expect_error(&r, 400, code::BAD_REQUEST, &path)?;
    }
    for q in [
        "after=-1",
        "after=%2B1",
        "after=01",
        "after=0&epoch=01",
        "after=0&epoch=-1",
        "before=%2B3",
        "limit=05",
        "limit=%2B5",
    ] {
        let r = get(&ana, &format!("/v1/conversations/c-1/events?{q}")).await?;
        expect_error(&r, 400, code::BAD_REQUEST, q)?;
    }
    let mut ws = Ws::connect(server.base_url(), ana.token()).await?;
    for (req_id, fields) in [
        ("a", json!({"after": -5})),
        ("e", json!({"after": 0, "epoch": -1})),
        ("l", json!({"after": 0, "limit": 0})),
        ("f", json!({"after": 0.5})),
    ] {
        let mut frame = json!({"type": "sync", "req_id": req_id, "conv_id": "c-1"});
        if let (Some(frame), Some(fields)) = (frame.as_object_mut(), fields.as_object()) {
            frame.extend(fields.clone());
        }
        let answer = ws_error(&mut ws, frame).await?;
        ensure!(answer["code"] == code::BAD_REQUEST, "{req_id}: {answer}");
    }
    ensure!(
        written(server.sql()).await? == before,
        "a refused request wrote"
    );
    // The plain spellings work on both.
    let r = ana
        .raw(Method::POST, "/v1/conversations/c-1/events/3/recall")
        .response()
        .await?;
    ensure!(r.status == 200, "recall 3: {} {}", r.status, r.text);
    ws.send(json!({"type": "sync", "req_id": "ok", "conv_id": "c-1", "after": 0, "limit": 4294967296_u64}))
        .await?;
    let ack = ws.next_of("ack", WAIT).await?;
    ensure!(ack["req_id"] == "ok" && ack["head"] == 4, "{ack}");
    Ok(())
}

test_on_both_stores!(
    #[tokio::test]
    check_dot_ids_400
);
/// `.` and `..` are no ids: a URL would resolve them away, so they could never be addressed.
async fn check_dot_ids_400(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ana = server.user_with_device("u-ana").await;
    let admin = server.client(server.admin_token());
    let before = written(server.sql()).await?;
    for dots in [".", ".."] {
        let r = post(
            &ana,
            "/v1/conversations",
            &json!({"kind": "group", "members": [], "conv_id": dots}),
        )
        .await?;
        expect_error(&r, 400, code::BAD_REQUEST, &format!("conv_id {dots}"))?;
        let r = post(&admin, "/v1/admin/users", &json!({"user_id": dots})).await?;
        expect_error(&r, 400, code::BAD_REQUEST, &format!("user_id {dots}"))?;
        let r = post(
            &admin,
            "/v1/admin/users/u-ana/devices",
            &json!({"device_id": dots}),
        )
        .await?;
        expect_error(&r, 400, code::BAD_REQUEST, &format!("device_id {dots}"))?;
    }
    let mut ws = Ws::connect(server.base_url(), ana.token()).await?;
    let answer = ws_error(
        &mut ws,
        json!({"type": "sync", "req_id": "d", "conv_id": "..", "after": 0}),
    )
    .await?;
    ensure!(answer["code"] == code::BAD_REQUEST, "ws: {answer}");
    ensure!(
        written(server.sql()).await? == before,
        "a refused request wrote"
    );
    Ok(())
}

test_on_both_stores!(
    #[tokio::test]
    check_content_type_415_in_its_place
);
/// A body that is not declared `application/json` is 415 `UNSUPPORTED_MEDIA_TYPE` with the
/// error JSON, after 401 and 413 and before the store's 404 (SPEC §6's order, 415 at the rank of
/// 400); it writes nothing. Parameters and case do not matter.
async fn check_content_type_415_in_its_place(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ana = server.user_with_device("u-ana").await;
    ana.create_conversation(&NewConversation::group(Vec::<String>::new()).with_conv_id("c-1"))
        .await?;
    let before = written(server.sql()).await?;
    let message = json!({"client_msg_id": "m-1", "body": "hi"}).to_string();
    let typed = |path: &str, content_type: &str, body: &str| {
        ana.raw(Method::POST, path)
            .header("content-type", content_type)
            .body(body.to_owned())
    };

    for conv in ["c-1", "c-none"] {
        let path = format!("/v1/conversations/{conv}/messages");
        for content_type in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
        ] {
            let r = typed(&path, content_type, &message).response().await?;
            expect_error(
                &r,
                415,
                code::UNSUPPORTED_MEDIA_TYPE,
                &format!("{conv} {content_type}"),
            )?;
        }
        let r = typed(&path, "text/plain", &message)
            .without_auth()
            .response()
            .await?;
        expect_error(&r, 401, code::UNAUTHENTICATED, "no token, text/plain")?;
        let oversize = "x".repeat(70 * 1024);
        let r = typed(&path, "text/plain", &oversize).response().await?;
        expect_error(&r, 413, code::REQUEST_TOO_LARGE, "70 KB of text/plain")?;
    }
    // No Content-Type at all: a bare client, since the SDK's raw requests always declare one.
    let url = format!("{}/v1/conversations/c-1/messages", server.base_url());
    let bare = reqwest::Client::new()
        .post(&url)
        .bearer_auth(ana.token())
        .body(message.clone())
        .send()
        .await?;
    let status = bare.status().as_u16();
    let json: Value = bare.json().await?;
    ensure!(
        status == 415 && json["error"]["code"] == code::UNSUPPORTED_MEDIA_TYPE,
        "no content type: {status} {json}"
    );
    ensure!(
        written(server.sql()).await? == before,
        "a refused request wrote"
    );

    let r = typed(
        "/v1/conversations/c-1/messages",
        "Application/JSON; charset=utf-8",
        &message,
    )
    .response()
    .await?;
    ensure!(
        r.status == 200,
        "JSON with a charset: {} {}",
        r.status,
        r.text
    );
    // The SDK's own requests declare JSON.
    ensure!(ana.send("c-1", "m-2", "typed").await?.seq == 3, "SDK send");
    Ok(())
}

test_on_both_stores!(
    #[tokio::test]
    check_foreign_and_future_sync_tokens_400
);
/// A sync token that no answer of this store handed out, whether it belongs to the other store,
/// is garbled or claims a snapshot from the future, is 400 `BAD_REQUEST` on both stores.
async fn check_foreign_and_future_sync_tokens_400(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ana = server.user_with_device("u-ana").await;
    ana.create_conversation(&NewConversation::group(Vec::<String>::new()).with_conv_id("c-1"))
        .await?;
    let r = get(&ana, "/v1/conversations").await?;
    ensure!(r.status == 200, "{} {}", r.status, r.text);
    let token = r.json["sync_token"].as_str().unwrap_or_default().to_owned();
    let r = get(&ana, &format!("/v1/conversations?since={token}")).await?;
    ensure!(
        r.status == 200,
        "the token handed out: {} {}",
        r.status,
        r.text
    );

    for bad in [
        // From the future on either store, and the other store's on the one.
        "c1.999999999999",
        "s1.4000000000:4000000000:",
        // Garbled: no such snapshot can exist.
        "s1.5:3:",
        "s1.3:5:7",
        "s1.0:0:",
        "c1.-1",
        "c1.",
        "",
    ] {
        let r = get(&ana, &format!("/v1/conversations?since={bad}")).await?;
        expect_error(&r, 400, code::BAD_REQUEST, &format!("since={bad}"))?;
    }
    Ok(())
}
