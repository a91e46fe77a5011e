//! Gateway leases, device routes (chapter 05) and the member snapshot of gateway caches.

use chrono::Duration;
use parley_domain::{ConvId, DeliveryMode, DeviceId, Rejection, UserId};
use sqlx::Row;

use super::rows::{commit, now, ts};
use super::SqliteStore;
use crate::backend::Backend;
use crate::error::StoreError;
use crate::types::{MemberSnapshot, Route};

pub(super) async fn renew_gateway(
    store: &SqliteStore,
    gateway_id: &str,
    lease_ms: i64,
) -> Result<(), StoreError> {
    let at = now();
    let until = at + Duration::milliseconds(lease_ms);
    let mut tx = store.begin_write().await?;
    sqlx::query(
        "INSERT INTO gateways (gateway_id, started_at, lease_until) VALUES ($1, $2, $3)
         ON CONFLICT (gateway_id) DO UPDATE SET lease_until = excluded.lease_until",
    )
    .bind(gateway_id)
    .bind(ts(at))
    .bind(ts(until))
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(())
}

pub(super) async fn claim_route(
    store: &SqliteStore,
    route: &Route,
) -> Result<Option<Route>, StoreError> {
    let mut tx = store.begin_write().await?;
    let prev =
        sqlx::query("SELECT gateway_id, conn_id FROM routes WHERE user_id = $1 AND device_id = $2")
            .bind(route.user_id.as_str())
            .bind(route.device_id.as_str())
            .fetch_optional(&mut *tx)
            .await?;
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
    .execute(&mut *tx)
    .await?;
    commit(tx).await?;
    let Some(prev) = prev else { return Ok(None) };
    Ok(Some(Route {
        user_id: route.user_id.clone(),
        device_id: route.device_id.clone(),
        gateway_id: prev.try_get("gateway_id")?,
        conn_id: prev.try_get("conn_id")?,
    }))
}

pub(super) async fn release_route(
    store: &SqliteStore,
    user_id: &UserId,
    device_id: &DeviceId,
    conn_id: &str,
) -> Result<bool, StoreError> {
    let mut tx = store.begin_write().await?;
    // P9: the conn_id condition keeps a newer connection's route.
    let done =
        sqlx::query("DELETE FROM routes WHERE user_id = $1 AND device_id = $2 AND conn_id = $3")
            .bind(user_id.as_str())
            .bind(device_id.as_str())
            .bind(conn_id)
            .execute(&mut *tx)
            .await?;
    tx.commit().await?;
    Ok(done.rows_affected() == 1)
}

pub(super) async fn current_members(
    store: &SqliteStore,
    conv_id: &ConvId,
) -> Result<MemberSnapshot, StoreError> {
    let mut tx = store.begin_read().await?;
    let conv = sqlx::query(
        "SELECT next_seq, delivery_mode, pull_threshold FROM conversations WHERE conv_id = $1",
    )
    .bind(conv_id.as_str())
    .fetch_optional(&mut *tx)
    .await?;
    let Some(conv) = conv else {
        return Err(Rejection::NotMember.into());
    };
    let next: i64 = conv.try_get("next_seq")?;
    let mode: String = conv.try_get("delivery_mode")?;
    let delivery_mode = DeliveryMode::parse(&mode).unwrap_or(DeliveryMode::Push);
    let threshold: Option<i64> = conv.try_get("pull_threshold")?;
    let rows = sqlx::query(
        "SELECT user_id, from_seq FROM membership_periods WHERE conv_id = $1 AND to_seq IS NULL",
    )
    .bind(conv_id.as_str())
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    let mut members = Vec::with_capacity(rows.len());
    for r in &rows {
        members.push((
            UserId::from_trusted(r.try_get("user_id")?),
            r.try_get("from_seq")?,
        ));
    }
    Ok(MemberSnapshot {
        head: next - 1,
        members,
        delivery_mode,
        // Only a push group whose mode the member count decides can still switch.
        pull_threshold: threshold
            .filter(|_| delivery_mode == DeliveryMode::Push)
            .and_then(|t| u32::try_from(t).ok()),
    })
}
