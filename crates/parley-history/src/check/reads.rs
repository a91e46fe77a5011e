//! The rules on reads: a device's reads never go back (`read_backwards`) and return only
//! committed seqs (`phantom`); a user's read position never goes back
//! (`read_position_backwards`).

use std::collections::HashMap;

use crate::anomaly::AnomalyKind;
use crate::record::{Read, Record};
use crate::report::Report;

use super::final_log::FinalLogs;

/// The highest head and through_seq one device read of one conversation, with their lines.
#[derive(Default)]
struct Seen {
    head: Option<(i64, usize)>,
    through: Option<(i64, usize)>,
}

pub(crate) fn check(records: &[(usize, &Record)], logs: &FinalLogs, report: &mut Report) {
    let mut reads: HashMap<(&str, &str), Seen> = HashMap::new();
    let mut positions: HashMap<(&str, &str), (i64, usize)> = HashMap::new();
    for &(line, record) in records {
        match record {
            Record::Read(r) => {
                let seen = reads.entry((&r.device, &r.conv)).or_default();
                read(seen, r, line, logs, report);
            }
            Record::ReadPosition(p) => {
                let key = (p.user.as_str(), p.conv.as_str());
                match positions.get(&key) {
                    Some(&(high, high_line)) if p.read_seq < high => {
                        report.flag(
                            AnomalyKind::ReadPositionBackwards,
                            vec![high_line, line],
                            || {
                                format!(
                                    "{} in {}: read position {} observed by {} after {high}",
                                    p.user, p.conv, p.read_seq, p.device
                                )
                            },
                        );
                    }
                    _ => {
                        positions.insert(key, (p.read_seq, line));
                    }
                }
            }
            _ => {}
        }
    }
}

fn read(seen: &mut Seen, r: &Read, line: usize, logs: &FinalLogs, report: &mut Report) {
    let (device, conv) = (&r.device, &r.conv);
    for &seq in &r.seqs {
        if logs.get(conv, seq).is_none() {
            report.flag(AnomalyKind::Phantom, vec![line], || {
                format!("{device} in {conv}: a read returned seq {seq}, not in the final log")
            });
        }
    }
    // A head below an earlier one is always backwards. A through_seq below an earlier one is
    // backwards only if this read started at or beyond it: a read from an older cursor
    // (a re-read) covers less, rightly.
    let head_back = seen.head.filter(|&(high, _)| r.head < high);
    let through_back = seen
        .through
        .filter(|&(high, _)| r.after >= high && r.through_seq < high);
    if let Some((high, high_line)) = head_back {
        report.flag(AnomalyKind::ReadBackwards, vec![high_line, line], || {
            format!("{device} in {conv}: head {} read after head {high}", r.head)
        });
    } else if let Some((high, high_line)) = through_back {
        report.flag(AnomalyKind::ReadBackwards, vec![high_line, line], || {
            format!(
                "{device} in {conv}: through_seq {} read from {} after through_seq {high}",
                r.through_seq, r.after
            )
        });
    }
    if seen.head.is_none_or(|(high, _)| r.head > high) {
        seen.head = Some((r.head, line));
    }
    if seen.through.is_none_or(|(high, _)| r.through_seq > high) {
        seen.through = Some((r.through_seq, line));
    }
}
