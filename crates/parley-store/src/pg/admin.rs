//! Users, devices and token authentication.

use parley_domain::{DeviceId, Rejection, UserId};
use sqlx::{PgPool, Row};

use crate::error::StoreError;
use crate::types::{DeviceIdentity, User};

pub(super) async fn create_user(
    pool: &PgPool,
    user_id: &UserId,
    display_name: Option<&str>,
) -> Result<User, StoreError> {
    let inserted = sqlx::query(
        "INSERT INTO users (user_id, display_name) VALUES ($1, $2)
         ON CONFLICT (user_id) DO NOTHING RETURNING user_id",
    )
    .bind(user_id.as_str())
    .bind(display_name)
    .fetch_optional(pool)
    .await?;
    if inserted.is_none() {
        return Err(Rejection::AlreadyExists("user").into());
    }
    Ok(User {
        user_id: user_id.clone(),
        display_name: display_name.map(str::to_owned),
    })
}

pub(super) async fn issue_device_token(
    pool: &PgPool,
    user_id: &UserId,
    device_id: &DeviceId,
    token_hash: &str,
) -> Result<(), StoreError> {
    // One statement: the device row is created or its token replaced (which revokes the old
    // token, since only one hash is stored per device).
    let done = sqlx::query(
        "INSERT INTO devices (user_id, device_id, token_hash)
         SELECT user_id, $2, $3 FROM users WHERE user_id = $1
         ON CONFLICT (user_id, device_id)
         DO UPDATE SET token_hash = EXCLUDED.token_hash, revoked_at = NULL, created_at = now()",
    )
    .bind(user_id.as_str())
    .bind(device_id.as_str())
    .bind(token_hash)
    .execute(pool)
    .await?;
    if done.rows_affected() == 0 {
        return Err(Rejection::NotFound("no such user").into());
    }
    Ok(())
}

pub(super) async fn revoke_device(
    pool: &PgPool,
    user_id: &UserId,
    device_id: &DeviceId,
) -> Result<(), StoreError> {
    let done = sqlx::query(
        "UPDATE devices SET revoked_at = COALESCE(revoked_at, now()) WHERE user_id = $1 AND device_id = $2",
    )
    .bind(user_id.as_str())
    .bind(device_id.as_str())
    .execute(pool)
    .await?;
    if done.rows_affected() == 0 {
        return Err(Rejection::NotFound("no such device").into());
    }
    Ok(())
}

pub(super) async fn authenticate(
    pool: &PgPool,
    token_hash: &str,
) -> Result<Option<DeviceIdentity>, StoreError> {
    let row = sqlx::query(
        "SELECT user_id, device_id FROM devices WHERE token_hash = $1 AND revoked_at IS NULL",
    )
    .bind(token_hash)
    .fetch_optional(pool)
    .await?;
    let Some(row) = row else { return Ok(None) };
    Ok(Some(DeviceIdentity {
        user_id: UserId::from_trusted(row.try_get("user_id")?),
        device_id: DeviceId::from_trusted(row.try_get("device_id")?),
    }))
}
