//! Scenario `seed-peak`: the seed's peak load (SPEC §13) in open loop.
//!
//! 1,250 sends/s by default, spread over many direct chats, groups of 10–500 members and one
//! hot group with every user in it. Sends go to a direct chat, a group or the hot group with
//! the shares below, each from a random online member; every online member device receives
//! each message. Scaled to a 2-core machine that also runs the server, PostgreSQL and the
//! load generator: 2,000 users, 500 of them online.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use rand::rngs::StdRng;
use rand::Rng;
use serde_json::{json, Value};

use crate::harness::{Finished, LoadModel, Loaded, Setup};
use crate::load::{OpenLoop, Picker, SendPlan};
use crate::world::{log_uniform_sizes, ConvClass, World, WorldPlan};
use crate::BenchArgs;

pub const RATE_DEFAULT: f64 = 1_250.0;
const USERS_DEFAULT: usize = 2_000;
const ONLINE_DEFAULT: usize = 500;
/// Share of the sends that go to direct chats, then groups; the rest go to the hot group.
/// Single conversations are usually slow and big groups burst (SPEC §13); each message to
/// the hot group reaches every online device, so 2 % of the sends there already make more
/// than half of all deliveries.
pub const SHARE_DIRECT: f64 = 0.80;
pub const SHARE_GROUPS: f64 = 0.18;
const GROUP_MEMBERS_MIN: usize = 10;
const GROUP_MEMBERS_MAX: usize = 500;

/// The world of a seed-peak run with `users` users, `online` of them online.
pub fn plan(users: usize, online: usize, rng: &mut StdRng) -> WorldPlan {
    let online = online.min(users);
    WorldPlan {
        users,
        online,
        directs: (online * 6 / 5).min(online * (online - 1) / 2),
        group_sizes: log_uniform_sizes(
            rng,
            (online / 12).max(2),
            GROUP_MEMBERS_MIN.min(users),
            GROUP_MEMBERS_MAX.min(users),
        ),
        hot_group: Some(users),
    }
}

/// Chooses the class by share, a conversation of it uniformly, and a random online member.
pub fn picker(world: &World) -> Picker {
    let classes = [
        world.of_class(ConvClass::Direct),
        world.of_class(ConvClass::Group),
        world.of_class(ConvClass::Hot),
    ];
    let online: Vec<Vec<u32>> = world.convs.iter().map(|c| c.online.clone()).collect();
    Arc::new(move |rng: &mut StdRng| {
        let x: f64 = rng.gen();
        let class = if x < SHARE_DIRECT {
            0
        } else if x < SHARE_DIRECT + SHARE_GROUPS {
            1
        } else {
            2
        };
        let pool = if classes[class].is_empty() {
            &classes[0]
        } else {
            &classes[class]
        };
        let conv = pool[rng.gen_range(0..pool.len())];
        let members = &online[conv as usize];
        let device = members[rng.gen_range(0..members.len())];
        SendPlan { conv, device }
    })
}

pub struct SeedPeak;

impl LoadModel for SeedPeak {
    type Notes = ();

    fn world(&self, args: &BenchArgs, rng: &mut StdRng) -> Result<WorldPlan> {
        let users = args.users.unwrap_or(USERS_DEFAULT);
        let online = args.online.unwrap_or(ONLINE_DEFAULT.min(users));
        Ok(plan(users, online, rng))
    }

    async fn load(&self, args: &BenchArgs, setup: &Setup) -> Result<Loaded<()>> {
        let rate = args.rate.unwrap_or(RATE_DEFAULT);
        let cfg = OpenLoop::new(rate, Duration::from_secs(args.duration), args.seed);
        let label = format!("seed-peak: {rate}/s for {} s, open loop", args.duration);
        let (outcome, ()) = setup
            .open_loop(&label, picker(&setup.world), cfg, async {})
            .await;
        Ok(Loaded::of(
            "seed-peak",
            "open_loop",
            Some(rate),
            outcome,
            (),
        ))
    }

    fn report(&self, _: &BenchArgs, report: &mut Value, _: &Finished<'_, ()>) -> Result<()> {
        report["send_shares"] = json!({
            "direct": SHARE_DIRECT,
            "groups": SHARE_GROUPS,
            "hot_group": 1.0 - SHARE_DIRECT - SHARE_GROUPS,
        });
        Ok(())
    }
}
