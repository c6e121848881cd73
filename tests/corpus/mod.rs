//! The corpus suite (issue 20, point 4): every found firewall of `tests/fixtures/found/corpus/`
//! loaded in a fresh lab node as its distribution or tool leaves it, openings applied through the
//! built binary, then each opening probed with real connections from every source it declares (the
//! outside machine, a banned source, the private network; both families) and compared with the
//! host's own report, `firewall status --json`'s `verdict`. Any disagreement fails the suite; the
//! table (ruleset × opening × source: reported / probed) is printed whether it passes or not,
//! with the per-layer `state` beside it, which is what the report said before the verdict.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use lab::addr::*;
use lab::{Adoption, Lab, Machine, Probe};
use serde_json::{json, Value};

mod catalogue;
mod load;

use catalogue::{Fixture, CORPUS};

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
// Reading the report.

/// Whether `cidr` (an address, or an address with a prefix length) holds `addr`; `None` when it
/// is not a CIDR at all.
fn cidr_contains(cidr: &str, addr: IpAddr) -> Option<bool> {
    let (net, len) = match cidr.split_once('/') {
        Some((n, l)) => (n, Some(l.parse::<u32>().ok()?)),
        None => (cidr, None),
    };
    let net: IpAddr = net.parse().ok()?;
    Some(match (net, addr) {
        (IpAddr::V4(n), IpAddr::V4(a)) => {
            let len = len.unwrap_or(32);
            if len > 32 {
                return None;
            }
            let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
            u32::from(n) & mask == u32::from(a) & mask
        }
        (IpAddr::V6(n), IpAddr::V6(a)) => {
            let len = len.unwrap_or(128);
            if len > 128 {
                return None;
            }
            let mask = if len == 0 {
                0
            } else {
                u128::MAX << (128 - len)
            };
            u128::from(n) & mask == u128::from(a) & mask
        }
        _ => false,
    })
}

/// Whether one of a part's sources holds the probe's source: a CIDR holding its address, or (for
/// an opening from the private network) a source naming the interface it arrives on.
fn source_holds(source: &str, addr: IpAddr, interface: &str) -> bool {
    match cidr_contains(source, addr) {
        Some(held) => held,
        None => source
            .split(|c: char| !c.is_alphanumeric() && c != '.' && c != '-')
            .any(|w| w == interface),
    }
}

/// What the host's report says of one source: the fate of the verdict's part holding it.
fn reported(
    opening: &Value,
    family: Family,
    addr: IpAddr,
    interface: &str,
) -> Result<String, String> {
    let verdict = &opening["verdict"];
    if verdict.is_null() {
        return Err(format!(
            "no verdict in the report for {} (firewall status --json has no `verdict`)",
            opening["id"].as_str().unwrap_or("?")
        ));
    }
    let parts = verdict["parts"]
        .as_array()
        .ok_or_else(|| format!("the verdict has no parts: {verdict}"))?;
    let holding: Vec<&Value> = parts
        .iter()
        .filter(|p| p["family"] == family.name())
        .filter(|p| {
            p["sources"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .any(|s| source_holds(s, addr, interface))
        })
        .collect();
    match holding.as_slice() {
        [part] => part["fate"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| format!("a part has no fate: {part}")),
        [] => Err(format!(
            "no {} part of the verdict holds the declared source {addr}: {verdict}",
            family.name()
        )),
        _ => Err(format!(
            "{} parts of the verdict hold {addr}; they must partition the sources: {verdict}",
            holding.len()
        )),
    }
}

/// The per-layer states of an opening where a rule is needed, as the report gave them before the
/// verdict (`present`, `missing`, `refused`, `doubtful`, ...), and whether they claim it in force.
fn layer_states(opening: &Value) -> (String, bool) {
    let states: Vec<&str> = opening["layers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|l| l["state"] != "not-needed")
        .map(|l| l["state"].as_str().unwrap_or("?"))
        .collect();
    if states.is_empty() {
        return ("not-needed".to_owned(), true);
    }
    let in_force = states.iter().all(|s| *s == "present");
    let mut counted: BTreeMap<&str, usize> = BTreeMap::new();
    for s in states {
        *counted.entry(s).or_default() += 1;
    }
    let shown: Vec<String> = counted
        .iter()
        .map(|(s, n)| {
            if *n == 1 {
                (*s).to_owned()
            } else {
                format!("{s}×{n}")
            }
        })
        .collect();
    (shown.join(","), in_force)
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
    /// Whether the per-layer states (the report before the verdict) claim the opening in force.
    layers_claim: bool,
}

impl Cell {
    /// Whether the report and the probe agree: admitted exactly where the probe got through.
    fn agrees(&self) -> bool {
        match (&self.reported, &self.probed) {
            (Ok(fate), Ok(p)) => p.matches(fate == "admitted"),
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
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "mesh-host {what} printed no JSON ({e}), exit {}:\n{}\n{}",
            out.status, out.stdout, out.stderr
        )
    })
}

fn run_fixture(fixture: &Fixture) -> Ran {
    let started = Instant::now();
    let mut rows = Vec::new();
    let mut undeclared = String::new();
    let error = catch_unwind(AssertUnwindSafe(|| {
        (rows, undeclared) = probe_fixture(fixture);
    }))
    .err()
    .map(reason);
    Ran {
        fixture: *fixture,
        undeclared,
        error,
        rows,
        took: started.elapsed(),
    }
}

fn probe_fixture(fixture: &Fixture) -> (Vec<Row>, String) {
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

    let dir = lab.dir().join("corpus");
    std::fs::create_dir_all(&dir).unwrap();
    let loaded = load::load(fixture, node, &dir).unwrap_or_else(|e| panic!("loading: {e}"));
    if loaded.docker.is_some() {
        load::wait_published(&net.outside).unwrap_or_else(|e| panic!("{e}"));
    }
    let wrap = loaded.wrap();

    let declared = openings(fixture);
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
    let mut jobs = Vec::new();
    for (i, o) in declared.iter().enumerate() {
        for &source in o.sources {
            for &family in o.families {
                jobs.push((i, source, family));
            }
        }
    }
    let (probes, undeclared): (Vec<CellProbes>, Vec<OneProbe>) = std::thread::scope(|s| {
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
        (probes.collect(), control.collect())
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
                layers_claim,
            })
            .collect();
        rows.push(Row {
            opening: o.id,
            outcome,
            layers,
            state: entry["verdict"]["state"].as_str().unwrap_or("-").to_owned(),
            detail: entry["verdict"]["detail"].as_str().unwrap_or("").to_owned(),
            cells,
        });
    }
    drop(loaded);
    (rows, undeclared.join(" "))
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

// ---------------------------------------------------------------------------------------------
// The table.

/// The columns of the table: every source in every family.
const COLUMNS: [(Source, Family); 6] = [
    (Source::Outside, Family::V4),
    (Source::Outside, Family::V6),
    (Source::Banned, Family::V4),
    (Source::Banned, Family::V6),
    (Source::Private, Family::V4),
    (Source::Private, Family::V6),
];

fn short_fate(fate: &Result<String, String>) -> &'static str {
    match fate.as_deref() {
        Ok("admitted") => "adm",
        Ok("refused") => "ref",
        Ok("not-admitted") => "not",
        Ok("doubtful") => "dbt",
        Ok(_) => "???",
        Err(_) => "none",
    }
}

fn short_probe(p: &Result<Probe, String>) -> &'static str {
    match p {
        Ok(Probe::Reached) => "R",
        Ok(Probe::Refused) => "X",
        Ok(Probe::Unreachable) => "U",
        Ok(Probe::TimedOut) => "T",
        Err(_) => "ERR",
    }
}

fn table(ran: &[Ran], total: Duration) -> (String, String) {
    let mut t = String::from(
        "\nThe corpus: the host's report against real probes (ruleset × opening × source)\n\n",
    );
    let _ = write!(
        t,
        "{:<31} {:<5} {:<17} {:<9} {:<12} {:<13}",
        "ruleset", "undcl", "opening", "apply", "verdict", "layers"
    );
    for (s, f) in COLUMNS {
        let _ = write!(
            t,
            " | {:<13}",
            format!("{} {}", s.name(), if f == Family::V4 { "v4" } else { "v6" })
        );
    }
    t.push('\n');
    let mut failures = String::new();
    let mut today_wrong = String::new();
    let (mut cells, mut agreeing, mut layers_agreeing) = (0, 0, 0);
    for r in ran {
        if let Some(e) = &r.error {
            let _ = writeln!(t, "{:<31} FAILED: {}", r.fixture.name, first_line(e));
            let _ = writeln!(failures, "- {}: {e}", r.fixture.name);
            continue;
        }
        for row in &r.rows {
            let _ = write!(
                t,
                "{:<31} {:<5} {:<17} {:<9} {:<12} {:<13}",
                r.fixture.name,
                r.undeclared,
                row.opening.trim_start_matches("corpus/"),
                row.outcome,
                row.state,
                row.layers
            );
            for (s, f) in COLUMNS {
                let shown = match row.cells.iter().find(|c| c.source == s && c.family == f) {
                    None => "·".to_owned(),
                    Some(c) => {
                        cells += 1;
                        agreeing += usize::from(c.agrees());
                        layers_agreeing += usize::from(c.layers_agree());
                        if !c.agrees() {
                            let why = match (&c.reported, &c.probed) {
                                (Err(e), _) => e.clone(),
                                (_, Err(e)) => format!("the probe failed: {e}"),
                                (Ok(fate), Ok(p)) => format!(
                                    "reported {fate}, probed {p} ({}: {})",
                                    row.state, row.detail
                                ),
                            };
                            let _ = writeln!(
                                failures,
                                "- {} / {} / {} {}: {why}",
                                r.fixture.name,
                                row.opening,
                                s.name(),
                                f.name()
                            );
                        }
                        if !c.layers_agree() {
                            let _ = writeln!(
                                today_wrong,
                                "- {} / {} / {} {}: layers {} claim {}, probed {}",
                                r.fixture.name,
                                row.opening,
                                s.name(),
                                f.name(),
                                row.layers,
                                if c.layers_claim {
                                    "in force"
                                } else {
                                    "not in force"
                                },
                                c.probed_text()
                            );
                        }
                        format!(
                            "{}/{}{}{}",
                            short_fate(&c.reported),
                            c.probed_text(),
                            if c.agrees() { "" } else { " !" },
                            if c.layers_agree() { "" } else { " *" }
                        )
                    }
                };
                let _ = write!(t, " | {shown:<13}");
            }
            t.push('\n');
        }
    }
    let _ = writeln!(
        t,
        "\ncell: reported/probed — reported is the verdict's fate for the part holding the source \
         (adm admitted, ref refused, not not-admitted, dbt doubtful, none: no verdict); probed is \
         R reached, X refused (reset, port unreachable), U unreachable (prohibited), T timed out; \
         ×30 or k/30R where a rate-limited ruleset's cell is probed {BURST} times. \
         ! the report and the probe disagree; * the per-layer states (layers, the report before \
         the verdict: in force iff every needed layer is present) disagree with the probe. \
         undcl: port {PORT_UNDECLARED}, served and declared by no opening, probed from outside \
         (v4 v6): what the found firewall does with what nobody opened."
    );
    let _ = writeln!(
        t,
        "{cells} cells: {agreeing} agree with the verdict, {layers_agreeing} with the per-layer \
         states"
    );
    let _ = write!(t, "wall time per ruleset:");
    for r in ran {
        let _ = write!(t, " {} {:.0} s;", r.fixture.name, r.took.as_secs_f64());
    }
    let _ = writeln!(t, "\ntotal: {:.0} s", total.as_secs_f64());
    if !today_wrong.is_empty() {
        let _ = write!(
            t,
            "\nwhere the per-layer states are wrong (*):\n{today_wrong}"
        );
    }
    if !failures.is_empty() {
        let _ = write!(t, "\nfailures:\n{failures}");
    }
    (t, failures)
}

fn first_line(s: &str) -> String {
    let line = s.lines().next().unwrap_or("");
    line.chars().take(120).collect()
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
        CORPUS.len() >= 25,
        "the corpus has {} rulesets",
        CORPUS.len()
    );
    let next = AtomicUsize::new(0);
    let done: Mutex<Vec<(usize, Ran)>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..WORKERS {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(fixture) = CORPUS.get(i) else { break };
                let ran = run_fixture(fixture);
                done.lock().unwrap().push((i, ran));
            });
        }
    });
    let mut done = done.into_inner().unwrap();
    done.sort_by_key(|(i, _)| *i);
    let ran: Vec<Ran> = done.into_iter().map(|(_, r)| r).collect();
    let (text, failures) = table(&ran, started.elapsed());
    // Straight to the standard error's descriptor, past the harness's capture, so the table is in
    // the log whether the suite passes or not.
    let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), text.as_bytes());
    assert!(failures.is_empty(), "{text}");
}

#[test]
fn the_cidr_helper_holds_what_it_should() {
    let a4: IpAddr = "192.0.2.40".parse().unwrap();
    let a6: IpAddr = "2001:db8:1::40".parse().unwrap();
    assert_eq!(cidr_contains("0.0.0.0/0", a4), Some(true));
    assert_eq!(cidr_contains("192.0.2.32/28", a4), Some(true));
    assert_eq!(cidr_contains("192.0.2.0/27", a4), Some(false));
    assert_eq!(cidr_contains("192.0.2.40", a4), Some(true));
    assert_eq!(cidr_contains("::/0", a6), Some(true));
    assert_eq!(cidr_contains("::/0", a4), Some(false));
    assert_eq!(cidr_contains("2001:db8:1::40/124", a6), Some(true));
    assert_eq!(cidr_contains("2001:db8:1::/124", a6), Some(false));
    assert_eq!(cidr_contains("mesh0", a4), None);
    assert_eq!(cidr_contains("10.0.0.0/33", a4), None);
    assert!(source_holds("iifname mesh0", a4, "mesh0"));
    assert!(!source_holds("iifname mesh0", a4, "eth0"));
    let opening = json!({"id": "x", "verdict": {"state": "present", "parts": [
        {"family": "ipv4", "sources": ["192.0.2.32/28"], "fate": "refused"},
        {"family": "ipv4", "sources": ["0.0.0.0/1", "128.0.0.0/2", "192.0.2.0/27"], "fate": "admitted"},
    ]}});
    assert_eq!(
        reported(&opening, Family::V4, a4, "eth0").as_deref(),
        Ok("refused")
    );
    assert_eq!(
        reported(&opening, Family::V4, "192.0.2.20".parse().unwrap(), "eth0").as_deref(),
        Ok("admitted")
    );
    assert!(reported(&opening, Family::V6, a6, "eth0").is_err());
    assert!(reported(&json!({"id": "x"}), Family::V4, a4, "eth0")
        .unwrap_err()
        .contains("no verdict in the report"));
}
