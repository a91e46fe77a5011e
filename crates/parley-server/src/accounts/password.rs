//! Passwords: the length rule of the API and argon2id hashes as PHC strings.
//!
//! The parameters are OWASP's recommended minimum for argon2id (19 MiB, two passes, one lane):
//! about 20-40 ms per hash on one core of our machine, slow enough to make guessing costly and
//! fast enough that a login does not keep a core for long. The PHC string records the
//! parameters, so stored hashes keep verifying if these constants change.

use std::fmt;

use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::{Algorithm, Argon2, Params, Version};

use crate::error::ApiError;

/// Shortest password accepted, in bytes of UTF-8.
pub const PASSWORD_LEN_MIN: usize = 8;
/// Longest password accepted, in bytes of UTF-8: bounds the work one request can ask for.
pub const PASSWORD_LEN_MAX: usize = 1024;
/// Memory of one argon2id hash, in KiB (OWASP: 19 MiB).
pub const ARGON2_MEMORY_KIB: u32 = 19_456;
/// Passes over that memory (OWASP: 2).
pub const ARGON2_ITERATIONS: u32 = 2;
/// Parallel lanes of one hash (OWASP: 1); the server runs several hashes in parallel instead.
pub const ARGON2_LANES: u32 = 1;

/// A password that passed the length rule. Its `Debug` hides the text, so a request that
/// holds one can be logged.
#[derive(Clone)]
pub struct Password(String);

impl Password {
    /// Checks the length rule; `field` names the JSON field in the refusal.
    pub fn parse(field: &str, text: String) -> Result<Self, ApiError> {
        let len = text.len();
        if !(PASSWORD_LEN_MIN..=PASSWORD_LEN_MAX).contains(&len) {
            return Err(ApiError::bad_request(format!(
                "{field} must be {PASSWORD_LEN_MIN} to {PASSWORD_LEN_MAX} bytes of UTF-8"
            )));
        }
        Ok(Self(text))
    }

    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Password(<redacted>)")
    }
}

/// Hashing failed: only with parameters argon2 refuses, which the constants rule out.
#[derive(Debug, thiserror::Error)]
#[error("password hashing failed: {0}")]
pub struct HashError(String);

fn argon2() -> Result<Argon2<'static>, HashError> {
    let params = Params::new(ARGON2_MEMORY_KIB, ARGON2_ITERATIONS, ARGON2_LANES, None)
        .map_err(|e| HashError(e.to_string()))?;
    Ok(Argon2::new(Algorithm::Argon2id, Version::V0x13, params))
}

/// The argon2id PHC string of `password` with a fresh random salt. Takes tens of
/// milliseconds of one core: call it off the async workers (`Hasher`).
pub fn hash_blocking(password: &[u8]) -> Result<String, HashError> {
    let salt = SaltString::generate(&mut OsRng);
    argon2()?
        .hash_password(password, &salt)
        .map(|hash| hash.to_string())
        .map_err(|e| HashError(e.to_string()))
}

/// Whether `password` matches the PHC string `phc`. A string that does not parse matches
/// nothing. Takes as long as hashing.
pub fn verify_blocking(password: &[u8], phc: &str) -> bool {
    let Ok(parsed) = PasswordHash::new(phc) else {
        return false;
    };
    // The verifier takes the parameters from the PHC string; the instance only supplies the
    // algorithm family.
    let Ok(hasher) = argon2() else {
        return false;
    };
    hasher.verify_password(password, &parsed).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_outside_the_rule_are_refused() {
        assert!(Password::parse("password", "1234567".into()).is_err());
        assert!(Password::parse("password", "12345678".into()).is_ok());
        assert!(Password::parse("password", "x".repeat(PASSWORD_LEN_MAX)).is_ok());
        assert!(Password::parse("password", "x".repeat(PASSWORD_LEN_MAX + 1)).is_err());
        // Bytes, not characters: four 2-byte characters are 8 bytes.
        assert!(Password::parse("password", "éééé".into()).is_ok());
    }

    #[test]
    fn debug_hides_the_text() {
        let shown = format!("{:?}", Password::parse("p", "hunter22".into()));
        assert!(!shown.contains("hunter22"), "{shown}");
    }

    #[test]
    fn hashes_verify_only_their_password() {
        let phc = hash_blocking(b"correct horse").expect("hashes");
        assert!(phc.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"), "{phc}");
        assert!(verify_blocking(b"correct horse", &phc));
        assert!(!verify_blocking(b"correct horsf", &phc));
        assert!(!verify_blocking(b"correct horse", "not a phc string"));
        let again = hash_blocking(b"correct horse").expect("hashes");
        assert_ne!(phc, again, "the salt is random");
    }
}
