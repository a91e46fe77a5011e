//! The payload of one message between gateways, as compact JSON:
//!
//! ```text
//! {"origin":"gw-a","heads":[["conv",12],["c2",7]],"notices":[{"kind":"revoke","user":"u","device":"d"}]}
//! ```
//!
//! `origin` names the sending gateway, so it can ignore its own payloads coming back. `heads`
//! holds the coalesced heads; `notices` the notices in order, and is left out when there are
//! none, so a payload of heads alone reads as it did before notices existed. A transport
//! limits a payload's size; [`encode`] splits a batch into as many payloads as needed.
//!
//! Decoding trusts nothing: the channel may be open to other clients, so anything that is not
//! what a gateway sends refuses the whole payload. The one exception is a notice of a kind this
//! version does not know, which is skipped and counted, so a newer gateway can add kinds
//! without cutting older ones off.

use parley_domain::{ConvId, DeviceId, Role, UserId};
use serde::{Deserialize, Serialize};

use crate::coalesce::Batch;
use crate::Notice;

/// A batch as payloads, and what could not be sent because it did not fit even alone.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Encoded {
    pub payloads: Vec<String>,
    pub heads_oversized: usize,
    pub notices_oversized: usize,
}

/// One payload as received.
#[derive(Debug, PartialEq, Eq)]
pub struct Decoded {
    pub origin: String,
    pub heads: Vec<(ConvId, i64)>,
    pub notices: Vec<Notice>,
    /// Notices of kinds this version does not know, skipped.
    pub notices_unknown: usize,
}

/// A notice as it travels: short field names, ids as plain strings.
#[derive(Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum WireNotice {
    Read {
        user: String,
        conv: String,
        read_seq: i64,
        device: String,
    },
    Revoke {
        user: String,
        device: String,
    },
    Role {
        conv: String,
        user: String,
        role: Role,
    },
    Kick {
        user: String,
        device: String,
        gateway: String,
        conn: String,
    },
}

/// The `kind` of every [`WireNotice`]; any other kind is skipped on arrival.
const KNOWN_KINDS: [&str; 4] = ["read", "revoke", "role", "kick"];

impl From<&Notice> for WireNotice {
    fn from(notice: &Notice) -> Self {
        match notice {
            Notice::ReadMoved {
                user_id,
                conv_id,
                read_seq,
                origin_device,
            } => Self::Read {
                user: user_id.to_string(),
                conv: conv_id.to_string(),
                read_seq: *read_seq,
                device: origin_device.to_string(),
            },
            Notice::DeviceRevoked { user_id, device_id } => Self::Revoke {
                user: user_id.to_string(),
                device: device_id.to_string(),
            },
            Notice::RoleChanged {
                conv_id,
                user_id,
                role,
            } => Self::Role {
                conv: conv_id.to_string(),
                user: user_id.to_string(),
                role: *role,
            },
            Notice::RouteTaken {
                user_id,
                device_id,
                gateway_id,
                conn_id,
            } => Self::Kick {
                user: user_id.to_string(),
                device: device_id.to_string(),
                gateway: gateway_id.clone(),
                conn: conn_id.clone(),
            },
        }
    }
}

impl WireNotice {
    /// The notice with every id parsed; `None` when any is not valid.
    fn parse(self) -> Option<Notice> {
        Some(match self {
            Self::Read {
                user,
                conv,
                read_seq,
                device,
            } => Notice::ReadMoved {
                user_id: UserId::parse(&user).ok()?,
                conv_id: ConvId::parse(&conv).ok()?,
                read_seq: (read_seq >= 0).then_some(read_seq)?,
                origin_device: DeviceId::parse(&device).ok()?,
            },
            Self::Revoke { user, device } => Notice::DeviceRevoked {
                user_id: UserId::parse(&user).ok()?,
                device_id: DeviceId::parse(&device).ok()?,
            },
            Self::Role { conv, user, role } => Notice::RoleChanged {
                conv_id: ConvId::parse(&conv).ok()?,
                user_id: UserId::parse(&user).ok()?,
                role,
            },
            // Gateway and connection ids are only compared, never parsed; an empty one names
            // nothing a gateway holds, so it is refused as not sent by a gateway.
            Self::Kick {
                user,
                device,
                gateway,
                conn,
            } => Notice::RouteTaken {
                user_id: UserId::parse(&user).ok()?,
                device_id: DeviceId::parse(&device).ok()?,
                gateway_id: (!gateway.is_empty()).then_some(gateway)?,
                conn_id: (!conn.is_empty()).then_some(conn)?,
            },
        })
    }
}

#[derive(Deserialize)]
struct WirePayload {
    origin: String,
    heads: Vec<(String, i64)>,
    #[serde(default)]
    notices: Vec<serde_json::Value>,
}

/// Parses a payload; `None` when anything in it is not what a gateway sends.
pub fn decode(payload: &str) -> Option<Decoded> {
    let wire: WirePayload = serde_json::from_str(payload).ok()?;
    let mut heads = Vec::with_capacity(wire.heads.len());
    for (conv_id, head) in wire.heads {
        let conv_id = ConvId::parse(&conv_id).ok()?;
        if head < 0 {
            return None;
        }
        heads.push((conv_id, head));
    }
    let mut notices = Vec::with_capacity(wire.notices.len());
    let mut notices_unknown = 0;
    for value in wire.notices {
        let kind = value.get("kind")?.as_str()?;
        if !KNOWN_KINDS.contains(&kind) {
            notices_unknown += 1;
            continue;
        }
        let notice: WireNotice = serde_json::from_value(value).ok()?;
        notices.push(notice.parse()?);
    }
    Some(Decoded {
        origin: wire.origin,
        heads,
        notices,
        notices_unknown,
    })
}

const HEADS_END: &str = "]";
const NOTICES_START: &str = ",\"notices\":[";
const NOTICES_END: &str = "]";
const PAYLOAD_END: &str = "}";

#[derive(Clone, Copy)]
enum Part {
    Head,
    Notice,
}

/// One payload being filled, with its encoded length kept exact as parts are added.
struct Payload<'a> {
    prefix: &'a str,
    heads: Vec<String>,
    heads_bytes: usize,
    notices: Vec<String>,
    notices_bytes: usize,
}

/// Bytes of `n` items of `bytes` in total between brackets: the items and their commas.
fn joined_len(n: usize, bytes: usize) -> usize {
    bytes + n.saturating_sub(1)
}

impl<'a> Payload<'a> {
    fn new(prefix: &'a str) -> Self {
        Self {
            prefix,
            heads: Vec::new(),
            heads_bytes: 0,
            notices: Vec::new(),
            notices_bytes: 0,
        }
    }

    fn is_empty(&self) -> bool {
        self.heads.is_empty() && self.notices.is_empty()
    }

    /// The encoded length with `extra` more bytes in one more item of `part`.
    fn len_with(&self, part: Part, extra: usize) -> usize {
        let (mut heads, mut notices) = (
            (self.heads.len(), self.heads_bytes),
            (self.notices.len(), self.notices_bytes),
        );
        let grown = match part {
            Part::Head => &mut heads,
            Part::Notice => &mut notices,
        };
        *grown = (grown.0 + 1, grown.1 + extra);
        let notices_len = match notices.0 {
            0 => 0,
            n => NOTICES_START.len() + joined_len(n, notices.1) + NOTICES_END.len(),
        };
        self.prefix.len()
            + joined_len(heads.0, heads.1)
            + HEADS_END.len()
            + notices_len
            + PAYLOAD_END.len()
    }

    fn push(&mut self, part: Part, item: String) {
        match part {
            Part::Head => {
                self.heads_bytes += item.len();
                self.heads.push(item);
            }
            Part::Notice => {
                self.notices_bytes += item.len();
                self.notices.push(item);
            }
        }
    }

    fn finish(self) -> String {
        let mut out = String::from(self.prefix);
        out.push_str(&self.heads.join(","));
        out.push_str(HEADS_END);
        if !self.notices.is_empty() {
            out.push_str(NOTICES_START);
            out.push_str(&self.notices.join(","));
            out.push_str(NOTICES_END);
        }
        out.push_str(PAYLOAD_END);
        out
    }
}

/// Fills payloads of at most `max` bytes, starting a new one when the next part does not fit.
struct Packer<'a> {
    prefix: &'a str,
    max: usize,
    current: Payload<'a>,
    done: Vec<String>,
}

impl<'a> Packer<'a> {
    /// Adds one part; false when it does not fit even in an empty payload.
    fn add(&mut self, part: Part, item: String) -> bool {
        if self.current.len_with(part, item.len()) > self.max {
            if self.current.is_empty() {
                return false;
            }
            let full = std::mem::replace(&mut self.current, Payload::new(self.prefix));
            self.done.push(full.finish());
            if self.current.len_with(part, item.len()) > self.max {
                return false;
            }
        }
        self.current.push(part, item);
        true
    }

    fn finish(mut self) -> Vec<String> {
        if !self.current.is_empty() {
            self.done.push(self.current.finish());
        }
        self.done
    }
}

/// Encodes a batch into as few payloads of at most `payload_bytes_max` bytes as it takes, and
/// counts the heads and notices that could not fit even alone.
pub fn encode(origin: &str, batch: &Batch, payload_bytes_max: usize) -> Encoded {
    let prefix = format!(
        "{{\"origin\":{},\"heads\":[",
        serde_json::Value::from(origin)
    );
    let mut packer = Packer {
        prefix: &prefix,
        max: payload_bytes_max,
        current: Payload::new(&prefix),
        done: Vec::new(),
    };
    let mut encoded = Encoded::default();
    for (conv_id, head) in batch.heads() {
        let pair = format!("[{},{head}]", serde_json::Value::from(conv_id.as_str()));
        if !packer.add(Part::Head, pair) {
            encoded.heads_oversized += 1;
        }
    }
    for notice in batch.notices() {
        let fits = serde_json::to_string(&WireNotice::from(notice))
            .is_ok_and(|item| packer.add(Part::Notice, item));
        if !fits {
            encoded.notices_oversized += 1;
        }
    }
    encoded.payloads = packer.finish();
    encoded
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::coalesce::Outbound;

    /// The limit PostgreSQL's notifications put on a payload, with a margin.
    const MAX: usize = 7_900;

    fn conv(s: &str) -> ConvId {
        ConvId::parse(s).expect("valid conv id")
    }

    fn user(s: &str) -> UserId {
        UserId::parse(s).expect("valid user id")
    }

    fn device(s: &str) -> DeviceId {
        DeviceId::parse(s).expect("valid device id")
    }

    fn batch(entries: impl IntoIterator<Item = Outbound>) -> Batch {
        let mut batch = Batch::new();
        entries.into_iter().for_each(|e| batch.add(e));
        batch
    }

    fn every_kind() -> Vec<Notice> {
        vec![
            Notice::ReadMoved {
                user_id: user("u-ana"),
                conv_id: conv("c-1"),
                read_seq: 4,
                origin_device: device("phone"),
            },
            Notice::DeviceRevoked {
                user_id: user("u-ana"),
                device_id: device("laptop"),
            },
            Notice::RoleChanged {
                conv_id: conv("c-1"),
                user_id: user("u-ben"),
                role: Role::Admin,
            },
            Notice::RouteTaken {
                user_id: user("u-ana"),
                device_id: device("phone"),
                gateway_id: "gw-b".into(),
                conn_id: "6f1c2a9e-conn".into(),
            },
        ]
    }

    #[test]
    fn a_small_batch_is_one_compact_payload() {
        let encoded = encode("gw-a", &batch([Outbound::Head(conv("c-1"), 7)]), MAX);
        assert_eq!(
            encoded.payloads,
            vec![r#"{"origin":"gw-a","heads":[["c-1",7]]}"#]
        );
        assert_eq!((encoded.heads_oversized, encoded.notices_oversized), (0, 0));
        let revoke = Notice::DeviceRevoked {
            user_id: user("u"),
            device_id: device("d"),
        };
        let encoded = encode("gw-a", &batch([Outbound::Notice(revoke)]), MAX);
        assert_eq!(
            encoded.payloads,
            vec![
                r#"{"origin":"gw-a","heads":[],"notices":[{"kind":"revoke","user":"u","device":"d"}]}"#
            ]
        );
    }

    #[test]
    fn a_taken_route_travels_as_a_kick_naming_the_replaced_gateway_and_connection() {
        let kick = Notice::RouteTaken {
            user_id: user("u"),
            device_id: device("d"),
            gateway_id: "gw-b".into(),
            conn_id: "c-9".into(),
        };
        let encoded = encode("gw-a", &batch([Outbound::Notice(kick.clone())]), MAX);
        assert_eq!(
            encoded.payloads,
            vec![
                r#"{"origin":"gw-a","heads":[],"notices":[{"kind":"kick","user":"u","device":"d","gateway":"gw-b","conn":"c-9"}]}"#
            ]
        );
        let decoded = decode(&encoded.payloads[0]).expect("payload decodes");
        assert_eq!(decoded.notices, vec![kick]);
    }

    #[test]
    fn every_kind_of_notice_travels_and_arrives_as_it_was_sent() {
        let sent = every_kind();
        let mut entries: Vec<Outbound> = sent.iter().cloned().map(Outbound::Notice).collect();
        entries.push(Outbound::Head(conv("c-2"), 11));
        let encoded = encode("gw-a", &batch(entries), MAX);
        assert_eq!(encoded.payloads.len(), 1);
        let decoded = decode(&encoded.payloads[0]).expect("payload decodes");
        assert_eq!(decoded.origin, "gw-a");
        assert_eq!(decoded.heads, vec![(conv("c-2"), 11)]);
        assert_eq!(decoded.notices, sent);
        assert_eq!(decoded.notices_unknown, 0);
    }

    #[test]
    fn a_large_batch_is_split_below_the_payload_limit_and_decodes_to_everything() {
        // 3,000 pairs of about 150 bytes and 500 notices of about 130 bytes each: far more
        // than one payload holds.
        let long = "x".repeat(130);
        let heads: HashMap<ConvId, i64> = (0..3_000)
            .map(|i| (conv(&format!("{long}-{i}")), 1_000_000_000 + i))
            .collect();
        let notices: Vec<Notice> = (0..500)
            .map(|i| Notice::ReadMoved {
                user_id: user(&format!("u-{}", &long[..60])),
                conv_id: conv(&format!("c-{i}")),
                read_seq: i,
                origin_device: device("d"),
            })
            .collect();
        let entries = heads
            .iter()
            .map(|(c, h)| Outbound::Head(c.clone(), *h))
            .chain(notices.iter().cloned().map(Outbound::Notice));
        let encoded = encode("gw-a", &batch(entries), MAX);
        assert_eq!((encoded.heads_oversized, encoded.notices_oversized), (0, 0));
        assert!(encoded.payloads.len() > 1);
        let mut seen = HashMap::new();
        let mut seen_notices = Vec::new();
        for p in &encoded.payloads {
            assert!(p.len() <= MAX, "payload of {} bytes", p.len());
            let decoded = decode(p).expect("payload decodes");
            assert_eq!(decoded.origin, "gw-a");
            for (c, h) in decoded.heads {
                assert!(seen.insert(c, h).is_none(), "a pair sent twice");
            }
            seen_notices.extend(decoded.notices);
        }
        assert_eq!(seen, heads);
        assert_eq!(seen_notices, notices, "every notice once, in order");
    }

    #[test]
    fn what_cannot_fit_even_alone_is_counted_and_the_rest_still_travels() {
        let long = conv(&"c".repeat(140));
        let entries = [
            Outbound::Head(long.clone(), 1),
            Outbound::Head(conv("c-1"), 2),
            Outbound::Notice(Notice::ReadMoved {
                user_id: user("u"),
                conv_id: long,
                read_seq: 1,
                origin_device: device("d"),
            }),
        ];
        let encoded = encode("gw-a", &batch(entries), 100);
        assert_eq!((encoded.heads_oversized, encoded.notices_oversized), (1, 1));
        assert_eq!(
            encoded.payloads,
            vec![r#"{"origin":"gw-a","heads":[["c-1",2]]}"#]
        );
    }

    #[test]
    fn malformed_payloads_are_refused() {
        for bad in [
            "",
            "hello",
            r#"{"origin":"gw-a"}"#,
            r#"{"origin":"gw-a","heads":[["c-1"]]}"#,
            r#"{"origin":"gw-a","heads":[["c-1",-1]]}"#,
            r#"{"origin":"gw-a","heads":[["bad id",1]]}"#,
            r#"{"origin":"gw-a","heads":[],"notices":[{"user":"u","device":"d"}]}"#,
            r#"{"origin":"gw-a","heads":[],"notices":[{"kind":"revoke","user":"u"}]}"#,
            r#"{"origin":"gw-a","heads":[],"notices":[{"kind":"revoke","user":"bad id","device":"d"}]}"#,
            r#"{"origin":"gw-a","heads":[],"notices":[{"kind":"read","user":"u","conv":"c","read_seq":-1,"device":"d"}]}"#,
            r#"{"origin":"gw-a","heads":[],"notices":[{"kind":"role","conv":"c","user":"u","role":"boss"}]}"#,
            r#"{"origin":"gw-a","heads":[],"notices":{"kind":"revoke"}}"#,
            r#"{"origin":"gw-a","heads":[],"notices":[{"kind":"kick","user":"u","device":"d","gateway":"gw-b"}]}"#,
            r#"{"origin":"gw-a","heads":[],"notices":[{"kind":"kick","user":"u","device":"d","gateway":"","conn":"c"}]}"#,
            r#"{"origin":"gw-a","heads":[],"notices":[{"kind":"kick","user":"u","device":"d","gateway":"gw-b","conn":""}]}"#,
            r#"{"origin":"gw-a","heads":[],"notices":[{"kind":"kick","user":"u","device":"d","gateway":7,"conn":"c"}]}"#,
        ] {
            assert!(decode(bad).is_none(), "accepted {bad:?}");
        }
    }

    #[test]
    fn a_notice_of_an_unknown_kind_is_skipped_and_the_rest_kept() {
        let payload = r#"{"origin":"gw-b","heads":[["c-1",3]],"notices":[
            {"kind":"move","user":"u","device":"d","conn":"x"},
            {"kind":"revoke","user":"u","device":"d"}]}"#;
        let decoded = decode(payload).expect("payload decodes");
        assert_eq!(decoded.heads, vec![(conv("c-1"), 3)]);
        assert_eq!(decoded.notices_unknown, 1);
        assert_eq!(
            decoded.notices,
            vec![Notice::DeviceRevoked {
                user_id: user("u"),
                device_id: device("d"),
            }]
        );
    }
}
