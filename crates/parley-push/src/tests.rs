//! Unit tests, one file per module.

mod ece;
mod request;
mod subscription;
mod vapid;

/// Bytes of a base64url test constant; the constants are known to decode.
fn b64(text: &str) -> Vec<u8> {
    match crate::b64::decode_lenient(text) {
        Some(bytes) => bytes,
        None => panic!("test constant is not base64: {text}"),
    }
}
