use p256::elliptic_curve::sec1::ToEncodedPoint;

use crate::{b64, GatewayTarget, PushError, WebPushSubscription};

fn subscription(endpoint: &str) -> WebPushSubscription {
    let key = p256::SecretKey::random(&mut rand::rngs::OsRng);
    WebPushSubscription {
        endpoint: endpoint.into(),
        p256dh: b64::encode(key.public_key().to_encoded_point(false).as_bytes()),
        auth: b64::encode(&[9u8; 16]),
    }
}

fn target(url: &str) -> GatewayTarget {
    GatewayTarget {
        url: url.into(),
        pushkey: "a".repeat(64),
        app_id: "org.example.parley.ios".into(),
    }
}

#[test]
fn a_browser_subscription_is_valid() {
    let sub = subscription("https://fcm.googleapis.com/fcm/send/abc:def");
    assert_eq!(sub.validate(false), Ok(()));
    assert_eq!(sub.ua_public().expect("key").len(), 65);
    assert_eq!(sub.auth_secret().expect("auth").len(), 16);
}

#[test]
fn endpoints_must_be_https_unless_http_is_allowed() {
    let sub = subscription("http://127.0.0.1:8080/push/a");
    assert!(matches!(
        sub.validate(false),
        Err(PushError::Subscription(_))
    ));
    assert_eq!(sub.validate(true), Ok(()));
    for endpoint in [
        "ftp://push.example/a",
        "push.example/a",
        "",
        "https://user:pw@push.example/a",
        "https://user@push.example/a",
        "data:text/plain,hi",
    ] {
        assert!(subscription(endpoint).validate(true).is_err(), "{endpoint}");
    }
}

#[test]
fn endpoints_are_at_most_2048_bytes() {
    let base = "https://push.example/";
    let at_limit = format!("{base}{}", "a".repeat(2048 - base.len()));
    assert_eq!(subscription(&at_limit).validate(false), Ok(()));
    assert!(subscription(&format!("{at_limit}a"))
        .validate(false)
        .is_err());
}

#[test]
fn keys_may_be_padded_or_standard_base64() {
    let mut sub = subscription("https://push.example/a");
    let key = b64::decode_strict(&sub.p256dh).expect("b64");
    sub.p256dh = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &key);
    sub.auth = base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE, [0xfbu8; 16]);
    assert_eq!(sub.validate(false), Ok(()));
}

#[test]
fn bad_keys_are_refused() {
    let good = subscription("https://push.example/a");
    let point = b64::decode_strict(&good.p256dh).expect("b64");
    let mut off_curve = point.clone();
    off_curve[64] ^= 1;
    let mut compressed = point.clone();
    compressed[0] = 0x03;
    for p256dh in [
        "!!".to_owned(),
        b64::encode(&point[..64]),
        b64::encode(&off_curve),
        b64::encode(&compressed),
        b64::encode(&[0u8; 65]),
    ] {
        let sub = WebPushSubscription {
            p256dh: p256dh.clone(),
            ..good.clone()
        };
        assert!(sub.validate(false).is_err(), "p256dh {p256dh}");
    }
    for auth in [
        b64::encode(&[1u8; 15]),
        b64::encode(&[1u8; 17]),
        "%%".into(),
    ] {
        let sub = WebPushSubscription {
            auth: auth.clone(),
            ..good.clone()
        };
        assert!(sub.validate(false).is_err(), "auth {auth}");
    }
}

#[test]
fn gateway_targets_are_checked() {
    assert_eq!(
        target("https://push.example/_matrix/push/v1/notify").validate(false),
        Ok(())
    );
    assert!(target("http://push.example/_matrix/push/v1/notify")
        .validate(false)
        .is_err());
    assert_eq!(
        target("http://127.0.0.1:1/_matrix/push/v1/notify").validate(true),
        Ok(())
    );
    let ok = target("https://push.example/n");
    for bad in [
        GatewayTarget {
            pushkey: String::new(),
            ..ok.clone()
        },
        GatewayTarget {
            pushkey: "k".repeat(513),
            ..ok.clone()
        },
        GatewayTarget {
            app_id: String::new(),
            ..ok.clone()
        },
        GatewayTarget {
            app_id: "a".repeat(65),
            ..ok.clone()
        },
    ] {
        assert!(
            matches!(bad.validate(false), Err(PushError::Target(_))),
            "{bad:?}"
        );
    }
    let at_limits = GatewayTarget {
        pushkey: "k".repeat(512),
        app_id: "a".repeat(64),
        ..ok
    };
    assert_eq!(at_limits.validate(false), Ok(()));
}
