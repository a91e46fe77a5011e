//! End-to-end encrypted conversations (docs/E2EE.md) through the SDK's `e2ee` feature against
//! a real server on both stores: devices converse, removed devices and users read nothing
//! after their removal, racing Commits end in one sequence for every member, a device away
//! for 50 epochs catches up, and the server's database never holds a plaintext.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::{ensure, Context, Result};
use parley_client::e2ee::{Content, Decrypted, DeviceRef, E2ee, E2eeError};
use parley_client::{Client, ClientOptions, NewConversation, RetryPolicy};
use parley_testkit::{test_on_both_stores, ServerConfig, StoreKind, TestServer};
use tempfile::TempDir;

/// Key packages each device publishes: more than any test claims of one device.
const KEY_PACKAGES: usize = 5;
/// How long an impatient client waits for an answer: far less than a write held behind a lock.
const IMPATIENT_MS: u64 = 300;

/// The devices of a test, each with its key store in a directory of `root`.
struct Devices<'a> {
    server: &'a TestServer,
    root: TempDir,
}

impl<'a> Devices<'a> {
    fn new(server: &'a TestServer) -> Result<Self> {
        Ok(Self {
            server,
            root: tempfile::tempdir()?,
        })
    }

    fn dir(&self, user: &str, device: &str) -> std::path::PathBuf {
        self.root.path().join(format!("{user}-{device}"))
    }

    /// A new user's first device, `d1`, with its key packages published.
    async fn user(&self, user: &str) -> Result<E2ee> {
        let client = self.server.user_with_device(user).await;
        self.open(client, user, "d1").await
    }

    /// Another device of an existing user, with its key packages published.
    async fn device(&self, user: &str, device: &str) -> Result<E2ee> {
        let client = self.server.device(user, device).await;
        self.open(client, user, device).await
    }

    async fn open(&self, client: Client, user: &str, device: &str) -> Result<E2ee> {
        let e2ee = E2ee::open(client, self.dir(user, device)).await?;
        e2ee.publish_key_packages(KEY_PACKAGES).await?;
        Ok(e2ee)
    }
}

fn device(user: &str, device: &str) -> DeviceRef {
    DeviceRef {
        user_id: user.into(),
        device_id: device.into(),
    }
}

/// The texts among `items`, with their senders, in order.
fn texts(items: &[Decrypted]) -> Vec<(String, String)> {
    items
        .iter()
        .filter_map(|d| match &d.content {
            Content::Text(t) => Some((d.sender_user.clone(), t.clone())),
            _ => None,
        })
        .collect()
}

fn undecryptable(items: &[Decrypted]) -> usize {
    items
        .iter()
        .filter(|d| matches!(d.content, Content::Undecryptable { .. }))
        .count()
}

fn ensure_ascending(items: &[Decrypted]) -> Result<()> {
    ensure!(
        items.windows(2).all(|w| w[0].seq < w[1].seq),
        "not in seq order: {items:?}"
    );
    Ok(())
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    two_devices_converse
);
async fn two_devices_converse(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let devices = Devices::new(&server)?;
    let ana = devices.user("ana").await?;
    let ben = devices.user("ben").await?;
    let count = ben.key_package_count().await?;
    ensure!(
        count.available == KEY_PACKAGES as u32 && count.last_resort,
        "{count:?}"
    );

    let conv = ana.create_conversation().await?;
    let c = conv.conv_id.as_str();
    ensure!(ana.epoch(c).await? == 0);
    let ack = ana.add_users(c, &["ben"]).await?.context("nothing added")?;
    ensure!(ack.epoch == 1 && ack.welcome_seq.is_some(), "{ack:?}");
    ensure!(ben.key_package_count().await?.available == KEY_PACKAGES as u32 - 1);
    ana.send(c, "hello ben").await?;

    // ben finds the conversation he was added to among his user's encrypted conversations.
    let mut all = ben.sync_all().await?;
    ensure!(all.len() == 1, "{all:?}");
    let got = all.remove(c).context("the conversation is not listed")?;
    ensure_ascending(&got)?;
    ensure!(
        matches!(got.first().map(|d| &d.content), Some(Content::Joined)),
        "{got:?}"
    );
    ensure!(
        texts(&got) == [("ana".into(), "hello ben".into())],
        "{got:?}"
    );
    ben.send(c, "hello ana").await?;
    let got = ana.sync(c).await?;
    ensure_ascending(&got)?;
    ensure!(
        matches!(&got[0].content, Content::MembersChanged { added, removed }
            if *added == [device("ben", "d1")] && removed.is_empty()),
        "{got:?}"
    );
    ensure!(
        texts(&got)
            == [
                ("ana".into(), "hello ben".into()),
                ("ben".into(), "hello ana".into())
            ],
        "{got:?}"
    );
    // Nothing is handed out twice.
    // ben's own message comes back from his next read, from the text he kept; after that,
    // nothing is handed out twice.
    let got = ben.sync(c).await?;
    ensure!(
        texts(&got) == [("ben".into(), "hello ana".into())],
        "{got:?}"
    );
    let (again_ana, again_ben) = (ana.sync(c).await?, ben.sync(c).await?);
    ensure!(
        again_ana.is_empty() && again_ben.is_empty(),
        "{again_ana:?} {again_ben:?}"
    );

    // The key store reopened in another session keeps the group and the cursor.
    drop(ben);
    let ben = E2ee::open(server.device("ben", "d1").await, devices.dir("ben", "d1")).await?;
    ensure!(ben.epoch(c).await? == 1 && ben.members(c).await?.len() == 2);
    ana.update(c).await?;
    ana.send(c, "after the reopening").await?;
    let got = ben.sync(c).await?;
    ensure!(
        texts(&got) == [("ana".into(), "after the reopening".into())],
        "{got:?}"
    );
    ensure!(ben.epoch(c).await? == 2);

    // A plain write to an encrypted conversation is refused by the server.
    let e = ana
        .client()
        .send(c, "plain-1", "plain text")
        .await
        .unwrap_err();
    ensure!(e.code() == Some("ENCRYPTED_CONVERSATION"), "{e}");
    Ok(())
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    ten_devices_converse
);
async fn ten_devices_converse(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let d = Devices::new(&server)?;
    // Ten devices of four users: ana has 2, ben 3, cai 2, dan 3.
    let mut all = vec![d.user("ana").await?, d.device("ana", "d2").await?];
    for (user, count) in [("ben", 3), ("cai", 2), ("dan", 3)] {
        all.push(d.user(user).await?);
        for i in 2..=count {
            all.push(d.device(user, &format!("d{i}")).await?);
        }
    }
    ensure!(all.len() == 10);
    let conv = all[0].create_conversation().await?;
    let c = conv.conv_id.as_str();
    all[0].add_users(c, &["ben", "cai", "dan"]).await?;
    // ana's own second device joins by a Commit that declares no user.
    let ack = all[0]
        .add_devices(c, "ana")
        .await?
        .context("d2 not added")?;
    ensure!(ack.epoch == 2, "{ack:?}");
    ensure!(all[0].add_devices(c, "ana").await?.is_none());
    for e in &all[1..] {
        ensure!(texts(&e.sync(c).await?).is_empty());
    }
    let mut sent = Vec::new();
    for (i, e) in all.iter().enumerate() {
        let text = format!("message {i} from {}/{}", e.me().user_id, e.me().device_id);
        e.send(c, &text).await?;
        sent.push((e.me().user_id.clone(), text));
    }
    let members: BTreeSet<DeviceRef> = all[0].members(c).await?.into_iter().collect();
    ensure!(members.len() == 10, "{members:?}");
    for e in &all {
        let got = e.sync(c).await?;
        ensure_ascending(&got)?;
        ensure!(texts(&got) == sent, "{:?} read {got:?}", e.me());
        ensure!(e.epoch(c).await? == 2);
        let seen: BTreeSet<DeviceRef> = e.members(c).await?.into_iter().collect();
        ensure!(seen == members);
    }
    Ok(())
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    removed_devices_and_users_read_nothing_later
);
async fn removed_devices_and_users_read_nothing_later(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let d = Devices::new(&server)?;
    let ana = d.user("ana").await?;
    let ben1 = d.user("ben").await?;
    let ben2 = d.device("ben", "d2").await?;
    let cai = d.user("cai").await?;
    let conv = ana.create_conversation().await?;
    let c = conv.conv_id.as_str();
    ana.add_users(c, &["ben", "cai"]).await?;
    ana.send(c, "for everyone").await?;
    for e in [&ben1, &ben2, &cai] {
        ensure!(texts(&e.sync(c).await?) == [("ana".into(), "for everyone".into())]);
    }

    // ben's second device is removed; ben stays a member through his first.
    let ack = ana
        .remove_device(c, "ben", "d2")
        .await?
        .context("not removed")?;
    ensure!(ack.epoch == 2);
    ensure!(ana.remove_device(c, "ben", "d2").await?.is_none());
    ana.send(c, "not for ben's d2").await?;
    let got = ben2.sync(c).await?;
    ensure!(
        matches!(&got[0].content, Content::MembersChanged { removed, .. }
            if *removed == [device("ben", "d2")]),
        "{got:?}"
    );
    ensure!(
        texts(&got).is_empty() && undecryptable(&got) == 1,
        "{got:?}"
    );
    ensure!(!ben2.is_member(c).await?);
    ensure!(matches!(
        ben2.send(c, "x").await,
        Err(E2eeError::Removed { .. })
    ));
    ensure!(texts(&ben1.sync(c).await?) == [("ana".into(), "not for ben's d2".into())]);

    // cai is removed as a user: the server writes his leave, and he reads nothing after.
    ana.remove_users(c, &["cai"]).await?;
    ana.send(c, "not for cai").await?;
    let got = cai.sync(c).await?;
    ensure!(
        texts(&got) == [("ana".into(), "not for ben's d2".into())],
        "{got:?}"
    );
    ensure!(!cai.is_member(c).await?);
    ensure!(ben2
        .sync(c)
        .await?
        .iter()
        .all(|d| !matches!(d.content, Content::Text(_))));
    let got = ben1.sync(c).await?;
    ensure!(
        texts(&got) == [("ana".into(), "not for cai".into())],
        "{got:?}"
    );
    let members = ana
        .client()
        .get_conversation(c)
        .await?
        .members
        .unwrap_or_default();
    let users: BTreeSet<String> = members.into_iter().map(|m| m.user_id).collect();
    ensure!(
        users == BTreeSet::from(["ana".into(), "ben".into()]),
        "{users:?}"
    );
    ensure!(
        ana.members(c).await? == [device("ana", "d1"), device("ben", "d1")],
        "{:?}",
        ana.members(c).await?
    );
    ensure!(matches!(
        ana.remove_users(c, &["ana"]).await,
        Err(E2eeError::SelfRemoval)
    ));
    Ok(())
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    racing_commits_end_in_one_sequence
);
async fn racing_commits_end_in_one_sequence(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let d = Devices::new(&server)?;
    let ana = d.user("ana").await?;
    let ben = d.user("ben").await?;
    let cai = d.user("cai").await?;
    let dan = d.user("dan").await?;
    let conv = ana.create_conversation().await?;
    let c = conv.conv_id.as_str();
    ana.add_users(c, &["ben", "cai"]).await?;
    for e in [&ben, &cai] {
        e.sync(c).await?;
    }
    let all = [&ana, &ben, &cai];
    let mut log: Vec<Vec<Decrypted>> = vec![Vec::new(); 3];
    const ROUNDS: usize = 5;
    for round in 0..ROUNDS {
        // Every member commits for the same epoch at once; in one round ana also adds dan
        // (and then removes him), so membership Commits race too.
        let (a, b, c2) = tokio::join!(
            async {
                match round {
                    1 => ana.add_users(c, &["dan"]).await.map(|a| a.map(|a| a.epoch)),
                    3 => ana
                        .remove_users(c, &["dan"])
                        .await
                        .map(|a| a.map(|a| a.epoch)),
                    _ => ana.update(c).await.map(|a| Some(a.epoch)),
                }
            },
            ben.update(c),
            cai.update(c),
        );
        a?.context("ana's Commit did nothing")?;
        b?;
        c2?;
        let words = [0, 1, 2].map(|i| format!("{} {round}", ["ana", "ben", "cai"][i]));
        let (a, b, c2) = tokio::join!(
            ana.send(c, &words[0]),
            ben.send(c, &words[1]),
            cai.send(c, &words[2]),
        );
        a?;
        b?;
        c2?;
        if round == 1 {
            ensure!(texts(&dan.sync(c).await?).len() == 3);
        }
        for (i, e) in all.iter().enumerate() {
            log[i].extend(e.sync(c).await?);
        }
    }
    // Every member: the same epoch, the same members and the same messages.
    let epoch = ana.epoch(c).await?;
    ensure!(epoch == 1 + 3 * ROUNDS as u64, "epoch {epoch}");
    let members = ana.members(c).await?;
    for (i, e) in all.iter().enumerate() {
        ensure!(e.epoch(c).await? == epoch);
        ensure!(e.members(c).await? == members);
        ensure_ascending(&log[i])?;
        ensure!(undecryptable(&log[i]) == 0, "{:?}", log[i]);
        let seen: Vec<(i64, String)> = log[i]
            .iter()
            .filter_map(|d| match &d.content {
                Content::Text(t) => Some((d.seq, t.clone())),
                _ => None,
            })
            .collect();
        let first: Vec<(i64, String)> = log[0]
            .iter()
            .filter_map(|d| match &d.content {
                Content::Text(t) => Some((d.seq, t.clone())),
                _ => None,
            })
            .collect();
        ensure!(seen == first, "member {i}: {seen:?} vs {first:?}");
        ensure!(seen.len() == 3 * ROUNDS, "{seen:?}");
    }
    dan.sync(c).await?;
    ensure!(!dan.is_member(c).await?);
    Ok(())
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    an_offline_device_catches_up_across_fifty_epochs
);
async fn an_offline_device_catches_up_across_fifty_epochs(store: StoreKind) -> Result<()> {
    const EPOCHS: usize = 50;
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let d = Devices::new(&server)?;
    let ana = d.user("ana").await?;
    let ben = d.user("ben").await?;
    let cai = d.user("cai").await?;
    let conv = ana.create_conversation().await?;
    let c = conv.conv_id.as_str();
    ana.add_users(c, &["ben", "cai"]).await?;
    ensure!(cai.sync(c).await?.len() == 1, "cai joins");
    ensure!(ben.sync(c).await?.len() == 1, "ben joins");
    // cai is away; ben renews his keys 50 times and writes after each.
    let mut sent = Vec::new();
    for i in 0..EPOCHS {
        ben.update(c).await?;
        let text = format!("epoch {} message", i + 2);
        ben.send(c, &text).await?;
        sent.push(("ben".to_owned(), text));
    }
    let got = cai.sync(c).await?;
    ensure_ascending(&got)?;
    ensure!(undecryptable(&got) == 0, "{got:?}");
    ensure!(texts(&got) == sent, "{got:?}");
    ensure!(cai.epoch(c).await? == 1 + EPOCHS as u64);
    // ana, who was away too, also reads everything, and cai writes in the current epoch.
    ensure!(texts(&ana.sync(c).await?) == sent);
    cai.send(c, "back").await?;
    ensure!(texts(&ben.sync(c).await?).last() == Some(&("cai".into(), "back".into())));
    Ok(())
}

/// Every text of the database, as PostgreSQL shows it: each column of each table of the test
/// database cast to text (a `bytea` read as its bytes), searched for `needle`. Answers the
/// columns holding it.
async fn pg_columns_holding(server: &TestServer, needle: &str) -> Result<Vec<String>> {
    let sql = server.sql();
    let columns: Vec<(String, String, String)> = sql
        .rows(
            "SELECT c.table_name::text, c.column_name::text, c.data_type::text
               FROM information_schema.columns c
               JOIN information_schema.tables t
                 ON t.table_schema = c.table_schema AND t.table_name = c.table_name
              WHERE c.table_schema NOT IN ('pg_catalog', 'information_schema')
                AND t.table_type = 'BASE TABLE'",
            &[],
        )
        .await?;
    ensure!(columns.len() > 20, "too few columns: {columns:?}");
    let mut found = Vec::new();
    for (table, column, data_type) in columns {
        let test = if data_type == "bytea" {
            format!("position(convert_to($1, 'UTF8') in \"{column}\") > 0")
        } else {
            format!("strpos(\"{column}\"::text, $1) > 0")
        };
        let query = format!("SELECT count(*) FROM \"{table}\" WHERE {test}");
        let n: i64 = sql.one(&query, &[needle.into()]).await?;
        if n > 0 {
            found.push(format!("{table}.{column}"));
        }
    }
    Ok(found)
}

/// The files of the SQLite database, its write-ahead log included, holding `needle` as bytes.
fn sqlite_files_holding(db_file: &Path, needle: &str) -> Result<Vec<String>> {
    let dir = db_file
        .parent()
        .context("the database file has no directory")?;
    let mut found = Vec::new();
    let mut files = 0;
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if !path.is_file() {
            continue;
        }
        files += 1;
        let bytes = std::fs::read(&path)?;
        if bytes.windows(needle.len()).any(|w| w == needle.as_bytes()) {
            found.push(path.display().to_string());
        }
    }
    ensure!(files > 0, "no database file in {}", dir.display());
    Ok(found)
}

async fn places_holding(server: &TestServer, needle: &str) -> Result<Vec<String>> {
    match server.kind() {
        StoreKind::Postgres => pg_columns_holding(server, needle).await,
        StoreKind::Sqlite => sqlite_files_holding(server.sqlite_store().path(), needle),
    }
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    the_database_holds_no_plaintext
);
async fn the_database_holds_no_plaintext(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let d = Devices::new(&server)?;
    let ana = d.user("ana").await?;
    let ben = d.user("ben").await?;
    let conv = ana.create_conversation().await?;
    let c = conv.conv_id.as_str();
    ana.add_users(c, &["ben"]).await?;
    // Spaces and punctuation never occur in base64, so no ciphertext can hold these by chance.
    let secrets = [
        "zebra quartz 7731: the vault code",
        "ocelot marmalade 4419, meet at noon",
    ];
    ana.send(c, secrets[0]).await.context("ana sends")?;
    ben.sync(c).await.context("ben reads")?;
    ben.send(c, secrets[1]).await.context("ben sends")?;
    ensure!(texts(&ana.sync(c).await?).len() == 2);
    ana.update(c).await.context("ana updates")?;

    // The control: the same scan finds a text sent in a plain conversation.
    let control = "plain heron 5582, readable by the server";
    let plain = ana
        .client()
        .create_conversation(&NewConversation::group(["ben"]))
        .await
        .context("a plain group")?;
    ana.client()
        .send(&plain.conv_id, "control-1", control)
        .await
        .context("a plain message")?;
    if store == StoreKind::Sqlite {
        server
            .sql()
            .execute("PRAGMA wal_checkpoint(PASSIVE)", &[])
            .await?;
    }
    let seen = places_holding(&server, control).await?;
    ensure!(!seen.is_empty(), "the scan cannot see the plain message");
    for secret in secrets {
        let seen = places_holding(&server, secret).await?;
        ensure!(seen.is_empty(), "{secret:?} is stored in {seen:?}");
    }
    Ok(())
}

test_on_both_stores!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    a_commit_whose_answer_was_lost_is_settled
);
async fn a_commit_whose_answer_was_lost_is_settled(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let d = Devices::new(&server)?;
    let ana = d.user("ana").await?;
    server.admin().create_user("ben", None).await?;
    let token = server.admin().create_device("ben", "d1").await?;
    // ben gives up on an answer after a short wait, and never resends on his own.
    let impatient = ClientOptions {
        request_timeout_ms: IMPATIENT_MS,
        retry: RetryPolicy::none(),
        ..ClientOptions::default()
    };
    let ben = d
        .open(
            Client::with_options(server.base_url(), &token, impatient)?,
            "ben",
            "d1",
        )
        .await?;
    let conv = ana.create_conversation().await?;
    let c = conv.conv_id.as_str();
    ana.add_users(c, &["ben"]).await?;
    ben.sync(c).await?;

    // ben's Commit waits behind a lock until his client has stopped waiting for the answer.
    let lock = server.sql().hold_write_lock(c).await?;
    let lost = ben.update(c).await;
    lock.release().await?;
    ensure!(
        matches!(&lost, Err(E2eeError::Client(e)) if e.is_retryable()),
        "{lost:?}"
    );
    // Whether the server wrote it or not, ben's next write settles it first: from the log,
    // or by resending the same Commit. Nobody ends in another epoch.
    ben.send(c, "after the lost answer").await?;
    let got = ana.sync(c).await?;
    ensure!(undecryptable(&got) == 0, "{got:?}");
    ensure!(texts(&got).last() == Some(&("ben".into(), "after the lost answer".into())));
    ensure!(ana.epoch(c).await? == 2 && ben.epoch(c).await? == 2);
    let commits = ana
        .client()
        .all_events(c)
        .await?
        .into_iter()
        .filter(|e| e.kind == parley_client::EventKind::MlsCommit)
        .count();
    ensure!(commits == 2, "{commits} Commits");
    Ok(())
}
