//! Fuzz targets for the id and body parsers, as property tests on stable Rust: any text, and
//! text made near the rules' edges, never panics a parser, and each parser accepts exactly
//! what its rule says and keeps what it accepted unchanged. Cases per target come from
//! `PROPTEST_CASES` (the test script sets it; `scripts/fuzz.sh` runs longer).

use proptest::prelude::*;

use crate::ids::{
    Body, BodyError, ClientMsgId, ConvId, DeviceId, IdError, UserId, CLIENT_MSG_ID_LEN_MAX,
    CONV_ID_LEN_MAX, DIRECT_PREFIX, USER_ID_LEN_MAX,
};

/// Text near the id rules' edges: allowed characters, colons, dot segments, lengths around
/// the limits, control characters, U+0000 and characters of more than one byte.
fn near_id() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z0-9._@:-]{0,150}",
        "\\.{1,3}",
        "dm:[a-z.]{0,70}(:[a-z]{0,70})?",
        "[a-z\\x00-\\x1f\\x7f\\u{a0}\\u{e9}\\u{1f600}/%? ]{0,12}",
        any::<String>(),
    ]
}

/// The rule of user, device and conversation ids, written out independently of the parser.
fn is_token(s: &str, max: usize, colon_ok: bool) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s != "."
        && s != ".."
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-@".contains(c) || (colon_ok && c == ':'))
}

proptest! {
    #[test]
    fn fuzz_user_and_device_ids(s in near_id()) {
        let expected = is_token(&s, USER_ID_LEN_MAX, false);
        match UserId::parse(&s) {
            Ok(id) => prop_assert!(expected && id.as_str() == s, "accepted {s:?}"),
            Err(_) => prop_assert!(!expected, "refused {s:?}"),
        }
        prop_assert_eq!(DeviceId::parse(&s).is_ok(), expected);
    }

    #[test]
    fn fuzz_conversation_ids(s in near_id()) {
        let expected = is_token(&s, CONV_ID_LEN_MAX, true);
        match ConvId::parse(&s) {
            Ok(id) => prop_assert!(expected && id.as_str() == s, "accepted {s:?}"),
            Err(_) => prop_assert!(!expected, "refused {s:?}"),
        }
        let group = ConvId::parse_group(&s);
        prop_assert_eq!(group.is_ok(), expected && !s.starts_with(DIRECT_PREFIX));
        if expected && s.starts_with(DIRECT_PREFIX) {
            prop_assert_eq!(group.err(), Some(IdError::ReservedPrefix));
        }
    }

    #[test]
    fn fuzz_client_msg_ids(s in near_id()) {
        let expected = !s.is_empty()
            && s.len() <= CLIENT_MSG_ID_LEN_MAX
            && !s.chars().any(char::is_control);
        match ClientMsgId::parse(&s) {
            Ok(id) => prop_assert!(expected && id.as_str() == s, "accepted {s:?}"),
            Err(_) => prop_assert!(!expected, "refused {s:?}"),
        }
    }

    #[test]
    fn fuzz_bodies(s in any::<String>(), max in 0usize..64) {
        match Body::parse(&s, max) {
            Ok(body) => {
                prop_assert_eq!(body.as_str(), s.as_str());
                prop_assert!(!s.is_empty() && s.len() <= max && !s.contains('\0'));
            }
            Err(BodyError::Empty) => prop_assert!(s.is_empty()),
            Err(BodyError::TooLarge { len, max: limit }) => {
                prop_assert!(len == s.len() && len > limit && limit == max);
            }
            Err(BodyError::Unstorable(_)) => prop_assert!(s.contains('\0')),
        }
    }

    #[test]
    fn fuzz_direct_ids_of_any_two_users(a in "[a-z0-9._@-]{1,64}", b in "[a-z0-9._@-]{1,64}") {
        prop_assume!(a != "." && a != ".." && b != "." && b != "..");
        let (a, b) = (UserId::parse(&a).expect("a user id"), UserId::parse(&b).expect("a user id"));
        let direct = ConvId::direct(&a, &b);
        // A direct id of two valid user ids is itself a valid conversation id, the same both ways.
        prop_assert!(ConvId::parse(direct.as_str()).is_ok(), "{direct}");
        prop_assert_eq!(direct, ConvId::direct(&b, &a));
    }
}
