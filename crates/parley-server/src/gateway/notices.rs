//! Applies the bus's notices to the connections this gateway holds. Every gateway does the
//! same, the one that made the write included, so a user's devices are treated alike
//! wherever they are connected.

use std::collections::BTreeMap;
use std::sync::Arc;

use parley_bus::Notice;
use parley_domain::{ConvId, DeviceId, UserId};
use parley_store::Store;

use super::frames;
use super::hub::{CloseReason, ConnHandle, Hub};

/// A read position that moved is pushed as a `read` frame to the user's other devices (never
/// to the device that moved it); the connections of a revoked or replaced device token close
/// with 4003. Roles are not kept on the gateway and change nothing a connection sees, so a role
/// change pushes nothing.
pub async fn apply(hub: &Hub, store: &dyn Store, notice: &Notice) {
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
/// device is connected here) rather than every connection of the device closed.
async fn close_revoked(hub: &Hub, store: &dyn Store, user_id: &UserId, device_id: &DeviceId) {
    for (token_hash, conns) in by_token(hub.connections_of_device(user_id, device_id)) {
        let verdict = match store.authenticate(&token_hash).await {
            Ok(Some(id)) if &id.user_id == user_id && &id.device_id == device_id => Verdict::Valid,
            Ok(_) => Verdict::Revoked,
            Err(e) => {
                tracing::warn!(error = %e, "cannot check a revoked device's token; its connections reconnect to be checked afresh");
                Verdict::Unknown
            }
        };
        settle(&conns, verdict);
    }
}

/// The connections grouped by the token they authenticated with.
fn by_token(conns: Vec<Arc<ConnHandle>>) -> BTreeMap<String, Vec<Arc<ConnHandle>>> {
    let mut groups: BTreeMap<String, Vec<Arc<ConnHandle>>> = BTreeMap::new();
    for c in conns {
        groups.entry(c.token_hash.clone()).or_default().push(c);
    }
    groups
}

/// A revoked token's connections close with 4003, which stops the client's session. When the
/// store cannot tell, they close as at shutdown (1001): the client reconnects, and its token is
/// checked at the upgrade, so a revoked one is refused and a valid one is back at once.
fn settle(conns: &[Arc<ConnHandle>], verdict: Verdict) {
    let reason = match verdict {
        Verdict::Valid => return,
        Verdict::Revoked => CloseReason::Revoked,
        Verdict::Unknown => CloseReason::Shutdown,
    };
    conns.iter().for_each(|c| c.close(reason));
}

#[cfg(test)]
mod tests {
    use axum::extract::ws::Message;
    use tokio::sync::{mpsc, watch};

    use super::*;

    struct Conn {
        frames: mpsc::Receiver<Message>,
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
        let (tx, frames) = mpsc::channel(8);
        let (close, closed) = watch::channel(None);
        let handle = ConnHandle::new(
            format!("{user}/{device}/{token_hash}"),
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
    fn only_the_devices_connections_are_grouped_by_their_token() {
        let hub = Hub::default();
        let _old = connect(&hub, "ana", "phone", "old");
        let _other = connect(&hub, "ana", "laptop", "old");
        let _ben = connect(&hub, "ben", "phone", "old");
        let groups = by_token(hub.connections_of_device(&user("ana"), &device("phone")));
        assert_eq!(groups.keys().collect::<Vec<_>>(), ["old"]);
        assert_eq!(groups["old"].len(), 1);
    }

    #[test]
    fn a_revoked_token_closes_with_4003_a_valid_one_stays_an_unknown_one_reconnects() {
        let hub = Hub::default();
        let (revoked, valid, unknown) = (
            connect(&hub, "ana", "phone", "h1"),
            connect(&hub, "ana", "laptop", "h2"),
            connect(&hub, "ana", "tablet", "h3"),
        );
        let of = |d: &str| hub.connections_of_device(&user("ana"), &device(d));
        settle(&of("phone"), Verdict::Revoked);
        settle(&of("laptop"), Verdict::Valid);
        settle(&of("tablet"), Verdict::Unknown);
        assert_eq!(revoked.closed().map(CloseReason::code), Some(4003));
        assert_eq!(valid.closed(), None);
        assert_eq!(unknown.closed().map(CloseReason::code), Some(1001));
    }
}
