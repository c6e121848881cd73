//! The corpus suite (issue 20, point 4): every found firewall of `tests/fixtures/found/corpus/`
//! loaded in a fresh lab node as its distribution or tool leaves it, openings applied through the
//! built binary, then each opening probed with real connections from every source it declares (the
//! outside machine, a banned source, the private network; both families) and compared with the
//! host's own report, `firewall status --json`'s `verdict`, and with `firewall explain` asked of
//! the same connection. Any disagreement fails the suite, and so does an `apply` that says
//! otherwise than the status; the table (ruleset × opening × source: reported / probed) is
//! printed whether it passes or not, with the per-layer `state` beside it, which is what the
//! report said before the verdict. Issue 30: every opening's port is also probed at a LAN host
//! routed behind the node before the apply and after it (`routed.rs`: an opening that opens
//! forwarding fails), a banned source refused before the apply must stay refused, and where the
//! ruleset limits each source, a burst from outside must still be cut short (`flood.rs`). Issue 30,
//! point 5: the kernel is asked too, on every ruleset, by `firewall explain PORT --confirm` for
//! every opening's port and the undeclared one (`confirmed.rs`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use lab::addr::*;
use lab::{Adoption, Lab, Machine, Probe};
use serde_json::{json, Value};

pub(crate) mod catalogue;
mod confirmed;
mod flood;
pub(crate) mod load;
mod report;
mod routed;
mod table;

use catalogue::{Fixture, CORPUS};
use report::{apply_contradiction, explained, layer_states, reported, state_contradiction};
use routed::Routed;
use table::{short_probe, table};

const MESH: &str = env!("CARGO_BIN_EXE_mesh-host");

/// The ports of the declared openings: from anywhere, from a network, from the private network,
/// and the container's published port (forwarded) where the fixture has a runtime.
const PORT_ANYWHERE: u16 = 9000;
const PORT_NETWORK: u16 = 9001;
const PORT_PRIVATE: u16 = 9002;
/// A port served on the node that no opening declares: what the found firewall does with a new
/// connection nobody opened, shown beside the cells.
const PORT_UNDECLARED: u16 = 9005;
pub(crate) const PUBLISHED: u16 = 8082;

/// The network the network opening admits: the public network the outside machine, the banned
/// source and the peer sit on.
const DECLARED_NETWORK: [&str; 2] = ["192.0.2.0/24", "2001:db8:1::/64"];

/// A second address of the outside machine, which the fixtures that ban something ban (by set,
/// chain, verdict map, fail2ban), and the networks holding it (the outside machine's own address
/// is not in them).
pub(crate) const BANNED_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 40);
pub(crate) const BANNED_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0x40);
pub(crate) const BANNED_NET_V4: &str = "192.0.2.32/28";
pub(crate) const BANNED_NET_V6: &str = "2001:db8:1::40/124";

/// How long a probe waits for an answer: a lab veth answers in well under a millisecond, and
/// the probes of one fixture run at once, so a generous wait costs it once.
const PROBE_WAIT: Duration = Duration::from_secs(3);
/// How many fixtures run at once, each in its own lab (two cores, shared).
const WORKERS: usize = 3;
/// Where a ruleset rate-limits what it refuses (Arch's `limit rate 5/second ... reject`), one
/// connection can get through by luck or be refused by luck; there the opening from anywhere is
/// probed from outside in IPv4 this many times, one every [`SPACING`] (twice the limit's rate,
/// each waiting on its own), and it agrees with the report only if all or none got through as
/// the report says.
const BURST: usize = 30;
const SPACING: Duration = Duration::from_millis(100);

/// Where a probe comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Source {
    Outside,
    Banned,
    Private,
}

impl Source {
    const ALL: [Source; 3] = [Source::Outside, Source::Banned, Source::Private];

    fn name(self) -> &'static str {
        match self {
            Source::Outside => "outside",
            Source::Banned => "banned",
            Source::Private => "private",
        }
    }

    /// The source address of the probe in `family`.
    fn addr(self, family: Family) -> IpAddr {
        match (self, family) {
            (Source::Outside, Family::V4) => OUTSIDE_PUBLIC_V4.into(),
            (Source::Outside, Family::V6) => OUTSIDE_PUBLIC_V6.into(),
            (Source::Banned, Family::V4) => BANNED_V4.into(),
            (Source::Banned, Family::V6) => BANNED_V6.into(),
            (Source::Private, Family::V4) => PEER_PRIVATE_V4.into(),
            (Source::Private, Family::V6) => PEER_PRIVATE_V6.into(),
        }
    }

    /// The node's address the probe goes to.
    fn target(self, family: Family) -> IpAddr {
        match (self, family) {
            (Source::Private, Family::V4) => NODE_PRIVATE_V4.into(),
            (Source::Private, Family::V6) => NODE_PRIVATE_V6.into(),
            (_, Family::V4) => NODE_PUBLIC_V4.into(),
            (_, Family::V6) => NODE_PUBLIC_V6.into(),
        }
    }

    /// The node's interface the probe arrives on.
    fn interface(self) -> &'static str {
        match self {
            Source::Private => PRIVATE_IF,
            _ => PUBLIC_IF,
        }
    }

    fn machine(self, net: &Adoption) -> &Machine {
        match self {
            Source::Private => &net.peer,
            _ => &net.outside,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Family {
    V4,
    V6,
}

impl Family {
    const ALL: [Family; 2] = [Family::V4, Family::V6];

    /// The word the verdict's parts use.
    fn name(self) -> &'static str {
        match self {
            Family::V4 => "ipv4",
            Family::V6 => "ipv6",
        }
    }
}

/// One declared opening, and which sources and families it is probed from.
struct Declared {
    id: &'static str,
    port: u16,
    from: Value,
    path: &'static str,
    sources: &'static [Source],
    families: &'static [Family],
}

fn openings(fixture: &Fixture) -> Vec<Declared> {
    let mut out = vec![
        Declared {
            id: "corpus/anywhere",
            port: PORT_ANYWHERE,
            from: json!("anywhere"),
            path: "incoming",
            sources: &Source::ALL,
            families: &Family::ALL,
        },
        Declared {
            id: "corpus/network",
            port: PORT_NETWORK,
            from: json!(DECLARED_NETWORK),
            path: "incoming",
            sources: &[Source::Outside, Source::Banned],
            families: &Family::ALL,
        },
        Declared {
            id: "corpus/private",
            port: PORT_PRIVATE,
            from: json!("private"),
            path: "incoming",
            sources: &[Source::Private],
            families: &Family::ALL,
        },
    ];
    if fixture.has_runtime() {
        // Docker 20.10 publishes in IPv4 through DNAT; its IPv6 goes to docker-proxy on the
        // incoming path, which no forwarded opening is about.
        out.push(Declared {
            id: "corpus/published",
            port: PUBLISHED,
            from: json!("anywhere"),
            path: "forwarded",
            sources: &Source::ALL,
            families: &[Family::V4],
        });
    }
    out
}

/// The adopted declaration of the openings, with the node's settings (so the guard is there too).
fn declaration(openings: &[Declared]) -> Value {
    let resources: Vec<Value> = openings
        .iter()
        .map(|o| {
            json!({"id": o.id, "type": "opening", "port": o.port, "proto": "tcp",
                   "from": o.from, "path": o.path})
        })
        .collect();
    json!({
        "version": 1,
        "node": "lab-node",
        "mode": "adopted",
        "taken": [],
        "settings": {
            "ports": {"store": 5432, "bus": 5672, "broker_management": 15672, "registry": 5000,
                      "hub": 51820},
            "private_network": {
                "interface": PRIVATE_IF,
                "range": format!("{PRIVATE_V4_NET}/{PRIVATE_V4_PREFIX}")
            }
        },
        "resources": resources,
    })
}

// ---------------------------------------------------------------------------------------------
// Running one fixture.

/// One connection's outcome, or why it could not be made.
type OneProbe = Result<Probe, String>;
/// A cell's connections, or why one could not be made.
type CellProbes = Result<Probed, String>;

/// What the connections of one cell found: how many of how many got through, and what the
/// first that did not got.
#[derive(Debug, Clone)]
struct Probed {
    reached: usize,
    of: usize,
    missed: Option<Probe>,
}

impl Probed {
    fn of(results: Vec<Result<Probe, String>>) -> Result<Probed, String> {
        let mut out = Probed {
            reached: 0,
            of: results.len(),
            missed: None,
        };
        for r in results {
            match r? {
                Probe::Reached => out.reached += 1,
                other => {
                    out.missed.get_or_insert(other);
                }
            }
        }
        Ok(out)
    }

    /// Whether this agrees with a claim that the source is admitted (`true`) or not: every
    /// connection got through, or none did.
    fn matches(&self, admitted: bool) -> bool {
        if admitted {
            self.reached == self.of
        } else {
            self.reached == 0
        }
    }
}

impl std::fmt::Display for Probed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let one = match self.missed {
            _ if self.reached == self.of => "R",
            Some(p) if self.reached == 0 => short_probe(&Ok(p)),
            _ => return write!(f, "{}/{}R", self.reached, self.of),
        };
        if self.of == 1 {
            f.write_str(one)
        } else {
            write!(f, "{one}×{}", self.of)
        }
    }
}

/// One probed source of one opening.
struct Cell {
    source: Source,
    family: Family,
    /// The verdict's fate for the source, or why it could not be read.
    reported: Result<String, String>,
    probed: Result<Probed, String>,
    /// What `mesh-host firewall explain` says of a connection from this source: the fate of its
    /// part, or why it could not be read.
    explained: Result<String, String>,
    /// Whether the per-layer states (the report before the verdict) claim the opening in force.
    layers_claim: bool,
    /// For the banned source of a fixture that bans it: what its connection got before the
    /// apply (a ban that refused it then must refuse it after).
    banned_before: Option<OneProbe>,
}

impl Cell {
    /// Whether the report and the probe agree: admitted exactly where the probe got through.
    fn agrees(&self) -> bool {
        match (&self.reported, &self.probed) {
            (Ok(fate), Ok(p)) => p.matches(fate == "admitted"),
            _ => false,
        }
    }

    /// Whether `firewall explain` and the probe agree.
    fn explain_agrees(&self) -> bool {
        match (&self.explained, &self.probed) {
            (Ok(fate), Ok(p)) => p.matches(fate == "admitted"),
            _ => false,
        }
    }

    /// Whether the ban held: a banned source refused before the apply is refused after it.
    fn ban_holds(&self) -> bool {
        match (&self.banned_before, &self.probed) {
            (None, _) => true,
            (Some(Ok(before)), Ok(after)) => before.is_reached() || after.reached == 0,
            _ => false,
        }
    }

    fn layers_agree(&self) -> bool {
        matches!(&self.probed, Ok(p) if p.matches(self.layers_claim))
    }

    fn probed_text(&self) -> String {
        match &self.probed {
            Ok(p) => p.to_string(),
            Err(_) => "ERR".to_owned(),
        }
    }
}

struct Row {
    opening: &'static str,
    /// The LAN host behind the node probed on the opening's port, before the apply and after.
    routed: Routed,
    /// Where the verdict's state contradicts its own parts.
    contradiction: Option<String>,
    outcome: String,
    layers: String,
    state: String,
    detail: String,
    cells: Vec<Cell>,
}

struct Ran {
    fixture: Fixture,
    /// The undeclared port probed from outside, IPv4 and IPv6.
    undeclared: String,
    /// Why the fixture could not be run at all.
    error: Option<String>,
    rows: Vec<Row>,
    /// Where the ruleset limits each source: the bursts after the apply.
    flooded: Vec<flood::Flooded>,
    /// `firewall explain PORT --confirm` after the apply, for every opening's port and the
    /// undeclared one.
    confirmed: Vec<confirmed::Confirmed>,
    took: Duration,
}

fn mesh(node: &Machine, root: &Path, wrap: &[String], args: &[&str]) -> lab::Output {
    let mut argv: Vec<&str> = wrap.iter().map(String::as_str).collect();
    argv.extend([MESH, "--root", root.to_str().unwrap()]);
    argv.extend_from_slice(args);
    node.run(&argv)
        .unwrap_or_else(|e| panic!("running mesh-host {args:?} in {}: {e}", node.name()))
}

fn json_of(out: &lab::Output, what: &str) -> Value {
    if let Err(e) = serde_json::from_str::<Value>(&out.stdout) {
        panic!(
            "mesh-host {what} printed no JSON ({e}), exit {}:\n{}\n{}",
            out.status, out.stdout, out.stderr
        )
    }
    crate::util::contract(&out.stdout)
}

fn run_fixture(fixture: &Fixture) -> Ran {
    let started = Instant::now();
    let mut rows = Vec::new();
    let mut undeclared = String::new();
    let mut flooded = Vec::new();
    let mut confirmed = Vec::new();
    let error = catch_unwind(AssertUnwindSafe(|| {
        (rows, undeclared, flooded, confirmed) = probe_fixture(fixture);
    }))
    .err()
    .map(reason);
    Ran {
        fixture: *fixture,
        undeclared,
        error,
        rows,
        flooded,
        confirmed,
        took: started.elapsed(),
    }
}

/// Before any firewall is loaded, the outside machine reaches the node's public addresses, v4
/// and v6, within 10 s: a cell probed later is then a claim about the ruleset, not about a lab
/// network still settling (one CI run saw every v6 probe from outside of one fixture time out,
/// the undeclared port's too, while the report was right). A lab that never carries it fails
/// the fixture as the lab's failure, not as a disagreement.
fn lab_carries_the_outside(net: &Adoption) {
    for to in [IpAddr::V4(NODE_PUBLIC_V4), IpAddr::V6(NODE_PUBLIC_V6)] {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let got = net
                .outside
                .probe_tcp(to, PORT_UNDECLARED, Duration::from_millis(500))
                .expect("probing from the outside machine");
            if got == Probe::Reached {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the lab: the outside machine does not reach the node at {to} with no firewall \
                 loaded ({got:?} for 10 s)"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

type Probed4 = (
    Vec<Row>,
    String,
    Vec<flood::Flooded>,
    Vec<confirmed::Confirmed>,
);

fn probe_fixture(fixture: &Fixture) -> Probed4 {
    let lab = Lab::new().expect("the lab needs root, iproute2 and nsenter; it never skips");
    let net = Adoption::build(&lab).expect("building the adoption topology");
    net.outside
        .add_address(PUBLIC_IF, BANNED_V4.into(), 32)
        .expect("the banned source on the outside machine");
    net.outside
        .add_address(PUBLIC_IF, BANNED_V6.into(), 128)
        .expect("the banned source on the outside machine");
    let node = &net.node;
    let _listeners: Vec<_> = [PORT_ANYWHERE, PORT_NETWORK, PORT_PRIVATE, PORT_UNDECLARED]
        .iter()
        .map(|p| node.listen_tcp(*p).expect("a listener on the node"))
        .collect();
    let _lan = routed::build(
        &lab,
        &net,
        &[
            PORT_ANYWHERE,
            PORT_NETWORK,
            PORT_PRIVATE,
            PORT_UNDECLARED,
            PUBLISHED,
        ],
    );

    lab_carries_the_outside(&net);
    routed::lab_carries_the_lan(&net, PORT_UNDECLARED);

    let dir = lab.dir().join("corpus");
    std::fs::create_dir_all(&dir).unwrap();
    let loaded = load::load(fixture, node, &dir).unwrap_or_else(|e| panic!("loading: {e}"));
    if loaded.docker.is_some() {
        load::wait_published(node).unwrap_or_else(|e| panic!("{e}"));
    }
    let wrap = loaded.wrap();

    let declared = openings(fixture);
    let ports: Vec<u16> = declared.iter().map(|o| o.port).collect();
    // Before the apply, at once: the LAN host behind the node, and the ban where there is one.
    let (routed_before, banned_before) = std::thread::scope(|s| {
        let banned = s.spawn(|| fixture.bans().then(|| routed::probe_banned(&net, &ports)));
        let routed = routed::probe_all(&net, &ports);
        (
            routed,
            banned.join().expect("the banned source's probes panicked"),
        )
    });
    let root = lab.dir().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let decl = dir.join("declaration.json");
    std::fs::write(
        &decl,
        serde_json::to_vec_pretty(&declaration(&declared)).unwrap(),
    )
    .unwrap();
    let applied = mesh(
        node,
        &root,
        &wrap,
        &["apply", decl.to_str().unwrap(), "--json"],
    );
    let report = json_of(&applied, "apply");
    let status_out = mesh(node, &root, &wrap, &["firewall", "status", "--json"]);
    assert!(
        status_out.success(),
        "firewall status failed ({}): {}",
        status_out.status,
        status_out.stderr
    );
    let status = json_of(&status_out, "firewall status");

    // Every probe of the fixture at once: a probe that gets no answer costs its wait only once.
    // The kernel is asked in scratch namespaces meanwhile (`firewall explain --confirm`).
    let mut asked: Vec<(u16, &'static str)> = declared.iter().map(|o| (o.port, o.path)).collect();
    asked.push((PORT_UNDECLARED, "incoming"));
    let mut jobs = Vec::new();
    for (i, o) in declared.iter().enumerate() {
        for &source in o.sources {
            for &family in o.families {
                jobs.push((i, source, family));
            }
        }
    }
    let (probes, undeclared, routed_after, confirmed): (Vec<CellProbes>, Vec<OneProbe>, _, _) =
        std::thread::scope(|s| {
            let confirmed = s.spawn(|| confirmed::confirm_all(node, &root, &wrap, &asked));
            let routed_after = s.spawn(|| routed::probe_all(&net, &ports));
            let control: Vec<_> = Family::ALL
                .iter()
                .map(|&family| {
                    let outside = &net.outside;
                    s.spawn(move || {
                        outside
                            .probe_tcp_from(
                                Source::Outside.addr(family),
                                Source::Outside.target(family),
                                PORT_UNDECLARED,
                                PROBE_WAIT,
                            )
                            .map_err(|e| e.to_string())
                    })
                })
                .collect();
            let handles: Vec<_> = jobs
                .iter()
                .map(|&(i, source, family)| {
                    let port = declared[i].port;
                    let from = source.machine(&net);
                    let burst = fixture.burst
                        && declared[i].id == "corpus/anywhere"
                        && source == Source::Outside
                        && family == Family::V4;
                    s.spawn(move || {
                        let once = || {
                            from.probe_tcp_from(
                                source.addr(family),
                                source.target(family),
                                port,
                                PROBE_WAIT,
                            )
                            .map_err(|e| e.to_string())
                        };
                        if !burst {
                            return Probed::of(vec![once()]);
                        }
                        let all = std::thread::scope(|w| {
                            let spaced: Vec<_> = (0..BURST)
                                .map(|k| {
                                    w.spawn(move || {
                                        std::thread::sleep(SPACING * k as u32);
                                        once()
                                    })
                                })
                                .collect();
                            spaced
                                .into_iter()
                                .map(|h| h.join().unwrap_or_else(|_| Err("panicked".into())))
                                .collect::<Vec<_>>()
                        });
                        Probed::of(all)
                    })
                })
                .collect();
            let control = control.into_iter().map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("the probe panicked".to_owned()))
            });
            let probes = handles.into_iter().map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("the probe panicked".to_owned()))
            });
            let routed_after = routed_after
                .join()
                .expect("the probes of the LAN host panicked");
            let confirmed = confirmed.join().expect("the confirmations panicked");
            (probes.collect(), control.collect(), routed_after, confirmed)
        });
    let undeclared: Vec<&str> = undeclared.iter().map(short_probe).collect();

    let mut rows: Vec<Row> = Vec::new();
    for (i, o) in declared.iter().enumerate() {
        let entry = status["openings"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|e| e["id"] == o.id)
            .cloned()
            .unwrap_or_else(|| panic!("firewall status has no opening {}: {status:#}", o.id));
        let (layers, layers_claim) = layer_states(&entry);
        let outcome = report["entries"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|e| e["id"] == o.id)
            .and_then(|e| e["outcome"].as_str())
            .unwrap_or("?")
            .to_owned();
        let cells = jobs
            .iter()
            .zip(&probes)
            .filter(|((j, _, _), _)| *j == i)
            .map(|(&(_, source, family), probed)| Cell {
                source,
                family,
                reported: reported(&entry, family, source.addr(family), source.interface()),
                probed: probed.clone(),
                explained: explained(node, &root, &wrap, o, source, family),
                layers_claim,
                banned_before: banned_before
                    .as_ref()
                    .filter(|_| source == Source::Banned)
                    .map(|b| b[i][family as usize].clone()),
            })
            .collect();
        rows.push(Row {
            opening: o.id,
            routed: Routed {
                before: routed_before[i].clone(),
                after: routed_after[i].clone(),
            },
            contradiction: state_contradiction(&entry)
                .or_else(|| apply_contradiction(&report, &entry)),
            outcome,
            layers,
            state: entry["verdict"]["state"].as_str().unwrap_or("-").to_owned(),
            detail: entry["verdict"]["detail"].as_str().unwrap_or("").to_owned(),
            cells,
        });
    }
    // Last, as it fills the outside source's per-source limit.
    let flooded = if fixture.limits_per_source() {
        flood::flood(&net)
    } else {
        Vec::new()
    };
    drop(loaded);
    (rows, undeclared.join(" "), flooded, confirmed)
}

fn reason(payload: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panicked with a value that is not a message".to_owned()
    }
}

#[test]
fn every_found_firewall_of_the_corpus_is_reported_as_real_connections_find_it() {
    let started = Instant::now();
    for f in CORPUS {
        for file in f.files() {
            assert!(
                load::corpus_dir().join(file).exists(),
                "{}: the fixture file {file} is missing",
                f.name
            );
        }
    }
    assert!(
        CORPUS.len() >= 45,
        "the corpus has {} rulesets",
        CORPUS.len()
    );
    let chosen = chosen();
    let next = AtomicUsize::new(0);
    let done: Mutex<Vec<(usize, Ran)>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..WORKERS {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(fixture) = chosen.get(i) else { break };
                let ran = run_fixture(fixture);
                done.lock().unwrap().push((i, ran));
            });
        }
    });
    let mut done = done.into_inner().unwrap();
    done.sort_by_key(|(i, _)| *i);
    let ran: Vec<Ran> = done.into_iter().map(|(_, r)| r).collect();
    let (mut text, failures) = table(&ran, started.elapsed());
    if chosen.len() < CORPUS.len() {
        text.push_str(&format!(
            "\nMESH_CORPUS_ONLY: {} of the corpus's {} rulesets ran\n",
            chosen.len(),
            CORPUS.len()
        ));
    }
    // Straight to the standard error's descriptor, past the harness's capture, so the table is in
    // the log whether the suite passes or not.
    let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), text.as_bytes());
    assert!(failures.is_empty(), "{text}");
}

/// The fixtures to run: all of them, or where `MESH_CORPUS_ONLY` is set (a comma-separated list of
/// words, for working on a few), those whose name contains one of its words. A word that names
/// no fixture fails the run rather than running nothing.
fn chosen() -> Vec<Fixture> {
    let Ok(only) = std::env::var("MESH_CORPUS_ONLY") else {
        return CORPUS.to_vec();
    };
    let words: Vec<&str> = only
        .split(',')
        .map(str::trim)
        .filter(|w| !w.is_empty())
        .collect();
    for w in &words {
        assert!(
            CORPUS.iter().any(|f| f.name.contains(w)),
            "MESH_CORPUS_ONLY: no ruleset of the corpus is named like {w:?}"
        );
    }
    CORPUS
        .iter()
        .filter(|f| words.is_empty() || words.iter().any(|w| f.name.contains(w)))
        .copied()
        .collect()
}
