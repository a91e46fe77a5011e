//! The rules on what devices were delivered: each seq once (`duplicated`), in order
//! (`reordered`), only committed events (`phantom`), and every event a device was expected to
//! get: jumped over (`skipped_delivery`) or never reached (`undelivered`).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::anomaly::AnomalyKind;
use crate::record::{Delivery, Record};
use crate::report::Report;

use super::final_log::FinalLogs;

/// One device's deliveries of one conversation.
#[derive(Default)]
struct Stream {
    /// Line of the first delivery of each seq.
    seen: HashMap<i64, usize>,
    /// The highest seq delivered so far and its line.
    top: Option<(i64, usize)>,
}

/// A range of seqs a device must receive: `from_seq`, `to_seq` (`None`: to the end) and the
/// line of the `member` record.
type Expected = (i64, Option<i64>, usize);

pub(crate) fn check(records: &[(usize, &Record)], logs: &FinalLogs, report: &mut Report) {
    let mut streams: BTreeMap<(&str, &str), Stream> = BTreeMap::new();
    // Seqs each device is expected to receive, per conversation, with the line that says so.
    let mut expected: BTreeMap<(&str, &str), Vec<Expected>> = BTreeMap::new();
    for &(line, record) in records {
        match record {
            Record::Delivery(d) => {
                let stream = streams.entry((&d.device, &d.conv)).or_default();
                deliver(stream, d, line, logs, report);
            }
            Record::Member(m) => {
                expected
                    .entry((&m.device, &m.conv))
                    .or_default()
                    .push((m.from_seq, m.to_seq, line));
            }
            _ => {}
        }
    }
    let none = Stream::default();
    for ((device, conv), ranges) in &expected {
        let Some(log) = logs.log(conv) else {
            continue;
        };
        let stream = streams.get(&(*device, *conv)).unwrap_or(&none);
        let mut due: BTreeMap<i64, usize> = BTreeMap::new();
        for &(from, to, member_line) in ranges {
            let to = to.unwrap_or(i64::MAX);
            if from > to {
                continue;
            }
            for (&seq, _) in log.events.range(from..=to) {
                due.entry(seq).or_insert(member_line);
            }
        }
        let missing: BTreeSet<i64> = due
            .keys()
            .copied()
            .filter(|s| !stream.seen.contains_key(s))
            .collect();
        for seq in missing {
            let member_line = due[&seq];
            let event_line = log.events[&seq].line;
            match stream.top {
                Some((top, top_line)) if top > seq => {
                    report.flag(
                        AnomalyKind::SkippedDelivery,
                        vec![member_line, event_line, top_line],
                        || format!("{device} in {conv}: seq {seq} skipped, seq {top} delivered"),
                    );
                }
                _ => {
                    report.flag(
                        AnomalyKind::Undelivered,
                        vec![member_line, event_line],
                        || format!("{device} in {conv}: seq {seq} never delivered"),
                    );
                }
            }
        }
    }
}

fn deliver(stream: &mut Stream, d: &Delivery, line: usize, logs: &FinalLogs, report: &mut Report) {
    let (device, conv, seq) = (&d.device, &d.conv, d.seq);
    if let Some(&first) = stream.seen.get(&seq) {
        report.flag(AnomalyKind::Duplicated, vec![first, line], || {
            format!("{device} in {conv}: seq {seq} delivered twice")
        });
        return;
    }
    stream.seen.insert(seq, line);
    match logs.get(conv, seq) {
        None => report.flag(AnomalyKind::Phantom, vec![line], || {
            format!("{device} in {conv}: seq {seq} delivered, not in the final log")
        }),
        Some(e) => {
            let other_message = differs(&d.client_msg_id, &e.client_msg_id)
                || differs(&d.message_id, &e.message_id);
            if other_message {
                report.flag(AnomalyKind::Phantom, vec![line, e.line], || {
                    format!("{device} in {conv}: seq {seq} delivered as another message than the final log's")
                });
            }
        }
    }
    match stream.top {
        Some((top, top_line)) if top > seq => {
            report.flag(AnomalyKind::Reordered, vec![top_line, line], || {
                format!("{device} in {conv}: seq {seq} delivered after seq {top}")
            });
        }
        _ => stream.top = Some((seq, line)),
    }
}

/// Whether a delivery's id contradicts the final log's: both known and not equal.
fn differs(delivered: &Option<String>, logged: &Option<String>) -> bool {
    matches!((delivered, logged), (Some(a), Some(b)) if a != b)
        || (delivered.is_some() && logged.is_none())
}
