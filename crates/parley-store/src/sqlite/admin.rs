//! Users, devices and token authentication. Like the single statements of the PostgreSQL
//! store, a failed commit here is `Unavailable`: none of these is a send whose retry needs the
//! outcome-unknown answer.

use parley_domain::{DeviceId, Rejection, UserId};
use sqlx::Row;

use super::rows::{now, ts};
use super::SqliteStore;
use crate::backend::Backend;
use crate::error::StoreError;
use crate::types::{DeviceIdentity, User};

pub(super) async fn create_user(
    store: &SqliteStore,
    user_id: &UserId,
    display_name: Option<&str>,
) -> Result<User, StoreError> {
    let mut tx = store.begin_write().await?;
    let inserted = sqlx::query(
        "INSERT INTO users (user_id, display_name, created_at) VALUES ($1, $2, $3)
         ON CONFLICT (user_id) DO NOTHING",
    )
    .bind(user_id.as_str())
    .bind(display_name)
    .bind(ts(now()))
    .execute(&mut *tx)
    .await?;
    if inserted.rows_affected() == 0 {
        return Err(Rejection::AlreadyExists("user").into());
    }
    tx.commit().await?;
    Ok(User {
        user_id: user_id.clone(),
        display_name: display_name.map(str::to_owned),
    })
}

pub(super) async fn issue_device_token(
    store: &SqliteStore,
    user_id: &UserId,
    device_id: &DeviceId,
    token_hash: &str,
) -> Result<(), StoreError> {
    let mut tx = store.begin_write().await?;
    // One statement: the device row is created or its token replaced (which revokes the old
    // token, since only one hash is stored per device). `WHERE true` lets SQLite parse the
    // upsert after a SELECT.
    let done = sqlx::query(
        "INSERT INTO devices (user_id, device_id, token_hash, created_at)
         SELECT user_id, $2, $3, $4 FROM users WHERE user_id = $1 AND true
         ON CONFLICT (user_id, device_id)
         DO UPDATE SET token_hash = excluded.token_hash, revoked_at = NULL, created_at = excluded.created_at",
    )
    .bind(user_id.as_str())
    .bind(device_id.as_str())
    .bind(token_hash)
    .bind(ts(now()))
    .execute(&mut *tx)
    .await?;
    if done.rows_affected() == 0 {
        return Err(Rejection::NotFound("no such user").into());
    }
    Ok(tx.commit().await?)
}

pub(super) async fn revoke_device(
    store: &SqliteStore,
    user_id: &UserId,
    device_id: &DeviceId,
) -> Result<(), StoreError> {
    let mut tx = store.begin_write().await?;
    let done = sqlx::query(
        "UPDATE devices SET revoked_at = COALESCE(revoked_at, $3) WHERE user_id = $1 AND device_id = $2",
    )
    .bind(user_id.as_str())
    .bind(device_id.as_str())
    .bind(ts(now()))
    .execute(&mut *tx)
    .await?;
    if done.rows_affected() == 0 {
        return Err(Rejection::NotFound("no such device").into());
    }
    Ok(tx.commit().await?)
}

pub(super) async fn authenticate(
    store: &SqliteStore,
    token_hash: &str,
) -> Result<Option<DeviceIdentity>, StoreError> {
    let row = sqlx::query(
        "SELECT user_id, device_id FROM devices WHERE token_hash = $1 AND revoked_at IS NULL",
    )
    .bind(token_hash)
    .fetch_optional(&store.reader)
    .await?;
    let Some(row) = row else { return Ok(None) };
    Ok(Some(DeviceIdentity {
        user_id: UserId::from_trusted(row.try_get("user_id")?),
        device_id: DeviceId::from_trusted(row.try_get("device_id")?),
    }))
}
