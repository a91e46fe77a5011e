//! 11-access-time-matrix: every conversation endpoint and every WebSocket operation, checked
//! against membership periods at the time of access (P10, P11), for four callers of one
//! group: a member, a former member, a member who left and rejoined, and a user who never
//! was a member (compared with a conversation that does not exist). The check's logic is
//! `parley_verify`'s (`checks/access.rs`); `parley verify` runs the same against a deployment.

use anyhow::Result;
use parley_testkit::{test_on_both_stores, StoreKind};

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    check_11_access_time_matrix
);
async fn check_11_access_time_matrix(store: StoreKind) -> Result<()> {
    crate::verify_checks::passes(store, "11-access-time-matrix").await
}
