//! Message encryption for Web Push (RFC 8291) in the `aes128gcm` content coding (RFC 8188).
//!
//! The server makes an ephemeral P-256 key pair per message; ECDH with the browser's key and the
//! browser's auth secret give the input key, from which HKDF with a random salt derives the
//! content key and nonce. The message is one record: the plaintext, the delimiter 0x02 (last
//! record) and the AES-GCM tag, after a header `salt || rs || idlen || keyid` whose key id is the
//! ephemeral public key, so the browser can redo the ECDH.

use aes_gcm::aead::{Aead, KeyInit};
use aes_gcm::{Aes128Gcm, Key, Nonce};
use hkdf::Hkdf;
use p256::elliptic_curve::sec1::ToEncodedPoint;
use p256::{PublicKey, SecretKey};
use rand::rngs::OsRng;
use rand::RngCore;
use sha2::Sha256;

use crate::PushError;

/// The record size written in the header, in bytes: RFC 8291 §4 says 4096, and one record of
/// that size holds every message this crate sends.
pub const RECORD_BYTES: u32 = 4096;

/// The header's length, in bytes: salt (16), record size (4), key id length (1), key id (65).
pub const HEADER_BYTES: usize = 16 + 4 + 1 + 65;

/// The AES-GCM tag after the ciphertext, in bytes.
const TAG_BYTES: usize = 16;

/// The delimiter after the plaintext that marks the last (here the only) record.
const LAST_RECORD: u8 = 0x02;

/// The largest plaintext, in bytes: RFC 8030 §7.2 obliges push services to take bodies of 4096
/// bytes, and header, delimiter and tag leave 4096 − 86 − 1 − 16 of them for the message.
pub const PAYLOAD_LEN_MAX: usize = 4096 - HEADER_BYTES - 1 - TAG_BYTES;

/// Length of an uncompressed P-256 point, in bytes: 0x04, x, y.
const POINT_BYTES: usize = 65;

/// Length of the auth secret a browser makes, in bytes (RFC 8291 §3.2).
const AUTH_SECRET_BYTES: usize = 16;

/// Encrypts `plaintext` for the browser whose key is `ua_public` (65 bytes, uncompressed) and
/// whose auth secret is `auth_secret` (16 bytes), with a fresh ephemeral key and salt.
pub fn encrypt(
    plaintext: &[u8],
    ua_public: &[u8],
    auth_secret: &[u8],
) -> Result<Vec<u8>, PushError> {
    let as_private = SecretKey::random(&mut OsRng);
    let mut salt = [0u8; 16];
    OsRng.fill_bytes(&mut salt);
    encrypt_with(plaintext, ua_public, auth_secret, &as_private, salt)
}

/// [`encrypt`] with a given ephemeral key and salt, so a test vector can be reproduced. Never
/// reuse a key and salt pair for two messages: the content key and nonce would repeat.
pub fn encrypt_with(
    plaintext: &[u8],
    ua_public: &[u8],
    auth_secret: &[u8],
    as_private: &SecretKey,
    salt: [u8; 16],
) -> Result<Vec<u8>, PushError> {
    if plaintext.len() > PAYLOAD_LEN_MAX {
        return Err(PushError::PayloadTooLarge {
            len: plaintext.len(),
            max: PAYLOAD_LEN_MAX,
        });
    }
    let ua_key = parse_point(ua_public)
        .ok_or(PushError::Key("p256dh is not an uncompressed P-256 point"))?;
    if auth_secret.len() != AUTH_SECRET_BYTES {
        return Err(PushError::Key("auth secret is not 16 bytes"));
    }
    let as_public = as_private.public_key().to_encoded_point(false);
    let shared = p256::ecdh::diffie_hellman(as_private.to_nonzero_scalar(), ua_key.as_affine());
    let (cek, nonce) = derive(
        shared.raw_secret_bytes(),
        auth_secret,
        ua_public,
        as_public.as_bytes(),
        &salt,
    );

    let mut record = Vec::with_capacity(plaintext.len() + 1);
    record.extend_from_slice(plaintext);
    record.push(LAST_RECORD);
    let sealed = Aes128Gcm::new(Key::<Aes128Gcm>::from_slice(&cek))
        .encrypt(Nonce::from_slice(&nonce), record.as_slice())
        .map_err(|_| PushError::Encrypt("AES-GCM refused the record"))?;

    let mut body = Vec::with_capacity(HEADER_BYTES + sealed.len());
    body.extend_from_slice(&salt);
    body.extend_from_slice(&RECORD_BYTES.to_be_bytes());
    body.push(POINT_BYTES as u8);
    body.extend_from_slice(as_public.as_bytes());
    body.extend_from_slice(&sealed);
    Ok(body)
}

/// Decrypts a one-record `aes128gcm` body as the browser holding `ua_private` and `auth_secret`
/// would; the test push service uses it to see what the server sent.
pub fn decrypt(
    body: &[u8],
    ua_private: &SecretKey,
    auth_secret: &[u8],
) -> Result<Vec<u8>, PushError> {
    if auth_secret.len() != AUTH_SECRET_BYTES {
        return Err(PushError::Decrypt("auth secret is not 16 bytes"));
    }
    if body.len() < HEADER_BYTES {
        return Err(PushError::Decrypt("shorter than the header"));
    }
    let (header, sealed) = body.split_at(HEADER_BYTES);
    let salt = &header[..16];
    let rs = u32::from_be_bytes([header[16], header[17], header[18], header[19]]);
    if usize::from(header[20]) != POINT_BYTES {
        return Err(PushError::Decrypt("key id is not a 65-byte point"));
    }
    let as_public = &header[21..];
    // RFC 8188 §2.1: a record size below 18 cannot hold a tag and a delimiter.
    if rs < 18 {
        return Err(PushError::Decrypt("record size below 18"));
    }
    if sealed.len() > rs as usize {
        return Err(PushError::Decrypt("more than one record"));
    }
    if sealed.len() < TAG_BYTES + 1 {
        return Err(PushError::Decrypt(
            "record shorter than a tag and a delimiter",
        ));
    }
    let as_key = parse_point(as_public).ok_or(PushError::Decrypt("key id is not a P-256 point"))?;
    let ua_public = ua_private.public_key().to_encoded_point(false);
    let shared = p256::ecdh::diffie_hellman(ua_private.to_nonzero_scalar(), as_key.as_affine());
    let (cek, nonce) = derive(
        shared.raw_secret_bytes(),
        auth_secret,
        ua_public.as_bytes(),
        as_public,
        salt,
    );
    let mut record = Aes128Gcm::new(Key::<Aes128Gcm>::from_slice(&cek))
        .decrypt(Nonce::from_slice(&nonce), sealed)
        .map_err(|_| PushError::Decrypt("authentication failed (wrong keys or altered bytes)"))?;

    // RFC 8188 §2: padding is zeros after the delimiter, which must be the last record's.
    let end = record
        .iter()
        .rposition(|&b| b != 0)
        .ok_or(PushError::Decrypt("record without a delimiter"))?;
    if record[end] != LAST_RECORD {
        return Err(PushError::Decrypt("record is not marked last"));
    }
    record.truncate(end);
    Ok(record)
}

/// The content key and nonce (RFC 8291 §3.4 then RFC 8188 §2.2–2.3).
fn derive(
    ecdh_secret: &[u8],
    auth_secret: &[u8],
    ua_public: &[u8],
    as_public: &[u8],
    salt: &[u8],
) -> ([u8; 16], [u8; 12]) {
    let mut key_info = Vec::with_capacity(14 + 2 * POINT_BYTES);
    key_info.extend_from_slice(b"WebPush: info\0");
    key_info.extend_from_slice(ua_public);
    key_info.extend_from_slice(as_public);
    let mut ikm = [0u8; 32];
    expand(Some(auth_secret), ecdh_secret, &key_info, &mut ikm);

    let mut cek = [0u8; 16];
    let mut nonce = [0u8; 12];
    expand(Some(salt), &ikm, b"Content-Encoding: aes128gcm\0", &mut cek);
    expand(Some(salt), &ikm, b"Content-Encoding: nonce\0", &mut nonce);
    (cek, nonce)
}

/// HKDF-SHA256 extract then expand into `out`, which is never longer than 32 bytes here.
fn expand(salt: Option<&[u8]>, ikm: &[u8], info: &[u8], out: &mut [u8]) {
    let hkdf = Hkdf::<Sha256>::new(salt, ikm);
    // Expand fails only past 255 hash lengths; every caller asks for at most one.
    if hkdf.expand(info, out).is_err() {
        unreachable!("HKDF output of {} bytes", out.len());
    }
}

/// An uncompressed P-256 point, as RFC 8291 requires of both keys.
pub(crate) fn parse_point(bytes: &[u8]) -> Option<PublicKey> {
    if bytes.len() != POINT_BYTES || bytes[0] != 0x04 {
        return None;
    }
    PublicKey::from_sec1_bytes(bytes).ok()
}
