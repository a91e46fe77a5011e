//! End-to-end encrypted conversations through the server (docs/E2EE.md), the parts the store
//! contract cannot see: the `mls` frame and its `EPOCH_CONFLICT` error frame, a Welcome pushed
//! over WebSocket whole to its device and without its message to every other, an MLS write past
//! the ordinary request limit, and plaintext sends refused.

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use parley_client::{Method, NewConversation};
use parley_testkit::{test_on_both_stores, StoreKind, TestServer};
use serde_json::{json, Value};

use crate::ws_support::Ws;

const WAIT: Duration = Duration::from_secs(5);

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    frames_pushes_and_large_commits
);
async fn frames_pushes_and_large_commits(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, Default::default()).await;
    let ana = server.user_with_device("ana").await;
    let ben_phone = server.user_with_device("ben").await;
    let ben_laptop = server.device("ben", "laptop").await;
    let conv = ana
        .create_conversation(&NewConversation::encrypted().with_conv_id("e1"))
        .await?
        .conv_id;
    let mut ana_ws = Ws::connect(server.base_url(), ana.token()).await?;
    let mut phone_ws = Ws::connect(server.base_url(), ben_phone.token()).await?;
    let mut laptop_ws = Ws::connect(server.base_url(), ben_laptop.token()).await?;

    // A Commit over the frame: it adds ben with a Welcome for his phone only.
    ana_ws
        .send(
            json!({"type": "mls", "req_id": 1, "conv_id": conv, "client_msg_id": "c0",
                     "kind": "commit", "epoch": 0, "message": "Q09NTUlU", "add_users": ["ben"],
                     "welcome": {"message": "V0VMQ09NRQ==",
                                 "devices": [{"user_id": "ben", "device_id": "d1"}]}}),
        )
        .await?;
    let ack = ana_ws.next_of("ack", WAIT).await?;
    ensure!(ack["epoch"] == 1 && ack["welcome_seq"] == 4, "ack {ack}");
    let welcome_on = |ws_events: &[Value]| -> Option<Value> {
        ws_events
            .iter()
            .find(|f| f["event"]["kind"] == "mls_welcome")
            .map(|f| f["event"].clone())
    };
    let phone = events_until(&mut phone_ws, 4).await?;
    let laptop = events_until(&mut laptop_ws, 4).await?;
    let to_phone = welcome_on(&phone).context("the phone's welcome")?;
    let to_laptop = welcome_on(&laptop).context("the laptop's welcome")?;
    ensure!(
        to_phone["mls_message"] == "V0VMQ09NRQ=="
            && to_phone["mls_devices"][0]["device_id"] == "d1",
        "the named device gets the Welcome: {to_phone}"
    );
    ensure!(
        to_laptop.get("mls_message").is_none() && to_laptop.get("mls_devices").is_none(),
        "another device gets the event without it: {to_laptop}"
    );

    // A second Commit for epoch 0 is refused over the frame with the winner's seq.
    ana_ws
        .send(
            json!({"type": "mls", "req_id": 2, "conv_id": conv, "client_msg_id": "c1",
                     "kind": "commit", "epoch": 0, "message": "QUdBSU4="}),
        )
        .await?;
    let refused = ana_ws.next_of("error", WAIT).await?;
    ensure!(
        refused["code"] == "EPOCH_CONFLICT" && refused["epoch"] == 1 && refused["winning_seq"] == 2,
        "the losing Commit: {refused}"
    );

    // An application message past the 64 KiB of ordinary requests goes over HTTP.
    let big = STANDARD.encode(vec![7_u8; 100 * 1024]);
    let (status, body) = ben_phone
        .raw(Method::POST, &format!("/v1/conversations/{conv}/mls"))
        .json(&json!({"client_msg_id": "big", "kind": "application", "epoch": 1, "message": big}))
        .send()
        .await?;
    ensure!(status == 200 && body["seq"] == 5, "{status} {body}");

    // Plaintext is refused in the encrypted conversation; a non-member learns nothing more.
    let plain = ana.send(&conv, "p1", "hello in the clear").await;
    ensure!(
        plain.as_ref().err().and_then(|e| e.code()) == Some("ENCRYPTED_CONVERSATION"),
        "{plain:?}"
    );
    let cy = server.user_with_device("cy").await;
    let outsider = cy.send(&conv, "p2", "hi").await;
    ensure!(
        outsider.as_ref().err().and_then(|e| e.code()) == Some("NOT_MEMBER"),
        "{outsider:?}"
    );
    Ok(())
}

/// The event frames a socket receives until one has `seq`.
async fn events_until(ws: &mut Ws, seq: i64) -> Result<Vec<Value>> {
    let mut seen = Vec::new();
    loop {
        let frame = ws.next_of("event", WAIT).await?;
        let at = frame["event"]["seq"].as_i64();
        seen.push(frame);
        if at == Some(seq) {
            return Ok(seen);
        }
    }
}
