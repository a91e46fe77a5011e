//! The primitives of the MLS Delivery Service (`flow::mls`, `flow::mls_keys`) on PostgreSQL.

use chrono::{DateTime, Utc};
use parley_domain::{DeviceId, UserId};

use super::PgTx;
use crate::error::StoreError;
use crate::flow::mls::{MlsTx, NewMlsEvent};
use crate::flow::mls_keys::KeyPackageTx;

impl MlsTx for PgTx<'_> {
    /// One statement: the event, the counter, the epoch and the change stamp. An MLS event is
    /// no msg (the server cannot tell a chat message from a receipt inside it): it carries the
    /// msg count so far as its ordinal.
    async fn append_mls_event(
        &mut self,
        ev: &NewMlsEvent<'_>,
    ) -> Result<DateTime<Utc>, StoreError> {
        Ok(sqlx::query_scalar(
            "WITH ev AS (
               INSERT INTO events (conv_id, seq, kind, sender_user, sender_device, client_msg_id,
                                   request_hash, message_id, mls_epoch, mls_message, mls_devices,
                                   msg_ordinal)
               VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) RETURNING created_at
             ), counter AS (
               UPDATE conversations SET next_seq = $2 + 1, mls_epoch = $13,
                      change_xid = pg_current_xact_id()
                WHERE conv_id = $1
             )
             SELECT created_at FROM ev",
        )
        .bind(ev.conv_id.as_str())
        .bind(ev.slot.seq)
        .bind(ev.kind.as_str())
        .bind(ev.sender_user.as_str())
        .bind(ev.sender_device)
        .bind(ev.client_msg_id)
        .bind(ev.request_hash)
        .bind(ev.message_id)
        .bind(ev.mls_epoch)
        .bind(ev.mls_message)
        .bind(ev.mls_devices)
        .bind(ev.slot.msg_ordinal)
        .bind(ev.epoch_after)
        .fetch_one(&mut **self)
        .await?)
    }
}

impl KeyPackageTx for PgTx<'_> {
    const TAKE_KEY_PACKAGE_SQL: &'static str = "DELETE FROM key_packages WHERE package_id = (
           SELECT package_id FROM key_packages
            WHERE user_id = $1 AND device_id = $2 AND NOT last_resort
            ORDER BY package_id LIMIT 1 FOR UPDATE SKIP LOCKED)
         RETURNING key_package";

    async fn insert_key_package(
        &mut self,
        user: &UserId,
        device: &DeviceId,
        key_package: &str,
        last_resort: bool,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO key_packages (user_id, device_id, key_package, last_resort)
             VALUES ($1, $2, $3, $4)",
        )
        .bind(user.as_str())
        .bind(device.as_str())
        .bind(key_package)
        .bind(last_resort)
        .execute(&mut **self)
        .await?;
        Ok(())
    }

    async fn key_package_stock(
        &mut self,
        user: &UserId,
        device: &DeviceId,
    ) -> Result<(u32, bool), StoreError> {
        let (available, last_resort): (i64, bool) = sqlx::query_as(
            "SELECT count(*) FILTER (WHERE NOT last_resort), bool_or(last_resort) IS TRUE
               FROM key_packages WHERE user_id = $1 AND device_id = $2",
        )
        .bind(user.as_str())
        .bind(device.as_str())
        .fetch_one(&mut **self)
        .await?;
        Ok((u32::try_from(available).unwrap_or(u32::MAX), last_resort))
    }
}
