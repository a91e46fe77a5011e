//! `parley serve --demo`: a newcomer's first minute. Seeds the embedded store with three users
//! who have passwords, a group of the three and a direct chat with a few messages, so the web
//! client at `/` has something to show the moment the server runs.
//!
//! The logins are fixed and printed because they are meant to be typed by the person trying
//! Parley on their own machine; the demo refuses PostgreSQL so that they never reach a
//! production store, and keeps its own data directory by default (`./parley-demo`).

use anyhow::Context;
use parley_domain::Rejection;
use parley_domain::{Body, ClientMsgId, ConvId, ConvKind, DeliveryMode, DeviceId, UserId};
use parley_store::{NewConversation, SendRequest, Store, StoreError};

/// The device that writes the seeded messages; it has no token, so nobody can connect as it.
const SEED_DEVICE: &str = "demo-seed";
/// The seeded group's id, fixed so a second start finds it.
const GROUP_ID: &str = "demo-welcome";
const GROUP_TITLE: &str = "Welcome to Parley";

/// A demo user and the password printed beside it.
pub struct DemoLogin {
    pub user_id: &'static str,
    pub display_name: &'static str,
    pub password: &'static str,
}

pub const DEMO_LOGINS: [DemoLogin; 3] = [
    DemoLogin {
        user_id: "ana",
        display_name: "Ana",
        password: "parley-ana",
    },
    DemoLogin {
        user_id: "ben",
        display_name: "Ben",
        password: "parley-ben",
    },
    DemoLogin {
        user_id: "cai",
        display_name: "Cai",
        password: "parley-cai",
    },
];

/// The seeded messages: (conversation, sender, client_msg_id, body). The ids make a second
/// seeding a replay of the first, so nothing is written twice.
const MESSAGES: [(&str, &str, &str, &str); 5] = [
    (
        GROUP_ID,
        "cai",
        "demo-1",
        "Welcome! Open this chat as ana in one window and as ben in another.",
    ),
    (
        GROUP_ID,
        "ana",
        "demo-2",
        "Messages get their place in the log when the server acks them: no gaps, no duplicates.",
    ),
    (
        GROUP_ID,
        "ben",
        "demo-3",
        "Go offline, type a message, come back: it is sent once, with the same id.",
    ),
    (DIRECT, "ana", "demo-4", "Hi Ben, this is our direct chat."),
    (
        DIRECT,
        "ben",
        "demo-5",
        "Hi Ana! Open it in a second tab and watch the unread count follow.",
    ),
];

/// Marks the direct chat of ana and ben in `MESSAGES`.
const DIRECT: &str = "";

/// Creates the demo users, their passwords, the group and the direct chat, and sends the
/// seeded messages. Safe to run on every start: what exists is kept, and the messages are
/// replays of their first send. `hash_password` turns a password into its stored hash.
pub async fn seed(
    store: &dyn Store,
    hash_password: impl Fn(&str) -> anyhow::Result<String>,
    pull_threshold: u32,
    recall_window_ms: i64,
) -> anyhow::Result<()> {
    let mut users = Vec::with_capacity(DEMO_LOGINS.len());
    for login in &DEMO_LOGINS {
        let user_id = UserId::parse(login.user_id).context("demo user id")?;
        let hash = hash_password(login.password)?;
        // A user that exists keeps its password: someone may have changed it since.
        match store
            .create_user_with_password(&user_id, Some(login.display_name), &hash)
            .await
        {
            Ok(_) | Err(StoreError::Rejected(Rejection::AlreadyExists(_))) => {}
            Err(e) => return Err(e).context("cannot create a demo user"),
        }
        users.push(user_id);
    }
    let [ana, ben, cai] = [users[0].clone(), users[1].clone(), users[2].clone()];

    let group = ConvId::parse_group(GROUP_ID).context("demo group id")?;
    let created = store
        .create_conversation(&NewConversation {
            creator: cai.clone(),
            kind: ConvKind::Group,
            conv_id: Some(group.clone()),
            members: vec![ana.clone(), ben.clone()],
            title: Some(GROUP_TITLE.to_owned()),
            delivery_mode: Some(DeliveryMode::Push),
            pull_threshold,
            recall_window_ms,
            retention_ms: None,
        })
        .await;
    match created {
        Ok(_) | Err(StoreError::Rejected(Rejection::AlreadyExists(_))) => {}
        Err(e) => return Err(e).context("cannot create the demo group"),
    }
    let direct = store
        .create_conversation(&NewConversation {
            creator: ana.clone(),
            kind: ConvKind::Direct,
            conv_id: None,
            members: vec![ben.clone()],
            title: None,
            delivery_mode: None,
            pull_threshold,
            recall_window_ms,
            retention_ms: None,
        })
        .await
        .context("cannot create the demo direct chat")?
        .conv_id;

    let device = DeviceId::parse(SEED_DEVICE).context("demo device id")?;
    for (conv, sender, client_msg_id, body) in MESSAGES {
        let conv_id = if conv == DIRECT {
            direct.clone()
        } else {
            group.clone()
        };
        let sender = UserId::parse(sender).context("demo sender")?;
        let request = SendRequest::new(
            conv_id,
            sender,
            device.clone(),
            ClientMsgId::parse(client_msg_id).context("demo client_msg_id")?,
            Body::parse(body, usize::MAX).context("demo body")?,
        );
        store
            .send(&request)
            .await
            .context("cannot send a demo message")?;
    }
    Ok(())
}

/// What the terminal shows: where to open the app and how to log in.
pub fn banner(url: &str) -> String {
    let mut text = format!("\nParley demo: open {url} and log in as\n");
    for login in &DEMO_LOGINS {
        text.push_str(&format!(
            "  {:<4} password {}\n",
            login.user_id, login.password
        ));
    }
    text.push_str("(two browser windows, or one private window, to chat as two users)\n");
    text
}
