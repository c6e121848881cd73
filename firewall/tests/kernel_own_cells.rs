//! The property of issue 30 on a real kernel: random found rulesets, built from the shapes found
//! firewalls have (chains shared by the input and forward hooks, bans by set, by chain and by
//! verdict map, log-and-drop chains that bans and the catch-all share, per-source limits through
//! dynamic sets, both families), loaded with `nft -f` into a fresh namespace with an outside and
//! a LAN interface and forwarding on; random openings converged through them; then the ruleset
//! as the kernel lists it after the write, against the one listed before, for every class of new
//! connection: the only cells that differ are the openings' own.

mod common;

use common::{in_fresh_netns, ip, nft, nft_load};
use firewall::eval::check::{self, Before, May};
use firewall::eval::{Addrs, Conn, Fate, Model, Snapshot};
use firewall::netlink::NfSocket;
use firewall::{Exec, Firewall, Opening, Output, Scope};
use std::collections::BTreeSet;
use std::fmt::Write as _;

struct NoLegacy;

impl Exec for NoLegacy {
    fn run(&self, program: &str, _: &[String], _: Option<&str>) -> firewall::Result<Output> {
        panic!("nothing is to be run in this test, {program} was asked for");
    }

    fn exists(&self, _: &str) -> bool {
        false
    }
}

/// A /proc of the test's own: no legacy tables, forwarding on in both families.
fn proc_dir() -> std::path::PathBuf {
    let proc = std::env::temp_dir().join(format!("fw-own-cells-{}", std::process::id()));
    std::fs::create_dir_all(proc.join("net")).unwrap();
    std::fs::create_dir_all(proc.join("sys/net/ipv4")).unwrap();
    std::fs::create_dir_all(proc.join("sys/net/ipv6/conf/all")).unwrap();
    std::fs::write(proc.join("sys/net/ipv4/ip_forward"), "1\n").unwrap();
    std::fs::write(proc.join("sys/net/ipv6/conf/all/forwarding"), "1\n").unwrap();
    proc
}

/// The outside interface `eth0` and the LAN's `lan0` (veths, their peers left bare: this
/// kernel has no dummy links), with addresses, up.
fn interfaces() {
    for (name, v4, v6) in [
        ("eth0", "192.0.2.10/24", "2001:db8:1::10/64"),
        ("lan0", "198.51.100.1/24", "2001:db8:50::1/64"),
    ] {
        let peer = format!("{name}p");
        ip(&["link", "add", name, "type", "veth", "peer", "name", &peer]);
        ip(&["link", "set", &peer, "up"]);
        ip(&["address", "add", v4, "dev", name]);
        ip(&["-6", "address", "add", v6, "dev", name, "nodad"]);
        ip(&["link", "set", name, "up"]);
    }
    ip(&["link", "set", "lo", "up"]);
}

const PORTS: [u16; 5] = [22, 80, 443, 9000, 9001];

/// One random found ruleset of the shapes above.
fn ruleset(rng: &mut fuzz::Rng) -> String {
    let mut s = String::from("flush ruleset\ntable inet found {\n");
    let bans = rng.bool();
    let ban_to_shared = bans && rng.bool();
    let limits = rng.one_in(3);
    let vmap = rng.bool();
    if bans {
        s.push_str(
            " set ban4 { type ipv4_addr; flags interval; elements = { 192.0.2.40, 203.0.113.0/24 } }\n \
             set ban6 { type ipv6_addr; elements = { 2001:db8:1::40 } }\n",
        );
    }
    if limits {
        s.push_str(
            " set rl4 { type ipv4_addr; flags dynamic; timeout 1m; }\n \
             set cl4 { type ipv4_addr; flags dynamic; }\n",
        );
    }
    // The chain every refusal ends in: shared by input and, where forward ends there, forward.
    let shared_log = rng.bool();
    writeln!(
        s,
        " chain shared {{\n{}  meta l4proto tcp reject with tcp reset\n  {}\n }}",
        if shared_log {
            "  log prefix \"found drop: \"\n"
        } else {
            ""
        },
        if rng.bool() { "drop" } else { "reject" }
    )
    .unwrap();
    writeln!(
        s,
        " chain wan_in {{\n  tcp dport {{ {} }} accept\n  jump shared\n }}",
        PORTS[rng.below(2)]
    )
    .unwrap();
    s.push_str(" chain lan_in {\n  accept\n }\n");
    // input
    let policy = if rng.bool() { "drop" } else { "accept" };
    writeln!(
        s,
        " chain input {{\n  type filter hook input priority filter; policy {policy};\n  iif \"lo\" accept\n  ct state established,related accept"
    )
    .unwrap();
    if bans {
        let verdict = if ban_to_shared { "jump shared" } else { "drop" };
        writeln!(s, "  ip saddr @ban4 {verdict}\n  ip6 saddr @ban6 {verdict}").unwrap();
    }
    if limits {
        s.push_str(
            "  ct state new add @rl4 { ip saddr limit rate over 10/second } drop\n  \
             ct state new add @cl4 { ip saddr ct count over 20 } drop\n",
        );
    }
    s.push_str("  meta l4proto ipv6-icmp accept\n  meta l4proto icmp accept\n");
    if rng.bool() {
        writeln!(s, "  tcp dport {} accept", PORTS[rng.below(PORTS.len())]).unwrap();
    }
    if vmap {
        s.push_str("  iifname vmap { \"eth0\" : jump wan_in, \"lan0\" : jump lan_in }\n");
    } else {
        s.push_str("  iifname \"eth0\" jump wan_in\n  iifname \"lan0\" jump lan_in\n");
    }
    match rng.below(3) {
        0 => s.push_str("  jump shared\n"),
        1 => s.push_str("  reject\n"),
        _ => {}
    }
    s.push_str(" }\n");
    // forward
    writeln!(
        s,
        " chain forward {{\n  type filter hook forward priority filter; policy drop;\n  ct state established,related accept\n  iifname \"lan0\" accept"
    )
    .unwrap();
    if rng.bool() {
        s.push_str("  iifname \"eth0\" jump wan_in\n");
    } else {
        s.push_str("  jump shared\n");
    }
    s.push_str(" }\n}\n");
    s
}

fn openings(rng: &mut fuzz::Rng) -> Vec<Opening> {
    let n = 1 + rng.below(3);
    let mut ports: Vec<u16> = PORTS.to_vec();
    let mut out = Vec::new();
    for i in 0..n {
        let port = ports.remove(rng.below(ports.len()));
        let net = |a: &str, len| firewall::Network {
            addr: a.parse().unwrap(),
            len,
        };
        let from = match rng.below(3) {
            0 => firewall::opening::From::Anywhere,
            1 => firewall::opening::From::Networks(vec![
                net("192.0.2.0", 24),
                net("2001:db8:1::", 64),
            ]),
            _ => firewall::opening::From::Networks(vec![net("198.51.100.0", 24)]),
        };
        out.push(Opening {
            id: format!("o{i}"),
            port,
            proto: firewall::Proto::Tcp,
            from,
            path: firewall::Path::Incoming,
        });
    }
    out
}

struct Own<'o>(&'o [Opening]);

impl May for Own<'_> {
    fn change(&self, conn: &Conn, before: &Fate) -> Addrs {
        self.0.iter().fold(Addrs::none(conn.fam), |a, o| {
            a.union(&check::own(o, conn, before))
        })
    }
}

fn listed(sock: &mut NfSocket) -> Model {
    Model::new(&Snapshot::read(sock).unwrap())
}

#[test]
fn every_write_changes_only_its_openings_own_cells_on_random_found_rulesets() {
    let cases = fuzz::cases(60);
    let proc = proc_dir();
    let mut rng = fuzz::Rng::new(0x0030_c0de);
    let mut written = 0;
    let mut unwritten = 0;
    for case in 0..cases {
        in_fresh_netns();
        interfaces();
        let text = ruleset(&mut rng);
        nft_load(&text);
        let os = openings(&mut rng);
        let mut sock = NfSocket::open().unwrap();
        let before_model = listed(&mut sock);
        let exec = NoLegacy;
        let mut fw = Firewall::open_at(&exec, &proc).unwrap();
        let done = fw
            .converge(&os, Scope::All)
            .unwrap_or_else(|e| panic!("case {case}: {e}\n{text}"));
        let after_model = listed(&mut sock);
        let mut ports: BTreeSet<(u8, u16)> = os.iter().map(|o| (6, o.port)).collect();
        ports.insert((6, check::unnamed_port(&ports)));
        let ifaces = firewall::eval::interfaces();
        let before = Before::of(
            &before_model,
            check::classes(&ifaces, &ports, &[], [true, true]),
        );
        let v = check::diff(&before, &after_model, &Own(&os));
        assert!(
            v.is_empty(),
            "case {case}: the write changed more than its openings' cells:\n{}\n\nruleset:\n{text}\nopenings: {os:?}\nafter:\n{}",
            v.iter().map(|v| v.describe()).collect::<Vec<_>>().join("\n"),
            nft(&["list", "ruleset"])
        );
        for o in &os {
            let states = &done.states[&o.id];
            if states
                .iter()
                .any(|p| matches!(p.state, firewall::State::Bypass(_)))
            {
                unwritten += 1;
            } else {
                written += 1;
            }
        }
    }
    println!("{cases} random rulesets: {written} openings written, {unwritten} left unwritten (every place would change more than their own cells)");
    assert!(
        written > 0,
        "no opening was ever written: the property holds vacuously"
    );
    std::fs::remove_dir_all(&proc).ok();
}
