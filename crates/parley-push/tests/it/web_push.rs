use std::time::Duration;

use parley_push::receiver::{Mode, TestPushService};
use parley_push::{classify, topic_for, web_push, Outcome, PreparedPush, Urgency, VapidKey};
use serde_json::json;

use crate::{now_unix_s, send};

const SUBJECT: &str = "mailto:ops@parley.example";

fn prepare(sub: &parley_push::WebPushSubscription, key: &VapidKey, payload: &[u8]) -> PreparedPush {
    web_push(
        sub,
        key,
        SUBJECT,
        payload,
        600,
        Urgency::High,
        Some(&topic_for("c-1")),
        now_unix_s(),
    )
    .expect("prepared")
}

#[tokio::test]
async fn a_message_round_trips_and_is_decrypted() {
    let service = TestPushService::start().await.expect("starts");
    let sub = service.subscribe("alice phone/1");
    assert_eq!(sub.validate(true), Ok(()));
    assert!(
        sub.validate(false).is_err(),
        "the test service is plain http"
    );
    let key = VapidKey::generate();
    let payload = json!({"conv": "c-1", "seq": 17, "body": "hi"});

    let (status, _) = send(&prepare(&sub, &key, payload.to_string().as_bytes())).await;
    assert_eq!(status, 201);
    assert_eq!(classify(status, None), Outcome::Delivered);

    let received = service.wait_for(1, Duration::from_secs(5)).await;
    assert_eq!(received.len(), 1);
    let got = &received[0];
    assert_eq!(got.name, "alice phone/1");
    assert_eq!(got.payload, payload);
    assert_eq!(got.raw, payload.to_string().into_bytes());
    assert_eq!(got.ttl, 600);
    assert_eq!(got.urgency.as_deref(), Some("high"));
    assert_eq!(got.topic.as_deref(), Some(topic_for("c-1").as_str()));
    assert_eq!(got.vapid_key, key.public_key());
    assert_eq!(service.attempts(), 1);
}

#[tokio::test]
async fn a_payload_that_is_not_json_is_recorded_as_null() {
    let service = TestPushService::start().await.expect("starts");
    let sub = service.subscribe("bob");
    let (status, _) = send(&prepare(&sub, &VapidKey::generate(), b"\xffnot json")).await;
    assert_eq!(status, 201);
    let received = service.received();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].payload, serde_json::Value::Null);
    assert_eq!(received[0].raw, b"\xffnot json");
}

#[tokio::test]
async fn gone_mode_and_unknown_subscriptions_answer_gone() {
    let service = TestPushService::start().await.expect("starts");
    let sub = service.subscribe("carol");
    let key = VapidKey::generate();

    service.set_mode(Mode::Gone);
    let (status, _) = send(&prepare(&sub, &key, b"{}")).await;
    assert_eq!((status, classify(status, None)), (410, Outcome::Gone));

    service.set_mode(Mode::Up);
    service.unsubscribe("carol");
    let (status, _) = send(&prepare(&sub, &key, b"{}")).await;
    assert_eq!((status, classify(status, None)), (404, Outcome::Gone));

    assert_eq!(service.attempts(), 2);
    assert!(service.received().is_empty());
}

#[tokio::test]
async fn down_mode_answers_503_and_counts_the_attempts() {
    let service = TestPushService::start().await.expect("starts");
    let sub = service.subscribe("dan");
    let key = VapidKey::generate();
    service.set_mode(Mode::Down);
    for _ in 0..3 {
        let (status, _) = send(&prepare(&sub, &key, b"{}")).await;
        assert_eq!(classify(status, None), Outcome::Retry { after_ms: None });
    }
    assert_eq!(service.attempts(), 3);
    assert!(service.received().is_empty());

    service.set_mode(Mode::Up);
    assert_eq!(send(&prepare(&sub, &key, b"{}")).await.0, 201);
    assert_eq!(service.received().len(), 1);
}

#[tokio::test]
async fn slow_mode_answers_late() {
    let service = TestPushService::start().await.expect("starts");
    let sub = service.subscribe("erin");
    service.set_mode(Mode::SlowMs(300));
    let started = std::time::Instant::now();
    assert_eq!(
        send(&prepare(&sub, &VapidKey::generate(), b"{}")).await.0,
        201
    );
    assert!(started.elapsed() >= Duration::from_millis(300));
}

#[tokio::test]
async fn a_bad_vapid_signature_is_refused() {
    let service = TestPushService::start().await.expect("starts");
    let sub = service.subscribe("frank");
    let (signer, claimed) = (VapidKey::generate(), VapidKey::generate());
    let mut push = prepare(&sub, &signer, b"{}");
    for (name, value) in &mut push.headers {
        if *name == "Authorization" {
            *value = value.replace(&signer.public_key(), &claimed.public_key());
        }
    }
    let (status, _) = send(&push).await;
    assert_eq!((status, classify(status, None)), (403, Outcome::Refused));

    // A token for another push service's origin is refused the same way.
    let mut elsewhere = prepare(&sub, &signer, b"{}");
    let foreign = signer
        .authorization("https://push.example/x", SUBJECT, now_unix_s() + 60)
        .expect("authorization");
    elsewhere
        .headers
        .retain(|(name, _)| *name != "Authorization");
    elsewhere.headers.push(("Authorization", foreign));
    assert_eq!(send(&elsewhere).await.0, 403);

    assert!(service.received().is_empty());
}

#[tokio::test]
async fn what_a_real_service_refuses_is_refused() {
    let service = TestPushService::start().await.expect("starts");
    let sub = service.subscribe("gina");
    let key = VapidKey::generate();
    let without = |header: &str| {
        let mut push = prepare(&sub, &key, b"{}");
        push.headers.retain(|(name, _)| *name != header);
        push
    };
    assert_eq!(send(&without("Authorization")).await.0, 401);
    assert_eq!(send(&without("TTL")).await.0, 400);
    assert_eq!(send(&without("Content-Encoding")).await.0, 400);

    // Encrypted for another browser: the service cannot decrypt it.
    let other = service.subscribe("other");
    let mut misaddressed = prepare(&other, &key, b"{}");
    misaddressed.url = sub.endpoint.clone();
    misaddressed
        .headers
        .retain(|(name, _)| *name != "Authorization");
    let authorization = key
        .authorization(&sub.endpoint, SUBJECT, now_unix_s() + 60)
        .expect("authorization");
    misaddressed.headers.push(("Authorization", authorization));
    assert_eq!(send(&misaddressed).await.0, 400);

    let mut oversized = prepare(&sub, &key, b"{}");
    oversized.body = vec![0; 4097];
    let (status, _) = send(&oversized).await;
    assert_eq!((status, classify(status, None)), (413, Outcome::Refused));

    assert_eq!(service.attempts(), 5);
    assert!(service.received().is_empty());
}

#[tokio::test]
async fn wait_for_answers_what_arrived_when_the_time_is_up() {
    let service = TestPushService::start().await.expect("starts");
    let sub = service.subscribe("hal");
    assert_eq!(
        send(&prepare(&sub, &VapidKey::generate(), b"{}")).await.0,
        201
    );
    let started = std::time::Instant::now();
    let received = service.wait_for(2, Duration::from_millis(200)).await;
    assert_eq!(received.len(), 1);
    assert!(started.elapsed() >= Duration::from_millis(200));
}

#[tokio::test]
async fn wait_for_wakes_on_arrival() {
    let service = TestPushService::start().await.expect("starts");
    let sub = service.subscribe("ida");
    let push = prepare(&sub, &VapidKey::generate(), b"{}");
    let sender = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        send(&push).await
    });
    let received = service.wait_for(1, Duration::from_secs(10)).await;
    assert_eq!(received.len(), 1);
    assert_eq!(sender.await.expect("sent").0, 201);
}

#[tokio::test]
async fn a_shut_down_service_refuses_connections() {
    let service = TestPushService::start().await.expect("starts");
    let sub = service.subscribe("jo");
    service.shutdown();
    // The abort takes effect at the task's next poll; give it one.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let push = prepare(&sub, &VapidKey::generate(), b"{}");
    let client = reqwest::Client::new();
    assert!(client.post(&push.url).body(push.body).send().await.is_err());
}
