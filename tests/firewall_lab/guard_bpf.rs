//! The guard's second layer through the built binary: a netfilter BPF program pinned under the
//! node's root that holds the store and the broker's management port closed through a foreign
//! `flush ruleset` with no mesh-host running, after the resident host is killed with `kill -9`,
//! and that a restart reclaims (the same four links, never a second set); status, the report and
//! the briefing name both layers.

use super::resident::Resident;
use super::*;

/// The guard's layers when both hold, as the report and the status say.
pub(super) const BOTH: &str =
    "guard: table inet mesh_host + netfilter BPF (pinned): holds through any ruleset change";

/// A bpffs mounted at the host's `ROOT/sys/fs/bpf`, as `/sys/fs/bpf` is on a node (the binary
/// mounts one only on the machine's own `/`); unmounted on drop, which releases what is pinned.
pub(super) struct Bpffs(PathBuf);

impl Bpffs {
    pub(super) fn mount(host: &Host) -> Bpffs {
        let at = host.root().join("sys/fs/bpf");
        std::fs::create_dir_all(&at).unwrap();
        let out = std::process::Command::new("mount")
            .args(["-t", "bpf", "bpf"])
            .arg(&at)
            .output()
            .expect("mount must exist");
        assert!(
            out.status.success(),
            "mount -t bpf at {}: {}",
            at.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        Bpffs(at)
    }
}

impl Drop for Bpffs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .args(["-l"])
            .arg(&self.0)
            .output();
    }
}

pub(super) fn bpf(host: &Host) -> Value {
    host.status()["guard"]["bpf"].clone()
}

fn link_ids(host: &Host) -> Vec<u64> {
    let b = bpf(host);
    assert_eq!(b["pinned"], true, "{b:#}");
    b["link_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect()
}

#[test]
fn pinned_beside_the_table_the_guard_holds_through_a_flush_with_no_host_running() {
    let lab = new_lab();
    let net = adoption(&lab);
    let node = &net.node;
    let _listeners: Vec<_> = [STORE, BROKER_MANAGEMENT, SERVED]
        .iter()
        .map(|p| node.listen_tcp(*p).expect("listener on the node"))
        .collect();
    let host = Host::new(node);
    let _fs = Bpffs::mount(&host);
    let report = host.apply(&declaration(&[]));
    let line = report["guard"].as_str().unwrap_or_default();
    assert!(line.contains(BOTH), "{report:#}");
    assert!(line.contains("links attached and pinned"), "{line}");
    let status = host.status();
    assert_eq!(status["guard"]["layers"], BOTH, "{status:#}");
    assert_eq!(
        status["guard"]["bpf"]["links"],
        json!([
            "link-ipv4-input",
            "link-ipv4-forward",
            "link-ipv6-input",
            "link-ipv6-forward"
        ])
    );
    assert_eq!(
        status["guard"]["bpf"]["interfaces"],
        json!(["lo exempt", format!("{PRIVATE_IF} private")])
    );
    let briefing = host.run(&["briefing"]);
    assert!(briefing.stdout.contains(BOTH), "{}", briefing.stdout);
    let text = host.run(&["firewall", "status"]);
    assert!(
        text.stdout.contains(&format!("layers          {BOTH}")),
        "{}",
        text.stdout
    );
    let ids = link_ids(&host);

    // Another program flushes the whole ruleset; no mesh-host runs to put the table back.
    run_ok(node, &["nft", "flush", "ruleset"]);
    assert_eq!(run_ok(node, &["nft", "list", "ruleset"]), "");
    let public = node_public();
    expect(
        &net.outside,
        &public,
        STORE,
        Probe::TimedOut,
        "store after a flush",
    );
    expect(
        &net.outside,
        &public,
        BROKER_MANAGEMENT,
        Probe::TimedOut,
        "broker after a flush",
    );
    expect(
        &net.outside,
        &public,
        SERVED,
        Probe::Reached,
        "another port",
    );
    expect(
        &net.peer,
        &node_private(),
        STORE,
        Probe::Reached,
        "the private network",
    );
    let status = host.status();
    assert!(
        status["guard"]["layers"]
            .as_str()
            .unwrap()
            .starts_with("guard: netfilter BPF alone"),
        "{status:#}"
    );

    // The preview reads both layers apart: the table would be written again, the BPF layer is
    // pinned and attached (it held through the flush) and is not said to be written.
    let out = host.run(&["reconcile", "--preview", "--json"]);
    assert_eq!(out.status.code(), Some(4), "{}\n{}", out.stdout, out.stderr);
    let plan = crate::util::contract(&out.stdout);
    let guard = &plan["guard"];
    assert_eq!(
        (&guard["table"], &guard["bpf"], &guard["in_force"]),
        (&json!(false), &json!(true), &json!(false)),
        "{plan:#}"
    );
    let detail = guard["detail"].as_str().unwrap();
    assert!(
        detail.contains("table inet mesh_host not in force; would be written")
            && detail.contains("its netfilter BPF layer pinned at ")
            && detail.contains("with 4 links attached; would be checked again"),
        "{detail}"
    );
    let text = host.run(&["reconcile", "--preview"]).stdout;
    assert!(
        text.lines()
            .last()
            .unwrap()
            .ends_with("; the guard to write."),
        "{text}"
    );

    // The next reconcile writes the table back and takes the same links back.
    let report = host.reconcile();
    let line = report["guard"].as_str().unwrap_or_default();
    assert!(
        line.contains("(created; written)") && line.contains("links reclaimed"),
        "{line}"
    );
    assert_eq!(link_ids(&host), ids, "the same links, not a second set");
}

#[test]
fn after_kill_9_the_ports_stay_closed_and_the_restart_reclaims_the_same_links() {
    let lab = new_lab();
    let net = adoption(&lab);
    let node = &net.node;
    let _listeners: Vec<_> = [STORE, BROKER_MANAGEMENT, SERVED]
        .iter()
        .map(|p| node.listen_tcp(*p).expect("listener on the node"))
        .collect();
    let host = Host::new(node);
    let _fs = Bpffs::mount(&host);
    host.apply(&declaration(&[]));
    let ids = link_ids(&host);
    let mut resident = Resident::start(&host, &[]);
    resident.signal(libc::SIGKILL);
    resident.wait_exit(Duration::from_secs(10));
    drop(resident);
    // With no host at all, a foreign flush: the BPF layer alone holds the ports.
    run_ok(node, &["nft", "flush", "ruleset"]);
    let public = node_public();
    expect(
        &net.outside,
        &public,
        STORE,
        Probe::TimedOut,
        "store after kill -9 and a flush",
    );
    expect(
        &net.outside,
        &public,
        BROKER_MANAGEMENT,
        Probe::TimedOut,
        "broker after kill -9 and a flush",
    );
    // The restart reclaims the pinned links: one set, the same ids.
    let resident = Resident::start(&host, &[]);
    assert_eq!(link_ids(&host), ids, "the restart attached a second set");
    let pins = host.root().join("sys/fs/bpf/mesh-host");
    let mut names: Vec<String> = std::fs::read_dir(&pins)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "ifaces",
            "link-ipv4-forward",
            "link-ipv4-input",
            "link-ipv6-forward",
            "link-ipv6-input",
            "nets",
            "ports",
            "prog"
        ]
    );
    drop(resident);
    expect(
        &net.outside,
        &public,
        STORE,
        Probe::TimedOut,
        "store after the restart",
    );
}

/// `mesh0` renamed through a 15-byte name and back, as udev and systemd-networkd do at boot, with
/// its addresses kept across the down and up; the kernel keeps the long name's tail after the
/// NUL, which the guard's program compares past no more than the table does.
fn rename_the_private_interface_through_a_long_name_and_back(node: &Machine) {
    let long = "mesh0-renamed01";
    node.set_sysctl(
        &format!("net/ipv6/conf/{PRIVATE_IF}/keep_addr_on_down"),
        "1",
    )
    .unwrap();
    for argv in [
        vec!["ip", "link", "set", PRIVATE_IF, "down"],
        vec!["ip", "link", "set", PRIVATE_IF, "name", long],
        vec!["ip", "link", "set", long, "name", PRIVATE_IF],
        vec!["ip", "link", "set", PRIVATE_IF, "up"],
    ] {
        run_ok(node, &argv);
    }
}

/// Probes until the private network reaches `port` on each of the node's private addresses,
/// for at most ten seconds each (the carrier and IPv6's address checks come back after an up).
fn private_network_reaches(net: &Adoption, port: u16, why: &str) {
    for addr in node_private() {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let got = net.peer.probe_tcp(addr, port, ANSWER).unwrap();
            if got == Probe::Reached {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{why}: peer -> [{addr}]:{port} was {got}, expected reached"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[test]
fn a_private_interface_renamed_through_a_long_name_and_back_is_still_the_private_network() {
    let lab = new_lab();
    let net = adoption(&lab);
    let node = &net.node;
    let _listeners: Vec<_> = [STORE, BROKER_MANAGEMENT, SERVED]
        .iter()
        .map(|p| node.listen_tcp(*p).expect("listener on the node"))
        .collect();
    let host = Host::new(node);
    let _fs = Bpffs::mount(&host);
    let report = host.apply(&declaration(&[]));
    assert!(
        report["guard"].as_str().unwrap_or_default().contains(BOTH),
        "{report:#}"
    );
    rename_the_private_interface_through_a_long_name_and_back(node);
    let public = node_public();
    for (layers, flush) in [("both layers", false), ("the BPF layer alone", true)] {
        if flush {
            run_ok(node, &["nft", "flush", "ruleset"]);
        }
        for port in [STORE, BROKER_MANAGEMENT] {
            private_network_reaches(&net, port, &format!("{layers} after the rename"));
            expect(
                &net.outside,
                &public,
                port,
                Probe::TimedOut,
                &format!("{layers}: the outside after the rename"),
            );
        }
    }
    // A reconcile puts the table back; the status still names both layers.
    host.reconcile();
    assert_eq!(host.status()["guard"]["layers"], BOTH);
    private_network_reaches(&net, STORE, "after the reconcile");
}

/// This namespace's guard links the kernel holds attached, as the status reads them, sorted.
fn held(host: &Host) -> Vec<u64> {
    let mut ids: Vec<u64> = bpf(host)["held"]
        .as_array()
        .expect("the status lists the links the kernel holds")
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    ids.sort();
    ids
}

/// The held links, polled until there are four (a link whose pin was its last reference is
/// released a moment after the unlink), for at most two seconds.
fn held_settles_at_four(host: &Host) -> Vec<u64> {
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    loop {
        let ids = held(host);
        if ids.len() == 4 || std::time::Instant::now() >= deadline {
            return ids;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_bpffs_mounted_over_the_pins_or_a_deleted_pin_ends_with_one_set_of_four_links() {
    let lab = new_lab();
    let net = adoption(&lab);
    let node = &net.node;
    let _listeners: Vec<_> = [STORE, BROKER_MANAGEMENT]
        .iter()
        .map(|p| node.listen_tcp(*p).expect("listener on the node"))
        .collect();
    let host = Host::new(node);
    let _fs = Bpffs::mount(&host);
    host.apply(&declaration(&[]));
    let mut ids = link_ids(&host);
    ids.sort();
    assert_eq!(held(&host), ids);
    let public = node_public();

    // A second bpffs over the first: the pins out of sight, the links still attached, and the
    // status says so from the kernel.
    let _over = Bpffs::mount(&host);
    let status = host.status();
    let b = &status["guard"]["bpf"];
    assert_eq!(
        (&b["pinned"], &b["attached"]),
        (&json!(false), &json!(true)),
        "{b:#}"
    );
    assert_eq!(status["guard"]["layers"], BOTH, "{status:#}");
    let text = host.run(&["firewall", "status"]).stdout;
    assert!(
        text.contains("bpf             attached but not pinned"),
        "{text}"
    );
    let report = host.apply(&declaration(&[]));
    let line = report["guard"].as_str().unwrap_or_default();
    assert!(
        line.contains("links found in the kernel unpinned and pinned again"),
        "{line}"
    );
    let mut again = link_ids(&host);
    again.sort();
    assert_eq!(again, ids, "the same links pinned again");
    assert_eq!(held(&host), ids, "exactly one set of four");
    expect(
        &net.outside,
        &public,
        STORE,
        Probe::TimedOut,
        "after the remount",
    );

    // The program's pin deleted: found in the kernel, the same links.
    let pins = host.root().join("sys/fs/bpf/mesh-host");
    std::fs::remove_file(pins.join("prog")).unwrap();
    let report = host.reconcile();
    assert!(
        report["guard"]
            .as_str()
            .unwrap_or_default()
            .contains("links found in the kernel unpinned and pinned again"),
        "{report:#}"
    );
    assert_eq!(held(&host), ids, "exactly one set of four");
    // A link's pin deleted: released, and one attached in its place (or caught and pinned again).
    std::fs::remove_file(pins.join("link-ipv6-input")).unwrap();
    host.reconcile();
    let now = held_settles_at_four(&host);
    assert_eq!(now.len(), 4, "{now:?}");
    let mut pinned = link_ids(&host);
    pinned.sort();
    assert_eq!(now, pinned);
    for port in [STORE, BROKER_MANAGEMENT] {
        expect(
            &net.outside,
            &public,
            port,
            Probe::TimedOut,
            "after a deleted pin",
        );
    }
}
