//! A command-line chat: send a message, or follow a conversation like `tail -f`.
//!
//! ```sh
//! export PARLEY_URL=http://127.0.0.1:8080 PARLEY_TOKEN=<a device token>
//! cargo run -p parley-client --example chat -- send dm:ana:ben hello there
//! cargo run -p parley-client --example chat -- tail dm:ana:ben
//! ```
//!
//! `tail` prints the last ten events, then every new one as it is committed, each once and in
//! order, across reconnects; the user's own messages are marked `(me)`.

use parley_client::{new_client_msg_id, Client, Delivery, Event, Realtime, RealtimeOptions};

/// Events shown before following.
const TAIL_LEN: u32 = 10;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let url = std::env::var("PARLEY_URL").unwrap_or_else(|_| "http://127.0.0.1:8080".into());
    let client = Client::new(&url, &std::env::var("PARLEY_TOKEN")?)?;
    match args.as_slice() {
        [cmd, conv_id, words @ ..] if cmd == "send" && !words.is_empty() => {
            let ack = client
                .send_with_retry(conv_id, &new_client_msg_id(), &words.join(" "))
                .await?;
            println!("sent #{}", ack.seq);
        }
        [cmd, conv_id] if cmd == "tail" => tail(&client, conv_id).await?,
        _ => anyhow::bail!("usage: chat send <conv_id> <text…> | chat tail <conv_id>"),
    }
    Ok(())
}

async fn tail(client: &Client, conv_id: &str) -> anyhow::Result<()> {
    let me = client.whoami().await?;
    let mut newest = client.history(conv_id, None, Some(TAIL_LEN)).await?;
    newest.events.reverse();
    for event in &newest.events {
        show(event, event.is_from(&me.user_id));
    }
    let mut rt = Realtime::connect(client, RealtimeOptions::default()).await?;
    rt.track(conv_id, newest.epoch, newest.head);
    println!("-- following {conv_id}");
    while let Some(delivery) = rt.next().await {
        match delivery {
            Delivery::Event(event) if event.conv_id == conv_id => show(&event, event.own),
            Delivery::Disconnected { reason } => eprintln!("-- disconnected: {reason}"),
            Delivery::Reconnected => eprintln!("-- reconnected"),
            Delivery::Kicked | Delivery::Revoked | Delivery::Unreachable => break,
            _ => {}
        }
    }
    Ok(())
}

fn show(event: &Event, own: bool) {
    let who = event.sender_user.as_deref().unwrap_or("-");
    let me = if own { " (me)" } else { "" };
    match event.text() {
        Some(text) => println!("#{} {who}{me}: {text}", event.seq),
        None => println!(
            "#{} {:?} {}",
            event.seq,
            event.kind,
            event.subject_user.as_deref().unwrap_or(who)
        ),
    }
}
