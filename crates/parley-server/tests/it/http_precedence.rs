//! Error precedence among 404, 403 and 409 (SPEC §6: "When several apply, the first in this
//! order answers: 401, 413, 400, 404, 403, 409"), with requests that are at once for a missing
//! conversation or user, forbidden to the caller, and conflicting. The earlier ranks are
//! checked in `http_contract.rs` (`check_error_precedence_401_413_400_404`).

use anyhow::{ensure, Result};
use parley_client::{code, Client, Method, NewConversation, RawResponse};
use parley_testkit::{test_on_both_stores, ServerConfig, StoreKind, TestServer};
use serde_json::{json, Value};

use crate::http_contract::expect_error;

async fn call(c: &Client, method: Method, path: &str, body: Option<Value>) -> Result<RawResponse> {
    let mut req = c.raw(method, path);
    if let Some(b) = body {
        req = req.json(&b);
    }
    Ok(req.response().await?)
}

/// `user` joins `conv`, as asked by `by`.
async fn add(by: &Client, conv: &str, user: &str) -> Result<RawResponse> {
    let path = format!("/v1/conversations/{conv}/members");
    call(by, Method::POST, &path, Some(json!({ "user_id": user }))).await
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    check_error_precedence_404_403_409
);
/// In group `c-1` ana is the owner, ben a plain member, dan a plain member who left; cai exists
/// and is no member. Each request below breaks several rules; the first rank answers, and a
/// refused request writes nothing.
async fn check_error_precedence_404_403_409(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ana = server.user_with_device("u-ana").await;
    let ben = server.user_with_device("u-ben").await;
    server.user_with_device("u-cai").await;
    let dan = server.user_with_device("u-dan").await;
    ana.create_conversation(
        &NewConversation::group(["u-ben", "u-dan"])
            .with_conv_id("c-1")
            .with_recall_window_ms(1),
    )
    .await?;
    let msg = ana.send("c-1", "m-1", "hello").await?.seq;
    dan.remove_member("c-1", "u-dan").await?;
    let head = ana.get_conversation("c-1").await?.head;

    // 404 over 403 and 409: a former member (no open period), who would lack the role, adds a
    // current member.
    let r = add(&dan, "c-1", "u-ben").await?;
    expect_error(&r, 404, code::NOT_MEMBER, "former member adds a member")?;
    // The same on a conversation that does not exist (P10: the same answer).
    let r = add(&dan, "c-none", "u-ben").await?;
    expect_error(&r, 404, code::NOT_MEMBER, "add to a missing conversation")?;
    // 404 over 403: a plain member adds a user who does not exist.
    let r = add(&ben, "c-1", "u-nobody").await?;
    expect_error(&r, 404, code::NOT_FOUND, "plain member adds a missing user")?;
    // 404 over 403: a plain member removes a user who does not exist.
    let r = call(
        &ben,
        Method::DELETE,
        "/v1/conversations/c-1/members/u-nobody",
        None,
    )
    .await?;
    expect_error(
        &r,
        404,
        code::NOT_FOUND,
        "plain member removes a missing user",
    )?;
    // 404 over 403: a plain member recalls a seq with no message, which is not theirs either.
    let r = call(
        &ben,
        Method::POST,
        "/v1/conversations/c-1/events/999/recall",
        None,
    )
    .await?;
    expect_error(&r, 404, code::NOT_FOUND, "recall of a missing message")?;

    // 403 over 409: a plain member adds a current member.
    let r = add(&ben, "c-1", "u-ana").await?;
    expect_error(&r, 403, code::FORBIDDEN, "plain member adds a member")?;
    // 403 over 409: someone else's message after the window. That the window has passed is
    // shown by the sender's own recall.
    let path = format!("/v1/conversations/c-1/events/{msg}/recall");
    let r = call(&ana, Method::POST, &path, None).await?;
    expect_error(&r, 409, code::RECALL_WINDOW_EXPIRED, "sender's late recall")?;
    let r = call(&ben, Method::POST, &path, None).await?;
    expect_error(&r, 403, code::NOT_SENDER, "another member's late recall")?;
    // 403 over 409 on a direct chat: its membership is fixed, and ben is a member already.
    let direct = ana
        .create_conversation(&NewConversation::direct("u-ben"))
        .await?
        .conv_id;
    let r = add(&ana, &direct, "u-ben").await?;
    expect_error(&r, 403, code::FORBIDDEN, "add to a direct chat")?;

    // 409 when it is the only rule broken, so the ranks above are not an artefact.
    let r = add(&ana, "c-1", "u-ben").await?;
    expect_error(&r, 409, code::ALREADY_MEMBER, "owner adds a member")?;
    let after = ana.get_conversation("c-1").await?.head;
    ensure!(
        after == head,
        "refused requests moved the head {head} -> {after}"
    );
    Ok(())
}
