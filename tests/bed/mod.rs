//! ADR 0100's "How it is checked" as one suite: the eight checks, each run on the lab bed for every
//! found-firewall kind, driving only the built binary (`--root` into the bed's directory), with a
//! table of scenario × kind printed at the end. The suite fails if any cell fails; a bed that
//! cannot be prepared (a tool missing) fails every cell of its kind with the reason.
//!
//! The scenarios of one kind run in order on one bed, because they are one adoption's story
//! (genesis, the node adopted, its firewall reloaded, the machine rebooted, a module taken, the
//! flip and the return) and because a Docker engine takes tens of seconds to start on two cores:
//! one engine start per kind. A scenario that fails leaves the bed as it is, and the next one runs
//! on it and says what it finds.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use lab::addr::*;
use lab::{ports, Bed, FoundKind, Lab, Machine, Probe, Process, UdpEcho};
use serde_json::Value;

use crate::firewall_lab::{is_marked, without_marked};

mod converge;
mod scenarios;

const MESH: &str = env!("CARGO_BIN_EXE_mesh-host");
const NODE: &str = "lab-node";

/// Long enough for a real answer on a loaded two-core machine.
const ANSWER: Duration = Duration::from_secs(3);
/// How long a probe that must go unanswered waits; a lab veth answers in well under a millisecond.
const SILENCE: Duration = Duration::from_millis(1200);
/// How long the resident host may take to put the openings back after a reload or a start.
const REPAIR: Duration = Duration::from_secs(20);

/// The scenarios, numbered as in issue 13 and named as the ADR's bullets.
const SCENARIOS: [&str; 8] = [
    "1 genesis converged refuses, naming all",
    "2 genesis adopted: held port, given port",
    "3 nothing that serves changed",
    "4 the store unreachable from outside",
    "5 works through reload and reboot",
    "6 a predecessor still writing is caught",
    "7 assigning prepares, taking cuts over",
    "8 converge previews, flips, returns",
];

/// What one kind's run carries from scenario to scenario.
struct Ctx {
    bed: Bed,
    bundle: PathBuf,
    /// The held file's bytes once the predecessor's control was stopped, before anything else.
    held_before: Vec<u8>,
    /// The found firewall as the kernel held it before genesis, and its files' bytes.
    found_before: String,
    found_files_before: Vec<Vec<u8>>,
    /// The resident host, as its unit would run it, once genesis raised the node.
    resident: Option<Process>,
    /// A UDP echo on the hub's port, standing in for the private network's endpoint.
    hub: Option<UdpEcho>,
    /// The first half of scenario 8 (the flip refused while the service's module holds its found
    /// container), run before scenario 7 takes that module.
    refused_while_held: Option<Result<(), String>>,
}

impl Ctx {
    /// Runs mesh-host inside the node; an error running it at all is a failure of the scenario.
    fn mesh(&self, args: &[&str]) -> lab::Output {
        self.bed
            .mesh(MESH.as_ref(), args)
            .unwrap_or_else(|e| panic!("running mesh-host {args:?} in the node: {e}"))
    }

    /// Like [`Ctx::mesh`] for the converge commands (issue 11): a binary that does not know the
    /// command fails the scenario saying so.
    fn mesh_converge(&self, args: &[&str]) -> lab::Output {
        let out = self.mesh(args);
        if out.status.code() == Some(2)
            && (out.stderr.contains("unrecognized subcommand")
                || out.stderr.contains("unexpected argument"))
        {
            panic!(
                "converge not on main yet: mesh-host {} is unknown to this binary",
                args[0]
            );
        }
        out
    }

    fn json(&self, args: &[&str]) -> Value {
        let out = self.mesh(args);
        assert!(out.success(), "mesh-host {args:?} failed:\n{}", shown(&out));
        json_of(&out)
    }

    fn node(&self) -> &Machine {
        &self.bed.net.node
    }

    /// Starts the resident host if it does not run (legacy layers re-checked every 500 ms, as
    /// they send no events).
    fn ensure_resident(&mut self) {
        if self.resident.as_mut().is_some_and(Process::is_running) {
            return;
        }
        let p = self
            .bed
            .spawn_mesh(
                MESH.as_ref(),
                &["run", "--legacy-period", "500"],
                &[("RUST_LOG", "info")],
            )
            .unwrap_or_else(|e| panic!("starting mesh-host run in the node: {e}"));
        self.resident = Some(p);
    }

    /// The last lines the resident host logged, to show beside a failure.
    fn resident_log(&self) -> String {
        let Some(p) = &self.resident else {
            return "(the resident host is not running)".to_owned();
        };
        let log = p.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(25)..].join("\n")
    }

    /// Stops the resident host as its unit does (SIGTERM, then it finishes what it does).
    fn stop_resident(&mut self) {
        if let Some(mut p) = self.resident.take() {
            p.terminate(Duration::from_secs(30));
        }
    }

    /// Waits until `firewall status` shows every declared opening in force in every layer that
    /// needs it, and returns the status; fails naming what is still missing.
    fn openings_in_force(&self, why: &str) -> Value {
        let deadline = Instant::now() + REPAIR;
        loop {
            let status = self.json(&["firewall", "status", "--json"]);
            let missing = not_in_force(&status);
            if missing.is_empty() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "{why}: openings not in force after {REPAIR:?}: {missing:?}\n{status:#}"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

/// Each `opening@layer=state` whose state is not in force (`present`) where a rule is needed.
fn not_in_force(status: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for o in status["openings"].as_array().into_iter().flatten() {
        for l in o["layers"].as_array().into_iter().flatten() {
            let state = l["state"].as_str().unwrap_or("?");
            if state != "present" && state != "not-needed" {
                out.push(format!(
                    "{}@{}={state}",
                    o["id"].as_str().unwrap_or("?"),
                    l["layer"].as_str().unwrap_or("?")
                ));
            }
        }
    }
    out
}

fn shown(out: &lab::Output) -> String {
    format!(
        "exit {}\n--- stdout\n{}\n--- stderr\n{}",
        out.status, out.stdout, out.stderr
    )
}

fn json_of(out: &lab::Output) -> Value {
    if let Err(e) = serde_json::from_str::<Value>(&out.stdout) {
        panic!("mesh-host printed no JSON ({e}):\n{}", shown(out));
    }
    crate::util::contract(&out.stdout)
}

fn outcome(report: &Value, id: &str) -> String {
    report["entries"]
        .as_array()
        .unwrap_or_else(|| panic!("a report has entries: {report:#}"))
        .iter()
        .find(|e| e["id"] == id)
        .unwrap_or_else(|| panic!("no entry for {id}: {report:#}"))["outcome"]
        .as_str()
        .unwrap_or("?")
        .to_string()
}

fn assert_nothing_failed(report: &Value) {
    let failed: Vec<&Value> = report["entries"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["outcome"] == "failed")
        .collect();
    assert!(failed.is_empty(), "failed entries: {failed:#?}");
}

fn probe(from: &Machine, addr: IpAddr, port: u16, wait: Duration) -> Probe {
    from.probe_tcp(addr, port, wait)
        .unwrap_or_else(|e| panic!("probe {} -> [{addr}]:{port}: {e}", from.name()))
}

/// Insists `from` reaches `port` on each address (waiting for a container that just started).
fn reached(bed: &Bed, from: &Machine, addrs: &[IpAddr], port: u16, why: &str) {
    for addr in addrs {
        if let Err(e) = bed.wait_reached(from, *addr, port) {
            panic!("{why}: {e}");
        }
    }
}

/// Insists `from` does not reach `port` on any of the addresses.
fn not_reached(from: &Machine, addrs: &[IpAddr], port: u16, why: &str) {
    for addr in addrs {
        let got = probe(from, *addr, port, SILENCE);
        assert_ne!(
            got,
            Probe::Reached,
            "{why}: {} -> [{addr}]:{port} was reached",
            from.name()
        );
    }
}

fn public() -> [IpAddr; 2] {
    [NODE_PUBLIC_V4.into(), NODE_PUBLIC_V6.into()]
}

/// The node's nf_tables tables, `family name` each.
fn nft_tables(node: &Machine) -> BTreeSet<String> {
    let out = node
        .run_ok(&["nft", "list", "tables"])
        .unwrap_or_else(|e| panic!("nft list tables in the node: {e}"));
    out.stdout
        .lines()
        .filter_map(|l| l.strip_prefix("table "))
        .map(str::to_owned)
        .collect()
}

/// The message a scenario's panic carried, first lines only for the table.
fn reason(payload: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panicked with a value that is not a message".to_owned()
    }
}

fn attempt(f: impl FnOnce()) -> Result<(), String> {
    catch_unwind(AssertUnwindSafe(f)).map_err(reason)
}

/// Runs every scenario on one kind's bed and returns each one's result, in order.
fn run_kind(kind: FoundKind) -> Vec<Result<(), String>> {
    let lab = match Lab::new() {
        Ok(lab) => lab,
        Err(e) => return vec![Err(format!("no lab (the lab needs root): {e}")); 8],
    };
    let bed = match Bed::prepare(&lab, kind) {
        Ok(bed) => bed,
        Err(e) => return vec![Err(format!("the bed could not be prepared: {e}")); 8],
    };
    let bundle = lab.dir().join("lab-bundle.json");
    let text = lab::stand_in_bundle(genesis::bundle::EMBEDDED).expect("the embedded bundle");
    std::fs::write(&bundle, text).expect("writing the lab bundle");

    // The operator stops the predecessor's control before adopting (ADR 0100); what it last wrote
    // is what the node holds.
    bed.stop_stand_in();
    let held_before = std::fs::read(bed.path(lab::HELD_FILE)).expect("the held file");
    let found_before = bed.found_rules().expect("reading the found firewall");
    let found_files_before = bed.found_file_bytes().expect("the found firewall's files");
    let mut cx = Ctx {
        bed,
        bundle,
        held_before,
        found_before,
        found_files_before,
        resident: None,
        hub: None,
        refused_while_held: None,
    };

    let mut results = Vec::new();
    results.push(attempt(|| scenarios::genesis_converged_refuses(&cx)));
    results.push(attempt(|| scenarios::genesis_adopted(&mut cx)));
    results.push(attempt(|| scenarios::nothing_that_serves_changed(&cx)));
    results.push(attempt(|| {
        scenarios::store_unreachable_from_outside(&mut cx)
    }));
    results.push(attempt(|| scenarios::through_reload_and_reboot(&mut cx)));
    results.push(attempt(|| scenarios::predecessor_still_writing(&cx)));
    let refused = attempt(|| converge::refused_while_held(&cx));
    cx.refused_while_held = Some(refused);
    results.push(attempt(|| {
        converge::assigning_prepares_taking_cuts_over(&cx)
    }));
    results.push(attempt(|| converge::previews_flips_returns(&mut cx)));
    cx.stop_resident();
    drop(cx);
    drop(lab);
    results
}

/// The first line of a reason, cut for the table.
fn short(reason: &str) -> String {
    let line = reason.lines().next().unwrap_or("");
    let mut s: String = line.chars().take(90).collect();
    if s.len() < line.len() {
        s.push('…');
    }
    s
}

/// A failure's first 25 lines, each cut at 300 characters: enough to say why, in the suite's
/// summary, however long the report it printed.
fn first_lines(reason: &str) -> String {
    let mut out = String::new();
    for line in reason.lines().take(25) {
        let cut: String = line.chars().take(300).collect();
        out.push_str("   ");
        out.push_str(&cut);
        out.push('\n');
    }
    out
}

#[test]
fn adr_0100_how_it_is_checked_on_the_lab_bed_for_every_found_kind() {
    let started = Instant::now();
    let mut columns = Vec::new();
    // `MESH_BED_KINDS=firewalld,ufw` runs those kinds alone, to look at one closely; the suite
    // as CI runs it (the variable unset) takes every kind.
    let only = std::env::var("MESH_BED_KINDS").ok();
    for kind in FoundKind::ALL {
        if let Some(only) = &only {
            if !only.split(',').any(|k| k == kind.name()) {
                continue;
            }
        }
        let t = Instant::now();
        let results = run_kind(kind);
        columns.push((kind, results, t.elapsed()));
    }

    let mut table = String::from("\nADR 0100 on the lab bed (scenario × found firewall)\n\n");
    let _ = write!(table, "{:<44}", "scenario");
    for (kind, _, _) in &columns {
        let _ = write!(table, " | {:<16}", kind.name());
    }
    table.push('\n');
    let mut failures = String::new();
    let mut reasons = String::new();
    for (i, title) in SCENARIOS.iter().enumerate() {
        let _ = write!(table, "{title:<44}");
        for (kind, results, _) in &columns {
            let cell = match &results[i] {
                Ok(()) => "pass".to_owned(),
                Err(why) => {
                    let _ = writeln!(failures, "- {title} / {kind}: {}", short(why));
                    let _ = writeln!(reasons, "-- {title} / {kind}:\n{}", first_lines(why));
                    "FAIL".to_owned()
                }
            };
            let _ = write!(table, " | {cell:<16}");
        }
        table.push('\n');
    }
    let _ = write!(table, "{:<44}", "wall time");
    for (_, _, took) in &columns {
        let _ = write!(table, " | {:<16}", format!("{:.0} s", took.as_secs_f64()));
    }
    let _ = writeln!(table, "\ntotal: {:.0} s", started.elapsed().as_secs_f64());
    if !failures.is_empty() {
        let _ = write!(
            table,
            "\nfailures:\n{failures}\nwhy, each failure's first lines:\n{reasons}"
        );
    }
    // Straight to the standard error's descriptor, past the test harness's capture, so the table
    // is shown whether the suite passes or not.
    let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), table.as_bytes());
    assert!(failures.is_empty(), "{table}");
}
