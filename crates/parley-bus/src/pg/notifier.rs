//! The notifier task: drains the queue, coalesces, and notifies the other gateways.

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::PgConnectOptions;
use sqlx::PgConnection;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::connect::{connect, notify_options};
use super::stats::{bump, Counters};
use super::{
    wait_or_stop, NOTIFY_BATCH_INTERVAL_MS_MIN, NOTIFY_CHANNEL, NOTIFY_PAYLOAD_BYTES_MAX,
    NOTIFY_QUEUE_LEN_MAX, NOTIFY_RECONNECT_BACKOFF_MS_MAX, NOTIFY_RECONNECT_BACKOFF_MS_MIN,
    NOTIFY_STATEMENT_TIMEOUT_MS, SHUTDOWN_FLUSH_TIMEOUT_MS,
};
use crate::backoff::Backoff;
use crate::coalesce::{Batch, Outbound};
use crate::{codec, BusError};

pub(super) struct Notifier {
    pub rx: mpsc::Receiver<Outbound>,
    pub conn: Option<PgConnection>,
    pub options: Arc<PgConnectOptions>,
    pub gateway_id: String,
    pub counters: Arc<Counters>,
    pub stop: CancellationToken,
}

impl Notifier {
    pub async fn run(mut self) {
        let mut backoff = Backoff::new(
            NOTIFY_RECONNECT_BACKOFF_MS_MIN,
            NOTIFY_RECONNECT_BACKOFF_MS_MAX,
        );
        let interval = Duration::from_millis(NOTIFY_BATCH_INTERVAL_MS_MIN);
        loop {
            let first = tokio::select! {
                biased;
                _ = self.stop.cancelled() => break,
                next = self.rx.recv() => match next {
                    Some(entry) => entry,
                    None => break,
                },
            };
            // Everything that queued up since the previous batch goes into this one: batches
            // grow with the load, and an idle bus notifies at once.
            let started = tokio::time::Instant::now();
            let mut batch = Batch::new();
            batch.add(first);
            while batch.len() < NOTIFY_QUEUE_LEN_MAX {
                match self.rx.try_recv() {
                    Ok(entry) => batch.add(entry),
                    Err(_) => break,
                }
            }
            if self.send(&batch).await {
                backoff.reset();
                let pause = tokio::time::sleep_until(started + interval);
                tokio::select! {
                    _ = self.stop.cancelled() => break,
                    _ = pause => {}
                }
            } else if !wait_or_stop(&mut backoff, &self.stop).await {
                break;
            }
        }
        self.flush_at_shutdown().await;
    }

    /// Sends what is still queued, so an orderly shutdown loses no announcement.
    async fn flush_at_shutdown(mut self) {
        self.rx.close();
        let mut batch = Batch::new();
        while let Ok(entry) = self.rx.try_recv() {
            batch.add(entry);
        }
        if batch.is_empty() {
            return;
        }
        let flush = self.send(&batch);
        if tokio::time::timeout(Duration::from_millis(SHUTDOWN_FLUSH_TIMEOUT_MS), flush)
            .await
            .is_err()
        {
            bump(&self.counters.heads_lost, batch.heads().len() as u64);
            bump(&self.counters.notices_lost, batch.notices().len() as u64);
            tracing::warn!(
                heads = batch.heads().len(),
                notices = batch.notices().len(),
                "event bus stopped before its last announcements were sent"
            );
        }
    }

    /// Sends one batch in one statement; false (counted as lost, connection dropped) when it
    /// failed.
    async fn send(&mut self, batch: &Batch) -> bool {
        let encoded = codec::encode(&self.gateway_id, batch, NOTIFY_PAYLOAD_BYTES_MAX);
        if encoded.heads_oversized + encoded.notices_oversized > 0 {
            bump(&self.counters.heads_lost, encoded.heads_oversized as u64);
            bump(
                &self.counters.notices_lost,
                encoded.notices_oversized as u64,
            );
            tracing::warn!(
                heads = encoded.heads_oversized,
                notices = encoded.notices_oversized,
                "announcements too long for a notification payload; not announced"
            );
        }
        if encoded.payloads.is_empty() {
            return true;
        }
        let sent_heads = (batch.heads().len() - encoded.heads_oversized) as u64;
        let sent_notices = (batch.notices().len() - encoded.notices_oversized) as u64;
        match self.notify(&encoded.payloads).await {
            Ok(()) => {
                bump(&self.counters.batches, 1);
                bump(
                    &self.counters.notifications_sent,
                    encoded.payloads.len() as u64,
                );
                bump(&self.counters.heads_sent, sent_heads);
                bump(&self.counters.notices_sent, sent_notices);
                true
            }
            Err(e) => {
                self.conn = None;
                bump(&self.counters.heads_lost, sent_heads);
                bump(&self.counters.notices_lost, sent_notices);
                tracing::warn!(
                    error = %e,
                    heads = sent_heads,
                    notices = sent_notices,
                    "cannot notify other gateways; these announcements are lost and their \
                     clients repair by sync"
                );
                false
            }
        }
    }

    async fn notify(&mut self, payloads: &[String]) -> Result<(), BusError> {
        let conn = match &mut self.conn {
            Some(conn) => conn,
            None => self
                .conn
                .insert(connect(&notify_options(&self.options, &self.gateway_id)).await?),
        };
        let statement =
            sqlx::query("SELECT pg_notify($1, payload) FROM unnest($2::text[]) AS payload")
                .bind(NOTIFY_CHANNEL)
                .bind(payloads)
                .execute(conn);
        match tokio::time::timeout(
            Duration::from_millis(NOTIFY_STATEMENT_TIMEOUT_MS),
            statement,
        )
        .await
        {
            Ok(done) => {
                done?;
                Ok(())
            }
            Err(_) => Err(BusError::Unavailable(format!(
                "pg_notify took longer than {NOTIFY_STATEMENT_TIMEOUT_MS} ms"
            ))),
        }
    }
}
