//! After the load of a load-model run: wait for the pushes still on their way, close the
//! sessions, sync every device's conversations and check them, and compute the latencies.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Result;
use hdrhistogram::Histogram;

use crate::devices::{DeviceLog, Devices};
use crate::load::Ack;
use crate::progress::phase;
use crate::report::{micros_histogram, record};
use crate::verify::{verify, Verification};
use crate::world::World;

/// Longest wait after the load for the pushes still on their way.
const DRAIN_MAX: Duration = Duration::from_secs(90);
/// The drain gives up when no event arrived for this long. Longer than the SDK's ping
/// interval (20 s), after which a device retries a catch-up that failed.
const DRAIN_STALL_MAX: Duration = Duration::from_secs(25);
/// How often the drain looks at the delivery count.
const DRAIN_POLL_MS: u64 = 50;

/// What the devices received and what the check found.
pub struct Concluded {
    pub logs: Vec<DeviceLog>,
    pub verification: Verification,
    pub expected_events: u64,
    pub received_events: u64,
    pub drain_s: f64,
}

/// Drains, closes the sessions, and runs the final sync and check of every device.
pub async fn conclude(world: &World, devices: Devices, acks: &[Ack]) -> Concluded {
    let expected = expected_events(world, acks);
    let (received, drain_s) = drain(&devices, expected).await;
    let logs = devices.close().await;
    phase("final sync of every device's conversations and check");
    let verification = verify(world, &logs, acks).await;
    Concluded {
        logs,
        verification,
        expected_events: expected,
        received_events: received,
        drain_s,
    }
}

/// Events the devices should receive for `acks`: each distinct acked seq once per online
/// member device, the sender's own device included.
pub fn expected_events(world: &World, acks: &[Ack]) -> u64 {
    let mut seen = HashSet::new();
    acks.iter()
        .filter(|a| seen.insert((a.conv, a.seq)))
        .map(|a| world.convs[a.conv as usize].online.len() as u64)
        .sum()
}

/// Waits until the devices received `expected` events, or stop arriving; answers how many
/// arrived and how long it waited.
async fn drain(devices: &Devices, expected: u64) -> (u64, f64) {
    phase(&format!(
        "waiting for {expected} events to reach the devices"
    ));
    let started = Instant::now();
    let mut last = devices.counters.events.load(Ordering::Relaxed);
    let mut last_change = Instant::now();
    loop {
        let now = devices.counters.events.load(Ordering::Relaxed);
        if now >= expected {
            break (now, started.elapsed().as_secs_f64());
        }
        if now != last {
            (last, last_change) = (now, Instant::now());
        }
        if last_change.elapsed() > DRAIN_STALL_MAX || started.elapsed() > DRAIN_MAX {
            break (now, started.elapsed().as_secs_f64());
        }
        tokio::time::sleep(Duration::from_millis(DRAIN_POLL_MS)).await;
    }
}

/// Latency histograms of a run: ack (due to ack), push (due to the first arrival at a
/// device other than the sender's) and every delivery (due to each such arrival).
pub struct Latencies {
    pub ack: Histogram<u64>,
    pub push: Histogram<u64>,
    pub delivery: Histogram<u64>,
}

pub fn latencies(logs: &[DeviceLog], acks: &[Ack]) -> Result<Latencies> {
    let mut ack = micros_histogram()?;
    let mut by_seq: HashMap<(u32, i64), usize> = HashMap::with_capacity(acks.len());
    for (i, a) in acks.iter().enumerate() {
        record(&mut ack, a.acked.saturating_duration_since(a.due));
        by_seq.insert((a.conv, a.seq), i);
    }
    let mut first: Vec<Option<Instant>> = vec![None; acks.len()];
    let mut delivery = micros_histogram()?;
    for (d, log) in logs.iter().enumerate() {
        for r in &log.received {
            let Some(&i) = by_seq.get(&(r.conv, r.seq)) else {
                continue;
            };
            let a = &acks[i];
            if a.device as usize == d {
                continue;
            }
            record(&mut delivery, r.at.saturating_duration_since(a.due));
            first[i] = Some(first[i].map_or(r.at, |f| f.min(r.at)));
        }
    }
    let mut push = micros_histogram()?;
    for (a, f) in acks.iter().zip(first) {
        if let Some(f) = f {
            record(&mut push, f.saturating_duration_since(a.due));
        }
    }
    Ok(Latencies {
        ack,
        push,
        delivery,
    })
}
