//! One test binary for the crate: every integration test links once, which keeps
//! builds fast and small. Each module below is one former test file.

mod realtime_against_server;
mod realtime_fake_server;
mod sdk_against_server;
mod send_retry;
mod sync_against_server;
mod sync_fake_server;
