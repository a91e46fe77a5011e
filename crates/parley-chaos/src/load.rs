//! The steady load of one schedule, through the SDK, recorded as a history.
//!
//! Three users with two devices each share two direct conversations and one group (the hot
//! conversation). Each user also has an offline device (`<user>-push`) that never opens a
//! session: it only holds a Web Push subscription of the run's push service (`push.rs`), so
//! the gateways owe it notifications. Every other device keeps a realtime session over the
//! ring of gateways (`RealtimeOptions::with_gateways`) and records each event it hands on as
//! a `delivery`; an actor per device sends (over HTTP to a random gateway, or on its
//! session), reads pages of events, marks conversations read and resends sends whose outcome
//! was unknown. Each send is recorded Jepsen style (docs/HISTORY.md): `invoke`, then `ok`,
//! `fail` (an error that means nothing was written) or `info` (a timeout, a dropped
//! connection, a 5xx, an abort).
//!
//! At the end ([`Load::finish`]) unknown sends are resent, each device's session is closed and
//! the device catches up over HTTP (`sync` deliveries), and the final log of every
//! conversation is read page by page (`final`, `final_head`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use parley_client::{
    AdminClient, Client, ClientError, ClientOptions, Delivery, NewConversation, Realtime,
    RealtimeHandle, RealtimeOptions, RetryPolicy, SendAck,
};
use parley_history::record::{
    Delivery as DeliveryRecord, FinalEvent, FinalHead, Invoke, Member, Read, ReadPosition,
    Reconnect, SendFail, SendInfo, SendOk, Via,
};
use parley_history::Record;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::push::PushLab;
use crate::push_check::Observer;
use crate::recorder::Recorder;

/// Users of one schedule.
pub const USERS_LEN: usize = 3;
/// Devices of each user.
pub const DEVICES_PER_USER: usize = 2;
/// Devices of one schedule.
pub const DEVICES_LEN: usize = USERS_LEN * DEVICES_PER_USER;
/// Longest wait for one HTTP answer: longer than a healthy answer on a loaded machine, short
/// enough that a paused gateway turns sends into unknown outcomes within the schedule.
const REQUEST_TIMEOUT_MS: u64 = 3_000;
/// Longest wait for a TCP connection to a gateway.
const CONNECT_TIMEOUT_MS: u64 = 1_000;
/// Retry budget of a send on the realtime session (it resends after a dropped connection).
const REALTIME_RETRY_BUDGET_MS: u64 = 3_000;
/// Longest pause between two reconnect attempts of a session: gateways come back within
/// seconds, and the schedule is short.
const RECONNECT_BACKOFF_MAX_MS: u64 = 1_000;
/// Pause between two attempts to open a device's session after it was dropped.
const CONNECT_RETRY_PAUSE_MS: u64 = 250;
/// Attempts to open a device's session before it gives up for the rest of the schedule (its
/// tail is then caught up over HTTP at the end).
const CONNECT_ATTEMPTS_MAX: u32 = 120;
/// Shortest and longest pause between two operations of one device: six devices make about
/// 50 operations per second, a steady load a 2-core machine carries beside its faults.
const OP_PAUSE_MS_MIN: u64 = 40;
const OP_PAUSE_MS_MAX: u64 = 160;
/// The mix of operations, as bounds on a roll of 0..100: sends over HTTP below
/// `SEND_REALTIME_FROM` (55 %), sends on the session below `RESEND_FROM` (15 %), resends of an
/// unknown send below `READ_FROM` (10 %; a new send when there is none), reads below
/// `MARK_READ_FROM` (10 %), mark-read above (10 %). Mostly sends: they are what can be lost.
const SEND_REALTIME_FROM: u32 = 55;
const RESEND_FROM: u32 = 70;
const READ_FROM: u32 = 80;
const MARK_READ_FROM: u32 = 90;
/// Events per page of a read and of the catch-up.
const READ_PAGE_LEN: u32 = 50;
/// Events per page of the final log: the server's maximum.
const FINAL_PAGE_LEN: u32 = 500;
/// Resends of an unknown send at the end, each a new invoke.
const FINAL_RESENDS_MAX: u32 = 3;
/// Pause between two resends or two catch-up attempts at the end.
const FINAL_RETRY_PAUSE_MS: u64 = 500;
/// Attempts of one catch-up or final page before the schedule is given up.
const PAGE_ATTEMPTS_MAX: u32 = 10;
/// Pages of one conversation at the end: far more than a schedule writes.
const PAGES_MAX: usize = 1_000;

/// One conversation of the schedule.
pub struct Conv {
    pub conv_id: String,
    pub epoch: i64,
    /// Indices of its member users.
    pub members: Vec<usize>,
    /// The seq each member joined at, in the order of `members`.
    pub joined: Vec<i64>,
}

/// One device of the schedule.
struct Device {
    name: String,
    user: usize,
    /// One client per gateway, in the order of the gateway URLs.
    clients: Vec<Client>,
    /// Indices of the conversations of its user.
    convs: Vec<usize>,
    /// The last seq handed on per conversation.
    delivered: Mutex<HashMap<String, i64>>,
    /// The current session's handle, while one is open.
    handle: Mutex<Option<RealtimeHandle>>,
    /// A client fault: abort the next send after this many ms.
    abort_next_send_ms: Mutex<Option<u64>>,
    /// Sends whose outcome is unknown: `(conv index, client_msg_id)`.
    unknown: Mutex<Vec<(usize, String)>>,
    control: mpsc::UnboundedSender<Control>,
}

enum Control {
    /// Drop the session and open a new one (a client fault).
    Drop,
    /// Close the session for good (the end of the schedule).
    Stop,
}

/// A user's offline device: no session, a push subscription, and a client for reading the
/// user's read positions at the end.
struct OfflineDevice {
    name: String,
    user: usize,
    client: Client,
    convs: Vec<usize>,
}

/// How a send travels.
#[derive(Clone, Copy)]
enum Transport {
    /// `POST /v1/conversations/{id}/messages` on gateway `i`.
    Http(usize),
    /// The device's realtime session.
    Realtime,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The load of one schedule.
pub struct Load {
    rec: Arc<Recorder>,
    urls: Vec<String>,
    users: Vec<String>,
    convs: Vec<Conv>,
    devices: Vec<Arc<Device>>,
    /// One offline device per user.
    offline: Vec<OfflineDevice>,
    /// One lock per user around mark-read and its record: answers of two devices of one user
    /// are recorded in the order the server gave them.
    user_locks: Vec<tokio::sync::Mutex<()>>,
    receivers: Mutex<Option<JoinSet<()>>>,
    /// Index of the group, the hot conversation.
    pub hot: usize,
}

/// The body of a send: its key, so a log read by a person shows which send it was.
fn body_of(client_msg_id: &str) -> String {
    format!("chaos {client_msg_id}")
}

fn client_options() -> ClientOptions {
    ClientOptions {
        request_timeout_ms: REQUEST_TIMEOUT_MS,
        connect_timeout_ms: CONNECT_TIMEOUT_MS,
        retry: RetryPolicy::none(),
    }
}

/// Whether an error means nothing was written: a refusal with a code and a 4xx status.
/// Everything else (timeouts, dropped connections, 5xx such as 503 OUTCOME_UNKNOWN) leaves
/// the outcome unknown.
fn is_definite(e: &ClientError) -> bool {
    e.code().is_some() && e.status().is_some_and(|s| (400..500).contains(&s))
}

impl Load {
    /// Creates the users, devices and conversations of schedule `tag` through the first
    /// gateway, records what each device must receive, subscribes each user's offline device
    /// at `push`, and opens every other device's session.
    pub async fn start(
        urls: &[String],
        admin_token: &str,
        tag: &str,
        rec: Arc<Recorder>,
        push: &PushLab,
    ) -> Result<Arc<Load>> {
        let base = urls.first().context("no gateway")?;
        let admin = AdminClient::with_options(base, admin_token, client_options())?;
        let users: Vec<String> = (0..USERS_LEN).map(|u| format!("{tag}-u{u}")).collect();
        let mut tokens = Vec::new();
        for user in &users {
            admin
                .create_user(user, None)
                .await
                .with_context(|| format!("creating user {user}"))?;
            for d in 0..DEVICES_PER_USER {
                let token = admin
                    .create_device(user, &format!("d{d}"))
                    .await
                    .with_context(|| format!("issuing a token for {user}"))?;
                tokens.push(token);
            }
        }
        let owner = |u: usize| -> Result<Client> {
            Ok(Client::with_options(
                base,
                &tokens[u * DEVICES_PER_USER],
                client_options(),
            )?)
        };
        let plans = [
            (0, NewConversation::direct(users[1].clone()), vec![0, 1]),
            (1, NewConversation::direct(users[2].clone()), vec![1, 2]),
            (
                0,
                NewConversation::group([users[1].clone(), users[2].clone()]),
                vec![0, 1, 2],
            ),
        ];
        let hot = plans.len() - 1;
        let mut convs = Vec::new();
        for (creator, new, members) in plans {
            let owner = owner(creator)?;
            let conv = owner
                .create_conversation(&new)
                .await
                .context("creating a conversation")?;
            // A member sees the log from its own join on: the seq of its `join` event.
            let joins = owner
                .all_events(&conv.conv_id)
                .await
                .context("reading the joins of a new conversation")?;
            let joined = members
                .iter()
                .map(|&u| {
                    joins
                        .iter()
                        .find(|e| e.subject_user.as_deref() == Some(users[u].as_str()))
                        .map_or(1, |e| e.seq)
                })
                .collect();
            convs.push(Conv {
                conv_id: conv.conv_id,
                epoch: conv.epoch,
                members,
                joined,
            });
        }
        let mut offline = Vec::new();
        for (user, id) in users.iter().enumerate() {
            let name = format!("{id}-push");
            let token = admin
                .create_device(id, "push")
                .await
                .with_context(|| format!("issuing a token for {name}"))?;
            let client = Client::with_options(base, &token, client_options())?;
            let subscription = push.subscribe(&name);
            client
                .register_web_push(
                    &subscription.endpoint,
                    &subscription.p256dh,
                    &subscription.auth,
                )
                .await
                .with_context(|| format!("registering the push subscription of {name}"))?;
            offline.push(OfflineDevice {
                name,
                user,
                client,
                convs: (0..convs.len())
                    .filter(|c| convs[*c].members.contains(&user))
                    .collect(),
            });
        }
        let mut devices = Vec::new();
        let mut receivers = JoinSet::new();
        let mut controls = Vec::new();
        for (i, token) in tokens.iter().enumerate() {
            let user = i / DEVICES_PER_USER;
            let name = format!("{}-d{}", users[user], i % DEVICES_PER_USER);
            let clients = urls
                .iter()
                .map(|u| Client::with_options(u, token, client_options()))
                .collect::<Result<Vec<_>, _>>()?;
            let member_of: Vec<usize> = (0..convs.len())
                .filter(|c| convs[*c].members.contains(&user))
                .collect();
            for &c in &member_of {
                let conv = &convs[c];
                let from_seq = conv
                    .members
                    .iter()
                    .position(|&m| m == user)
                    .map_or(1, |i| conv.joined[i]);
                rec.record(|_| {
                    Record::Member(Member {
                        conv: conv.conv_id.clone(),
                        user: users[user].clone(),
                        device: name.clone(),
                        from_seq,
                        to_seq: None,
                    })
                });
            }
            let (control, control_rx) = mpsc::unbounded_channel();
            devices.push(Arc::new(Device {
                name,
                user,
                clients,
                convs: member_of,
                delivered: Mutex::new(HashMap::new()),
                handle: Mutex::new(None),
                abort_next_send_ms: Mutex::new(None),
                unknown: Mutex::new(Vec::new()),
                control,
            }));
            controls.push(control_rx);
        }
        let load = Arc::new(Load {
            rec,
            urls: urls.to_vec(),
            users,
            convs,
            devices,
            offline,
            user_locks: (0..USERS_LEN)
                .map(|_| tokio::sync::Mutex::new(()))
                .collect(),
            receivers: Mutex::new(None),
            hot,
        });
        for (i, control_rx) in controls.into_iter().enumerate() {
            let (load, device) = (load.clone(), load.devices[i].clone());
            receivers.spawn(async move { load.receive(device, control_rx).await });
        }
        *lock(&load.receivers) = Some(receivers);
        Ok(load)
    }

    /// The id of conversation `index`.
    pub fn conv_id(&self, index: usize) -> &str {
        &self.convs[index].conv_id
    }

    /// The offline devices, for the notification checker.
    pub fn observers(&self) -> Vec<Observer> {
        self.offline
            .iter()
            .map(|d| Observer {
                device: d.name.clone(),
                user: self.users[d.user].clone(),
                convs: d
                    .convs
                    .iter()
                    .map(|&c| self.convs[c].conv_id.clone())
                    .collect(),
            })
            .collect()
    }

    /// Each user's read position in each of its conversations, as the server has it (read
    /// by the user's offline device, once the load has stopped): `(user, conv_id) -> read_seq`.
    pub async fn read_positions(&self) -> Result<HashMap<(String, String), i64>> {
        let mut positions = HashMap::new();
        for device in &self.offline {
            let mut attempts = 1;
            let list = loop {
                match device.client.list_conversations(None).await {
                    Ok(list) => break list,
                    Err(e) if attempts >= PAGE_ATTEMPTS_MAX => {
                        return Err(anyhow::Error::from(e)).with_context(|| {
                            format!("listing the conversations of {}", device.name)
                        })
                    }
                    Err(_) => attempts += 1,
                }
                tokio::time::sleep(Duration::from_millis(FINAL_RETRY_PAUSE_MS)).await;
            };
            let user = &self.users[device.user];
            for conv in list.conversations {
                if device
                    .convs
                    .iter()
                    .any(|&c| self.convs[c].conv_id == conv.conv_id)
                {
                    positions.insert((user.clone(), conv.conv_id), conv.read_seq);
                }
            }
        }
        Ok(positions)
    }

    /// Runs every device's actor until `until`; `seed` seeds their choices.
    pub async fn run(self: &Arc<Self>, until: Instant, seed: u64) {
        let mut actors = JoinSet::new();
        for (i, device) in self.devices.iter().enumerate() {
            let (load, device) = (self.clone(), device.clone());
            let rng = StdRng::seed_from_u64(seed.wrapping_add(i as u64));
            actors.spawn(async move { load.act(&device, until, rng).await });
        }
        while let Some(joined) = actors.join_next().await {
            if let Err(e) = joined {
                tracing::warn!(error = %e, "an actor ended abnormally");
            }
        }
    }

    /// A client fault: device `device` drops its session (a new one opens) and aborts its
    /// next send after `abort_after_ms`.
    pub fn disconnect(&self, device: usize, abort_after_ms: u64) -> Result<()> {
        let device = self.devices.get(device).context("no such device")?;
        *lock(&device.abort_next_send_ms) = Some(abort_after_ms);
        device
            .control
            .send(Control::Drop)
            .ok()
            .context("the device's session task has ended")
    }

    /// The end of the schedule, once every fault is healed: resends unknown sends, closes the
    /// sessions, catches every device up over HTTP and reads the final logs.
    pub async fn finish(self: &Arc<Self>) -> Result<()> {
        let mut resends = JoinSet::new();
        for device in &self.devices {
            let (load, device) = (self.clone(), device.clone());
            resends.spawn(async move { load.resend_unknown(&device).await });
        }
        while resends.join_next().await.is_some() {}
        tracing::info!("unknown sends resent; closing the sessions");
        for device in &self.devices {
            // A session task that ended already has nothing left to close.
            let _ = device.control.send(Control::Stop);
        }
        let receivers = lock(&self.receivers).take();
        if let Some(mut receivers) = receivers {
            while receivers.join_next().await.is_some() {}
        }
        tracing::info!("sessions closed; syncing");
        for device in &self.devices {
            for &c in &device.convs {
                self.catch_up(device, c).await?;
            }
        }
        for c in 0..self.convs.len() {
            self.read_final(c).await?;
        }
        Ok(())
    }

    /// Keeps the device's realtime session: records what it hands on, opens a new one after
    /// a client fault, and closes it at the end, taking whatever it had queued.
    async fn receive(&self, device: Arc<Device>, mut control: mpsc::UnboundedReceiver<Control>) {
        let mut first = true;
        loop {
            let Some(mut rt) = self.connect(&device, &mut control).await else {
                return;
            };
            if !first {
                self.rec.record(|time_ms| {
                    Record::Reconnect(Reconnect {
                        time_ms,
                        device: device.name.clone(),
                    })
                });
            }
            first = false;
            *lock(&device.handle) = Some(rt.handle());
            let stop = loop {
                tokio::select! {
                    delivery = rt.next() => match delivery {
                        Some(d) => self.take(&device, d),
                        None => break false,
                    },
                    command = control.recv() => match command {
                        Some(Control::Drop) => break false,
                        Some(Control::Stop) | None => break true,
                    },
                }
            };
            *lock(&device.handle) = None;
            rt.close().await;
            while let Some(d) = rt.next().await {
                self.take(&device, d);
            }
            if stop {
                return;
            }
        }
    }

    /// Opens a session tracking every conversation of the device from what it has; `None`
    /// when told to stop or after [`CONNECT_ATTEMPTS_MAX`] failures.
    async fn connect(
        &self,
        device: &Device,
        control: &mut mpsc::UnboundedReceiver<Control>,
    ) -> Option<Realtime> {
        for _ in 0..CONNECT_ATTEMPTS_MAX {
            if let Ok(Control::Stop) = control.try_recv() {
                return None;
            }
            let tracked: Vec<(String, i64, i64)> = {
                let delivered = lock(&device.delivered);
                device
                    .convs
                    .iter()
                    .map(|&c| {
                        let conv = &self.convs[c];
                        let cursor = delivered.get(&conv.conv_id).copied().unwrap_or(0);
                        (conv.conv_id.clone(), conv.epoch, cursor)
                    })
                    .collect()
            };
            let tracked: Vec<(&str, i64, i64)> = tracked
                .iter()
                .map(|(c, e, s)| (c.as_str(), *e, *s))
                .collect();
            let options = RealtimeOptions {
                answer_timeout_ms: REQUEST_TIMEOUT_MS,
                handshake_timeout_ms: REQUEST_TIMEOUT_MS,
                reconnect_backoff_max_ms: RECONNECT_BACKOFF_MAX_MS,
                retry: RetryPolicy::within_ms(REALTIME_RETRY_BUDGET_MS),
                ..RealtimeOptions::default()
            }
            .with_gateways(self.urls.clone());
            match Realtime::connect_tracking(&device.clients[0], options, &tracked).await {
                Ok(rt) => return Some(rt),
                Err(e) => tracing::debug!(device = %device.name, error = %e, "connect failed"),
            }
            tokio::time::sleep(Duration::from_millis(CONNECT_RETRY_PAUSE_MS)).await;
        }
        tracing::warn!(device = %device.name, "no session after {CONNECT_ATTEMPTS_MAX} attempts");
        None
    }

    /// Records one delivery of a session.
    fn take(&self, device: &Device, delivery: Delivery) {
        match delivery {
            Delivery::Event(incoming) => {
                let e = incoming.event;
                lock(&device.delivered).insert(e.conv_id.clone(), e.seq);
                self.rec.record(|time_ms| {
                    Record::Delivery(DeliveryRecord {
                        time_ms,
                        device: device.name.clone(),
                        conv: e.conv_id,
                        seq: e.seq,
                        client_msg_id: e.client_msg_id,
                        message_id: e.message_id,
                        via: Via::Push,
                    })
                });
            }
            Delivery::Reconnected => self.rec.record(|time_ms| {
                Record::Reconnect(Reconnect {
                    time_ms,
                    device: device.name.clone(),
                })
            }),
            _ => {}
        }
    }

    /// The device's operations until `until`.
    async fn act(&self, device: &Device, until: Instant, mut rng: StdRng) {
        let mut sent = 0u64;
        while Instant::now() < until {
            let pause = rng.gen_range(OP_PAUSE_MS_MIN..=OP_PAUSE_MS_MAX);
            tokio::time::sleep(Duration::from_millis(pause)).await;
            let gateway = rng.gen_range(0..self.urls.len());
            let conv = device.convs[rng.gen_range(0..device.convs.len())];
            let roll = rng.gen_range(0..100);
            let resend = (RESEND_FROM..READ_FROM).contains(&roll);
            let retry = resend
                .then(|| {
                    let mut unknown = lock(&device.unknown);
                    (!unknown.is_empty()).then(|| unknown.remove(0))
                })
                .flatten();
            if let Some((conv, client_msg_id)) = retry {
                self.send(device, conv, &client_msg_id, Transport::Http(gateway))
                    .await;
            } else if roll < READ_FROM {
                sent += 1;
                let client_msg_id = format!("{}-m{sent}", device.name);
                let transport = if roll < SEND_REALTIME_FROM {
                    Transport::Http(gateway)
                } else {
                    Transport::Realtime
                };
                self.send(device, conv, &client_msg_id, transport).await;
            } else if roll < MARK_READ_FROM {
                self.read(device, conv, gateway, &mut rng).await;
            } else {
                self.mark_read(device, conv, gateway).await;
            }
        }
    }

    /// One send, recorded as an invoke and its completion.
    async fn send(&self, device: &Device, conv: usize, client_msg_id: &str, transport: Transport) {
        let conv_id = self.convs[conv].conv_id.clone();
        let body = body_of(client_msg_id);
        self.rec.record(|time_ms| {
            Record::Invoke(Invoke {
                time_ms,
                process: device.name.clone(),
                conv: conv_id.clone(),
                client_msg_id: client_msg_id.to_owned(),
            })
        });
        let abort_ms = lock(&device.abort_next_send_ms).take();
        let handle = lock(&device.handle).clone();
        let attempt = async {
            match (transport, handle) {
                (Transport::Realtime, Some(h)) => h.send(&conv_id, client_msg_id, &body).await,
                (Transport::Realtime, None) => {
                    device.clients[0].send(&conv_id, client_msg_id, &body).await
                }
                (Transport::Http(g), _) => {
                    device.clients[g].send(&conv_id, client_msg_id, &body).await
                }
            }
        };
        let outcome: Result<SendAck, String> = match abort_ms {
            Some(ms) => match tokio::time::timeout(Duration::from_millis(ms), attempt).await {
                Ok(answer) => answer.map_err(|e| self.classify(&e)),
                Err(_) => Err(format!("aborted by the client after {ms} ms")),
            },
            None => attempt.await.map_err(|e| self.classify(&e)),
        };
        let process = device.name.clone();
        let client_msg_id = client_msg_id.to_owned();
        match outcome {
            Ok(ack) => self.rec.record(|time_ms| {
                Record::Ok(SendOk {
                    time_ms,
                    process,
                    conv: conv_id,
                    client_msg_id,
                    seq: ack.seq,
                    message_id: Some(ack.message_id),
                    dup: ack.dup,
                })
            }),
            Err(reason) if reason.starts_with(DEFINITE) => {
                let code = reason[DEFINITE.len()..].to_owned();
                self.rec.record(|time_ms| {
                    Record::Fail(SendFail {
                        time_ms,
                        process,
                        conv: conv_id,
                        client_msg_id,
                        code,
                    })
                })
            }
            Err(reason) => {
                lock(&device.unknown).push((conv, client_msg_id.clone()));
                self.rec.record(|time_ms| {
                    Record::Info(SendInfo {
                        time_ms,
                        process,
                        conv: conv_id,
                        client_msg_id,
                        reason,
                    })
                })
            }
        }
    }

    /// A definite failure as `DEFINITE` and its code; any other error as its description.
    fn classify(&self, e: &ClientError) -> String {
        match e.code() {
            Some(code) if is_definite(e) => format!("{DEFINITE}{code}"),
            _ => e.to_string(),
        }
    }

    /// One page of events from a random cursor at or below what the device has.
    async fn read(&self, device: &Device, conv: usize, gateway: usize, rng: &mut StdRng) {
        let conv_id = &self.convs[conv].conv_id;
        let have = lock(&device.delivered).get(conv_id).copied().unwrap_or(0);
        let after = rng.gen_range(0..=have);
        let page = device.clients[gateway]
            .events_after(conv_id, after, Some(READ_PAGE_LEN), None)
            .await;
        if let Ok(page) = page {
            self.rec.record(|time_ms| {
                Record::Read(Read {
                    time_ms,
                    device: device.name.clone(),
                    conv: conv_id.clone(),
                    after,
                    seqs: page.events.iter().map(|e| e.seq).collect(),
                    through_seq: page.through_seq,
                    head: page.head,
                })
            });
        }
    }

    /// Marks the conversation read up to what the device has; records the answer.
    async fn mark_read(&self, device: &Device, conv: usize, gateway: usize) {
        let conv_id = &self.convs[conv].conv_id;
        let have = lock(&device.delivered).get(conv_id).copied().unwrap_or(0);
        if have == 0 {
            return;
        }
        let _order = self.user_locks[device.user].lock().await;
        if let Ok(ack) = device.clients[gateway].mark_read(conv_id, have).await {
            self.rec.record(|time_ms| {
                Record::ReadPosition(ReadPosition {
                    time_ms,
                    user: self.users[device.user].clone(),
                    device: device.name.clone(),
                    conv: conv_id.clone(),
                    read_seq: ack.read_seq,
                })
            });
        }
    }

    /// Resends each unknown send of the device, a few times at most, until its outcome is
    /// known.
    async fn resend_unknown(&self, device: &Device) {
        let unknown: Vec<(usize, String)> = std::mem::take(&mut *lock(&device.unknown));
        for (conv, client_msg_id) in unknown {
            for attempt in 0..FINAL_RESENDS_MAX {
                let gateway = attempt as usize % self.urls.len();
                self.send(device, conv, &client_msg_id, Transport::Http(gateway))
                    .await;
                let still_unknown = {
                    let mut unknown = lock(&device.unknown);
                    let pending = unknown.iter().position(|(_, m)| *m == client_msg_id);
                    pending.map(|i| unknown.remove(i)).is_some()
                };
                if !still_unknown {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(FINAL_RETRY_PAUSE_MS)).await;
            }
        }
    }

    /// One page of events after `after`, retried a few times.
    async fn page(
        &self,
        client: &Client,
        conv_id: &str,
        after: i64,
        limit: u32,
    ) -> Result<parley_client::EventsPage> {
        let mut last = None;
        for _ in 0..PAGE_ATTEMPTS_MAX {
            match client.events_after(conv_id, after, Some(limit), None).await {
                Ok(page) => return Ok(page),
                Err(e) => last = Some(e),
            }
            tokio::time::sleep(Duration::from_millis(FINAL_RETRY_PAUSE_MS)).await;
        }
        Err(last.map_or_else(|| anyhow::anyhow!("no attempt"), anyhow::Error::from))
            .with_context(|| format!("reading {conv_id} after {after}"))
    }

    /// Brings the device level with the conversation over HTTP: every event after what it
    /// has, recorded as `sync` deliveries, each page as a `read`.
    async fn catch_up(&self, device: &Device, conv: usize) -> Result<()> {
        let conv_id = self.convs[conv].conv_id.clone();
        let mut cursor = lock(&device.delivered).get(&conv_id).copied().unwrap_or(0);
        for _ in 0..PAGES_MAX {
            let page = self
                .page(&device.clients[0], &conv_id, cursor, READ_PAGE_LEN)
                .await?;
            let after = cursor;
            self.rec.record(|time_ms| {
                Record::Read(Read {
                    time_ms,
                    device: device.name.clone(),
                    conv: conv_id.clone(),
                    after,
                    seqs: page.events.iter().map(|e| e.seq).collect(),
                    through_seq: page.through_seq,
                    head: page.head,
                })
            });
            let from = cursor;
            for e in page.events.into_iter().filter(|e| e.seq > from) {
                cursor = e.seq;
                self.rec.record(|time_ms| {
                    Record::Delivery(DeliveryRecord {
                        time_ms,
                        device: device.name.clone(),
                        conv: conv_id.clone(),
                        seq: e.seq,
                        client_msg_id: e.client_msg_id,
                        message_id: e.message_id,
                        via: Via::Sync,
                    })
                });
            }
            cursor = cursor.max(page.through_seq);
            if page.through_seq >= page.head {
                lock(&device.delivered).insert(conv_id, cursor);
                return Ok(());
            }
        }
        anyhow::bail!("{conv_id}: no end after {PAGES_MAX} pages")
    }

    /// Reads the final log of conversation `conv` as its first member's first device.
    async fn read_final(&self, conv: usize) -> Result<()> {
        let c = &self.convs[conv];
        let reader = &self.devices[c.members[0] * DEVICES_PER_USER].clients[0];
        let mut cursor = 0;
        for _ in 0..PAGES_MAX {
            let page = self
                .page(reader, &c.conv_id, cursor, FINAL_PAGE_LEN)
                .await?;
            for e in &page.events {
                self.rec.record(|_| {
                    Record::Final(FinalEvent {
                        conv: c.conv_id.clone(),
                        seq: e.seq,
                        client_msg_id: e.client_msg_id.clone(),
                        sender: e.sender_user.clone(),
                        message_id: e.message_id.clone(),
                    })
                });
            }
            cursor = page.through_seq;
            if page.through_seq >= page.head {
                self.rec.record(|_| {
                    Record::FinalHead(FinalHead {
                        conv: c.conv_id.clone(),
                        min_seq: page.min_seq,
                        head: page.head,
                    })
                });
                return Ok(());
            }
        }
        anyhow::bail!("{}: no end after {PAGES_MAX} pages", c.conv_id)
    }
}

/// The prefix of a classified error that means a definite failure.
const DEFINITE: &str = "definite:";

#[cfg(test)]
mod tests {
    use super::*;

    fn api(status: u16, code: &str) -> ClientError {
        ClientError::Api {
            status,
            code: code.to_owned(),
            message: String::new(),
        }
    }

    #[test]
    fn only_a_refusal_with_a_4xx_code_is_a_definite_failure() {
        assert!(is_definite(&api(403, "NOT_MEMBER")));
        assert!(is_definite(&api(429, "RATE_LIMITED")));
        assert!(!is_definite(&api(503, "OUTCOME_UNKNOWN")));
        assert!(!is_definite(&api(503, "UNAVAILABLE")));
        assert!(!is_definite(&api(500, "INTERNAL")));
        assert!(!is_definite(&ClientError::NoAnswer { waited_ms: 3_000 }));
        assert!(!is_definite(&ClientError::Disconnected {
            reason: "closed".to_owned()
        }));
    }
}
