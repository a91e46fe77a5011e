//! A generator of random clean histories: conversations of a few members, each with one
//! device; sends acked, failed, or of unknown outcome (committed or not); every device
//! delivered its events in order, the devices' streams interleaved at random; one read and one
//! read position per device at the end.

use crate::build::History;

/// The shape of a generated history.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub convs: usize,
    pub members: usize,
    pub sends: usize,
    pub seed: u64,
}

/// A small deterministic generator (xorshift64*), so a shape and its seed name one history.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// One device's stream: device, conversation, and `(seq, client_msg_id)` of its events.
type Stream = (String, String, Vec<(i64, Option<String>)>);

pub fn clean_history(shape: Shape) -> History {
    let mut rng = Rng(shape.seed | 1);
    let mut h = History::new();
    // Per device: its conversation and the events it is to be delivered, in order.
    let mut streams: Vec<Stream> = Vec::new();
    let mut finals = History::new();
    for c in 0..shape.convs {
        let conv = format!("c{c}");
        let mut log: Vec<(Option<String>, String)> = Vec::new();
        for m in 0..shape.members {
            let user = format!("u{m}");
            log.push((None, user.clone()));
            h.member(&conv, &user, &format!("{conv}-{user}-d1"), log.len() as i64);
        }
        for s in 0..shape.sends {
            let sender = format!("u{}", rng.below(shape.members));
            let process = format!("{conv}-{sender}-d1");
            let id = format!("{conv}-m{s}");
            h.invoke(&process, &conv, &id);
            match rng.below(20) {
                0 => {
                    h.fail(&process, &conv, &id, "RATE_LIMITED");
                }
                1 => {
                    h.info(&process, &conv, &id);
                }
                2 => {
                    log.push((Some(id.clone()), sender.clone()));
                    h.info(&process, &conv, &id);
                }
                _ => {
                    log.push((Some(id.clone()), sender.clone()));
                    h.ok(&process, &conv, &id, log.len() as i64);
                }
            }
        }
        let head = log.len() as i64;
        for (i, (id, sender)) in log.iter().enumerate() {
            finals.event(&conv, i as i64 + 1, id.as_deref(), sender);
        }
        finals.head(&conv, 1, head);
        for m in 0..shape.members {
            let from = m as i64 + 1;
            let events = (from..=head)
                .map(|s| (s, log[s as usize - 1].0.clone()))
                .collect();
            streams.push((format!("{conv}-u{m}-d1"), conv.clone(), events));
        }
    }
    // Interleave the streams at random, each in its own order.
    let mut next = vec![0usize; streams.len()];
    let mut open: Vec<usize> = (0..streams.len())
        .filter(|&i| !streams[i].2.is_empty())
        .collect();
    while !open.is_empty() {
        let k = rng.below(open.len());
        let i = open[k];
        let (device, conv, events) = &streams[i];
        let (seq, id) = &events[next[i]];
        h.deliver(device, conv, *seq, id.as_deref());
        next[i] += 1;
        if next[i] == events.len() {
            open.swap_remove(k);
        }
    }
    for (device, conv, events) in &streams {
        let head = events.last().map_or(0, |e| e.0);
        let seqs: Vec<i64> = events.iter().map(|e| e.0).collect();
        let after = seqs.first().map_or(head, |s| s - 1);
        h.read(device, conv, after, &seqs, head, head);
        let user = device.split('-').nth(1).unwrap_or_default();
        h.position(user, device, conv, head);
    }
    h.records.extend(finals.records);
    h
}
