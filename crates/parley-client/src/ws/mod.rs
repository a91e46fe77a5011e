//! The realtime part of the SDK: one WebSocket per device (SPEC §7), kept open and replaced
//! when it drops, delivering every event of the tracked conversations exactly once and in
//! order.
//!
//! Pushes are fast but may be lost (a dropped connection, a slow reader cut off by the server,
//! a gateway that died). The session therefore never trusts a push to be complete: it keeps
//! `(epoch, cursor)` per conversation, drops what the app has, and fetches through
//! events-after whatever lies between the cursor and a pushed seq, a `hint`'s head, or, after
//! every reconnect, each conversation's head. [`Realtime::next`] yields the result. A device
//! that keeps a [`crate::SyncState`] hands it the deliveries and calls
//! [`crate::Client::catch_up`] after each [`Delivery::Reconnected`] (see [`crate::sync`]).
//!
//! ```no_run
//! # async fn demo(client: parley_client::Client) -> Result<(), parley_client::ClientError> {
//! use parley_client::{Delivery, Realtime, RealtimeOptions};
//!
//! let mut rt = Realtime::connect(&client, RealtimeOptions::default()).await?;
//! let chat = client.get_conversation("dm:ana:ben").await?;
//! rt.track(&chat.conv_id, chat.epoch, 0);
//! let sender = rt.handle();
//! tokio::spawn(async move { sender.send("dm:ana:ben", "m-1", "hello").await });
//! while let Some(delivery) = rt.next().await {
//!     match delivery {
//!         Delivery::Event(event) => println!("{} #{}", event.conv_id, event.seq),
//!         Delivery::Kicked | Delivery::Revoked => break,
//!         _ => {}
//!     }
//! }
//! # Ok(())
//! # }
//! ```

mod connection;
pub mod cursor;
mod driver;
mod fetch;
pub mod frames;
mod options;
mod protocol;
mod sequencer;
mod session;

pub use cursor::{Cursors, Position, Verdict};
pub use options::{
    RealtimeOptions, COMMAND_QUEUE_LEN_MAX_DEFAULT, DELIVERY_QUEUE_LEN_MAX_DEFAULT,
    GAP_FILL_PAGE_LEN_DEFAULT, HANDSHAKE_TIMEOUT_MS_DEFAULT, PING_INTERVAL_MS_DEFAULT,
    RECONNECT_BACKOFF_FIRST_MS_DEFAULT, RECONNECT_BACKOFF_MAX_MS_DEFAULT,
    REQUESTS_IN_FLIGHT_MAX_DEFAULT, SILENCE_MAX_MS_DEFAULT,
};
pub use protocol::{Delivery, StopReason};
pub use session::{Realtime, RealtimeHandle};
