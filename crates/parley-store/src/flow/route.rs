//! Claiming a device's route (chapter 05): point it at a new connection and answer the route
//! it replaced, whose connection the caller must close.

use super::{StoreFuture, WriteTx};
use crate::backend::Backend;
use crate::error::StoreError;
use crate::types::Route;

pub(crate) trait RouteTx: WriteTx {
    /// The device's route, `(gateway_id, conn_id)`, locked until the transaction ends.
    fn route_of(&mut self, route: &Route) -> impl StoreFuture<Option<(String, String)>>;
    /// Points the device's route at `route`'s gateway and connection.
    fn upsert_route(&mut self, route: &Route) -> impl StoreFuture<()>;
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
