//! Lab tests of the firewall engine through the built binary, run inside a lab node's network
//! namespace as an operator would: found rulesets of every kind, openings probed from another
//! machine, published container ports behind a found forward chain, the guard, reloads of the
//! found firewall, and listings of real rulesets. Every test builds its own namespaces; nothing
//! touches the machine's own firewall. A missing prerequisite fails the test, never skips it.

use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use firewall::NfSocket;
use lab::addr::*;
use lab::{Adoption, Lab, Machine, Probe};
use serde_json::{json, Value};

mod bridges_live;
mod churn;
mod confirm;
mod converge;
mod converge_refused;
mod distro_files;
mod docker;
mod firewalld;
mod firewalld_flip;
mod firewalld_strict;
mod forwarded;
mod found;
mod guard;
mod guard_bpf;
mod guard_container;
mod guard_dnat;
mod guard_relay;
mod guard_routes;
mod guard_saved;
mod incoming;
mod keeps_word;
mod legacy_unchanged;
mod listing;
mod own_cells;
mod reload;
mod resident;
mod storms;
mod ufw;
mod ufw_docker;
mod ufw_hang;

const MESH: &str = env!("CARGO_BIN_EXE_mesh-host");

/// Long enough for a real answer on a loaded two-core machine.
const ANSWER: Duration = Duration::from_secs(3);
/// How long a probe that must go unanswered waits; a lab veth answers in well under a millisecond.
const SILENCE: Duration = Duration::from_millis(1200);

/// The exit code of an apply that went to its end while its briefing says `failed`.
const NOT_IN_FORCE: i32 = 5;

/// The foundation's ports in the node's settings; the guard refuses these two.
const STORE: u16 = 5432;
const BROKER_MANAGEMENT: u16 = 15672;

/// The port the found firewall serves, ssh's, the port an opening declares, and one nothing opens.
const SERVED: u16 = 8080;
const SSH: u16 = 22;
const OPENED: u16 = 9000;
const CLOSED: u16 = 9001;

fn new_lab() -> Lab {
    Lab::new().expect("the lab needs root, iproute2 and nsenter; it never skips")
}

fn adoption(lab: &Lab) -> Adoption {
    Adoption::build(lab).expect("building the adoption topology")
}

fn node_public() -> [IpAddr; 2] {
    [NODE_PUBLIC_V4.into(), NODE_PUBLIC_V6.into()]
}

fn node_private() -> [IpAddr; 2] {
    [NODE_PRIVATE_V4.into(), NODE_PRIVATE_V6.into()]
}

/// Probes `port` on each address from `from` and insists on `want`. A probe that must go
/// unanswered waits [`SILENCE`]; one that must be answered waits [`ANSWER`].
fn expect(from: &Machine, addrs: &[IpAddr], port: u16, want: Probe, why: &str) {
    let wait = if want == Probe::TimedOut {
        SILENCE
    } else {
        ANSWER
    };
    for addr in addrs {
        let got = from
            .probe_tcp(*addr, port, wait)
            .unwrap_or_else(|e| panic!("probe {} -> [{addr}]:{port}: {e}", from.name()));
        assert_eq!(
            got,
            want,
            "{why}: {} -> [{addr}]:{port} was {got}, expected {want}",
            from.name()
        );
    }
}

fn run_ok(m: &Machine, argv: &[&str]) -> String {
    m.run_ok(argv)
        .unwrap_or_else(|e| panic!("in {}: {e}", m.name()))
        .stdout
}

fn load_nft(m: &Machine, dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    run_ok(m, &["nft", "-f", path.to_str().unwrap()]);
    path
}

fn run_all(m: &Machine, commands: &[Vec<&str>]) {
    for argv in commands {
        run_ok(m, argv);
    }
}

/// The iptables commands of a found input chain with policy drop that serves ssh and the served
/// port, for `program` (`iptables-nft`, `ip6tables-legacy`, ...), in its filter table.
fn xt_input_drop(program: &str) -> Vec<Vec<&str>> {
    xt_input_drop_in(program, "filter")
}

/// Likewise in `table` (`filter`, `mangle`, `security`). Every command waits for the xtables
/// lock (`-w`), so tests running side by side never fail on it.
fn xt_input_drop_in<'a>(program: &'a str, table: &'a str) -> Vec<Vec<&'a str>> {
    let mut rules: Vec<Vec<&str>> = vec![
        vec!["-P", "INPUT", "DROP"],
        vec![
            "-A",
            "INPUT",
            "-m",
            "conntrack",
            "--ctstate",
            "RELATED,ESTABLISHED",
            "-j",
            "ACCEPT",
        ],
        vec!["-A", "INPUT", "-i", "lo", "-j", "ACCEPT"],
        vec![
            "-A", "INPUT", "-p", "tcp", "-m", "tcp", "--dport", "22", "-j", "ACCEPT",
        ],
        vec![
            "-A", "INPUT", "-p", "tcp", "-m", "tcp", "--dport", "8080", "-j", "ACCEPT",
        ],
    ];
    if program.starts_with("ip6") {
        // Neighbour discovery, without which no IPv6 packet arrives at all.
        rules.push(vec!["-A", "INPUT", "-p", "ipv6-icmp", "-j", "ACCEPT"]);
    }
    rules
        .into_iter()
        .map(|rule| {
            let mut argv = vec![program, "-w", "-t", table];
            argv.extend(rule);
            argv
        })
        .collect()
}

/// A hand-written `/etc/nftables.conf`: an inet input chain with policy drop serving ssh and the
/// served port. `flush ruleset` at its top, as such files have, so loading it again is a reload.
const INET_INPUT_DROP: &str = "flush ruleset
table inet filter {
	chain input {
		type filter hook input priority filter; policy drop;
		ct state established,related accept
		iifname \"lo\" accept
		tcp dport { 22, 8080 } accept
		meta l4proto ipv6-icmp accept
	}
	chain output {
		type filter hook output priority filter; policy accept;
	}
}
";

/// The state the evaluator's verdict gives an opening in the status: `present`, `not-admitted`,
/// `refused` or `doubtful`.
fn status_verdict(status: &Value, id: &str) -> String {
    let o = status["openings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["id"] == id)
        .unwrap_or_else(|| panic!("no opening {id} in {status:#}"));
    o["verdict"]["state"]
        .as_str()
        .unwrap_or_else(|| panic!("no verdict for {id} in {status:#}"))
        .to_string()
}

// ---------------------------------------------------------------------------------------------
// The host, run inside the node's namespace.

/// mesh-host on the lab node: the built binary run through `nsenter --net` with its own `--root`.
struct Host {
    node: Machine,
    dir: tempfile::TempDir,
    /// What runs in front of the binary (`env DBUS_SYSTEM_BUS_ADDRESS=…`, `nsenter --mount=…`),
    /// for a found firewall on a private bus or with its own files.
    wrap: Vec<String>,
}

impl Host {
    fn new(node: &Machine) -> Host {
        let dir = tempfile::tempdir().expect("temporary directory");
        std::fs::create_dir(dir.path().join("root")).unwrap();
        Host {
            node: node.clone(),
            dir,
            wrap: Vec::new(),
        }
    }

    /// The host run behind `wrap` (see [`Host::wrap`]).
    fn wrapped(node: &Machine, wrap: Vec<String>) -> Host {
        let mut host = Host::new(node);
        host.wrap = wrap;
        host
    }

    fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    fn run(&self, args: &[&str]) -> lab::Output {
        let root = self.root();
        let mut argv: Vec<&str> = self.wrap.iter().map(String::as_str).collect();
        argv.extend([MESH, "--root", root.to_str().unwrap()]);
        argv.extend_from_slice(args);
        self.node
            .run(&argv)
            .unwrap_or_else(|e| panic!("running mesh-host in {}: {e}", self.node.name()))
    }

    fn json(&self, args: &[&str]) -> Value {
        let out = self.run(args);
        assert!(
            out.success(),
            "mesh-host {args:?} failed ({}):\n{}\n{}",
            out.status,
            out.stdout,
            out.stderr
        );
        if let Err(e) = serde_json::from_str::<Value>(&out.stdout) {
            panic!("mesh-host {args:?} printed no JSON ({e}):\n{}", out.stdout);
        }
        crate::util::contract(&out.stdout)
    }

    /// Applies a declaration and returns the report; the apply must succeed with nothing failed.
    fn apply(&self, decl: &Value) -> Value {
        let file = self.dir.path().join("declaration.json");
        std::fs::write(&file, serde_json::to_vec_pretty(decl).unwrap()).unwrap();
        let report = self.json(&["apply", file.to_str().unwrap(), "--json"]);
        assert_nothing_failed(&report);
        report
    }

    /// Applies a declaration whose briefing must say `failed` though nothing stopped the apply
    /// (an opening a layer still refuses, the private network not as declared): it must exit
    /// with the code for that (5), and its report is returned.
    fn apply_not_in_force(&self, decl: &Value) -> Value {
        let file = self.dir.path().join("declaration.json");
        std::fs::write(&file, serde_json::to_vec_pretty(decl).unwrap()).unwrap();
        let args = ["apply", file.to_str().unwrap(), "--json"];
        let out = self.run(&args);
        assert_eq!(
            out.status.code(),
            Some(NOT_IN_FORCE),
            "mesh-host {args:?} exited {}, not {NOT_IN_FORCE}:\n{}\n{}",
            out.status,
            out.stdout,
            out.stderr
        );
        let report = crate::util::contract(&out.stdout);
        assert_nothing_failed(&report);
        assert_eq!(report["outcome"], "failed", "{report:#}");
        report
    }

    /// Applies with the Docker engine at `docker_host`, as an operator's shell with `DOCKER_HOST`
    /// set, so the host asks that engine for its bridges.
    fn apply_with_docker(&self, docker_host: &str, decl: &Value) -> Value {
        let file = self.dir.path().join("declaration.json");
        std::fs::write(&file, serde_json::to_vec_pretty(decl).unwrap()).unwrap();
        let root = self.root();
        let env = format!("DOCKER_HOST={docker_host}");
        let report = {
            let argv = [
                "env",
                &env,
                MESH,
                "--root",
                root.to_str().unwrap(),
                "apply",
                file.to_str().unwrap(),
                "--json",
            ];
            let out = self.node.run(&argv).expect("running mesh-host");
            assert!(
                out.success(),
                "apply failed ({}):\n{}\n{}",
                out.status,
                out.stdout,
                out.stderr
            );
            serde_json::from_str::<Value>(&out.stdout).expect("a JSON report")
        };
        assert_nothing_failed(&report);
        report
    }

    fn reconcile(&self) -> Value {
        let report = self.json(&["reconcile", "--json"]);
        assert_nothing_failed(&report);
        report
    }

    /// A reconcile whose briefing says `failed` though nothing stopped it: exit 5.
    fn reconcile_not_in_force(&self) -> Value {
        let out = self.run(&["reconcile", "--json"]);
        assert_eq!(
            out.status.code(),
            Some(NOT_IN_FORCE),
            "reconcile exited {}, not {NOT_IN_FORCE}:\n{}\n{}",
            out.status,
            out.stdout,
            out.stderr
        );
        let report = crate::util::contract(&out.stdout);
        assert_nothing_failed(&report);
        assert_eq!(report["outcome"], "failed", "{report:#}");
        report
    }

    fn status(&self) -> Value {
        self.json(&["firewall", "status", "--json"])
    }
}

fn assert_nothing_failed(report: &Value) {
    let entries = report["entries"].as_array().expect("a report has entries");
    assert!(
        entries.iter().all(|e| e["outcome"] != "failed"),
        "{report:#}"
    );
}

fn outcome(report: &Value, id: &str) -> String {
    report["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["id"] == id)
        .unwrap_or_else(|| panic!("no entry for {id} in {report:#}"))["outcome"]
        .as_str()
        .unwrap()
        .to_string()
}

/// An adopted declaration with the node's settings (so the guard is ensured) and `resources`.
fn declaration(resources: &[Value]) -> Value {
    json!({
        "version": 1,
        "node": "lab-node",
        "mode": "adopted",
        "taken": [],
        "settings": {
            "ports": {
                "store": STORE,
                "bus": 5672,
                "broker_management": BROKER_MANAGEMENT,
                "registry": 5000,
                "hub": 51820
            },
            "private_network": {
                "interface": PRIVATE_IF,
                "range": format!("{PRIVATE_V4_NET}/{PRIVATE_V4_PREFIX}"),
                "range_v6": format!("{PRIVATE_V6_NET}/{PRIVATE_V6_PREFIX}")
            }
        },
        "resources": resources,
    })
}

fn opening(id: &str, port: u16, path: &str) -> Value {
    json!({"id": id, "type": "opening", "port": port, "proto": "tcp", "from": "anywhere", "path": path})
}

/// The layers of a status with their backend, path and whether they can drop, sorted.
fn layers(status: &Value) -> Vec<String> {
    let mut out: Vec<String> = status["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            format!(
                "{} {} {}",
                l["layer"].as_str().unwrap(),
                l["path"].as_str().unwrap(),
                if l["can_drop"] == true {
                    "can-drop"
                } else {
                    "passes"
                }
            )
        })
        .collect();
    out.sort();
    out
}

/// Where the status says an opening needs a rule, each `layer=STATE` (`present`, `missing`,
/// `refused`, `unwritable`, `doubtful`); layers that need no rule for it are left out.
fn presence(status: &Value, id: &str) -> Vec<String> {
    let o = status["openings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["id"] == id)
        .unwrap_or_else(|| panic!("no opening {id} in {status:#}"));
    let mut out: Vec<String> = o["layers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["state"] != "not-needed")
        .map(|l| {
            format!(
                "{}={}",
                l["layer"].as_str().unwrap(),
                l["state"].as_str().unwrap()
            )
        })
        .collect();
    out.sort();
    out
}

// ---------------------------------------------------------------------------------------------
// Reading rulesets back as text.

/// One way of reading the found firewall back as text.
#[derive(Debug, Clone, Copy)]
enum View {
    /// `nft list ruleset`, counters and the mesh's own table left out.
    Nft,
    /// `nft list table FAMILY NAME`, likewise: one table where others hold rules nft cannot show
    /// the mark of.
    NftTable(&'static str, &'static str),
    /// An `*-save` program (`iptables-legacy-save`, `ip6tables-nft-save`, ...), comments and
    /// counters left out. It must succeed and never say a table is incompatible.
    Save(&'static str),
}

impl View {
    fn read(self, m: &Machine) -> String {
        match self {
            View::Nft => nft_text(&run_ok(m, &["nft", "list", "ruleset"])),
            View::NftTable(family, name) => {
                nft_text(&run_ok(m, &["nft", "list", "table", family, name]))
            }
            View::Save(program) => {
                let out = m.run(&[program]).unwrap();
                assert!(
                    out.success()
                        && !out.stderr.contains("incompatible")
                        && !out.stdout.contains("incompatible"),
                    "{program} in {} must list every table: {}\n{}\n{}",
                    m.name(),
                    out.status,
                    out.stdout,
                    out.stderr
                );
                save_text(&out.stdout)
            }
        }
    }
}

/// `nft list ruleset` without counters' values and without the mesh's own table (the guard),
/// whitespace within a line normalised.
fn nft_text(listing: &str) -> String {
    let mut out = String::new();
    let mut in_mesh_table = false;
    for line in listing.lines() {
        if line.starts_with("table inet mesh_host {") {
            in_mesh_table = true;
            continue;
        }
        if in_mesh_table {
            in_mesh_table = line != "}";
            continue;
        }
        let mut words = line.split_whitespace().peekable();
        let mut kept: Vec<&str> = Vec::new();
        while let Some(w) = words.next() {
            kept.push(w);
            if w == "counter" && words.peek() == Some(&"packets") {
                // "counter packets N bytes M" -> "counter"
                for _ in 0..4 {
                    words.next();
                }
            }
        }
        if !kept.is_empty() {
            let _ = writeln!(out, "{}", kept.join(" "));
        }
    }
    out
}

/// `iptables-save` output without comment lines and without the `[packets:bytes]` counters.
fn save_text(listing: &str) -> String {
    let mut out = String::new();
    for line in listing.lines().filter(|l| !l.starts_with('#')) {
        let kept: Vec<&str> = line
            .split_whitespace()
            .filter(|w| !(w.starts_with('[') && w.ends_with(']') && w.contains(':')))
            .collect();
        let _ = writeln!(out, "{}", kept.join(" "));
    }
    out
}

/// Whether a listed rule carries the mesh's mark (the bed's suite uses it too).
pub(crate) fn is_marked(line: &str) -> bool {
    line.contains("mesh-host:")
}

/// `text` without the mesh's marked lines.
pub(crate) fn without_marked(text: &str) -> String {
    text.lines()
        .filter(|l| !is_marked(l))
        .map(|l| format!("{l}\n"))
        .collect()
}

fn marked_lines(text: &str) -> Vec<&str> {
    text.lines().filter(|l| is_marked(l)).collect()
}
