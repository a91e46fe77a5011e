//! The listener task: receives other gateways' notifications and hands them to this node's
//! subscribers.

use std::sync::Arc;

use sqlx::postgres::{PgConnectOptions, PgListener};
use tokio_util::sync::CancellationToken;

use super::connect::listen;
use super::stats::{bump, Counters};
use super::{wait_or_stop, LISTEN_RECONNECT_BACKOFF_MS_MAX, LISTEN_RECONNECT_BACKOFF_MS_MIN};
use crate::backoff::Backoff;
use crate::{codec, Announcement, Committed, LocalBus};

pub(super) struct Listener {
    pub options: PgConnectOptions,
    pub gateway_id: String,
    pub local: LocalBus,
    pub counters: Arc<Counters>,
    pub stop: CancellationToken,
}

impl Listener {
    pub async fn run(self, mut listener: PgListener) {
        let mut backoff = Backoff::new(
            LISTEN_RECONNECT_BACKOFF_MS_MIN,
            LISTEN_RECONNECT_BACKOFF_MS_MAX,
        );
        loop {
            let received = tokio::select! {
                biased;
                _ = self.stop.cancelled() => break,
                received = listener.try_recv() => received,
            };
            match received {
                Ok(Some(notification)) => {
                    self.deliver(notification.payload());
                    continue;
                }
                Ok(None) => {
                    tracing::warn!("event bus listener lost its connection; reconnecting");
                }
                Err(e) => {
                    tracing::warn!(error = %e, "event bus listener failed; reconnecting");
                }
            }
            drop(listener);
            let Some(again) = self.reconnect(&mut backoff).await else {
                break;
            };
            listener = again;
        }
    }

    /// Connects and listens again, waiting longer after each failure; `None` at shutdown.
    async fn reconnect(&self, backoff: &mut Backoff) -> Option<PgListener> {
        loop {
            if !wait_or_stop(backoff, &self.stop).await {
                return None;
            }
            match listen(&self.options).await {
                Ok(listener) => {
                    backoff.reset();
                    bump(&self.counters.listen_reconnects, 1);
                    // Notifications are not kept for absent listeners, so what was missed is
                    // unknown: subscribers read every conversation they hold from the log.
                    tracing::warn!(
                        "event bus listener reconnected; announcements of other gateways made \
                         while it was disconnected are repaired from the log"
                    );
                    self.local.publish(Announcement::Reconnected);
                    return Some(listener);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "event bus listener cannot reconnect yet");
                }
            }
        }
    }

    fn deliver(&self, payload: &str) {
        let Some(decoded) = codec::decode(payload) else {
            bump(&self.counters.malformed, 1);
            tracing::warn!(
                payload_bytes = payload.len(),
                "ignoring a malformed notification on the event bus channel"
            );
            return;
        };
        if decoded.origin == self.gateway_id {
            bump(&self.counters.own_ignored, 1);
            return;
        }
        bump(&self.counters.notifications_received, 1);
        if decoded.notices_unknown > 0 {
            bump(
                &self.counters.notices_unknown,
                decoded.notices_unknown as u64,
            );
            tracing::debug!(
                skipped = decoded.notices_unknown,
                "notices of a kind this gateway does not know were skipped"
            );
        }
        for (conv_id, head) in decoded.heads {
            self.local.publish(Announcement::Committed(Committed {
                conv_id,
                head,
                event: None,
            }));
        }
        bump(
            &self.counters.notices_received,
            decoded.notices.len() as u64,
        );
        for notice in decoded.notices {
            self.local.publish(Announcement::Notice(notice));
        }
    }
}
