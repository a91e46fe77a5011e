//! Accounts with passwords (issue 13): the admin sets passwords, `POST /v1/auth/login` issues
//! device tokens that work like any other, logout revokes them, failed checks are throttled
//! before argon2 runs, registration is off unless configured, and users change their own
//! password. Every refusal of a login is one 401 whatever the reason.

use std::time::Duration;

use crate::ws_support::Ws;
use anyhow::{ensure, Context, Result};
use parley_client::{code, AdminClient, Method, RawResponse};
use parley_server::config::LoginLimits;
use parley_testkit::{test_on_both_stores, ServerConfig, StoreKind, TestServer};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(5);
const PASSWORD: &str = "correct horse battery";

async fn post(admin: &AdminClient, path: &str, body: Value) -> Result<RawResponse> {
    Ok(admin
        .raw(Method::POST, path)
        .without_auth()
        .json(&body)
        .response()
        .await?)
}

async fn login(admin: &AdminClient, user: &str, password: &str) -> Result<RawResponse> {
    post(
        admin,
        "/v1/auth/login",
        json!({"user_id": user, "password": password}),
    )
    .await
}

/// The token of a successful login, or a failure that shows the answer.
fn token_of(r: &RawResponse) -> Result<String> {
    ensure!(
        r.status == 200 || r.status == 201,
        "{} {}",
        r.status,
        r.text
    );
    r.json["token"]
        .as_str()
        .map(str::to_owned)
        .context("no token in the answer")
}

/// The status of `GET /v1/me` with `token`.
async fn me_status(admin: &AdminClient, token: &str) -> Result<u16> {
    Ok(admin
        .raw(Method::GET, "/v1/me")
        .bearer(token)
        .response()
        .await?
        .status)
}

async fn create_with_password(admin: &AdminClient, user: &str, password: &str) -> Result<()> {
    let r = admin
        .raw(Method::POST, "/v1/admin/users")
        .json(&json!({"user_id": user, "password": password}))
        .response()
        .await?;
    ensure!(r.status == 201, "create {user}: {} {}", r.status, r.text);
    ensure!(!r.text.contains(password), "the answer echoes the password");
    Ok(())
}

/// `parley_password_verifications_total` of the server's metrics.
async fn verifications(admin: &AdminClient) -> Result<u64> {
    let r = admin.raw(Method::GET, "/metrics").response().await?;
    r.text
        .lines()
        .find_map(|l| l.strip_prefix("parley_password_verifications_total "))
        .and_then(|v| v.trim().parse().ok())
        .with_context(|| format!("no verification counter in {}", r.text))
}

test_on_both_stores!(check_login_issues_working_tokens);
async fn check_login_issues_working_tokens(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let admin = server.admin();
    create_with_password(&admin, "u-ana", PASSWORD).await?;

    // Without a device id the server names a fresh web device.
    let r = login(&admin, "u-ana", PASSWORD).await?;
    let token = token_of(&r)?;
    ensure!(r.json["user_id"] == "u-ana", "{}", r.text);
    let device = r.json["device_id"].as_str().unwrap_or_default();
    ensure!(device.starts_with("web-"), "generated device id: {device}");
    ensure!(
        me_status(&admin, &token).await? == 200,
        "the token fails on HTTP"
    );
    let mut ws = Ws::connect(server.base_url(), &token).await?;
    ws.send(json!({"type": "ping", "req_id": 1})).await?;
    ws.next_of("pong", WAIT).await?;

    // A named device: a second login re-issues it, so its first token dies and its socket
    // closes like a re-issue by the admin (4003).
    let named = json!({"user_id": "u-ana", "password": PASSWORD, "device_id": "phone"});
    let first = token_of(&post(&admin, "/v1/auth/login", named.clone()).await?)?;
    let mut phone_ws = Ws::connect(server.base_url(), &first).await?;
    let r = post(&admin, "/v1/auth/login", named).await?;
    let second = token_of(&r)?;
    ensure!(r.json["device_id"] == "phone", "{}", r.text);
    ensure!(
        me_status(&admin, &first).await? == 401,
        "the old token works"
    );
    ensure!(
        me_status(&admin, &second).await? == 200,
        "the new token fails"
    );
    let (close, _) = phone_ws.until_close(WAIT).await?;
    ensure!(close == 4003, "re-issued device closed with {close}");
    ensure!(
        me_status(&admin, &token).await? == 200,
        "another device was hit"
    );
    Ok(())
}

test_on_both_stores!(check_login_refusals_are_one_answer);
async fn check_login_refusals_are_one_answer(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let admin = server.admin();
    create_with_password(&admin, "u-ana", PASSWORD).await?;
    admin.create_user("u-nopass", None).await?;

    let before = verifications(&admin).await?;
    let wrong = login(&admin, "u-ana", "wrong password").await?;
    let unknown = login(&admin, "u-nobody", "wrong password").await?;
    let no_password = login(&admin, "u-nopass", "wrong password").await?;
    for r in [&wrong, &unknown, &no_password] {
        ensure!(r.status == 401, "{} {}", r.status, r.text);
        ensure!(
            r.json["error"]["code"] == code::UNAUTHENTICATED,
            "{}",
            r.text
        );
    }
    ensure!(
        wrong.text == unknown.text && unknown.text == no_password.text,
        "refusals differ: {} / {} / {}",
        wrong.text,
        unknown.text,
        no_password.text
    );
    // Each of the three ran argon2: the unknown user and the user without a password against
    // the dummy hash, so they take the time of a wrong password.
    ensure!(
        verifications(&admin).await? == before + 3,
        "a refusal skipped the verification"
    );

    // Input rules: a password outside 8..=1024 bytes and unknown fields are 400, without a
    // verification.
    let before = verifications(&admin).await?;
    for body in [
        json!({"user_id": "u-ana", "password": "short"}),
        json!({"user_id": "u-ana", "password": "x".repeat(1025)}),
        json!({"user_id": "u-ana", "password": PASSWORD, "remember": true}),
        json!({"user_id": "u-ana"}),
    ] {
        let r = post(&admin, "/v1/auth/login", body).await?;
        ensure!(r.status == 400, "{} {}", r.status, r.text);
        ensure!(r.json["error"]["code"] == code::BAD_REQUEST, "{}", r.text);
    }
    ensure!(verifications(&admin).await? == before, "a 400 ran argon2");
    let r = admin
        .raw(Method::POST, "/v1/admin/users")
        .json(&json!({"user_id": "u-short", "password": "1234567"}))
        .response()
        .await?;
    ensure!(
        r.status == 400,
        "short password at creation: {} {}",
        r.status,
        r.text
    );
    // Nothing was created: the id is still free.
    admin.create_user("u-short", None).await?;
    Ok(())
}

test_on_both_stores!(check_logout_revokes_the_token);
async fn check_logout_revokes_the_token(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let admin = server.admin();
    create_with_password(&admin, "u-ana", PASSWORD).await?;
    let token = token_of(&login(&admin, "u-ana", PASSWORD).await?)?;
    let mut ws = Ws::connect(server.base_url(), &token).await?;
    let r = admin
        .raw(Method::POST, "/v1/auth/logout")
        .bearer(&token)
        .response()
        .await?;
    ensure!(r.status == 204, "{} {}", r.status, r.text);
    ensure!(
        me_status(&admin, &token).await? == 401,
        "the token still works"
    );
    let (close, _) = ws.until_close(WAIT).await?;
    ensure!(close == 4003, "logged-out socket closed with {close}");
    let r = admin
        .raw(Method::POST, "/v1/auth/logout")
        .bearer(&token)
        .response()
        .await?;
    ensure!(r.status == 401, "a second logout: {} {}", r.status, r.text);
    Ok(())
}

test_on_both_stores!(check_failed_logins_are_throttled);
async fn check_failed_logins_are_throttled(store: StoreKind) -> Result<()> {
    let config = ServerConfig {
        login: LoginLimits {
            failures_per_user_max: 3,
            failures_per_address_max: 6,
            failure_window_ms: 60_000,
        },
        ..ServerConfig::default()
    };
    let server = TestServer::start_on(store, config).await;
    let admin = server.admin();
    for user in ["u-ana", "u-ben", "u-cy"] {
        create_with_password(&admin, user, PASSWORD).await?;
    }
    for _ in 0..3 {
        ensure!(login(&admin, "u-ana", "wrong password").await?.status == 401);
    }
    // Over the user's failures: even the right password is refused, and argon2 does not run.
    let before = verifications(&admin).await?;
    let r = login(&admin, "u-ana", PASSWORD).await?;
    ensure!(r.status == 429, "{} {}", r.status, r.text);
    ensure!(r.json["error"]["code"] == code::RATE_LIMITED, "{}", r.text);
    let retry_after = r
        .headers
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    ensure!((1..=60).contains(&retry_after), "Retry-After {retry_after}");
    ensure!(
        verifications(&admin).await? == before,
        "a throttled login ran argon2"
    );

    // Another user from the same address still logs in, until the address is over its own.
    token_of(&login(&admin, "u-ben", PASSWORD).await?)?;
    for _ in 0..3 {
        ensure!(login(&admin, "u-ben", "wrong password").await?.status == 401);
    }
    let r = login(&admin, "u-cy", PASSWORD).await?;
    ensure!(
        r.status == 429,
        "over the address's failures: {} {}",
        r.status,
        r.text
    );
    ensure!(r.headers.contains_key("retry-after"), "no Retry-After");
    Ok(())
}

test_on_both_stores!(check_registration_is_off_unless_opened);
async fn check_registration_is_off_unless_opened(store: StoreKind) -> Result<()> {
    let closed = TestServer::start_on(store, ServerConfig::default()).await;
    let body = json!({"user_id": "u-new", "password": PASSWORD, "display_name": "New"});
    let r = post(&closed.admin(), "/v1/auth/register", body.clone()).await?;
    ensure!(r.status == 403, "closed: {} {}", r.status, r.text);
    ensure!(r.json["error"]["code"] == code::FORBIDDEN, "{}", r.text);
    ensure!(
        login(&closed.admin(), "u-new", PASSWORD).await?.status == 401,
        "a closed registration created the user"
    );

    let config = ServerConfig {
        open_registration: true,
        ..ServerConfig::default()
    };
    let open = TestServer::start_on(store, config).await;
    let admin = open.admin();
    let r = post(&admin, "/v1/auth/register", body.clone()).await?;
    ensure!(r.status == 201, "open: {} {}", r.status, r.text);
    let token = token_of(&r)?;
    ensure!(
        me_status(&admin, &token).await? == 200,
        "the first token fails"
    );
    token_of(&login(&admin, "u-new", PASSWORD).await?)?;
    let r = post(&admin, "/v1/auth/register", body).await?;
    ensure!(r.status == 409, "taken: {} {}", r.status, r.text);
    ensure!(
        r.json["error"]["code"] == code::ALREADY_EXISTS,
        "{}",
        r.text
    );
    let r = post(
        &admin,
        "/v1/auth/register",
        json!({"user_id": "u-short", "password": "short"}),
    )
    .await?;
    ensure!(r.status == 400, "short: {} {}", r.status, r.text);
    let r = post(
        &admin,
        "/v1/auth/register",
        json!({"user_id": "u-short", "password": PASSWORD, "admin": true}),
    )
    .await?;
    ensure!(r.status == 400, "unknown field: {} {}", r.status, r.text);
    Ok(())
}

test_on_both_stores!(check_password_changes);
async fn check_password_changes(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let admin = server.admin();
    create_with_password(&admin, "u-ana", PASSWORD).await?;
    let token = token_of(&login(&admin, "u-ana", PASSWORD).await?)?;
    let change = |body: Value| {
        admin
            .raw(Method::PUT, "/v1/auth/password")
            .bearer(&token)
            .json(&body)
            .response()
    };

    // A wrong current password is 403, not 401: the token is fine.
    let r = change(json!({"current_password": "not the one", "password": "a new secret"})).await?;
    ensure!(r.status == 403, "wrong current: {} {}", r.status, r.text);
    ensure!(r.json["error"]["code"] == code::FORBIDDEN, "{}", r.text);
    // A new password outside the rule is 400 and changes nothing.
    let r = change(json!({"current_password": PASSWORD, "password": "short"})).await?;
    ensure!(r.status == 400, "short new: {} {}", r.status, r.text);
    token_of(&login(&admin, "u-ana", PASSWORD).await?)?;

    let r = change(json!({"current_password": PASSWORD, "password": "a new secret"})).await?;
    ensure!(r.status == 204, "change: {} {}", r.status, r.text);
    ensure!(
        login(&admin, "u-ana", PASSWORD).await?.status == 401,
        "the old password works"
    );
    token_of(&login(&admin, "u-ana", "a new secret").await?)?;
    ensure!(
        me_status(&admin, &token).await? == 200,
        "the change revoked the token"
    );

    // The admin sets a password: 204, an unknown user 404, a short one 400.
    let set = |user: &str, password: &str| {
        admin
            .raw(Method::PUT, &format!("/v1/admin/users/{user}/password"))
            .json(&json!({"password": password}))
            .response()
    };
    let r = set("u-ana", "set by the admin").await?;
    ensure!(r.status == 204, "admin set: {} {}", r.status, r.text);
    token_of(&login(&admin, "u-ana", "set by the admin").await?)?;
    let r = set("u-nobody", "set by the admin").await?;
    ensure!(r.status == 404, "unknown user: {} {}", r.status, r.text);
    ensure!(r.json["error"]["code"] == code::NOT_FOUND, "{}", r.text);
    let r = set("u-ana", "short").await?;
    ensure!(r.status == 400, "admin short: {} {}", r.status, r.text);
    token_of(&login(&admin, "u-ana", "set by the admin").await?)?;
    // A device token may not use it.
    let r = admin
        .raw(Method::PUT, "/v1/admin/users/u-ana/password")
        .bearer(&token)
        .json(&json!({"password": "by a device!"}))
        .response()
        .await?;
    ensure!(r.status == 403, "device on admin: {} {}", r.status, r.text);
    Ok(())
}

test_on_both_stores!(check_sdk_login_and_logout);
async fn check_sdk_login_and_logout(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let admin = server.admin();
    create_with_password(&admin, "u-ana", PASSWORD).await?;
    let (client, issued) =
        parley_client::Client::login(server.base_url(), "u-ana", PASSWORD, Some("laptop")).await?;
    ensure!(issued.device_id == "laptop", "{issued:?}");
    let me = client.whoami().await?;
    ensure!(me.user_id == "u-ana" && me.device_id == "laptop", "{me:?}");
    client.logout().await?;
    ensure!(
        me_status(&admin, &issued.token).await? == 401,
        "logout left the token"
    );
    let wrong =
        parley_client::Client::login(server.base_url(), "u-ana", "wrong password", None).await;
    ensure!(
        wrong
            .as_ref()
            .err()
            .and_then(|e| e.code())
            .is_some_and(|c| c == code::UNAUTHENTICATED),
        "wrong password: {:?}",
        wrong.err()
    );
    Ok(())
}
