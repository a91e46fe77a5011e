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

    /// Fingerprint of a message send that relates to other messages: a version of its own, so
    /// no plain send shares it, over the body and every relation that changes its meaning.
    pub fn of_related_message(body: &str, rel: &crate::relations::SendRelations) -> Self {
        let reply_to = rel.reply_to.map(|s| s.to_string()).unwrap_or_default();
        let thread_root = rel.thread_root.map(|s| s.to_string()).unwrap_or_default();
        let mentions: Vec<&str> = rel.mentions.iter().map(|u| u.as_str()).collect();
        let mentions = mentions.join(" ");
        if !rel.attachments.is_empty() {
            // A send with attachments has a version of its own, so the fingerprints of sends
            // without any stay what they were before attachments existed.
            let media: Vec<&str> = rel.attachments.iter().map(|m| m.as_str()).collect();
            let media = media.join(" ");
            return Self::of_parts(
                b"parley-send-v3",
                &[
                    b"msg",
                    body.as_bytes(),
                    reply_to.as_bytes(),
                    thread_root.as_bytes(),
                    mentions.as_bytes(),
                    media.as_bytes(),
                ],
            );
        }
        Self::of_parts(
            b"parley-send-v2",
            &[
                b"msg",
                body.as_bytes(),
                reply_to.as_bytes(),
                thread_root.as_bytes(),
                mentions.as_bytes(),
            ],
        )
    }

    /// Fingerprint of an edit: its target and new body. Edits share the request keys of
    /// sends, so the kind is part of it and a key used for a send is a mismatch for an edit.
    pub fn of_edit(target_seq: i64, body: &str) -> Self {
        let target = target_seq.to_string();
        Self::of_parts(
            b"parley-edit-v1",
            &[b"edit", target.as_bytes(), body.as_bytes()],
        )
    }

    /// An MLS write: its kind, epoch, message, Welcome and declared membership changes, each
    /// part length-prefixed so no two requests share a fingerprint.
    pub fn of_mls(kind: &str, epoch: i64, message: &str, extra: &[&str]) -> Self {
        let epoch = epoch.to_string();
        let mut parts: Vec<&[u8]> = vec![kind.as_bytes(), epoch.as_bytes(), message.as_bytes()];
        parts.extend(extra.iter().map(|p| p.as_bytes()));
        Self::of_parts(b"parley-mls-v1", &parts)
    }

    fn of_parts(version: &[u8], parts: &[&[u8]]) -> Self {
        let mut h = Sha256::new();
        h.update(version);
        for part in parts {
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

    #[test]
    fn relations_and_edits_have_hashes_of_their_own() {
        use crate::relations::SendRelations;
        let plain = RequestHash::of_message("x");
        let empty = RequestHash::of_related_message("x", &SendRelations::default());
        let reply = RequestHash::of_related_message(
            "x",
            &SendRelations {
                reply_to: Some(3),
                ..SendRelations::default()
            },
        );
        let thread = RequestHash::of_related_message(
            "x",
            &SendRelations {
                thread_root: Some(3),
                ..SendRelations::default()
            },
        );
        assert_ne!(plain, empty);
        assert_ne!(reply, thread);
        assert_ne!(RequestHash::of_edit(3, "x"), RequestHash::of_edit(4, "x"));
        assert_ne!(RequestHash::of_edit(3, "x"), plain);
    }
}
