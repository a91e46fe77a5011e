//! One test binary for the crate: every integration test links once, which keeps
//! builds fast and small. Each module below is one former test file.

mod bench_gateways;
mod bench_load_model;
mod break_process;
mod chaos;
mod conn_hardening;
mod demo;
mod observability;
mod push_failover;
mod readme_truth;
mod restart_safety;
mod user_cli;
mod verify_process;
