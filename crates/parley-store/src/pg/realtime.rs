//! Gateway leases and device routes (chapter 05) on PostgreSQL.

use parley_domain::{DeviceId, UserId};

use super::{PgStore, PgTx};
use crate::error::StoreError;
use crate::flow::route::{Gateways, RouteTx};
use crate::sql;
use crate::types::{GatewayLease, Route};

impl Gateways for PgStore {
    /// One statement on the pool.
    async fn delete_route(
        &self,
        device: (&UserId, &DeviceId),
        conn_id: &str,
    ) -> Result<bool, StoreError> {
        sql::release_route(
            &mut *self.pool.acquire().await?,
            device,
            conn_id,
            self.breaks,
        )
        .await
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

    /// One statement: both deletes see the same snapshot and commit together.
    async fn release_lease(&self, gateway_id: &str) -> Result<u64, StoreError> {
        let released: i64 = sqlx::query_scalar(RELEASE_LEASE_SQL)
            .bind(gateway_id)
            .fetch_one(&mut *self.pool.acquire().await?)
            .await?;
        Ok(u64::try_from(released).unwrap_or(0))
    }

    /// Two statements on one connection, each its own transaction: the batch of routes, then
    /// the gateway rows it left empty (a route deleted by the first statement is still visible
    /// to a second part of the same statement, so they cannot be one).
    async fn reap_expired(&self, batch_len_max: u32) -> Result<Vec<UserId>, StoreError> {
        let mut conn = self.pool.acquire().await?;
        let reaped: Vec<String> = sqlx::query_scalar(REAP_ROUTES_SQL)
            .bind(i64::from(batch_len_max))
            .fetch_all(&mut *conn)
            .await?;
        sqlx::query(REAP_GATEWAYS_SQL)
            .bind(i64::from(batch_len_max))
            .execute(&mut *conn)
            .await?;
        Ok(reaped.into_iter().map(UserId::from_trusted).collect())
    }

    async fn leases(&self) -> Result<Vec<GatewayLease>, StoreError> {
        let found: Vec<(String, i64, i64)> = sqlx::query_as(LEASES_SQL)
            .fetch_all(&mut *self.pool.acquire().await?)
            .await?;
        Ok(found
            .into_iter()
            .map(|(gateway_id, lease_expires_in_ms, routes)| GatewayLease {
                gateway_id,
                lease_expires_in_ms,
                routes,
            })
            .collect())
    }
}

/// `$1` the gateway: deletes its routes and its row, answers how many routes.
const RELEASE_LEASE_SQL: &str = "WITH released AS (
       DELETE FROM routes WHERE gateway_id = $1 RETURNING 1
     ), unregistered AS (
       DELETE FROM gateways WHERE gateway_id = $1
     )
     SELECT count(*) FROM released";

/// `$1` the batch length; answers the user of each deleted route. The routes of expired or unregistered gateways are locked in the CTE
/// with `SKIP LOCKED`, so reapers on several gateways take disjoint batches and never wait on
/// one another or on a claim in progress; the delete checks the gateway again, so a route that
/// a live gateway claimed meanwhile is kept.
const REAP_ROUTES_SQL: &str = "WITH doomed AS (
       SELECT r.user_id, r.device_id, r.gateway_id
       FROM routes r LEFT JOIN gateways g ON g.gateway_id = r.gateway_id
       WHERE g.gateway_id IS NULL OR g.lease_until < now()
       LIMIT $1
       FOR UPDATE OF r SKIP LOCKED
     ), reaped AS (
       DELETE FROM routes r USING doomed d
       WHERE r.user_id = d.user_id AND r.device_id = d.device_id AND r.gateway_id = d.gateway_id
       RETURNING r.user_id
     )
     SELECT user_id FROM reaped";

/// `$1` the batch length: expired gateway rows without routes.
const REAP_GATEWAYS_SQL: &str = "WITH idle AS (
       SELECT g.gateway_id FROM gateways g
       WHERE g.lease_until < now()
         AND NOT EXISTS (SELECT 1 FROM routes r WHERE r.gateway_id = g.gateway_id)
       LIMIT $1
       FOR UPDATE SKIP LOCKED
     )
     DELETE FROM gateways g USING idle WHERE g.gateway_id = idle.gateway_id";

/// Every gateway with its lease's remaining milliseconds (negative once expired) and routes.
const LEASES_SQL: &str = "SELECT g.gateway_id,
            (floor(extract(epoch FROM g.lease_until - now()) * 1000))::bigint,
            (SELECT count(*) FROM routes r WHERE r.gateway_id = g.gateway_id)
     FROM gateways g ORDER BY g.gateway_id COLLATE \"C\"";

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

impl crate::presence::Presence for PgStore {
    const PRESENCE_OF_SQL: &'static str =
        "SELECT u.user_id, u.last_seen_at,
                (SELECT count(*) FROM routes r WHERE r.user_id = u.user_id) AS routes
         FROM users u
         WHERE u.user_id = ANY($2)
           AND (u.user_id = $1 OR EXISTS (
             SELECT 1 FROM membership_periods a
             JOIN membership_periods b ON b.conv_id = a.conv_id
             WHERE a.user_id = $1 AND a.to_seq IS NULL AND b.user_id = u.user_id AND b.to_seq IS NULL))";

    /// One statement on the pool, by the database's clock like every stored time.
    async fn mark_seen(
        &self,
        user_id: &UserId,
    ) -> Result<Option<(i64, chrono::DateTime<chrono::Utc>)>, StoreError> {
        let found: Option<(chrono::DateTime<chrono::Utc>, i64)> = sqlx::query_as(
            "UPDATE users SET last_seen_at = now() WHERE user_id = $1
             RETURNING last_seen_at, (SELECT count(*) FROM routes WHERE user_id = $1)",
        )
        .bind(user_id.as_str())
        .fetch_optional(&mut *self.pool.acquire().await?)
        .await?;
        Ok(found.map(|(at, routes)| (routes, at)))
    }
}
