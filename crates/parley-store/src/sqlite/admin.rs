//! The writes of users and devices on SQLite, each in its own write transaction.

use parley_domain::{DeviceId, UserId};

use super::rows::{now, ts};
use super::SqliteStore;
use crate::error::StoreError;
use crate::flow::admin::Accounts;

impl Accounts for SqliteStore {
    async fn insert_user(
        &self,
        user_id: &UserId,
        display_name: Option<&str>,
        password_hash: Option<&str>,
    ) -> Result<bool, StoreError> {
        let inserted = self
            .write_one(
                sqlx::query(
                    "INSERT INTO users (user_id, display_name, created_at, password_hash)
                     VALUES ($1, $2, $3, $4) ON CONFLICT (user_id) DO NOTHING",
                )
                .bind(user_id.as_str())
                .bind(display_name)
                .bind(ts(now()))
                .bind(password_hash),
            )
            .await?;
        Ok(inserted == 1)
    }

    async fn store_password_hash(
        &self,
        user_id: &UserId,
        password_hash: &str,
    ) -> Result<bool, StoreError> {
        let done = self
            .write_one(
                sqlx::query("UPDATE users SET password_hash = $2 WHERE user_id = $1")
                    .bind(user_id.as_str())
                    .bind(password_hash),
            )
            .await?;
        Ok(done > 0)
    }

    /// The device row is created or its token replaced (which revokes the old token, since only
    /// one hash is stored per device). `WHERE true` lets SQLite parse the upsert after a SELECT.
    async fn store_device_token(
        &self,
        (user_id, device_id): (&UserId, &DeviceId),
        token_hash: &str,
    ) -> Result<bool, StoreError> {
        let done = self.write_one(sqlx::query(
            "INSERT INTO devices (user_id, device_id, token_hash, created_at)
             SELECT user_id, $2, $3, $4 FROM users WHERE user_id = $1 AND true
             ON CONFLICT (user_id, device_id)
             DO UPDATE SET token_hash = excluded.token_hash, revoked_at = NULL, created_at = excluded.created_at",
        )
        .bind(user_id.as_str())
        .bind(device_id.as_str())
        .bind(token_hash)
        .bind(ts(now()))
        )
        .await?;
        Ok(done > 0)
    }

    async fn revoke_device_token(
        &self,
        (user_id, device_id): (&UserId, &DeviceId),
    ) -> Result<bool, StoreError> {
        let done = self.write_one(sqlx::query(
            "UPDATE devices SET revoked_at = COALESCE(revoked_at, $3) WHERE user_id = $1 AND device_id = $2",
        )
        .bind(user_id.as_str())
        .bind(device_id.as_str())
        .bind(ts(now()))
        )
        .await?;
        Ok(done > 0)
    }
}
