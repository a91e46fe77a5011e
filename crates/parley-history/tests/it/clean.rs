use parley_history::{check, AnomalyKind};

use crate::build::clean;

#[test]
fn a_clean_history_has_no_anomaly() {
    let report = check(&clean().records);
    assert_eq!(report.total(), 0, "{report:#?}");
    assert!(report.examples.is_empty(), "{report:#?}");
    assert_eq!(
        (report.unknown_outcomes, report.recovered),
        (1, 1),
        "m3's unknown outcome is found in the log"
    );
    // Everything but the 2 member, 5 final and 1 final_head records.
    assert_eq!(report.operations, clean().records.len() as u64 - 8);
}

#[test]
fn every_kind_is_in_the_report_with_its_stable_name() {
    let report = check(&clean().records);
    let names: Vec<&str> = report.anomalies.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "duplicated",
            "failed_but_committed",
            "lost_write",
            "phantom",
            "read_backwards",
            "read_position_backwards",
            "reordered",
            "seq_gap",
            "skipped_delivery",
            "undelivered",
        ]
    );
    assert_eq!(AnomalyKind::ALL.len(), names.len());
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["anomalies"]["lost_write"], 0);
}

#[test]
fn an_invoke_never_completed_is_an_unknown_outcome() {
    let mut h = clean();
    h.invoke("a1", "c1", "m9");
    let report = check(&h.records);
    assert_eq!(report.total(), 0, "{report:#?}");
    assert_eq!((report.unknown_outcomes, report.recovered), (2, 1));
    assert_eq!(report.not_recovered(), 1);
}

#[test]
fn a_failed_attempt_of_a_send_with_an_unknown_outcome_is_not_failed_but_committed() {
    let mut h = clean();
    h.remove(|r| matches!(r, parley_history::Record::Fail(_)));
    h.fail("a1", "c1", "m3", "RATE_LIMITED");
    let report = check(&h.records);
    assert_eq!(
        report.total(),
        0,
        "m3 had an unknown outcome too: {report:#?}"
    );
}

#[test]
fn a_reread_from_an_older_cursor_is_not_read_backwards() {
    let mut h = clean();
    h.read("b1", "c1", 0, &[2, 3], 3, 5);
    let report = check(&h.records);
    assert_eq!(report.total(), 0, "{report:#?}");
}
