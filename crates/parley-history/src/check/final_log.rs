//! The final log of every conversation, the authority the other rules check against, and the
//! rules on the log itself: no gap between `min_seq` and the head, one seq per client_msg_id.

use std::collections::{BTreeMap, HashMap};

use crate::anomaly::AnomalyKind;
use crate::record::Record;
use crate::report::Report;

/// One event of a final log.
pub(crate) struct Entry {
    pub client_msg_id: Option<String>,
    pub message_id: Option<String>,
    pub line: usize,
}

/// The final log of one conversation.
#[derive(Default)]
pub(crate) struct FinalLog {
    pub events: BTreeMap<i64, Entry>,
    /// `(min_seq, head, line)` of its `final_head` record, the last one if several.
    bounds: Option<(i64, i64, usize)>,
    /// Seqs of each client_msg_id, with the line of each.
    by_client_msg_id: HashMap<String, BTreeMap<i64, usize>>,
}

/// The final logs of all conversations; a conversation without records has an empty log.
pub(crate) struct FinalLogs {
    convs: HashMap<String, FinalLog>,
}

impl FinalLogs {
    /// Collects the `final` and `final_head` records; two different events at one seq are
    /// flagged as duplicated (the first one stays the log's).
    pub fn build(records: &[(usize, &Record)], report: &mut Report) -> FinalLogs {
        let mut convs: HashMap<String, FinalLog> = HashMap::new();
        for &(line, record) in records {
            match record {
                Record::Final(e) => {
                    let log = convs.entry(e.conv.clone()).or_default();
                    if let Some(first) = log.events.get(&e.seq) {
                        let same = first.client_msg_id == e.client_msg_id
                            && first.message_id == e.message_id;
                        if !same {
                            report.flag(AnomalyKind::Duplicated, vec![first.line, line], || {
                                format!("{}: two different events at seq {}", e.conv, e.seq)
                            });
                        }
                        continue;
                    }
                    log.events.insert(
                        e.seq,
                        Entry {
                            client_msg_id: e.client_msg_id.clone(),
                            message_id: e.message_id.clone(),
                            line,
                        },
                    );
                    if let Some(id) = &e.client_msg_id {
                        log.by_client_msg_id
                            .entry(id.clone())
                            .or_default()
                            .insert(e.seq, line);
                    }
                }
                Record::FinalHead(h) => {
                    convs.entry(h.conv.clone()).or_default().bounds =
                        Some((h.min_seq, h.head, line));
                }
                _ => {}
            }
        }
        FinalLogs { convs }
    }

    /// The event at `seq` of `conv`'s final log.
    pub fn get(&self, conv: &str, seq: i64) -> Option<&Entry> {
        self.convs.get(conv)?.events.get(&seq)
    }

    /// The final log of `conv`, if it has any record.
    pub fn log(&self, conv: &str) -> Option<&FinalLog> {
        self.convs.get(conv)
    }

    /// The lowest seq of `client_msg_id` in `conv`'s final log, and its line.
    pub fn seq_of(&self, conv: &str, client_msg_id: &str) -> Option<(i64, usize)> {
        let seqs = self.convs.get(conv)?.by_client_msg_id.get(client_msg_id)?;
        seqs.iter().next().map(|(&s, &l)| (s, l))
    }

    /// Flags every seq missing between each log's bounds (`seq_gap`, one example per run of
    /// missing seqs) and every client_msg_id found at more than one seq (`duplicated`).
    pub fn check_contiguity(&self, report: &mut Report) {
        let mut convs: Vec<(&String, &FinalLog)> = self.convs.iter().collect();
        convs.sort_unstable_by_key(|(c, _)| *c);
        for (conv, log) in convs {
            check_gaps(conv, log, report);
            let mut ids: Vec<_> = log.by_client_msg_id.iter().collect();
            ids.sort_unstable_by_key(|(id, _)| *id);
            for (id, seqs) in ids {
                if seqs.len() < 2 {
                    continue;
                }
                let lines: Vec<usize> = seqs.values().copied().collect();
                let list: Vec<i64> = seqs.keys().copied().collect();
                for _ in 1..seqs.len() {
                    report.flag(AnomalyKind::Duplicated, lines.clone(), || {
                        format!("{conv}: client_msg_id {id} at seqs {list:?} of the final log")
                    });
                }
            }
        }
    }
}

/// Flags the seqs missing from `min_seq` (else the first seq) to the head (else the last seq),
/// counted without walking them, so a wild head cannot make the check loop.
fn check_gaps(conv: &str, log: &FinalLog, report: &mut Report) {
    let first = log.events.keys().next().copied();
    let last = log.events.keys().next_back().copied();
    let (lo, hi, bounds_line) = match (log.bounds, first, last) {
        (Some((min_seq, head, line)), _, last) => {
            (min_seq, head.max(last.unwrap_or(head)), Some(line))
        }
        (None, Some(first), Some(last)) => (first, last, None),
        (None, _, _) => return,
    };
    let mut expected = lo;
    let mut prev_line = bounds_line;
    for (&seq, entry) in log.events.range(lo..=hi) {
        if seq > expected {
            flag_gap(conv, expected, seq - 1, prev_line, Some(entry.line), report);
        }
        expected = seq.saturating_add(1);
        prev_line = Some(entry.line);
    }
    if expected <= hi {
        flag_gap(conv, expected, hi, prev_line, bounds_line, report);
    }
}

fn flag_gap(
    conv: &str,
    from: i64,
    to: i64,
    before: Option<usize>,
    after: Option<usize>,
    report: &mut Report,
) {
    let lines: Vec<usize> = before.into_iter().chain(after).collect();
    let missing = u64::try_from(i128::from(to) - i128::from(from) + 1).unwrap_or(u64::MAX);
    report.flag(AnomalyKind::SeqGap, lines, || {
        format!("{conv}: seqs {from}..={to} missing from the final log")
    });
    // The first missing seq was counted by `flag`; the rest of the run adds up here.
    report.add(AnomalyKind::SeqGap, missing - 1);
}
