//! The KeyPackage directory (docs/E2EE.md, RFC 9420 §10 and §16.8): a device publishes
//! packages, and a claim hands each ordinary one out exactly once, falling back to the
//! device's last-resort package, which stays.

use parley_domain::{DeviceId, Rejection, UserId};

use super::{ReadTx, StoreFuture, WriteTx};
use crate::backend::Backend;
use crate::error::StoreError;
use crate::mls_types::{
    ClaimedPackage, KeyPackageBatch, KeyPackageStock, KEY_PACKAGES_PER_DEVICE_MAX,
};
use crate::query::Sql;
use crate::query::{Arg, SqlRow};

/// The backend's part: the statements whose types or locking differ.
pub(crate) trait KeyPackageTx: WriteTx {
    /// Deletes and answers (`key_package`) the oldest ordinary package of user `$1`'s device
    /// `$2`. PostgreSQL skips a package a concurrent claim holds, so two claims never wait for
    /// and then miss the same one; SQLite's write lock serialises claims anyway.
    const TAKE_KEY_PACKAGE_SQL: &'static str;

    /// Inserts one package of the device (its column types differ per backend).
    fn insert_key_package(
        &mut self,
        user: &UserId,
        device: &DeviceId,
        key_package: &str,
        last_resort: bool,
    ) -> impl StoreFuture<()>;
    /// The device's unclaimed ordinary packages and whether it has a last-resort one.
    fn key_package_stock(
        &mut self,
        user: &UserId,
        device: &DeviceId,
    ) -> impl StoreFuture<(u32, bool)>;
}

const DELETE_LAST_RESORT_SQL: &str =
    "DELETE FROM key_packages WHERE user_id = $1 AND device_id = $2 AND last_resort";
const LAST_RESORT_SQL: &str = "SELECT key_package FROM key_packages
   WHERE user_id = $1 AND device_id = $2 AND last_resort";

/// The package `statement` answers for `user`'s `device`, if any.
async fn package_of(
    tx: &mut impl Sql,
    statement: &'static str,
    user: &UserId,
    device: &str,
) -> Result<Option<String>, StoreError> {
    let args = [Arg::Text(user.as_str()), Arg::Text(device)];
    tx.fetch_optional(statement, &args)
        .await?
        .map(|r| r.string("key_package"))
        .transpose()
}

const USER_EXISTS_SQL: &str = "SELECT 1 AS one FROM users WHERE user_id = $1";
/// The devices a claim serves: every live one, in a stable order.
const LIVE_DEVICES_SQL: &str = "SELECT device_id FROM devices
   WHERE user_id = $1 AND revoked_at IS NULL ORDER BY device_id";

pub(crate) async fn publish<B: Backend>(
    backend: &B,
    batch: &KeyPackageBatch,
) -> Result<KeyPackageStock, StoreError> {
    let mut tx = backend.begin_write().await?;
    let (available, _) = tx
        .key_package_stock(&batch.user_id, &batch.device_id)
        .await?;
    let adding = u32::try_from(batch.key_packages.len()).unwrap_or(u32::MAX);
    if available.saturating_add(adding) > KEY_PACKAGES_PER_DEVICE_MAX {
        return Err(
            Rejection::LimitReached("a device holds at most 1000 unclaimed KeyPackages").into(),
        );
    }
    for package in &batch.key_packages {
        tx.insert_key_package(&batch.user_id, &batch.device_id, package, false)
            .await?;
    }
    if let Some(package) = &batch.last_resort {
        let args = [
            Arg::Text(batch.user_id.as_str()),
            Arg::Text(batch.device_id.as_str()),
        ];
        tx.execute(DELETE_LAST_RESORT_SQL, &args).await?;
        tx.insert_key_package(&batch.user_id, &batch.device_id, package, true)
            .await?;
    }
    let (available, last_resort) = tx
        .key_package_stock(&batch.user_id, &batch.device_id)
        .await?;
    tx.commit_or_unknown().await?;
    Ok(KeyPackageStock {
        stored: adding + u32::from(batch.last_resort.is_some()),
        available,
        last_resort,
    })
}

pub(crate) async fn stock<B: Backend>(
    backend: &B,
    user: &UserId,
    device: &DeviceId,
) -> Result<KeyPackageStock, StoreError> {
    let mut tx = backend.begin_read().await?;
    let (available, last_resort) = tx.key_package_stock(user, device).await?;
    tx.finish().await?;
    Ok(KeyPackageStock {
        stored: 0,
        available,
        last_resort,
    })
}

pub(crate) async fn claim<B: Backend>(
    backend: &B,
    user: &UserId,
) -> Result<Vec<ClaimedPackage>, StoreError> {
    let mut tx = backend.begin_write().await?;
    let args = [Arg::Text(user.as_str())];
    if tx.fetch_optional(USER_EXISTS_SQL, &args).await?.is_none() {
        return Err(Rejection::NotFound("no such user").into());
    }
    let devices = tx.fetch_all(LIVE_DEVICES_SQL, &args).await?;
    let mut claimed = Vec::with_capacity(devices.len());
    for row in &devices {
        let device = row.string("device_id")?;
        let taken = package_of(&mut tx, B::Tx::TAKE_KEY_PACKAGE_SQL, user, &device).await?;
        if let Some(key_package) = taken {
            claimed.push(ClaimedPackage {
                device_id: device,
                key_package,
                last_resort: false,
            });
        } else if let Some(key_package) =
            package_of(&mut tx, LAST_RESORT_SQL, user, &device).await?
        {
            claimed.push(ClaimedPackage {
                device_id: device,
                key_package,
                last_resort: true,
            });
        }
    }
    tx.commit_or_unknown().await?;
    Ok(claimed)
}
