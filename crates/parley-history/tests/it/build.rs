//! A small builder of hand-made histories.

use parley_history::record::*;
use parley_history::Record;

#[derive(Default, Clone)]
pub struct History {
    pub records: Vec<Record>,
}

impl History {
    pub fn new() -> History {
        History::default()
    }

    fn push(&mut self, r: Record) -> &mut Self {
        self.records.push(r);
        self
    }

    pub fn member(&mut self, conv: &str, user: &str, device: &str, from_seq: i64) -> &mut Self {
        self.push(Record::Member(Member {
            conv: conv.into(),
            user: user.into(),
            device: device.into(),
            from_seq,
            to_seq: None,
        }))
    }

    pub fn invoke(&mut self, process: &str, conv: &str, id: &str) -> &mut Self {
        self.push(Record::Invoke(Invoke {
            time_ms: 0,
            process: process.into(),
            conv: conv.into(),
            client_msg_id: id.into(),
        }))
    }

    pub fn ok(&mut self, process: &str, conv: &str, id: &str, seq: i64) -> &mut Self {
        self.push(Record::Ok(SendOk {
            time_ms: 0,
            process: process.into(),
            conv: conv.into(),
            client_msg_id: id.into(),
            seq,
            message_id: None,
            dup: false,
        }))
    }

    pub fn fail(&mut self, process: &str, conv: &str, id: &str, code: &str) -> &mut Self {
        self.push(Record::Fail(SendFail {
            time_ms: 0,
            process: process.into(),
            conv: conv.into(),
            client_msg_id: id.into(),
            code: code.into(),
        }))
    }

    pub fn info(&mut self, process: &str, conv: &str, id: &str) -> &mut Self {
        self.push(Record::Info(SendInfo {
            time_ms: 0,
            process: process.into(),
            conv: conv.into(),
            client_msg_id: id.into(),
            reason: "timeout".into(),
        }))
    }

    pub fn deliver(&mut self, device: &str, conv: &str, seq: i64, id: Option<&str>) -> &mut Self {
        self.push(Record::Delivery(Delivery {
            time_ms: 0,
            device: device.into(),
            conv: conv.into(),
            seq,
            client_msg_id: id.map(Into::into),
            message_id: None,
            via: Via::Push,
        }))
    }

    pub fn read(
        &mut self,
        device: &str,
        conv: &str,
        after: i64,
        seqs: &[i64],
        through_seq: i64,
        head: i64,
    ) -> &mut Self {
        self.push(Record::Read(Read {
            time_ms: 0,
            device: device.into(),
            conv: conv.into(),
            after,
            seqs: seqs.to_vec(),
            through_seq,
            head,
        }))
    }

    pub fn position(&mut self, user: &str, device: &str, conv: &str, read_seq: i64) -> &mut Self {
        self.push(Record::ReadPosition(ReadPosition {
            time_ms: 0,
            user: user.into(),
            device: device.into(),
            conv: conv.into(),
            read_seq,
        }))
    }

    pub fn reconnect(&mut self, device: &str) -> &mut Self {
        self.push(Record::Reconnect(Reconnect {
            time_ms: 0,
            device: device.into(),
        }))
    }

    pub fn event(&mut self, conv: &str, seq: i64, id: Option<&str>, sender: &str) -> &mut Self {
        self.push(Record::Final(FinalEvent {
            conv: conv.into(),
            seq,
            client_msg_id: id.map(Into::into),
            sender: Some(sender.into()),
            message_id: None,
        }))
    }

    pub fn head(&mut self, conv: &str, min_seq: i64, head: i64) -> &mut Self {
        self.push(Record::FinalHead(FinalHead {
            conv: conv.into(),
            min_seq,
            head,
        }))
    }

    /// Removes the first record that matches.
    pub fn remove(&mut self, matches: impl Fn(&Record) -> bool) -> &mut Self {
        let i = self
            .records
            .iter()
            .position(matches)
            .expect("a record to remove");
        self.records.remove(i);
        self
    }
}

/// Whether `r` is the delivery of `seq` to `device`.
pub fn is_delivery(r: &Record, device: &str, seq: i64) -> bool {
    matches!(r, Record::Delivery(d) if d.device == device && d.seq == seq)
}

/// A clean history of conversation `c1`: ana (device `a1`) and ben (device `b1`) joined at
/// seqs 1 and 2; m1 acked at 3, m2 acked at 4, m3 of unknown outcome found at 5, m4 failed
/// definitely. Every device received what it should, in order; reads and read positions move
/// forward.
pub fn clean() -> History {
    let mut h = History::new();
    h.member("c1", "ana", "a1", 1)
        .member("c1", "ben", "b1", 2)
        .invoke("a1", "c1", "m1")
        .ok("a1", "c1", "m1", 3)
        .invoke("b1", "c1", "m2")
        .invoke("a1", "c1", "m3")
        .ok("b1", "c1", "m2", 4)
        .info("a1", "c1", "m3")
        .invoke("a1", "c1", "m4")
        .fail("a1", "c1", "m4", "NOT_MEMBER")
        .deliver("a1", "c1", 1, None)
        .deliver("b1", "c1", 2, None)
        .deliver("a1", "c1", 2, None)
        .deliver("a1", "c1", 3, Some("m1"))
        .deliver("b1", "c1", 3, Some("m1"))
        .reconnect("b1")
        .read("b1", "c1", 3, &[4, 5], 5, 5)
        .deliver("b1", "c1", 4, Some("m2"))
        .deliver("b1", "c1", 5, Some("m3"))
        .deliver("a1", "c1", 4, Some("m2"))
        .deliver("a1", "c1", 5, Some("m3"))
        .read("a1", "c1", 5, &[], 5, 5)
        .position("ben", "b1", "c1", 3)
        .position("ben", "b1", "c1", 5)
        .position("ana", "a1", "c1", 5)
        .event("c1", 1, None, "ana")
        .event("c1", 2, None, "ben")
        .event("c1", 3, Some("m1"), "ana")
        .event("c1", 4, Some("m2"), "ben")
        .event("c1", 5, Some("m3"), "ana")
        .head("c1", 1, 5);
    h
}
