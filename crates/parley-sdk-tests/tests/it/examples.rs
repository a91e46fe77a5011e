//! The SDK's examples, built and run as a user runs them (`crates/parley-client/examples`),
//! against the real `parley serve`: the echo bot across a SIGKILL and restart of the server,
//! and the command-line chat sending and following a conversation.

use anyhow::{ensure, Context, Result};
use parley_client::{Client, Delivery, Event, NewConversation, Realtime, RealtimeOptions};
use parley_testkit::{
    example_binary, parley_binary, test_on_both_stores, ServerConfig, ServerProcess, StoreKind,
    TestServer,
};
use std::collections::BTreeMap;

use crate::deliveries::next_delivery;
use crate::running::Running;

/// Messages ana sends the bot: three before the kill, one just before it, one while the server
/// is down, one after the restart.
const MESSAGES: usize = 6;

/// What ana's session delivered of the chat with the bot: the texts, in order.
struct Seen {
    texts: Vec<String>,
}

impl Seen {
    /// Reads ana's deliveries, noting the chat's texts, until `done` holds for what was seen
    /// and the delivery just read.
    async fn until(
        &mut self,
        rt: &mut Realtime,
        conv_id: &str,
        done: impl Fn(&[String], &Delivery) -> bool,
    ) -> Result<()> {
        loop {
            let delivery = next_delivery(rt)
                .await
                .with_context(|| format!("ana's deliveries; seen {:?}", self.texts))?;
            if let Delivery::Event(e) = &delivery {
                if let (true, Some(text)) = (e.conv_id == conv_id, e.text()) {
                    self.texts.push(text.to_owned());
                }
            }
            if done(&self.texts, &delivery) {
                return Ok(());
            }
        }
    }

    /// Reads until the bot's echo of every message in `texts` was seen.
    async fn echoes(&mut self, rt: &mut Realtime, conv_id: &str, texts: &[String]) -> Result<()> {
        let wanted: Vec<String> = texts.iter().map(|t| format!("echo: {t}")).collect();
        if wanted.iter().all(|w| self.texts.contains(w)) {
            return Ok(());
        }
        self.until(rt, conv_id, |seen, _| {
            wanted.iter().all(|w| seen.contains(w))
        })
        .await
    }
}

/// Every message of ana has exactly one echo from the bot, after it, keyed by its seq.
fn one_echo_each(log: &[Event], texts: &[String]) -> Result<()> {
    let mut sent = BTreeMap::new();
    let mut echoes: BTreeMap<String, Vec<&Event>> = BTreeMap::new();
    for e in log {
        match (e.sender_user.as_deref(), e.text()) {
            (Some("ana"), Some(text)) => {
                sent.insert(text.to_owned(), e.seq);
            }
            (Some("bot"), Some(text)) => echoes.entry(text.to_owned()).or_default().push(e),
            _ => {}
        }
    }
    ensure!(
        sent.len() == texts.len(),
        "ana's messages in the log: {sent:?}"
    );
    let echoed: usize = echoes.values().map(Vec::len).sum();
    ensure!(
        echoed == texts.len(),
        "{echoed} echoes for {} messages: {echoes:?}",
        texts.len()
    );
    for text in texts {
        let seq = sent[text];
        let echo = format!("echo: {text}");
        let replies = echoes.get(&echo).map_or(&[][..], Vec::as_slice);
        ensure!(replies.len() == 1, "{echo:?} {} times", replies.len());
        let reply = replies[0];
        ensure!(reply.seq > seq, "{echo:?} at #{} before #{seq}", reply.seq);
        ensure!(
            reply.client_msg_id.as_deref() == Some(format!("echo-{seq}").as_str()),
            "{reply:?}"
        );
    }
    Ok(())
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    echo_bot_answers_each_message_once_across_a_server_kill
);
/// The echo bot runs as a process while the server is killed with SIGKILL and restarted on the
/// same store and port mid-conversation: every message gets exactly one echo, none is lost and
/// none duplicated, and the bot never answers itself.
async fn echo_bot_answers_each_message_once_across_a_server_kill(store: StoreKind) -> Result<()> {
    let bot_program = example_binary("parley-client", "echo_bot");
    let mut server = ServerProcess::start_on(parley_binary(), store).await;
    let ana = server.user_with_device("ana").await;
    let bot_token = server.user_with_token("bot").await;
    let mut bot = Running::start(&bot_program, &[], server.base_url(), &bot_token)?;
    bot.line(|l| l.contains("echo bot bot is listening"))
        .await?;

    let chat = ana
        .create_conversation(&NewConversation::direct("bot"))
        .await?;
    let conv = chat.conv_id.clone();
    let mut rt = Realtime::connect(&ana, RealtimeOptions::default()).await?;
    rt.track(&conv, chat.epoch, chat.head);
    let texts: Vec<String> = (1..=MESSAGES).map(|i| format!("hello {i}")).collect();
    let send = |i: usize| {
        let (ana, conv, text) = (ana.clone(), conv.clone(), texts[i].clone());
        async move { ana.send_with_retry(&conv, &format!("m-{i}"), &text).await }
    };

    let mut seen = Seen { texts: Vec::new() };
    for i in 0..3 {
        send(i).await?;
        seen.echoes(&mut rt, &conv, &texts[i..=i]).await?;
    }
    // The bot receives message 4 and replies around the moment the server dies.
    send(3).await?;
    server.kill();
    // Message 5 is sent while the server is down: send_with_retry waits for its return.
    let while_down = tokio::spawn(send(4));
    seen.until(&mut rt, &conv, |_, d| {
        matches!(d, Delivery::Disconnected { .. })
    })
    .await?;
    server.restart().await;
    while_down.await??;
    send(5).await?;
    seen.echoes(&mut rt, &conv, &texts[3..]).await?;

    let log = ana.all_events(&conv).await?;
    bot.stop().await?;
    println!("echo bot output ({store}):");
    for line in bot.output() {
        println!("  {line}");
    }
    one_echo_each(&log, &texts)?;
    ensure!(
        bot.output().iter().any(|l| l == "reconnected"),
        "the bot did not report its reconnect"
    );
    Ok(())
}

/// Starts `chat args…` as `client`'s device.
fn chat(server: &TestServer, token: &str, args: &[&str]) -> Result<Running> {
    Running::start(
        &example_binary("parley-client", "chat"),
        args,
        server.base_url(),
        token,
    )
}

/// `chat tail` shows the conversation's recent events, then follows it: what `chat send`
/// sends, from another user or from the same one, appears once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_sends_and_tails_a_conversation() -> Result<()> {
    let server = TestServer::start_on(StoreKind::Sqlite, ServerConfig::default()).await;
    let admin = server.admin();
    let mut tokens = BTreeMap::new();
    for user in ["ana", "ben"] {
        admin.create_user(user, None).await?;
        tokens.insert(user, admin.create_device(user, "cli").await?);
    }
    let ana: Client = server.client(&tokens["ana"]);
    let conv = ana
        .create_conversation(&NewConversation::direct("ben"))
        .await?
        .conv_id;
    server
        .client(&tokens["ben"])
        .send(&conv, "b-0", "before")
        .await?;

    let mut tail = chat(&server, &tokens["ana"], &["tail", &conv])?;
    tail.line(|l| l == format!("-- following {conv}")).await?;
    ensure!(
        tail.output().iter().any(|l| l == "#3 ben: before"),
        "{:?}",
        tail.output()
    );
    let mut send = chat(
        &server,
        &tokens["ben"],
        &["send", &conv, "hi", "from", "ben"],
    )?;
    ensure!(send.finished().await?, "{:?}", send.output());
    ensure!(send.output() == ["sent #4"], "{:?}", send.output());
    tail.line(|l| l == "#4 ben: hi from ben").await?;
    let mut send = chat(&server, &tokens["ana"], &["send", &conv, "and", "ana"])?;
    ensure!(send.finished().await?, "{:?}", send.output());
    tail.line(|l| l == "#5 ana (me): and ana").await?;
    tail.stop().await?;
    let shown: Vec<String> = tail
        .output()
        .into_iter()
        .filter(|l| l.starts_with('#'))
        .collect();
    ensure!(
        shown
            == [
                "#1 Join ana",
                "#2 Join ben",
                "#3 ben: before",
                "#4 ben: hi from ben",
                "#5 ana (me): and ana"
            ],
        "{shown:?}"
    );

    let mut usage = chat(&server, &tokens["ana"], &["send", &conv])?;
    ensure!(!usage.finished().await?, "a send without text is refused");
    Ok(())
}
