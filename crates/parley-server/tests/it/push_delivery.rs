//! Offline notifications against a real push service (docs/PUSH.md): push-gateway targets,
//! privacy mode, a 410 deleting the subscription, a logout deleting it, bursts coalesced into
//! one notification of the latest message, a push service down then up, and registrations
//! the server must refuse. Each test runs its own `TestPushService`, which checks VAPID and
//! decrypts what it gets.

use std::time::Duration;

use anyhow::{ensure, Result};
use parley_client::{Client, NewConversation};
use parley_push::receiver::{Mode, TestPushService};
use parley_server::push::PushConfig;
use parley_testkit::{test_on_both_stores, ServerConfig, StoreKind, TestServer};

/// The coalescing interval of these servers.
const COALESCE_MS: u64 = 1_000;
const ARRIVAL_WAIT: Duration = Duration::from_secs(15);

fn config(allow_http: bool) -> ServerConfig {
    ServerConfig {
        push: PushConfig {
            allow_http,
            coalesce_ms: COALESCE_MS,
            ..PushConfig::default()
        },
        ..ServerConfig::default()
    }
}

/// ana and ben on a fresh server, in the group `c`.
async fn pair(server: &TestServer) -> Result<(Client, Client)> {
    let ana = server.user_with_device("ana").await;
    let ben = server.user_with_device("ben").await;
    ana.create_conversation(&NewConversation::group(["ben"]).with_conv_id("c"))
        .await?;
    Ok((ana, ben))
}

async fn web_push(svc: &TestPushService, client: &Client, name: &str) -> Result<()> {
    let sub = svc.subscribe(name);
    client
        .register_web_push(&sub.endpoint, &sub.p256dh, &sub.auth)
        .await?;
    Ok(())
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    gateway_target_and_privacy
);
/// A push gateway gets the Matrix notification shape with the device's pushkey; in privacy
/// mode it carries no sender and no body.
async fn gateway_target_and_privacy(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, config(true)).await;
    let svc = TestPushService::start().await?;
    let (ana, ben) = pair(&server).await?;
    let info = ben
        .register_push_gateway(&svc.gateway_url(), "key-ben", "app.parley.ios")
        .await?;
    ensure!(info.kind == "gateway" && info.pushkey.as_deref() == Some("key-ben"));
    let first = ana.send("c", "k1", "hi ben").await?;
    let got = svc.wait_for(1, ARRIVAL_WAIT).await;
    ensure!(got.len() == 1, "gateway notifications: {}", got.len());
    let n = &got[0].payload["notification"];
    ensure!(
        n["room_id"] == "c"
            && n["sender"] == "ana"
            && n["content"]["body"] == "hi ben"
            && n["counts"]["unread"] == 1
            && n["seq"] == first.seq
            && n["devices"][0]["pushkey"] == "key-ben"
            && n["devices"][0]["app_id"] == "app.parley.ios",
        "notification {n}"
    );
    ensure!(ben.set_notification_privacy(true).await?);
    tokio::time::sleep(Duration::from_millis(COALESCE_MS)).await;
    let second = ana.send("c", "k2", "secret plans").await?;
    let got = svc.wait_for(2, ARRIVAL_WAIT).await;
    ensure!(got.len() == 2, "gateway notifications: {}", got.len());
    let n = &got[1].payload["notification"];
    ensure!(
        n["seq"] == second.seq && n.get("sender").is_none() && n.get("content").is_none(),
        "privacy mode leaked: {n}"
    );
    ensure!(
        !String::from_utf8_lossy(&got[1].raw).contains("secret"),
        "the body reached the gateway"
    );
    Ok(())
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    gone_and_logout_delete_the_target
);
/// A 410 from the push service deletes the subscription; so does a logout.
async fn gone_and_logout_delete_the_target(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, config(true)).await;
    let svc = TestPushService::start().await?;
    let (ana, ben) = pair(&server).await?;
    web_push(&svc, &ben, "ben").await?;
    ensure!(
        ben.push_target().await?.is_some(),
        "registered target missing"
    );
    svc.set_mode(Mode::Gone);
    ana.send("c", "k1", "to a gone browser").await?;
    let deadline = tokio::time::Instant::now() + ARRIVAL_WAIT;
    while ben.push_target().await?.is_some() {
        ensure!(
            tokio::time::Instant::now() < deadline,
            "a 410 left the target registered"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    svc.set_mode(Mode::Up);
    let tablet = server.device("ben", "tablet").await;
    web_push(&svc, &tablet, "tablet").await?;
    tablet.logout().await?;
    let again = server.device("ben", "tablet2").await;
    ensure!(
        again.push_target().await?.is_none(),
        "a new device has a target"
    );
    ana.send("c", "k2", "after the logout").await?;
    tokio::time::sleep(Duration::from_millis(2 * COALESCE_MS)).await;
    ensure!(
        svc.received().is_empty(),
        "a logged-out device was notified: {}",
        svc.received().len()
    );
    Ok(())
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    bursts_coalesce_and_outages_retry
);
/// Ten messages in a burst ring at most twice, the last one naming the latest seq; while the
/// push service answers 503 nothing is lost: the retry after it recovers brings the latest.
async fn bursts_coalesce_and_outages_retry(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, config(true)).await;
    let svc = TestPushService::start().await?;
    let (ana, ben) = pair(&server).await?;
    web_push(&svc, &ben, "ben").await?;
    let mut last = 0;
    for i in 0..10 {
        last = ana.send("c", &format!("b{i}"), "burst").await?.seq;
    }
    let deadline = tokio::time::Instant::now() + ARRIVAL_WAIT;
    loop {
        let got = svc.received();
        if got.iter().any(|r| r.payload["seq"] == last) {
            ensure!(got.len() <= 2, "a burst of 10 rang {} times", got.len());
            ensure!(
                got.last().map(|r| r.payload["unread"].clone()) == Some(10.into()),
                "unread of the last: {:?}",
                got.last().map(|r| &r.payload)
            );
            break;
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "latest seq {last} never notified"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let before = svc.received().len();
    svc.set_mode(Mode::Down);
    tokio::time::sleep(Duration::from_millis(COALESCE_MS)).await;
    let during = ana.send("c", "d1", "during the outage").await?.seq;
    let deadline = tokio::time::Instant::now() + ARRIVAL_WAIT;
    while svc.attempts() as usize <= before {
        ensure!(
            tokio::time::Instant::now() < deadline,
            "no attempt during the outage"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (_, info) = server
        .admin()
        .raw(parley_client::Method::GET, "/v1/admin/server")
        .send()
        .await?;
    ensure!(
        info["push"]["outbox_len"] == 0 && info["push"]["pending_len"] == 1,
        "backlog during the outage: {}",
        info["push"]
    );
    svc.set_mode(Mode::Up);
    let got = svc.wait_for(before + 1, ARRIVAL_WAIT).await;
    ensure!(
        got.len() == before + 1 && got[before].payload["seq"] == during,
        "after the outage: {} notifications, last {:?}",
        got.len(),
        got.last().map(|r| &r.payload)
    );
    Ok(())
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    bad_registrations_are_refused
);
/// Registrations the server must not take: an http endpoint without `--push-allow-http`,
/// keys that are not a P-256 point and a 16-byte secret, both kinds at once, neither, and
/// unknown fields. Each is 400 and leaves no target.
async fn bad_registrations_are_refused(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, config(false)).await;
    let svc = TestPushService::start().await?;
    let ben = server.user_with_device("ben").await;
    let sub = svc.subscribe("ben");
    let http = ben
        .register_web_push(&sub.endpoint, &sub.p256dh, &sub.auth)
        .await;
    ensure!(
        http.as_ref().err().and_then(|e| e.status()) == Some(400),
        "http endpoint: {http:?}"
    );
    let https = sub.endpoint.replacen("http://", "https://", 1);
    let cases: Vec<serde_json::Value> = vec![
        serde_json::json!({"endpoint": https, "keys": {"p256dh": "AAAA", "auth": sub.auth}}),
        serde_json::json!({"endpoint": https, "keys": {"p256dh": sub.p256dh, "auth": "c2hvcnQ"}}),
        serde_json::json!({"endpoint": https, "keys": {"p256dh": sub.p256dh, "auth": sub.auth},
            "url": "https://push.example/_matrix/push/v1/notify", "pushkey": "k", "app_id": "a"}),
        serde_json::json!({}),
        serde_json::json!({"endpoint": https, "keys": {"p256dh": sub.p256dh, "auth": sub.auth},
            "extra": 1}),
        serde_json::json!({"url": "ftp://push.example/x", "pushkey": "k", "app_id": "a"}),
    ];
    for body in &cases {
        let (status, answer) = ben
            .raw(parley_client::Method::PUT, "/v1/devices/me/push")
            .json(body)
            .send()
            .await?;
        ensure!(status == 400, "{body}: {status} {answer}");
    }
    ensure!(
        ben.push_target().await?.is_none(),
        "a refused registration left a target"
    );
    let good = serde_json::json!({"endpoint": https, "expirationTime": null,
        "keys": {"p256dh": sub.p256dh, "auth": sub.auth}});
    let (status, answer) = ben
        .raw(parley_client::Method::PUT, "/v1/devices/me/push")
        .json(&good)
        .send()
        .await?;
    ensure!(status == 200, "a browser's subscription: {status} {answer}");
    Ok(())
}
