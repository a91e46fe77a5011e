//! Typing and presence (SPEC §7, ephemeral frames): typing reaches the other members' devices
//! only, at most once per device, conversation and second, never in pull groups, and a
//! non-member's or a missing conversation's typing is `NOT_MEMBER` alike (P10); presence
//! reaches co-members of direct conversations and push groups only, `last_seen` is kept in
//! the store, and `GET /v1/presence` shows strangers and unknown users alike (absent). Across
//! two gateways both travel through the bus.
//!
//! Absence is asserted by a quiet period followed by a barrier: a later frame (a ping's pong,
//! or a second typing frame that must arrive) shows the connection was served meanwhile.

use std::time::Duration;

use anyhow::{ensure, Result};
use parley_client::{Client, DeliveryMode, NewConversation};
use parley_testkit::{test_on_both_stores, GatewayBus, ServerConfig, StoreKind, TestServer};
use serde_json::{json, Value};

use crate::two_gateways::{bus_of, unique};
use crate::ws_support::Ws;

const WAIT: Duration = Duration::from_secs(10);
/// How long to watch for a frame that must not come.
const QUIET: Duration = Duration::from_millis(300);
/// The server's rate limit of typing frames, per device and conversation.
const TYPING_INTERVAL: Duration = Duration::from_millis(1_000);

/// Connects and waits for the answer to a ping, so the connection's route is claimed.
async fn online(base_url: &str, token: &str) -> Result<Ws> {
    let mut ws = Ws::connect(base_url, token).await?.with_presence();
    ws.send(json!({"type": "ping", "req_id": "hello"})).await?;
    ws.next_of("pong", WAIT).await?;
    Ok(ws)
}

/// Reads frames for `QUIET`, then pings and reads up to the pong: fails if a frame of `kind`
/// comes meanwhile. Other frames are skipped.
async fn none_of(ws: &mut Ws, kind: &str, who: &str) -> Result<()> {
    let until = tokio::time::Instant::now() + QUIET;
    loop {
        let left = until.saturating_duration_since(tokio::time::Instant::now());
        match ws.next_json(left).await? {
            None => break,
            Some(f) => ensure!(f["type"] != kind, "{who} got {f}"),
        }
    }
    ws.send(json!({"type": "ping", "req_id": "barrier"}))
        .await?;
    loop {
        let Some(f) = ws.next_json(WAIT).await? else {
            anyhow::bail!("{who}: no pong")
        };
        ensure!(f["type"] != kind, "{who} got {f}");
        if f["type"] == "pong" {
            return Ok(());
        }
    }
}

fn typing(conv: &str) -> Value {
    json!({"type": "typing", "conv_id": conv})
}

fn ensure_typing(frame: &Value, conv: &str, user: &str) -> Result<()> {
    ensure!(
        frame["conv_id"] == conv && frame["user_id"] == user && frame["expires_ms"] == 5000,
        "typing frame {frame}"
    );
    Ok(())
}

/// The next presence frame about `user`, skipping others.
async fn presence_of(ws: &mut Ws, user: &str) -> Result<Value> {
    loop {
        let f = ws.next_of("presence", WAIT).await?;
        if f["user_id"] == user {
            return Ok(f);
        }
    }
}

struct Cast {
    server: TestServer,
    ana: Client,
    ana_laptop: Client,
    ben: Client,
    cai: Client,
}

/// Ana (two devices) and Ben share `c-1`, a push group; Cai is a user who shares nothing.
async fn cast(store: StoreKind) -> Result<Cast> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ana = server.user_with_device("u-ana").await;
    let ana_laptop = server.device("u-ana", "laptop").await;
    let ben = server.user_with_device("u-ben").await;
    let cai = server.user_with_device("u-cai").await;
    ana.create_conversation(&NewConversation::group(["u-ben"]).with_conv_id("c-1"))
        .await?;
    Ok(Cast {
        server,
        ana,
        ana_laptop,
        ben,
        cai,
    })
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    typing_reaches_the_other_members_devices_only
);
async fn typing_reaches_the_other_members_devices_only(store: StoreKind) -> Result<()> {
    let c = cast(store).await?;
    let url = c.server.base_url();
    let mut phone = online(url, c.ana.token()).await?;
    let mut laptop = online(url, c.ana_laptop.token()).await?;
    let mut ben = online(url, c.ben.token()).await?;
    let mut cai = online(url, c.cai.token()).await?;

    phone.send(typing("c-1")).await?;
    let f = ben.next_of("typing", WAIT).await?;
    ensure_typing(&f, "c-1", "u-ana")?;
    none_of(&mut laptop, "typing", "ana's other device").await?;
    none_of(&mut cai, "typing", "a non-member").await?;
    // Nothing answers an accepted typing frame: the next frame the typist gets is its pong.
    none_of(&mut phone, "error", "the typist").await?;
    c.server.stop().await;
    Ok(())
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    typing_is_relayed_once_per_device_conversation_and_interval
);
async fn typing_is_relayed_once_per_device_conversation_and_interval(
    store: StoreKind,
) -> Result<()> {
    let c = cast(store).await?;
    let url = c.server.base_url();
    let mut phone = online(url, c.ana.token()).await?;
    let mut ben = online(url, c.ben.token()).await?;

    let first = tokio::time::Instant::now();
    phone.send(typing("c-1")).await?;
    phone
        .send(json!({"type": "typing", "req_id": "again", "conv_id": "c-1"}))
        .await?;
    let f = ben.next_of("typing", WAIT).await?;
    ensure_typing(&f, "c-1", "u-ana")?;
    ensure!(
        first.elapsed() < TYPING_INTERVAL,
        "too slow to test the interval"
    );
    // The second frame, inside the interval, is dropped without an answer.
    none_of(&mut ben, "typing", "ben, for the second frame").await?;
    none_of(&mut phone, "error", "the typist").await?;
    // Once the interval is over, typing is relayed again.
    tokio::time::sleep_until(first + TYPING_INTERVAL).await;
    phone.send(typing("c-1")).await?;
    let f = ben.next_of("typing", WAIT).await?;
    ensure_typing(&f, "c-1", "u-ana")?;
    c.server.stop().await;
    Ok(())
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    typing_of_a_non_member_or_in_a_missing_conversation_is_not_member_alike
);
async fn typing_of_a_non_member_or_in_a_missing_conversation_is_not_member_alike(
    store: StoreKind,
) -> Result<()> {
    let c = cast(store).await?;
    let url = c.server.base_url();
    let mut ana = online(url, c.ana.token()).await?;
    let mut ben = online(url, c.ben.token()).await?;
    let mut cai = online(url, c.cai.token()).await?;

    cai.send(json!({"type": "typing", "req_id": "t1", "conv_id": "c-1"}))
        .await?;
    let member = cai.next_of("error", WAIT).await?;
    cai.send(json!({"type": "typing", "req_id": "t2", "conv_id": "c-nope"}))
        .await?;
    let missing = cai.next_of("error", WAIT).await?;
    ensure!(
        member["req_id"] == "t1" && member["code"] == "NOT_MEMBER",
        "{member}"
    );
    ensure!(
        missing["req_id"] == "t2" && missing["code"] == "NOT_MEMBER",
        "{missing}"
    );
    ensure!(
        member["message"] == missing["message"],
        "{member} / {missing}"
    );
    // Without a req_id the refusal names none.
    cai.send(typing("c-1")).await?;
    let bare = cai.next_of("error", WAIT).await?;
    ensure!(
        bare["req_id"].is_null() && bare["code"] == "NOT_MEMBER",
        "{bare}"
    );
    none_of(&mut ana, "typing", "ana").await?;
    none_of(&mut ben, "typing", "ben").await?;

    // A former member is refused too.
    c.ben.remove_member("c-1", "u-ben").await?;
    ben.send(json!({"type": "typing", "req_id": "t3", "conv_id": "c-1"}))
        .await?;
    let left = ben.next_of("error", WAIT).await?;
    ensure!(left["code"] == "NOT_MEMBER", "{left}");
    none_of(&mut ana, "typing", "ana, after ben left").await?;
    c.server.stop().await;
    Ok(())
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    typing_in_a_pull_group_is_accepted_and_dropped
);
async fn typing_in_a_pull_group_is_accepted_and_dropped(store: StoreKind) -> Result<()> {
    let c = cast(store).await?;
    c.ana
        .create_conversation(
            &NewConversation::group(["u-ben"])
                .with_conv_id("c-big")
                .with_delivery_mode(DeliveryMode::Pull),
        )
        .await?;
    let url = c.server.base_url();
    let mut ana = online(url, c.ana.token()).await?;
    let mut ben = online(url, c.ben.token()).await?;
    ana.send(json!({"type": "typing", "req_id": "p", "conv_id": "c-big"}))
        .await?;
    none_of(&mut ana, "error", "the typist").await?;
    none_of(&mut ben, "typing", "a member of the pull group").await?;
    c.server.stop().await;
    Ok(())
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    presence_reaches_co_members_and_not_strangers
);
async fn presence_reaches_co_members_and_not_strangers(store: StoreKind) -> Result<()> {
    let c = cast(store).await?;
    let url = c.server.base_url();
    let mut ben = online(url, c.ben.token()).await?;
    let mut cai = online(url, c.cai.token()).await?;

    let ana = online(url, c.ana.token()).await?;
    let f = presence_of(&mut ben, "u-ana").await?;
    ensure!(
        f["online"] == true && f.get("last_seen").is_none(),
        "online frame {f}"
    );
    none_of(&mut cai, "presence", "a stranger, for ana's connect").await?;

    // A second device is no arrival, and its leaving is no departure while the first stays.
    let ana_id = parley_domain::UserId::parse("u-ana").map_err(|e| anyhow::anyhow!("{e}"))?;
    let laptop = online(url, c.ana_laptop.token()).await?;
    drop(laptop);
    // The laptop's release and `last_seen` are written off its connection's path: wait until
    // the store has them, then check that nobody was told.
    let deadline = tokio::time::Instant::now() + WAIT;
    while c.server.store().user_routes(&ana_id).await? != 1
        || c.ben.presence(&["u-ana"]).await?.first().map(|p| p.online) != Some(true)
    {
        ensure!(
            tokio::time::Instant::now() < deadline,
            "the laptop's route stays"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    none_of(&mut ben, "presence", "ben, for ana's second device").await?;

    drop(ana);
    let f = presence_of(&mut ben, "u-ana").await?;
    ensure!(f["online"] == false, "offline frame {f}");
    let last_seen = f["last_seen"].as_str().unwrap_or_default();
    ensure!(
        chrono::DateTime::parse_from_rfc3339(last_seen).is_ok() && last_seen.ends_with('Z'),
        "last_seen {f}"
    );
    none_of(&mut cai, "presence", "a stranger, for ana's disconnect").await?;
    c.server.stop().await;
    Ok(())
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    get_presence_shows_last_seen_and_hides_strangers_and_unknown_users_alike
);
async fn get_presence_shows_last_seen_and_hides_strangers_and_unknown_users_alike(
    store: StoreKind,
) -> Result<()> {
    let c = cast(store).await?;
    let url = c.server.base_url();
    let ben_ws = online(url, c.ben.token()).await?;
    let _cai_ws = online(url, c.cai.token()).await?;
    let asked = ["u-ana", "u-ben", "u-cai", "u-ghost"];

    // Ana never connected: known to Ben, offline, never seen.
    let seen = c.ben.presence(&asked).await?;
    let shown: Vec<(&str, bool, bool)> = seen
        .iter()
        .map(|p| (p.user_id.as_str(), p.online, p.last_seen.is_some()))
        .collect();
    ensure!(
        shown == [("u-ana", false, false), ("u-ben", true, false)],
        "{seen:?}"
    );

    let ana_ws = online(url, c.ana.token()).await?;
    let seen = c.ben.presence(&["u-ana"]).await?;
    ensure!(seen.len() == 1 && seen[0].online, "{seen:?}");
    drop(ana_ws);
    // The disconnect is recorded off the connection's path: wait for it, bounded.
    let deadline = tokio::time::Instant::now() + WAIT;
    let ana = loop {
        let seen = c.ben.presence(&["u-ana"]).await?;
        // The route goes first, then `last_seen` is written.
        if let Some(p) = seen
            .into_iter()
            .find(|p| !p.online && p.last_seen.is_some())
        {
            break p;
        }
        ensure!(tokio::time::Instant::now() < deadline, "ana not seen going");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let last_seen = ana.last_seen.unwrap_or_default();
    let at = chrono::DateTime::parse_from_rfc3339(&last_seen)?;
    let age = chrono::Utc::now().signed_duration_since(at);
    ensure!(
        age < chrono::Duration::seconds(60) && age > chrono::Duration::seconds(-5),
        "last_seen {last_seen}"
    );

    // A stranger and an unknown user answer alike: absent. Cai sees nothing of Ana or Ben.
    let seen = c.cai.presence(&["u-ana", "u-ben", "u-ghost"]).await?;
    ensure!(seen.is_empty(), "{seen:?}");
    let seen = c.cai.presence(&["u-cai"]).await?;
    ensure!(seen.len() == 1 && seen[0].online, "{seen:?}");
    drop(ben_ws);

    // The query's limits.
    let status = |users: String| {
        let ben = c.ben.clone();
        async move {
            let (status, body) = ben
                .raw(parley_client::Method::GET, &format!("/v1/presence{users}"))
                .send()
                .await?;
            anyhow::Ok((status, body["error"]["code"].clone()))
        }
    };
    let many: Vec<String> = (0..101).map(|i| format!("u-{i}")).collect();
    let hundred: Vec<String> = (0..100).map(|i| format!("u-{i}")).collect();
    ensure!(
        status(format!("?users={}", many.join(","))).await? == (400, json!("BAD_REQUEST")),
        "101 users"
    );
    ensure!(
        status(format!("?users={}", hundred.join(","))).await?.0 == 200,
        "100 users"
    );
    ensure!(
        status(String::new()).await? == (400, json!("BAD_REQUEST")),
        "no users"
    );
    ensure!(
        status("?users=a%20b".into()).await? == (400, json!("BAD_REQUEST")),
        "an invalid id"
    );
    ensure!(
        status("?users=u-ana&since=1".into()).await? == (400, json!("BAD_REQUEST")),
        "an unknown parameter"
    );
    c.server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typing_and_presence_cross_gateways_pgbus() -> Result<()> {
    typing_and_presence_cross_gateways(bus_of(false)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typing_and_presence_cross_gateways_nats() -> Result<()> {
    typing_and_presence_cross_gateways(bus_of(true)).await
}

/// Ana on gateway A and Ben on gateway B share a direct conversation: Ana's presence and typing
/// reach Ben through the bus; Cai, a stranger on B, gets neither.
async fn typing_and_presence_cross_gateways(bus: GatewayBus) -> Result<()> {
    let nodes = TestServer::start_gateways_on(&bus, 2, ServerConfig::default()).await;
    let (a, b) = (&nodes[0], &nodes[1]);
    let (ana_id, ben_id, cai_id) = (unique("u-ana"), unique("u-ben"), unique("u-cai"));
    let ana = a.user_with_device(&ana_id).await;
    let ben = a.user_with_device(&ben_id).await;
    let cai = a.user_with_device(&cai_id).await;
    let conv = ana
        .create_conversation(&NewConversation::direct(ben_id.as_str()))
        .await?
        .conv_id;
    let mut ben_ws = online(b.base_url(), ben.token()).await?;
    let mut cai_ws = online(b.base_url(), cai.token()).await?;

    let mut ana_ws = online(a.base_url(), ana.token()).await?;
    let f = presence_of(&mut ben_ws, &ana_id).await?;
    ensure!(f["online"] == true, "online frame {f}");

    ana_ws.send(typing(&conv)).await?;
    let f = ben_ws.next_of("typing", WAIT).await?;
    ensure_typing(&f, &conv, &ana_id)?;

    drop(ana_ws);
    let f = presence_of(&mut ben_ws, &ana_id).await?;
    ensure!(
        f["online"] == false && f["last_seen"].is_string(),
        "offline frame {f}"
    );
    none_of(&mut cai_ws, "presence", "a stranger on B").await?;
    none_of(&mut cai_ws, "typing", "a stranger on B").await?;
    let seen = ben
        .with_base_url(b.base_url())?
        .presence(&[&ana_id])
        .await?;
    ensure!(
        seen.len() == 1 && !seen[0].online && seen[0].last_seen.is_some(),
        "{seen:?}"
    );
    for node in nodes {
        node.stop().await;
    }
    Ok(())
}
