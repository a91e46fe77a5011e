//! Gateway leases and device routes (chapter 05) on SQLite, each in a write transaction.

use chrono::Duration;
use parley_domain::{DeviceId, UserId};

use super::rows::{now, ts};
use super::{SqliteStore, Tx};
use crate::backend::Backend;
use crate::error::StoreError;
use crate::flow::route::{Gateways, RouteTx};
use crate::sql;
use crate::types::Route;

impl Gateways for SqliteStore {
    /// In its own write transaction.
    async fn delete_route(
        &self,
        device: (&UserId, &DeviceId),
        conn_id: &str,
    ) -> Result<bool, StoreError> {
        let mut tx = self.begin_write().await?;
        let deleted = sql::release_route(&mut tx, device, conn_id).await?;
        tx.commit().await?;
        Ok(deleted)
    }

    async fn renew_lease(&self, gateway_id: &str, lease_ms: i64) -> Result<(), StoreError> {
        let at = now();
        let until = at + Duration::milliseconds(lease_ms);
        self.write_one(
            sqlx::query(
                "INSERT INTO gateways (gateway_id, started_at, lease_until) VALUES ($1, $2, $3)
             ON CONFLICT (gateway_id) DO UPDATE SET lease_until = excluded.lease_until",
            )
            .bind(gateway_id)
            .bind(ts(at))
            .bind(ts(until)),
        )
        .await?;
        Ok(())
    }
}

impl RouteTx for Tx<'_> {
    /// The write lock is held already, so the row stays as read.
    const ROUTE_OF_SQL: &'static str =
        "SELECT gateway_id, conn_id FROM routes WHERE user_id = $1 AND device_id = $2";

    async fn upsert_route(&mut self, route: &Route) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO routes (user_id, device_id, gateway_id, conn_id, connected_at) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (user_id, device_id)
             DO UPDATE SET gateway_id = excluded.gateway_id, conn_id = excluded.conn_id,
                           connected_at = excluded.connected_at",
        )
        .bind(route.user_id.as_str())
        .bind(route.device_id.as_str())
        .bind(&route.gateway_id)
        .bind(&route.conn_id)
        .bind(ts(now()))
        .execute(&mut **self)
        .await?;
        Ok(())
    }
}
