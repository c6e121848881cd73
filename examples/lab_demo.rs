//! The demo behind `lab/demo`: a predecessor's machine prepared in network namespaces (the lab
//! bed), adopted by mesh-host, its firewall shown, what is reachable from where probed, a module
//! taken, the flip previewed and made, probed again, the node returned to adopted, and everything
//! torn down; each step printed as an operator would read it. Only the built binary is driven.
//!
//! Usage (as root): `lab_demo PATH/TO/mesh-host [--kind nftables|iptables-nft|iptables-legacy]`.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use lab::addr::*;
use lab::{ports, Bed, FoundKind, Lab, Machine, Probe};

/// What the demo probes, and what each port is.
const PROBED: [(u16, &str); 5] = [
    (
        ports::SERVED,
        "the predecessor's service (published, admitted)",
    ),
    (ports::UNDECLARED, "a published port no rule mentions"),
    (ports::STORE, "the mesh's store"),
    (ports::BUS, "the mesh's bus"),
    (ports::REGISTRY_GIVEN, "the mesh's registry"),
];

struct Demo {
    bed: Bed,
    binary: PathBuf,
    failed: Vec<String>,
}

impl Demo {
    /// Shows `$ mesh-host ARGS` and what it printed, indented; returns its exit code.
    fn host(&mut self, args: &[&str]) -> Option<i32> {
        println!("\n  $ mesh-host {}", args.join(" "));
        match self.bed.mesh(&self.binary, args) {
            Ok(out) => {
                for line in out.stdout.lines().chain(out.stderr.lines()) {
                    println!("    {line}");
                }
                let code = out.status.code();
                if code != Some(0) {
                    println!(
                        "    (exit {})",
                        code.map_or("by a signal".into(), |c| c.to_string())
                    );
                }
                code
            }
            Err(e) => {
                println!("    could not run mesh-host: {e}");
                self.failed
                    .push(format!("mesh-host {}: {e}", args.join(" ")));
                None
            }
        }
    }

    /// Like [`Demo::host`], noting a failure when the exit code is not the one expected.
    fn expect(&mut self, args: &[&str], want: i32) -> bool {
        let got = self.host(args);
        if got != Some(want) {
            self.failed.push(format!(
                "mesh-host {} exited {got:?}, expected {want}",
                args.join(" ")
            ));
            return false;
        }
        true
    }

    /// The found firewall's boot unit as the stand-in for systemctl holds it.
    fn unit(&self) {
        let unit = self.bed.boot_unit();
        let state = match self.bed.units().enabled(unit) {
            Some(true) => "enabled",
            Some(false) => "disabled",
            None => "unknown",
        };
        println!(
            "\n  the found firewall's boot unit {unit}: {state} (systemd stands in as a stub here)"
        );
    }

    fn probes(&self, when: &str) {
        println!("\n  what is reachable {when} (probes are real TCP connections):");
        let net = &self.bed.net;
        let from: [(&Machine, &str, IpAddr); 2] = [
            (&net.outside, "outside", NODE_PUBLIC_V4.into()),
            (&net.peer, "private network", NODE_PRIVATE_V4.into()),
        ];
        for (port, what) in PROBED {
            let mut cells = Vec::new();
            for (machine, name, addr) in &from {
                let got = machine
                    .probe_tcp(*addr, port, Duration::from_millis(1500))
                    .map(|p| match p {
                        Probe::Reached => "reached".to_owned(),
                        other => format!("{other}"),
                    })
                    .unwrap_or_else(|e| format!("probe failed: {e}"));
                cells.push(format!("from {name}: {got:<10}"));
            }
            println!("    {port:>5}  {:<48} {}", what, cells.join("  "));
        }
    }
}

fn step(title: &str) {
    println!("\n== {title}");
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(binary) = args.next().map(PathBuf::from) else {
        eprintln!("usage: lab_demo PATH/TO/mesh-host [--kind KIND]");
        return ExitCode::from(2);
    };
    let mut kind = FoundKind::Nftables;
    while let Some(a) = args.next() {
        match (a.as_str(), args.next()) {
            ("--kind", Some(k)) => match FoundKind::from_name(&k) {
                Some(found) => kind = found,
                None => {
                    eprintln!("unknown kind {k:?}: nftables, iptables-nft or iptables-legacy");
                    return ExitCode::from(2);
                }
            },
            _ => {
                eprintln!("usage: lab_demo PATH/TO/mesh-host [--kind KIND]");
                return ExitCode::from(2);
            }
        }
    }
    let own_ruleset = own_namespace_ruleset();
    let (prefix, failed) = match run(&binary, kind) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("\nthe demo could not run: {e}");
            return ExitCode::FAILURE;
        }
    };

    step("torn down");
    let left: Vec<String> = std::fs::read_dir(lab::NETNS_DIR)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(&prefix))
        .collect();
    println!(
        "  namespaces of this demo left: {}",
        if left.is_empty() {
            "none".into()
        } else {
            left.join(", ")
        }
    );
    let same = own_namespace_ruleset() == own_ruleset;
    println!(
        "  this machine's own firewall: {}",
        if same {
            "untouched (its ruleset reads as before)"
        } else {
            "CHANGED"
        }
    );
    let mut failed = failed;
    if !left.is_empty() {
        failed.push(format!("namespaces left behind: {left:?}"));
    }
    if !same {
        failed.push("this machine's own ruleset changed".into());
    }
    if failed.is_empty() {
        println!("\nthe demo ran every step as described");
        ExitCode::SUCCESS
    } else {
        println!("\nthe demo did not go as described:");
        for f in &failed {
            println!("  - {f}");
        }
        ExitCode::FAILURE
    }
}

/// The machine's own ruleset as nft lists it (read only), to show the demo left it alone. Run
/// through the lab's runner, so the listing has a deadline like every other child.
fn own_namespace_ruleset() -> String {
    lab::run(std::process::Command::new("nft").args(["list", "ruleset"]))
        .map(|o| o.stdout)
        .unwrap_or_default()
}

/// Every step; returns the lab's prefix (to check nothing is left) and what did not go as
/// described. The lab and the bed are dropped, and so torn down, before it returns.
fn run(binary: &Path, kind: FoundKind) -> Result<(String, Vec<String>), lab::Error> {
    let lab = Lab::new()?;
    let prefix = lab.prefix().to_owned();
    step(&format!("a predecessor's machine, its firewall {kind}"));
    println!(
        "  three machines as network namespaces: the node ({NODE_PUBLIC_V4}, private {NODE_PRIVATE_V4} on {PRIVATE_IF}),\n  \
         a second machine on the private network ({PEER_PRIVATE_V4}) and one outside it ({OUTSIDE_PUBLIC_V4})."
    );
    let bed = Bed::prepare(&lab, kind)?;
    println!(
        "  on the node: a Docker engine of its own; its firewall from {} (incoming: ssh and {} only);\n  \
         containers `{}` on {}, `{}` on {}, `{}` holding the registry's port {};\n  \
         the file {} its control rewrites every 300 ms.",
        bed.found_files()
            .iter()
            .map(|p| p.strip_prefix(bed.root()).unwrap_or(p).display().to_string())
            .collect::<Vec<_>>()
            .join(" and "),
        ports::SERVED,
        lab::SERVICE_MODULE,
        ports::SERVED,
        lab::UNDECLARED_CONTAINER,
        ports::UNDECLARED,
        lab::OLD_REGISTRY,
        ports::REGISTRY,
        lab::HELD_FILE
    );
    let bundle = lab.dir().join("demo-bundle.json");
    let text = lab::stand_in_bundle(genesis::bundle::EMBEDDED)?;
    std::fs::write(&bundle, text)
        .map_err(|e| lab::Error::Bundle(format!("{}: {e}", bundle.display())))?;
    let mut demo = Demo {
        bed,
        binary: binary.to_owned(),
        failed: Vec::new(),
    };
    demo.probes("before the mesh");

    step("the operator stops the predecessor's control, then raises the node adopted");
    demo.bed.stop_stand_in();
    let bundle = bundle.to_str().unwrap_or_default().to_owned();
    let base = [
        "genesis",
        "--adopted",
        "--node",
        "demo-node",
        "--bundle",
        bundle.as_str(),
    ];
    demo.expect(&base, 3);
    println!("\n  the registry's port is held: genesis refused and changed nothing; another port is given.");
    let given = format!("registry={}", ports::REGISTRY_GIVEN);
    let mut raise = base.to_vec();
    raise.extend(["--ports", given.as_str()]);
    demo.expect(&raise, 0);

    step("the found firewall, the openings through it and the guard");
    demo.expect(&["firewall", "status"], 0);
    demo.probes("while adopted");

    step("the service's module is assigned: what it finds is held, not replaced");
    let assigned = assigned_declaration(&demo.bed);
    match assigned {
        Ok(file) => {
            demo.expect(&["apply", file.to_str().unwrap_or_default()], 0);
        }
        Err(e) => demo.failed.push(e),
    }

    step(&format!(
        "the operator takes the module `{}` (its data has moved)",
        lab::SERVICE_MODULE
    ));
    demo.expect(&["converge", "--preview"], 3);
    println!("\n  refused while the module holds its found container; taken, it replaces it:");
    demo.expect(&["take", lab::SERVICE_MODULE], 0);

    step("converging, previewed: what stays, what closes, what is taken, what is disabled");
    demo.expect(&["converge", "--preview"], 4);

    step("the flip");
    demo.expect(&["converge"], 0);
    demo.unit();
    demo.probes("converged");

    step("back to adopted: the found firewall enabled again, the derived filter gone");
    demo.expect(&["adopt"], 0);
    demo.unit();
    demo.probes("adopted again");
    demo.expect(&["briefing"], 0);

    let failed = std::mem::take(&mut demo.failed);
    drop(demo);
    drop(lab);
    Ok((prefix, failed))
}

/// The stored declaration with the bed's modules added, written beside the store.
fn assigned_declaration(bed: &Bed) -> Result<PathBuf, String> {
    let state = bed.path("var/lib/mesh-host/state.json");
    let text = std::fs::read(&state).map_err(|e| format!("the store {}: {e}", state.display()))?;
    let v: serde_json::Value =
        serde_json::from_slice(&text).map_err(|e| format!("the store: {e}"))?;
    let mut decl = v["declaration"].clone();
    decl["taken"] = serde_json::json!(["store", "broker", "registry"]);
    let Some(resources) = decl["resources"].as_array_mut() else {
        return Err("the stored declaration has no resources".into());
    };
    resources.extend(lab::module_resources());
    let file = bed.path("assigned.json");
    let bytes = serde_json::to_vec_pretty(&decl).map_err(|e| e.to_string())?;
    std::fs::write(&file, bytes).map_err(|e| format!("{}: {e}", file.display()))?;
    Ok(file)
}
