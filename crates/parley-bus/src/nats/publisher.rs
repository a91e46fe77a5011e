//! The publisher task: drains the queue, coalesces, and publishes by subject.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::subjects::{conv_subject, notice_subject};
use super::{
    bump, Counters, NATS_BATCH_INTERVAL_MS_MIN, NATS_PAYLOAD_BYTES_MAX, NATS_QUEUE_LEN_MAX,
};
use crate::coalesce::{Batch, Outbound};
use crate::codec;

pub(super) struct Publisher {
    pub rx: mpsc::Receiver<Outbound>,
    pub client: async_nats::Client,
    pub gateway_id: String,
    pub counters: Arc<Counters>,
    pub stop: CancellationToken,
}

impl Publisher {
    pub async fn run(mut self) {
        let interval = Duration::from_millis(NATS_BATCH_INTERVAL_MS_MIN);
        loop {
            let first = tokio::select! {
                biased;
                _ = self.stop.cancelled() => break,
                next = self.rx.recv() => match next {
                    Some(entry) => entry,
                    None => break,
                },
            };
            let started = tokio::time::Instant::now();
            let mut batch = Batch::new();
            batch.add(first);
            while batch.len() < NATS_QUEUE_LEN_MAX {
                match self.rx.try_recv() {
                    Ok(entry) => batch.add(entry),
                    Err(_) => break,
                }
            }
            self.publish(&batch).await;
            tokio::select! {
                _ = self.stop.cancelled() => break,
                _ = tokio::time::sleep_until(started + interval) => {}
            }
        }
        // What is still queued goes out at shutdown; the client sends it when it flushes.
        self.rx.close();
        let mut batch = Batch::new();
        while let Ok(entry) = self.rx.try_recv() {
            batch.add(entry);
        }
        if !batch.is_empty() {
            self.publish(&batch).await;
        }
        if let Err(e) = super::flush(&self.client).await {
            tracing::warn!(error = %e, "nats event bus stopped before its last payloads were sent");
        }
    }

    /// Publishes one batch, one group of payloads per subject. While the client is
    /// disconnected it buffers what is published and sends it after the reconnect.
    async fn publish(&self, batch: &Batch) {
        for (subject, group) in by_subject(batch) {
            let encoded = codec::encode(&self.gateway_id, &group, NATS_PAYLOAD_BYTES_MAX);
            let oversized = encoded.heads_oversized + encoded.notices_oversized;
            if oversized > 0 {
                bump(&self.counters.lost, oversized as u64);
                tracing::warn!(
                    oversized,
                    "announcements too long for a payload; not announced"
                );
            }
            for payload in encoded.payloads {
                match self.client.publish(subject.clone(), payload.into()).await {
                    Ok(()) => {
                        bump(&self.counters.published, 1);
                    }
                    Err(e) => {
                        bump(&self.counters.lost, 1);
                        tracing::warn!(error = %e, subject, "cannot publish on NATS; other gateways repair from the log");
                    }
                }
            }
        }
    }
}

/// The batch split by subject: heads and events by conversation shard, notices by user
/// shard, each subject's notices in their order.
fn by_subject(batch: &Batch) -> HashMap<String, Batch> {
    let mut groups: HashMap<String, Batch> = HashMap::new();
    for (conv_id, head) in batch.heads() {
        let group = groups.entry(conv_subject(conv_id)).or_default();
        for event in batch.events(conv_id) {
            group.add(Outbound::Event(event.clone()));
        }
        group.add(Outbound::Head(conv_id.clone(), *head));
    }
    for notice in batch.notices() {
        groups
            .entry(notice_subject(notice))
            .or_default()
            .add(Outbound::Notice(notice.clone()));
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Notice;
    use parley_domain::{ConvId, DeviceId, UserId};

    #[test]
    fn a_batch_splits_by_shard_and_keeps_each_users_notices_in_order() {
        let mut batch = Batch::new();
        let convs: Vec<ConvId> = (0..200)
            .map(|i| ConvId::from_trusted(format!("c-{i}")))
            .collect();
        for (i, c) in convs.iter().enumerate() {
            batch.add(Outbound::Head(c.clone(), i as i64 + 1));
        }
        let user = UserId::from_trusted("u-ana".into());
        let read = |seq| Notice::ReadMoved {
            user_id: user.clone(),
            conv_id: convs[0].clone(),
            read_seq: seq,
            origin_device: DeviceId::from_trusted("d".into()),
        };
        for seq in [3, 1, 2] {
            batch.add(Outbound::Notice(read(seq)));
        }
        let groups = by_subject(&batch);
        let heads: usize = groups.values().map(|g| g.heads().len()).sum();
        assert_eq!(heads, 200, "every head once");
        for (subject, group) in &groups {
            for c in group.heads().keys() {
                assert_eq!(subject, &conv_subject(c));
            }
        }
        let notices = &groups[&notice_subject(&read(0))];
        assert_eq!(notices.notices(), &[read(3), read(1), read(2)]);
    }
}
