use p256::SecretKey;

use super::b64;
use crate::ece::{decrypt, encrypt, encrypt_with, PAYLOAD_LEN_MAX};
use crate::PushError;

// RFC 8291 Appendix A, its line breaks removed.
const PLAINTEXT: &str = "When I grow up, I want to be a watermelon";
const AS_PRIVATE: &str = "yfWPiYE-n46HLnH0KqZOF1fJJU3MYrct3AELtAQ-oRw";
const UA_PUBLIC: &str =
    "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4";
const UA_PRIVATE: &str = "q1dXpw3UpT5VOmu_cf_v6ih07Aems3njxI-JWgLcM94";
const SALT: &str = "DGv6ra1nlYgDCS1FRnbzlw";
const AUTH_SECRET: &str = "BTBZMqHH6r4Tts7J_aSIgg";
const BODY: &str = "DGv6ra1nlYgDCS1FRnbzlwAAEABBBP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A_yl95bQpu6cVPTpK4Mqgkf1CXztLVBSt2Ks3oZwbuwXPXLWyouBWLVWGNWQexSgSxsj_Qulcy4a-fN";

fn secret(text: &str) -> SecretKey {
    SecretKey::from_slice(&b64(text)).expect("test key is a P-256 scalar")
}

fn salt() -> [u8; 16] {
    b64(SALT).try_into().expect("test salt is 16 bytes")
}

/// A fresh browser: its private key, its public key and its auth secret.
fn browser() -> (SecretKey, Vec<u8>, Vec<u8>) {
    use p256::elliptic_curve::sec1::ToEncodedPoint;
    let private = SecretKey::random(&mut rand::rngs::OsRng);
    let public = private
        .public_key()
        .to_encoded_point(false)
        .as_bytes()
        .to_vec();
    (private, public, vec![7u8; 16])
}

#[test]
fn rfc8291_example_encrypts_to_its_exact_body() {
    let body = encrypt_with(
        PLAINTEXT.as_bytes(),
        &b64(UA_PUBLIC),
        &b64(AUTH_SECRET),
        &secret(AS_PRIVATE),
        salt(),
    )
    .expect("the example encrypts");
    assert_eq!(body, b64(BODY));
}

#[test]
fn rfc8291_example_decrypts_to_its_plaintext() {
    let plaintext =
        decrypt(&b64(BODY), &secret(UA_PRIVATE), &b64(AUTH_SECRET)).expect("the example decrypts");
    assert_eq!(plaintext, PLAINTEXT.as_bytes());
}

#[test]
fn random_encryption_round_trips_and_differs_each_time() {
    let (private, public, auth) = browser();
    let first = encrypt(b"{\"seq\":1}", &public, &auth).expect("encrypts");
    let second = encrypt(b"{\"seq\":1}", &public, &auth).expect("encrypts");
    assert_ne!(first, second, "a fresh key and salt per message");
    assert_eq!(
        decrypt(&first, &private, &auth).expect("decrypts"),
        b"{\"seq\":1}"
    );
    assert_eq!(
        decrypt(&second, &private, &auth).expect("decrypts"),
        b"{\"seq\":1}"
    );
}

#[test]
fn the_largest_payload_fills_exactly_4096_bytes() {
    let (private, public, auth) = browser();
    let plaintext = vec![b'x'; PAYLOAD_LEN_MAX];
    let body = encrypt(&plaintext, &public, &auth).expect("the limit itself is taken");
    assert_eq!(body.len(), 4096);
    assert_eq!(
        decrypt(&body, &private, &auth).expect("decrypts"),
        plaintext
    );
}

#[test]
fn an_over_long_plaintext_is_refused() {
    let (_, public, auth) = browser();
    let err = encrypt(&vec![0u8; PAYLOAD_LEN_MAX + 1], &public, &auth).unwrap_err();
    assert_eq!(
        err,
        PushError::PayloadTooLarge {
            len: PAYLOAD_LEN_MAX + 1,
            max: 3993
        }
    );
}

#[test]
fn a_wrong_auth_secret_does_not_decrypt() {
    let err = decrypt(&b64(BODY), &secret(UA_PRIVATE), &[0u8; 16]).unwrap_err();
    assert!(matches!(err, PushError::Decrypt(_)), "{err:?}");
}

#[test]
fn a_wrong_private_key_does_not_decrypt() {
    let (other, _, _) = browser();
    assert!(decrypt(&b64(BODY), &other, &b64(AUTH_SECRET)).is_err());
}

#[test]
fn any_tampered_byte_fails_to_decrypt() {
    let body = b64(BODY);
    let (ua, auth) = (secret(UA_PRIVATE), b64(AUTH_SECRET));
    // Every byte counts: the salt and key id feed the key derivation, the rest the tag.
    for i in (0..body.len()).filter(|&i| !(16..21).contains(&i)) {
        let mut tampered = body.clone();
        tampered[i] ^= 0x01;
        assert!(decrypt(&tampered, &ua, &auth).is_err(), "byte {i} altered");
    }
}

#[test]
fn malformed_bodies_are_refused_without_panicking() {
    let (ua, auth) = (secret(UA_PRIVATE), b64(AUTH_SECRET));
    let body = b64(BODY);
    assert!(decrypt(&[], &ua, &auth).is_err());
    assert!(decrypt(&body[..86], &ua, &auth).is_err(), "no record");
    assert!(
        decrypt(&body[..100], &ua, &auth).is_err(),
        "truncated record"
    );
    let mut tiny_rs = body.clone();
    tiny_rs[16..20].copy_from_slice(&17u32.to_be_bytes());
    assert!(
        decrypt(&tiny_rs, &ua, &auth).is_err(),
        "record size below 18"
    );
    let mut short_rs = body.clone();
    short_rs[16..20].copy_from_slice(&20u32.to_be_bytes());
    assert!(
        decrypt(&short_rs, &ua, &auth).is_err(),
        "record longer than rs"
    );
    let mut idlen = body;
    idlen[20] = 64;
    assert!(decrypt(&idlen, &ua, &auth).is_err(), "key id not 65 bytes");
    assert!(decrypt(&b64(BODY), &ua, &[0u8; 15]).is_err(), "short auth");
}

#[test]
fn bad_browser_keys_are_refused() {
    let (_, public, auth) = browser();
    let as_private = secret(AS_PRIVATE);
    let mut compressed = public.clone();
    compressed[0] = 0x02;
    assert!(encrypt_with(b"x", &compressed, &auth, &as_private, salt()).is_err());
    assert!(encrypt_with(b"x", &public[..64], &auth, &as_private, salt()).is_err());
    let mut off_curve = public.clone();
    off_curve[64] ^= 0x01;
    assert!(encrypt_with(b"x", &off_curve, &auth, &as_private, salt()).is_err());
    assert!(encrypt_with(b"x", &public, &auth[..15], &as_private, salt()).is_err());
}
