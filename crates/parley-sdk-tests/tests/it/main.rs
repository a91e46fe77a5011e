//! One test binary for the SDK's tests against a real server: every integration test links
//! once, which keeps builds fast and small. Each module below is one former test file;
//! `deliveries.rs` reads a session's deliveries with bounded waits, `running.rs` runs the SDK's
//! examples as processes.

mod deliveries;
mod e2ee;
mod examples;
mod gateway_failover;
mod identity;
mod media;
mod realtime_against_server;
mod receive_loop;
mod relations;
mod restart_outage;
mod running;
mod sdk_against_server;
mod sync_against_server;
