//! Gateway leases and route convergence (chapter 10): the reaper deletes the routes of
//! gateways whose lease expired, in bounded batches, and keeps those of live gateways; a
//! released gateway leaves neither its row nor its routes behind.

use anyhow::{ensure, Result};
use parley_domain::{DeviceId, UserId};
use parley_store::{GatewayLease, Route, Store};

/// A lease that stays valid for the whole test.
const LIVE_LEASE_MS: i64 = 60_000;
/// A lease that ended a second ago: the store's clock decides expiry, so a negative length
/// makes an expired lease without waiting for one to run out.
const EXPIRED_LEASE_MS: i64 = -1_000;

/// Claims `count` routes on `gateway_id`, one per user `<gateway_id>-u<i>`.
async fn claim(store: &dyn Store, gateway_id: &str, count: usize) -> Result<()> {
    for i in 0..count {
        let route = Route {
            user_id: UserId::parse(&format!("{gateway_id}-u{i}"))?,
            device_id: DeviceId::parse("d1")?,
            gateway_id: gateway_id.to_owned(),
            conn_id: format!("c-{gateway_id}-{i}"),
        };
        store.claim_route(&route).await?;
    }
    Ok(())
}

/// The listing reduced to `(gateway_id, routes, lease expired)`.
async fn leases(store: &dyn Store) -> Result<Vec<(String, i64, bool)>> {
    Ok(store
        .gateway_leases()
        .await?
        .into_iter()
        .map(|l: GatewayLease| (l.gateway_id, l.routes, l.lease_expires_in_ms < 0))
        .collect())
}

/// The device's route names the last claim, not an earlier one, and is gone once released.
pub async fn device_route_names_the_last_claim(store: &dyn Store) -> Result<()> {
    let route = |gateway_id: &str, conn_id: &str| -> Result<Route> {
        Ok(Route {
            user_id: UserId::parse("u-route")?,
            device_id: DeviceId::parse("d1")?,
            gateway_id: gateway_id.to_owned(),
            conn_id: conn_id.to_owned(),
        })
    };
    let (user, device) = (UserId::parse("u-route")?, DeviceId::parse("d1")?);
    ensure!(
        store.device_route(&user, &device).await?.is_none(),
        "no route before a claim"
    );
    store.claim_route(&route("gw-a", "c-1")?).await?;
    store.claim_route(&route("gw-b", "c-2")?).await?;
    let found = store.device_route(&user, &device).await?;
    ensure!(
        found == Some(route("gw-b", "c-2")?),
        "the last claim: {found:?}"
    );
    // Another device of the user has no route of its own.
    let other = store.device_route(&user, &DeviceId::parse("d2")?).await?;
    ensure!(other.is_none(), "another device: {other:?}");
    ensure!(
        store.release_route(&user, &device, "c-2").await?,
        "released"
    );
    ensure!(
        store.device_route(&user, &device).await?.is_none(),
        "no route after the release"
    );
    Ok(())
}

/// Expired and unregistered gateways' routes are reaped in batches of at most the asked
/// length, live ones are kept, and the expired gateway row goes once it has no routes.
pub async fn expired_routes_are_reaped_in_batches(store: &dyn Store) -> Result<()> {
    store.renew_gateway("gw-live", LIVE_LEASE_MS).await?;
    store.renew_gateway("gw-dead", EXPIRED_LEASE_MS).await?;
    claim(store, "gw-live", 3).await?;
    claim(store, "gw-dead", 5).await?;
    // A gateway that never registered, or whose row is gone, holds no lease at all.
    claim(store, "gw-ghost", 2).await?;
    let before = leases(store).await?;
    ensure!(
        before
            == [
                ("gw-dead".to_owned(), 5, true),
                ("gw-live".to_owned(), 3, false)
            ],
        "listing before the reaper: {before:?}"
    );

    let mut batches = Vec::new();
    loop {
        let reaped = store.reap_routes(4).await?;
        batches.push(reaped);
        if reaped < 4 || batches.len() > 5 {
            break;
        }
    }
    ensure!(batches == [4, 3], "batches of at most 4: {batches:?}");
    ensure!(store.reap_routes(4).await? == 0, "nothing left to reap");
    let after = leases(store).await?;
    ensure!(
        after == [("gw-live".to_owned(), 3, false)],
        "the live gateway's routes, and only its row, remain: {after:?}"
    );
    Ok(())
}

/// Negative control: a gateway whose lease ran out but was renewed before the reaper ran is
/// live again, and keeps its routes; the reaper goes by the lease, not by a name or a past
/// state.
pub async fn renewed_lease_keeps_its_routes(store: &dyn Store) -> Result<()> {
    store.renew_gateway("gw-back", EXPIRED_LEASE_MS).await?;
    claim(store, "gw-back", 3).await?;
    store.renew_gateway("gw-back", LIVE_LEASE_MS).await?;
    ensure!(
        store.reap_routes(10).await? == 0,
        "a live gateway was reaped"
    );
    let after = leases(store).await?;
    ensure!(
        after == [("gw-back".to_owned(), 3, false)],
        "listing: {after:?}"
    );
    Ok(())
}

/// A released gateway's row and routes are gone together; other gateways are untouched and
/// a second release finds nothing.
pub async fn released_gateway_leaves_nothing(store: &dyn Store) -> Result<()> {
    store.renew_gateway("gw-b", LIVE_LEASE_MS).await?;
    store.renew_gateway("gw-a", LIVE_LEASE_MS).await?;
    claim(store, "gw-a", 3).await?;
    claim(store, "gw-b", 2).await?;
    ensure!(store.release_gateway("gw-a").await? == 3, "three routes");
    let after = leases(store).await?;
    ensure!(
        after == [("gw-b".to_owned(), 2, false)],
        "listing: {after:?}"
    );
    ensure!(store.release_gateway("gw-a").await? == 0, "released twice");
    ensure!(
        store.reap_routes(10).await? == 0,
        "nothing was left to reap"
    );
    Ok(())
}

/// The listing is sorted by id, and its remaining time counts down from the lease's length.
pub async fn gateway_listing_is_sorted(store: &dyn Store) -> Result<()> {
    for id in ["gw-c", "gw-a", "gw-b"] {
        store.renew_gateway(id, LIVE_LEASE_MS).await?;
    }
    let listed = store.gateway_leases().await?;
    let ids: Vec<&str> = listed.iter().map(|l| l.gateway_id.as_str()).collect();
    ensure!(ids == ["gw-a", "gw-b", "gw-c"], "order: {ids:?}");
    for lease in &listed {
        ensure!(
            (LIVE_LEASE_MS - 10_000..=LIVE_LEASE_MS).contains(&lease.lease_expires_in_ms)
                && lease.routes == 0,
            "lease: {lease:?}"
        );
    }
    Ok(())
}
