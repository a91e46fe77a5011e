//! The rules on sends: an ack is in the final log where it said (`lost_write`), one send is
//! acked at one seq (`duplicated`), a definite failure is not in the log
//! (`failed_but_committed`); and the unknown outcomes, each recovered or not.

use std::collections::{BTreeMap, HashMap, VecDeque};

use crate::anomaly::AnomalyKind;
use crate::record::Record;
use crate::report::Report;

use super::final_log::FinalLogs;

/// What became of one send (one client_msg_id in one conversation), over all its attempts.
#[derive(Default)]
struct Send {
    /// Acked seqs, each with the lines of its acks.
    acked: BTreeMap<i64, Vec<usize>>,
    /// Lines of definite failures.
    failed: Vec<usize>,
    /// Some attempt may have committed without an ack: an `info`, or an invoke never completed.
    unknown: bool,
}

pub(crate) fn check(records: &[(usize, &Record)], logs: &FinalLogs, report: &mut Report) {
    let mut sends: BTreeMap<(&str, &str), Send> = BTreeMap::new();
    // Invokes waiting for their completion, oldest first, per process and send.
    let mut open: HashMap<(&str, &str, &str), VecDeque<usize>> = HashMap::new();
    for &(line, record) in records {
        match record {
            Record::Invoke(r) => {
                open.entry((&r.process, &r.conv, &r.client_msg_id))
                    .or_default()
                    .push_back(line);
                sends.entry((&r.conv, &r.client_msg_id)).or_default();
            }
            Record::Ok(r) => {
                complete(&mut open, (&r.process, &r.conv, &r.client_msg_id));
                let send = sends.entry((&r.conv, &r.client_msg_id)).or_default();
                send.acked.entry(r.seq).or_default().push(line);
            }
            Record::Fail(r) => {
                complete(&mut open, (&r.process, &r.conv, &r.client_msg_id));
                let send = sends.entry((&r.conv, &r.client_msg_id)).or_default();
                send.failed.push(line);
            }
            Record::Info(r) => {
                complete(&mut open, (&r.process, &r.conv, &r.client_msg_id));
                sends
                    .entry((&r.conv, &r.client_msg_id))
                    .or_default()
                    .unknown = true;
                count_unknown(logs, &r.conv, &r.client_msg_id, report);
            }
            _ => {}
        }
    }
    let mut never_completed: Vec<(usize, &str, &str)> = open
        .into_iter()
        .flat_map(|((_, conv, id), lines)| lines.into_iter().map(move |l| (l, conv, id)))
        .collect();
    never_completed.sort_unstable();
    for (_, conv, id) in never_completed {
        if let Some(send) = sends.get_mut(&(conv, id)) {
            send.unknown = true;
        }
        count_unknown(logs, conv, id, report);
    }
    for ((conv, id), send) in &sends {
        check_send(conv, id, send, logs, report);
    }
}

/// Pairs a completion with the oldest invoke of the same process and send still waiting.
fn complete<'a>(
    open: &mut HashMap<(&'a str, &'a str, &'a str), VecDeque<usize>>,
    key: (&'a str, &'a str, &'a str),
) {
    if let Some(waiting) = open.get_mut(&key) {
        waiting.pop_front();
    }
}

/// Counts one unknown outcome, recovered if the send is in the final log.
fn count_unknown(logs: &FinalLogs, conv: &str, id: &str, report: &mut Report) {
    report.unknown_outcomes += 1;
    if logs.seq_of(conv, id).is_some() {
        report.recovered += 1;
    }
}

fn check_send(conv: &str, id: &str, send: &Send, logs: &FinalLogs, report: &mut Report) {
    if send.acked.len() > 1 {
        let lines: Vec<usize> = send.acked.values().map(|l| l[0]).collect();
        let seqs: Vec<i64> = send.acked.keys().copied().collect();
        for _ in 1..send.acked.len() {
            report.flag(AnomalyKind::Duplicated, lines.clone(), || {
                format!("{conv}: client_msg_id {id} acked at seqs {seqs:?}")
            });
        }
    }
    for (&seq, lines) in &send.acked {
        let entry = logs.get(conv, seq);
        if entry.and_then(|e| e.client_msg_id.as_deref()) == Some(id) {
            continue;
        }
        let mut shown = vec![lines[0]];
        shown.extend(entry.map(|e| e.line));
        report.flag(AnomalyKind::LostWrite, shown, || match entry {
            None => format!("{conv}: {id} acked at seq {seq}, which the final log does not hold"),
            Some(e) => format!(
                "{conv}: {id} acked at seq {seq}, where the final log holds {:?}",
                e.client_msg_id
            ),
        });
    }
    if send.failed.is_empty() || !send.acked.is_empty() || send.unknown {
        return;
    }
    if let Some((seq, line)) = logs.seq_of(conv, id) {
        let mut shown = send.failed.clone();
        shown.push(line);
        report.flag(AnomalyKind::FailedButCommitted, shown, || {
            format!("{conv}: {id} failed definitely yet is at seq {seq} of the final log")
        });
    }
}
