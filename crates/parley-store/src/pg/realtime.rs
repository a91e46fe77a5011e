//! Gateway leases and device routes (chapter 05) on PostgreSQL.

use parley_domain::{DeviceId, UserId};

use super::{PgStore, PgTx};
use crate::error::StoreError;
use crate::flow::route::{Gateways, RouteTx};
use crate::sql;
use crate::types::Route;

impl Gateways for PgStore {
    /// One statement on the pool.
    async fn delete_route(
        &self,
        device: (&UserId, &DeviceId),
        conn_id: &str,
    ) -> Result<bool, StoreError> {
        sql::release_route(&mut *self.pool.acquire().await?, device, conn_id).await
    }

    async fn renew_lease(&self, gateway_id: &str, lease_ms: i64) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO gateways (gateway_id, lease_until) VALUES ($1, now() + make_interval(secs => $2 / 1000.0))
             ON CONFLICT (gateway_id) DO UPDATE SET lease_until = EXCLUDED.lease_until",
        )
        .bind(gateway_id)
        .bind(lease_ms as f64)
        .execute(&mut *self.pool.acquire().await?)
        .await?;
        Ok(())
    }
}

impl RouteTx for PgTx<'_> {
    const ROUTE_OF_SQL: &'static str =
        "SELECT gateway_id, conn_id FROM routes WHERE user_id = $1 AND device_id = $2 FOR UPDATE";

    async fn upsert_route(&mut self, route: &Route) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO routes (user_id, device_id, gateway_id, conn_id) VALUES ($1, $2, $3, $4)
             ON CONFLICT (user_id, device_id)
             DO UPDATE SET gateway_id = EXCLUDED.gateway_id, conn_id = EXCLUDED.conn_id, connected_at = now()",
        )
        .bind(route.user_id.as_str())
        .bind(route.device_id.as_str())
        .bind(&route.gateway_id)
        .bind(&route.conn_id)
        .execute(&mut **self)
        .await?;
        Ok(())
    }
}
