//! Fuzz targets for the frame codec, as property tests on stable Rust: any text never panics
//! the decoders of either side, and every client frame the SDK writes is read back by the
//! server's parser as the same request with the same `req_id`. Cases per target come from
//! `PROPTEST_CASES` (the test script sets it; `scripts/fuzz.sh` runs longer).

use proptest::prelude::*;
use serde_json::Value;

use crate::error::ErrorCode;
use crate::frame::{ClientFrame, Request, ServerFrame};

fn text() -> impl Strategy<Value = String> + Clone {
    prop_oneof!["[a-z0-9._:-]{0,16}", any::<String>()]
}

fn request() -> impl Strategy<Value = Request> {
    prop_oneof![
        (
            text(),
            text(),
            text(),
            any::<Option<i64>>(),
            any::<Option<i64>>()
        )
            .prop_map(|(conv_id, client_msg_id, body, reply_to, thread_root)| {
                Request::Send {
                    conv_id,
                    client_msg_id,
                    body,
                    reply_to,
                    thread_root,
                    mentions: None,
                    attachments: None,
                }
            }),
        (text(), any::<i64>(), text(), text()).prop_map(|(conv_id, seq, client_msg_id, body)| {
            Request::Edit {
                conv_id,
                seq,
                client_msg_id,
                body,
            }
        }),
        (text(), any::<i64>(), text(), any::<bool>()).prop_map(|(conv_id, seq, key, remove)| {
            Request::React {
                conv_id,
                seq,
                key,
                remove,
            }
        }),
        (text(), any::<i64>()).prop_map(|(conv_id, seq)| Request::Read { conv_id, seq }),
        (
            text(),
            any::<i64>(),
            any::<Option<u32>>(),
            any::<Option<i64>>()
        )
            .prop_map(|(conv_id, after, limit, epoch)| Request::Sync {
                conv_id,
                after,
                limit,
                epoch
            }),
        Just(Request::Ping),
    ]
}

proptest! {
    #[test]
    fn fuzz_server_frames_of_any_text(text in any::<String>()) {
        if let Err(e) = ServerFrame::parse(&text) {
            // The error names a position, never the content it could not read.
            prop_assert!(text.len() < 8 || !e.reason.contains(text.as_str()));
        }
        let _ = ErrorCode::parse(&text);
    }

    #[test]
    fn fuzz_client_frames_round_trip(req_id in text(), request in request()) {
        let frame = ClientFrame { req_id: req_id.clone(), request };
        let value: Value = serde_json::from_str(&frame.to_json()).expect("a frame is JSON");
        let read = ClientFrame::<String>::from_value(value).expect("the frame reads back");
        prop_assert_eq!(read, frame);
    }
}
