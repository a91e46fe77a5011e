//! The writes of users and devices on PostgreSQL: one statement each, on the pool.

use super::PgStore;
use crate::error::StoreError;
use crate::flow::admin::Accounts;
use parley_domain::{DeviceId, UserId};

impl Accounts for PgStore {
    async fn insert_user(
        &self,
        user_id: &UserId,
        display_name: Option<&str>,
        password_hash: Option<&str>,
    ) -> Result<bool, StoreError> {
        let inserted = sqlx::query(
            "INSERT INTO users (user_id, display_name, password_hash) VALUES ($1, $2, $3)
             ON CONFLICT (user_id) DO NOTHING",
        )
        .bind(user_id.as_str())
        .bind(display_name)
        .bind(password_hash)
        .execute(&mut *self.pool.acquire().await?)
        .await?;
        Ok(inserted.rows_affected() == 1)
    }

    async fn store_password_hash(
        &self,
        user_id: &UserId,
        password_hash: &str,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query("UPDATE users SET password_hash = $2 WHERE user_id = $1")
            .bind(user_id.as_str())
            .bind(password_hash)
            .execute(&mut *self.pool.acquire().await?)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    /// The device row is created or its token replaced (which revokes the old token, since only
    /// one hash is stored per device).
    async fn store_device_token(
        &self,
        (user_id, device_id): (&UserId, &DeviceId),
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
        .execute(&mut *self.pool.acquire().await?)
        .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn revoke_device_token(
        &self,
        (user_id, device_id): (&UserId, &DeviceId),
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE devices SET revoked_at = COALESCE(revoked_at, now()) WHERE user_id = $1 AND device_id = $2",
        )
        .bind(user_id.as_str())
        .bind(device_id.as_str())
        .execute(&mut *self.pool.acquire().await?)
        .await?;
        Ok(done.rows_affected() > 0)
    }
}
