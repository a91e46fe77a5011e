//! The realtime part of the SDK: one WebSocket per device (SPEC §7), kept open and replaced
//! when it drops, delivering every event of the tracked conversations exactly once and in
//! order.
//!
//! Pushes are fast but may be lost (a dropped connection, a slow reader cut off by the server,
//! a gateway that died). The session therefore never trusts a push to be complete: it keeps
//! `(epoch, cursor)` per conversation, drops what the app has, and fetches through
//! events-after whatever lies between the cursor and a pushed seq, a `hint`'s head, or, after
//! every reconnect, each conversation's head. [`Realtime::next`] yields the result.
//!
//! ```no_run
//! # async fn demo(client: parley_client::Client) -> Result<(), parley_client::ClientError> {
//! use parley_client::{Delivery, Realtime, RealtimeOptions};
//!
//! let mut rt = Realtime::connect(&client, RealtimeOptions::default()).await?;
//! let chat = client.get_conversation("dm:ana:ben").await?;
//! rt.track(&chat.conv_id, chat.epoch, chat.head);
//! while let Some(delivery) = rt.next().await {
//!     match delivery {
//!         Delivery::Event(event) if event.own_device => {} // shown from the send's ack
//!         Delivery::Event(event) => {
//!             println!("#{} {:?}: {:?}", event.seq, event.sender_user, event.text());
//!             rt.mark_read(&event.conv_id, event.seq).await?;
//!         }
//!         Delivery::Disconnected { reason } => println!("offline ({reason}), reconnecting"),
//!         Delivery::Reconnected => println!("online"),
//!         Delivery::Kicked | Delivery::Revoked | Delivery::Unreachable => break,
//!         _ => {}
//!     }
//! }
//! # Ok(())
//! # }
//! ```
//!
//! ## Requests from the receive loop
//!
//! Sending (or marking read) from the loop that takes deliveries, as above, is safe: the
//! answer never waits behind deliveries the app has not taken, however many there are. The
//! session keeps reading the socket while the delivery queue is full; events that do not fit
//! stay on the server and are fetched from the cursor once the app has taken half the queue.
//! [`Realtime`] derefs to its [`RealtimeHandle`], and [`Realtime::handle`] gives clones for
//! other tasks.
//!
//! ## Own events
//!
//! The session asks who it is at connect ([`crate::Client::whoami`], `GET /v1/me`) and marks
//! each event: [`Incoming::own`] when the caller's user sent it (from any of its devices),
//! [`Incoming::own_device`] when this device did. A bot sets
//! [`RealtimeOptions::skip_own_messages`], so it never answers itself.
//!
//! ## Connection state
//!
//! [`Delivery::Disconnected`] says the connection was lost (with the reason) and
//! [`Delivery::Reconnected`] that a new one replaced it; [`RealtimeHandle::is_connected`]
//! answers at any time. While disconnected, sends and read marks wait for the new connection
//! within their retry budget ([`RealtimeOptions::retry`], 20 s by default), and reconnect attempts follow a
//! jittered backoff up to 5 s apart, for as long as it takes unless
//! [`RealtimeOptions::reconnect_attempts_max`] says otherwise. The session logs each lost and
//! restored connection with `tracing` at `info` (target `parley_client::ws::driver`).
//!
//! ## Several gateways
//!
//! A deployment of several gateways on one database (SPEC §10) is reached either through one
//! load balancer URL, the client's base URL, or by giving the session every gateway's base URL
//! with [`RealtimeOptions::with_gateways`]:
//!
//! ```no_run
//! # async fn demo(client: parley_client::Client) -> Result<(), parley_client::ClientError> {
//! use parley_client::{Realtime, RealtimeOptions};
//!
//! let options = RealtimeOptions::default()
//!     .with_gateways(["http://10.0.0.1:8080", "http://10.0.0.2:8080"]);
//! let rt = Realtime::connect(&client, options).await?;
//! println!("on {}", rt.gateway());
//! # Ok(())
//! # }
//! ```
//!
//! The session starts at a random gateway, so devices spread over them, trying the others in
//! turn if it does not answer. When a connection ends in a way that may mean its gateway is
//! gone (a close with 1001 going away, a dropped connection, silence, a refused connection) the
//! next attempt goes to the next gateway of the ring; a close with 4008 (too slow) or a
//! [`RealtimeHandle::reconnect`] comes back to the same one. Each attempt waits a jittered pause
//! whose ceiling doubles with each whole round of the ring that failed, so a dead gateway's
//! devices reach the others within a pause of 100–200 ms, spread over it, and a deployment that
//! is down entirely is not hammered. With one gateway every attempt is a round, as before.
//! Kicked (4001) and revoked (4003) stop the session on any gateway.
//!
//! After the move nothing is lost or doubled: the tracked conversations are caught up from
//! their cursors, and the sends that were written but not acked when the connection ended, or
//! queued meanwhile, are resent with their `client_msg_id` on the new connection (a send that
//! did commit is answered `dup: true` with its first seq). The session's own HTTP calls go to
//! the gateway its socket is on ([`crate::Client::with_base_url`]);
//! [`RealtimeHandle::gateway`] says which one that is.
//!
//! ## New conversations
//!
//! An app need not list its conversations in advance. A push (or a pull group's `hint`) for a
//! conversation the session does not track starts tracking it: just before the pushed event
//! by default, so the app sees the conversation from that event on, or, with
//! [`RealtimeOptions::auto_track_full`], from its first stored event, which the session fetches
//! first. After a reconnect the tracked conversations are caught up from their cursors; one
//! created while the connection was down is picked up at its next push.
//!
//! ## What a restarted app must persist
//!
//! Cursors live in memory and a new session starts with none, so without saved positions an
//! app that restarts sees only what is pushed from then on. An app that keeps its own copy of
//! the logs keeps a [`crate::SyncState`] with them: [`crate::SyncState::save`] gives the feed
//! token and every conversation's cursor and read state as a serialisable
//! [`crate::SavedSync`]; on restart it restores them, catches up (everything sent meanwhile,
//! new conversations included, goes to its [`crate::EventSink`]) and starts the session at the
//! saved cursors. See [`crate::sync`] for the rules.
//!
//! ```no_run
//! # fn load() -> Option<parley_client::SavedSync> { None }
//! # fn store(_: &parley_client::SavedSync) {}
//! # struct Log;
//! # impl parley_client::EventSink for Log {
//! #     fn append(&mut self, _: &str, _: Vec<parley_client::Event>) {}
//! #     fn restart(&mut self, _: &str, _: parley_client::Restart) {}
//! # }
//! # async fn demo(client: parley_client::Client) -> Result<(), parley_client::ClientError> {
//! use parley_client::{Realtime, RealtimeOptions, SyncState};
//!
//! // `Log` is the app's own storage of events, `load` and `store` keep the positions.
//! let mut state = match load() {
//!     Some(saved) => SyncState::restore(saved, Log),
//!     None => SyncState::with_sink(Log),
//! };
//! client.catch_up(&mut state).await?;
//! let mut rt = Realtime::connect(&client, RealtimeOptions::default()).await?;
//! state.track_in(&rt);
//! while let Some(delivery) = rt.next().await {
//!     if state.apply_delivery(&delivery) {
//!         client.catch_up(&mut state).await?;
//!     }
//!     store(&state.save());
//! }
//! # Ok(())
//! # }
//! ```
//!
//! An app that only reacts to events, such as a bot, may instead save each conversation's
//! [`RealtimeHandle::cursor`] after handling an event, and on restart track every conversation
//! of [`crate::Client::list_conversations`] from its saved cursor (from 0 for one it never
//! saw): the session then delivers everything sent while it was away. Deriving each reply's
//! `client_msg_id` from the event it answers keeps a reply that is handled twice from being
//! stored twice.

mod connection;
pub mod cursor;
mod driver;
mod fetch;
pub mod frames;
mod gateways;
mod options;
mod outlet;
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
pub use protocol::{Delivery, Incoming, StopReason};
pub use session::{Realtime, RealtimeHandle};
