//! The guard through the distribution's own save and reload: `nft list ruleset` written to a file
//! with `flush ruleset` on top (as Debian's `/etc/nftables.conf`), loaded again with `nft -f`
//! while the guard is there and after a flush (as at boot, before the host starts). The load
//! succeeds, the guard is in force from the file alone, and the host's next reconcile finds
//! exactly one guard and changes nothing.

use super::*;

/// The ruleset saved as Debian keeps it.
fn save(node: &Machine, dir: &Path) -> (PathBuf, String) {
    let text = format!(
        "flush ruleset\n{}",
        run_ok(node, &["nft", "list", "ruleset"])
    );
    let path = dir.join("nftables.conf");
    std::fs::write(&path, &text).unwrap();
    (path, text)
}

/// `nft -f FILE`, which must succeed (exit status 0).
fn load(node: &Machine, path: &Path, text: &str) {
    let out = node.run(&["nft", "-f", path.to_str().unwrap()]).unwrap();
    assert!(
        out.success(),
        "nft -f of the saved ruleset failed ({}): {}\n{text}",
        out.status,
        out.stderr
    );
}

/// The host's next reconcile finds the guard in force and changes nothing, and there is exactly
/// one guard with exactly one refusal per port.
fn reconciled_unchanged(host: &Host, node: &Machine) {
    let report = host.reconcile();
    assert!(
        report["guard"]
            .as_str()
            .unwrap_or_default()
            .contains("(plain table; unchanged);"),
        "{report:#}"
    );
    let listing = run_ok(node, &["nft", "list", "ruleset"]);
    assert_eq!(
        listing.matches("table inet mesh_host {").count(),
        1,
        "{listing}"
    );
    for mark in [
        format!("\"mesh-host:guard/store/tcp/{STORE}\""),
        format!("\"mesh-host:guard/broker-management/tcp/{BROKER_MANAGEMENT}\""),
    ] {
        assert_eq!(listing.matches(&mark).count(), 1, "{mark}\n{listing}");
    }
}

#[test]
fn a_saved_ruleset_carries_the_guard_and_loads_again_while_it_is_there_and_after_a_flush() {
    let lab = new_lab();
    let net = adoption(&lab);
    let node = &net.node;
    let _store = node.listen_tcp(STORE).expect("listener on the node");
    let public = node_public();
    let private = node_private();
    // The operator's own firewall, saved and reloaded with the guard.
    load_nft(
        node,
        lab.dir(),
        "found.nft",
        "table inet filter {
	chain input {
		type filter hook input priority filter; policy accept;
		tcp dport 9001 drop
	}
}
",
    );
    let host = Host::new(node);
    host.apply(&declaration(&[]));
    expect(&net.outside, &public, STORE, Probe::TimedOut, "the guard");

    let (file, text) = save(node, lab.dir());
    // Reloaded while the guard is there.
    load(node, &file, &text);
    expect(
        &net.outside,
        &public,
        STORE,
        Probe::TimedOut,
        "reloaded with the guard there",
    );
    // nft prints the guard's refusal of the node's own addresses as `fib daddr type local`.
    let want = format!(
        "iifname != \"lo\" iifname != \"{PRIVATE_IF}\" fib daddr type local tcp dport {STORE} \
         drop comment \"mesh-host:guard/store/tcp/{STORE}\""
    );
    assert!(text.contains(&want), "{want}\n{text}");
    assert!(
        text.contains("table inet mesh_host {\n\tchain guard {"),
        "a plain table, no flags line: {text}"
    );
    expect(
        &net.peer,
        &private,
        STORE,
        Probe::Reached,
        "private network after the reload",
    );
    reconciled_unchanged(&host, node);

    // Flushed, then loaded from the file alone, as at boot before the host starts.
    run_ok(node, &["nft", "flush", "ruleset"]);
    expect(&net.outside, &public, STORE, Probe::Reached, "flushed");
    load(node, &file, &text);
    expect(
        &net.outside,
        &public,
        STORE,
        Probe::TimedOut,
        "the guard restored by the saved file",
    );
    assert!(run_ok(node, &["nft", "list", "table", "inet", "filter"]).contains("dport 9001 drop"));
    reconciled_unchanged(&host, node);
}
