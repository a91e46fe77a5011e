//! The primitives of the MLS Delivery Service (`flow::mls`, `flow::mls_keys`) on SQLite, in the
//! write transaction that holds the database's write lock (so a claim is alone by itself).

use chrono::{DateTime, Utc};
use parley_domain::{DeviceId, UserId};

use super::rows::{now, tick, ts};
use super::Tx;
use crate::error::StoreError;
use crate::flow::mls::{MlsTx, NewMlsEvent};
use crate::flow::mls_keys::KeyPackageTx;

impl MlsTx for Tx<'_> {
    async fn append_mls_event(
        &mut self,
        ev: &NewMlsEvent<'_>,
    ) -> Result<DateTime<Utc>, StoreError> {
        let at = now();
        let change = tick(self).await?;
        sqlx::query(
            "INSERT INTO events (conv_id, seq, kind, sender_user, sender_device, client_msg_id,
                                 request_hash, message_id, mls_epoch, mls_message, mls_devices,
                                 created_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
        )
        .bind(ev.conv_id.as_str())
        .bind(ev.slot.seq)
        .bind(ev.kind.as_str())
        .bind(ev.sender_user.as_str())
        .bind(ev.sender_device)
        .bind(ev.client_msg_id)
        .bind(ev.request_hash)
        .bind(super::rows::uuid_text(ev.message_id))
        .bind(ev.mls_epoch)
        .bind(ev.mls_message)
        .bind(ev.mls_devices)
        .bind(ts(at))
        .execute(&mut **self)
        .await?;
        sqlx::query(
            "UPDATE conversations SET next_seq = $2 + 1, mls_epoch = $3, change_seq = $4
              WHERE conv_id = $1",
        )
        .bind(ev.conv_id.as_str())
        .bind(ev.slot.seq)
        .bind(ev.epoch_after)
        .bind(change)
        .execute(&mut **self)
        .await?;
        Ok(at)
    }
}

impl KeyPackageTx for Tx<'_> {
    const TAKE_KEY_PACKAGE_SQL: &'static str = "DELETE FROM key_packages WHERE package_id = (
           SELECT package_id FROM key_packages
            WHERE user_id = $1 AND device_id = $2 AND NOT last_resort
            ORDER BY package_id LIMIT 1)
         RETURNING key_package";

    async fn insert_key_package(
        &mut self,
        user: &UserId,
        device: &DeviceId,
        key_package: &str,
        last_resort: bool,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO key_packages (user_id, device_id, key_package, last_resort, created_at)
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(user.as_str())
        .bind(device.as_str())
        .bind(key_package)
        .bind(i64::from(last_resort))
        .bind(ts(now()))
        .execute(&mut **self)
        .await?;
        Ok(())
    }

    async fn key_package_stock(
        &mut self,
        user: &UserId,
        device: &DeviceId,
    ) -> Result<(u32, bool), StoreError> {
        let (available, last_resort): (i64, i64) = sqlx::query_as(
            "SELECT COALESCE(sum(NOT last_resort), 0), COALESCE(max(last_resort), 0)
               FROM key_packages WHERE user_id = $1 AND device_id = $2",
        )
        .bind(user.as_str())
        .bind(device.as_str())
        .fetch_one(&mut **self)
        .await?;
        Ok((
            u32::try_from(available).unwrap_or(u32::MAX),
            last_resort != 0,
        ))
    }
}
