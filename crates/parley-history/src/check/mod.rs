//! The checker: one pass over a history's records per rule, all against the final log.
//!
//! Records are numbered by line (1-based) so every example names the records that show it.
//! The checker never fails: a malformed history (a completion without its invoke, a read of a
//! conversation with no final log) is judged by the same rules, which then report what does
//! not add up.

mod deliveries;
mod final_log;
mod reads;
mod sends;

use crate::record::Record;
use crate::report::Report;

use final_log::FinalLogs;

/// Checks a history and reports its anomalies.
pub fn check(history: &[Record]) -> Report {
    let mut report = Report::new();
    let numbered: Vec<(usize, &Record)> = history
        .iter()
        .enumerate()
        .map(|(i, r)| (i + 1, r))
        .collect();
    report.operations = history.iter().filter(|r| r.is_operation()).count() as u64;
    let logs = FinalLogs::build(&numbered, &mut report);
    logs.check_contiguity(&mut report);
    sends::check(&numbered, &logs, &mut report);
    deliveries::check(&numbered, &logs, &mut report);
    reads::check(&numbered, &logs, &mut report);
    report
}
