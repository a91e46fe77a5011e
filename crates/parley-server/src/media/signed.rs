//! Signed media URLs: a download link that needs no header, for `<img src>` and `<a download>`
//! (docs/MEDIA.md). The signature binds the media id, the variant (original or thumbnail), the
//! user it was issued to and its expiry; access is checked again at each fetch, as that user.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The store's name for the key every gateway signs with.
pub const KEY_NAME: &str = "media-url";

/// Which bytes of an upload a URL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    Original,
    Thumbnail,
}

impl Variant {
    fn tag(self) -> &'static str {
        match self {
            Self::Original => "original",
            Self::Thumbnail => "thumbnail",
        }
    }
}

fn mac(key: &[u8], variant: Variant, media_id: &str, user: &str, exp_s: i64) -> Hmac<Sha256> {
    // Any key length is valid for HMAC, so `new_from_slice` cannot fail here.
    let mut mac = match Hmac::<Sha256>::new_from_slice(key) {
        Ok(mac) => mac,
        Err(_) => unreachable!("HMAC takes keys of any length"),
    };
    // Fields are separated by a byte no id holds, so no two tuples sign the same text.
    for part in [variant.tag(), media_id, user, &exp_s.to_string()] {
        mac.update(part.as_bytes());
        mac.update(b"\n");
    }
    mac
}

/// The hex signature of a URL.
pub fn sign(key: &[u8], variant: Variant, media_id: &str, user: &str, exp_s: i64) -> String {
    hex::encode(
        mac(key, variant, media_id, user, exp_s)
            .finalize()
            .into_bytes(),
    )
}

/// True when `sig` is the signature of these fields (compared in constant time) and `exp_s`
/// is not before `now_s`.
pub fn verify(
    key: &[u8],
    variant: Variant,
    media_id: &str,
    user: &str,
    exp_s: i64,
    sig: &str,
    now_s: i64,
) -> bool {
    let Ok(sig) = hex::decode(sig) else {
        return false;
    };
    exp_s >= now_s
        && mac(key, variant, media_id, user, exp_s)
            .verify_slice(&sig)
            .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_binds_every_field_and_expires() {
        let key = b"k".repeat(32);
        let sig = sign(&key, Variant::Original, "m1", "ana", 100);
        assert!(verify(&key, Variant::Original, "m1", "ana", 100, &sig, 100));
        assert!(!verify(
            &key,
            Variant::Original,
            "m1",
            "ana",
            100,
            &sig,
            101
        ));
        assert!(!verify(&key, Variant::Thumbnail, "m1", "ana", 100, &sig, 0));
        assert!(!verify(&key, Variant::Original, "m2", "ana", 100, &sig, 0));
        assert!(!verify(&key, Variant::Original, "m1", "ben", 100, &sig, 0));
        assert!(!verify(&key, Variant::Original, "m1", "ana", 101, &sig, 0));
        assert!(!verify(
            b"other",
            Variant::Original,
            "m1",
            "ana",
            100,
            &sig,
            0
        ));
        assert!(!verify(&key, Variant::Original, "m1", "ana", 100, "zz", 0));
    }
}
