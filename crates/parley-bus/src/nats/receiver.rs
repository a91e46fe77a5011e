//! The receiver task (other gateways' payloads to this node's subscribers) and the watcher
//! task (the client's connection events: degraded while down, a repair after a reconnect).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use futures::StreamExt;
use parley_domain::{ConvId, Event};
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
        for committed in committed_in_order(decoded.heads, decoded.events) {
            self.local.publish(Announcement::Committed(committed));
        }
        for notice in decoded.notices {
            self.local.publish(Announcement::Notice(notice));
        }
    }
}

/// What a payload announces of its conversations: for each, its events in seq order, each
/// with its own seq as head, then the head when it is beyond the last event. Events of a
/// conversation without a head in the payload come last, in the same way.
fn committed_in_order(heads: Vec<(ConvId, i64)>, events: Vec<Event>) -> Vec<Committed> {
    let mut by_conv: HashMap<ConvId, Vec<Event>> = HashMap::new();
    for event in events {
        by_conv
            .entry(event.conv_id.clone())
            .or_default()
            .push(event);
    }
    let mut out = Vec::with_capacity(heads.len());
    for (conv_id, head) in heads {
        let events = by_conv.remove(&conv_id).unwrap_or_default();
        emit(conv_id, Some(head), events, &mut out);
    }
    for (conv_id, events) in by_conv {
        emit(conv_id, None, events, &mut out);
    }
    out
}

/// Appends one conversation's events, sorted and each seq once, then its head if beyond them.
fn emit(conv_id: ConvId, head: Option<i64>, mut events: Vec<Event>, out: &mut Vec<Committed>) {
    events.sort_by_key(|e| e.seq);
    events.dedup_by_key(|e| e.seq);
    let last = events.last().map(|e| e.seq);
    out.extend(events.into_iter().map(|e| Committed {
        conv_id: conv_id.clone(),
        head: e.seq,
        event: Some(Arc::new(e)),
    }));
    if let Some(head) = head.filter(|h| last.is_none_or(|l| *h > l)) {
        out.push(Committed {
            conv_id,
            head,
            event: None,
        });
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

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::DateTime;
    use parley_domain::{EventKind, UserId};

    fn event(c: &str, seq: i64) -> Event {
        let at = DateTime::from_timestamp(1_700_000_000, 0).expect("valid time");
        let user = UserId::from_trusted("u".into());
        Event::membership(
            &ConvId::from_trusted(c.into()),
            seq,
            EventKind::Join,
            &user,
            &user,
            at,
        )
    }

    fn summary(committed: &[Committed]) -> Vec<(String, i64, Option<i64>)> {
        committed
            .iter()
            .map(|c| {
                (
                    c.conv_id.to_string(),
                    c.head,
                    c.event.as_ref().map(|e| e.seq),
                )
            })
            .collect()
    }

    #[test]
    fn events_come_first_in_seq_order_then_a_head_beyond_them() {
        let heads = vec![
            (ConvId::from_trusted("a".into()), 5),
            (ConvId::from_trusted("b".into()), 2),
            (ConvId::from_trusted("c".into()), 9),
        ];
        let events = vec![event("a", 3), event("b", 1), event("a", 2), event("b", 2)];
        let out = committed_in_order(heads, events);
        assert_eq!(
            summary(&out),
            vec![
                ("a".into(), 2, Some(2)),
                ("a".into(), 3, Some(3)),
                ("a".into(), 5, None),
                ("b".into(), 1, Some(1)),
                ("b".into(), 2, Some(2)),
                ("c".into(), 9, None),
            ]
        );
    }

    #[test]
    fn events_without_a_head_are_still_announced() {
        let out = committed_in_order(Vec::new(), vec![event("a", 4), event("a", 4)]);
        assert_eq!(summary(&out), vec![("a".into(), 4, Some(4))]);
    }
}
