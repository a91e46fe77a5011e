use parley_history::{check, read_history, write_history, HistoryError, Record};

use crate::build::clean;

#[test]
fn a_history_round_trips_through_json_lines() {
    let h = clean();
    let mut out = Vec::new();
    write_history(&mut out, &h.records).unwrap();
    let text = String::from_utf8(out.clone()).unwrap();
    assert_eq!(text.lines().count(), h.records.len());
    assert!(
        text.lines().all(|l| l.starts_with("{\"type\":\"")),
        "{text}"
    );
    let back = read_history(out.as_slice()).unwrap();
    assert_eq!(back, h.records);
}

#[test]
fn one_line_of_each_record_type_as_documented_parses() {
    let text = r#"
{"type":"member","conv":"c1","user":"u2","device":"u2-d1","from_seq":2,"to_seq":null}
{"type":"invoke","time_ms":5,"process":"u1-d1","conv":"c1","client_msg_id":"m1"}
{"type":"ok","time_ms":9,"process":"u1-d1","conv":"c1","client_msg_id":"m1","seq":3,"message_id":"7f0c","dup":false}
{"type":"invoke","time_ms":10,"process":"u1-d1","conv":"c1","client_msg_id":"m2"}
{"type":"fail","time_ms":11,"process":"u1-d1","conv":"c1","client_msg_id":"m2","code":"NOT_MEMBER"}
{"type":"invoke","time_ms":12,"process":"u1-d1","conv":"c1","client_msg_id":"m3"}
{"type":"info","time_ms":30,"process":"u1-d1","conv":"c1","client_msg_id":"m3","reason":"connection closed"}
{"type":"delivery","time_ms":13,"device":"u2-d1","conv":"c1","seq":2,"via":"sync"}
{"type":"delivery","time_ms":14,"device":"u2-d1","conv":"c1","seq":3,"client_msg_id":"m1","message_id":"7f0c","via":"push"}
{"type":"reconnect","time_ms":31,"device":"u2-d1"}
{"type":"read","time_ms":32,"device":"u2-d1","conv":"c1","after":3,"seqs":[],"through_seq":3,"head":3}
{"type":"read_position","time_ms":33,"user":"u2","device":"u2-d1","conv":"c1","read_seq":3}
{"type":"final","conv":"c1","seq":1}
{"type":"final","conv":"c1","seq":2}
{"type":"final","conv":"c1","seq":3,"client_msg_id":"m1","sender":"u1","message_id":"7f0c"}
{"type":"final_head","conv":"c1","min_seq":1,"head":3}
"#;
    let records = read_history(text.as_bytes()).unwrap();
    assert_eq!(records.len(), 16);
    let report = check(&records);
    assert_eq!(report.total(), 0, "{report:#?}");
    assert_eq!((report.unknown_outcomes, report.recovered), (1, 0));
    assert_eq!(report.operations, 11);
}

#[test]
fn a_bad_line_is_named_by_its_number() {
    let text = "{\"type\":\"reconnect\",\"device\":\"d\"}\n\n{\"type\":\"nope\"}\n";
    match read_history(text.as_bytes()) {
        Err(HistoryError::Json { line, .. }) => assert_eq!(line, 3),
        other => panic!("expected a JSON error, got {other:?}"),
    }
}

#[test]
fn unknown_fields_are_ignored() {
    let text = r#"{"type":"reconnect","device":"d","gateway":"g2"}"#;
    let records = read_history(text.as_bytes()).unwrap();
    assert!(matches!(&records[0], Record::Reconnect(r) if r.device == "d"));
}

#[test]
fn a_line_beyond_the_limit_is_refused() {
    let long = "x".repeat(parley_history::jsonl::LINE_LEN_MAX_BYTES + 1);
    assert!(matches!(
        read_history(long.as_bytes()),
        Err(HistoryError::LineTooLong { line: 1 })
    ));
}
