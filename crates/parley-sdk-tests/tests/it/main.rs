//! One test binary for the SDK's tests against a real server: every integration test links
//! once, which keeps builds fast and small. Each module below is one former test file.

mod realtime_against_server;
mod sdk_against_server;
mod sync_against_server;
