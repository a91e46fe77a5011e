//! base64 as Web Push uses it: base64url without padding when we write, and whatever browsers
//! and libraries are known to hand over when we read.

use base64::alphabet;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, URL_SAFE_NO_PAD};
use base64::engine::DecodePaddingMode;
use base64::Engine;

/// Decoding config: padding may or may not be there, as `PushSubscription.toJSON()` omits it
/// and some server libraries add it.
const LENIENT: GeneralPurposeConfig = GeneralPurposeConfig::new()
    .with_decode_padding_mode(DecodePaddingMode::Indifferent)
    .with_decode_allow_trailing_bits(true);

const URL_LENIENT: GeneralPurpose = GeneralPurpose::new(&alphabet::URL_SAFE, LENIENT);
const STANDARD_LENIENT: GeneralPurpose = GeneralPurpose::new(&alphabet::STANDARD, LENIENT);

/// base64url without padding, the form RFC 8291 and RFC 8292 use on the wire.
pub(crate) fn encode(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Strict base64url without padding, for the parts of a JWT, which RFC 7515 fixes to that form.
pub(crate) fn decode_strict(text: &str) -> Option<Vec<u8>> {
    URL_SAFE_NO_PAD.decode(text).ok()
}

/// base64url or standard base64, padded or not: older subscriptions were stored with the
/// standard alphabet, and a key is checked for its length and its point afterwards anyway.
pub(crate) fn decode_lenient(text: &str) -> Option<Vec<u8>> {
    let text = text.trim();
    if text.contains(['+', '/']) {
        STANDARD_LENIENT.decode(text).ok()
    } else {
        URL_LENIENT.decode(text).ok()
    }
}
