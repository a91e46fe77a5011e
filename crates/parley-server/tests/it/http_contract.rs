//! The HTTP contract of SPEC §6 against a real server: P10 on every conversation endpoint,
//! authentication, request validation, error precedence, direct chats, group roles and the
//! probes.

use anyhow::{ensure, Context, Result};
use parley_client::{code, Client, EventKind, Method, NewConversation, RawResponse, Role};
use parley_domain::Limits;
use parley_testkit::{test_on_both_stores, ServerConfig, Sql, StoreKind, TestServer};
use serde_json::{json, Value};

/// Sends `method path` with an optional JSON body (sent byte for byte) as `c`.
async fn call(c: &Client, method: Method, path: &str, body: Option<&str>) -> Result<RawResponse> {
    let mut req = c.raw(method, path);
    if let Some(b) = body {
        req = req.body(b.to_owned());
    }
    Ok(req.response().await?)
}

fn error_code(r: &RawResponse) -> &str {
    r.json["error"]["code"].as_str().unwrap_or("<none>")
}

/// Fails unless the answer is `status` with the error envelope carrying `code`.
pub(crate) fn expect_error(r: &RawResponse, status: u16, code: &str, what: &str) -> Result<()> {
    ensure!(
        r.status == status && error_code(r) == code,
        "{what}: expected {status} {code}, got {} {}",
        r.status,
        r.text
    );
    ensure!(
        r.json["error"]["message"].is_string(),
        "{what}: no message in {}",
        r.text
    );
    Ok(())
}

/// `(next_seq, events, membership periods)` of a conversation, by SQL.
async fn conv_state(sql: &Sql, conv: &str) -> Result<(i64, i64, i64)> {
    let next: i64 = sql
        .one(
            "SELECT next_seq FROM conversations WHERE conv_id = $1",
            &[conv.into()],
        )
        .await?;
    let events: i64 = sql
        .one(
            "SELECT count(*) FROM events WHERE conv_id = $1",
            &[conv.into()],
        )
        .await?;
    let periods: i64 = sql
        .one(
            "SELECT count(*) FROM membership_periods WHERE conv_id = $1",
            &[conv.into()],
        )
        .await?;
    Ok((next, events, periods))
}

fn seqs(page: &Value) -> Vec<i64> {
    page["events"]
        .as_array()
        .map(|es| es.iter().filter_map(|e| e["seq"].as_i64()).collect())
        .unwrap_or_default()
}

fn role_of(members: &Value, user: &str) -> Option<String> {
    members
        .as_array()?
        .iter()
        .find(|m| m["user_id"] == user)
        .and_then(|m| m["role"].as_str())
        .map(str::to_owned)
}

test_on_both_stores!(
    #[tokio::test]
    check_p10_every_conversation_endpoint_non_member_equals_unknown
);
/// P10: for a user who never had a period in `c-p` and for a conversation that does not exist,
/// every conversation endpoint gives the same status and the same JSON body, byte for byte.
async fn check_p10_every_conversation_endpoint_non_member_equals_unknown(
    store: StoreKind,
) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ua = server.user_with_device("u-a").await;
    server.user_with_device("u-b").await;
    let uc = server.user_with_device("u-c").await;
    server.user_with_device("u-d").await;
    ua.create_conversation(&NewConversation::group(["u-b"]).with_conv_id("c-p"))
        .await?;
    ua.send("c-p", "m-1", "secret").await?;
    let before = conv_state(server.sql(), "c-p").await?;

    let send = r#"{"client_msg_id":"m-1","body":"secret"}"#;
    // (method, path after /v1/conversations/{id}, body)
    let probes: Vec<(Method, &str, Option<&str>)> = vec![
        (Method::GET, "", None),
        (Method::GET, "/events", None),
        (Method::GET, "/events?after=0", None),
        (Method::GET, "/events?after=0&limit=2", None),
        (Method::GET, "/events?after=0&epoch=1", None),
        (Method::GET, "/events?after=0&epoch=99", None),
        (Method::GET, "/events?after=100", None),
        (Method::GET, "/events?before=3&limit=2", None),
        (Method::GET, "/events?before=1", None),
        (Method::GET, "/events?limit=1", None),
        (Method::POST, "/messages", Some(send)),
        (
            Method::POST,
            "/messages",
            Some(r#"{"client_msg_id":"m-2","body":"hi"}"#),
        ),
        (Method::POST, "/members", Some(r#"{"user_id":"u-c"}"#)),
        (Method::POST, "/members", Some(r#"{"user_id":"u-d"}"#)),
        (Method::POST, "/members", Some(r#"{"user_id":"u-a"}"#)),
        (Method::POST, "/members", Some(r#"{"user_id":"nobody"}"#)),
        (Method::DELETE, "/members/u-a", None),
        (Method::DELETE, "/members/u-c", None),
        (Method::DELETE, "/members/nobody", None),
        (Method::PUT, "/members/u-b", Some(r#"{"role":"admin"}"#)),
        (Method::PUT, "/members/u-a", Some(r#"{"role":"member"}"#)),
        (Method::PUT, "/members/u-c", Some(r#"{"role":"admin"}"#)),
        (Method::PUT, "/members/nobody", Some(r#"{"role":"admin"}"#)),
        (Method::POST, "/read", Some(r#"{"seq":3}"#)),
        (Method::GET, "/events?thread=3", None),
        (
            Method::POST,
            "/events/3/edit",
            Some(r#"{"client_msg_id":"e-1","body":"x"}"#),
        ),
        (Method::PUT, "/events/3/reactions/%F0%9F%91%8D", None),
        (Method::DELETE, "/events/3/reactions/x", None),
        (
            Method::POST,
            "/messages",
            Some(r#"{"client_msg_id":"m-3","body":"x","reply_to":3}"#),
        ),
    ];
    for (method, rest, body) in &probes {
        let hidden = call(
            &uc,
            method.clone(),
            &format!("/v1/conversations/c-p{rest}"),
            *body,
        )
        .await?;
        let missing = call(
            &uc,
            method.clone(),
            &format!("/v1/conversations/c-none{rest}"),
            *body,
        )
        .await?;
        // A member of c-p asking about the missing conversation gets that answer too.
        let missing_for_member = call(
            &ua,
            method.clone(),
            &format!("/v1/conversations/c-none{rest}"),
            *body,
        )
        .await?;
        let what = format!("{method} {rest} {}", body.unwrap_or(""));
        expect_error(&hidden, 404, code::NOT_MEMBER, &what)?;
        ensure!(
            (hidden.status, &hidden.text) == (missing.status, &missing.text),
            "{what}: non-member got {} {}, unknown conversation {} {}",
            hidden.status,
            hidden.text,
            missing.status,
            missing.text
        );
        ensure!(
            (missing_for_member.status, &missing_for_member.text)
                == (missing.status, &missing.text),
            "{what}: unknown conversation answers depend on the caller"
        );
    }
    // The recall endpoint answers alike too, and is NOT_MEMBER.
    let recall_hidden = call(
        &uc,
        Method::POST,
        "/v1/conversations/c-p/events/3/recall",
        None,
    )
    .await?;
    let recall_missing = call(
        &uc,
        Method::POST,
        "/v1/conversations/c-none/events/3/recall",
        None,
    )
    .await?;
    expect_error(&recall_hidden, 404, code::NOT_MEMBER, "recall")?;
    ensure!(
        (recall_hidden.status, &recall_hidden.text)
            == (recall_missing.status, &recall_missing.text),
        "recall: {} {} vs {} {}",
        recall_hidden.status,
        recall_hidden.text,
        recall_missing.status,
        recall_missing.text
    );
    ensure!(
        conv_state(server.sql(), "c-p").await? == before,
        "the probes wrote something"
    );
    // c-p is not in u-c's list either.
    let list = uc.list_conversations(None).await?;
    ensure!(list.conversations.is_empty(), "u-c lists {list:?}");
    Ok(())
}

test_on_both_stores!(
    #[tokio::test]
    check_auth_missing_and_unknown_token_401
);
/// A missing or unknown token is 401 UNAUTHENTICATED on device and admin endpoints alike.
async fn check_auth_missing_and_unknown_token_401(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ua = server.user_with_device("u-a").await;
    ua.create_conversation(&NewConversation::group(Vec::<String>::new()).with_conv_id("c-1"))
        .await?;
    let send = Some(r#"{"client_msg_id":"m-1","body":"hi"}"#);
    let endpoints: Vec<(Method, &str, Option<&str>)> = vec![
        (Method::GET, "/v1/conversations", None),
        (Method::GET, "/v1/conversations/c-1", None),
        (Method::GET, "/v1/conversations/c-1/events?after=0", None),
        (Method::POST, "/v1/conversations/c-1/messages", send),
        (
            Method::POST,
            "/v1/conversations",
            Some(r#"{"kind":"group","members":[]}"#),
        ),
        (
            Method::POST,
            "/v1/admin/users",
            Some(r#"{"user_id":"u-x"}"#),
        ),
    ];
    for (method, path, body) in endpoints {
        let mut req = ua.raw(method.clone(), path).without_auth();
        if let Some(b) = body {
            req = req.body(b);
        }
        let r = req.response().await?;
        expect_error(
            &r,
            401,
            code::UNAUTHENTICATED,
            &format!("no token {method} {path}"),
        )?;
        for token in ["pd_not_a_real_token", "x"] {
            let mut req = ua.raw(method.clone(), path).bearer(token);
            if let Some(b) = body {
                req = req.body(b);
            }
            let r = req.response().await?;
            expect_error(
                &r,
                401,
                code::UNAUTHENTICATED,
                &format!("token {token} {method} {path}"),
            )?;
        }
        // Another scheme carrying the real token is not a bearer token.
        let mut req = ua
            .raw(method.clone(), path)
            .without_auth()
            .header("Authorization", format!("Basic {}", ua.token()));
        if let Some(b) = body {
            req = req.body(b);
        }
        let r = req.response().await?;
        expect_error(
            &r,
            401,
            code::UNAUTHENTICATED,
            &format!("basic {method} {path}"),
        )?;
    }
    let (next, events, _) = conv_state(server.sql(), "c-1").await?;
    ensure!((next, events) == (2, 1), "something was written");
    let users: i64 = server.sql().one("SELECT count(*) FROM users", &[]).await?;
    ensure!(users == 1, "users: {users}");
    Ok(())
}

test_on_both_stores!(
    #[tokio::test]
    check_auth_revoked_token_401_on_next_request
);
/// Revoking a device through the admin API makes its token fail on the very next request;
/// the user's other device keeps working.
async fn check_auth_revoked_token_401_on_next_request(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ua = server.user_with_device("u-a").await;
    let tablet = server.device("u-a", "d2").await;
    ua.create_conversation(&NewConversation::group(Vec::<String>::new()).with_conv_id("c-1"))
        .await?;
    let ack = ua.send("c-1", "m-1", "hi").await?;
    ensure!(ack.seq == 2);

    let r = server
        .admin()
        .raw(Method::DELETE, "/v1/admin/users/u-a/devices/d1")
        .response()
        .await?;
    ensure!(r.status == 204, "revoke: {} {}", r.status, r.text);

    let r = call(
        &ua,
        Method::POST,
        "/v1/conversations/c-1/messages",
        Some(r#"{"client_msg_id":"m-2","body":"hi"}"#),
    )
    .await?;
    expect_error(&r, 401, code::UNAUTHENTICATED, "send with revoked token")?;
    let r = call(&ua, Method::GET, "/v1/conversations/c-1", None).await?;
    expect_error(&r, 401, code::UNAUTHENTICATED, "read with revoked token")?;
    // A revoked token is unknown on admin endpoints too (401, not 403).
    let r = call(
        &ua,
        Method::POST,
        "/v1/admin/users",
        Some(r#"{"user_id":"u-x"}"#),
    )
    .await?;
    expect_error(&r, 401, code::UNAUTHENTICATED, "admin with revoked token")?;

    let ack = tablet.send("c-1", "m-2", "hi").await?;
    ensure!(ack.seq == 3 && !ack.dup, "other device: {ack:?}");
    ensure!(conv_state(server.sql(), "c-1").await?.0 == 4, "next_seq");
    Ok(())
}

test_on_both_stores!(
    #[tokio::test]
    check_auth_reissued_token_revokes_old
);
/// Issuing a new token for a device revokes its old token at once.
async fn check_auth_reissued_token_revokes_old(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let old = server.user_with_device("u-a").await;
    old.list_conversations(None).await?;
    let r = server
        .admin()
        .raw(Method::POST, "/v1/admin/users/u-a/devices")
        .json(&json!({"device_id": "d1"}))
        .response()
        .await?;
    ensure!(r.status == 201, "re-issue: {} {}", r.status, r.text);
    ensure!(
        r.json["user_id"] == "u-a" && r.json["device_id"] == "d1",
        "{}",
        r.text
    );
    let token = r.json["token"].as_str().context("no token")?;
    ensure!(token != old.token(), "the same token was issued again");

    let r = call(&old, Method::GET, "/v1/conversations", None).await?;
    expect_error(&r, 401, code::UNAUTHENTICATED, "old token")?;
    let new = server.client(token);
    let r = call(&new, Method::GET, "/v1/conversations", None).await?;
    ensure!(r.status == 200, "new token: {} {}", r.status, r.text);
    // Sends of the new token carry the same device.
    new.create_conversation(&NewConversation::group(Vec::<String>::new()).with_conv_id("c-1"))
        .await?;
    new.send("c-1", "m-1", "hi").await?;
    let page = new.history("c-1", None, Some(1)).await?;
    let e = page.events.first().context("empty")?;
    ensure!(e.sender_device.as_deref() == Some("d1"), "{e:?}");
    Ok(())
}

test_on_both_stores!(
    #[tokio::test]
    check_admin_device_token_403_and_user_twice_409
);
/// A device token on an admin endpoint is 403 FORBIDDEN; creating a user twice is 409.
async fn check_admin_device_token_403_and_user_twice_409(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ua = server.user_with_device("u-a").await;
    let r = call(
        &ua,
        Method::POST,
        "/v1/admin/users",
        Some(r#"{"user_id":"u-x"}"#),
    )
    .await?;
    expect_error(&r, 403, code::FORBIDDEN, "device token creates a user")?;
    let r = call(
        &ua,
        Method::POST,
        "/v1/admin/users/u-a/devices",
        Some(r#"{"device_id":"d9"}"#),
    )
    .await?;
    expect_error(&r, 403, code::FORBIDDEN, "device token issues a device")?;
    let r = call(&ua, Method::DELETE, "/v1/admin/users/u-a/devices/d1", None).await?;
    expect_error(&r, 403, code::FORBIDDEN, "device token revokes a device")?;
    // Still usable: the refused revoke did nothing.
    ensure!(
        call(&ua, Method::GET, "/v1/conversations", None)
            .await?
            .status
            == 200
    );

    let admin = server.admin();
    let r = admin
        .raw(Method::POST, "/v1/admin/users")
        .json(&json!({"user_id": "u-b", "display_name": "Ben"}))
        .response()
        .await?;
    ensure!(r.status == 201, "create: {} {}", r.status, r.text);
    ensure!(
        r.json == json!({"user_id": "u-b", "display_name": "Ben"}),
        "{}",
        r.text
    );
    let r = admin
        .raw(Method::POST, "/v1/admin/users")
        .json(&json!({"user_id": "u-b", "display_name": "Other"}))
        .response()
        .await?;
    expect_error(&r, 409, code::ALREADY_EXISTS, "create twice")?;
    let users: Vec<(String, Option<String>)> = server
        .sql()
        .rows(
            "SELECT user_id, display_name FROM users ORDER BY user_id",
            &[],
        )
        .await?;
    ensure!(
        users
            == vec![
                ("u-a".to_owned(), None),
                ("u-b".to_owned(), Some("Ben".to_owned()))
            ],
        "users: {users:?}"
    );
    Ok(())
}

test_on_both_stores!(
    #[tokio::test]
    check_bad_requests_400_and_nothing_written
);
/// Unknown fields, malformed JSON, an empty message body and conflicting cursors are 400, and
/// none of them writes.
async fn check_bad_requests_400_and_nothing_written(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ua = server.user_with_device("u-a").await;
    server.user_with_device("u-b").await;
    ua.create_conversation(&NewConversation::group(["u-b"]).with_conv_id("c-1"))
        .await?;
    let sql = server.sql();
    let before = conv_state(sql, "c-1").await?;
    ensure!(before == (3, 2, 2), "{before:?}");

    let bad: Vec<(Method, &str, &str)> = vec![
        // unknown fields
        (
            Method::POST,
            "/v1/conversations/c-1/messages",
            r#"{"client_msg_id":"m-1","body":"hi","extra":1}"#,
        ),
        (
            Method::POST,
            "/v1/conversations/c-1/messages",
            r#"{"client_msg_id":"m-1","body":"hi","sender_user":"u-b"}"#,
        ),
        (
            Method::POST,
            "/v1/conversations/c-1/members",
            r#"{"user_id":"u-c","role":"admin"}"#,
        ),
        (
            Method::POST,
            "/v1/conversations",
            r#"{"kind":"group","members":[],"owner":"u-b"}"#,
        ),
        // malformed JSON
        (
            Method::POST,
            "/v1/conversations/c-1/messages",
            r#"{"client_msg_id":"m-1","body":"hi""#,
        ),
        (Method::POST, "/v1/conversations/c-1/messages", "not json"),
        (Method::POST, "/v1/conversations/c-1/messages", ""),
        (Method::POST, "/v1/conversations", "{"),
        // not an object, missing and mistyped fields, a field given twice
        (
            Method::POST,
            "/v1/conversations/c-1/messages",
            r#"["m-1","hi"]"#,
        ),
        (
            Method::POST,
            "/v1/conversations/c-1/messages",
            r#"{"body":"hi"}"#,
        ),
        (
            Method::POST,
            "/v1/conversations/c-1/messages",
            r#"{"client_msg_id":"m-1"}"#,
        ),
        (
            Method::POST,
            "/v1/conversations/c-1/messages",
            r#"{"client_msg_id":"m-1","body":5}"#,
        ),
        (
            Method::POST,
            "/v1/conversations/c-1/messages",
            r#"{"client_msg_id":"m-1","body":"a","body":"b"}"#,
        ),
        // empty message body, empty client_msg_id, client_msg_id over 128 bytes
        (
            Method::POST,
            "/v1/conversations/c-1/messages",
            r#"{"client_msg_id":"m-1","body":""}"#,
        ),
        (
            Method::POST,
            "/v1/conversations/c-1/messages",
            r#"{"client_msg_id":"","body":"hi"}"#,
        ),
    ];
    let long_key = format!(r#"{{"client_msg_id":"{}","body":"hi"}}"#, "k".repeat(129));
    let mut bad: Vec<(Method, &str, String)> = bad
        .into_iter()
        .map(|(m, p, b)| (m, p, b.to_owned()))
        .collect();
    bad.push((Method::POST, "/v1/conversations/c-1/messages", long_key));
    for (method, path, body) in &bad {
        let r = call(&ua, method.clone(), path, Some(body)).await?;
        expect_error(
            &r,
            400,
            code::BAD_REQUEST,
            &format!("{method} {path} {body}"),
        )?;
    }
    ensure!(
        conv_state(sql, "c-1").await? == before,
        "a bad request wrote"
    );
    let convs: i64 = sql.one("SELECT count(*) FROM conversations", &[]).await?;
    ensure!(convs == 1, "conversations: {convs}");

    // 128 bytes of client_msg_id is the limit, not over it.
    let ok_key = "k".repeat(128);
    let ack = ua.send("c-1", &ok_key, "hi").await?;
    ensure!(ack.seq == 3, "{ack:?}");

    for q in [
        "after=1&before=5",
        "before=5&after=1",
        "after=0&before=0",
        "limit=0",
        "limit=-1",
        "after=x",
        "cursor=1",
        "after=1&after=2",
    ] {
        let r = call(
            &ua,
            Method::GET,
            &format!("/v1/conversations/c-1/events?{q}"),
            None,
        )
        .await?;
        expect_error(&r, 400, code::BAD_REQUEST, q)?;
    }
    Ok(())
}

test_on_both_stores!(
    #[tokio::test]
    check_limit_above_500_clamped
);
/// A limit above 500 is clamped to 500, not refused.
async fn check_limit_above_500_clamped(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ua = server.user_with_device("u-a").await;
    ua.create_conversation(&NewConversation::group(Vec::<String>::new()).with_conv_id("c-1"))
        .await?;
    for i in 0..3 {
        ua.send("c-1", &format!("m-{i}"), "hi").await?;
    }
    for q in ["after=0&limit=1000", "limit=1000", "before=100&limit=1000"] {
        let r = call(
            &ua,
            Method::GET,
            &format!("/v1/conversations/c-1/events?{q}"),
            None,
        )
        .await?;
        ensure!(r.status == 200, "{q}: {} {}", r.status, r.text);
        ensure!(seqs(&r.json).len() == 4, "{q}: {}", r.text);
    }

    // With more than 500 events the page holds exactly 500.
    let mut tasks = Vec::new();
    for w in 0..8 {
        let ua = ua.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..64 {
                ua.send("c-1", &format!("w{w}-{i}"), "x").await?;
            }
            Ok::<(), parley_client::ClientError>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    let head = 4 + 8 * 64;
    let r = call(
        &ua,
        Method::GET,
        "/v1/conversations/c-1/events?after=0&limit=1000",
        None,
    )
    .await?;
    ensure!(r.status == 200, "{} {}", r.status, r.text);
    let got = seqs(&r.json);
    ensure!(
        got == (1..=500).collect::<Vec<i64>>(),
        "ascending page: {} events",
        got.len()
    );
    ensure!(
        r.json["through_seq"] == 500 && r.json["head"] == head,
        "{}",
        r.json["through_seq"]
    );
    let r = call(
        &ua,
        Method::GET,
        "/v1/conversations/c-1/events?limit=4294967296",
        None,
    )
    .await?;
    ensure!(r.status == 200, "{} {}", r.status, r.text);
    let got = seqs(&r.json);
    ensure!(
        got == (head - 499..=head).rev().collect::<Vec<i64>>(),
        "newest page: {} events",
        got.len()
    );
    ensure!(
        r.json["next_before"] == head - 499,
        "{}",
        r.json["next_before"]
    );
    Ok(())
}

test_on_both_stores!(
    #[tokio::test]
    check_error_precedence_401_413_400_404
);
/// 401 before 413 before 400 before 404 (SPEC §6), checked with the teaching limits.
async fn check_error_precedence_401_413_400_404(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(
        store,
        ServerConfig {
            limits: Limits {
                body_bytes_max: 6,
                request_bytes_max: 4096,
            },
            ..ServerConfig::default()
        },
    )
    .await;
    let ua = server.user_with_device("u-a").await;
    ua.create_conversation(&NewConversation::group(Vec::<String>::new()).with_conv_id("c-1"))
        .await?;
    let sql = server.sql();
    let before = conv_state(sql, "c-1").await?;
    let oversize = format!(
        r#"{{"client_msg_id":"m-1","body":"x","pad":"{}"}}"#,
        "p".repeat(5000)
    );
    let long_body = r#"{"client_msg_id":"m-1","body":"too long","extra":1}"#;

    // Unauthenticated and oversize: 401, on a real and on a missing conversation.
    for conv in ["c-1", "c-none"] {
        let path = format!("/v1/conversations/{conv}/messages");
        let r = ua
            .raw(Method::POST, &path)
            .without_auth()
            .body(oversize.clone())
            .response()
            .await?;
        expect_error(&r, 401, code::UNAUTHENTICATED, "no token, 5 KB")?;
        let r = ua
            .raw(Method::POST, &path)
            .bearer("pd_unknown")
            .body(oversize.clone())
            .response()
            .await?;
        expect_error(&r, 401, code::UNAUTHENTICATED, "unknown token, 5 KB")?;
        let r = ua
            .raw(Method::POST, &path)
            .without_auth()
            .body(long_body)
            .response()
            .await?;
        expect_error(&r, 401, code::UNAUTHENTICATED, "no token, long body")?;
        let r = ua
            .raw(Method::POST, &path)
            .without_auth()
            .body("{")
            .response()
            .await?;
        expect_error(&r, 401, code::UNAUTHENTICATED, "no token, malformed")?;

        // Authenticated: 413 outranks 400 and 404.
        let r = call(&ua, Method::POST, &path, Some(&oversize)).await?;
        expect_error(&r, 413, code::REQUEST_TOO_LARGE, &format!("{conv} 5 KB"))?;
        let r = call(&ua, Method::POST, &path, Some(long_body)).await?;
        expect_error(
            &r,
            413,
            code::BODY_TOO_LARGE,
            &format!("{conv} long body + extra field"),
        )?;
        // 400 outranks 404.
        let r = call(&ua, Method::POST, &path, Some("{")).await?;
        expect_error(&r, 400, code::BAD_REQUEST, &format!("{conv} malformed"))?;
        let r = call(
            &ua,
            Method::POST,
            &path,
            Some(r#"{"client_msg_id":"m-1","body":"x","x":1}"#),
        )
        .await?;
        expect_error(&r, 400, code::BAD_REQUEST, &format!("{conv} unknown field"))?;
    }
    // The same on other endpoints: oversize member and conversation requests.
    let big_member = format!(r#"{{"user_id":"{}"}}"#, "u".repeat(5000));
    let r = ua
        .raw(Method::POST, "/v1/conversations/c-1/members")
        .without_auth()
        .body(big_member.clone())
        .response()
        .await?;
    expect_error(&r, 401, code::UNAUTHENTICATED, "no token, big member")?;
    let r = call(
        &ua,
        Method::POST,
        "/v1/conversations/c-1/members",
        Some(&big_member),
    )
    .await?;
    expect_error(&r, 413, code::REQUEST_TOO_LARGE, "big member")?;
    let r = ua
        .raw(
            Method::GET,
            "/v1/conversations/c-none/events?after=1&before=2",
        )
        .without_auth()
        .response()
        .await?;
    expect_error(&r, 401, code::UNAUTHENTICATED, "no token, bad query")?;
    let r = call(
        &ua,
        Method::GET,
        "/v1/conversations/c-none/events?after=1&before=2",
        None,
    )
    .await?;
    expect_error(
        &r,
        400,
        code::BAD_REQUEST,
        "bad query on missing conversation",
    )?;

    ensure!(
        conv_state(sql, "c-1").await? == before,
        "a refused request wrote"
    );
    Ok(())
}

test_on_both_stores!(
    #[tokio::test]
    check_direct_chat_once_and_fixed_membership
);
/// A direct chat is created once (201, then 200 with the same conversation, from either side)
/// and its membership is fixed (403 FORBIDDEN on every member endpoint).
async fn check_direct_chat_once_and_fixed_membership(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ua = server.user_with_device("u-a").await;
    let ub = server.user_with_device("u-b").await;
    server.user_with_device("u-c").await;
    let create = r#"{"kind":"direct","members":["u-b"]}"#;
    let first = call(&ua, Method::POST, "/v1/conversations", Some(create)).await?;
    ensure!(
        first.status == 201,
        "first: {} {}",
        first.status,
        first.text
    );
    let conv_id = first.json["conv_id"]
        .as_str()
        .context("no conv_id")?
        .to_owned();
    ensure!(
        first.json["kind"] == "direct" && first.json["head"] == 2,
        "{}",
        first.text
    );
    let second = call(&ua, Method::POST, "/v1/conversations", Some(create)).await?;
    ensure!(
        second.status == 200,
        "second: {} {}",
        second.status,
        second.text
    );
    ensure!(
        second.json["conv_id"] == conv_id.as_str(),
        "{}",
        second.text
    );
    let other_side = call(
        &ub,
        Method::POST,
        "/v1/conversations",
        Some(r#"{"kind":"direct","members":["u-a","u-a"]}"#),
    )
    .await?;
    ensure!(
        other_side.status == 200,
        "{} {}",
        other_side.status,
        other_side.text
    );
    ensure!(
        other_side.json["conv_id"] == conv_id.as_str(),
        "{}",
        other_side.text
    );

    let sql = server.sql();
    let before = conv_state(sql, &conv_id).await?;
    ensure!(before == (3, 2, 2), "{before:?}");
    let convs: i64 = sql.one("SELECT count(*) FROM conversations", &[]).await?;
    ensure!(convs == 1, "conversations: {convs}");

    let base = format!("/v1/conversations/{conv_id}/members");
    for (c, method, path, body) in [
        (
            &ua,
            Method::POST,
            base.clone(),
            Some(r#"{"user_id":"u-c"}"#),
        ),
        (&ua, Method::DELETE, format!("{base}/u-b"), None),
        (&ua, Method::DELETE, format!("{base}/u-a"), None),
        (&ub, Method::DELETE, format!("{base}/u-b"), None),
        (
            &ua,
            Method::PUT,
            format!("{base}/u-b"),
            Some(r#"{"role":"admin"}"#),
        ),
    ] {
        let r = call(c, method.clone(), &path, body).await?;
        expect_error(&r, 403, code::FORBIDDEN, &format!("{method} {path}"))?;
    }
    ensure!(
        conv_state(sql, &conv_id).await? == before,
        "membership changed"
    );
    Ok(())
}

test_on_both_stores!(
    #[tokio::test]
    check_group_roles_add_remove
);
/// Roles in a group: plain members neither remove others nor add; the owner adds (200 {seq});
/// a current member cannot join again; an unknown user is 404 NOT_FOUND.
async fn check_group_roles_add_remove(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ua = server.user_with_device("u-a").await;
    let ub = server.user_with_device("u-b").await;
    server.user_with_device("u-c").await;
    server.user_with_device("u-d").await;
    let conv = ua
        .create_conversation(&NewConversation::group(["u-b", "u-c"]).with_conv_id("c-g"))
        .await?;
    ensure!(conv.head == 3, "{conv:?}");
    let sql = server.sql();
    let before = conv_state(sql, "c-g").await?;

    let r = call(
        &ub,
        Method::DELETE,
        "/v1/conversations/c-g/members/u-c",
        None,
    )
    .await?;
    expect_error(&r, 403, code::FORBIDDEN, "member removes member")?;
    let r = call(
        &ub,
        Method::DELETE,
        "/v1/conversations/c-g/members/u-a",
        None,
    )
    .await?;
    expect_error(&r, 403, code::FORBIDDEN, "member removes owner")?;
    let r = call(
        &ub,
        Method::POST,
        "/v1/conversations/c-g/members",
        Some(r#"{"user_id":"u-d"}"#),
    )
    .await?;
    expect_error(&r, 403, code::FORBIDDEN, "member adds")?;
    let r = call(
        &ub,
        Method::PUT,
        "/v1/conversations/c-g/members/u-c",
        Some(r#"{"role":"admin"}"#),
    )
    .await?;
    expect_error(&r, 403, code::FORBIDDEN, "member sets a role")?;
    ensure!(conv_state(sql, "c-g").await? == before, "a refusal wrote");

    let r = call(
        &ua,
        Method::POST,
        "/v1/conversations/c-g/members",
        Some(r#"{"user_id":"u-d"}"#),
    )
    .await?;
    ensure!(r.status == 200, "owner adds: {} {}", r.status, r.text);
    ensure!(r.json == json!({"seq": 4}), "owner adds: {}", r.text);
    let page = ua.history("c-g", None, Some(1)).await?;
    let join = page.events.first().context("empty")?;
    ensure!(
        join.seq == 4
            && join.kind == EventKind::Join
            && join.subject_user.as_deref() == Some("u-d")
            && join.sender_user.as_deref() == Some("u-a"),
        "{join:?}"
    );

    let after_add = conv_state(sql, "c-g").await?;
    ensure!(after_add == (5, 4, 4), "{after_add:?}");
    let r = call(
        &ua,
        Method::POST,
        "/v1/conversations/c-g/members",
        Some(r#"{"user_id":"u-d"}"#),
    )
    .await?;
    expect_error(&r, 409, code::ALREADY_MEMBER, "add a current member")?;
    let r = call(
        &ua,
        Method::POST,
        "/v1/conversations/c-g/members",
        Some(r#"{"user_id":"u-a"}"#),
    )
    .await?;
    expect_error(&r, 409, code::ALREADY_MEMBER, "add oneself")?;
    let r = call(
        &ua,
        Method::POST,
        "/v1/conversations/c-g/members",
        Some(r#"{"user_id":"u-zz"}"#),
    )
    .await?;
    expect_error(&r, 404, code::NOT_FOUND, "add an unknown user")?;
    ensure!(
        conv_state(sql, "c-g").await? == after_add,
        "a refusal wrote"
    );

    // An admin removes a plain member but not another admin.
    let r = call(
        &ua,
        Method::PUT,
        "/v1/conversations/c-g/members/u-b",
        Some(r#"{"role":"admin"}"#),
    )
    .await?;
    ensure!(r.status == 200, "set role: {} {}", r.status, r.text);
    ensure!(
        r.json == json!({"user_id": "u-b", "role": "admin"}),
        "{}",
        r.text
    );
    let r = call(
        &ua,
        Method::PUT,
        "/v1/conversations/c-g/members/u-d",
        Some(r#"{"role":"admin"}"#),
    )
    .await?;
    ensure!(r.status == 200, "set role: {} {}", r.status, r.text);
    let r = call(
        &ub,
        Method::DELETE,
        "/v1/conversations/c-g/members/u-d",
        None,
    )
    .await?;
    expect_error(&r, 403, code::FORBIDDEN, "admin removes admin")?;
    let r = call(
        &ub,
        Method::DELETE,
        "/v1/conversations/c-g/members/u-c",
        None,
    )
    .await?;
    ensure!(
        r.status == 200 && r.json == json!({"seq": 5}),
        "admin removes member: {}",
        r.text
    );
    ensure!(conv_state(sql, "c-g").await? == (6, 5, 4), "after remove");
    Ok(())
}

test_on_both_stores!(
    #[tokio::test]
    check_08_leave_closes_interval_http
);
/// 08-leave-closes-interval over HTTP: the leaver sees their own leave event and nothing after,
/// and can no longer write.
async fn check_08_leave_closes_interval_http(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ua = server.user_with_device("u-a").await;
    server.user_with_device("u-b").await;
    let uc = server.user_with_device("u-c").await;
    server.user_with_device("u-e").await;
    ua.create_conversation(&NewConversation::group(["u-b", "u-c"]).with_conv_id("c-g"))
        .await?;
    ensure!(ua.send("c-g", "m-1", "before").await?.seq == 4);

    let r = call(
        &uc,
        Method::DELETE,
        "/v1/conversations/c-g/members/u-c",
        None,
    )
    .await?;
    ensure!(
        r.status == 200 && r.json == json!({"seq": 5}),
        "leave: {} {}",
        r.status,
        r.text
    );
    ensure!(ua.send("c-g", "m-2", "after").await?.seq == 6);
    ensure!(ua.add_member("c-g", "u-e").await?.seq == 7);

    let r = call(
        &uc,
        Method::GET,
        "/v1/conversations/c-g/events?after=0",
        None,
    )
    .await?;
    ensure!(r.status == 200, "{} {}", r.status, r.text);
    ensure!(seqs(&r.json) == vec![3, 4, 5], "after=0: {}", r.text);
    ensure!(
        r.json["head"] == 5 && r.json["through_seq"] == 5,
        "{}",
        r.text
    );
    let leave = &r.json["events"][2];
    ensure!(
        leave["kind"] == "leave" && leave["subject_user"] == "u-c",
        "{leave}"
    );
    let r = call(
        &uc,
        Method::GET,
        "/v1/conversations/c-g/events?after=5",
        None,
    )
    .await?;
    ensure!(
        r.status == 200 && seqs(&r.json).is_empty(),
        "after=5: {}",
        r.text
    );
    let r = call(&uc, Method::GET, "/v1/conversations/c-g/events", None).await?;
    ensure!(seqs(&r.json) == vec![5, 4, 3], "newest page: {}", r.text);
    let r = call(
        &uc,
        Method::GET,
        "/v1/conversations/c-g/events?before=100",
        None,
    )
    .await?;
    ensure!(seqs(&r.json) == vec![5, 4, 3], "before=100: {}", r.text);

    let view = uc.get_conversation("c-g").await?;
    ensure!(view.head == 5, "former member's head: {}", view.head);
    ensure!(
        view.last_event.as_ref().map(|e| e.seq) == Some(5),
        "last event {:?}",
        view.last_event
    );

    let r = call(
        &uc,
        Method::POST,
        "/v1/conversations/c-g/messages",
        Some(r#"{"client_msg_id":"m-9","body":"hi"}"#),
    )
    .await?;
    expect_error(&r, 404, code::NOT_MEMBER, "former member sends")?;
    let r = call(
        &uc,
        Method::DELETE,
        "/v1/conversations/c-g/members/u-c",
        None,
    )
    .await?;
    expect_error(&r, 404, code::NOT_MEMBER, "former member leaves again")?;
    ensure!(conv_state(server.sql(), "c-g").await? == (8, 7, 4), "state");
    Ok(())
}

test_on_both_stores!(
    #[tokio::test]
    check_owner_leaves_ownership_to_earliest_admin
);
/// When the owner leaves, ownership passes to the earliest-joined admin (not the earliest
/// member); without admins, to the earliest-joined member.
async fn check_owner_leaves_ownership_to_earliest_admin(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ua = server.user_with_device("u-a").await;
    let ub = server.user_with_device("u-b").await;
    let uc = server.user_with_device("u-c").await;
    let ud = server.user_with_device("u-d").await;
    // Join order: u-a@1, u-b@2, u-c@3, u-d@4; u-d and then u-c become admins.
    ua.create_conversation(&NewConversation::group(["u-b", "u-c", "u-d"]).with_conv_id("c-g"))
        .await?;
    ua.set_role("c-g", "u-d", Role::Admin).await?;
    ua.set_role("c-g", "u-c", Role::Admin).await?;
    let r = call(&ua, Method::GET, "/v1/conversations/c-g", None).await?;
    ensure!(
        role_of(&r.json["members"], "u-a").as_deref() == Some("owner"),
        "{}",
        r.text
    );

    let r = call(
        &ua,
        Method::DELETE,
        "/v1/conversations/c-g/members/u-a",
        None,
    )
    .await?;
    ensure!(
        r.status == 200 && r.json == json!({"seq": 5}),
        "owner leaves: {}",
        r.text
    );
    let r = call(&ub, Method::GET, "/v1/conversations/c-g", None).await?;
    ensure!(r.status == 200, "{} {}", r.status, r.text);
    let members = &r.json["members"];
    ensure!(
        role_of(members, "u-a").is_none(),
        "the leaver is listed: {members}"
    );
    ensure!(
        role_of(members, "u-b").as_deref() == Some("member"),
        "{members}"
    );
    ensure!(
        role_of(members, "u-c").as_deref() == Some("owner"),
        "{members}"
    );
    ensure!(
        role_of(members, "u-d").as_deref() == Some("admin"),
        "{members}"
    );
    let owners = members
        .as_array()
        .map(|ms| ms.iter().filter(|m| m["role"] == "owner").count());
    ensure!(owners == Some(1), "owners: {members}");

    // The new owner acts as owner: sets roles and removes an admin.
    let ack = uc.set_role("c-g", "u-b", Role::Admin).await?;
    ensure!(ack.role == Role::Admin, "{ack:?}");
    ensure!(uc.remove_member("c-g", "u-d").await?.seq == 6);
    let e = ud.get_conversation("c-g").await?;
    ensure!(
        e.members.is_none() && e.head == 6,
        "removed member's view: {e:?}"
    );

    // No admin left but u-b (admin now): the owner u-c leaves, u-b takes over.
    uc.set_role("c-g", "u-b", Role::Member).await?;
    ensure!(uc.remove_member("c-g", "u-c").await?.seq == 7);
    let view = ub.get_conversation("c-g").await?;
    let members = view.members.context("no members")?;
    ensure!(
        members.len() == 1 && members[0].user_id == "u-b" && members[0].role == Role::Owner,
        "{members:?}"
    );
    Ok(())
}

test_on_both_stores!(
    #[tokio::test]
    check_owner_leaves_ownership_to_earliest_member
);
/// Without admins, the earliest-joined remaining member becomes owner.
async fn check_owner_leaves_ownership_to_earliest_member(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ua = server.user_with_device("u-a").await;
    let ub = server.user_with_device("u-b").await;
    server.user_with_device("u-c").await;
    server.user_with_device("u-d").await;
    ua.create_conversation(&NewConversation::group(["u-c", "u-b"]).with_conv_id("c-g"))
        .await?;
    ua.add_member("c-g", "u-d").await?;
    ua.remove_member("c-g", "u-a").await?;
    let view = ub.get_conversation("c-g").await?;
    let roles: Vec<(String, Role)> = view
        .members
        .context("no members")?
        .into_iter()
        .map(|m| (m.user_id, m.role))
        .collect();
    ensure!(
        roles
            == vec![
                ("u-c".to_owned(), Role::Owner),
                ("u-b".to_owned(), Role::Member),
                ("u-d".to_owned(), Role::Member)
            ],
        "{roles:?}"
    );
    Ok(())
}

test_on_both_stores!(
    #[tokio::test]
    check_healthz_and_readyz_200
);
/// The probes answer 200 without a token.
async fn check_healthz_and_readyz_200(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let c = server.client("");
    for path in ["/healthz", "/readyz"] {
        let r = c.raw(Method::GET, path).without_auth().response().await?;
        ensure!(r.status == 200, "{path}: {} {}", r.status, r.text);
        ensure!(r.json["status"].is_string(), "{path}: {}", r.text);
    }
    c.healthz().await?;
    c.readyz().await?;
    Ok(())
}
