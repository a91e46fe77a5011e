//! Correctness of what every simulated device received.
//!
//! After the load, every device syncs each of its conversations through events-after (its
//! final log: what the server says the member sees) and compares, per conversation:
//! - **lost**: an acked send that is absent from the member's final log (or another message
//!   stands at its seq), or that is in the log but never reached the device;
//! - **duplicated**: a seq delivered twice to one device; also one seq acked for two different
//!   sends, or one send acked at two seqs;
//! - **gaps**: a delivery that skipped a seq the final log shows (the skipped event had not
//!   been delivered before);
//! - **reordered**: a delivery below a seq already delivered (and not a repeat);
//! - **phantom**: a delivered seq that the final log does not have (pushed, never committed).
//!
//! The rules are pure functions ([`check_conv`], [`check_acks`]) so that their negative
//! controls run as unit tests.

use std::collections::{BTreeMap, HashMap, HashSet};

use anyhow::Result;
use futures::{stream, StreamExt};
use parley_client::Client;
use serde::Serialize;

use super::devices::DeviceLog;
use super::load::{parse_client_msg_id, Ack};
use super::world::World;

/// Final syncs in flight.
const SYNCS_IN_FLIGHT: usize = 16;
/// Events per events-after page: the server's maximum.
const SYNC_PAGE_LEN: u32 = 500;
/// Pages read at most per conversation and device, so a runaway log cannot loop forever.
const SYNC_PAGES_MAX: usize = 10_000;
/// Examples of each kind of violation kept for the report.
const EXAMPLES_MAX: usize = 5;

#[derive(Debug, Default, Clone, Serialize, PartialEq, Eq)]
pub struct Violations {
    pub lost: u64,
    pub duplicated: u64,
    pub gaps: u64,
    pub reordered: u64,
    pub phantom: u64,
    /// A few of them, to start looking.
    pub examples: Vec<String>,
}

impl Violations {
    pub fn total(&self) -> u64 {
        self.lost + self.duplicated + self.gaps + self.reordered + self.phantom
    }

    fn note(&mut self, example: impl FnOnce() -> String) {
        if self.examples.len() < EXAMPLES_MAX {
            self.examples.push(example());
        }
    }
}

/// A member's log after the start cursor: seq -> the benchmark's send id (`None` for events
/// the benchmark did not send).
pub type FinalLog = BTreeMap<i64, Option<u64>>;

/// One device's view of one conversation.
pub struct ConvCheck<'a> {
    /// Names the device and conversation in examples.
    pub label: &'a str,
    /// The cursor the device started tracking from: later seqs must all arrive.
    pub start: i64,
    /// Seqs in the order the device received them.
    pub delivered: &'a [i64],
    /// The member's final log after `start`.
    pub final_log: &'a FinalLog,
    /// `(seq, send id)` of every acked send to the conversation.
    pub acked: &'a [(i64, u64)],
}

/// Checks one device's deliveries of one conversation against its final log and the acks.
pub fn check_conv(c: &ConvCheck<'_>, v: &mut Violations) {
    let mut seen: HashSet<i64> = HashSet::with_capacity(c.delivered.len());
    let mut top = c.start;
    for &seq in c.delivered {
        if !seen.insert(seq) {
            v.duplicated += 1;
            v.note(|| format!("{}: seq {seq} delivered twice", c.label));
            continue;
        }
        if !c.final_log.contains_key(&seq) {
            v.phantom += 1;
            v.note(|| format!("{}: seq {seq} delivered but not in the log", c.label));
        }
        if seq < top {
            v.reordered += 1;
            v.note(|| format!("{}: seq {seq} delivered after seq {top}", c.label));
            continue;
        }
        let skipped = c
            .final_log
            .range(top + 1..seq)
            .any(|(s, _)| !seen.contains(s));
        if skipped {
            v.gaps += 1;
            v.note(|| format!("{}: seq {seq} delivered right after seq {top}", c.label));
        }
        top = seq;
    }
    for &(seq, id) in c.acked {
        if seq <= c.start {
            continue;
        }
        if c.final_log.get(&seq) != Some(&Some(id)) {
            v.lost += 1;
            v.note(|| format!("{}: acked send m{id} (seq {seq}) not in the log", c.label));
        } else if !seen.contains(&seq) {
            v.lost += 1;
            v.note(|| format!("{}: acked send m{id} (seq {seq}) never delivered", c.label));
        }
    }
}

/// Checks the acks of one conversation among themselves: one seq per send, one send per seq.
pub fn check_acks(label: &str, acked: &[(i64, u64)], v: &mut Violations) {
    let mut by_seq: HashMap<i64, u64> = HashMap::new();
    let mut by_id: HashMap<u64, i64> = HashMap::new();
    for &(seq, id) in acked {
        if let Some(&other) = by_seq.get(&seq) {
            if other != id {
                v.duplicated += 1;
                v.note(|| format!("{label}: seq {seq} acked for m{other} and m{id}"));
            }
        }
        if let Some(&other) = by_id.get(&id) {
            if other != seq {
                v.duplicated += 1;
                v.note(|| format!("{label}: m{id} acked at seq {other} and seq {seq}"));
            }
        }
        by_seq.insert(seq, id);
        by_id.insert(id, seq);
    }
}

/// The member's log of `conv_id` after `start`, read through events-after.
async fn final_log(client: &Client, conv_id: &str, epoch: i64, start: i64) -> Result<FinalLog> {
    let mut log = BTreeMap::new();
    let mut after = start;
    for _ in 0..SYNC_PAGES_MAX {
        let page = client
            .events_after(conv_id, after, Some(SYNC_PAGE_LEN), Some(epoch))
            .await?;
        for e in &page.events {
            let id = e.client_msg_id.as_deref().and_then(parse_client_msg_id);
            log.insert(e.seq, id);
        }
        if page.through_seq <= after || page.through_seq >= page.head {
            break;
        }
        after = page.through_seq;
    }
    Ok(log)
}

/// Verification of a whole run.
#[derive(Debug, Default, Serialize)]
pub struct Verification {
    #[serde(flatten)]
    pub violations: Violations,
    /// Device-conversation pairs compared.
    pub checked_pairs: u64,
    /// Final syncs that failed (their pairs are not checked, and each counts as an error).
    pub sync_failures: u64,
}

/// Final sync of every device's conversations and the comparison with what it received.
pub async fn verify(world: &World, logs: &[DeviceLog], acks: &[Ack]) -> Verification {
    let mut acked: Vec<Vec<(i64, u64)>> = vec![Vec::new(); world.convs.len()];
    for a in acks {
        acked[a.conv as usize].push((a.seq, a.id));
    }
    let mut out = Verification::default();
    for (c, conv) in world.convs.iter().enumerate() {
        check_acks(&conv.id, &acked[c], &mut out.violations);
    }

    let pairs: Vec<(usize, u32)> = world
        .device_convs
        .iter()
        .enumerate()
        .flat_map(|(d, convs)| convs.iter().map(move |&c| (d, c)))
        .collect();
    let results: Vec<_> = stream::iter(pairs)
        .map(|(d, c)| async move {
            let conv = &world.convs[c as usize];
            // A device that moved to another gateway syncs there: its first may be gone.
            let client = logs
                .get(d)
                .and_then(|l| l.moved_to.as_ref())
                .unwrap_or(&world.clients[d]);
            let log = final_log(client, &conv.id, conv.epoch, conv.start).await;
            (d, c, log)
        })
        .buffer_unordered(SYNCS_IN_FLIGHT)
        .collect()
        .await;

    // Deliveries per device and conversation, in arrival order.
    let delivered: Vec<HashMap<u32, Vec<i64>>> = logs
        .iter()
        .map(|log| {
            let mut by_conv: HashMap<u32, Vec<i64>> = HashMap::new();
            for r in &log.received {
                by_conv.entry(r.conv).or_default().push(r.seq);
            }
            by_conv
        })
        .collect();
    let none: Vec<i64> = Vec::new();
    for (d, c, log) in results {
        let Ok(final_log) = log else {
            out.sync_failures += 1;
            continue;
        };
        let conv = &world.convs[c as usize];
        let label = format!("device {d} in {}", conv.id);
        let got = delivered.get(d).and_then(|m| m.get(&c)).unwrap_or(&none);
        check_conv(
            &ConvCheck {
                label: &label,
                start: conv.start,
                delivered: got,
                final_log: &final_log,
                acked: &acked[c as usize],
            },
            &mut out.violations,
        );
        out.checked_pairs += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A conversation whose log after seq 2 holds sends m3..=m7 at seqs 3..=7, all acked.
    fn log_3_to_7() -> (FinalLog, Vec<(i64, u64)>) {
        let log = (3..=7).map(|s| (s, Some(s as u64))).collect();
        let acked = (3..=7).map(|s| (s, s as u64)).collect();
        (log, acked)
    }

    fn check(delivered: &[i64], log: &FinalLog, acked: &[(i64, u64)]) -> Violations {
        let mut v = Violations::default();
        check_conv(
            &ConvCheck {
                label: "d0 in c",
                start: 2,
                delivered,
                final_log: log,
                acked,
            },
            &mut v,
        );
        v
    }

    #[test]
    fn an_exact_delivery_has_no_violation() {
        let (log, acked) = log_3_to_7();
        let v = check(&[3, 4, 5, 6, 7], &log, &acked);
        assert_eq!(v, Violations::default());
    }

    #[test]
    fn a_duplicate_is_reported() {
        let (log, acked) = log_3_to_7();
        let v = check(&[3, 4, 4, 5, 6, 7], &log, &acked);
        assert_eq!((v.duplicated, v.total()), (1, 1), "{v:?}");
    }

    #[test]
    fn a_gap_is_reported_and_its_late_fill_is_a_reorder() {
        let (log, acked) = log_3_to_7();
        let v = check(&[3, 5, 6, 7], &log, &acked);
        assert_eq!(
            (v.gaps, v.lost, v.total()),
            (1, 1, 2),
            "4 skipped and never came: {v:?}"
        );
        let v = check(&[3, 5, 4, 6, 7], &log, &acked);
        assert_eq!((v.gaps, v.reordered, v.total()), (1, 1, 2), "{v:?}");
    }

    #[test]
    fn a_reorder_is_reported() {
        let (log, acked) = log_3_to_7();
        let v = check(&[3, 4, 6, 5, 7], &log, &acked);
        assert_eq!(v.reordered, 1, "{v:?}");
    }

    #[test]
    fn a_loss_is_reported_in_the_log_and_in_the_delivery() {
        let (mut log, acked) = log_3_to_7();
        let v = check(&[3, 4, 5, 6], &log, &acked);
        assert_eq!((v.lost, v.total()), (1, 1), "7 never delivered: {v:?}");
        log.remove(&7);
        let v = check(&[3, 4, 5, 6], &log, &acked);
        assert_eq!(
            (v.lost, v.total()),
            (1, 1),
            "7 acked but not in the log: {v:?}"
        );
        log.insert(7, Some(99));
        let v = check(&[3, 4, 5, 6, 7], &log, &acked);
        assert_eq!(v.lost, 1, "another send stands at the acked seq: {v:?}");
    }

    #[test]
    fn a_push_of_an_uncommitted_event_is_a_phantom() {
        let (log, acked) = log_3_to_7();
        let v = check(&[3, 4, 5, 6, 7, 8], &log, &acked);
        assert_eq!((v.phantom, v.total()), (1, 1), "{v:?}");
    }

    #[test]
    fn invisible_and_foreign_events_do_not_count_as_gaps() {
        // Seq 4 is an event the benchmark did not send (e.g. a join); it was delivered.
        let log: FinalLog = [(3, Some(3)), (4, None), (5, Some(5))].into();
        let v = check(&[3, 4, 5], &log, &[(3, 3), (5, 5)]);
        assert_eq!(v, Violations::default());
        // Seqs outside the log (not visible to this member) may be skipped.
        let log: FinalLog = [(3, Some(3)), (9, Some(9))].into();
        let v = check(&[3, 9], &log, &[(3, 3), (9, 9)]);
        assert_eq!(v, Violations::default());
    }

    #[test]
    fn conflicting_acks_are_duplicates() {
        let mut v = Violations::default();
        check_acks("c", &[(3, 3), (4, 4), (4, 4)], &mut v);
        assert_eq!(v.total(), 0, "a resend answered dup=true is fine");
        check_acks("c", &[(3, 3), (3, 9)], &mut v);
        check_acks("c", &[(3, 3), (5, 3)], &mut v);
        assert_eq!(v.duplicated, 2, "{v:?}");
    }
}
