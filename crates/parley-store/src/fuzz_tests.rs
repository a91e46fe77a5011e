//! Fuzz targets for the sync-token parsers of both stores, as property tests on stable Rust.
//! Any text never panics a parser. An embedded-store token is accepted exactly when it is the
//! prefix and a clock value written in digits. A PostgreSQL token accepted here is one the
//! database accepts too, checked against the real server: a token refused only by the
//! database would reach a client as `UNAVAILABLE`, a code it retries forever. Cases per
//! target come from `PROPTEST_CASES` (the test script sets it; `scripts/fuzz.sh` runs longer).

use std::cell::{Cell, RefCell};

use proptest::prelude::*;
use sqlx::{Connection, PgConnection};

use crate::error::StoreError;
use crate::views::FeedTx;

fn embedded(token: &str) -> Result<i64, StoreError> {
    <crate::sqlite::Tx<'static> as FeedTx>::parse_since(token)
}

fn postgres_accepts_here(token: &str) -> bool {
    <crate::pg::PgTx<'static> as FeedTx>::parse_since(token).is_ok()
}

/// Text near the embedded token's rule.
fn near_clock_token() -> impl Strategy<Value = String> {
    prop_oneof![
        "(c1\\.)?[-+0-9 ]{0,21}",
        "[cs][0-9]\\.[0-9a-z]{0,5}",
        any::<i64>().prop_map(|n| format!("c1.{n}")),
        any::<String>(),
    ]
}

/// Text near PostgreSQL's snapshot syntax: `s1.` then `xmin:xmax:xip,…` with ids around the
/// edges (0, the 32-bit boundary, out of order, out of range, signs and blanks).
fn near_snapshot_token() -> impl Strategy<Value = String> {
    let id = prop_oneof![
        Just("0".to_owned()),
        Just("4294967296".to_owned()),
        Just("4294967297".to_owned()),
        Just("18446744073709551615".to_owned()),
        Just("18446744073709551616".to_owned()),
        (1u64..2_000).prop_map(|n| n.to_string()),
        "[-+ 0-9a]{0,4}",
    ];
    let ids = prop::collection::vec(id.clone(), 0..4).prop_map(|ids| ids.join(","));
    // Well-formed snapshots, with running ids anywhere in their range (duplicates included).
    let valid = (
        1u64..1u64 << 33,
        0u64..64,
        prop::collection::vec(0u64..64, 0..5),
    )
        .prop_map(|(xmin, gap, mut running)| {
            running.retain(|k| *k < gap);
            running.sort_unstable();
            let xip: Vec<String> = running.iter().map(|k| (xmin + k).to_string()).collect();
            format!("s1.{xmin}:{}:{}", xmin + gap, xip.join(","))
        });
    prop_oneof![
        valid,
        (id.clone(), id, ids).prop_map(|(xmin, xmax, xip)| format!("s1.{xmin}:{xmax}:{xip}")),
        "(s1\\.)?[0-9:, ]{0,16}",
        any::<String>(),
    ]
}

proptest! {
    #[test]
    fn fuzz_embedded_sync_tokens(token in near_clock_token()) {
        let expected = token
            .strip_prefix("c1.")
            .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|n| n.parse::<i64>().ok());
        prop_assert_eq!(embedded(&token).ok(), expected);
        if let Some(clock) = expected {
            prop_assert_eq!(embedded(&format!("c1.{clock}")).ok(), Some(clock));
        }
    }
}

#[test]
fn fuzz_postgres_sync_tokens_accepted_here_are_accepted_by_the_database() {
    let url = std::env::var("PARLEY_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let conn = RefCell::new(
        runtime
            .block_on(PgConnection::connect(&url))
            .expect("PostgreSQL for the fuzz target (PARLEY_TEST_DATABASE_URL)"),
    );
    let accepted = Cell::new(0u32);
    let mut runner = proptest::test_runner::TestRunner::default();
    runner
        .run(&near_snapshot_token(), |token| {
            if !postgres_accepts_here(&token) {
                return Ok(());
            }
            accepted.set(accepted.get() + 1);
            let snapshot = &token["s1.".len()..];
            let answer = runtime.block_on(
                sqlx::query_scalar::<_, String>("SELECT $1::text::pg_snapshot::text")
                    .bind(snapshot)
                    .fetch_one(&mut *conn.borrow_mut()),
            );
            prop_assert!(
                answer.is_ok(),
                "{token:?} refused by PostgreSQL: {answer:?}"
            );
            Ok(())
        })
        .expect("every accepted token is a snapshot PostgreSQL reads");
    // The generator reaches the accepting side, or the property above says nothing.
    assert!(accepted.get() > 0, "no generated token was accepted");
}
