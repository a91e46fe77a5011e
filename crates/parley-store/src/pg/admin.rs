//! Users, devices and token authentication on PostgreSQL: one statement each, on the pool.

use parley_domain::{DeviceId, UserId};
use sqlx::PgPool;

use crate::error::StoreError;
use crate::sql;
use crate::types::DeviceIdentity;

pub(super) async fn insert_user(
    pool: &PgPool,
    user_id: &UserId,
    display_name: Option<&str>,
) -> Result<bool, StoreError> {
    let inserted = sqlx::query(
        "INSERT INTO users (user_id, display_name) VALUES ($1, $2) ON CONFLICT (user_id) DO NOTHING",
    )
    .bind(user_id.as_str())
    .bind(display_name)
    .execute(pool)
    .await?;
    Ok(inserted.rows_affected() == 1)
}

/// The device row is created or its token replaced (which revokes the old token, since only
/// one hash is stored per device).
pub(super) async fn store_device_token(
    pool: &PgPool,
    user_id: &UserId,
    device_id: &DeviceId,
    token_hash: &str,
) -> Result<bool, StoreError> {
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
    Ok(done.rows_affected() > 0)
}

pub(super) async fn revoke_device_token(
    pool: &PgPool,
    user_id: &UserId,
    device_id: &DeviceId,
) -> Result<bool, StoreError> {
    let done = sqlx::query(
        "UPDATE devices SET revoked_at = COALESCE(revoked_at, now()) WHERE user_id = $1 AND device_id = $2",
    )
    .bind(user_id.as_str())
    .bind(device_id.as_str())
    .execute(pool)
    .await?;
    Ok(done.rows_affected() > 0)
}

pub(super) async fn device_of_token(
    pool: &PgPool,
    token_hash: &str,
) -> Result<Option<DeviceIdentity>, StoreError> {
    sql::device_of_token(&mut *pool.acquire().await?, token_hash).await
}
