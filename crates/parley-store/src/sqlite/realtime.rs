//! Gateway leases and device routes (chapter 05) on SQLite, each in a write transaction.

use chrono::Duration;
use parley_domain::{DeviceId, UserId};

use super::rows::{now, parse_ts, ts};
use super::{SqliteStore, Tx};
use crate::backend::Backend;
use crate::error::StoreError;
use crate::flow::route::{Gateways, RouteTx};
use crate::sql;
use crate::types::{GatewayLease, Route};

impl Gateways for SqliteStore {
    /// In its own write transaction.
    async fn delete_route(
        &self,
        device: (&UserId, &DeviceId),
        conn_id: &str,
    ) -> Result<bool, StoreError> {
        let mut tx = self.begin_write().await?;
        let deleted = sql::release_route(&mut tx, device, conn_id, self.breaks).await?;
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

    /// In one write transaction.
    async fn release_lease(&self, gateway_id: &str) -> Result<u64, StoreError> {
        let mut tx = self.begin_write().await?;
        let released = sqlx::query("DELETE FROM routes WHERE gateway_id = $1")
            .bind(gateway_id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        sqlx::query("DELETE FROM gateways WHERE gateway_id = $1")
            .bind(gateway_id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(released)
    }

    /// In one write transaction: with one writer there is no other reaper to skip.
    async fn reap_expired(&self, batch_len_max: u32) -> Result<Vec<UserId>, StoreError> {
        let at = ts(now());
        let mut tx = self.begin_write().await?;
        let reaped: Vec<String> = sqlx::query_scalar(REAP_ROUTES_SQL)
            .bind(&at)
            .bind(i64::from(batch_len_max))
            .fetch_all(&mut *tx)
            .await?;
        sqlx::query(REAP_GATEWAYS_SQL)
            .bind(&at)
            .bind(i64::from(batch_len_max))
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(reaped.into_iter().map(UserId::from_trusted).collect())
    }

    async fn leases(&self) -> Result<Vec<GatewayLease>, StoreError> {
        let at = now();
        let mut tx = self.begin_read().await?;
        let found: Vec<(String, String, i64)> =
            sqlx::query_as(LEASES_SQL).fetch_all(&mut *tx).await?;
        found
            .into_iter()
            .map(|(gateway_id, lease_until, routes)| {
                let left = parse_ts(&lease_until)? - at;
                Ok(GatewayLease {
                    gateway_id,
                    lease_expires_in_ms: left.num_milliseconds(),
                    routes,
                })
            })
            .collect()
    }
}

/// `$1` now, `$2` the batch length: routes of expired or unregistered gateways, answering the
/// user of each.
const REAP_ROUTES_SQL: &str = "DELETE FROM routes WHERE rowid IN (
       SELECT r.rowid FROM routes r LEFT JOIN gateways g ON g.gateway_id = r.gateway_id
       WHERE g.gateway_id IS NULL OR g.lease_until < $1
       LIMIT $2)
     RETURNING user_id";

/// `$1` now, `$2` the batch length: expired gateway rows without routes.
const REAP_GATEWAYS_SQL: &str = "DELETE FROM gateways WHERE gateway_id IN (
       SELECT g.gateway_id FROM gateways g
       WHERE g.lease_until < $1
         AND NOT EXISTS (SELECT 1 FROM routes r WHERE r.gateway_id = g.gateway_id)
       LIMIT $2)";

/// Every gateway with its lease's end and its route count.
const LEASES_SQL: &str = "SELECT g.gateway_id, g.lease_until,
            (SELECT count(*) FROM routes r WHERE r.gateway_id = g.gateway_id)
     FROM gateways g ORDER BY g.gateway_id";

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

impl crate::presence::Presence for SqliteStore {
    const PRESENCE_OF_SQL: &'static str =
        "SELECT u.user_id, u.last_seen_at,
                (SELECT count(*) FROM routes r WHERE r.user_id = u.user_id) AS routes
         FROM users u
         WHERE u.user_id IN (SELECT value FROM json_each($2))
           AND (u.user_id = $1 OR EXISTS (
             SELECT 1 FROM membership_periods a
             JOIN membership_periods b ON b.conv_id = a.conv_id
             WHERE a.user_id = $1 AND a.to_seq IS NULL AND b.user_id = u.user_id AND b.to_seq IS NULL))";

    /// In its own write transaction.
    async fn mark_seen(
        &self,
        user_id: &UserId,
    ) -> Result<Option<(i64, chrono::DateTime<chrono::Utc>)>, StoreError> {
        let at = now();
        let mut tx = self.begin_write().await?;
        let found: Option<i64> = sqlx::query_scalar(
            "UPDATE users SET last_seen_at = $2 WHERE user_id = $1
             RETURNING (SELECT count(*) FROM routes WHERE user_id = $1)",
        )
        .bind(user_id.as_str())
        .bind(ts(at))
        .fetch_optional(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(found.map(|routes| (routes, at)))
    }
}
