//! A release against the real RabbitMQ and the controller's stand-in: the controller's final
//! declaration names nothing and says so; the node removes what it created, leaves what it held
//! and the found firewall as they are, takes the guard's two layers and the mesh's openings
//! away, sends its report as the last thing it sends, drops its key and its link, and runs on,
//! hosted, until a second `enrol` links it again.

use super::{bed, bin, root};
use lab::addr::*;
use lab::{Adoption, Machine, Probe};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);
const STORE: u16 = 5432;
const BROKER_MANAGEMENT: u16 = 15672;
/// A port the found firewall drops, which the declaration opens.
const OPENED: u16 = 9000;

/// The found firewall: it refuses by policy what it does not accept, [`OPENED`] among them, and
/// accepts the store's port (which the guard refuses).
const FOUND: &str = "table inet found {\n  chain input {\n    type filter hook input priority 0; policy drop;\n    ct state established,related accept\n    iif lo accept\n    tcp dport 5432 accept\n  }\n}\n";

/// A bpffs at `ROOT/sys/fs/bpf`, as on a node, so the guard's BPF layer is pinned; unmounted on
/// drop.
struct Bpffs(PathBuf);

impl Bpffs {
    fn mount(root: &Path) -> Bpffs {
        let at = root.join("sys/fs/bpf");
        std::fs::create_dir_all(&at).unwrap();
        let out = std::process::Command::new("mount")
            .args(["-t", "bpf", "bpf"])
            .arg(&at)
            .output()
            .expect("mount must exist");
        assert!(out.status.success(), "mount -t bpf: {out:?}");
        Bpffs(at)
    }

    /// The guard's pinned links (the BPF layer), by name.
    fn pinned(&self) -> Vec<String> {
        std::fs::read_dir(self.0.join("mesh-host"))
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for Bpffs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .output();
    }
}

fn declaration(node: &str) -> Value {
    json!({
        "version": 1, "node": node, "mode": "adopted", "taken": [],
        "settings": {
            "ports": {"store": STORE, "bus": 5672, "broker_management": BROKER_MANAGEMENT,
                      "registry": 5000, "hub": 51820},
            "private_network": {"interface": PRIVATE_IF,
                                "range": format!("{PRIVATE_V4_NET}/{PRIVATE_V4_PREFIX}")}
        },
        "resources": [
            {"id": "motd", "type": "file", "path": "/etc/motd", "content": "made by the mesh\n", "mode": "0644"},
            {"id": "app/conf", "module": "app", "type": "file", "path": "/etc/app.conf",
             "content": "the mesh's\n", "mode": "0644"},
            {"id": "app/port", "module": "app", "type": "opening", "port": OPENED, "proto": "tcp",
             "from": "anywhere", "path": "incoming"}
        ]
    })
}

fn mesh(node: &Machine, root: &Path, args: &[&str]) -> lab::Output {
    let mut argv = vec![bin(), "--root".into(), root.display().to_string()];
    argv.extend(args.iter().map(|a| a.to_string()));
    node.run_timeout(&argv, Duration::from_secs(120))
        .expect("running mesh-host")
}

fn probe(from: &Machine, port: u16, want: Probe, why: &str) {
    let wait = if want == Probe::TimedOut {
        Duration::from_millis(1200)
    } else {
        Duration::from_secs(3)
    };
    let addr = NODE_PUBLIC_V4.into();
    let got = from.probe_tcp(addr, port, wait).expect("probe");
    assert_eq!(
        got, want,
        "{why}: [{addr}]:{port} was {got}, expected {want}"
    );
}

fn found_ruleset(node: &Machine) -> String {
    node.run_ok(&["nft", "list", "table", "inet", "found"])
        .expect("the found firewall is listed")
        .stdout
}

fn mesh_table(node: &Machine) -> bool {
    node.run(&["nft", "list", "table", "inet", "mesh_host"])
        .is_ok_and(|o| o.success())
}

#[test]
fn a_release_removes_what_the_node_made_drops_its_identity_and_a_second_enrol_works() {
    let node_name = "released";
    let bed = bed();
    let lab = lab::Lab::new().expect("the lab needs root; it never skips");
    let net = Adoption::build(&lab).expect("the adoption topology");
    let node = &net.node;
    let relay = lab::Relay::start(node, bed.rabbit.addr().parse().unwrap()).expect("a relay");
    let mut ctl =
        lab::Controller::connect_to(&bed.rabbit, vec![relay.addr()]).expect("the controller");

    // The machine as found: its firewall, a file of its own, services listening.
    let dir = tempfile::tempdir().unwrap();
    let found = dir.path().join("found.nft");
    std::fs::write(&found, FOUND).unwrap();
    node.run_ok(&["nft", "-f", found.to_str().unwrap()])
        .expect("loading the found firewall");
    let found_before = found_ruleset(node);
    let _listeners: Vec<_> = [STORE, OPENED]
        .iter()
        .map(|p| node.listen_tcp(*p).expect("a listener on the node"))
        .collect();
    let (_d, r) = root();
    std::fs::create_dir_all(r.join("etc")).unwrap();
    std::fs::write(r.join("etc/app.conf"), "the operator's\n").unwrap();
    let bpffs = Bpffs::mount(&r);
    probe(&net.outside, STORE, Probe::Reached, "no guard yet");
    probe(
        &net.outside,
        OPENED,
        Probe::TimedOut,
        "the found firewall drops it",
    );

    // Enrolled, running, declared.
    let issued = ctl.issue(node_name, Duration::from_secs(600)).unwrap();
    let out = mesh(node, &r, &["enrol", "--token", &issued.text]);
    assert!(out.success(), "enrol: {}\n{}", out.stdout, out.stderr);
    ctl.take_enrolments(Duration::from_secs(20)).unwrap();
    let mut host = node
        .spawn_env(
            &[
                bin().as_str(),
                "--root",
                r.to_str().unwrap(),
                "run",
                "--heartbeat",
                "1",
                "--legacy-period",
                "0",
            ],
            &[("RUST_LOG".into(), "info".into())],
        )
        .expect("mesh-host run");
    ctl.wait_for(node_name, "heartbeat", WAIT, |_| true)
        .expect("linked");
    ctl.declare(
        node_name,
        1,
        Duration::from_secs(300),
        declaration(node_name),
    )
    .unwrap();
    let first = ctl
        .wait_for(node_name, "report", WAIT, |p| p["version"] == 1)
        .expect("the report of version 1")
        .payload;
    assert_eq!(first["briefing"]["outcome"], "kept", "{first:#}");
    assert_eq!(
        std::fs::read_to_string(r.join("etc/motd")).unwrap(),
        "made by the mesh\n"
    );
    assert_eq!(
        std::fs::read_to_string(r.join("etc/app.conf")).unwrap(),
        "the operator's\n",
        "a found file is held"
    );
    assert!(mesh_table(node), "the guard's table is in force");
    assert!(
        !bpffs.pinned().is_empty(),
        "the guard's BPF layer is pinned"
    );
    probe(
        &net.outside,
        STORE,
        Probe::TimedOut,
        "the guard refuses the store",
    );
    probe(
        &net.outside,
        OPENED,
        Probe::Reached,
        "the opening admits it",
    );

    // The release.
    ctl.release(node_name, 2, Duration::from_secs(300)).unwrap();
    let last = ctl
        .wait_for(node_name, "report", WAIT, |p| p["version"] == 2)
        .unwrap_or_else(|| panic!("no report of the release:\n{}", host.log()))
        .payload;
    assert_eq!(
        last["release"]["released"],
        true,
        "{last:#}\n{}",
        host.log()
    );
    assert_eq!(last["owned"], json!([]), "{last:#}");
    let removed = last["report"]["guard_removed"].to_string();
    assert!(
        removed.contains("BPF layer detached") && removed.contains("table inet mesh_host removed"),
        "{last:#}"
    );
    // The report was the last thing sent: no heartbeat follows it (they came every second).
    let mut after = Vec::new();
    while let Some(u) = ctl.next_upward(Duration::from_secs(4)) {
        if u.node == node_name {
            after.push(u.kind);
        }
    }
    assert!(after.is_empty(), "sent after the release: {after:?}");

    // The machine as the asymmetry says.
    assert!(!r.join("etc/motd").exists(), "the file it created is gone");
    assert_eq!(
        std::fs::read_to_string(r.join("etc/app.conf")).unwrap(),
        "the operator's\n",
        "the held file is left as it is"
    );
    assert!(!mesh_table(node), "the guard's table is gone");
    assert!(bpffs.pinned().is_empty(), "the guard's BPF layer is gone");
    probe(
        &net.outside,
        STORE,
        Probe::Reached,
        "the guard no longer refuses it",
    );
    probe(
        &net.outside,
        OPENED,
        Probe::TimedOut,
        "the opening is gone, the found firewall's drop in force",
    );
    assert_eq!(
        found_ruleset(node),
        found_before,
        "the found firewall is as found"
    );

    // Hosted: no identity, no store to reconcile, the resident host still running.
    let store = r.join("var/lib/mesh-host");
    assert!(!store.join("node.key").exists(), "the key is gone");
    assert!(
        !store.join("link.json").exists(),
        "the link's state is gone"
    );
    assert!(!store.join("state.json").exists(), "the store is retired");
    assert!(host.is_running(), "run goes on:\n{}", host.log());
    assert!(
        host.log().contains("released by the controller"),
        "{}",
        host.log()
    );
    for args in [&["version"][..], &["profile"], &["inventory", "--json"]] {
        let out = mesh(node, &r, args);
        assert!(out.success(), "{args:?} on a hosted node: {}", out.stderr);
    }

    // A second enrolment (a new token) links the running host again.
    let again = ctl.issue(node_name, Duration::from_secs(600)).unwrap();
    let out = mesh(node, &r, &["enrol", "--token", &again.text]);
    assert!(
        out.success(),
        "the second enrol: {}\n{}",
        out.stdout,
        out.stderr
    );
    ctl.take_enrolments(Duration::from_secs(20)).unwrap();
    ctl.wait_for(node_name, "heartbeat", WAIT, |_| true)
        .unwrap_or_else(|| panic!("not linked again:\n{}", host.log()));
    ctl.declare(
        node_name,
        3,
        Duration::from_secs(300),
        super::file_decl(node_name, "/etc/motd", "enrolled again\n"),
    )
    .unwrap();
    let third = ctl
        .wait_for(node_name, "report", WAIT, |p| p["version"] == 3)
        .unwrap_or_else(|| panic!("no report after the second enrol:\n{}", host.log()))
        .payload;
    assert_eq!(
        std::fs::read_to_string(r.join("etc/motd")).unwrap(),
        "enrolled again\n",
        "{third:#}"
    );
    assert!(
        !third.to_string().contains("state.json was missing"),
        "a released store is not a lost one: {third:#}"
    );
    host.terminate(Duration::from_secs(10));
}
