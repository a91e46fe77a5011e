//! Group fanout over real sockets (chapter 08): pull groups get coalesced hints instead of
//! events, and a group switches to pull at the join that reaches the threshold. The checks'
//! logic is `parley_verify`'s (`parley verify` runs the same against a deployment); the
//! coalescing itself is checked exactly, on a paused clock, in `gateway::hints`.

use anyhow::Result;
use parley_testkit::{test_on_both_stores, ServerConfig, StoreKind};

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    check_08_pull_group_hints_coalesced
);
/// 08-pull-group-hints-coalesced: a burst into a pull group reaches each device as a few
/// `hint` frames about one interval apart and no `event` frame; every device (two of one user)
/// gets its own; the device pulls every message with `sync`; a push group beside it still gets
/// full events; a lone message after a quiet interval is hinted at once.
async fn check_08_pull_group_hints_coalesced(store: StoreKind) -> Result<()> {
    crate::verify_checks::passes(store, "08-pull-group-hints-coalesced").await
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    check_08_threshold_switches_to_pull_ws
);
/// 08-threshold-switches-to-pull over sockets: a group of two with threshold 3 pushes full
/// events; the join of the third member switches it to pull in the store and in the gateway's
/// member cache: the join and the next message arrive as hints, no event.
async fn check_08_threshold_switches_to_pull_ws(store: StoreKind) -> Result<()> {
    let config = ServerConfig {
        pull_threshold: 3,
        ..ServerConfig::default()
    };
    crate::verify_checks::passes_with(store, config, "08-threshold-switches-to-pull").await
}
