//! Which conversations are end-to-end encrypted, as the send path asks it (docs/E2EE.md): a
//! plaintext message is refused there, so the server never holds one. A conversation's kind
//! never changes, so answers are kept; the first send into a conversation costs one primary-key
//! read, later ones a map lookup.

use std::collections::HashMap;
use std::sync::Mutex;

use parley_domain::{ConvId, UserId};
use parley_store::Store;

use crate::error::ApiError;

/// Conversations whose kind is kept. Past it the map starts over: a miss costs one read.
pub const KIND_CACHE_CONVS_MAX: usize = 100_000;

#[derive(Default)]
pub struct EncryptedConvs {
    known: Mutex<HashMap<ConvId, bool>>,
}

impl EncryptedConvs {
    /// Refuses a plaintext write of `user` into an encrypted conversation with
    /// `ENCRYPTED_CONVERSATION`, or `NOT_MEMBER` when they are none, so a non-member learns no
    /// more than P10 allows. An unknown conversation passes: the write itself answers it.
    pub async fn refuse_plaintext(
        &self,
        store: &dyn Store,
        conv_id: &ConvId,
        user: &UserId,
    ) -> Result<(), ApiError> {
        let known = self.lock().get(conv_id).copied();
        let encrypted = match known {
            Some(encrypted) => encrypted,
            None => {
                let Some(encrypted) = store.is_encrypted(conv_id).await? else {
                    return Ok(());
                };
                let mut map = self.lock();
                if map.len() >= KIND_CACHE_CONVS_MAX {
                    map.clear();
                }
                map.insert(conv_id.clone(), encrypted);
                encrypted
            }
        };
        if encrypted {
            store.get_conversation(conv_id, user).await?;
            return Err(ApiError::EncryptedConversation);
        }
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ConvId, bool>> {
        // A panic while holding the lock leaves a map that is still a valid cache.
        self.known.lock().unwrap_or_else(|e| e.into_inner())
    }
}
