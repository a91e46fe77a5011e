use std::time::Duration;

use parley_push::receiver::{Mode, TestPushService};
use parley_push::{
    classify, gateway, gateway_rejected, GatewayNotification, GatewayTarget, Outcome,
};
use serde_json::json;

use crate::send;

fn target(service: &TestPushService, pushkey: &str) -> GatewayTarget {
    GatewayTarget {
        url: service.gateway_url(),
        pushkey: pushkey.into(),
        app_id: "org.example.parley.ios".into(),
    }
}

fn notification(seq: i64) -> GatewayNotification {
    GatewayNotification {
        event_id: format!("m-{seq}"),
        room_id: "c-1".into(),
        sender: None,
        body: None,
        unread: 2,
        prio_high: true,
        seq,
    }
}

#[tokio::test]
async fn a_gateway_notification_is_recorded() {
    let service = TestPushService::start().await.expect("starts");
    let target = target(&service, "apns-token-1");
    assert_eq!(target.validate(true), Ok(()));

    let (status, body) = send(&gateway(&target, &notification(5)).expect("prepared")).await;
    assert_eq!(classify(status, None), Outcome::Delivered);
    assert!(!gateway_rejected(&body, "apns-token-1"));

    let received = service.wait_for(1, Duration::from_secs(5)).await;
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].name, "apns-token-1");
    assert_eq!(
        received[0].payload,
        json!({"notification": {
            "event_id": "m-5",
            "room_id": "c-1",
            "counts": {"unread": 2},
            "prio": "high",
            "seq": 5,
            "devices": [{"app_id": "org.example.parley.ios", "pushkey": "apns-token-1", "data": {}}],
        }})
    );
}

#[tokio::test]
async fn gone_mode_rejects_the_pushkey() {
    let service = TestPushService::start().await.expect("starts");
    let target = target(&service, "fcm-token-9");
    service.set_mode(Mode::Gone);
    let (status, body) = send(&gateway(&target, &notification(1)).expect("prepared")).await;
    assert_eq!(status, 200);
    assert!(gateway_rejected(&body, "fcm-token-9"));
    assert!(service.received().is_empty());
    assert_eq!(service.attempts(), 1);
}

#[tokio::test]
async fn down_mode_answers_503() {
    let service = TestPushService::start().await.expect("starts");
    service.set_mode(Mode::Down);
    let (status, _) =
        send(&gateway(&target(&service, "k"), &notification(1)).expect("prepared")).await;
    assert_eq!(classify(status, None), Outcome::Retry { after_ms: None });
    assert!(service.received().is_empty());
}
