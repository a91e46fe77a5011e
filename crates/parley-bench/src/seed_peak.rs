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
use rand::{Rng, SeedableRng};

use super::baseline::{BaselinePlan, Shape};
use super::harness::{self, Common};
use super::load::{open_loop, LoadCounters, OpenLoop, Picker, SendPlan};
use super::world::{log_uniform_sizes, ConvClass, World, WorldPlan};
use super::BenchArgs;

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
/// Sends in flight at most: far above what the target rate needs at sane latencies (1,250/s
/// at 100 ms is 125), so it bounds memory, not the load.
const IN_FLIGHT_MAX: usize = 2_048;
/// How late after the schedule a send may still be issued.
const LATE_MAX: Duration = Duration::from_secs(30);

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

pub async fn run(args: &BenchArgs) -> Result<()> {
    let mut rng = StdRng::seed_from_u64(args.seed);
    let users = args.users.unwrap_or(USERS_DEFAULT);
    let online = args.online.unwrap_or(ONLINE_DEFAULT.min(users));
    let world_plan = plan(users, online, &mut rng);
    let setup = harness::setup(args, world_plan, &mut rng).await?;
    let rate = args.rate.unwrap_or(RATE_DEFAULT);
    let cfg = OpenLoop {
        rate_per_s: rate,
        duration: Duration::from_secs(args.duration),
        in_flight_max: IN_FLIGHT_MAX,
        late_max: LATE_MAX,
        seed: args.seed,
    };
    let counters = Arc::new(LoadCounters::default());
    let load = open_loop(
        &setup.devices.handles,
        &setup.conv_ids,
        picker(&setup.world),
        cfg,
        0,
        counters.clone(),
    );
    let label = format!("seed-peak: {rate}/s for {} s, open loop", args.duration);
    let outcome = harness::with_progress(
        &label,
        Duration::from_secs(args.duration),
        &setup,
        &counters,
        load,
    )
    .await;
    let (world, concluded) = harness::conclude(setup, &outcome.acks).await;
    let latencies = harness::latencies(&concluded.logs, &outcome.acks)?;

    // The raw transaction at the concurrency the server actually saw, over as many
    // conversations as the run used.
    let concurrency = harness::open_loop_concurrency(&outcome);
    let baseline = harness::baseline(
        args,
        &[BaselinePlan {
            shape: Shape::Many {
                convs: world.convs.len(),
            },
            concurrency,
            duration: Duration::from_secs(args.duration.min(10)),
        }],
    )
    .await;
    let baseline = baseline.map(|r| {
        r.map_err(|e| format!("{e:#}"))
            .and_then(|mut v| v.pop().ok_or_else(|| "no result".to_owned()))
    });
    let mut report = harness::report(&Common {
        scenario: "seed-peak",
        mode: "open_loop",
        target_rate_per_s: Some(rate),
        world: &world,
        outcome: &outcome,
        concluded: &concluded,
        latencies: &latencies,
        throughput_per_s: outcome.throughput(),
        baseline: baseline.as_ref().map(|r| r.as_ref().map_err(Clone::clone)),
    });
    report["send_shares"] = serde_json::json!({
        "direct": SHARE_DIRECT,
        "groups": SHARE_GROUPS,
        "hot_group": 1.0 - SHARE_DIRECT - SHARE_GROUPS,
    });
    harness::emit(args, report, &latencies, Some(rate))
}
