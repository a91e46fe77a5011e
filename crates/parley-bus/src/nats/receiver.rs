//! The receiver task (other gateways' payloads to this node's subscribers) and the watcher
//! task (the client's connection events: degraded while down, a repair after a reconnect).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use futures::StreamExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{bump, flush, Counters};
use crate::{codec, Announcement, Committed, LocalBus};

pub(super) struct Receiver {
    pub gateway_id: String,
    pub local: LocalBus,
    pub counters: Arc<Counters>,
    pub stop: CancellationToken,
}

impl Receiver {
    /// Delivers payloads until shutdown. The client keeps the subscription across reconnects.
    pub async fn run(self, mut subscriber: async_nats::Subscriber) {
        loop {
            let message = tokio::select! {
                biased;
                _ = self.stop.cancelled() => break,
                message = subscriber.next() => message,
            };
            let Some(message) = message else {
                tracing::warn!("nats subscription ended; no announcements of other gateways");
                break;
            };
            self.deliver(&message.payload);
        }
    }

    fn deliver(&self, payload: &[u8]) {
        let decoded = std::str::from_utf8(payload).ok().and_then(codec::decode);
        let Some(decoded) = decoded else {
            bump(&self.counters.malformed, 1);
            tracing::warn!(
                payload_bytes = payload.len(),
                "ignoring a malformed payload on NATS"
            );
            return;
        };
        if decoded.origin == self.gateway_id {
            bump(&self.counters.own_ignored, 1);
            return;
        }
        bump(&self.counters.received, 1);
        for (conv_id, head) in decoded.heads {
            self.local.publish(Announcement::Committed(Committed {
                conv_id,
                head,
                event: None,
            }));
        }
        for notice in decoded.notices {
            self.local.publish(Announcement::Notice(notice));
        }
    }
}

pub(super) struct Watcher {
    pub client: async_nats::Client,
    pub local: LocalBus,
    pub counters: Arc<Counters>,
    pub connected: Arc<AtomicBool>,
    pub stop: CancellationToken,
}

impl Watcher {
    pub async fn run(self, mut events: mpsc::UnboundedReceiver<async_nats::Event>) {
        loop {
            let event = tokio::select! {
                biased;
                _ = self.stop.cancelled() => break,
                event = events.recv() => match event {
                    Some(event) => event,
                    None => break,
                },
            };
            match event {
                async_nats::Event::Disconnected => {
                    self.connected.store(false, Ordering::Release);
                    tracing::warn!("nats event bus disconnected; reconnecting with backoff");
                }
                // The first connection reports itself too; only a connection after a loss
                // needs a repair.
                async_nats::Event::Connected if !self.connected.load(Ordering::Acquire) => {
                    self.reconnected().await
                }
                async_nats::Event::Connected => {}
                other => tracing::info!(event = %other, "nats event bus event"),
            }
        }
    }

    /// After a reconnect: a round trip first, so the subscription the client renewed is in
    /// place on the server, then the repair, so nothing announced after it is missed.
    async fn reconnected(&self) {
        if let Err(e) = flush(&self.client).await {
            tracing::warn!(error = %e, "nats reconnected but did not confirm; repairing anyway");
        }
        self.connected.store(true, Ordering::Release);
        let reconnects = bump(&self.counters.reconnects, 1);
        tracing::warn!(
            reconnects,
            "nats event bus reconnected; conversations are repaired from the log"
        );
        self.local.publish(Announcement::Reconnected);
    }
}
