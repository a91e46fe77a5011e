//! Applies the bus's notices to the connections this gateway holds. Every gateway does the
//! same, the one that made the write included, so a user's devices are treated alike
//! wherever they are connected.

use std::collections::BTreeMap;
use std::sync::Arc;

use parley_bus::Notice;
use parley_domain::{ConvId, DeviceId, UserId};
use parley_store::Store;

use axum::extract::ws::Message;

use super::ephemeral::TYPING_EXPIRES_MS;
use super::frames;
use super::hub::{CloseReason, ConnHandle, Hub};

/// A read position that moved is pushed as a `read` frame to the user's other devices (never
/// to the device that moved it); the connections of a revoked or replaced device token close
/// with 4003; a route taken by a connection on another gateway closes the one connection it
/// named, if `gateway_id` (this gateway) holds it, with 4001. Roles are not kept on the gateway
/// and change nothing a connection sees, so a role change pushes nothing. Typing and presence
/// go to the connections here of the users the notice names (`ephemeral.rs` chose them).
pub async fn apply(hub: &Hub, store: &dyn Store, gateway_id: &str, notice: &Notice) {
    match notice {
        Notice::ReadMoved {
            user_id,
            conv_id,
            read_seq,
            origin_device,
        } => push_read(hub, user_id, conv_id, *read_seq, origin_device),
        Notice::DeviceRevoked { user_id, device_id } => {
            close_revoked(hub, store, user_id, device_id).await;
        }
        Notice::RoleChanged { .. } => {}
        Notice::RouteTaken { .. } => kick_replaced(hub, gateway_id, notice),
        Notice::Typing {
            conv_id,
            user_id,
            recipients,
        } => {
            let frame = frames::typing(conv_id.as_str(), user_id.as_str(), TYPING_EXPIRES_MS);
            push_to_users(hub, recipients, user_id, &frame);
        }
        Notice::Presence {
            user_id,
            online,
            last_seen,
            recipients,
        } => {
            let frame = frames::presence(user_id.as_str(), *online, *last_seen);
            push_to_users(hub, recipients, user_id, &frame);
        }
    }
}

/// An ephemeral frame, built once, to every connection here of each recipient. The user it is
/// about is never a recipient of their own typing or presence, whatever the notice names.
fn push_to_users(hub: &Hub, recipients: &[UserId], about: &UserId, frame: &Message) {
    for user in recipients.iter().filter(|u| *u != about) {
        hub.for_each_of(user, |c| {
            c.push(frame.clone());
        });
    }
}

/// Closes with 4001 the connection whose route a connection on another gateway took, when that
/// route was on this gateway (`gateway_id`): exactly that one, matched by user, device and
/// connection id. A device's newer connection here, if it has one, holds another id and stays,
/// and the replaced connection's cleanup deletes its route only where it still names it (P9),
/// so the newer route is kept.
fn kick_replaced(hub: &Hub, gateway_id: &str, notice: &Notice) {
    let Notice::RouteTaken {
        user_id,
        device_id,
        gateway_id: taken_on,
        conn_id,
    } = notice
    else {
        return;
    };
    if taken_on != gateway_id {
        return;
    }
    for c in hub.connections_of_device(user_id, device_id) {
        if &c.conn_id == conn_id {
            c.close(CloseReason::Kicked);
        }
    }
}

/// The `read` frame to every connection of the user but those of the device that moved it.
fn push_read(
    hub: &Hub,
    user_id: &UserId,
    conv_id: &ConvId,
    read_seq: i64,
    origin_device: &DeviceId,
) {
    let frame = frames::read(conv_id.as_str(), read_seq);
    hub.for_each_of(user_id, |c| {
        if &c.device_id != origin_device {
            c.push(frame.clone());
        }
    });
}

/// What the store says of a token a connection authenticated with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// It still authenticates the device: the connection was opened with the new token of a
    /// re-issue, after the notice was made, and stays.
    Valid,
    /// It no longer works.
    Revoked,
    /// The store could not answer.
    Unknown,
}

/// Closes the device's connections whose token no longer works. A notice travels after its
/// commit, so a device may already hold a connection of the token that replaced the revoked
/// one; each token is therefore checked against the store (once per token, and only when the
/// device is connected here) rather than every connection of the device closed. When the store
/// cannot answer, the connections close as at shutdown and are checked again at the upgrade.
async fn close_revoked(hub: &Hub, store: &dyn Store, user_id: &UserId, device_id: &DeviceId) {
    let conns = hub
        .connections_of_device(user_id, device_id)
        .into_iter()
        .map(|c| (user_id.clone(), c))
        .collect();
    check_tokens(store, conns, Some(CloseReason::Shutdown)).await;
}

/// Checks the token and the route of every connection here, and closes those revoked (4003)
/// and those whose device's route now names another connection (4001). The fanout calls it
/// after it lost announcements: a lost read frame is repaired by sync, but a lost revocation
/// or a lost kick would leave its socket open. When the store cannot answer, connections stay
/// as they are: nothing says they were revoked or replaced.
pub async fn recheck_all(hub: &Hub, store: &dyn Store, gateway_id: &str) {
    let conns = hub.all_connections();
    check_routes(store, gateway_id, &conns).await;
    check_tokens(store, conns, None).await;
}

/// Closes with `kicked` every connection whose route was claimed and now names another
/// connection, here or on another gateway. A missing route kicks nothing: a reaper or a
/// release removed it, and no newer connection claimed it.
async fn check_routes(store: &dyn Store, gateway_id: &str, conns: &[(UserId, Arc<ConnHandle>)]) {
    for (user_id, conn) in conns.iter().filter(|(_, c)| c.route_claimed()) {
        match store.device_route(user_id, &conn.device_id).await {
            Ok(Some(route)) if route.gateway_id != gateway_id || route.conn_id != conn.conn_id => {
                conn.close(CloseReason::Kicked)
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "cannot check a connection's route against the store");
                return;
            }
        }
    }
}

/// Asks the store once per token whether it still authenticates the device of its
/// connections, and settles them by the answer; `on_unknown` closes them when it cannot tell.
async fn check_tokens(
    store: &dyn Store,
    conns: Vec<(UserId, Arc<ConnHandle>)>,
    on_unknown: Option<CloseReason>,
) {
    for ((token_hash, user_id, device_id), group) in by_token(conns) {
        let verdict = match store.authenticate(&token_hash).await {
            Ok(Some(id)) if id.user_id == user_id && id.device_id == device_id => Verdict::Valid,
            Ok(_) => Verdict::Revoked,
            Err(e) => {
                tracing::warn!(error = %e, "cannot check a connection's token against the store");
                Verdict::Unknown
            }
        };
        settle(group.iter(), verdict, on_unknown);
    }
}

/// A token hash with the user and device its connections authenticated as.
type TokenOf = (String, UserId, DeviceId);

/// The connections grouped by the token they authenticated with and as whom.
fn by_token(conns: Vec<(UserId, Arc<ConnHandle>)>) -> BTreeMap<TokenOf, Vec<Arc<ConnHandle>>> {
    let mut groups: BTreeMap<TokenOf, Vec<Arc<ConnHandle>>> = BTreeMap::new();
    for (user, c) in conns {
        let key = (c.token_hash.clone(), user, c.device_id.clone());
        groups.entry(key).or_default().push(c);
    }
    groups
}

/// A revoked token's connections close with 4003, which stops the client's session. When the
/// store could not tell, `on_unknown` says how they close, if at all: at shutdown (1001) the
/// client reconnects and its token is checked at the upgrade, so a revoked one is refused and
/// a valid one is back at once.
fn settle<'a>(
    conns: impl Iterator<Item = &'a Arc<ConnHandle>>,
    verdict: Verdict,
    on_unknown: Option<CloseReason>,
) {
    let reason = match (verdict, on_unknown) {
        (Verdict::Valid, _) | (Verdict::Unknown, None) => return,
        (Verdict::Revoked, _) => CloseReason::Revoked,
        (Verdict::Unknown, Some(reason)) => reason,
    };
    conns.for_each(|c| c.close(reason));
}

#[cfg(test)]
mod tests {
    use crate::gateway::out_queue::{self, OutReceiver};
    use axum::extract::ws::Message;
    use tokio::sync::watch;

    use super::*;

    struct Conn {
        frames: OutReceiver,
        closed: watch::Receiver<Option<CloseReason>>,
    }

    impl Conn {
        fn frames(&mut self) -> Vec<serde_json::Value> {
            std::iter::from_fn(|| self.frames.try_recv().ok())
                .map(|m| match m {
                    Message::Text(t) => serde_json::from_str(t.as_str()).expect("a JSON frame"),
                    other => panic!("not a text frame: {other:?}"),
                })
                .collect()
        }

        fn closed(&self) -> Option<CloseReason> {
            *self.closed.borrow()
        }
    }

    fn connect(hub: &Hub, user: &str, device: &str, token_hash: &str) -> Conn {
        connect_as(
            hub,
            &format!("{user}/{device}/{token_hash}"),
            user,
            device,
            token_hash,
        )
    }

    fn connect_as(hub: &Hub, conn_id: &str, user: &str, device: &str, token_hash: &str) -> Conn {
        let (tx, frames) = out_queue::channel(8);
        let (close, closed) = watch::channel(None);
        let handle = ConnHandle::new(
            conn_id.into(),
            DeviceId::from_trusted(device.into()),
            token_hash.into(),
            tx,
            close,
        );
        hub.register(&UserId::from_trusted(user.into()), Arc::new(handle));
        Conn { frames, closed }
    }

    fn user(s: &str) -> UserId {
        UserId::from_trusted(s.into())
    }

    fn device(s: &str) -> DeviceId {
        DeviceId::from_trusted(s.into())
    }

    #[test]
    fn a_read_reaches_the_users_other_devices_only() {
        let hub = Hub::default();
        let mut phone = connect(&hub, "ana", "phone", "h1");
        let mut laptop = connect(&hub, "ana", "laptop", "h2");
        let mut ben = connect(&hub, "ben", "phone", "h3");
        push_read(
            &hub,
            &user("ana"),
            &ConvId::from_trusted("c-1".into()),
            4,
            &device("phone"),
        );
        assert_eq!(
            laptop.frames(),
            vec![serde_json::json!({"type": "read", "conv_id": "c-1", "read_seq": 4})]
        );
        assert!(phone.frames().is_empty(), "the origin device is not told");
        assert!(ben.frames().is_empty(), "another user is not told");
    }

    #[test]
    fn connections_are_grouped_by_their_token_with_their_user() {
        let hub = Hub::default();
        let _phone = connect(&hub, "ana", "phone", "h1");
        let _laptop = connect(&hub, "ana", "laptop", "h2");
        let _ben = connect(&hub, "ben", "phone", "h3");
        let _ben_again = connect(&hub, "ben", "tablet", "h3");
        let groups = by_token(hub.all_connections());
        let keys: Vec<(&str, &str, &str)> = groups
            .keys()
            .map(|(h, u, d)| (h.as_str(), u.as_str(), d.as_str()))
            .collect();
        assert_eq!(
            keys,
            [
                ("h1", "ana", "phone"),
                ("h2", "ana", "laptop"),
                ("h3", "ben", "phone"),
                ("h3", "ben", "tablet")
            ]
        );
        let phone = hub.connections_of_device(&user("ana"), &device("phone"));
        assert_eq!(phone.len(), 1);
        assert_eq!(phone[0].token_hash, "h1");
    }

    #[test]
    fn a_revoked_token_closes_with_4003_a_valid_one_stays_an_unknown_one_as_told() {
        let hub = Hub::default();
        let (revoked, valid, unknown, kept) = (
            connect(&hub, "ana", "phone", "h1"),
            connect(&hub, "ana", "laptop", "h2"),
            connect(&hub, "ana", "tablet", "h3"),
            connect(&hub, "ana", "watch", "h4"),
        );
        let of = |d: &str| hub.connections_of_device(&user("ana"), &device(d));
        let shutdown = Some(CloseReason::Shutdown);
        settle(of("phone").iter(), Verdict::Revoked, None);
        settle(of("laptop").iter(), Verdict::Valid, shutdown);
        settle(of("tablet").iter(), Verdict::Unknown, shutdown);
        settle(of("watch").iter(), Verdict::Unknown, None);
        assert_eq!(revoked.closed().map(CloseReason::code), Some(4003));
        assert_eq!(valid.closed(), None);
        assert_eq!(unknown.closed().map(CloseReason::code), Some(1001));
        assert_eq!(kept.closed(), None);
    }

    fn taken(user: &str, device: &str, gateway: &str, conn: &str) -> Notice {
        Notice::RouteTaken {
            user_id: UserId::from_trusted(user.into()),
            device_id: DeviceId::from_trusted(device.into()),
            gateway_id: gateway.into(),
            conn_id: conn.into(),
        }
    }

    #[test]
    fn a_taken_route_kicks_the_connection_it_names_and_no_other() {
        let hub = Hub::default();
        let named = connect_as(&hub, "conn-1", "ana", "phone", "h1");
        let other_device = connect_as(&hub, "conn-2", "ana", "laptop", "h2");
        let other_user = connect_as(&hub, "conn-3", "ben", "phone", "h3");
        // The same connection id on another gateway, and another connection id on this one:
        // neither names a connection here.
        kick_replaced(&hub, "gw-a", &taken("ana", "phone", "gw-b", "conn-1"));
        kick_replaced(&hub, "gw-a", &taken("ana", "phone", "gw-a", "conn-9"));
        // The id of another device's, or another user's, connection under this device names
        // nothing either.
        kick_replaced(&hub, "gw-a", &taken("ana", "phone", "gw-a", "conn-2"));
        kick_replaced(&hub, "gw-a", &taken("ana", "phone", "gw-a", "conn-3"));
        assert_eq!(
            named.closed(),
            None,
            "a notice that names another connection"
        );
        assert_eq!(other_device.closed(), None);

        kick_replaced(&hub, "gw-a", &taken("ana", "phone", "gw-a", "conn-1"));
        assert_eq!(named.closed().map(CloseReason::code), Some(4001));
        assert_eq!(other_device.closed(), None, "the user's other device stays");
        assert_eq!(other_user.closed(), None, "another user's connection stays");
    }
}
