//! Scenario `reconnect-storm`: every device drops its connection at once, in the middle of an
//! open-loop load, and comes back.
//!
//! Halfway through the run every session is told to reconnect at the same moment (the SDK
//! drops the socket, reconnects after its first backoff pause and catches every tracked
//! conversation up through events-after). Sends in flight on the dropped connections are
//! resent by the SDK with the same `client_msg_id`. The report adds how long the devices took
//! to be connected again and to have every message acked before the storm, and the final
//! check shows whether anything was lost, repeated or reordered on the way.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::Result;
use futures::{stream, StreamExt};
use rand::rngs::StdRng;
use serde_json::{json, Value};

use crate::devices::DeviceLog;
use crate::harness::{Finished, LoadModel, Loaded, Setup};
use crate::load::{Ack, OpenLoop};
use crate::report::{micros_histogram, percentiles_ms, record};
use crate::world::{log_uniform_sizes, WorldPlan};
use crate::{seed_peak, BenchArgs};

const RATE_DEFAULT: f64 = 250.0;
const USERS_DEFAULT: usize = 600;
const ONLINE_DEFAULT: usize = 400;
const GROUPS: usize = 20;
const GROUP_MEMBERS_MIN: usize = 10;
const GROUP_MEMBERS_MAX: usize = 100;
/// Reconnect commands queued at once.
const RECONNECTS_IN_FLIGHT: usize = 256;

/// Per device: time from the storm (or a gateway's death) to its new connection, and to
/// holding every message that was acked before it.
pub fn recovery<'a>(
    logs: impl IntoIterator<Item = &'a DeviceLog>,
    acks: &[Ack],
    storm: Instant,
) -> Result<Value> {
    let acked_at: HashMap<(u32, i64), Instant> =
        acks.iter().map(|a| ((a.conv, a.seq), a.acked)).collect();
    let mut reconnect_h = micros_histogram()?;
    let mut caught_up_h = micros_histogram()?;
    let (mut devices, mut reconnected, mut stopped) = (0u64, 0u64, 0u64);
    for log in logs {
        devices += 1;
        stopped += log.stopped.len() as u64;
        let Some(back) = log.reconnected.iter().copied().find(|&t| t >= storm) else {
            continue;
        };
        reconnected += 1;
        record(&mut reconnect_h, back - storm);
        let caught_up = log
            .received
            .iter()
            .filter(|r| r.at >= storm)
            .filter(|r| acked_at.get(&(r.conv, r.seq)).is_some_and(|&t| t < storm))
            .map(|r| r.at)
            .max()
            .unwrap_or(back)
            .max(back);
        record(&mut caught_up_h, caught_up - storm);
    }
    Ok(json!({
        "devices": devices,
        "reconnected": reconnected,
        "sessions_stopped": stopped,
        "reconnect_ms": percentiles_ms(&reconnect_h),
        "caught_up_ms": percentiles_ms(&caught_up_h),
        "caught_up_means": "the device holds every message acked before the storm",
    }))
}

pub struct ReconnectStorm;

impl LoadModel for ReconnectStorm {
    /// When the storm began.
    type Notes = Instant;

    fn world(&self, args: &BenchArgs, rng: &mut StdRng) -> Result<WorldPlan> {
        let users = args.users.unwrap_or(USERS_DEFAULT);
        let online = args.online.unwrap_or(ONLINE_DEFAULT.min(users)).min(users);
        Ok(WorldPlan {
            users,
            online,
            directs: (online / 2).min(online * (online - 1) / 2),
            group_sizes: log_uniform_sizes(
                rng,
                GROUPS,
                GROUP_MEMBERS_MIN.min(users),
                GROUP_MEMBERS_MAX.min(users),
            ),
            hot_group: None,
        })
    }

    async fn load(&self, args: &BenchArgs, setup: &Setup) -> Result<Loaded<Instant>> {
        let rate = args.rate.unwrap_or(RATE_DEFAULT);
        let duration = Duration::from_secs(args.duration);
        let handles = &setup.devices.handles;
        let storm = async {
            tokio::time::sleep(duration / 2).await;
            let at = Instant::now();
            stream::iter(handles.iter())
                .for_each_concurrent(RECONNECTS_IN_FLIGHT, |h| async move {
                    // A stopped session has nothing to reconnect; the check will show it.
                    let _ = h.reconnect().await;
                })
                .await;
            at
        };
        let label = format!(
            "reconnect-storm: {rate}/s for {} s, every device drops at {} s",
            args.duration,
            args.duration / 2
        );
        let cfg = OpenLoop::new(rate, duration, args.seed);
        let picker = seed_peak::picker(&setup.world);
        let (outcome, storm_at) = setup.open_loop(&label, picker, cfg, storm).await;
        Ok(Loaded::of(
            "reconnect-storm",
            "open_loop",
            Some(rate),
            outcome,
            storm_at,
        ))
    }

    fn report(&self, _: &BenchArgs, report: &mut Value, run: &Finished<'_, Instant>) -> Result<()> {
        let (outcome, storm_at) = (&run.loaded.outcome, run.loaded.notes);
        report["storm_at_s"] = json!(outcome.started.map(|s| (storm_at - s).as_secs_f64()));
        report["recovery"] = recovery(&run.concluded.logs, &outcome.acks, storm_at)?;
        Ok(())
    }
}
