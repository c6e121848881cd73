//! The property of issue 30 on a real kernel: random found rulesets, built from the shapes found
//! firewalls have (chains shared by the input and forward hooks and nested on the way to a
//! shared refusal, bans by set, by a chain of their own, by verdict map and by a dynamic set a
//! honeypot rule adds to, in input alone or in forward too; log-and-drop chains that bans and
//! the catch-all share, per-source limits through dynamic sets; both families, in one `inet`
//! table or as `ip` and `ip6` tables), loaded with `nft -f` into the test's namespace (an
//! outside and a LAN interface, forwarding on); random openings converged through them; then
//! the ruleset as the kernel lists it after the write, against the one listed before, for every
//! class of new connection: the only cells that differ are the openings' own. That is the
//! evaluator's half, run on every case (`MESH_FUZZ_CASES`, 2,000 by default, on two threads
//! each with a namespace of its own): the writes are real and read back, no packet is sent. And the kernel agrees: on `MESH_KERNEL_CASES` of them
//! (spread over the run), every cell the check compares is sent a real SYN, and the kernel's
//! answer is set beside the evaluator's after-model.
//!
//! What is probed, per case: each family; incoming on `eth0` and on `lan0`, and forwarded from
//! each of them to a host on the other's network (a listener there, routed through the node);
//! each port the check asks about (the openings' and one no opening names); each source region
//! of the after-model's answer, split further by the regions the case's ruleset names (each
//! banned address or network, each opening's CIDR, anywhere else) so that a ban that shares its
//! verdict with the catch-all is still probed from a banned address. Incoming on `lo` and on the
//! bare veth ends `eth0p`/`lan0p` is counted as unprobed (no other machine sends from there).
//! A doubtful answer is not contradicted by the kernel, it is settled by it: counted, reported.
//!
//! The kernel is asked through `firewall::confirm`, the path `explain --confirm` takes on a
//! node, rather than by probing the test's own namespace from peers on `eth0p`/`lan0p`: it
//! already wires each probe's source address, its route back, the host behind and the
//! listeners, sends a case's probes at once, and cleans its namespaces up; and since it clones
//! the ruleset as `nft list ruleset` prints it, this test also covers the clone. A confirmation
//! needs nothing of the test thread's namespace, so many cases' confirmations run on worker
//! threads while the next cases are converged, and a case's dropped SYNs (a
//! [`confirm::PROBE_WAIT`] each round) overlap with the others' work. A loss in the listing's
//! round trip would show as a disagreement, never hide one.

mod common;
#[path = "kernel_own_cells/rulesets.rs"]
mod rulesets;

use common::{in_fresh_netns, ip};
use firewall::confirm::{self, Agreement, Listing};
use firewall::eval::check::{self, Before, May};
use firewall::eval::{Addrs, Answer, Conn, Fam, Fate, Iface, Model, Path, Snapshot, Way};
use firewall::netlink::NfSocket;
use firewall::outcome::Converged;
use firewall::{child, Firewall, Opening, Scope};
use rulesets::{openings, ruleset, Bans, Found};
use run::SystemRunner;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::Instant;

struct NoLegacy;

impl run::Runner for NoLegacy {
    fn call(&self, call: &run::Call<'_>) -> std::io::Result<run::Output> {
        panic!(
            "nothing is to be run in this test, {:?} was asked for",
            call.argv
        );
    }

    fn exists(&self, _: &str) -> bool {
        false
    }
}

/// A /proc of the test's own: no legacy tables, forwarding on in both families.
fn proc_dir(w: usize) -> std::path::PathBuf {
    let proc = std::env::temp_dir().join(format!("fw-own-cells-{}-{w}", std::process::id()));
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

struct Own<'o>(&'o [Opening]);

impl May for Own<'_> {
    fn change(&self, conn: &Conn, before: &Fate) -> Addrs {
        self.0.iter().fold(Addrs::none(conn.fam), |a, o| {
            a.union(&check::own(o, conn, before))
        })
    }
}

/// The interfaces a connection from another machine arrives on in this bed.
const WAYS_IN: [&str; 2] = ["eth0", "lan0"];

/// How many cases' confirmations run at once beside the converging thread: each spends most of
/// its time waiting on `ip` and on dropped SYNs, not on the processor.
const IN_FLIGHT: usize = 32;

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
fn regions(bans: Bans, os: &[Opening], fam: Fam) -> Vec<Addrs> {
    let mut named: Vec<Addrs> = bans.sources(fam).iter().map(|b| cidr(b)).collect();
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
fn ask(a: Asked) -> Asking {
    std::thread::spawn(move || {
        let got = confirm::confirm(
            &SystemRunner,
            &a.listing,
            &a.ifaces,
            &a.ways,
            confirm::BUDGET,
        );
        (a, got)
    })
}

/// The cells of one case the kernel is asked about, and the classes it is not asked about
/// (arriving where no other machine sends from), counted by `tally`.
#[allow(clippy::too_many_arguments)]
fn cells(
    case: u64,
    found: &Found,
    os: &[Opening],
    after: &Model,
    written: &Snapshot,
    conns: &[Conn],
    ifaces: &[Iface],
    bed: &Bed,
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
        let answer = split(answer, &regions(found.bans, os, c.fam));
        ways.push((
            Way {
                conn: c.clone(),
                sources: all,
            },
            answer,
        ));
    }
    let mut listing = bed.listing.clone();
    let nft = child::stdout(
        &SystemRunner,
        "nft",
        &["list".to_string(), "ruleset".to_string()],
        None,
    )
    .unwrap_or_else(|e| {
            panic!(
                "case {case}: the ruleset after the write cannot be listed by nft: {e}\nfound:\n{}\nopenings: {os:?}\nas the kernel lists it:\n{:#?}",
                found.text,
                written
                    .ruleset
                    .rules
                    .iter()
                    .filter(|r| r.comment.as_deref().is_some_and(|c| c.starts_with("mesh")))
                    .collect::<Vec<_>>()
            )
        });
    listing.nft = confirm::loadable_nft(&nft, &[]);
    Asked {
        case,
        text: found.text.clone(),
        openings: format!("{os:?}"),
        listing,
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

/// The test's namespace, made once and used by every case: its interfaces, its /proc, the
/// routes and legacy tables a confirmation clones (none of either here), and the child
/// processes it runs (each with the exec seam's deadline and output bound).
struct Bed {
    proc: std::path::PathBuf,
    ifaces: Vec<Iface>,
    listing: Listing,
}

impl Bed {
    fn new(w: usize) -> Bed {
        in_fresh_netns();
        interfaces();
        // What a confirmation clones besides nf_tables, read once: the bed's routes (its
        // addresses' own, which the clone leaves to the addresses) and nothing of iptables or
        // ipset, which no case writes.
        let mut listing = confirm::capture(&SystemRunner).unwrap();
        assert!(
            listing.xt_nft.is_empty() && listing.legacy.is_empty() && listing.ipset.is_none(),
            "the bed's namespace holds tables no case wrote: {listing:?}"
        );
        listing.nft.clear();
        Bed {
            proc: proc_dir(w),
            ifaces: firewall::eval::interfaces(),
            listing,
        }
    }

    fn run(&self, program: &str, args: &[&str]) -> String {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        child::stdout(&SystemRunner, program, &args, None).unwrap_or_else(|e| panic!("{e}"))
    }

    fn load(&self, text: &str) {
        child::run_ok(
            &SystemRunner,
            "nft",
            &["-f".to_string(), "-".to_string()],
            Some(text),
        )
        .unwrap_or_else(|e| panic!("{e}\n{text}"));
    }
}

/// What the evaluator's half came to, over all cases.
#[derive(Default)]
struct Checked {
    cases: u64,
    written: usize,
    unwritten: usize,
    /// Classes of connection compared before and after, over all cases.
    classes: usize,
    /// Cases per kind of ban, and split into `ip` and `ip6` tables.
    by_bans: BTreeMap<String, u64>,
    split: u64,
    /// Cases whose verdicts after the write were read from the checked model, no listing.
    from_the_check: u64,
    /// Time spent loading, converging, listing and comparing (not waiting on the kernel's half).
    busy: std::time::Duration,
    /// Where that time went: `nft -f` of the found ruleset, the convergence (the engine's own
    /// reading, placement, check and write), the two listings and models, the test's comparison.
    phases: [std::time::Duration; 4],
}

/// How many threads converge and check cases, each in a namespace of its own: on a machine
/// shared with other builds, a case spends most of its wall waiting for a processor.
const WORKERS: usize = 2;

/// What the workers share: the next case's number, the tallies, the confirmations in flight.
struct Shared {
    next: AtomicU64,
    checked: Mutex<Checked>,
    tally: Mutex<Tally>,
    asking: Mutex<VecDeque<Asking>>,
}

/// A confirmation in flight: the case asked, and what the kernel answered.
type Asking = JoinHandle<(Asked, firewall::Result<confirm::Confirmation>)>;

/// Takes cases until none is left: each loaded into this worker's bed, converged, listed and
/// compared; the asked ones handed to a confirmation.
fn worker(w: usize, cases: u64, asked: u64, shared: &Shared) {
    let bed = Bed::new(w);
    let mut sock = NfSocket::open().unwrap();
    loop {
        let case = shared.next.fetch_add(1, Ordering::Relaxed);
        if case >= cases {
            break;
        }
        let mut rng = fuzz::Rng::new(0x0030_c0de ^ (case + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let mut phases = [std::time::Duration::ZERO; 4];
        let t0 = Instant::now();
        let found = ruleset(&mut rng);
        bed.load(&found.text);
        let t1 = Instant::now();
        phases[0] += t1 - t0;
        let os = openings(&mut rng);
        let snap = Snapshot::read(&mut sock).unwrap();
        let tables: BTreeSet<&str> = snap
            .ruleset
            .tables
            .iter()
            .map(|t| t.name.as_str())
            .collect();
        assert!(
            tables == BTreeSet::from(["found"]),
            "case {case}: the namespace holds tables an earlier case left: {tables:?}"
        );
        let before_model = Model::new(&snap);
        let t2 = Instant::now();
        let exec = NoLegacy;
        let mut fw = Firewall::open_at(&exec, &bed.proc).unwrap();
        let done = fw
            .converge(&os, Scope::All)
            .unwrap_or_else(|e| panic!("case {case}: {e}\n{}", found.text));
        // The verdicts after the write, read from the model the check built where nothing else
        // committed since the batch, are the verdicts of the ruleset listed afresh.
        let listings = fw.listings();
        let kept = fw
            .verdicts(&os)
            .unwrap_or_else(|e| panic!("case {case}: {e}"));
        let from_the_check = fw.listings() == listings;
        drop(fw);
        let fresh = Firewall::open_at(&exec, &bed.proc)
            .unwrap()
            .verdicts(&os)
            .unwrap_or_else(|e| panic!("case {case}: {e}"));
        assert_eq!(
            kept, fresh,
            "case {case}: the verdicts after the write differ from a fresh listing's\nruleset:\n{}\nopenings: {os:?}",
            found.text
        );
        let t3 = Instant::now();
        phases[1] += t3 - t2;
        let after_snap = Snapshot::read(&mut sock).unwrap();
        let after_model = Model::new(&after_snap);
        let t4 = Instant::now();
        phases[2] += (t4 - t3) + (t2 - t1);
        let mut ports: BTreeSet<(u8, u16)> = os.iter().map(|o| (6, o.port)).collect();
        ports.insert((6, check::unnamed_port(&ports)));
        let conns = check::classes(&bed.ifaces, &ports, &[], [true, true]);
        let before = Before::of(&before_model, conns.clone());
        let v = check::diff(&before, &after_model, &Own(&os));
        assert!(
            v.is_empty(),
            "case {case}: the write changed more than its openings' cells:\n{}\n\nruleset:\n{}\nopenings: {os:?}\nafter:\n{}",
            v.iter().map(|v| v.describe()).collect::<Vec<_>>().join("\n"),
            found.text,
            bed.run("nft", &["list", "ruleset"])
        );
        phases[3] += t4.elapsed();
        // The asked cases spread evenly over the run, so that their confirmations' waits
        // overlap with the evaluator's work on the cases between them.
        let a = ((case + 1) * asked / cases > case * asked / cases).then(|| {
            cells(
                case,
                &found,
                &os,
                &after_model,
                &after_snap,
                &conns,
                &bed.ifaces,
                &bed,
                &mut shared.tally.lock().unwrap(),
            )
        });
        {
            let mut guard = shared.checked.lock().unwrap();
            let checked = &mut *guard;
            checked.classes += conns.len();
            count_written(&os, &done, &mut checked.written, &mut checked.unwritten);
            *checked
                .by_bans
                .entry(format!("{:?}", found.bans).to_lowercase())
                .or_default() += 1;
            checked.split += u64::from(found.split);
            checked.from_the_check += u64::from(from_the_check);
            for (sum, p) in checked.phases.iter_mut().zip(phases) {
                *sum += p;
            }
            checked.busy += t0.elapsed();
        }
        if let Some(a) = a {
            let full = shared.asking.lock().unwrap().len() >= IN_FLIGHT;
            if full {
                let oldest = shared.asking.lock().unwrap().pop_front();
                if let Some(t) = oldest {
                    let (a, got) = t.join().unwrap();
                    shared.tally.lock().unwrap().add(&a, got);
                }
            }
            shared.asking.lock().unwrap().push_back(ask(a));
        }
    }
    std::fs::remove_dir_all(&bed.proc).ok();
}

#[test]
fn every_write_changes_only_its_openings_own_cells_and_the_kernel_agrees_on_each() {
    let started = Instant::now();
    // Every case is checked by the evaluator; `asked` of them, spread over the run, are also
    // asked of the kernel.
    let cases = fuzz::cases(2_000);
    let asked = kernel_cases().min(cases);
    let shared = Shared {
        next: AtomicU64::new(0),
        checked: Mutex::new(Checked {
            cases,
            ..Checked::default()
        }),
        tally: Mutex::new(Tally {
            cases: asked,
            ..Tally::default()
        }),
        asking: Mutex::new(Default::default()),
    };
    // One bed per worker, each in its own namespace; a case's ruleset and openings come from
    // its own number, so which worker takes it changes nothing.
    std::thread::scope(|scope| {
        for w in 0..WORKERS {
            let shared = &shared;
            scope.spawn(move || worker(w, cases, asked, shared));
        }
    });
    let check_wall = started.elapsed();
    let mut tally = shared.tally.into_inner().unwrap();
    for t in shared.asking.into_inner().unwrap() {
        let (a, got) = t.join().unwrap();
        tally.add(&a, got);
    }
    let checked = shared.checked.into_inner().unwrap();
    let wall = started.elapsed();
    println!(
        "evaluator: {} random rulesets ({}; {} as ip + ip6 tables, the rest inet) checked by {WORKERS} threads in {:.1} s ({:.1} s of work, {:.1} ms each: {}): {} openings written, {} left unwritten (every place would change more than their own cells), {} classes of connection compared before and after, 0 changed beyond the openings' own",
        checked.cases,
        checked
            .by_bans
            .iter()
            .map(|(k, n)| format!("bans by {k} {n}"))
            .collect::<Vec<_>>()
            .join(", "),
        checked.split,
        check_wall.as_secs_f64(),
        checked.busy.as_secs_f64(),
        checked.busy.as_secs_f64() * 1000.0 / checked.cases.max(1) as f64,
        ["nft -f", "converge", "list and model twice", "compare"]
            .iter()
            .zip(checked.phases)
            .map(|(w, d)| format!(
                "{w} {:.1}",
                d.as_secs_f64() * 1000.0 / checked.cases.max(1) as f64
            ))
            .collect::<Vec<_>>()
            .join(", "),
        checked.written,
        checked.unwritten,
        checked.classes,
    );
    if asked > 0 {
        tally.report(wall, check_wall);
        tally.assert_holds();
    } else {
        println!("kernel: not asked (MESH_KERNEL_CASES=0)");
    }
    assert!(
        checked.written > 0,
        "no opening was ever written: the property holds vacuously"
    );
    println!(
        "verdicts after the write read from the checked model, no listing: {} of {} cases (each equal to a fresh listing's)",
        checked.from_the_check, checked.cases
    );
    assert!(
        checked.from_the_check > 0,
        "no case read its verdicts from the checked model: the comparison holds vacuously"
    );
}

/// How many of the cases the kernel is asked about: `MESH_KERNEL_CASES`, by default as many as
/// fit in about four minutes on the 2-core machine this was measured on (docs/PERFORMANCE.md).
fn kernel_cases() -> u64 {
    std::env::var("MESH_KERNEL_CASES")
        .ok()
        .and_then(|v| v.replace('_', "").parse().ok())
        .unwrap_or(KERNEL_CASES)
}

/// The default of [`kernel_cases`].
const KERNEL_CASES: u64 = 600;

impl Tally {
    fn report(&self, wall: std::time::Duration, check_wall: std::time::Duration) {
        let unprobed: usize = self.unprobed.values().sum();
        println!(
            "kernel: {} of them asked, {} cells probed by a real SYN ({}): {} agreed, {} doubtful settled by the kernel, {} disagreed; {} admitted, {} not; {unprobed} unprobed ({}); {:.1} s in all, the evaluator's half done at {:.1} s",
            self.cases,
            self.probed,
            self.by_way
                .iter()
                .map(|((f, p), (n, a))| format!("{f} {p} {n}, {a} connected"))
                .collect::<Vec<_>>()
                .join("; "),
            self.agreed,
            self.doubtful,
            self.disagreements.len(),
            self.admitted,
            self.refused,
            self.unprobed
                .iter()
                .map(|(why, n)| format!("{n} {why}"))
                .collect::<Vec<_>>()
                .join("; "),
            wall.as_secs_f64(),
            check_wall.as_secs_f64(),
        );
        if !self.doubts.is_empty() {
            println!(
                "doubtful answers: {}",
                self.doubts.iter().cloned().collect::<Vec<_>>().join("; ")
            );
        }
        if !self.notes.is_empty() {
            println!(
                "not recreated: {}",
                self.notes.iter().cloned().collect::<Vec<_>>().join("; ")
            );
        }
    }

    fn assert_holds(&self) {
        assert!(
            self.failures.is_empty(),
            "{} confirmations failed:\n{}",
            self.failures.len(),
            self.failures.join("\n")
        );
        assert!(
            self.disagreements.is_empty(),
            "the kernel disagreed with the evaluator on {} cells; the first:\n{}",
            self.disagreements.len(),
            self.disagreements
                .iter()
                .take(3)
                .cloned()
                .collect::<Vec<_>>()
                .join("\n\n")
        );
        for fam in [Fam::V4, Fam::V6] {
            for path in [Path::Incoming, Path::Forwarded] {
                let (n, a) = self
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
}
