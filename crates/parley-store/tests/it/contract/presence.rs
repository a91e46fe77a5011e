//! Presence and typing (SPEC §7): a user is online while any device has a route; `mark_seen`
//! keeps `last_seen`; presence reaches co-members of direct and push conversations only;
//! typing reaches the other members with a route, and a non-member and a missing conversation
//! get the same `None` (P10); strangers and unknown users are absent from `presence_of` alike;
//! reaped routes name their users.

use anyhow::{ensure, Result};
use parley_domain::{ConvKind, DeliveryMode, DeviceId, UserId};
use parley_store::{Route, Store};

use super::{cid, new_conv, user};

async fn connect(store: &dyn Store, user: &UserId, device: &str, gateway: &str) -> Result<()> {
    store
        .claim_route(&Route {
            user_id: user.clone(),
            device_id: DeviceId::parse(device)?,
            gateway_id: gateway.to_owned(),
            conn_id: format!("conn-{user}-{device}"),
        })
        .await?;
    Ok(())
}

async fn disconnect(store: &dyn Store, user: &UserId, device: &str) -> Result<()> {
    let released = store
        .release_route(
            user,
            &DeviceId::parse(device)?,
            &format!("conn-{user}-{device}"),
        )
        .await?;
    ensure!(released, "route of {user}/{device} released");
    Ok(())
}

fn sorted(mut users: Vec<UserId>) -> Vec<String> {
    let mut names: Vec<String> = users.drain(..).map(|u| u.to_string()).collect();
    names.sort();
    names
}

/// Ana shares a direct conversation with Ben and a pull group with Cai; Dan shares nothing.
pub async fn presence_follows_routes_and_conversations(store: &dyn Store) -> Result<()> {
    let ana = user(store, "ana").await?;
    let ben = user(store, "ben").await?;
    let cai = user(store, "cai").await?;
    let dan = user(store, "dan").await?;
    store
        .create_conversation(&new_conv(&ana, ConvKind::Direct, None, &[&ben]))
        .await?;
    let mut pull = new_conv(&ana, ConvKind::Group, Some("g-pull"), &[&cai]);
    pull.delivery_mode = Some(DeliveryMode::Pull);
    store.create_conversation(&pull).await?;
    store.renew_gateway("gw-a", 60_000).await?;

    ensure!(store.user_routes(&ana).await? == 0, "ana offline");
    for u in [&ben, &cai, &dan] {
        connect(store, u, "d1", "gw-a").await?;
    }
    connect(store, &ana, "d1", "gw-a").await?;
    connect(store, &ana, "d2", "gw-a").await?;
    ensure!(store.user_routes(&ana).await? == 2, "two routes");
    // Ben, online in a direct conversation; not Cai (pull group) nor Dan (a stranger).
    let peers = store.presence_peers(&ana, 100).await?;
    ensure!(sorted(peers) == ["ben"], "peers of ana");

    // Never seen: online, no last_seen. Cai shares a pull group: presence_of shows ana.
    let seen = store
        .presence_of(&cai, &[ana.clone(), dan.clone(), super::uid("ghost")])
        .await?;
    ensure!(
        seen.len() == 1 && seen[0].user_id == ana && seen[0].online && seen[0].last_seen.is_none(),
        "{seen:?}"
    );
    // Dan shares nothing: a co-user and an unknown user are absent alike; himself is there.
    let seen = store
        .presence_of(&dan, &[ana.clone(), super::uid("ghost"), dan.clone()])
        .await?;
    ensure!(seen.len() == 1 && seen[0].user_id == dan, "{seen:?}");

    disconnect(store, &ana, "d1").await?;
    let first = store.mark_seen(&ana).await?;
    ensure!(first.is_some_and(|s| s.routes_left == 1), "{first:?}");
    disconnect(store, &ana, "d2").await?;
    let last = store.mark_seen(&ana).await?;
    ensure!(last.is_some_and(|s| s.routes_left == 0), "{last:?}");
    let seen = store.presence_of(&ben, std::slice::from_ref(&ana)).await?;
    ensure!(
        seen.len() == 1 && !seen[0].online && seen[0].last_seen == last.map(|s| s.last_seen),
        "{seen:?} / {last:?}"
    );
    ensure!(
        store.mark_seen(&super::uid("ghost")).await?.is_none(),
        "no such user"
    );
    Ok(())
}

/// Typing reaches the other members with a route; a former member, a stranger and a missing
/// conversation all get `None`; a pull conversation names nobody.
pub async fn typing_targets_follow_membership(store: &dyn Store) -> Result<()> {
    let ana = user(store, "ana").await?;
    let ben = user(store, "ben").await?;
    let cai = user(store, "cai").await?;
    let dan = user(store, "dan").await?;
    store
        .create_conversation(&new_conv(&ana, ConvKind::Group, Some("g-1"), &[&ben, &cai]))
        .await?;
    let mut pull = new_conv(&ana, ConvKind::Group, Some("g-pull"), &[&ben]);
    pull.delivery_mode = Some(DeliveryMode::Pull);
    store.create_conversation(&pull).await?;
    store.renew_gateway("gw-a", 60_000).await?;
    connect(store, &ana, "d1", "gw-a").await?;
    connect(store, &ben, "d1", "gw-a").await?;
    connect(store, &dan, "d1", "gw-a").await?;

    let t = store.typing_targets(&cid("g-1"), &ana, 100).await?;
    let t = t.ok_or_else(|| anyhow::anyhow!("ana is a member"))?;
    ensure!(t.mode == DeliveryMode::Push, "{t:?}");
    // Cai has no route, and the typist is never a target.
    ensure!(sorted(t.online_others) == ["ben"], "targets of ana");
    let t = store.typing_targets(&cid("g-1"), &cai, 100).await?;
    ensure!(
        t.is_some_and(|t| sorted(t.online_others) == ["ana", "ben"]),
        "targets of cai"
    );
    let t = store.typing_targets(&cid("g-1"), &cai, 1).await?;
    ensure!(t.is_some_and(|t| t.online_others.len() == 1), "bounded");

    let t = store.typing_targets(&cid("g-pull"), &ana, 100).await?;
    ensure!(
        t.as_ref()
            .is_some_and(|t| t.mode == DeliveryMode::Pull && t.online_others.is_empty()),
        "{t:?}"
    );
    ensure!(
        store
            .typing_targets(&cid("g-1"), &dan, 100)
            .await?
            .is_none(),
        "a stranger"
    );
    ensure!(
        store
            .typing_targets(&cid("g-none"), &dan, 100)
            .await?
            .is_none(),
        "a missing conversation"
    );
    store.remove_member(&cid("g-1"), &ben, &ben).await?;
    ensure!(
        store
            .typing_targets(&cid("g-1"), &ben, 100)
            .await?
            .is_none(),
        "a former member"
    );
    Ok(())
}

/// Reaping answers the user of each route it deleted.
pub async fn reaped_routes_name_their_users(store: &dyn Store) -> Result<()> {
    let ana = user(store, "ana").await?;
    let ben = user(store, "ben").await?;
    store.renew_gateway("gw-dead", -1_000).await?;
    store.renew_gateway("gw-live", 60_000).await?;
    connect(store, &ana, "d1", "gw-dead").await?;
    connect(store, &ana, "d2", "gw-dead").await?;
    connect(store, &ben, "d1", "gw-live").await?;
    let reaped = store.reap_route_users(10).await?;
    ensure!(sorted(reaped) == ["ana", "ana"], "reaped");
    ensure!(store.user_routes(&ana).await? == 0, "ana has none left");
    ensure!(store.user_routes(&ben).await? == 1, "ben's route stays");
    Ok(())
}
