//! Correctness of what every simulated device received, judged by the history checker.
//!
//! After the load, the run is written as a history (`parley-history`, `docs/HISTORY.md`):
//! every acked send as an `invoke` and its `ok`, every event a device handed to the app as a
//! `delivery`, in the order they happened; each online member device as a `member` expected to
//! receive every event after the conversation's start; and the final log of every
//! conversation, read through events-after by one of its member devices, as the authority.
//! [`parley_history::check`] then finds the anomalies: the same rules as `parley chaos` and
//! the tests, so a benchmark's "0 violations" means what a chaos run's "0 anomalies" means.
//!
//! The report keeps its five historical counters ([`Violations`]), each the sum of the
//! checker's kinds it stands for, and adds the checker's count of every kind.

use std::collections::BTreeMap;
use std::time::Instant;

use anyhow::Result;
use futures::{stream, StreamExt};
use parley_client::Client;
use parley_history::record::Delivery;
use parley_history::record::{FinalEvent, FinalHead, Invoke, Member, Record, SendOk, Via};
use parley_history::{AnomalyKind, Report};
use serde::Serialize;

use super::devices::DeviceLog;
use super::load::{client_msg_id, Ack, Op};
use super::world::World;

/// Final log reads in flight.
const READS_IN_FLIGHT: usize = 16;
/// Events per events-after page: the server's maximum.
const SYNC_PAGE_LEN: u32 = 500;
/// Pages read at most per conversation, so a runaway log cannot loop forever.
const SYNC_PAGES_MAX: usize = 10_000;
/// Examples of each kind of anomaly kept in the report's list.
const EXAMPLES_MAX: usize = 5;

/// The report's five counters, each a sum of the checker's kinds.
#[derive(Debug, Default, Clone, Serialize, PartialEq, Eq)]
pub struct Violations {
    /// `lost_write` (an ack the final log does not hold) and `undelivered` (an event of the
    /// log that never reached a member device).
    pub lost: u64,
    /// `duplicated`.
    pub duplicated: u64,
    /// `seq_gap` (a hole in the final log) and `skipped_delivery` (a device jumped over an
    /// event).
    pub gaps: u64,
    /// `reordered`.
    pub reordered: u64,
    /// `phantom`: delivered, never committed.
    pub phantom: u64,
    /// Every other kind (reads or read positions going back, failures that committed); the
    /// benchmark records none of what they judge, so they stay 0 unless the history is wrong.
    pub other: u64,
    /// A few of them, to start looking.
    pub examples: Vec<String>,
}

impl Violations {
    pub fn total(&self) -> u64 {
        self.lost + self.duplicated + self.gaps + self.reordered + self.phantom + self.other
    }

    /// The counters of a checker's report.
    pub fn of(report: &Report) -> Violations {
        let n = |kind| report.count(kind);
        let lost = n(AnomalyKind::LostWrite) + n(AnomalyKind::Undelivered);
        let duplicated = n(AnomalyKind::Duplicated);
        let gaps = n(AnomalyKind::SeqGap) + n(AnomalyKind::SkippedDelivery);
        let reordered = n(AnomalyKind::Reordered);
        let phantom = n(AnomalyKind::Phantom);
        let other = report.total() - lost - duplicated - gaps - reordered - phantom;
        let examples = report
            .examples
            .iter()
            .flat_map(|(kind, list)| {
                list.iter()
                    .take(EXAMPLES_MAX)
                    .map(move |e| format!("{kind}: {}", e.detail))
            })
            .collect();
        Violations {
            lost,
            duplicated,
            gaps,
            reordered,
            phantom,
            other,
            examples,
        }
    }
}

/// Verification of a whole run.
#[derive(Debug, Default, Serialize)]
pub struct Verification {
    #[serde(flatten)]
    pub violations: Violations,
    /// The checker's count of every kind, by its name (`docs/HISTORY.md`).
    pub anomalies: BTreeMap<String, u64>,
    /// Device-conversation pairs compared.
    pub checked_pairs: u64,
    /// Conversations whose final log no member device could read (their pairs are not
    /// checked, and each counts as an error).
    pub sync_failures: u64,
    /// The history the checker judged, for `history.jsonl`.
    #[serde(skip)]
    pub history: Vec<Record>,
}

/// The name of device `d` in the history.
fn device_name(d: usize) -> String {
    format!("d{d}")
}

/// One conversation's log after its start, read through events-after by one of `readers`
/// (the first that answers): `final` records and the `final_head`.
async fn final_log(
    readers: &[&Client],
    conv_id: &str,
    epoch: i64,
    start: i64,
) -> Result<Vec<Record>> {
    let mut last_error = None;
    for client in readers {
        match read_log(client, conv_id, epoch, start).await {
            Ok(records) => return Ok(records),
            Err(e) => last_error = Some(e),
        }
    }
    Err(last_error.unwrap_or_else(|| anyhow::anyhow!("{conv_id} has no online member")))
}

async fn read_log(client: &Client, conv_id: &str, epoch: i64, start: i64) -> Result<Vec<Record>> {
    let mut records = Vec::new();
    let mut after = start;
    let mut head = start;
    for _ in 0..SYNC_PAGES_MAX {
        let page = client
            .events_after(conv_id, after, Some(SYNC_PAGE_LEN), Some(epoch))
            .await?;
        head = head.max(page.head);
        for e in page.events {
            records.push(Record::Final(FinalEvent {
                conv: conv_id.to_owned(),
                seq: e.seq,
                client_msg_id: e.client_msg_id,
                sender: e.sender_user,
                message_id: e.message_id,
            }));
        }
        if page.through_seq <= after || page.through_seq >= page.head {
            break;
        }
        after = page.through_seq;
    }
    records.push(Record::FinalHead(FinalHead {
        conv: conv_id.to_owned(),
        min_seq: start + 1,
        head,
    }));
    Ok(records)
}

/// Writes the run as a history and checks it.
pub async fn verify(world: &World, logs: &[DeviceLog], acks: &[Ack]) -> Verification {
    // The final log of every conversation, read by the first member device that answers; a
    // device that moved to another gateway reads there, its first may be gone.
    let reads: Vec<_> = stream::iter(world.convs.iter().enumerate())
        .map(|(c, conv)| async move {
            let readers: Vec<&Client> = conv
                .online
                .iter()
                .map(|&d| {
                    logs.get(d as usize)
                        .and_then(|l| l.moved_to.as_ref())
                        .unwrap_or(&world.clients[d as usize])
                })
                .collect();
            (
                c,
                final_log(&readers, &conv.id, conv.epoch, conv.start).await,
            )
        })
        .buffer_unordered(READS_IN_FLIGHT)
        .collect()
        .await;

    let mut out = Verification::default();
    let mut read_ok = vec![false; world.convs.len()];
    let mut finals = Vec::new();
    for (c, result) in reads {
        match result {
            Ok(records) => {
                read_ok[c] = true;
                finals.extend(records);
            }
            Err(_) => out.sync_failures += 1,
        }
    }

    let mut history = Vec::new();
    for (d, convs) in world.device_convs.iter().enumerate() {
        for &c in convs.iter().filter(|&&c| read_ok[c as usize]) {
            let conv = &world.convs[c as usize];
            history.push(Record::Member(Member {
                conv: conv.id.clone(),
                user: World::user_id(&world.tag, d),
                device: device_name(d),
                from_seq: conv.start + 1,
                to_seq: None,
            }));
            out.checked_pairs += 1;
        }
    }
    history.extend(operations(world, logs, acks, &read_ok));
    history.extend(finals);

    let report = parley_history::check(&history);
    out.violations = Violations::of(&report);
    out.anomalies = report.anomalies;
    out.history = history;
    out
}

/// The sends and deliveries of conversations whose final log was read, in the order they
/// happened.
fn operations(world: &World, logs: &[DeviceLog], acks: &[Ack], read_ok: &[bool]) -> Vec<Record> {
    let origin = acks
        .iter()
        .map(|a| a.issued)
        .chain(logs.iter().flat_map(|l| l.received.iter().map(|r| r.at)))
        .min()
        .unwrap_or_else(Instant::now);
    let ms = |at: Instant| at.saturating_duration_since(origin).as_millis() as u64;
    let mut timed: Vec<(Instant, Record)> = Vec::new();
    // A reaction has no request key: it is checked as an event of the final log that every
    // member device receives, not as a send.
    for a in acks
        .iter()
        .filter(|a| read_ok[a.conv as usize] && a.op != Op::React)
    {
        let conv = world.convs[a.conv as usize].id.clone();
        let process = device_name(a.device as usize);
        let id = client_msg_id(a.id);
        timed.push((
            a.issued,
            Record::Invoke(Invoke {
                time_ms: ms(a.issued),
                process: process.clone(),
                conv: conv.clone(),
                client_msg_id: id.clone(),
            }),
        ));
        timed.push((
            a.acked,
            Record::Ok(SendOk {
                time_ms: ms(a.acked),
                process,
                conv,
                client_msg_id: id,
                seq: a.seq,
                message_id: None,
                dup: a.dup,
            }),
        ));
    }
    for (d, log) in logs.iter().enumerate() {
        for r in log.received.iter().filter(|r| read_ok[r.conv as usize]) {
            timed.push((
                r.at,
                Record::Delivery(Delivery {
                    time_ms: ms(r.at),
                    device: device_name(d),
                    conv: world.convs[r.conv as usize].id.clone(),
                    seq: r.seq,
                    client_msg_id: None,
                    message_id: None,
                    // The SDK hands pushed and caught-up events to the app alike; the
                    // checker judges both by the same rules.
                    via: Via::Push,
                }),
            ));
        }
    }
    // Stable: a device's deliveries keep their arrival order when two share an instant.
    timed.sort_by_key(|(at, _)| *at);
    timed.into_iter().map(|(_, r)| r).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use parley_history::record::{FinalEvent, FinalHead, Member};

    fn member(device: &str) -> Record {
        Record::Member(Member {
            conv: "c".into(),
            user: device.into(),
            device: device.into(),
            from_seq: 3,
            to_seq: None,
        })
    }

    fn finals(seqs: &[i64]) -> Vec<Record> {
        let mut r: Vec<Record> = seqs
            .iter()
            .map(|&seq| {
                Record::Final(FinalEvent {
                    conv: "c".into(),
                    seq,
                    client_msg_id: Some(client_msg_id(seq as u64)),
                    sender: None,
                    message_id: None,
                })
            })
            .collect();
        r.push(Record::FinalHead(FinalHead {
            conv: "c".into(),
            min_seq: 3,
            head: *seqs.last().unwrap_or(&2),
        }));
        r
    }

    fn delivery(device: &str, seq: i64) -> Record {
        Record::Delivery(Delivery {
            time_ms: 0,
            device: device.into(),
            conv: "c".into(),
            seq,
            client_msg_id: None,
            message_id: None,
            via: Via::Push,
        })
    }

    fn violations(history: &[Record]) -> Violations {
        Violations::of(&parley_history::check(history))
    }

    #[test]
    fn an_exact_delivery_has_no_violation() {
        let mut h = vec![member("d0")];
        h.extend((3..=5).map(|s| delivery("d0", s)));
        h.extend(finals(&[3, 4, 5]));
        assert_eq!(violations(&h), Violations::default());
    }

    #[test]
    fn each_counter_sums_its_kinds() {
        // d0 never gets 5 (undelivered: lost), sees 4 twice (duplicated) and 7 (phantom); the
        // log misses seq 6 below its head 8 (a gap), and 8 is never delivered either.
        let mut h = vec![member("d0")];
        h.extend([3, 4, 4, 7].into_iter().map(|s| delivery("d0", s)));
        h.extend(finals(&[3, 4, 5, 8]));
        let v = violations(&h);
        assert_eq!(v.duplicated, 1, "{v:?}");
        assert_eq!(v.phantom, 1, "{v:?}");
        assert!(v.gaps >= 1, "{v:?}");
        assert!(v.lost >= 1, "{v:?}");
        assert_eq!(v.other, 0, "{v:?}");
        assert!(!v.examples.is_empty());
        let report = parley_history::check(&h);
        assert_eq!(v.total(), report.total(), "every anomaly is counted once");
    }
}
