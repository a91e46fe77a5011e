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
    /// Inserts one package of the device; `last_resort` replaces its last-resort package.
    fn insert_key_package(
        &mut self,
        user: &UserId,
        device: &DeviceId,
        key_package: &str,
        last_resort: bool,
    ) -> impl StoreFuture<()>;
    /// Takes the device's oldest ordinary package out of the directory, skipping any that a
    /// concurrent claim holds, so two claims never get the same one.
    fn take_key_package(&mut self, user: &UserId, device: &str)
        -> impl StoreFuture<Option<String>>;
    /// The device's last-resort package, left in place.
    fn last_resort_package(
        &mut self,
        user: &UserId,
        device: &str,
    ) -> impl StoreFuture<Option<String>>;
    /// The device's unclaimed ordinary packages and whether it has a last-resort one.
    fn key_package_stock(
        &mut self,
        user: &UserId,
        device: &DeviceId,
    ) -> impl StoreFuture<(u32, bool)>;
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
        if let Some(key_package) = tx.take_key_package(user, &device).await? {
            claimed.push(ClaimedPackage {
                device_id: device,
                key_package,
                last_resort: false,
            });
        } else if let Some(key_package) = tx.last_resort_package(user, &device).await? {
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
