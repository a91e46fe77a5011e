//! `summary.json`: the totals of a run, rewritten after every schedule.

use std::collections::BTreeMap;

use parley_history::{AnomalyKind, Report};
use serde::Serialize;
use serde_json::Value;

use crate::faults::FaultOutcome;
use crate::push_check::{PushAnomaly, PushReport};
use crate::ChaosArgs;

/// The totals of a run. `schedules_run`, `faults`, `operations`, `anomalies`,
/// `unknown_outcomes` and `recovered` are the contract of issue 12; the rest helps reading.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub seed: u64,
    pub schedules_run: usize,
    /// Faults injected, by kind.
    pub faults: BTreeMap<String, u64>,
    pub operations: u64,
    /// Anomalies found by the history checker, by kind (every kind, most 0).
    pub anomalies: BTreeMap<String, u64>,
    pub unknown_outcomes: u64,
    pub recovered: u64,
    /// Anomalies of offline notifications found by `push_check.rs`, by kind (both kinds
    /// listed): apart from `anomalies`, whose keys are the history checker's kinds.
    pub push_anomalies: BTreeMap<String, u64>,
    /// What the offline devices were owed and received.
    pub push: PushTotals,
    /// Faults not possible in this cluster (a PostgreSQL restart on a given database, a NATS
    /// restart on PostgreSQL's bus), by kind.
    pub faults_skipped: BTreeMap<String, u64>,
    /// Faults the lab could not inject or heal, by kind.
    pub faults_failed: BTreeMap<String, u64>,
    /// Indices of the schedules with at least one anomaly.
    pub schedules_with_anomalies: Vec<usize>,
    /// Schedules that could not run to their end, with the error.
    pub schedule_errors: Vec<Value>,
    /// Gateways or servers healing had to start again beyond the faults' own ends.
    pub repairs: u64,
    pub gateways: usize,
    pub bus: &'static str,
    pub schedule_s: u64,
    pub database: &'static str,
    /// Fault kinds of the issue this run could not inject: `partition` when the gateways ran
    /// on loopback (see `faults_skipped` for why).
    pub not_injected: Vec<&'static str>,
    pub duration_s: f64,
}

/// The notification totals of a run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PushTotals {
    /// Offline devices subscribed, over all schedules.
    pub devices: u64,
    /// (device, conversation) pairs owed a notification of their latest unread message.
    pub expected: u64,
    /// Of those, the pairs that received it.
    pub delivered: u64,
    /// Notifications the offline devices received.
    pub received: u64,
    /// Longest wait after a schedule quiesced for the notifications it owed.
    pub settle_ms_max: u64,
}

impl Summary {
    /// `netns`: whether the gateways run in network namespaces (else partitions cannot run).
    pub fn new(args: &ChaosArgs, gateways: usize, netns: bool) -> Summary {
        Summary {
            seed: args.seed,
            schedules_run: 0,
            faults: BTreeMap::new(),
            operations: 0,
            anomalies: AnomalyKind::ALL
                .iter()
                .map(|k| (k.as_str().to_owned(), 0))
                .collect(),
            unknown_outcomes: 0,
            recovered: 0,
            push_anomalies: PushAnomaly::zeroes(),
            push: PushTotals::default(),
            faults_skipped: BTreeMap::new(),
            faults_failed: BTreeMap::new(),
            schedules_with_anomalies: Vec::new(),
            schedule_errors: Vec::new(),
            repairs: 0,
            gateways,
            bus: args.bus.as_arg(),
            schedule_s: args.schedule_s,
            database: if args.database_url.is_some() {
                "given"
            } else {
                "own"
            },
            not_injected: if netns { Vec::new() } else { vec!["partition"] },
            duration_s: 0.0,
        }
    }

    /// Adds one schedule that ran to its end.
    pub fn add(&mut self, index: usize, faults: &[FaultOutcome], report: &Report, repairs: usize) {
        self.schedules_run += 1;
        for fault in faults {
            let by_status = match fault.status {
                "injected" => &mut self.faults,
                "skipped" => &mut self.faults_skipped,
                _ => &mut self.faults_failed,
            };
            *by_status.entry(fault.kind.as_str().to_owned()).or_insert(0) += 1;
        }
        self.operations += report.operations;
        for (kind, count) in &report.anomalies {
            *self.anomalies.entry(kind.clone()).or_insert(0) += count;
        }
        if report.total() > 0 {
            self.flag_schedule(index);
        }
        self.unknown_outcomes += report.unknown_outcomes;
        self.recovered += report.recovered;
        self.repairs += repairs as u64;
    }

    /// Adds the notification report of schedule `index` (after [`add`](Self::add)).
    pub fn add_push(&mut self, index: usize, push: &PushReport) {
        self.push.devices += push.devices;
        self.push.expected += push.expected;
        self.push.delivered += push.delivered;
        self.push.received += push.received;
        self.push.settle_ms_max = self.push.settle_ms_max.max(push.settle_ms);
        for (kind, count) in &push.anomalies {
            *self.push_anomalies.entry(kind.clone()).or_insert(0) += count;
        }
        if push.total() > 0 {
            self.flag_schedule(index);
        }
    }

    /// Duplicated notifications of schedule `index` that arrived after it was judged.
    pub fn add_late_push_duplicates(&mut self, index: usize, n: u64) {
        *self
            .push_anomalies
            .entry(PushAnomaly::Duplicated.as_str().to_owned())
            .or_insert(0) += n;
        self.push.received += n;
        self.flag_schedule(index);
    }

    fn flag_schedule(&mut self, index: usize) {
        if let Err(at) = self.schedules_with_anomalies.binary_search(&index) {
            self.schedules_with_anomalies.insert(at, index);
        }
    }
}
