//! Request limits, configured per deployment (SPEC §6).

/// Default largest message body: 16 KiB of UTF-8.
pub const BODY_BYTES_MAX_DEFAULT: usize = 16 * 1024;
/// Default largest HTTP request body or WebSocket frame: 64 KiB.
pub const REQUEST_BYTES_MAX_DEFAULT: usize = 64 * 1024;
/// Default page size of event reads.
pub const PAGE_LIMIT_DEFAULT: u32 = 50;
/// Largest page of event reads; larger asks are clamped.
pub const PAGE_LIMIT_MAX: u32 = 500;
/// Default recall window: two minutes.
pub const RECALL_WINDOW_MS_DEFAULT: i64 = 120_000;
/// Default member count from which a group is delivered by pull.
pub const PULL_THRESHOLD_DEFAULT: u32 = 500;
/// Most initial members of one create request.
pub const CREATE_MEMBERS_MAX: usize = 10_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub body_bytes_max: usize,
    pub request_bytes_max: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            body_bytes_max: BODY_BYTES_MAX_DEFAULT,
            request_bytes_max: REQUEST_BYTES_MAX_DEFAULT,
        }
    }
}

/// Clamps a requested page size into `1..=PAGE_LIMIT_MAX`; `None` takes the default.
pub fn page_limit(requested: Option<u32>) -> u32 {
    requested
        .unwrap_or(PAGE_LIMIT_DEFAULT)
        .clamp(1, PAGE_LIMIT_MAX)
}
