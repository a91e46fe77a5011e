//! Claiming a device's route (chapter 05): point it at a new connection and answer the route
//! it replaced, whose connection the caller must close.

use parley_domain::{DeviceId, UserId};

use super::{ReadTx, StoreFuture, WriteTx};
use crate::backend::Backend;
use crate::error::StoreError;
use crate::query::{Arg, Sql};
use crate::rows;
use crate::types::{GatewayLease, Route};

/// The gateways' own statements, each on its own.
pub(crate) trait Gateways {
    /// Deletes the device's route where it still names `conn_id` (P9); true when deleted.
    fn delete_route(&self, device: (&UserId, &DeviceId), conn_id: &str) -> impl StoreFuture<bool>;
    /// Registers a gateway or renews its lease until now + `lease_ms`.
    fn renew_lease(&self, gateway_id: &str, lease_ms: i64) -> impl StoreFuture<()>;
    /// Deletes the gateway's row and every route naming it, together; answers how many routes.
    fn release_lease(&self, gateway_id: &str) -> impl StoreFuture<u64>;
    /// Deletes at most `batch_len_max` routes whose gateway's lease expired or whose gateway
    /// row is gone, then the expired gateway rows left without routes; answers how many
    /// routes' users, one per route. Rows another reaper holds are skipped, never waited for.
    fn reap_expired(&self, batch_len_max: u32) -> impl StoreFuture<Vec<UserId>>;
    /// Every registered gateway with its lease's remaining time and its route count, by id.
    fn leases(&self) -> impl StoreFuture<Vec<GatewayLease>>;
}

pub(crate) trait RouteTx: WriteTx {
    /// Reads the device's route (`$1` user, `$2` device) and keeps it locked until the
    /// transaction ends.
    const ROUTE_OF_SQL: &'static str;

    /// The device's route, `(gateway_id, conn_id)`.
    fn route_of(&mut self, route: &Route) -> impl StoreFuture<Option<(String, String)>> {
        async move {
            let args = [
                Arg::Text(route.user_id.as_str()),
                Arg::Text(route.device_id.as_str()),
            ];
            let found = self.fetch_optional(Self::ROUTE_OF_SQL, &args).await?;
            found.as_ref().map(rows::route).transpose()
        }
    }
    /// Points the device's route at `route`'s gateway and connection.
    fn upsert_route(&mut self, route: &Route) -> impl StoreFuture<()>;
}

/// The device's route, read on its own; the same statement on both stores.
const DEVICE_ROUTE_SQL: &str =
    "SELECT gateway_id, conn_id FROM routes WHERE user_id = $1 AND device_id = $2";

pub(crate) async fn device_route<B: Backend>(
    backend: &B,
    (user_id, device_id): (&UserId, &DeviceId),
) -> Result<Option<Route>, StoreError> {
    let mut tx = backend.begin_read().await?;
    let args = [Arg::Text(user_id.as_str()), Arg::Text(device_id.as_str())];
    let found = tx.fetch_optional(DEVICE_ROUTE_SQL, &args).await?;
    tx.finish().await?;
    let found = found.as_ref().map(rows::route).transpose()?;
    Ok(found.map(|(gateway_id, conn_id)| Route {
        user_id: user_id.clone(),
        device_id: device_id.clone(),
        gateway_id,
        conn_id,
    }))
}

pub(crate) async fn claim_route<B: Backend>(
    backend: &B,
    route: &Route,
) -> Result<Option<Route>, StoreError> {
    let mut tx = backend.begin_write().await?;
    let previous = tx.route_of(route).await?;
    tx.upsert_route(route).await?;
    tx.commit_or_unknown().await?;
    Ok(previous.map(|(gateway_id, conn_id)| Route {
        user_id: route.user_id.clone(),
        device_id: route.device_id.clone(),
        gateway_id,
        conn_id,
    }))
}
