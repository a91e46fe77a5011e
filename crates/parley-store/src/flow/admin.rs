//! Users and devices: each one statement, refused when it changed nothing.

use parley_domain::{DeviceId, Rejection, UserId};

use super::StoreFuture;
use crate::backend::Backend;
use crate::error::StoreError;
use crate::types::User;

/// The writes of users and devices, each one statement of its own.
pub(crate) trait Accounts {
    /// Inserts a user, with the hash of a password or none, unless the id is taken; true when
    /// inserted.
    fn insert_user(
        &self,
        user_id: &UserId,
        display_name: Option<&str>,
        password_hash: Option<&str>,
    ) -> impl StoreFuture<bool>;
    /// Replaces the user's password hash; false when the user does not exist.
    fn store_password_hash(&self, user_id: &UserId, password_hash: &str) -> impl StoreFuture<bool>;
    /// Creates the device or replaces (and so revokes) its token; false when the user does not
    /// exist.
    fn store_device_token(
        &self,
        device: (&UserId, &DeviceId),
        token_hash: &str,
    ) -> impl StoreFuture<bool>;
    /// Revokes the device's token; false when there is no such device.
    fn revoke_device_token(&self, device: (&UserId, &DeviceId)) -> impl StoreFuture<bool>;
}

pub(crate) async fn create_user<B: Backend>(
    backend: &B,
    user_id: &UserId,
    display_name: Option<&str>,
    password_hash: Option<&str>,
) -> Result<User, StoreError> {
    if !backend
        .insert_user(user_id, display_name, password_hash)
        .await?
    {
        return Err(Rejection::AlreadyExists("user").into());
    }
    Ok(User {
        user_id: user_id.clone(),
        display_name: display_name.map(str::to_owned),
    })
}

pub(crate) async fn issue_device_token<B: Backend>(
    backend: &B,
    user_id: &UserId,
    device_id: &DeviceId,
    token_hash: &str,
) -> Result<(), StoreError> {
    if !backend
        .store_device_token((user_id, device_id), token_hash)
        .await?
    {
        return Err(Rejection::NotFound("no such user").into());
    }
    // A new token revokes the device's previous one, and with it the previous holder's push
    // target: whoever holds the new token registers their own.
    super::push::delete_target(backend, (user_id, device_id)).await?;
    Ok(())
}

pub(crate) async fn revoke_device<B: Backend>(
    backend: &B,
    user_id: &UserId,
    device_id: &DeviceId,
) -> Result<(), StoreError> {
    if !backend.revoke_device_token((user_id, device_id)).await? {
        return Err(Rejection::NotFound("no such device").into());
    }
    // A revoked device gets no more notifications; the claim also skips revoked devices, in
    // case this second transaction never runs.
    super::push::delete_target(backend, (user_id, device_id)).await?;
    Ok(())
}

pub(crate) async fn set_password_hash<B: Backend>(
    backend: &B,
    user_id: &UserId,
    password_hash: &str,
) -> Result<(), StoreError> {
    if !backend.store_password_hash(user_id, password_hash).await? {
        return Err(Rejection::NotFound("no such user").into());
    }
    Ok(())
}
