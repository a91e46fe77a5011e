//! Request fingerprints: a hash of the canonical content of a send, stored beside its request key.
//!
//! Two sends with one request key are the same request exactly when their fingerprints match.
//! The fingerprint is stored with the key, so neither a recall (which erases the body) nor a purge
//! (which deletes the row) can turn an identical retry into a mismatch.

use sha2::{Digest, Sha256};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHash(String);

/// Version tag of the canonical encoding; bump it if fields are added that change meaning.
const FINGERPRINT_VERSION: &[u8] = b"parley-send-v1";

impl RequestHash {
    /// Fingerprint of a message send: kind and body, length-prefixed so no two inputs collide
    /// by concatenation.
    pub fn of_message(body: &str) -> Self {
        let mut h = Sha256::new();
        h.update(FINGERPRINT_VERSION);
        for part in [b"msg".as_slice(), body.as_bytes()] {
            h.update((part.len() as u64).to_be_bytes());
            h.update(part);
        }
        Self(hex::encode(h.finalize()))
    }

    pub fn from_stored(s: String) -> Self {
        Self(s)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_body_same_hash_other_body_other_hash() {
        assert_eq!(
            RequestHash::of_message("你好"),
            RequestHash::of_message("你好")
        );
        assert_ne!(
            RequestHash::of_message("你好"),
            RequestHash::of_message("你好呀")
        );
        assert_eq!(RequestHash::of_message("x").as_str().len(), 64);
    }
}
