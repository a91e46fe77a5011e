//! What the server sends to a push target, as parts for its own HTTP client, and what the answer
//! means.
//!
//! The server owns the connection pool, the timeouts and the retry schedule; this module only
//! builds one request ([`PreparedPush`]) and classifies one answer ([`Outcome`]).

mod gateway;
mod outcome;
mod web;

pub use gateway::{gateway, gateway_rejected, GatewayNotification};
pub use outcome::{classify, Outcome};
pub use web::{topic_for, web_push, Urgency, TOPIC_LEN_MAX, VAPID_EXP_AHEAD_S};

/// One request ready to send: `POST url` with these headers and this body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreparedPush {
    pub url: String,
    /// Header names as HTTP/1.1 spells them; an HTTP/2 client lowercases them.
    pub headers: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
}

impl PreparedPush {
    /// The value of the first header called `name`, in any case.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}
