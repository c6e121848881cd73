//! A release on the boot bed, under systemd as PID 1 with the resident host running: a node
//! whose found firewall is Debian's `nftables.service` (enabled, loading `/etc/nftables.conf` at
//! boot) is adopted with an opening and a file, flipped to converged, then given back with
//! `mesh-host release`. Compared with the machine as it was before the host came, byte for byte:
//! the kernel's ruleset, the found firewall's enablement, every file under /etc, /usr, /opt and
//! /srv (the original of the file the host took over back with its mode), and the bpffs (the
//! guard's pins and their directory gone). What a packet meets is probed from outside at each
//! step: before, the found firewall admits the store's port and 9090 and refuses 8080; adopted,
//! the guard refuses the store's port and the opening admits 8080; converged, the derived filter
//! refuses 9090; released, every port answers as it did before.

use super::*;
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;

const FOUND: &str = "#!/usr/sbin/nft -f\n\
flush ruleset\n\
\n\
table inet filter {\n\
\tchain input {\n\
\t\ttype filter hook input priority filter; policy drop;\n\
\t\tct state established,related accept\n\
\t\tiif \"lo\" accept\n\
\t\tmeta l4proto { 1, 58 } accept\n\
\t\ttcp dport { 22, 5432, 9090 } accept\n\
\t}\n\
\tchain forward {\n\
\t\ttype filter hook forward priority filter; policy drop;\n\
\t}\n\
\tchain output {\n\
\t\ttype filter hook output priority filter;\n\
\t}\n\
}\n";

/// Every file, symlink and directory under /etc, /usr, /opt (but the bed's own /opt/bed) and
/// /srv of `tree`: its kind, mode, owner and content or target.
fn machine(tree: &Tree) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for top in ["etc", "usr", "opt", "srv"] {
        collect(&tree.root, &tree.root.join(top), &mut out);
    }
    out.retain(|p, _| !p.starts_with("opt/bed"));
    out
}

fn collect(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let rel = p.strip_prefix(root).unwrap().display().to_string();
        let m = p.symlink_metadata().unwrap();
        let owner = format!("{:o} {}:{}", m.mode(), m.uid(), m.gid());
        if m.file_type().is_symlink() {
            let to = std::fs::read_link(&p).unwrap();
            out.insert(rel, format!("link {owner} -> {}", to.display()));
        } else if m.is_dir() {
            out.insert(rel, format!("dir {owner}"));
            collect(root, &p, out);
        } else {
            let bytes = std::fs::read(&p).unwrap_or_default();
            out.insert(
                rel,
                format!("file {owner} {}", String::from_utf8_lossy(&bytes)),
            );
        }
    }
}

/// Every path in the boot's bpffs.
fn pins(boot: &Boot) -> Vec<String> {
    let mut out = BTreeMap::new();
    collect(&boot.bpf, &boot.bpf, &mut out);
    out.into_keys().collect()
}

/// `mesh-host ARGS --json` inside the boot: its exit code and JSON.
fn host(boot: &Boot, args: &[&str]) -> (Option<i32>, Value) {
    let mut argv = vec!["/usr/bin/mesh-host"];
    argv.extend_from_slice(args);
    argv.push("--json");
    let out = boot
        .inside_for(&argv, Duration::from_secs(120))
        .expect("inside");
    let json = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("mesh-host {args:?}: not JSON ({e}): {}", text(&out)));
    crate::util::contract(&String::from_utf8_lossy(&out.stdout));
    (out.code, json)
}

fn inside_text(boot: &Boot, argv: &[&str]) -> String {
    let out = boot.inside(argv).expect("inside");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Waits, to a deadline, for `nftables.service` to have loaded the found ruleset (`when` names
/// the boot in the failure).
fn found_loaded(boot: &Boot, when: &str) {
    let until = Instant::now() + Duration::from_secs(60);
    while !inside_text(boot, &["nft", "list", "ruleset"]).contains("9090") {
        assert!(
            Instant::now() < until,
            "nftables.service never loaded {when}: {}",
            boot.journal(&[])
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Which of `ports` answer from outside, each probed (v4 and v6) until it has been tried 10
/// times in each family: a port reached once counts as reached.
fn answers(boot: &Boot, outside: &Machine, ports: &[u16]) -> BTreeMap<u16, bool> {
    let counts = boot.probe_until(outside, ports, Duration::from_secs(60), |_, c| {
        ports
            .iter()
            .all(|p| c.tried_of(*p, "v4") >= 10 && c.tried_of(*p, "v6") >= 10)
    });
    ports.iter().map(|p| (*p, counts.reached(*p) > 0)).collect()
}

#[test]
fn a_release_gives_back_the_found_firewall_the_originals_and_the_pins_byte_for_byte() {
    let tree = Tree::new();
    tree.write("/etc/nftables.conf", FOUND);
    tree.link(
        "/etc/systemd/system/sysinit.target.wants/nftables.service",
        "/lib/systemd/system/nftables.service",
    );
    tree.write("/etc/app/app.conf", "found by the host\n");
    std::fs::set_permissions(
        tree.root.join("etc/app/app.conf"),
        std::os::unix::fs::PermissionsExt::from_mode(0o640),
    )
    .unwrap();
    tree.declare(
        "adopted",
        vec![
            json!({"id": "app/port", "type": "opening", "port": DECLARED, "proto": "tcp",
                   "from": "anywhere", "path": "incoming"}),
            json!({"id": "app/config", "type": "file", "path": "/etc/app/app.conf",
                   "content": "written by the mesh\n", "mode": "0644"}),
            json!({"id": "app/new", "type": "file", "path": "/opt/mesh/a/b/new.conf",
                   "content": "new\n"}),
        ],
    );
    let outside = lab()
        .machine(&format!("br{}", std::process::id() % 100_000))
        .unwrap();
    let mut boot = Boot::start(&tree, &name("r"), &outside);
    found_loaded(&boot, "at the first boot");
    let ports = [STORE, UNDECLARED, DECLARED];
    let ruleset = inside_text(&boot, &["nft", "list", "ruleset"]);
    let enabled = inside_text(&boot, &["systemctl", "is-enabled", "nftables.service"]);
    let files = machine(&tree);
    let bpf = pins(&boot);
    let before = answers(&boot, &outside, &ports);
    assert_eq!(
        before,
        BTreeMap::from([(STORE, true), (UNDECLARED, true), (DECLARED, false)]),
        "the found firewall as written"
    );

    let (code, report) = host(&boot, &["apply", "/opt/bed/decl.json"]);
    assert_eq!(code, Some(0), "the adopted apply: {report:#}");
    assert_eq!(
        answers(&boot, &outside, &ports),
        BTreeMap::from([(STORE, false), (UNDECLARED, true), (DECLARED, true)]),
        "adopted: the guard and the opening"
    );
    assert!(!pins(&boot).is_empty(), "the guard pinned nothing");
    let (code, report) = host(&boot, &["converge"]);
    assert_eq!(code, Some(0), "the flip: {report:#}");
    assert_eq!(
        answers(&boot, &outside, &ports),
        BTreeMap::from([(STORE, false), (UNDECLARED, false), (DECLARED, true)]),
        "converged: the derived filter"
    );
    assert_ne!(
        inside_text(&boot, &["systemctl", "is-enabled", "nftables.service"]),
        enabled,
        "the flip left the found firewall's boot unit enabled"
    );
    assert_eq!(
        std::fs::read_to_string(tree.root.join("etc/app/app.conf")).unwrap(),
        "written by the mesh\n",
        "converged: the file taken over"
    );

    let (code, report) = host(&boot, &["release"]);
    assert_eq!(code, Some(0), "the release: {report:#}");
    eprintln!("the release: {report:#}");
    assert_eq!(
        inside_text(&boot, &["nft", "list", "ruleset"]),
        ruleset,
        "the kernel's ruleset after the release differs from before the host came"
    );
    assert_eq!(
        inside_text(&boot, &["systemctl", "is-enabled", "nftables.service"]),
        enabled,
        "the found firewall's boot unit"
    );
    let after = machine(&tree);
    let differ: Vec<_> = files
        .keys()
        .chain(after.keys())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .filter(|p| files.get(*p) != after.get(*p))
        .map(|p| (p, files.get(p), after.get(p)))
        .collect();
    assert!(
        differ.is_empty(),
        "the machine after the release differs from before the host came: {differ:#?}"
    );
    assert_eq!(pins(&boot), bpf, "the bpffs after the release");
    assert_eq!(
        answers(&boot, &outside, &ports),
        before,
        "released: what a packet meets is what it met before the host came"
    );

    // The resident host runs on, hosted: its next reconcile finds nothing stored and puts
    // nothing back.
    let ends = |b: &Boot| {
        let j = b.journal(&["-u", "mesh-host.service"]);
        j.matches("nothing is stored to reconcile yet").count() + j.matches("reconciled").count()
    };
    let seen = ends(&boot);
    let out = boot
        .inside(&["systemctl", "reload", "mesh-host.service"])
        .expect("inside");
    assert_eq!(out.code, Some(0), "systemctl reload: {}", text(&out));
    let until = Instant::now() + Duration::from_secs(30);
    while ends(&boot) <= seen {
        assert!(
            Instant::now() < until,
            "no reconcile after the reload: {}",
            boot.journal(&["-u", "mesh-host.service"])
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let journal = boot.journal(&["-u", "mesh-host.service"]);
    assert!(
        journal
            .rsplit_once("reconcile started")
            .is_some_and(|(_, last)| last.contains("nothing is stored to reconcile yet")),
        "the resident host's reconcile after the release: {journal}"
    );
    assert_eq!(
        inside_text(&boot, &["nft", "list", "ruleset"]),
        ruleset,
        "the resident host's reconcile after the release changed the ruleset"
    );
    assert_eq!(
        pins(&boot),
        bpf,
        "the bpffs after the resident host's reconcile"
    );
    assert_eq!(machine(&tree), files);
    assert!(
        report.get("guard").is_none_or(Value::is_null),
        "the release's report still describes the guard it removed: {report:#}"
    );
    boot.halt();
    drop(boot);

    // Rebooted, the machine is the found firewall's alone: the boot step finds no store and
    // loads nothing, nftables.service loads the found ruleset, every port answers as before.
    let boot = Boot::start(&tree, &name("r"), &outside);
    found_loaded(&boot, "after the release");
    let step = boot.journal(&["-u", "mesh-host-boot.service"]);
    assert!(
        step.contains("nothing to load: no store: the node was released"),
        "the boot step after a release: {step}"
    );
    assert_eq!(inside_text(&boot, &["nft", "list", "ruleset"]), ruleset);
    assert_eq!(pins(&boot), bpf, "the bpffs of the boot after the release");
    assert_eq!(
        answers(&boot, &outside, &ports),
        before,
        "rebooted after the release: what a packet meets is what it met before the host came"
    );
    let mut boot = boot;
    boot.halt();
}
