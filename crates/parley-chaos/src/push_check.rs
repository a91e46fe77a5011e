//! The checker of offline notifications: pure, over what the lab knows at the end of a
//! schedule.
//!
//! Each user of a schedule has one offline device that never opens a session and holds a Web
//! Push subscription of the run's push service ([`Observer`]). After the run quiesced, the
//! final log of every conversation (the `final` records of the history) names the latest
//! message of others in it, and the server names the user's read position. Two anomalies:
//!
//! - `push_lost`: an observer whose user had not read the latest message of others in one of
//!   its conversations never received a notification of that message (conv_id and seq).
//!   Coalescing may skip earlier messages, never the latest.
//! - `push_duplicated`: one observer received a notification of one (conv_id, seq) more than
//!   once; each extra arrival counts.

use std::collections::{BTreeMap, HashMap};

use parley_history::Record;
use serde::Serialize;

/// Examples kept per kind, as in the history checker.
pub const PUSH_EXAMPLES_PER_KIND_MAX: usize = 5;

/// The kinds of notification anomaly, by their names in `report.json` and `summary.json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PushAnomaly {
    /// The latest unread message of a conversation never notified an offline device.
    Lost,
    /// One notification (device, conv_id, seq) arrived more than once.
    Duplicated,
}

impl PushAnomaly {
    /// Every kind, in the order of their names.
    pub const ALL: [PushAnomaly; 2] = [PushAnomaly::Duplicated, PushAnomaly::Lost];

    /// The stable snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            PushAnomaly::Lost => "push_lost",
            PushAnomaly::Duplicated => "push_duplicated",
        }
    }

    /// Every kind with a count of 0.
    pub fn zeroes() -> BTreeMap<String, u64> {
        PushAnomaly::ALL
            .iter()
            .map(|k| (k.as_str().to_owned(), 0))
            .collect()
    }
}

/// One offline device of a schedule with a push subscription.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Observer {
    /// The device's name, which is also its subscription's name at the push service.
    pub device: String,
    pub user: String,
    /// The conversations of its user.
    pub convs: Vec<String>,
}

/// One notification the push service took and decrypted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Notification {
    /// The subscription's name: the observer's device.
    pub device: String,
    pub conv: String,
    pub seq: i64,
    /// The payload's `kind` (`message`, `mention`, `reply`).
    pub kind: String,
    /// Milliseconds after the schedule's load started.
    pub at_ms: u64,
}

/// What the checker found in one schedule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PushReport {
    /// Offline devices with a subscription.
    pub devices: u64,
    /// (device, conversation) pairs owed a notification of the latest unread message.
    pub expected: u64,
    /// Of those, the pairs that received it.
    pub delivered: u64,
    /// Notifications received by the schedule's devices.
    pub received: u64,
    /// Anomalies by kind name; both kinds listed.
    pub anomalies: BTreeMap<String, u64>,
    /// Up to [`PUSH_EXAMPLES_PER_KIND_MAX`] examples per kind that occurred.
    pub examples: BTreeMap<String, Vec<String>>,
    /// How long the lab waited after the run quiesced for the last owed notification.
    pub settle_ms: u64,
}

impl PushReport {
    fn new() -> PushReport {
        PushReport {
            devices: 0,
            expected: 0,
            delivered: 0,
            received: 0,
            anomalies: PushAnomaly::zeroes(),
            examples: BTreeMap::new(),
            settle_ms: 0,
        }
    }

    /// The count of one kind.
    pub fn count(&self, kind: PushAnomaly) -> u64 {
        self.anomalies.get(kind.as_str()).copied().unwrap_or(0)
    }

    /// Anomalies of every kind.
    pub fn total(&self) -> u64 {
        self.anomalies.values().sum()
    }

    fn flag(&mut self, kind: PushAnomaly, n: u64, detail: impl FnOnce() -> String) {
        *self.anomalies.entry(kind.as_str().to_owned()).or_insert(0) += n;
        let examples = self.examples.entry(kind.as_str().to_owned()).or_default();
        if examples.len() < PUSH_EXAMPLES_PER_KIND_MAX {
            examples.push(detail());
        }
    }
}

/// The final log's messages by conversation, `conv -> [(seq, sender)]`, newest first: the
/// first whose sender is not a user is the latest message of others for that user.
fn messages_by_conv(records: &[Record]) -> HashMap<&str, Vec<(i64, &str)>> {
    let mut by_conv: HashMap<&str, Vec<(i64, &str)>> = HashMap::new();
    for record in records {
        if let Record::Final(e) = record {
            // A message has a client_msg_id and a sender; a join has neither.
            if let (Some(_), Some(sender)) = (&e.client_msg_id, &e.sender) {
                by_conv
                    .entry(e.conv.as_str())
                    .or_default()
                    .push((e.seq, sender.as_str()));
            }
        }
    }
    for messages in by_conv.values_mut() {
        messages.sort_unstable_by_key(|m| std::cmp::Reverse(m.0));
    }
    by_conv
}

/// Judges one schedule: `records` is its history (its `final` records are the authority),
/// `read_seqs` the server's read position of each (user, conversation) at the end, `received`
/// every notification the push service took (those of other devices are ignored).
pub fn check(
    observers: &[Observer],
    records: &[Record],
    read_seqs: &HashMap<(String, String), i64>,
    received: &[Notification],
) -> PushReport {
    let mut report = PushReport::new();
    report.devices = observers.len() as u64;
    let messages = messages_by_conv(records);
    let mut arrivals: HashMap<(&str, &str, i64), u64> = HashMap::new();
    for n in received {
        if observers.iter().any(|o| o.device == n.device) {
            report.received += 1;
            *arrivals
                .entry((n.device.as_str(), n.conv.as_str(), n.seq))
                .or_insert(0) += 1;
        }
    }
    for observer in observers {
        for conv in &observer.convs {
            let latest = messages.get(conv.as_str()).and_then(|m| {
                m.iter()
                    .find(|(_, sender)| *sender != observer.user)
                    .map(|(seq, _)| *seq)
            });
            let Some(latest) = latest else {
                continue;
            };
            let read_seq = read_seqs
                .get(&(observer.user.clone(), conv.clone()))
                .copied()
                .unwrap_or(0);
            if read_seq >= latest {
                continue;
            }
            report.expected += 1;
            if arrivals.contains_key(&(observer.device.as_str(), conv.as_str(), latest)) {
                report.delivered += 1;
            } else {
                let seen: Vec<i64> = {
                    let mut seqs: Vec<i64> = arrivals
                        .keys()
                        .filter(|(d, c, _)| *d == observer.device && *c == conv)
                        .map(|(_, _, s)| *s)
                        .collect();
                    seqs.sort_unstable();
                    seqs
                };
                report.flag(PushAnomaly::Lost, 1, || {
                    format!(
                        "{} never notified of {conv} seq {latest}, the latest message of \
                         others (read up to {read_seq}); notified of seqs {seen:?}",
                        observer.device
                    )
                });
            }
        }
    }
    let mut doubled: Vec<(&(&str, &str, i64), &u64)> =
        arrivals.iter().filter(|(_, n)| **n > 1).collect();
    doubled.sort_unstable();
    for ((device, conv, seq), n) in doubled {
        report.flag(PushAnomaly::Duplicated, n - 1, || {
            format!("{device} notified {n} times of {conv} seq {seq}")
        });
    }
    report
}

/// Extra arrivals of one (device, conv_id, seq) among `received` for `devices`: what
/// [`check`] counts as `push_duplicated`, recounted later to catch late resends.
pub fn duplicates(devices: &[String], received: &[Notification]) -> u64 {
    let mut arrivals: HashMap<(&str, &str, i64), u64> = HashMap::new();
    for n in received {
        if devices.contains(&n.device) {
            *arrivals
                .entry((n.device.as_str(), n.conv.as_str(), n.seq))
                .or_insert(0) += 1;
        }
    }
    arrivals.values().map(|n| n - 1).sum()
}

#[cfg(test)]
mod tests {
    use parley_history::record::FinalEvent;

    use super::*;

    fn message(conv: &str, seq: i64, sender: &str) -> Record {
        Record::Final(FinalEvent {
            conv: conv.to_owned(),
            seq,
            client_msg_id: Some(format!("{sender}-m{seq}")),
            sender: Some(sender.to_owned()),
            message_id: None,
        })
    }

    fn join(conv: &str, seq: i64) -> Record {
        Record::Final(FinalEvent {
            conv: conv.to_owned(),
            seq,
            client_msg_id: None,
            sender: None,
            message_id: None,
        })
    }

    fn notified(device: &str, conv: &str, seq: i64) -> Notification {
        Notification {
            device: device.to_owned(),
            conv: conv.to_owned(),
            seq,
            kind: "message".to_owned(),
            at_ms: 0,
        }
    }

    /// Two users in c1 and c2; u1's offline device `u1-push`. c1 ends with u0's message at 5;
    /// c2 ends with u1's own message at 4, after u0's at 3.
    fn history() -> (Vec<Observer>, Vec<Record>) {
        let observers = vec![Observer {
            device: "u1-push".to_owned(),
            user: "u1".to_owned(),
            convs: vec!["c1".to_owned(), "c2".to_owned()],
        }];
        let records = vec![
            join("c1", 1),
            join("c1", 2),
            message("c1", 3, "u0"),
            message("c1", 4, "u1"),
            message("c1", 5, "u0"),
            join("c2", 1),
            join("c2", 2),
            message("c2", 3, "u0"),
            message("c2", 4, "u1"),
        ];
        (observers, records)
    }

    fn unread() -> HashMap<(String, String), i64> {
        HashMap::new()
    }

    #[test]
    fn the_latest_message_of_others_notified_once_is_clean() {
        let (observers, records) = history();
        // Coalescing skipped c1's seq 3; c2's latest of others is 3, not u1's own 4.
        let received = [
            notified("u1-push", "c1", 5),
            notified("u1-push", "c2", 3),
            // Another schedule's device: not judged here.
            notified("x-push", "c1", 5),
            notified("x-push", "c1", 5),
        ];
        let report = check(&observers, &records, &unread(), &received);
        assert_eq!(report.total(), 0, "{report:#?}");
        assert_eq!((report.expected, report.delivered), (2, 2));
        assert_eq!(report.received, 2);
        assert_eq!(report.anomalies.len(), 2, "both kinds listed");
    }

    #[test]
    fn a_missing_notification_of_the_latest_unread_message_is_lost() {
        let (observers, records) = history();
        // Only an earlier message of c1 was notified, and nothing of c2.
        let received = [notified("u1-push", "c1", 3)];
        let report = check(&observers, &records, &unread(), &received);
        assert_eq!(report.count(PushAnomaly::Lost), 2, "{report:#?}");
        assert_eq!(report.count(PushAnomaly::Duplicated), 0);
        assert_eq!((report.expected, report.delivered), (2, 0));
        assert!(report.examples["push_lost"][0].contains("c1 seq 5"));
    }

    #[test]
    fn a_conversation_read_past_its_latest_message_is_owed_nothing() {
        let (observers, records) = history();
        let read = HashMap::from([
            (("u1".to_owned(), "c1".to_owned()), 5),
            (("u1".to_owned(), "c2".to_owned()), 4),
        ]);
        let report = check(&observers, &records, &read, &[]);
        assert_eq!(report.total(), 0, "{report:#?}");
        assert_eq!(report.expected, 0);
        // Read below the latest: still owed.
        let read = HashMap::from([(("u1".to_owned(), "c1".to_owned()), 4)]);
        let report = check(&observers, &records, &read, &[]);
        assert_eq!(report.count(PushAnomaly::Lost), 2, "{report:#?}");
    }

    /// The negative control of the issue: a fake duplicate must be flagged.
    #[test]
    fn a_notification_received_twice_is_duplicated() {
        let (observers, records) = history();
        let received = [
            notified("u1-push", "c1", 5),
            notified("u1-push", "c2", 3),
            notified("u1-push", "c1", 5),
            notified("u1-push", "c1", 3),
            notified("u1-push", "c1", 3),
            notified("u1-push", "c1", 3),
        ];
        let report = check(&observers, &records, &unread(), &received);
        assert_eq!(report.count(PushAnomaly::Duplicated), 3, "{report:#?}");
        assert_eq!(report.count(PushAnomaly::Lost), 0);
        assert_eq!(report.examples["push_duplicated"].len(), 2);
        assert_eq!(
            duplicates(&["u1-push".to_owned()], &received),
            3,
            "the late recount agrees"
        );
        assert_eq!(duplicates(&["x-push".to_owned()], &received), 0);
    }

    #[test]
    fn a_conversation_of_only_own_messages_is_owed_nothing() {
        let observers = vec![Observer {
            device: "u0-push".to_owned(),
            user: "u0".to_owned(),
            convs: vec!["c1".to_owned(), "c3".to_owned()],
        }];
        let records = vec![join("c1", 1), message("c1", 2, "u0")];
        let report = check(&observers, &records, &unread(), &[]);
        assert_eq!((report.expected, report.total()), (0, 0), "{report:#?}");
    }

    #[test]
    fn names_are_sorted_and_stable() {
        let names: Vec<&str> = PushAnomaly::ALL.iter().map(|k| k.as_str()).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        assert_eq!(names, sorted);
        assert_eq!(names, ["push_duplicated", "push_lost"]);
    }
}
