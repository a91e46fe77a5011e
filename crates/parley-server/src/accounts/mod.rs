//! Accounts with passwords (issue 13): the password rules and argon2id hashing
//! (`password.rs`), the bounded pool that runs the hashing off the async workers
//! (`hasher.rs`), and the throttle of failed password checks (`throttle.rs`). The store keeps
//! only the PHC string; nothing here speaks SQL.

pub mod hasher;
pub mod password;
pub mod throttle;

pub use hasher::Hasher;
pub use password::Password;
pub use throttle::{LoginLimits, LoginThrottle};
