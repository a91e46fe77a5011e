//! Gateway leases and device routes (chapter 05) on PostgreSQL.

use parley_domain::{DeviceId, UserId};
use sqlx::{PgPool, Row};

use super::PgTx;
use crate::error::StoreError;
use crate::flow::route::RouteTx;
use crate::sql::RELEASE_ROUTE_SQL;
use crate::types::Route;

pub(super) async fn renew_lease(
    pool: &PgPool,
    gateway_id: &str,
    lease_ms: i64,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO gateways (gateway_id, lease_until) VALUES ($1, now() + make_interval(secs => $2 / 1000.0))
         ON CONFLICT (gateway_id) DO UPDATE SET lease_until = EXCLUDED.lease_until",
    )
    .bind(gateway_id)
    .bind(lease_ms as f64)
    .execute(pool)
    .await?;
    Ok(())
}

/// One statement; the conn_id condition keeps a newer connection's route (P9).
pub(super) async fn delete_route(
    pool: &PgPool,
    user_id: &UserId,
    device_id: &DeviceId,
    conn_id: &str,
) -> Result<bool, StoreError> {
    let done = sqlx::query(RELEASE_ROUTE_SQL)
        .bind(user_id.as_str())
        .bind(device_id.as_str())
        .bind(conn_id)
        .execute(pool)
        .await?;
    Ok(done.rows_affected() == 1)
}

impl RouteTx for PgTx<'_> {
    async fn route_of(&mut self, route: &Route) -> Result<Option<(String, String)>, StoreError> {
        let row = sqlx::query(
            "SELECT gateway_id, conn_id FROM routes WHERE user_id = $1 AND device_id = $2 FOR UPDATE",
        )
        .bind(route.user_id.as_str())
        .bind(route.device_id.as_str())
        .fetch_optional(&mut **self)
        .await?;
        row.map(|r| Ok((r.try_get("gateway_id")?, r.try_get("conn_id")?)))
            .transpose()
    }

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
