//! Device tokens: 256 random bits, handed out once, stored only as a SHA-256 hash.

use rand::RngCore;
use sha2::{Digest, Sha256};

/// Random bytes in a token: 256 bits, well above the 128 the contract asks for.
const TOKEN_BYTES: usize = 32;
const TOKEN_PREFIX: &str = "pd_";

/// Generates a new device token: returns the secret for the client and the hash to store.
pub fn new_device_token() -> (String, String) {
    let mut raw = [0u8; TOKEN_BYTES];
    rand::rngs::OsRng.fill_bytes(&mut raw);
    let token = format!("{TOKEN_PREFIX}{}", hex::encode(raw));
    let hash = hash_token(&token);
    (token, hash)
}

/// The stored form of a token. Tokens carry 256 random bits, so an unsalted fast hash is as
/// strong as the token itself; a slow password hash would only cost latency on every request.
pub fn hash_token(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_random_and_hash_stably() {
        let (t1, h1) = new_device_token();
        let (t2, _) = new_device_token();
        assert_ne!(t1, t2);
        assert_eq!(hash_token(&t1), h1);
        assert_eq!(t1.len(), TOKEN_PREFIX.len() + 2 * TOKEN_BYTES);
    }
}
