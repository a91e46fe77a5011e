//! Fuzz targets for the bus payload codec, as property tests on stable Rust. A gateway reads
//! payloads that other processes wrote: any text never panics the decoder, and what it accepts
//! holds only parsed ids, heads of zero or more and events of seq one or more. Any batch,
//! events included, encodes into payloads within the size limit that decode back to the
//! batch, less what was counted as too large to send.
//! Cases per target come from `PROPTEST_CASES` (the test script sets it; `scripts/fuzz.sh`
//! runs longer).

use std::collections::HashMap;
use std::sync::Arc;

use chrono::DateTime;
use parley_domain::{ConvId, DeviceId, Event, EventKind, Role, UserId};
use proptest::prelude::*;
use serde_json::{json, Value};

use crate::coalesce::{Batch, Outbound};
use crate::codec::{decode, encode};
use crate::Notice;

fn id() -> impl Strategy<Value = String> + Clone {
    prop_oneof!["[a-z0-9][a-z0-9._-]{0,11}", "[a-z0-9][a-z0-9._-]{59,63}"]
}

fn notice() -> impl Strategy<Value = Notice> {
    let user = id().prop_map(|s| UserId::parse(&s).expect("generated user id"));
    let device = id().prop_map(|s| DeviceId::parse(&s).expect("generated device id"));
    let conv = id().prop_map(|s| ConvId::parse(&s).expect("generated conv id"));
    let role = prop_oneof![Just(Role::Owner), Just(Role::Admin), Just(Role::Member)];
    prop_oneof![
        (user.clone(), conv.clone(), 0i64..i64::MAX, device.clone()).prop_map(
            |(user_id, conv_id, read_seq, origin_device)| Notice::ReadMoved {
                user_id,
                conv_id,
                read_seq,
                origin_device,
            }
        ),
        (user.clone(), device.clone())
            .prop_map(|(user_id, device_id)| Notice::DeviceRevoked { user_id, device_id }),
        // Gateway and connection ids are free text: quotes, escapes and any script travel.
        (user.clone(), device, ".{1,40}", ".{1,40}").prop_map(
            |(user_id, device_id, gateway_id, conn_id)| Notice::RouteTaken {
                user_id,
                device_id,
                gateway_id,
                conn_id,
            }
        ),
        (conv, user, role).prop_map(|(conv_id, user_id, role)| Notice::RoleChanged {
            conv_id,
            user_id,
            role
        }),
    ]
}

/// Events of every kind, with free text in the body and client message id and sizes on both
/// sides of the inline limit.
fn event() -> impl Strategy<Value = Event> {
    let kind = prop_oneof![
        Just(EventKind::Msg),
        Just(EventKind::Recall),
        Just(EventKind::Join),
        Just(EventKind::Leave)
    ];
    let body = prop_oneof![
        "[^\\x00]{1,40}",
        (1usize..6_000).prop_map(|n| "b".repeat(n))
    ];
    (
        (id(), 1i64..i64::MAX, kind, 0i64..4_000_000_000_000_000),
        (
            any::<u128>(),
            id(),
            id(),
            "[^\\x00\\p{Cc}]{1,30}",
            body,
            any::<bool>(),
        ),
        (id(), any::<bool>()),
    )
        .prop_map(
            |(
                (conv, seq, kind, at_us),
                (uuid, user, device, key, body, recalled),
                (subject, with_target),
            )| {
                Event {
                    conv_id: ConvId::parse(&conv).expect("generated conv id"),
                    seq,
                    kind,
                    created_at: DateTime::from_timestamp_micros(at_us).expect("generated time"),
                    message_id: Some(uuid::Uuid::from_u128(uuid)),
                    sender_user: Some(UserId::parse(&user).expect("generated user id")),
                    sender_device: Some(device),
                    client_msg_id: Some(key),
                    body: (!recalled).then_some(body),
                    recalled,
                    subject_user: Some(UserId::parse(&subject).expect("generated user id")),
                    target_seq: (with_target && seq > 1).then_some(seq / 2),
                    rel: None,
                    mls: None,
                }
            },
        )
}

fn outbound() -> impl Strategy<Value = Outbound> {
    prop_oneof![
        event().prop_map(|e| Outbound::Event(Arc::new(e))),
        (id(), 0i64..i64::MAX).prop_map(|(conv, head)| Outbound::Head(
            ConvId::parse(&conv).expect("generated conv id"),
            head
        )),
        notice().prop_map(Outbound::Notice),
    ]
}

/// Payloads near the wire format: right and wrong types in each field, unknown notice kinds.
fn near_payload() -> impl Strategy<Value = String> {
    let value = prop_oneof![
        Just(Value::Null),
        any::<i64>().prop_map(Value::from),
        "[a-z:.\\x00 ]{0,8}".prop_map(Value::from),
        Just(json!([])),
        Just(json!({"kind": "read", "user": "u", "conv": "c", "read_seq": -1, "device": "d"})),
        Just(json!({"kind": "revoke", "user": "u", "device": "d"})),
        Just(json!({"kind": "role", "conv": "c", "user": "u", "role": "king"})),
        Just(json!({"kind": "kick", "user": "u", "device": "d", "gateway": "g", "conn": "c"})),
        Just(json!({"kind": "kick", "user": "u", "device": "d", "gateway": "", "conn": 1})),
        Just(json!({"kind": "future", "anything": 1})),
        Just(json!({"kind": 7})),
        Just(json!({"conv": "c", "seq": 2, "kind": "msg", "at_us": 1, "body": "hi"})),
        Just(json!({"conv": "c", "seq": 0, "kind": "msg", "at_us": 1})),
        Just(json!({"conv": "c", "seq": 2, "kind": "join", "at_us": 1, "target_seq": 5})),
        Just(json!({"conv": "c", "seq": 2, "kind": "msg", "at_us": 1, "body": ""})),
        Just(json!({"conv": "c", "seq": 2, "kind": "msg", "at_us": 1, "message_id": "x"})),
    ];
    let heads = prop::collection::vec((value.clone(), value.clone()), 0..4).prop_map(|pairs| {
        Value::from(
            pairs
                .into_iter()
                .map(|(a, b)| json!([a, b]))
                .collect::<Vec<_>>(),
        )
    });
    (
        value.clone(),
        heads,
        prop::collection::vec(value.clone(), 0..4),
        prop::collection::vec(value, 0..4),
    )
        .prop_map(|(origin, heads, events, notices)| {
            json!({ "origin": origin, "heads": heads, "events": events, "notices": notices })
                .to_string()
        })
}

proptest! {
    #[test]
    fn fuzz_payloads_of_any_text(text in any::<String>()) {
        let _ = decode(&text);
    }

    #[test]
    fn fuzz_payloads_near_the_format(text in near_payload()) {
        if let Some(decoded) = decode(&text) {
            prop_assert!(decoded.heads.iter().all(|(_, head)| *head >= 0), "{text}");
            let names_nothing = |n: &Notice| matches!(n, Notice::RouteTaken { gateway_id, conn_id, .. }
                if gateway_id.is_empty() || conn_id.is_empty());
            prop_assert!(!decoded.notices.iter().any(names_nothing), "{text}");
            let sound = |e: &Event| e.seq >= 1 && e.target_seq.is_none_or(|t| t >= 1 && t < e.seq)
                && e.body.as_ref().is_none_or(|b| !b.is_empty());
            prop_assert!(decoded.events.iter().all(sound), "{text}");
        }
    }

    #[test]
    fn fuzz_batches_survive_encoding(
        entries in prop::collection::vec(outbound(), 0..40),
        payload_bytes_max in 64usize..600,
    ) {
        let mut batch = Batch::new();
        entries.into_iter().for_each(|e| batch.add(e));
        let encoded = encode("gw-1", &batch, payload_bytes_max);
        let mut heads = HashMap::new();
        let mut notices = Vec::new();
        let mut events: Vec<Event> = Vec::new();
        for payload in &encoded.payloads {
            prop_assert!(payload.len() <= payload_bytes_max, "{} bytes", payload.len());
            let decoded = decode(payload).expect("an encoded payload decodes");
            prop_assert_eq!(decoded.origin.as_str(), "gw-1");
            prop_assert_eq!(decoded.notices_unknown, 0);
            heads.extend(decoded.heads);
            notices.extend(decoded.notices);
            events.extend(decoded.events);
        }
        prop_assert_eq!(events.len() + encoded.events_left_out, batch.events_len());
        for event in &events {
            let kept = batch.events(&event.conv_id);
            prop_assert!(kept.iter().any(|k| **k == *event), "an event not in the batch");
            prop_assert!(batch.heads().get(&event.conv_id).is_some_and(|h| *h >= event.seq));
        }
        prop_assert_eq!(heads.len() + encoded.heads_oversized, batch.heads().len());
        for (conv, head) in &heads {
            prop_assert_eq!(batch.heads().get(conv), Some(head));
        }
        prop_assert_eq!(notices.len() + encoded.notices_oversized, batch.notices().len());
        prop_assert!(notices.iter().all(|n| batch.notices().contains(n)));
    }
}
