//! One test binary for the crate: every integration test links once, which keeps
//! builds fast and small. Each module below is one former test file.

mod break_controls;
mod contention;
mod contract;
mod p10_statements;
mod pg_contract;
mod pg_controls;
mod pg_failure;
mod pg_idle_transaction;
mod search_plans;
mod sqlite_batch;
mod sqlite_contract;
mod sqlite_failure;
mod sqlite_files;
