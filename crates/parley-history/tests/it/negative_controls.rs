//! One hand-made history per anomaly kind: the clean history with one harm done, flagged with
//! exactly that kind.

use parley_history::{check, AnomalyKind, Record, Report, EXAMPLES_PER_KIND_MAX};

use crate::build::{clean, is_delivery, History};

/// Checks `h` and asserts it shows `count` anomalies, all of `kind`, with examples.
fn flagged(h: &History, kind: AnomalyKind, count: u64) -> Report {
    let report = check(&h.records);
    assert_eq!(report.kinds(), vec![kind], "{report:#?}");
    assert_eq!(report.count(kind), count, "{report:#?}");
    let examples = &report.examples[kind.as_str()];
    assert!(!examples.is_empty() && examples.iter().all(|e| !e.lines.is_empty()));
    report
}

#[test]
fn an_acked_send_missing_from_the_log_is_a_lost_write() {
    let mut h = clean();
    h.invoke("a1", "c1", "m5").ok("a1", "c1", "m5", 6);
    let report = flagged(&h, AnomalyKind::LostWrite, 1);
    let line = h.records.len()
        - h.records
            .iter()
            .rev()
            .position(|r| matches!(r, Record::Ok(_)))
            .unwrap();
    assert_eq!(report.examples["lost_write"][0].lines, vec![line]);
}

#[test]
fn an_acked_send_where_the_log_holds_another_is_a_lost_write() {
    let mut h = clean();
    h.remove(|r| matches!(r, Record::Ok(o) if o.client_msg_id == "m2"));
    h.ok("b1", "c1", "m2", 5);
    flagged(&h, AnomalyKind::LostWrite, 1);
}

#[test]
fn the_last_event_never_delivered_to_a_member_is_undelivered() {
    let mut h = clean();
    h.remove(|r| is_delivery(r, "b1", 5));
    flagged(&h, AnomalyKind::Undelivered, 1);
}

#[test]
fn a_member_device_that_received_nothing_has_every_event_undelivered() {
    let mut h = clean();
    h.member("c1", "cyd", "c9", 3);
    flagged(&h, AnomalyKind::Undelivered, 3);
}

#[test]
fn a_seq_delivered_twice_is_duplicated() {
    let mut h = clean();
    h.deliver("a1", "c1", 3, Some("m1"));
    flagged(&h, AnomalyKind::Duplicated, 1);
}

#[test]
fn one_client_msg_id_at_two_seqs_of_the_log_is_duplicated() {
    let mut h = clean();
    h.event("c1", 6, Some("m1"), "ana")
        .head("c1", 1, 6)
        .deliver("a1", "c1", 6, Some("m1"))
        .deliver("b1", "c1", 6, Some("m1"));
    flagged(&h, AnomalyKind::Duplicated, 1);
}

#[test]
fn one_send_acked_at_two_seqs_is_duplicated() {
    let mut h = clean();
    // The retry's ack names seq 5, where the log holds m3: also a lost write.
    h.ok("a1", "c1", "m1", 5);
    let report = check(&h.records);
    assert_eq!(report.count(AnomalyKind::Duplicated), 1, "{report:#?}");
    assert_eq!(report.count(AnomalyKind::LostWrite), 1, "{report:#?}");
    assert_eq!(report.total(), 2, "{report:#?}");
}

#[test]
fn a_hole_in_the_log_is_a_seq_gap() {
    let mut h = clean();
    h.remove(|r| matches!(r, Record::Final(e) if e.seq == 2));
    // Nobody was delivered a seq the log lacks: ben's join is skipped from the picture.
    h.remove(|r| is_delivery(r, "a1", 2))
        .remove(|r| is_delivery(r, "b1", 2));
    flagged(&h, AnomalyKind::SeqGap, 1);
}

#[test]
fn a_head_beyond_the_last_event_is_a_seq_gap_of_every_missing_seq() {
    let mut h = clean();
    h.head("c1", 1, 8);
    let report = flagged(&h, AnomalyKind::SeqGap, 3);
    assert_eq!(report.examples["seq_gap"].len(), 1, "one run, one example");
}

#[test]
fn a_delivery_that_jumped_over_a_seq_never_sent_later_is_skipped_delivery() {
    let mut h = clean();
    h.remove(|r| is_delivery(r, "a1", 3));
    flagged(&h, AnomalyKind::SkippedDelivery, 1);
}

#[test]
fn a_delivery_below_one_already_delivered_is_reordered() {
    let mut h = clean();
    let i = h
        .records
        .iter()
        .position(|r| is_delivery(r, "a1", 3))
        .unwrap();
    let j = h
        .records
        .iter()
        .position(|r| is_delivery(r, "a1", 4))
        .unwrap();
    h.records.swap(i, j);
    flagged(&h, AnomalyKind::Reordered, 1);
}

#[test]
fn a_read_whose_head_went_back_is_read_backwards() {
    let mut h = clean();
    h.read("b1", "c1", 5, &[], 5, 4);
    flagged(&h, AnomalyKind::ReadBackwards, 1);
}

#[test]
fn a_read_that_ends_below_an_earlier_one_it_started_beyond_is_read_backwards() {
    let mut h = clean();
    h.read("b1", "c1", 5, &[], 4, 5);
    flagged(&h, AnomalyKind::ReadBackwards, 1);
}

#[test]
fn a_delivery_of_an_uncommitted_seq_is_a_phantom() {
    let mut h = clean();
    h.deliver("b1", "c1", 6, Some("m5"));
    flagged(&h, AnomalyKind::Phantom, 1);
}

#[test]
fn a_delivery_of_another_message_than_the_logs_is_a_phantom() {
    let mut h = clean();
    h.remove(|r| is_delivery(r, "b1", 4));
    let at = h
        .records
        .iter()
        .position(|r| is_delivery(r, "b1", 5))
        .unwrap();
    h.records.insert(
        at,
        Record::Delivery(parley_history::record::Delivery {
            time_ms: 0,
            device: "b1".into(),
            conv: "c1".into(),
            seq: 4,
            client_msg_id: Some("m9".into()),
            message_id: None,
            via: parley_history::record::Via::Sync,
        }),
    );
    flagged(&h, AnomalyKind::Phantom, 1);
}

#[test]
fn a_read_returning_an_uncommitted_seq_is_a_phantom() {
    let mut h = clean();
    h.read("a1", "c1", 5, &[6], 6, 6);
    flagged(&h, AnomalyKind::Phantom, 1);
}

#[test]
fn a_read_position_observed_lower_than_before_is_read_position_backwards() {
    let mut h = clean();
    // Another device of ben's observes the position lower than b1 did.
    h.position("ben", "b2", "c1", 4);
    flagged(&h, AnomalyKind::ReadPositionBackwards, 1);
}

#[test]
fn a_definitely_failed_send_found_in_the_log_is_failed_but_committed() {
    let mut h = clean();
    h.event("c1", 6, Some("m4"), "ana")
        .head("c1", 1, 6)
        .deliver("a1", "c1", 6, Some("m4"))
        .deliver("b1", "c1", 6, Some("m4"));
    flagged(&h, AnomalyKind::FailedButCommitted, 1);
}

#[test]
fn examples_are_capped_per_kind_and_counts_are_not() {
    let mut h = clean();
    for seq in 10..30 {
        h.deliver("a1", "c1", seq, None);
    }
    let report = flagged(&h, AnomalyKind::Phantom, 20);
    assert_eq!(report.examples["phantom"].len(), EXAMPLES_PER_KIND_MAX);
}
