use crate::vapid::{verify_authorization, VapidKey, EXP_AHEAD_S_MAX};
use crate::{b64, PushError};

const ENDPOINT: &str = "https://push.example.net:8443/wpush/v2/abc?x=1";
const NOW: u64 = 1_700_000_000;

fn signed(key: &VapidKey, exp: u64) -> String {
    key.authorization(ENDPOINT, "mailto:ops@parley.example", exp)
        .expect("authorization")
}

#[test]
fn the_stored_form_round_trips() {
    let key = VapidKey::generate();
    let again = VapidKey::from_base64(&key.to_base64()).expect("reads back");
    assert_eq!(key.public_key(), again.public_key());
    assert_eq!(key.to_base64().len(), 43, "32 bytes, base64url, no padding");
    let public = b64::decode_strict(&key.public_key()).expect("base64url");
    assert_eq!((public.len(), public[0]), (65, 0x04));
}

#[test]
fn a_bad_stored_key_is_an_error() {
    assert!(VapidKey::from_base64("not base64 !").is_err());
    assert!(VapidKey::from_base64(&b64::encode(&[1u8; 31])).is_err());
    assert!(
        VapidKey::from_base64(&b64::encode(&[0u8; 32])).is_err(),
        "zero"
    );
    assert!(
        VapidKey::from_base64(&b64::encode(&[0xffu8; 32])).is_err(),
        "above the order"
    );
}

#[test]
fn debug_never_shows_the_private_key() {
    let key = VapidKey::generate();
    let shown = format!("{key:?}");
    assert!(!shown.contains(&key.to_base64()));
    assert!(shown.contains(&key.public_key()));
}

#[test]
fn the_token_has_rfc8292s_shape() {
    let key = VapidKey::generate();
    let header = signed(&key, NOW + 3600);
    let rest = header.strip_prefix("vapid t=").expect("vapid scheme");
    let (token, k) = rest.split_once(", k=").expect("t then k");
    assert_eq!(k, key.public_key());
    let parts: Vec<&str> = token.split('.').collect();
    assert_eq!(parts.len(), 3);
    let jose: serde_json::Value =
        serde_json::from_slice(&b64::decode_strict(parts[0]).expect("b64")).expect("json");
    assert_eq!(jose, serde_json::json!({"typ": "JWT", "alg": "ES256"}));
    let claims: serde_json::Value =
        serde_json::from_slice(&b64::decode_strict(parts[1]).expect("b64")).expect("json");
    assert_eq!(
        claims,
        serde_json::json!({
            "aud": "https://push.example.net:8443",
            "exp": NOW + 3600,
            "sub": "mailto:ops@parley.example",
        })
    );
    assert_eq!(
        b64::decode_strict(parts[2]).expect("b64").len(),
        64,
        "raw r||s"
    );
}

#[test]
fn a_valid_token_verifies_and_answers_k() {
    let key = VapidKey::generate();
    let k = verify_authorization(&signed(&key, NOW + 3600), ENDPOINT, NOW).expect("valid");
    assert_eq!(k, key.public_key());
    let other_path = "https://push.example.net:8443/other";
    assert!(verify_authorization(&signed(&key, NOW + 60), other_path, NOW).is_ok());
}

#[test]
fn the_default_port_is_not_part_of_the_audience() {
    let key = VapidKey::generate();
    let header = key
        .authorization(
            "https://fcm.googleapis.com:443/fcm/send/x",
            "mailto:a@b",
            NOW + 60,
        )
        .expect("authorization");
    assert!(verify_authorization(&header, "https://fcm.googleapis.com/fcm/send/x", NOW).is_ok());
}

#[test]
fn expiry_must_be_future_and_within_24_hours() {
    let key = VapidKey::generate();
    for exp in [NOW - 1, NOW, NOW + EXP_AHEAD_S_MAX + 1] {
        let err = verify_authorization(&signed(&key, exp), ENDPOINT, NOW).unwrap_err();
        assert!(matches!(err, PushError::Vapid(_)), "exp {exp}: {err:?}");
    }
    assert!(verify_authorization(&signed(&key, NOW + EXP_AHEAD_S_MAX), ENDPOINT, NOW).is_ok());
}

#[test]
fn another_origin_is_refused() {
    let key = VapidKey::generate();
    let header = signed(&key, NOW + 60);
    for endpoint in [
        "https://push.example.net/wpush/v2/abc",
        "http://push.example.net:8443/wpush/v2/abc",
        "https://evil.example:8443/wpush/v2/abc",
    ] {
        assert!(
            verify_authorization(&header, endpoint, NOW).is_err(),
            "{endpoint}"
        );
    }
}

#[test]
fn a_signature_by_another_key_is_refused() {
    let (signer, claimed) = (VapidKey::generate(), VapidKey::generate());
    let header = signed(&signer, NOW + 60).replace(&signer.public_key(), &claimed.public_key());
    assert!(verify_authorization(&header, ENDPOINT, NOW).is_err());
}

#[test]
fn altered_claims_are_refused() {
    let key = VapidKey::generate();
    let header = signed(&key, NOW + 60);
    let (token, k) = header["vapid t=".len()..]
        .split_once(", k=")
        .expect("shape");
    let parts: Vec<&str> = token.split('.').collect();
    let forged = b64::encode(
        format!(
            r#"{{"aud":"https://push.example.net:8443","exp":{},"sub":"x"}}"#,
            NOW + 600
        )
        .as_bytes(),
    );
    let header = format!("vapid t={}.{forged}.{}, k={k}", parts[0], parts[2]);
    assert!(verify_authorization(&header, ENDPOINT, NOW).is_err());
}

#[test]
fn malformed_headers_are_refused_without_panicking() {
    let key = VapidKey::generate();
    let k = key.public_key();
    for header in [
        String::new(),
        "vapid".into(),
        "Bearer abc".into(),
        format!("vapid k={k}"),
        "vapid t=a.b.c".into(),
        format!("vapid t=a.b, k={k}"),
        format!("vapid t=a.b.c.d, k={k}"),
        format!("vapid t=..., k={k}"),
        format!("vapid t=e30.e30.AAAA, k={k}"),
        format!("vapid t={}, k=AAAA", &signed(&key, NOW + 60)[8..]),
        "x".repeat(10_000),
    ] {
        assert!(
            verify_authorization(&header, ENDPOINT, NOW).is_err(),
            "{header}"
        );
    }
}

#[test]
fn parameters_may_come_in_any_order_and_case() {
    let key = VapidKey::generate();
    let header = signed(&key, NOW + 60);
    let (token, k) = header["vapid t=".len()..]
        .split_once(", k=")
        .expect("shape");
    let reordered = format!("VAPID k={k},t={token}");
    assert!(verify_authorization(&reordered, ENDPOINT, NOW).is_ok());
}

#[test]
fn authorization_needs_an_http_endpoint_and_a_subject() {
    let key = VapidKey::generate();
    assert!(key.authorization("not a url", "mailto:a@b", NOW).is_err());
    assert!(key.authorization("mailto:a@b", "mailto:a@b", NOW).is_err());
    assert!(key.authorization(ENDPOINT, "", NOW).is_err());
}
