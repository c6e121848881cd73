//! Times converging 1,000 openings in one transaction through `Firewall::converge` on a found
//! hand-written nftables input chain, against `nft -f` of the same rules, in a fresh network
//! namespace (run as root): `cargo run --release -p firewall --example openings_bench`.
//!
//! Each run starts from the found ruleset alone (reloaded, not timed). The engine's figure is
//! what an apply pays: detecting the found firewall, listing its marks, building the batch, and
//! sending it with every acknowledgement read. `nft -f` gets the finished rules as a file. Both
//! must leave the same ruleset, which is checked.

mod common;
use common::{nft, stats};

use std::process::Command;
use std::time::Instant;

use firewall::opening::From;
use firewall::{rules, Firewall, Opening, Path, Proto, Scope};

const OPENINGS: u16 = 1000;
const RUNS: usize = 6;

/// The found firewall: a hand-written input chain with policy drop, as `/etc/nftables.conf` has.
const FOUND: &str = "flush ruleset
table inet filter {
	chain input {
		type filter hook input priority filter; policy drop;
		ct state established,related accept
		iifname \"lo\" accept
		tcp dport { 22, 8080 } accept
	}
}
";

fn openings() -> Vec<Opening> {
    (0..OPENINGS)
        .map(|i| Opening {
            id: format!("bench/o{i}"),
            port: 10000 + i,
            proto: Proto::Tcp,
            from: From::Anywhere,
            path: Path::Incoming,
        })
        .collect()
}

/// The same rules as an nft script. The chain drops by policy and has no catch-all rule, so the
/// engine appends every opening at its end (after the operator's rules), in the order of their
/// marks; `add` in that order gives the same final order.
fn nft_script(openings: &[Opening]) -> String {
    let mut sorted: Vec<&Opening> = openings.iter().collect();
    sorted.sort_by_key(|o| rules::mark(o));
    let mut s = String::new();
    for o in sorted {
        s.push_str(&format!(
            "add rule inet filter input tcp dport {} accept comment \"{}\"\n",
            o.port,
            rules::mark(o)
        ));
    }
    s
}

fn reset() {
    nft(&["-f", "-"], Some(FOUND));
}

/// The engine as a whole process, like `nft -f`: open, detect, converge, exit.
fn child() {
    let exec = run::SystemRunner;
    let mut fw = Firewall::open(&exec).expect("detecting the found firewall");
    let done = fw.converge(&openings(), Scope::All).expect("converging");
    assert_eq!(done.added.len(), OPENINGS as usize);
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some("--child") {
        // Already in the parent's namespace, which it inherited.
        child();
        return;
    }
    // SAFETY: unshare(CLONE_NEWNET) only moves this (so far single) thread to a new namespace.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        panic!(
            "unshare(CLONE_NEWNET) failed: {}; run as root",
            std::io::Error::last_os_error()
        );
    }
    let exec = run::SystemRunner;
    let openings = openings();
    let script = nft_script(&openings);
    let path = std::env::temp_dir().join(format!("openings_bench_{}.nft", std::process::id()));
    std::fs::write(&path, &script).unwrap();

    let (mut open, mut converge, mut total, mut recheck, mut remove) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut engine_listing = String::new();
    for _ in 0..RUNS {
        reset();
        let t0 = Instant::now();
        let mut fw = Firewall::open(&exec).expect("detecting the found firewall");
        let t1 = Instant::now();
        let done = fw.converge(&openings, Scope::All).expect("converging");
        let t2 = Instant::now();
        assert_eq!(done.added.len(), OPENINGS as usize);
        open.push(t1 - t0);
        converge.push(t2 - t1);
        total.push(t2 - t0);
        engine_listing = nft(&["list", "ruleset"], None);

        // What every later apply and reconcile pays when nothing changed.
        let t0 = Instant::now();
        let mut fw = Firewall::open(&exec).unwrap();
        let done = fw.converge(&openings, Scope::All).unwrap();
        recheck.push(t0.elapsed());
        assert!(done.added.is_empty() && done.removed.is_empty());

        // Removing all of them: one batch of deletions by handle.
        let t0 = Instant::now();
        let mut fw = Firewall::open(&exec).unwrap();
        let done = fw.converge(&[], Scope::All).unwrap();
        remove.push(t0.elapsed());
        assert_eq!(done.removed.len(), OPENINGS as usize);
    }
    let mut process = Vec::new();
    let exe = std::env::current_exe().unwrap();
    for _ in 0..RUNS {
        reset();
        let t0 = Instant::now();
        let status = Command::new(&exe).arg("--child").status().unwrap();
        process.push(t0.elapsed());
        assert!(status.success());
        assert!(nft(&["list", "ruleset"], None) == engine_listing);
    }
    reset();
    let found_listing = nft(&["list", "ruleset"], None);

    let mut nft_f = Vec::new();
    let mut nft_listing = String::new();
    for _ in 0..RUNS {
        reset();
        let t0 = Instant::now();
        nft(&["-f", path.to_str().unwrap()], None);
        nft_f.push(t0.elapsed());
        nft_listing = nft(&["list", "ruleset"], None);
    }
    std::fs::remove_file(&path).ok();
    assert!(
        engine_listing == nft_listing,
        "both methods must give the same ruleset"
    );
    assert_eq!(
        engine_listing.matches("mesh-host:bench/").count(),
        OPENINGS as usize
    );
    assert_ne!(engine_listing, found_listing);

    println!(
        "{OPENINGS} incoming openings through a found hand-written inet input chain (policy drop), \
         one transaction; same final ruleset both ways"
    );
    stats("engine: open (detect the found firewall)", open);
    stats(
        "engine: converge (list marks, build, send, read ACKs)",
        converge,
    );
    stats("engine: open + converge (in process)", total);
    stats(
        "engine: whole process (spawn, open, converge, exit)",
        process,
    );
    stats("nft -f of the same 1,000 rules (whole process)", nft_f);
    stats("engine: open + converge again, nothing to change", recheck);
    stats("engine: open + converge to none (1,000 deletions)", remove);
}
