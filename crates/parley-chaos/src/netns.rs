//! The lab's own network, for the `partition` fault: every gateway runs in a Linux network
//! namespace of its own (`parley-chaos-<pid>-g<N>`), joined to the host by a veth pair with a
//! private /30 (`10.213.B.4N+1` on the host, `10.213.B.4N+2` in the namespace). PostgreSQL and
//! NATS listen on a hub address `10.213.B.253` held by a veth pair of the lab's own on the
//! host (this kernel has no `dummy` links); each namespace routes that one address through its
//! veth and nothing else. A partition is an nftables table in the gateway's namespace that
//! drops TCP to and from PostgreSQL's or NATS's port, deleted when the fault heals.
//!
//! `B` is chosen at runtime among the third octets no interface of the machine uses, starting
//! at the lab's pid, so parallel labs differ in names and addresses. Everything is removed when
//! the value is dropped (the end of the run, an error, Ctrl-C, SIGTERM).

use std::io::Write;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

/// The first two octets of the lab's addresses: a private range (RFC 1918) the lab keeps to.
const PREFIX: [u8; 2] = [10, 213];
/// The host part of the hub address in the run's /24, above every gateway's /30.
const HUB_HOST: u8 = 253;
/// Third octets tried for the run's /24: all but 0 and 255.
const BLOCKS_LEN: u32 = 254;
/// Most gateways one /24 holds with a /30 each, below the hub address.
pub const NETNS_GATEWAYS_MAX: usize = 63;
/// The nftables table of a partition, inside the gateway's namespace only.
const NFT_TABLE: &str = "parley_chaos_partition";

/// One gateway's namespace and its veth pair.
#[derive(Debug, Clone)]
pub struct GatewayNet {
    /// The namespace's name (under `/run/netns`).
    pub ns: String,
    /// The host end of the veth pair.
    host_link: String,
    /// The namespace end's address: the gateway listens there.
    pub addr: Ipv4Addr,
    /// Whether a partition table is in place.
    partitioned: bool,
}

impl GatewayNet {
    /// The namespace's file, for `nsenter --net=`.
    pub fn path(&self) -> PathBuf {
        PathBuf::from("/run/netns").join(&self.ns)
    }
}

/// The namespaces, veth pairs and hub of one run.
pub struct LabNetwork {
    /// The /24 of the run: `10.213.block.0/24`.
    block: u8,
    /// The hub pair's two ends, both on the host; created when `Some`.
    hub_link: Option<String>,
    pub gateways: Vec<GatewayNet>,
}

/// Runs `program args`, failing with its error output.
fn run(program: &str, args: &[&str]) -> Result<()> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {program}"))?;
    if !out.status.success() {
        bail!(
            "{program} {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Whether `program` answers `flag` (it is installed).
fn installed(program: &str, flag: &str) -> bool {
    Command::new(program)
        .arg(flag)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The first free /24 of 10.213.0.0/16, starting from the lab's pid.
fn free_block(pid: u32) -> Result<u8> {
    let out = Command::new("ip")
        .args(["-o", "-4", "addr", "show"])
        .output()
        .context("running ip addr show")?;
    let used = String::from_utf8_lossy(&out.stdout).into_owned();
    for i in 0..BLOCKS_LEN {
        let block = ((pid + i) % BLOCKS_LEN + 1) as u8;
        let prefix = format!(" {}.{}.{block}.", PREFIX[0], PREFIX[1]);
        if !used.contains(&prefix) {
            return Ok(block);
        }
    }
    bail!("every /24 of {}.{}.0.0/16 is in use", PREFIX[0], PREFIX[1])
}

impl LabNetwork {
    /// Why the lab cannot make its network here, or `None` when it can: it needs root, `ip`,
    /// `nsenter` and `nft`.
    pub fn unavailable() -> Option<String> {
        if !crate::postgres::is_root() {
            return Some("network namespaces need root".to_owned());
        }
        for (program, flag) in [("ip", "-V"), ("nsenter", "--version"), ("nft", "--version")] {
            if !installed(program, flag) {
                return Some(format!(
                    "{program} is missing (iproute2, util-linux and nftables are Debian packages)"
                ));
            }
        }
        None
    }

    /// Creates the hub and one namespace per gateway.
    pub fn create(gateways: usize) -> Result<LabNetwork> {
        if gateways > NETNS_GATEWAYS_MAX {
            bail!("at most {NETNS_GATEWAYS_MAX} gateways in network namespaces");
        }
        let pid = std::process::id();
        let mut net = LabNetwork {
            block: free_block(pid)?,
            hub_link: None,
            gateways: Vec::new(),
        };
        // Every step is recorded before the next, so a failure part way removes what exists.
        let hub = format!("pc{pid}hub");
        let hub_peer = format!("pc{pid}hbp");
        run(
            "ip",
            &[
                "link", "add", &hub, "type", "veth", "peer", "name", &hub_peer,
            ],
        )?;
        net.hub_link = Some(hub.clone());
        run(
            "ip",
            &[
                "addr",
                "add",
                &format!("{}/32", net.hub_addr()),
                "dev",
                &hub,
            ],
        )?;
        run("ip", &["link", "set", &hub, "up"])?;
        run("ip", &["link", "set", &hub_peer, "up"])?;
        for index in 0..gateways {
            let ns = format!("parley-chaos-{pid}-g{index}");
            let host_link = format!("pc{pid}g{index}h");
            let ns_link = format!("pc{pid}g{index}n");
            let base = (index * 4) as u8;
            let host_addr = Ipv4Addr::new(PREFIX[0], PREFIX[1], net.block, base + 1);
            let addr = Ipv4Addr::new(PREFIX[0], PREFIX[1], net.block, base + 2);
            run("ip", &["netns", "add", &ns])?;
            net.gateways.push(GatewayNet {
                ns: ns.clone(),
                host_link: host_link.clone(),
                addr,
                partitioned: false,
            });
            run(
                "ip",
                &[
                    "link", "add", &host_link, "type", "veth", "peer", "name", &ns_link, "netns",
                    &ns,
                ],
            )?;
            run(
                "ip",
                &["addr", "add", &format!("{host_addr}/30"), "dev", &host_link],
            )?;
            run("ip", &["link", "set", &host_link, "up"])?;
            let in_ns = |args: &[&str]| {
                let mut all = vec!["-n", ns.as_str()];
                all.extend_from_slice(args);
                run("ip", &all)
            };
            in_ns(&["addr", "add", &format!("{addr}/30"), "dev", &ns_link])?;
            in_ns(&["link", "set", "lo", "up"])?;
            in_ns(&["link", "set", &ns_link, "up"])?;
            in_ns(&[
                "route",
                "add",
                &format!("{}/32", net.hub_addr()),
                "via",
                &host_addr.to_string(),
            ])?;
        }
        Ok(net)
    }

    /// Where PostgreSQL and NATS listen for the gateways.
    pub fn hub_addr(&self) -> Ipv4Addr {
        Ipv4Addr::new(PREFIX[0], PREFIX[1], self.block, HUB_HOST)
    }

    /// The run's /24, for PostgreSQL's `pg_hba.conf`.
    pub fn cidr(&self) -> String {
        format!("{}.{}.{}.0/24", PREFIX[0], PREFIX[1], self.block)
    }

    /// Cuts gateway `index` from TCP `port` of the hub, both ways: packets are dropped, so
    /// open connections hang and new ones time out, as on a broken network.
    pub fn partition(&mut self, index: usize, port: u16) -> Result<String> {
        let hub = self.hub_addr();
        let net = self
            .gateways
            .get_mut(index)
            .with_context(|| format!("no namespace of gateway {index}"))?;
        let rules = format!(
            "table inet {NFT_TABLE} {{\n\
             \tchain out {{ type filter hook output priority 0; policy accept; ip daddr {hub} tcp dport {port} counter drop; }}\n\
             \tchain in {{ type filter hook input priority 0; policy accept; ip saddr {hub} tcp sport {port} counter drop; }}\n\
             }}\n"
        );
        let mut child = Command::new("nsenter")
            .arg(format!("--net={}", net.path().display()))
            .args(["--", "nft", "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("running nsenter nft")?;
        child
            .stdin
            .take()
            .context("nft's standard input")?
            .write_all(rules.as_bytes())?;
        let out = child.wait_with_output()?;
        if !out.status.success() {
            bail!(
                "nft -f in {} failed ({}): {}",
                net.ns,
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        net.partitioned = true;
        Ok(format!("{} drops tcp {hub}:{port}", net.ns))
    }

    /// Removes the partition of gateway `index`, if any; answers how many packets its rules
    /// dropped (the evidence that the partition cut real traffic).
    pub fn heal(&mut self, index: usize) -> Result<u64> {
        let Some(net) = self.gateways.get_mut(index) else {
            return Ok(0);
        };
        if !net.partitioned {
            return Ok(0);
        }
        let path = format!("--net={}", net.path().display());
        let out = Command::new("nsenter")
            .args([&path, "--", "nft", "list", "table", "inet", NFT_TABLE])
            .stdin(Stdio::null())
            .output()
            .context("running nsenter nft list")?;
        let listing = String::from_utf8_lossy(&out.stdout);
        run(
            "nsenter",
            &[&path, "--", "nft", "delete", "table", "inet", NFT_TABLE],
        )?;
        net.partitioned = false;
        Ok(dropped_packets(&listing))
    }

    /// Removes every partition; answers how many there were.
    pub fn heal_all(&mut self) -> Result<usize> {
        let mut healed = 0;
        for index in 0..self.gateways.len() {
            if self.gateways[index].partitioned {
                self.heal(index)?;
                healed += 1;
            }
        }
        Ok(healed)
    }
}

/// The sum of the `counter packets N` of an `nft list` output.
fn dropped_packets(listing: &str) -> u64 {
    let words: Vec<&str> = listing.split_whitespace().collect();
    words
        .windows(2)
        .filter(|w| w[0] == "packets")
        .filter_map(|w| w[1].parse::<u64>().ok())
        .sum()
}

impl Drop for LabNetwork {
    /// Deletes the veth pairs (both ends go together), the namespaces and the hub.
    fn drop(&mut self) {
        for net in &self.gateways {
            // The host end may be gone already with a namespace that was deleted.
            let _ = run("ip", &["link", "del", &net.host_link]);
            if let Err(e) = run("ip", &["netns", "del", &net.ns]) {
                eprintln!("removing the lab's network namespace: {e:#}");
            }
        }
        if let Some(hub) = &self.hub_link {
            if let Err(e) = run("ip", &["link", "del", hub]) {
                eprintln!("removing the lab's hub link: {e:#}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dropped_packets_add_up_the_counters_of_both_chains() {
        let listing = "table inet parley_chaos_partition {\n\tchain out {\n\t\ttype filter hook output priority filter; policy accept;\n\t\tip daddr 10.213.5.253 tcp dport 4222 counter packets 7 bytes 420 drop\n\t}\n\tchain in {\n\t\tip saddr 10.213.5.253 tcp sport 4222 counter packets 3 bytes 180 drop\n\t}\n}\n";
        assert_eq!(dropped_packets(listing), 10);
        assert_eq!(dropped_packets(""), 0);
    }
}
