//! An echo bot: answers every message of someone else with `echo: <text>`.
//!
//! ```sh
//! PARLEY_URL=http://127.0.0.1:8080 PARLEY_TOKEN=<the bot's device token> \
//!     cargo run -p parley-client --example echo_bot
//! ```
//!
//! It needs no list of chats: a conversation is tracked from its first pushed event, so the
//! bot answers in every chat someone opens with it. Replies go out from the receive loop; the
//! session answers them however many deliveries wait. Each reply's request key is derived from
//! the message it answers, so a reply retried across a server restart is stored once.
//! `RUST_LOG=info` (the default here) shows the session's reconnects.

use parley_client::{Client, Delivery, Realtime, RealtimeOptions};
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt().with_env_filter(filter).init();
    let url = std::env::var("PARLEY_URL").unwrap_or_else(|_| "http://127.0.0.1:8080".into());
    let client = Client::new(&url, &std::env::var("PARLEY_TOKEN")?)?;

    // The bot must not answer its own echoes.
    let options = RealtimeOptions {
        skip_own_messages: true,
        ..RealtimeOptions::default()
    };
    let mut rt = Realtime::connect(&client, options).await?;
    println!("echo bot {} is listening", rt.identity().user_id);

    while let Some(delivery) = rt.next().await {
        match delivery {
            Delivery::Event(event) => {
                let Some(text) = event.text() else { continue };
                let key = format!("echo-{}", event.seq);
                let reply = format!("echo: {text}");
                match rt.send(&event.conv_id, &key, &reply).await {
                    Ok(ack) => println!("{} #{} -> #{}", event.conv_id, event.seq, ack.seq),
                    Err(e) => eprintln!("{} #{}: no echo: {e}", event.conv_id, event.seq),
                }
            }
            Delivery::Disconnected { reason } => println!("disconnected: {reason}"),
            Delivery::Reconnected => println!("reconnected"),
            Delivery::Kicked | Delivery::Revoked | Delivery::Unreachable => break,
            _ => {}
        }
    }
    println!("echo bot stopped: {:?}", rt.stop_reason());
    Ok(())
}
