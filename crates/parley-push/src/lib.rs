//! Offline notifications: what the server needs to wake a device that holds no connection, and a
//! push service to test it against.
//!
//! Two kinds of target are supported:
//!
//! - **Web Push** (RFC 8030): a browser's subscription, an endpoint URL on its vendor's push
//!   service plus the keys the browser made. The payload is encrypted for the browser alone
//!   ([`ece`], RFC 8291 over RFC 8188's `aes128gcm`), so the push service carries bytes it cannot
//!   read, and the request is signed with the server's VAPID key ([`vapid`], RFC 8292), so the
//!   push service knows who sends and may refuse anyone else.
//! - **Push gateways** (the Matrix Push Gateway API, `POST /_matrix/push/v1/notify`): a native
//!   app's gateway, which forwards to APNs or FCM with the app's own credentials. The payload is
//!   JSON ([`request::gateway`]); the privacy form carries ids only, no sender and no body.
//!
//! The crate does no IO of its own: [`request`] builds the URL, headers and body of one delivery
//! ([`PreparedPush`]) and reads the answer back ([`classify`], [`gateway_rejected`]); the server
//! sends it with its own HTTP client, its own timeouts and its own retry schedule. What a target
//! must look like before it is stored is in [`subscription`].
//!
//! With the `receiver` feature, `receiver::TestPushService` is a real push service on
//! 127.0.0.1: it checks what a real one checks (a known endpoint, the encoding, `TTL`, a valid
//! VAPID token for that endpoint, the size), decrypts with the keys it handed out, records what
//! arrived and can be told to fail. Tests, `parley verify`, the chaos runner and the bench use it.
//!
//! # Why not the `web-push` or `ece` crates
//!
//! Both pull in OpenSSL (a C library and its headers at build time, a system library at run
//! time) and `web-push` brings an HTTP client of its own besides the server's reqwest. The
//! protocol is small: one ECDH, two HKDF steps, one AES-GCM record and one ES256 signature, which
//! the RustCrypto crates (`p256`, `hkdf`, `aes-gcm`, `sha2`) do in pure Rust. RFC 8291's own
//! example is a unit test, byte for byte.

mod b64;
pub mod ece;
mod error;
#[cfg(feature = "receiver")]
pub mod receiver;
pub mod request;
pub mod subscription;
pub mod vapid;

#[cfg(test)]
mod tests;

pub use error::PushError;
pub use request::{
    classify, gateway, gateway_rejected, topic_for, web_push, GatewayNotification, Outcome,
    PreparedPush, Urgency,
};
pub use subscription::{GatewayTarget, WebPushSubscription};
pub use vapid::{verify_authorization, VapidKey};
