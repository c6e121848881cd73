//! The property of issue 30 on a real kernel: random found rulesets, built from the shapes found
//! firewalls have (chains shared by the input and forward hooks, bans by set, by chain and by
//! verdict map, log-and-drop chains that bans and the catch-all share, per-source limits through
//! dynamic sets, both families), loaded with `nft -f` into a fresh namespace with an outside and
//! a LAN interface and forwarding on; random openings converged through them; then the ruleset
//! as the kernel lists it after the write, against the one listed before, for every class of new
//! connection: the only cells that differ are the openings' own. And the kernel agrees: every
//! cell the check compares is sent a real SYN, and the kernel's answer is set beside the
//! evaluator's after-model.
//!
//! What is probed, per case: each family; incoming on `eth0` and on `lan0`, and forwarded from
//! each of them to a host on the other's network (a listener there, routed through the node);
//! each port the check asks about (the openings' and one no opening names); each source region
//! of the after-model's answer, split further by the regions the bed's rulesets name (each
//! banned address or network, each opening's CIDR, anywhere else) so that a ban that shares its
//! verdict with the catch-all is still probed from a banned address. Incoming on `lo` and on the
//! bare veth ends `eth0p`/`lan0p` is counted as unprobed (no other machine sends from there).
//! A doubtful answer is not contradicted by the kernel, it is settled by it: counted, reported.
//!
//! The kernel is asked through `firewall::confirm`, the path `explain --confirm` takes on a
//! node, rather than by probing the test's own namespace from peers on `eth0p`/`lan0p`: it
//! already wires each probe's source address, its route back, the host behind and the
//! listeners, sends a case's probes at once, and cleans its namespaces up; and since it clones
//! the ruleset as its tools list it, this test also covers the clone. It is also the faster of
//! the two here: a confirmation needs nothing of the test thread's namespace, so several cases'
//! confirmations run on worker threads while the next cases are converged, and a case's dropped
//! SYNs (a [`confirm::PROBE_WAIT`] each round) overlap with the others' work. A loss in the
//! listing's round trip would show as a disagreement, never hide one.

mod common;

use common::{in_fresh_netns, ip, nft, nft_load};
use firewall::confirm::{self, Agreement, Listing};
use firewall::eval::check::{self, Before, May};
use firewall::eval::{Addrs, Answer, Conn, Fam, Fate, Iface, Model, Path, Snapshot, Way};
use firewall::netlink::NfSocket;
use firewall::outcome::Converged;
use firewall::{Exec, Firewall, Opening, Output, Scope, SystemExec};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::IpAddr;
use std::thread::JoinHandle;
use std::time::Instant;

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

/// The interfaces a connection from another machine arrives on in this bed.
const WAYS_IN: [&str; 2] = ["eth0", "lan0"];

/// How many cases' confirmations run at once beside the converging thread: each spends most of
/// its time waiting on `ip` and on dropped SYNs, not on the processor.
const IN_FLIGHT: usize = 6;

fn cidr(s: &str) -> Addrs {
    let (a, len) = s.split_once('/').unwrap();
    let a: IpAddr = a.parse().unwrap();
    let n = match a {
        IpAddr::V4(v) => u128::from(u32::from(v)),
        IpAddr::V6(v) => u128::from(v),
    };
    Addrs::cidr(Fam::of(a), n, len.parse().unwrap())
}

/// The source regions the case's ruleset and openings name, disjoint, covering the family:
/// each banned address or network, each opening's network, anywhere else.
fn regions(text: &str, os: &[Opening], fam: Fam) -> Vec<Addrs> {
    let mut named: Vec<Addrs> = Vec::new();
    if text.contains("set ban4") {
        let bans: &[&str] = match fam {
            Fam::V4 => &["192.0.2.40/32", "203.0.113.0/24"],
            Fam::V6 => &["2001:db8:1::40/128"],
        };
        named.extend(bans.iter().map(|b| cidr(b)));
    }
    for o in os {
        if let firewall::opening::From::Networks(nets) = &o.from {
            for n in nets.iter().filter(|n| Fam::of(n.addr) == fam) {
                named.push(cidr(&format!("{}/{}", n.addr, n.len)));
            }
        }
    }
    let mut out: Vec<Addrs> = Vec::new();
    let mut taken = Addrs::none(fam);
    for r in named {
        let r = r.minus(&taken);
        if !r.is_empty() {
            taken = taken.union(&r);
            out.push(r);
        }
    }
    out.push(Addrs::all(fam).minus(&taken));
    out
}

/// The answer with each part split by `regions`: one probe per piece.
fn split(a: Answer, regions: &[Addrs]) -> Answer {
    Answer {
        parts: a
            .parts
            .iter()
            .flat_map(|p| {
                regions
                    .iter()
                    .map(|r| p.sources.intersect(r))
                    .filter(|s| !s.is_empty())
                    .map(|sources| firewall::eval::Outcome {
                        sources,
                        ..p.clone()
                    })
            })
            .collect(),
    }
}

fn path_word(p: Path) -> &'static str {
    match p {
        Path::Incoming => "incoming",
        Path::Forwarded => "forwarded",
    }
}

/// One cell as a person reads it.
fn cell_words(c: &Conn, sources: &Addrs, source: Option<IpAddr>) -> String {
    let way = match (c.path, &c.oif, c.daddr) {
        (Path::Forwarded, Some(o), Some(d)) => format!("forwarded from {} to {d} on {o}", c.iif),
        _ => format!("incoming on {}", c.iif),
    };
    let from = if sources.is_all() {
        "anywhere".to_string()
    } else {
        sources.to_string()
    };
    let sent = source.map_or(String::new(), |s| format!(", probed from {s}"));
    format!("tcp {} ({}) {way}, from {from}{sent}", c.port, c.fam.name())
}

/// What one case asks the kernel: the probed cells' ways with the after-model's answers.
struct Asked {
    case: u64,
    text: String,
    openings: String,
    listing: Listing,
    ifaces: Vec<Iface>,
    ways: Vec<(Way, Answer)>,
}

/// What the kernel said, over all cases.
#[derive(Default)]
struct Tally {
    cases: u64,
    probed: usize,
    agreed: usize,
    doubtful: usize,
    /// Probed cells per (family, path), and how many of them the kernel admitted.
    by_way: BTreeMap<(&'static str, &'static str), (usize, usize)>,
    admitted: usize,
    refused: usize,
    unprobed: BTreeMap<String, usize>,
    doubts: BTreeSet<String>,
    /// What a confirmation could not recreate (a route), once each.
    notes: BTreeSet<String>,
    disagreements: Vec<String>,
    failures: Vec<String>,
}

impl Tally {
    fn add(&mut self, a: &Asked, got: firewall::Result<confirm::Confirmation>) {
        let c = match got {
            Ok(c) => c,
            Err(e) => {
                self.failures
                    .push(format!("case {}: the confirmation failed: {e}", a.case));
                return;
            }
        };
        for ((w, answer), probes) in a.ways.iter().zip(&c.probes) {
            for (part, probe) in answer.parts.iter().zip(probes) {
                match confirm::agreement(&part.fate, &probe.kernel) {
                    Agreement::Unprobed => {
                        *self
                            .unprobed
                            .entry(probe.kernel.describe())
                            .or_default() += 1;
                        continue;
                    }
                    Agreement::Agrees => self.agreed += 1,
                    Agreement::Settled => {
                        self.doubtful += 1;
                        self.doubts.insert(part.fate.describe());
                    }
                    Agreement::Disagrees => self.disagreements.push(format!(
                        "case {}: {}: the evaluator says {}, the kernel {}\nopenings: {}\nfound ruleset:\n{}\nafter the write, as loaded into the scratch node:\n{}",
                        a.case,
                        cell_words(&w.conn, &part.sources, probe.source),
                        part.fate.describe(),
                        probe.kernel.describe(),
                        a.openings,
                        a.text,
                        a.listing.nft
                    )),
                }
                self.probed += 1;
                let k = self
                    .by_way
                    .entry((w.conn.fam.name(), path_word(w.conn.path)))
                    .or_default();
                k.0 += 1;
                if probe.kernel.admitted() == Some(true) {
                    k.1 += 1;
                    self.admitted += 1;
                } else {
                    self.refused += 1;
                }
            }
        }
        self.notes.extend(c.notes);
    }
}

/// Asks the kernel about every cell of `a`, on a thread of its own (a confirmation needs
/// nothing of the calling thread's namespace).
fn ask(a: Asked) -> JoinHandle<(Asked, firewall::Result<confirm::Confirmation>)> {
    std::thread::spawn(move || {
        let got = confirm::confirm(&SystemExec, &a.listing, &a.ifaces, &a.ways, confirm::BUDGET);
        (a, got)
    })
}

/// The cells of one case the kernel is asked about, and the classes it is not asked about
/// (arriving where no other machine sends from), counted by `tally`.
fn cells(
    case: u64,
    text: &str,
    os: &[Opening],
    after: &Model,
    conns: &[Conn],
    ifaces: &[Iface],
    tally: &mut Tally,
) -> Asked {
    let mut ways = Vec::new();
    for c in conns {
        let all = Addrs::all(c.fam);
        let answer = after.evaluate(c, &all);
        let into = c.oif.as_deref().unwrap_or(WAYS_IN[0]);
        if !WAYS_IN.contains(&c.iif.as_str()) || !WAYS_IN.contains(&into) {
            *tally
                .unprobed
                .entry(if c.iif == "lo" {
                    "arriving on lo: the node's own, no other machine's".to_string()
                } else {
                    format!(
                        "arriving on {}: a bare veth end of the bed, nothing sends from it",
                        c.iif
                    )
                })
                .or_default() += answer.parts.len();
            continue;
        }
        let answer = split(answer, &regions(text, os, c.fam));
        ways.push((
            Way {
                conn: c.clone(),
                sources: all,
            },
            answer,
        ));
    }
    Asked {
        case,
        text: text.to_string(),
        openings: format!("{os:?}"),
        listing: confirm::capture(&SystemExec).unwrap_or_else(|e| panic!("case {case}: {e}")),
        ifaces: ifaces
            .iter()
            .filter(|i| WAYS_IN.contains(&i.name.as_str()))
            .cloned()
            .collect(),
        ways,
    }
}

fn count_written(os: &[Opening], done: &Converged, written: &mut usize, unwritten: &mut usize) {
    for o in os {
        let states = &done.states[&o.id];
        if states
            .iter()
            .any(|p| matches!(p.state, firewall::State::Bypass(_)))
        {
            *unwritten += 1;
        } else {
            *written += 1;
        }
    }
}

#[test]
fn every_write_changes_only_its_openings_own_cells_and_the_kernel_agrees_on_each() {
    let started = Instant::now();
    let cases = fuzz::cases(60);
    let proc = proc_dir();
    let mut rng = fuzz::Rng::new(0x0030_c0de);
    let mut written = 0;
    let mut unwritten = 0;
    let mut from_the_check = 0;
    let mut tally = Tally {
        cases,
        ..Tally::default()
    };
    let mut asking: std::collections::VecDeque<JoinHandle<_>> = Default::default();
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
        // The verdicts after the write, read from the model the check built where nothing else
        // committed since the batch, are the verdicts of the ruleset listed afresh.
        let listings = fw.listings();
        let kept = fw
            .verdicts(&os)
            .unwrap_or_else(|e| panic!("case {case}: {e}"));
        if fw.listings() == listings {
            from_the_check += 1;
        }
        let fresh = Firewall::open_at(&exec, &proc)
            .unwrap()
            .verdicts(&os)
            .unwrap_or_else(|e| panic!("case {case}: {e}"));
        assert_eq!(
            kept, fresh,
            "case {case}: the verdicts after the write differ from a fresh listing's\nruleset:\n{text}\nopenings: {os:?}"
        );
        let mut ports: BTreeSet<(u8, u16)> = os.iter().map(|o| (6, o.port)).collect();
        ports.insert((6, check::unnamed_port(&ports)));
        let ifaces = firewall::eval::interfaces();
        let conns = check::classes(&ifaces, &ports, &[], [true, true]);
        let before = Before::of(&before_model, conns.clone());
        let v = check::diff(&before, &after_model, &Own(&os));
        assert!(
            v.is_empty(),
            "case {case}: the write changed more than its openings' cells:\n{}\n\nruleset:\n{text}\nopenings: {os:?}\nafter:\n{}",
            v.iter().map(|v| v.describe()).collect::<Vec<_>>().join("\n"),
            nft(&["list", "ruleset"])
        );
        count_written(&os, &done, &mut written, &mut unwritten);
        let asked = cells(case, &text, &os, &after_model, &conns, &ifaces, &mut tally);
        if asking.len() == IN_FLIGHT {
            let (a, got) = asking.pop_front().unwrap().join().unwrap();
            tally.add(&a, got);
        }
        asking.push_back(ask(asked));
    }
    for t in asking {
        let (a, got) = t.join().unwrap();
        tally.add(&a, got);
    }
    std::fs::remove_dir_all(&proc).ok();
    let unprobed: usize = tally.unprobed.values().sum();
    println!(
        "{} random rulesets in {:.1} s: {written} openings written, {unwritten} left unwritten (every place would change more than their own cells); kernel asked on {} cells ({}): {} agreed, {} doubtful settled by the kernel, {} disagreed; {} admitted, {} not; {unprobed} unprobed ({})",
        tally.cases,
        started.elapsed().as_secs_f64(),
        tally.probed,
        tally
            .by_way
            .iter()
            .map(|((f, p), (n, a))| format!("{f} {p} {n}, {a} connected"))
            .collect::<Vec<_>>()
            .join("; "),
        tally.agreed,
        tally.doubtful,
        tally.disagreements.len(),
        tally.admitted,
        tally.refused,
        tally
            .unprobed
            .iter()
            .map(|(why, n)| format!("{n} {why}"))
            .collect::<Vec<_>>()
            .join("; "),
    );
    if !tally.doubts.is_empty() {
        println!(
            "doubtful answers: {}",
            tally.doubts.iter().cloned().collect::<Vec<_>>().join("; ")
        );
    }
    if !tally.notes.is_empty() {
        println!(
            "not recreated: {}",
            tally.notes.iter().cloned().collect::<Vec<_>>().join("; ")
        );
    }
    assert!(
        tally.failures.is_empty(),
        "{} confirmations failed:\n{}",
        tally.failures.len(),
        tally.failures.join("\n")
    );
    assert!(
        tally.disagreements.is_empty(),
        "the kernel disagreed with the evaluator on {} cells; the first:\n{}",
        tally.disagreements.len(),
        tally
            .disagreements
            .iter()
            .take(3)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n\n")
    );
    assert!(
        written > 0,
        "no opening was ever written: the property holds vacuously"
    );
    println!("verdicts after the write read from the checked model, no listing: {from_the_check} of {cases} cases");
    assert!(
        from_the_check > 0,
        "no case read its verdicts from the checked model: the comparison holds vacuously"
    );
    for fam in [Fam::V4, Fam::V6] {
        for path in [Path::Incoming, Path::Forwarded] {
            let (n, a) = tally
                .by_way
                .get(&(fam.name(), path_word(path)))
                .copied()
                .unwrap_or_default();
            assert!(
                n > 0 && a > 0 && a < n,
                "{} {} cells: {n} probed, {a} connected: the agreement holds vacuously there",
                fam.name(),
                path_word(path)
            );
        }
    }
}
