//! The simulated world of a load-model run: users, the devices that are online, and the
//! conversations between them, all created through the admin and device APIs of the server
//! under test, concurrently but with a bounded number of requests in flight.
//!
//! Every id carries a random run tag, so runs never collide with each other or with real data.

use std::collections::HashSet;

use anyhow::{bail, Context, Result};
use futures::{stream, StreamExt, TryStreamExt};
use parley_client::{AdminClient, Client, NewConversation};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::Rng;
use serde::Serialize;

/// Admin and create requests in flight while the world is built.
const SETUP_REQUESTS_IN_FLIGHT: usize = 32;
/// Device id of every simulated device (one per online user).
pub const DEVICE_ID: &str = "bench";

/// What kind of traffic a conversation stands for in the load model (SPEC §13).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ConvClass {
    Direct,
    Group,
    Hot,
}

/// What to build.
#[derive(Debug, Clone, Serialize)]
pub struct WorldPlan {
    /// Users created in all.
    pub users: usize,
    /// Users `0..online` have a device with a live WebSocket session; the others are members
    /// that are offline for the whole run.
    pub online: usize,
    /// Direct chats, each between two online users.
    pub directs: usize,
    /// Member counts of the groups (members drawn from all users, at least two online).
    pub group_sizes: Vec<usize>,
    /// Member count of the one hot group, if any (the first users, so most online ones).
    pub hot_group: Option<usize>,
}

impl WorldPlan {
    fn check(&self) -> Result<()> {
        if self.online < 2 || self.online > self.users {
            bail!(
                "need at least 2 online devices and no more than users ({} online of {} users)",
                self.online,
                self.users
            );
        }
        if let Some(hot) = self.hot_group {
            if hot < 2 || hot > self.users {
                bail!("the hot group needs 2..={} members, not {hot}", self.users);
            }
        }
        if let Some(&big) = self.group_sizes.iter().max() {
            if big > self.users {
                bail!("a group of {big} needs at least as many users");
            }
        }
        let pairs = self.online * (self.online - 1) / 2;
        if self.directs > pairs {
            bail!(
                "{} direct chats need more than {} online users",
                self.directs,
                self.online
            );
        }
        Ok(())
    }
}

/// `count` group sizes spread log-uniformly over `min..=max`: many small groups, a few big.
pub fn log_uniform_sizes(rng: &mut StdRng, count: usize, min: usize, max: usize) -> Vec<usize> {
    let (lo, hi) = ((min.max(2)) as f64, (max.max(min.max(2))) as f64);
    let mut sizes: Vec<usize> = (0..count)
        .map(|_| (lo * (hi / lo).powf(rng.gen::<f64>())).round() as usize)
        .collect();
    // The extremes are always present, so the report's range is the range asked for.
    if count >= 2 {
        sizes[0] = lo as usize;
        sizes[1] = hi as usize;
    }
    sizes
}

#[derive(Debug, Clone)]
pub struct Conv {
    pub id: String,
    pub class: ConvClass,
    pub members: usize,
    /// Online members, as device indices (device `i` belongs to user `i`).
    pub online: Vec<u32>,
    pub epoch: i64,
    /// The head right after creation: devices track the conversation from here, and every
    /// event after it comes from the benchmark's sends.
    pub start: i64,
}

pub struct World {
    pub tag: String,
    pub plan: WorldPlan,
    /// One client per online device, index = device index = user index.
    pub clients: Vec<Client>,
    pub convs: Vec<Conv>,
    /// Conversation indices of each online device.
    pub device_convs: Vec<Vec<u32>>,
}

impl World {
    pub fn user_id(tag: &str, i: usize) -> String {
        format!("b{tag}-u{i}")
    }

    /// Conversation indices of one class.
    pub fn of_class(&self, class: ConvClass) -> Vec<u32> {
        (0..self.convs.len() as u32)
            .filter(|&c| self.convs[c as usize].class == class)
            .collect()
    }

    /// What the report says was simulated.
    pub fn summary(&self) -> serde_json::Value {
        let group_sizes: Vec<usize> = self
            .convs
            .iter()
            .filter(|c| c.class == ConvClass::Group)
            .map(|c| c.members)
            .collect();
        let tracked: usize = self.device_convs.iter().map(Vec::len).sum();
        serde_json::json!({
            "run_tag": self.tag,
            "users": self.plan.users,
            "devices_online": self.plan.online,
            "members_offline": self.plan.users - self.plan.online,
            "direct_chats": self.plan.directs,
            "groups": group_sizes.len(),
            "group_members_min": group_sizes.iter().min(),
            "group_members_max": group_sizes.iter().max(),
            "group_members_mean": if group_sizes.is_empty() { 0.0 } else {
                group_sizes.iter().sum::<usize>() as f64 / group_sizes.len() as f64
            },
            "hot_group_members": self.plan.hot_group,
            "hot_group_online": self.convs.iter().find(|c| c.class == ConvClass::Hot).map(|c| c.online.len()),
            "tracked_conversations_per_device_mean": tracked as f64 / self.plan.online.max(1) as f64,
        })
    }
}

/// Creates the users, the online devices and the conversations. Device `d` is a client of
/// `admins[d % admins.len()]`'s gateway, so its HTTP calls go there. `on_step` is called after
/// every request, for the progress display.
pub async fn build(
    admins: &[AdminClient],
    plan: WorldPlan,
    rng: &mut StdRng,
    on_step: &(dyn Fn() + Sync),
) -> Result<World> {
    plan.check()?;
    let tag = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    let users: Vec<String> = (0..plan.users).map(|i| World::user_id(&tag, i)).collect();
    let Some(admin) = admins.first() else {
        bail!("no server to build the world on");
    };
    create_users(admin, &users, on_step).await?;
    let clients = issue_devices(admins, &users[..plan.online], on_step).await?;
    let wanted = choose_conversations(&plan, rng);
    let convs = create_conversations(&tag, &users, &clients, wanted, on_step).await?;
    let mut device_convs = vec![Vec::new(); plan.online];
    for (c, conv) in convs.iter().enumerate() {
        for &d in &conv.online {
            device_convs[d as usize].push(c as u32);
        }
    }
    Ok(World {
        tag,
        plan,
        clients,
        convs,
        device_convs,
    })
}

async fn create_users(
    admin: &AdminClient,
    users: &[String],
    on_step: &(dyn Fn() + Sync),
) -> Result<()> {
    stream::iter(users.iter())
        .map(|u| async move {
            let made = admin.create_user(u, None).await;
            on_step();
            made.with_context(|| format!("creating user {u}"))
        })
        .buffer_unordered(SETUP_REQUESTS_IN_FLIGHT)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

/// A device for each of `users`, as a client logged in with its token; user `i`'s device is
/// a client of `admins[i % admins.len()]`'s gateway.
async fn issue_devices(
    admins: &[AdminClient],
    users: &[String],
    on_step: &(dyn Fn() + Sync),
) -> Result<Vec<Client>> {
    stream::iter(users.iter().enumerate())
        .map(|(i, u)| async move {
            let admin = &admins[i % admins.len()];
            let token = admin.create_device(u, DEVICE_ID).await;
            on_step();
            let token = token.with_context(|| format!("issuing a device token for {u}"))?;
            Ok::<_, anyhow::Error>(admin.device_client(&token))
        })
        .buffered(SETUP_REQUESTS_IN_FLIGHT)
        .try_collect()
        .await
}

/// A conversation to create: its class, the creating device, and the other members as user
/// indices.
type Wanted = (ConvClass, usize, Vec<usize>);

/// The conversations of `plan`: direct chats between distinct pairs of online users, groups
/// with a creator and a second member online, and the hot group of the first users.
fn choose_conversations(plan: &WorldPlan, rng: &mut StdRng) -> Vec<Wanted> {
    let mut wanted: Vec<Wanted> = Vec::new();
    let mut pairs = HashSet::new();
    while pairs.len() < plan.directs {
        let a = rng.gen_range(0..plan.online);
        let b = rng.gen_range(0..plan.online);
        if a != b && pairs.insert((a.min(b), a.max(b))) {
            wanted.push((ConvClass::Direct, a, vec![b]));
        }
    }
    let all: Vec<usize> = (0..plan.users).collect();
    for &size in &plan.group_sizes {
        let creator = rng.gen_range(0..plan.online);
        let mut second = rng.gen_range(0..plan.online);
        while second == creator {
            second = rng.gen_range(0..plan.online);
        }
        let mut members: Vec<usize> = vec![second];
        let mut chosen: HashSet<usize> = [creator, second].into();
        for &u in all.choose_multiple(rng, size.min(plan.users)) {
            if members.len() + 1 >= size {
                break;
            }
            if chosen.insert(u) {
                members.push(u);
            }
        }
        wanted.push((ConvClass::Group, creator, members));
    }
    if let Some(hot) = plan.hot_group {
        wanted.push((ConvClass::Hot, 0, (1..hot).collect()));
    }
    wanted
}

async fn create_conversations(
    tag: &str,
    users: &[String],
    clients: &[Client],
    wanted: Vec<Wanted>,
    on_step: &(dyn Fn() + Sync),
) -> Result<Vec<Conv>> {
    stream::iter(wanted.into_iter().enumerate())
        .map(|(i, (class, creator, others))| async move {
            let names: Vec<&str> = others.iter().map(|&u| users[u].as_str()).collect();
            let request = match class {
                ConvClass::Direct => NewConversation::direct(names[0]),
                ConvClass::Group | ConvClass::Hot => {
                    NewConversation::group(names).with_conv_id(format!("b{tag}-g{i}"))
                }
            };
            let made = clients[creator].create_conversation(&request).await;
            on_step();
            let made = made.with_context(|| format!("creating conversation {i}"))?;
            let mut online: Vec<u32> = std::iter::once(creator)
                .chain(others.iter().copied())
                .filter(|&u| u < clients.len())
                .map(|u| u as u32)
                .collect();
            online.sort_unstable();
            Ok::<_, anyhow::Error>(Conv {
                id: made.conv_id,
                class,
                members: others.len() + 1,
                online,
                epoch: made.epoch,
                start: made.head,
            })
        })
        .buffered(SETUP_REQUESTS_IN_FLIGHT / 2)
        .try_collect()
        .await
}

/// Requests `build` makes for `plan`, for a progress bar's length.
pub fn setup_requests(plan: &WorldPlan) -> u64 {
    (plan.users + plan.online + plan.directs + plan.group_sizes.len() + plan.hot_group.iter().len())
        as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn group_sizes_cover_the_range_asked_for() {
        let mut rng = StdRng::seed_from_u64(7);
        let sizes = log_uniform_sizes(&mut rng, 40, 10, 500);
        assert_eq!(sizes.len(), 40);
        assert!(sizes.iter().all(|&s| (10..=500).contains(&s)));
        assert_eq!((sizes[0], sizes[1]), (10, 500));
        let small = sizes.iter().filter(|&&s| s < 100).count();
        assert!(small > 20, "log-uniform: most groups are small ({sizes:?})");
    }

    #[test]
    fn chosen_conversations_have_distinct_pairs_and_online_creators() {
        let plan = WorldPlan {
            users: 50,
            online: 10,
            directs: 20,
            group_sizes: vec![5, 30],
            hot_group: Some(50),
        };
        let wanted = choose_conversations(&plan, &mut StdRng::seed_from_u64(3));
        assert_eq!(wanted.len(), 20 + 2 + 1);
        let pairs: HashSet<(usize, usize)> = wanted[..20]
            .iter()
            .map(|(class, a, others)| {
                assert_eq!(*class, ConvClass::Direct);
                let b = others[0];
                assert!(
                    a != &b && *a < 10 && b < 10,
                    "{a} and {b} online and distinct"
                );
                (*a.min(&b), *a.max(&b))
            })
            .collect();
        assert_eq!(pairs.len(), 20, "every direct pair once");
        for ((class, creator, others), size) in wanted[20..22].iter().zip([5, 30]) {
            assert_eq!(*class, ConvClass::Group);
            assert!(*creator < 10 && others[0] < 10, "creator and second online");
            assert_eq!(others.len() + 1, size);
            assert!(!others.contains(creator));
        }
        assert_eq!(wanted[22], (ConvClass::Hot, 0, (1..50).collect()));
    }

    #[test]
    fn impossible_plans_are_refused() {
        let plan = WorldPlan {
            users: 10,
            online: 3,
            directs: 4,
            group_sizes: vec![],
            hot_group: None,
        };
        assert!(plan.check().is_err(), "3 online users make only 3 pairs");
        let plan = WorldPlan {
            directs: 3,
            hot_group: Some(11),
            ..plan
        };
        assert!(plan.check().is_err());
    }
}
