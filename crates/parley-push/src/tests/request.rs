use p256::elliptic_curve::sec1::ToEncodedPoint;
use serde_json::{json, Value};

use crate::request::{TOPIC_LEN_MAX, VAPID_EXP_AHEAD_S};
use crate::{
    b64, classify, ece, gateway, gateway_rejected, topic_for, vapid, web_push, GatewayNotification,
    GatewayTarget, Outcome, PushError, Urgency, VapidKey, WebPushSubscription,
};

const NOW: u64 = 1_700_000_000;

fn browser() -> (p256::SecretKey, WebPushSubscription) {
    let key = p256::SecretKey::random(&mut rand::rngs::OsRng);
    let sub = WebPushSubscription {
        endpoint: "https://push.example.net/wpush/abc".into(),
        p256dh: b64::encode(key.public_key().to_encoded_point(false).as_bytes()),
        auth: b64::encode(&[3u8; 16]),
    };
    (key, sub)
}

fn notification(sender: Option<&str>, body: Option<&str>) -> GatewayNotification {
    GatewayNotification {
        event_id: "m-1".into(),
        room_id: "c-1".into(),
        sender: sender.map(Into::into),
        body: body.map(Into::into),
        unread: 4,
        prio_high: true,
        seq: 17,
    }
}

fn target() -> GatewayTarget {
    GatewayTarget {
        url: "https://gw.example/_matrix/push/v1/notify".into(),
        pushkey: "pk-1".into(),
        app_id: "org.example.app".into(),
    }
}

#[test]
fn a_web_push_request_carries_every_header_and_decrypts() {
    let (key, sub) = browser();
    let vapid_key = VapidKey::generate();
    let topic = topic_for("c-1");
    let push = web_push(
        &sub,
        &vapid_key,
        "mailto:ops@parley.example",
        br#"{"seq":17}"#,
        3600,
        Urgency::High,
        Some(&topic),
        NOW,
    )
    .expect("prepared");
    assert_eq!(push.url, sub.endpoint);
    assert_eq!(push.header("content-encoding"), Some("aes128gcm"));
    assert_eq!(
        push.header("Content-Type"),
        Some("application/octet-stream")
    );
    assert_eq!(push.header("TTL"), Some("3600"));
    assert_eq!(push.header("Urgency"), Some("high"));
    assert_eq!(push.header("Topic"), Some(topic.as_str()));
    let authorization = push.header("Authorization").expect("VAPID");
    let k = vapid::verify_authorization(authorization, &sub.endpoint, NOW).expect("valid");
    assert_eq!(k, vapid_key.public_key());
    // Valid for 12 hours: still at 12 h − 1 s, no longer at 12 h.
    assert!(
        vapid::verify_authorization(authorization, &sub.endpoint, NOW + VAPID_EXP_AHEAD_S - 1)
            .is_ok()
    );
    assert!(
        vapid::verify_authorization(authorization, &sub.endpoint, NOW + VAPID_EXP_AHEAD_S).is_err()
    );
    let plaintext = ece::decrypt(&push.body, &key, &[3u8; 16]).expect("decrypts");
    assert_eq!(plaintext, br#"{"seq":17}"#);
}

#[test]
fn no_topic_means_no_topic_header() {
    let (_, sub) = browser();
    let push = web_push(
        &sub,
        &VapidKey::generate(),
        "mailto:a@b",
        b"{}",
        0,
        Urgency::VeryLow,
        None,
        NOW,
    )
    .expect("prepared");
    assert_eq!(push.header("Topic"), None);
    assert_eq!(push.header("Urgency"), Some("very-low"));
    assert_eq!(push.header("TTL"), Some("0"));
}

#[test]
fn bad_topics_and_payloads_are_refused() {
    let (_, sub) = browser();
    let key = VapidKey::generate();
    let send = |payload: &[u8], topic: Option<&str>| {
        web_push(
            &sub,
            &key,
            "mailto:a@b",
            payload,
            60,
            Urgency::Normal,
            topic,
            NOW,
        )
    };
    for topic in ["", "has space", "plus+", &"a".repeat(33)] {
        assert!(
            matches!(send(b"{}", Some(topic)), Err(PushError::Topic(_))),
            "{topic}"
        );
    }
    assert!(send(b"{}", Some(&"A-_z".repeat(8))).is_ok());
    assert!(matches!(
        send(&vec![b' '; ece::PAYLOAD_LEN_MAX + 1], None),
        Err(PushError::PayloadTooLarge { .. })
    ));
    let broken = WebPushSubscription {
        auth: "AAAA".into(),
        ..sub.clone()
    };
    assert!(web_push(
        &broken,
        &key,
        "mailto:a@b",
        b"{}",
        60,
        Urgency::Low,
        None,
        NOW
    )
    .is_err());
}

#[test]
fn topics_are_32_base64url_characters_and_stable() {
    for key in [
        "",
        "c-1",
        "a much longer conversation id with spaces / and ünïcode",
    ] {
        let topic = topic_for(key);
        assert_eq!(topic.len(), TOPIC_LEN_MAX);
        assert!(topic
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
        assert_eq!(topic, topic_for(key));
    }
    assert_ne!(topic_for("c-1"), topic_for("c-2"));
}

#[test]
fn urgencies_have_rfc8030s_names() {
    let names: Vec<&str> = [
        Urgency::VeryLow,
        Urgency::Low,
        Urgency::Normal,
        Urgency::High,
    ]
    .into_iter()
    .map(Urgency::as_str)
    .collect();
    assert_eq!(names, ["very-low", "low", "normal", "high"]);
}

#[test]
fn a_full_gateway_notification() {
    let push = gateway(&target(), &notification(Some("alice"), Some("hi"))).expect("prepared");
    assert_eq!(push.url, target().url);
    assert_eq!(push.header("Content-Type"), Some("application/json"));
    let body: Value = serde_json::from_slice(&push.body).expect("JSON");
    assert_eq!(
        body,
        json!({"notification": {
            "event_id": "m-1",
            "room_id": "c-1",
            "type": "m.room.message",
            "sender": "alice",
            "content": {"body": "hi"},
            "counts": {"unread": 4},
            "prio": "high",
            "seq": 17,
            "devices": [{"app_id": "org.example.app", "pushkey": "pk-1", "data": {}}],
        }})
    );
}

#[test]
fn the_event_id_only_form_says_nothing_of_the_message() {
    let mut n = notification(None, None);
    n.prio_high = false;
    let push = gateway(&target(), &n).expect("prepared");
    let body: Value = serde_json::from_slice(&push.body).expect("JSON");
    let fields = body["notification"].as_object().expect("object");
    for absent in ["sender", "content", "type"] {
        assert!(!fields.contains_key(absent), "{absent}");
    }
    assert_eq!(body["notification"]["prio"], "low");
    assert_eq!(body["notification"]["event_id"], "m-1");
}

#[test]
fn outcomes_by_status() {
    let cases = [
        (200, None, Outcome::Delivered),
        (201, None, Outcome::Delivered),
        (202, None, Outcome::Delivered),
        (404, None, Outcome::Gone),
        (410, None, Outcome::Gone),
        (
            429,
            Some("7"),
            Outcome::Retry {
                after_ms: Some(7000),
            },
        ),
        (429, None, Outcome::Retry { after_ms: None }),
        (
            503,
            Some(" 30 "),
            Outcome::Retry {
                after_ms: Some(30_000),
            },
        ),
        (
            500,
            Some("Wed, 21 Oct 2015 07:28:00 GMT"),
            Outcome::Retry { after_ms: None },
        ),
        (502, Some("-1"), Outcome::Retry { after_ms: None }),
        (413, None, Outcome::Refused),
        (400, None, Outcome::Refused),
        (401, None, Outcome::Refused),
        (403, None, Outcome::Refused),
        (301, None, Outcome::Refused),
    ];
    for (status, retry_after, outcome) in cases {
        assert_eq!(
            classify(status, retry_after),
            outcome,
            "{status} {retry_after:?}"
        );
    }
    assert_eq!(
        classify(503, Some(&u64::MAX.to_string())),
        Outcome::Retry {
            after_ms: Some(u64::MAX)
        }
    );
}

#[test]
fn rejected_pushkeys_are_found() {
    assert!(gateway_rejected(br#"{"rejected":["pk-1"]}"#, "pk-1"));
    assert!(gateway_rejected(br#"{"rejected":["x","pk-1"]}"#, "pk-1"));
    assert!(!gateway_rejected(br#"{"rejected":[]}"#, "pk-1"));
    assert!(!gateway_rejected(br#"{"rejected":["pk-2"]}"#, "pk-1"));
    assert!(!gateway_rejected(br#"{}"#, "pk-1"));
    assert!(!gateway_rejected(b"not json", "pk-1"));
    assert!(!gateway_rejected(br#"{"rejected":"pk-1"}"#, "pk-1"));
}
