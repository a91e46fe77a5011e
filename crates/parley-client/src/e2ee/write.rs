//! Writing to an encrypted conversation: Commits that add, remove or update, and messages.
//! Each write is made in the group's current epoch and kept in the key store until the server
//! answers, so a write whose answer was lost is resent as it was (the server answers a repeat
//! with the first answer) and never made twice.

use std::collections::BTreeSet;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use openmls::prelude::KeyPackage;
use parley_wire::{DeviceRef, MlsAck, MlsKind, MlsPost, WelcomeOut};

use super::keystore::PendingWrite;
use super::mls::{CommitOut, Device};
use super::{Content, Decrypted, E2ee, E2eeError, Inner, Result, WRITE_ATTEMPTS_MAX};
use crate::error::{code, ClientError};
use crate::request::new_client_msg_id;

/// A Commit to post, and the users whose membership it changes.
struct Plan {
    out: CommitOut,
    add_users: Vec<String>,
    remove_users: Vec<String>,
}

/// How the server answered a write.
enum Answer {
    Acked(MlsAck),
    /// Another Commit ended the epoch the write was made in.
    Conflict,
}

fn is_conflict(e: &ClientError) -> bool {
    e.code() == Some(code::EPOCH_CONFLICT)
}

fn users_of(devices: &[DeviceRef]) -> BTreeSet<&str> {
    devices.iter().map(|d| d.user_id.as_str()).collect()
}

fn epoch_i64(device: &Device, group: &[u8]) -> Result<i64> {
    let epoch = device.epoch(group)?;
    i64::try_from(epoch).map_err(|_| E2eeError::Invalid(format!("epoch {epoch} out of range")))
}

impl E2ee {
    async fn post(&self, conv_id: &str, post: &MlsPost) -> Result<Answer> {
        match self.client.post_mls_with_retry(conv_id, post).await {
            Ok(ack) => Ok(Answer::Acked(ack)),
            Err(e) if is_conflict(&e) => Ok(Answer::Conflict),
            Err(e) => Err(e.into()),
        }
    }

    /// Settles a write of an earlier call whose answer was lost: the log may show where it
    /// landed or that another Commit won; otherwise it is resent as it was.
    async fn resolve_pending(&self, inner: &mut Inner, conv_id: &str) -> Result<()> {
        if inner.meta.conv(conv_id).pending.is_none() {
            return Ok(());
        }
        self.apply_new(inner, conv_id).await?;
        let Some(pending) = inner.meta.conv(conv_id).pending.clone() else {
            return Ok(());
        };
        let answer = self.post(conv_id, &pending.post).await?;
        let group = conv_id.as_bytes();
        match (answer, pending.post.kind) {
            (Answer::Acked(ack), MlsKind::Commit) => {
                let changes = inner.device.merge_pending(group)?;
                self.finish_commit(inner, conv_id, &ack, changes.added, changes.removed)?;
            }
            (Answer::Acked(_), _) => {
                inner.meta.conv(conv_id).pending = None;
                inner.save()?;
            }
            (Answer::Conflict, kind) => {
                if kind == MlsKind::Commit {
                    inner.device.clear_pending(group)?;
                }
                // A message made in a past epoch is made again by the next send of its key.
                inner.meta.conv(conv_id).pending = None;
                inner.save()?;
            }
        }
        Ok(())
    }

    /// Records an accepted Commit of this device: its result goes to the next read.
    fn finish_commit(
        &self,
        inner: &mut Inner,
        conv_id: &str,
        ack: &MlsAck,
        added: Vec<DeviceRef>,
        removed: Vec<DeviceRef>,
    ) -> Result<()> {
        let state = inner.meta.conv(conv_id);
        state.pending = None;
        if !added.is_empty() || !removed.is_empty() {
            state.inbox.push(Decrypted {
                seq: ack.seq,
                sender_user: self.me.user_id.clone(),
                sender_device: self.me.device_id.clone(),
                content: Content::MembersChanged { added, removed },
            });
        }
        inner.save()
    }

    /// Makes, posts and merges a Commit planned by `plan` in the group's current epoch; after
    /// an `EPOCH_CONFLICT`, drops it, applies the log and plans again. `None` when the plan
    /// finds nothing to do.
    async fn commit<F>(&self, conv_id: &str, mut plan: F) -> Result<Option<MlsAck>>
    where
        F: FnMut(&Device, &[u8]) -> Result<Option<Plan>>,
    {
        let mut inner = self.inner.lock().await;
        let inner = &mut *inner;
        self.resolve_pending(inner, conv_id).await?;
        let group = conv_id.as_bytes();
        for _ in 0..WRITE_ATTEMPTS_MAX {
            let Some(Plan {
                out,
                add_users,
                remove_users,
            }) = plan(&inner.device, group)?
            else {
                return Ok(None);
            };
            let welcome = out.welcome.as_ref().map(|w| WelcomeOut {
                message: BASE64.encode(w),
                devices: out.added.clone(),
            });
            let post = MlsPost {
                client_msg_id: new_client_msg_id(),
                kind: MlsKind::Commit,
                epoch: epoch_i64(&inner.device, group)?,
                message: BASE64.encode(&out.commit),
                welcome,
                add_users,
                remove_users,
            };
            inner.meta.conv(conv_id).pending = Some(PendingWrite {
                post: post.clone(),
                added: out.added.clone(),
                removed: out.removed.clone(),
            });
            inner.save()?;
            match self.post(conv_id, &post).await {
                Ok(Answer::Acked(ack)) => {
                    inner.device.merge_pending(group)?;
                    self.finish_commit(inner, conv_id, &ack, out.added, out.removed)?;
                    return Ok(Some(ack));
                }
                Ok(Answer::Conflict) => {
                    inner.device.clear_pending(group)?;
                    inner.meta.conv(conv_id).pending = None;
                    inner.save()?;
                    self.apply_new(inner, conv_id).await?;
                }
                // The outcome is unknown: the Commit stays pending, for the log or a resend to
                // settle.
                Err(E2eeError::Client(e)) if e.is_retryable() => return Err(e.into()),
                Err(e) => {
                    inner.device.clear_pending(group)?;
                    inner.meta.conv(conv_id).pending = None;
                    inner.save()?;
                    return Err(e);
                }
            }
        }
        Err(E2eeError::Contended {
            attempts: WRITE_ATTEMPTS_MAX,
        })
    }

    /// Claims a key package of every device of `users` and checks that each names the device
    /// it was handed out for.
    async fn claim(&self, users: &[&str]) -> Result<Vec<KeyPackage>> {
        let mut out = Vec::new();
        for user in users {
            let claimed = self.client.claim_key_packages(user).await?;
            let inner = self.inner.lock().await;
            for c in claimed.key_packages {
                let bytes = BASE64
                    .decode(&c.key_package)
                    .map_err(|e| E2eeError::decode("a claimed key package", e))?;
                let (kp, device) = inner.device.validate_key_package(&bytes)?;
                let handed = DeviceRef {
                    user_id: c.user_id,
                    device_id: c.device_id,
                };
                if device != handed || handed.user_id != *user {
                    return Err(E2eeError::ForeignKeyPackage {
                        claimed: format!("{}/{}", handed.user_id, handed.device_id),
                        found: format!("{}/{}", device.user_id, device.device_id),
                    });
                }
                if device != self.me {
                    out.push(kp);
                }
            }
        }
        Ok(out)
    }

    /// Adds every device of `users` that has a key package, by one Commit with a Welcome for
    /// them; the users not in the group before are declared added. Devices already in the
    /// group are left as they are. `None` when there was nothing to add.
    pub async fn add_users(&self, conv_id: &str, users: &[&str]) -> Result<Option<MlsAck>> {
        let key_packages = self.claim(users).await?;
        for user in users {
            if *user != self.me.user_id
                && !key_packages.iter().any(|kp| {
                    super::mls::device_of(kp.leaf_node().credential())
                        .is_ok_and(|d| d.user_id == *user)
                })
            {
                return Err(E2eeError::NoKeyPackages {
                    user_id: (*user).to_owned(),
                });
            }
        }
        self.commit(conv_id, |device, group| {
            let members = device.members(group)?;
            let mut fresh = Vec::new();
            for kp in &key_packages {
                let named = super::mls::device_of(kp.leaf_node().credential())?;
                if !members.contains(&named) {
                    fresh.push(kp.clone());
                }
            }
            if fresh.is_empty() {
                return Ok(None);
            }
            let out = device.add(group, &fresh)?;
            let present = users_of(&members);
            let add_users = users_of(&out.added)
                .into_iter()
                .filter(|u| !present.contains(u))
                .map(str::to_owned)
                .collect();
            Ok(Some(Plan {
                out,
                add_users,
                remove_users: Vec::new(),
            }))
        })
        .await
    }

    /// Adds the devices of `user_id` (already in the group) that are not in it yet, such as
    /// this user's own new device. `None` when there was nothing to add.
    pub async fn add_devices(&self, conv_id: &str, user_id: &str) -> Result<Option<MlsAck>> {
        self.add_users(conv_id, &[user_id]).await
    }

    /// Removes every device of `users` by one Commit, declaring the users removed.
    pub async fn remove_users(&self, conv_id: &str, users: &[&str]) -> Result<Option<MlsAck>> {
        if users.contains(&self.me.user_id.as_str()) {
            return Err(E2eeError::SelfRemoval);
        }
        self.commit(conv_id, |device, group| {
            let leaving: Vec<DeviceRef> = device
                .members(group)?
                .into_iter()
                .filter(|d| users.contains(&d.user_id.as_str()))
                .collect();
            if leaving.is_empty() {
                return Ok(None);
            }
            let out = device.remove(group, &leaving)?;
            let remove_users = users_of(&out.removed)
                .into_iter()
                .map(str::to_owned)
                .collect();
            Ok(Some(Plan {
                out,
                add_users: Vec::new(),
                remove_users,
            }))
        })
        .await
    }

    /// Removes one device; the user is declared removed only when it was their last in the
    /// group. `None` when the device is not in the group.
    pub async fn remove_device(
        &self,
        conv_id: &str,
        user_id: &str,
        device_id: &str,
    ) -> Result<Option<MlsAck>> {
        let target = DeviceRef {
            user_id: user_id.to_owned(),
            device_id: device_id.to_owned(),
        };
        if target == self.me {
            return Err(E2eeError::SelfRemoval);
        }
        self.commit(conv_id, |device, group| {
            let members = device.members(group)?;
            if !members.contains(&target) {
                return Ok(None);
            }
            let out = device.remove(group, std::slice::from_ref(&target))?;
            let last = !members
                .iter()
                .any(|d| d.user_id == target.user_id && *d != target);
            Ok(Some(Plan {
                out,
                add_users: Vec::new(),
                remove_users: if last {
                    vec![target.user_id.clone()]
                } else {
                    Vec::new()
                },
            }))
        })
        .await
    }

    /// Renews this device's keys by a Commit, which moves the group to a new epoch.
    pub async fn update(&self, conv_id: &str) -> Result<MlsAck> {
        let ack = self
            .commit(conv_id, |device, group| {
                Ok(Some(Plan {
                    out: device.self_update(group)?,
                    add_users: Vec::new(),
                    remove_users: Vec::new(),
                }))
            })
            .await?;
        ack.ok_or_else(|| E2eeError::Invalid("an update always commits".into()))
    }

    /// Encrypts `text` and posts it under a fresh request key.
    pub async fn send(&self, conv_id: &str, text: &str) -> Result<MlsAck> {
        self.send_with_id(conv_id, &new_client_msg_id(), text).await
    }

    /// Encrypts `text` in the group's current epoch and posts it under `client_msg_id`. After an
    /// unknown outcome, call again with the same key and text: the message is resent as it
    /// was, or learnt from the log, and never stored twice.
    pub async fn send_with_id(
        &self,
        conv_id: &str,
        client_msg_id: &str,
        text: &str,
    ) -> Result<MlsAck> {
        let mut inner = self.inner.lock().await;
        let inner = &mut *inner;
        let group = conv_id.as_bytes();
        let key = (conv_id.to_owned(), client_msg_id.to_owned());
        let retry_of_pending = inner
            .meta
            .conv(conv_id)
            .pending
            .as_ref()
            .is_some_and(|p| p.post.client_msg_id == client_msg_id);
        if !retry_of_pending {
            self.resolve_pending(inner, conv_id).await?;
        }
        if let Some(ack) = inner.landed.get(&key) {
            return Ok(ack.clone());
        }
        inner
            .meta
            .conv(conv_id)
            .sent
            .insert(client_msg_id.to_owned(), text.to_owned());
        for _ in 0..WRITE_ATTEMPTS_MAX {
            let stored = inner
                .meta
                .conv(conv_id)
                .pending
                .clone()
                .filter(|p| p.post.client_msg_id == client_msg_id);
            let post = match stored {
                Some(p) => p.post,
                None => {
                    let post = MlsPost {
                        client_msg_id: client_msg_id.to_owned(),
                        kind: MlsKind::Application,
                        epoch: epoch_i64(&inner.device, group)?,
                        message: BASE64.encode(inner.device.encrypt(group, text.as_bytes())?),
                        welcome: None,
                        add_users: Vec::new(),
                        remove_users: Vec::new(),
                    };
                    inner.meta.conv(conv_id).pending = Some(PendingWrite {
                        post: post.clone(),
                        added: Vec::new(),
                        removed: Vec::new(),
                    });
                    post
                }
            };
            inner.save()?;
            match self.post(conv_id, &post).await {
                Ok(Answer::Acked(ack)) => {
                    inner.meta.conv(conv_id).pending = None;
                    inner.save()?;
                    return Ok(ack);
                }
                Ok(Answer::Conflict) => {
                    inner.meta.conv(conv_id).pending = None;
                    inner.save()?;
                    self.apply_new(inner, conv_id).await?;
                    if let Some(ack) = inner.landed.get(&key) {
                        return Ok(ack.clone());
                    }
                }
                Err(E2eeError::Client(e)) if e.is_retryable() => return Err(e.into()),
                Err(e) => {
                    let state = inner.meta.conv(conv_id);
                    state.pending = None;
                    state.sent.remove(client_msg_id);
                    inner.save()?;
                    return Err(e);
                }
            }
        }
        inner.meta.conv(conv_id).sent.remove(client_msg_id);
        inner.save()?;
        Err(E2eeError::Contended {
            attempts: WRITE_ATTEMPTS_MAX,
        })
    }
}
