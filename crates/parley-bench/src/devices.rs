//! Simulated devices: one SDK realtime session per online device, tracking each of its
//! conversations from the head at creation. A reader task per device takes the session's
//! deliveries (the SDK wants them read from their own task) and records each event as
//! `(conversation, seq, arrival time)`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use futures::{stream, StreamExt, TryStreamExt};
use parley_client::{Delivery, Realtime, RealtimeHandle, RealtimeOptions};
use tokio::task::JoinHandle;

use super::world::World;

/// WebSocket handshakes in flight while the devices come online.
const CONNECTS_IN_FLIGHT: usize = 32;
/// Longest wait for a reader to hand over its log once its session was closed.
const READER_STOP_WAIT_MS: u64 = 10_000;

/// One event as a device received it.
#[derive(Debug, Clone, Copy)]
pub struct Received {
    pub conv: u32,
    pub seq: i64,
    pub at: Instant,
}

/// Everything one device saw, in arrival order.
#[derive(Debug, Default)]
pub struct DeviceLog {
    pub received: Vec<Received>,
    /// Arrival times of `Reconnected` notices: a new connection replaced a lost one.
    pub reconnected: Vec<Instant>,
    /// Sessions that ended for good (kicked, revoked, unreachable).
    pub stopped: Vec<String>,
}

/// Counters the load phase reads while it runs.
#[derive(Debug, Default)]
pub struct Counters {
    pub events: AtomicU64,
    pub reconnects: AtomicU64,
}

pub struct Devices {
    pub handles: Vec<RealtimeHandle>,
    readers: Vec<JoinHandle<DeviceLog>>,
    pub counters: Arc<Counters>,
}

/// Realtime options of a simulated device: the SDK's defaults.
pub fn device_options() -> RealtimeOptions {
    RealtimeOptions::default()
}

impl Devices {
    /// Connects every online device of `world` and tracks its conversations.
    pub async fn connect(world: &World, on_step: &(dyn Fn() + Sync)) -> Result<Devices> {
        let conv_index: Arc<HashMap<String, u32>> = Arc::new(
            world
                .convs
                .iter()
                .enumerate()
                .map(|(i, c)| (c.id.clone(), i as u32))
                .collect(),
        );
        let counters = Arc::new(Counters::default());
        let sessions: Vec<Realtime> = stream::iter(world.clients.iter().enumerate())
            .map(|(d, client)| async move {
                let rt = Realtime::connect(client, device_options()).await;
                on_step();
                let rt = rt.with_context(|| format!("connecting device {d}"))?;
                for &c in &world.device_convs[d] {
                    let conv = &world.convs[c as usize];
                    rt.track(&conv.id, conv.epoch, conv.start);
                }
                Ok::<_, anyhow::Error>(rt)
            })
            .buffered(CONNECTS_IN_FLIGHT)
            .try_collect()
            .await?;
        let mut handles = Vec::with_capacity(sessions.len());
        let mut readers = Vec::with_capacity(sessions.len());
        for rt in sessions {
            handles.push(rt.handle());
            readers.push(tokio::spawn(read_deliveries(
                rt,
                conv_index.clone(),
                counters.clone(),
            )));
        }
        Ok(Devices {
            handles,
            readers,
            counters,
        })
    }

    /// Closes every session and collects what each device received.
    pub async fn close(self) -> Vec<DeviceLog> {
        stream::iter(self.handles.iter())
            .for_each_concurrent(CONNECTS_IN_FLIGHT, |h| h.close())
            .await;
        let mut logs = Vec::with_capacity(self.readers.len());
        for reader in self.readers {
            let wait = Duration::from_millis(READER_STOP_WAIT_MS);
            logs.push(match tokio::time::timeout(wait, reader).await {
                Ok(Ok(log)) => log,
                _ => DeviceLog {
                    stopped: vec!["the reader did not stop".into()],
                    ..DeviceLog::default()
                },
            });
        }
        logs
    }
}

async fn read_deliveries(
    mut rt: Realtime,
    conv_index: Arc<HashMap<String, u32>>,
    counters: Arc<Counters>,
) -> DeviceLog {
    let mut log = DeviceLog::default();
    while let Some(delivery) = rt.next().await {
        let at = Instant::now();
        match delivery {
            Delivery::Event(event) => {
                if let Some(&conv) = conv_index.get(&event.conv_id) {
                    log.received.push(Received {
                        conv,
                        seq: event.seq,
                        at,
                    });
                    counters.events.fetch_add(1, Ordering::Relaxed);
                }
            }
            Delivery::Reconnected => {
                log.reconnected.push(at);
                counters.reconnects.fetch_add(1, Ordering::Relaxed);
            }
            Delivery::Kicked => log.stopped.push("kicked".into()),
            Delivery::Revoked => log.stopped.push("revoked".into()),
            Delivery::Unreachable => log.stopped.push("unreachable".into()),
            // Read positions, truncations, epoch changes, disconnections: the log is verified
            // afterwards.
            _ => {}
        }
    }
    log
}
