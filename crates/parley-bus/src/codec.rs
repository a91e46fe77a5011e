//! The payload of one message between gateways, as compact JSON:
//!
//! ```text
//! {"origin":"gw-a","heads":[["conv",12],["c2",7]],
//!  "events":[{"conv":"conv","seq":12,"kind":"msg","at_us":1700000000000000,"body":"hi",..}],
//!  "notices":[{"kind":"revoke","user":"u","device":"d"}]}
//! ```
//!
//! `origin` names the sending gateway, so it can ignore its own payloads coming back. `heads`
//! holds the coalesced heads; `events` the committed events a bus carries along with their
//! heads, each of at most [`EVENT_INLINE_BYTES_MAX`] bytes encoded, so a receiving gateway
//! pushes them without reading the log; `notices` the notices in order. `events` and
//! `notices` are left out when empty, so a payload of heads alone reads as it did before
//! either existed, and a gateway that does not know `events` still reads every head. An event
//! too large to travel is left out and counted: its head still travels, and the receiver reads
//! the event from the log. A transport limits a payload's size; [`encode`] splits a batch
//! into as many payloads as needed, a conversation's events before its head.
//!
//! Decoding trusts nothing: the channel may be open to other clients, so anything that is not
//! what a gateway sends refuses the whole payload; every id of an event is parsed as the
//! domain parses it. The one exception is a notice of a kind this version does not know,
//! which is skipped and counted, so a newer gateway can add kinds without cutting older ones
//! off.

use chrono::DateTime;
use parley_domain::{
    Attachment, Body, ClientMsgId, ConvId, DeviceId, Event, EventKind, ReactionKey, Relations,
    Role, UserId,
};
use serde::{Deserialize, Serialize};

use crate::coalesce::Batch;
use crate::Notice;

/// Largest encoded event that travels in a payload; a larger one travels as its head only.
/// Small messages, the bulk of the traffic, fit; a payload still holds many events.
pub const EVENT_INLINE_BYTES_MAX: usize = 4_096;

/// A batch as payloads, and what could not be sent because it did not fit even alone.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Encoded {
    pub payloads: Vec<String>,
    pub heads_oversized: usize,
    pub notices_oversized: usize,
    /// Events of the batch that travel as their heads only: larger than
    /// [`EVENT_INLINE_BYTES_MAX`] or than a payload. Nothing is lost: the receiver reads them
    /// from the log.
    pub events_left_out: usize,
}

/// One payload as received.
#[derive(Debug, PartialEq)]
pub struct Decoded {
    pub origin: String,
    pub heads: Vec<(ConvId, i64)>,
    /// The events carried, in the order they were encoded: each conversation's in seq order.
    pub events: Vec<Event>,
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
    Typing {
        conv: String,
        user: String,
        to: Vec<String>,
    },
    Presence {
        user: String,
        online: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        last_seen_us: Option<i64>,
        to: Vec<String>,
    },
}

/// The `kind` of every [`WireNotice`]; any other kind is skipped on arrival.
const KNOWN_KINDS: [&str; 6] = ["read", "revoke", "role", "kick", "typing", "presence"];

/// Every id of a recipient list parsed; `None` when any is invalid or the list is too long.
fn parse_recipients(to: Vec<String>) -> Option<Vec<UserId>> {
    if to.len() > crate::notice::NOTICE_RECIPIENTS_LEN_MAX {
        return None;
    }
    to.iter().map(|u| UserId::parse(u).ok()).collect()
}

fn recipient_strings(recipients: &[UserId]) -> Vec<String> {
    recipients.iter().map(ToString::to_string).collect()
}

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
            Notice::Typing {
                conv_id,
                user_id,
                recipients,
            } => Self::Typing {
                conv: conv_id.to_string(),
                user: user_id.to_string(),
                to: recipient_strings(recipients),
            },
            Notice::Presence {
                user_id,
                online,
                last_seen,
                recipients,
            } => Self::Presence {
                user: user_id.to_string(),
                online: *online,
                last_seen_us: last_seen.map(|t| t.timestamp_micros()),
                to: recipient_strings(recipients),
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
            Self::Typing { conv, user, to } => Notice::Typing {
                conv_id: ConvId::parse(&conv).ok()?,
                user_id: UserId::parse(&user).ok()?,
                recipients: parse_recipients(to)?,
            },
            Self::Presence {
                user,
                online,
                last_seen_us,
                to,
            } => Notice::Presence {
                user_id: UserId::parse(&user).ok()?,
                online,
                last_seen: match last_seen_us {
                    None => None,
                    Some(us) => Some(DateTime::from_timestamp_micros(us)?),
                },
                recipients: parse_recipients(to)?,
            },
        })
    }
}

/// An event as it travels: ids as plain strings, the commit time in microseconds since the
/// epoch (the precision of the stores and of the client wire format), fields of other kinds
/// left out.
#[derive(Serialize, Deserialize)]
struct WireEvent {
    conv: String,
    seq: i64,
    kind: String,
    at_us: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    message_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sender_user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sender_device: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    client_msg_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    body: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    recalled: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    subject_user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    target_seq: Option<i64>,
    /// The event's own relations (docs/RELATIONS.md); what reads fold in never travels, since
    /// a committed event is announced as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reply_to: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    thread_root: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    mentions: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    key: Option<String>,
    /// A message's attachments as sent (docs/MEDIA.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    attachments: Vec<Attachment>,
}

impl From<&Event> for WireEvent {
    fn from(event: &Event) -> Self {
        Self {
            conv: event.conv_id.to_string(),
            seq: event.seq,
            kind: event.kind.as_str().to_owned(),
            at_us: event.created_at.timestamp_micros(),
            message_id: event.message_id.map(|m| m.to_string()),
            sender_user: event.sender_user.as_ref().map(ToString::to_string),
            sender_device: event.sender_device.clone(),
            client_msg_id: event.client_msg_id.clone(),
            body: event.body.clone(),
            recalled: event.recalled,
            subject_user: event.subject_user.as_ref().map(ToString::to_string),
            target_seq: event.target_seq,
            reply_to: event.relations().reply_to,
            thread_root: event.relations().thread_root,
            mentions: event
                .relations()
                .mentions
                .iter()
                .map(ToString::to_string)
                .collect(),
            key: event.relations().key.clone(),
            attachments: event.relations().attachments.clone(),
        }
    }
}

/// `Some(None)` for an absent field, `Some(Some(v))` for a valid one, `None` for an invalid one.
fn parse_opt<T>(field: Option<String>, parse: impl FnOnce(&str) -> Option<T>) -> Option<Option<T>> {
    match field {
        None => Some(None),
        Some(s) => parse(&s).map(Some),
    }
}

impl WireEvent {
    /// The event with every id parsed; `None` when any field is not valid.
    fn parse(self) -> Option<Event> {
        let seq = (self.seq >= 1).then_some(self.seq)?;
        let earlier = |s: Option<i64>| match s {
            None => Some(None),
            Some(t) => (1..seq).contains(&t).then_some(Some(t)),
        };
        let target_seq = earlier(self.target_seq)?;
        let mentions = self
            .mentions
            .iter()
            .map(|m| UserId::parse(m).ok())
            .collect::<Option<Vec<_>>>()?;
        let rel = Relations {
            reply_to: earlier(self.reply_to)?,
            thread_root: earlier(self.thread_root)?,
            mentions,
            key: parse_opt(self.key, |k| {
                ReactionKey::parse(k).ok().map(|k| k.as_str().to_owned())
            })?,
            attachments: self.attachments,
            ..Relations::default()
        };
        Some(Event {
            conv_id: ConvId::parse(&self.conv).ok()?,
            seq,
            // MLS events never travel (see `encode`), so a payload carrying one is not a
            // gateway's.
            kind: EventKind::parse(&self.kind).filter(|k| !k.is_mls())?,
            created_at: DateTime::from_timestamp_micros(self.at_us)?,
            message_id: parse_opt(self.message_id, |s| uuid::Uuid::parse_str(s).ok())?,
            sender_user: parse_opt(self.sender_user, |s| UserId::parse(s).ok())?,
            sender_device: parse_opt(self.sender_device, |s| {
                DeviceId::parse(s).ok().map(|d| d.to_string())
            })?,
            client_msg_id: parse_opt(self.client_msg_id, |s| {
                ClientMsgId::parse(s).ok().map(|_| s.to_owned())
            })?,
            // An event that travels is at most EVENT_INLINE_BYTES_MAX bytes encoded, so its
            // body is too.
            body: parse_opt(self.body, |s| {
                Body::parse(s, EVENT_INLINE_BYTES_MAX)
                    .ok()
                    .map(|b| b.as_str().to_owned())
            })?,
            recalled: self.recalled,
            subject_user: parse_opt(self.subject_user, |s| UserId::parse(s).ok())?,
            target_seq,
            rel: rel.boxed(),
            mls: None,
        })
    }
}

#[derive(Deserialize)]
struct WirePayload {
    origin: String,
    heads: Vec<(String, i64)>,
    #[serde(default)]
    events: Vec<WireEvent>,
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
    let mut events = Vec::with_capacity(wire.events.len());
    for event in wire.events {
        events.push(event.parse()?);
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
        events,
        notices,
        notices_unknown,
    })
}

const HEADS_END: &str = "]";
const EVENTS_START: &str = ",\"events\":[";
const NOTICES_START: &str = ",\"notices\":[";
const LIST_END: &str = "]";
const PAYLOAD_END: &str = "}";

/// The lists of a payload, in the order they are written.
#[derive(Clone, Copy)]
enum Part {
    Head = 0,
    Event = 1,
    Notice = 2,
}

/// One list of a payload being filled: its items and their bytes in total.
#[derive(Default)]
struct List {
    items: Vec<String>,
    bytes: usize,
}

/// One payload being filled, with its encoded length kept exact as parts are added.
struct Payload<'a> {
    prefix: &'a str,
    lists: [List; 3],
}

/// Bytes of `n` items of `bytes` in total between brackets: the items and their commas.
fn joined_len(n: usize, bytes: usize) -> usize {
    bytes + n.saturating_sub(1)
}

/// Bytes of an optional list of `n` items of `bytes` in total: nothing when it is empty.
fn optional_len(start: &str, n: usize, bytes: usize) -> usize {
    match n {
        0 => 0,
        n => start.len() + joined_len(n, bytes) + LIST_END.len(),
    }
}

impl<'a> Payload<'a> {
    fn new(prefix: &'a str) -> Self {
        Self {
            prefix,
            lists: Default::default(),
        }
    }

    fn is_empty(&self) -> bool {
        self.lists.iter().all(|l| l.items.is_empty())
    }

    /// The encoded length with `extra` more bytes in one more item of `part`.
    fn len_with(&self, part: Part, extra: usize) -> usize {
        let mut sizes = self.lists.each_ref().map(|l| (l.items.len(), l.bytes));
        let grown = &mut sizes[part as usize];
        *grown = (grown.0 + 1, grown.1 + extra);
        let [heads, events, notices] = sizes;
        self.prefix.len()
            + joined_len(heads.0, heads.1)
            + HEADS_END.len()
            + optional_len(EVENTS_START, events.0, events.1)
            + optional_len(NOTICES_START, notices.0, notices.1)
            + PAYLOAD_END.len()
    }

    fn push(&mut self, part: Part, item: String) {
        let list = &mut self.lists[part as usize];
        list.bytes += item.len();
        list.items.push(item);
    }

    fn finish(self) -> String {
        let [heads, events, notices] = self.lists;
        let mut out = String::from(self.prefix);
        out.push_str(&heads.items.join(","));
        out.push_str(HEADS_END);
        for (start, list) in [(EVENTS_START, events), (NOTICES_START, notices)] {
            if !list.items.is_empty() {
                out.push_str(start);
                out.push_str(&list.items.join(","));
                out.push_str(LIST_END);
            }
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
/// counts the heads and notices that could not fit even alone and the events left out.
/// A conversation's events go before its head, so when a split falls between them the
/// receiver gets the events first and pushes them without reading the log.
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
        for event in batch.events(conv_id) {
            // MLS events (docs/E2EE.md) travel as their heads only: their opaque messages are
            // large, and a Welcome must reach only its devices, which the log read decides.
            let item = (event.mls.is_none())
                .then(|| serde_json::to_string(&WireEvent::from(&**event)).ok())
                .flatten()
                .filter(|item| item.len() <= EVENT_INLINE_BYTES_MAX);
            if !item.is_some_and(|item| packer.add(Part::Event, item)) {
                encoded.events_left_out += 1;
            }
        }
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
    use std::sync::Arc;

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

    fn at() -> chrono::DateTime<chrono::Utc> {
        DateTime::from_timestamp_micros(1_700_000_000_123_456).expect("valid time")
    }

    /// A message of `body` at `seq`, every field a message has filled in.
    fn msg(c: &str, seq: i64, body: &str) -> Event {
        Event {
            conv_id: conv(c),
            seq,
            kind: EventKind::Msg,
            created_at: at(),
            message_id: Some(uuid::Uuid::from_u128(
                0x6f1c_2a9e_0000_4000_8000_0000_0000_0001,
            )),
            sender_user: Some(user("u-ana")),
            sender_device: Some("phone".into()),
            client_msg_id: Some("k-1 \"quoted\" ✓".into()),
            body: Some(body.into()),
            recalled: false,
            subject_user: None,
            target_seq: None,
            rel: None,
            mls: None,
        }
    }

    /// One event of every kind, a recalled message among them.
    fn every_event_kind() -> Vec<Event> {
        let ana = user("u-ana");
        let mut recalled = msg("c-1", 2, "x");
        recalled.body = None;
        recalled.recalled = true;
        vec![
            Event::membership(&conv("c-1"), 1, EventKind::Join, &ana, &user("u-ben"), at()),
            recalled,
            msg("c-1", 3, "hello\nworld \u{1F600}"),
            Event::recall(&conv("c-1"), 4, &ana, 2, at()),
            Event::membership(&conv("c-1"), 5, EventKind::Leave, &ana, &ana, at()),
            {
                let mut reply = msg("c-1", 6, "@u-ben see above");
                reply.rel = Relations {
                    reply_to: Some(3),
                    thread_root: Some(3),
                    mentions: vec![user("u-ben")],
                    ..Relations::default()
                }
                .boxed();
                reply
            },
            {
                let mut edit = Event::edit(&conv("c-1"), 7, &ana, 3, "hello again", at());
                edit.sender_device = Some("d1".into());
                edit.client_msg_id = Some("e-1".into());
                edit
            },
            Event::reaction(&conv("c-1"), 8, &ana, 3, "👍", true, at()),
            Event::reaction(&conv("c-1"), 9, &ana, 3, "👍", false, at()),
        ]
    }

    fn events_batch(events: &[Event]) -> Batch {
        batch(events.iter().cloned().map(|e| Outbound::Event(Arc::new(e))))
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
            Notice::Typing {
                conv_id: conv("c-1"),
                user_id: user("u-ana"),
                recipients: vec![user("u-ben"), user("u-cy")],
            },
            Notice::Presence {
                user_id: user("u-ana"),
                online: true,
                last_seen: None,
                recipients: vec![user("u-ben")],
            },
            Notice::Presence {
                user_id: user("u-ana"),
                online: false,
                last_seen: Some(at()),
                recipients: vec![user("u-ben")],
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
            r#"{"origin":"gw-a","heads":[],"notices":[{"kind":"typing","conv":"c","user":"u","to":["bad id"]}]}"#,
            r#"{"origin":"gw-a","heads":[],"notices":[{"kind":"presence","user":"u","online":"yes","to":[]}]}"#,
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

    #[test]
    fn events_travel_with_their_head_and_arrive_as_they_were_sent() {
        let sent = every_event_kind();
        let encoded = encode("gw-a", &events_batch(&sent), MAX);
        assert_eq!(encoded.payloads.len(), 1);
        assert_eq!(encoded.events_left_out, 0);
        let decoded = decode(&encoded.payloads[0]).expect("payload decodes");
        assert_eq!(decoded.heads, vec![(conv("c-1"), 9)]);
        assert_eq!(decoded.events, sent);
    }

    #[test]
    fn a_batch_without_events_encodes_as_before() {
        let encoded = encode("gw-a", &batch([Outbound::Head(conv("c-1"), 7)]), MAX);
        assert!(!encoded.payloads[0].contains("events"));
        let decoded = decode(r#"{"origin":"gw-a","heads":[["c-1",7]]}"#).expect("decodes");
        assert!(decoded.events.is_empty());
    }

    #[test]
    fn an_event_too_large_travels_as_its_head_only() {
        let small = msg("c-1", 1, "hi");
        let large = msg("c-1", 2, &"x".repeat(EVENT_INLINE_BYTES_MAX));
        let after = msg("c-1", 3, "after");
        let encoded = encode(
            "gw-a",
            &events_batch(&[small.clone(), large, after.clone()]),
            MAX,
        );
        assert_eq!(encoded.events_left_out, 1);
        assert_eq!((encoded.heads_oversized, encoded.notices_oversized), (0, 0));
        let decoded = decode(&encoded.payloads[0]).expect("payload decodes");
        assert_eq!(decoded.heads, vec![(conv("c-1"), 3)]);
        assert_eq!(decoded.events, vec![small, after]);
        // Just at the limit still travels.
        let mut edge = msg("c-1", 1, "");
        let bare = serde_json::to_string(&WireEvent::from(&edge))
            .expect("encodes")
            .len();
        edge.body = Some("y".repeat(EVENT_INLINE_BYTES_MAX - bare));
        let encoded = encode("gw-a", &events_batch(&[edge.clone()]), MAX * 2);
        assert_eq!(encoded.events_left_out, 0);
        let decoded = decode(&encoded.payloads[0]).expect("payload decodes");
        assert_eq!(decoded.events, vec![edge]);
    }

    #[test]
    fn events_split_across_payloads_each_below_the_limit_and_in_order() {
        let body = "b".repeat(1_000);
        let sent: Vec<Event> = (1..=40).map(|seq| msg("c-1", seq, &body)).collect();
        let encoded = encode("gw-a", &events_batch(&sent), MAX);
        assert!(encoded.payloads.len() > 1);
        assert_eq!(encoded.events_left_out, 0);
        let mut events = Vec::new();
        let mut heads = Vec::new();
        for p in &encoded.payloads {
            assert!(p.len() <= MAX, "payload of {} bytes", p.len());
            let decoded = decode(p).expect("payload decodes");
            events.extend(decoded.events);
            heads.extend(decoded.heads);
        }
        assert_eq!(events, sent);
        assert_eq!(heads, vec![(conv("c-1"), 40)], "the head after its events");
        assert!(!encoded.payloads[0].contains(r#""heads":[["#));
    }

    #[test]
    fn a_malformed_event_refuses_the_whole_payload() {
        let good = serde_json::to_value(WireEvent::from(&msg("c-1", 3, "hi"))).expect("encodes");
        let with = |field: &str, value: serde_json::Value| {
            let mut event = good.clone();
            event[field] = value;
            serde_json::json!({"origin": "gw-a", "heads": [["c-1", 3]], "events": [good, event]})
                .to_string()
        };
        let without = |field: &str| {
            let mut event = good.clone();
            event.as_object_mut().expect("an object").remove(field);
            serde_json::json!({"origin": "gw-a", "heads": [], "events": [event]}).to_string()
        };
        // The negative control: the unaltered event is accepted.
        assert!(decode(&with("seq", 4.into())).is_some());
        for bad in [
            with("conv", "bad id".into()),
            with("seq", 0.into()),
            with("seq", (-3).into()),
            with("seq", "4".into()),
            with("kind", "shout".into()),
            with("at_us", i64::MAX.into()),
            with("message_id", "not-a-uuid".into()),
            with("sender_user", "bad id".into()),
            with("sender_device", "a:b".into()),
            with("client_msg_id", "".into()),
            with("body", "".into()),
            with("body", "nul\0".into()),
            with("body", "z".repeat(EVENT_INLINE_BYTES_MAX + 1).into()),
            with("subject_user", "".into()),
            with("target_seq", 3.into()),
            with("target_seq", 0.into()),
            with("recalled", "yes".into()),
            without("conv"),
            without("seq"),
            without("kind"),
            without("at_us"),
            r#"{"origin":"gw-a","heads":[],"events":{}}"#.to_owned(),
            r#"{"origin":"gw-a","heads":[],"events":[7]}"#.to_owned(),
        ] {
            assert!(decode(&bad).is_none(), "accepted {bad}");
        }
    }
}
