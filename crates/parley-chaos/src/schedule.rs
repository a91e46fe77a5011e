//! The seeded fault schedule of one run: which faults, when, against what, for how long.
//!
//! A schedule depends only on the run's seed, its index, the gateway count, the device and
//! conversation counts and the schedule's length, never on the clock or the machine, so the
//! same `--seed` writes the same `schedule.json`. Faults run one after the other: the load
//! window is cut into one slot per fault, and each fault starts at a random point of the
//! first half of its slot and lasts at most the rest of it.
//!
//! `push_service_down`, the kind added last, is drawn from a second stream of the same seed:
//! each fault drawn from the other kinds as before is turned into one with the chance of one
//! kind in all, so every kind stays equally likely and a seed's schedules stay what they were
//! before it existed, apart from the faults turned.

use std::collections::BTreeMap;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// Fewest faults in one schedule: enough that every schedule mixes kinds.
pub const FAULTS_PER_SCHEDULE_MIN: usize = 3;
/// Most faults in one schedule: each needs a slot of its own within the load.
pub const FAULTS_PER_SCHEDULE_MAX: usize = 5;
/// Share of the schedule (in percent) before the first slot: the load runs clean first.
const WINDOW_START_PERCENT: u64 = 10;
/// Share of the schedule (in percent) at which the last slot ends: the load runs clean last.
const WINDOW_END_PERCENT: u64 = 85;
/// Shortest fault: a pause or an outage shorter than this would hardly be noticed.
const FAULT_DURATION_MS_MIN: u64 = 200;
/// Longest fault: sends time out after 3 s, so longer outages add only unknown outcomes.
const FAULT_DURATION_MS_MAX: u64 = 4_000;
/// Longest wait before a client aborts its next send on its own: within one round trip.
const ABORT_AFTER_MS_MAX: u64 = 40;
/// Mixes the schedule index into the run's seed (the 64-bit golden ratio), so schedules of
/// one run differ and each can be replayed alone.
const SEED_MIX: u64 = 0x9E37_79B9_7F4A_7C15;
/// Mixes the schedule's seed into the second stream, which turns faults into
/// `push_service_down`: a constant of MurmurHash3's finalizer, picked among a few such
/// constants because with it CI's short run (seed 1, 5 schedules) draws every kind, which
/// `the_short_ci_run_draws_every_kind` holds.
const PUSH_SEED_MIX: u64 = 0xC4CE_B9FE_1A85_EC53;

/// The kinds of fault, by their names in `schedule.json` and `summary.json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// SIGKILL of a gateway, restarted on the same port after `duration_ms`.
    GatewayKill,
    /// SIGSTOP of a gateway, SIGCONT after `duration_ms`.
    GatewayPause,
    /// `pg_terminate_backend` of every other connection to the database, again and again for
    /// `duration_ms` (at most `TERMINATE_STORM_MS_MAX` of `faults.rs`).
    PgTerminateBackend,
    /// `pg_ctl restart -m fast` of the lab's own PostgreSQL.
    PgRestart,
    /// SIGKILL of the lab's own NATS server, started again on its port after `duration_ms`.
    NatsRestart,
    /// A transaction holding the hot conversation's row lock for `duration_ms`, rolled back.
    StuckRowLock,
    /// A device drops its realtime session (and opens a new one) and aborts its next send
    /// after `abort_after_ms`.
    ClientDisconnect,
    /// A gateway cut from PostgreSQL or NATS (`partition_from`) for `duration_ms`: nftables
    /// drop rules in the gateway's network namespace (`netns.rs`).
    Partition,
    /// The run's push service (`push.rs`) answers 503 to every notification for
    /// `duration_ms`, then takes them again: the gateways must retry what it refused.
    PushServiceDown,
}

/// What a partition cuts a gateway from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PartitionFrom {
    Postgres,
    Nats,
}

impl PartitionFrom {
    /// The name in JSON files.
    pub fn as_str(self) -> &'static str {
        match self {
            PartitionFrom::Postgres => "postgres",
            PartitionFrom::Nats => "nats",
        }
    }
}

impl FaultKind {
    /// Every kind a schedule draws from.
    pub const ALL: [FaultKind; 9] = [
        FaultKind::GatewayKill,
        FaultKind::GatewayPause,
        FaultKind::PgTerminateBackend,
        FaultKind::PgRestart,
        FaultKind::NatsRestart,
        FaultKind::StuckRowLock,
        FaultKind::ClientDisconnect,
        FaultKind::Partition,
        FaultKind::PushServiceDown,
    ];

    /// The name in JSON files and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            FaultKind::GatewayKill => "gateway_kill",
            FaultKind::GatewayPause => "gateway_pause",
            FaultKind::PgTerminateBackend => "pg_terminate_backend",
            FaultKind::PgRestart => "pg_restart",
            FaultKind::NatsRestart => "nats_restart",
            FaultKind::StuckRowLock => "stuck_row_lock",
            FaultKind::ClientDisconnect => "client_disconnect",
            FaultKind::Partition => "partition",
            FaultKind::PushServiceDown => "push_service_down",
        }
    }

    /// The kind named `name`.
    pub fn parse(name: &str) -> Option<FaultKind> {
        FaultKind::ALL.into_iter().find(|k| k.as_str() == name)
    }
}

/// One fault of a schedule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fault {
    /// Milliseconds after the load started.
    pub at_ms: u64,
    pub kind: FaultKind,
    /// How long the fault lasts before it is healed (0 for an instant one).
    pub duration_ms: u64,
    /// The gateway (index) of a gateway fault.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<usize>,
    /// The device (index) of a client fault.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<usize>,
    /// When a client fault aborts the device's next send.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abort_after_ms: Option<u64>,
    /// What a partition cuts the gateway from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition_from: Option<PartitionFrom>,
}

/// The faults of one schedule, with what they were drawn from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Schedule {
    pub index: usize,
    /// The seed of this schedule, derived from the run's seed and the index.
    pub seed: u64,
    pub schedule_ms: u64,
    pub gateways: usize,
    pub devices: usize,
    pub faults: Vec<Fault>,
}

/// What a schedule is drawn from.
#[derive(Debug, Clone)]
pub struct Plan {
    pub run_seed: u64,
    pub schedule_ms: u64,
    pub gateways: usize,
    pub devices: usize,
    /// The kinds to draw from (all by default).
    pub kinds: Vec<FaultKind>,
    /// Whether the bus is a NATS server (a partition may then cut a gateway from it).
    pub nats: bool,
}

/// The seed of schedule `index` of a run seeded with `run_seed`.
pub fn schedule_seed(run_seed: u64, index: usize) -> u64 {
    run_seed ^ (index as u64 + 1).wrapping_mul(SEED_MIX)
}

/// Draws schedule `index` of the run.
pub fn generate(plan: &Plan, index: usize) -> Schedule {
    let seed = schedule_seed(plan.run_seed, index);
    let mut rng = StdRng::seed_from_u64(seed);
    let count = rng.gen_range(FAULTS_PER_SCHEDULE_MIN..=FAULTS_PER_SCHEDULE_MAX);
    let start = plan.schedule_ms * WINDOW_START_PERCENT / 100;
    let end = plan.schedule_ms * WINDOW_END_PERCENT / 100;
    let slot = (end - start) / count as u64;
    let kinds = if plan.kinds.is_empty() {
        FaultKind::ALL.to_vec()
    } else {
        plan.kinds.clone()
    };
    // The first stream draws from the other kinds (from `push_service_down` alone when it is
    // the only one); the second turns a fault into `push_service_down` with its share.
    let pushes = kinds
        .iter()
        .filter(|k| **k == FaultKind::PushServiceDown)
        .count();
    let others: Vec<FaultKind> = kinds
        .iter()
        .copied()
        .filter(|k| *k != FaultKind::PushServiceDown)
        .collect();
    let drawn_from = if others.is_empty() { &kinds } else { &others };
    let mut turn = StdRng::seed_from_u64(seed ^ PUSH_SEED_MIX);
    let faults = (0..count)
        .map(|i| {
            let kind = drawn_from[rng.gen_range(0..drawn_from.len())];
            let slot_start = start + slot * i as u64;
            let at_ms = slot_start + rng.gen_range(0..=slot / 2);
            let room = (slot_start + slot).saturating_sub(at_ms);
            let longest = room.clamp(FAULT_DURATION_MS_MIN, FAULT_DURATION_MS_MAX);
            let duration_ms = match kind {
                FaultKind::PgRestart => 0,
                _ => rng.gen_range(FAULT_DURATION_MS_MIN..=longest),
            };
            let gateway = matches!(
                kind,
                FaultKind::GatewayKill | FaultKind::GatewayPause | FaultKind::Partition
            )
            .then(|| rng.gen_range(0..plan.gateways.max(1)));
            let partition_from = (kind == FaultKind::Partition).then(|| {
                if plan.nats && rng.gen_bool(0.5) {
                    PartitionFrom::Nats
                } else {
                    PartitionFrom::Postgres
                }
            });
            let client = kind == FaultKind::ClientDisconnect;
            let device = client.then(|| rng.gen_range(0..plan.devices.max(1)));
            let abort_after_ms = client.then(|| rng.gen_range(0..=ABORT_AFTER_MS_MAX));
            if !others.is_empty() && turn.gen_range(0..kinds.len()) < pushes {
                return Fault {
                    at_ms,
                    kind: FaultKind::PushServiceDown,
                    duration_ms: turn.gen_range(FAULT_DURATION_MS_MIN..=longest),
                    gateway: None,
                    device: None,
                    abort_after_ms: None,
                    partition_from: None,
                };
            }
            Fault {
                at_ms,
                kind,
                duration_ms,
                gateway,
                device,
                abort_after_ms,
                partition_from,
            }
        })
        .collect();
    Schedule {
        index,
        seed,
        schedule_ms: plan.schedule_ms,
        gateways: plan.gateways,
        devices: plan.devices,
        faults,
    }
}

/// Faults counted by kind name.
pub fn count_by_kind<'a>(kinds: impl IntoIterator<Item = &'a FaultKind>) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for kind in kinds {
        *counts.entry(kind.as_str().to_owned()).or_insert(0) += 1;
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(seed: u64) -> Plan {
        Plan {
            run_seed: seed,
            schedule_ms: 20_000,
            gateways: 3,
            devices: 6,
            kinds: Vec::new(),
            nats: true,
        }
    }

    #[test]
    fn the_same_seed_draws_the_same_schedule_and_another_seed_another() {
        let a = serde_json::to_string(&generate(&plan(1), 4)).unwrap();
        let b = serde_json::to_string(&generate(&plan(1), 4)).unwrap();
        assert_eq!(a, b);
        let other_seed = serde_json::to_string(&generate(&plan(2), 4)).unwrap();
        let other_index = serde_json::to_string(&generate(&plan(1), 5)).unwrap();
        assert_ne!(a, other_seed);
        assert_ne!(a, other_index);
    }

    #[test]
    fn faults_fit_their_slots_in_order_and_name_valid_targets() {
        for index in 0..200 {
            let s = generate(&plan(7), index);
            assert!((FAULTS_PER_SCHEDULE_MIN..=FAULTS_PER_SCHEDULE_MAX).contains(&s.faults.len()));
            let mut end = 0;
            for f in &s.faults {
                assert!(f.at_ms >= end, "{s:?}");
                end = f.at_ms + f.duration_ms;
                assert!(end <= s.schedule_ms, "{s:?}");
                assert!(f.gateway.is_none_or(|g| g < 3));
                assert!(f.device.is_none_or(|d| d < 6));
                assert_eq!(f.partition_from.is_some(), f.kind == FaultKind::Partition);
            }
        }
    }

    #[test]
    fn a_hundred_schedules_mix_every_kind() {
        let kinds: Vec<FaultKind> = (0..100)
            .flat_map(|i| generate(&plan(1), i).faults)
            .map(|f| f.kind)
            .collect();
        let counts = count_by_kind(&kinds);
        for kind in FaultKind::ALL {
            assert!(
                counts.get(kind.as_str()).copied().unwrap_or(0) >= 20,
                "{counts:?}"
            );
        }
    }

    /// CI's short run (`scripts/chaos.sh`: seed 1, 5 schedules of 20 s, 3 gateways, every
    /// kind) takes the push service down, and draws every other kind too.
    #[test]
    fn the_short_ci_run_draws_every_kind() {
        let plan = Plan {
            devices: crate::load::DEVICES_LEN,
            ..plan(1)
        };
        let kinds: Vec<FaultKind> = (0..5)
            .flat_map(|i| generate(&plan, i).faults)
            .map(|f| f.kind)
            .collect();
        let counts = count_by_kind(&kinds);
        assert_eq!(counts.len(), FaultKind::ALL.len(), "{counts:?}");
        assert!(counts["push_service_down"] > 0);
    }

    #[test]
    fn push_service_down_turns_faults_and_leaves_the_other_draws_as_they_were() {
        let before = Plan {
            kinds: FaultKind::ALL
                .into_iter()
                .filter(|k| *k != FaultKind::PushServiceDown)
                .collect(),
            ..plan(1)
        };
        let mut turned = 0;
        for index in 0..100 {
            let (old, new) = (generate(&before, index), generate(&plan(1), index));
            assert_eq!(old.faults.len(), new.faults.len());
            for (o, n) in old.faults.iter().zip(&new.faults) {
                if n.kind == FaultKind::PushServiceDown {
                    turned += 1;
                    assert_eq!(n.at_ms, o.at_ms);
                    assert!(n.gateway.is_none() && n.device.is_none(), "{n:?}");
                } else {
                    assert_eq!(n, o);
                }
            }
        }
        assert!(turned > 20, "{turned}");
        let only = Plan {
            kinds: vec![FaultKind::PushServiceDown],
            ..plan(1)
        };
        assert!(generate(&only, 0)
            .faults
            .iter()
            .all(|f| f.kind == FaultKind::PushServiceDown && f.duration_ms > 0));
    }

    #[test]
    fn partitions_cut_from_both_servers_and_only_from_postgres_without_nats() {
        let from = |nats: bool| -> Vec<PartitionFrom> {
            let plan = Plan {
                kinds: vec![FaultKind::Partition],
                nats,
                ..plan(1)
            };
            (0..20)
                .flat_map(|i| generate(&plan, i).faults)
                .map(|f| f.partition_from.expect("a partition names its server"))
                .collect()
        };
        let with_nats = from(true);
        assert!(with_nats.contains(&PartitionFrom::Nats), "{with_nats:?}");
        assert!(
            with_nats.contains(&PartitionFrom::Postgres),
            "{with_nats:?}"
        );
        assert!(from(false).iter().all(|f| *f == PartitionFrom::Postgres));
    }

    #[test]
    fn kind_names_round_trip() {
        for kind in FaultKind::ALL {
            assert_eq!(FaultKind::parse(kind.as_str()), Some(kind));
            let json = serde_json::to_string(&kind).unwrap();
            assert_eq!(json, format!("\"{}\"", kind.as_str()));
        }
        assert_eq!(FaultKind::parse("partition"), Some(FaultKind::Partition));
        assert_eq!(FaultKind::parse("tc_netem"), None);
    }
}
