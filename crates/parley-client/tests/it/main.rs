//! One test binary for the crate: every integration test links once, which keeps builds fast
//! and small. Each module below is one former test file. These tests need no server (scripted
//! peers stand in for it); the SDK's tests against a real server are in
//! `crates/parley-sdk-tests`, so that the SDK's examples build without the server.

mod realtime_fake_server;
mod send_retry;
mod sync_fake_server;
