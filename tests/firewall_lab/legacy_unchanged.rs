//! A legacy found firewall known unchanged without reading it: after an apply, a reconcile
//! exec's nothing but the binary (no `iptables-legacy-save`), its opening unchanged by the legacy
//! tables' fingerprint (read by `getsockopt`, counters left out); a rule deleted by hand changes
//! the fingerprint, so the next reconcile reads the tables and puts the opening back. Each state
//! is probed: from outside, and from a source the operator bans first.

use super::bridges_live::{assert_only_the_binary, traced_execs};
use super::*;
use lab::addr::PEER_PUBLIC_V4;

/// No engine answers here: the reconcile must not start one to ask.
const NO_ENGINE: &str = "unix:///nonexistent/docker.sock";

/// Legacy iptables dropping by default in both families, listeners on ssh and the opening's
/// port; then `ban` (legacy commands) and the apply of `web/api`. The listeners and the host.
fn legacy_node(node: &Machine, ban: &[Vec<&str>]) -> (Vec<lab::Process>, Host) {
    run_all(node, &xt_input_drop("iptables-legacy"));
    run_all(node, &xt_input_drop("ip6tables-legacy"));
    run_all(node, ban);
    let listeners = [SSH, OPENED]
        .iter()
        .map(|p| node.listen_tcp(*p).expect("listener on the node"))
        .collect();
    let host = Host::new(node);
    host.apply(&declaration(&[opening("web/api", OPENED, "incoming")]));
    (listeners, host)
}

/// `reconcile --json` traced: it succeeded with nothing failed; its report and the programs it
/// exec'd.
fn traced_reconcile(host: &Host) -> (Value, Vec<String>) {
    let (out, execs) = traced_execs(host, NO_ENGINE, &["reconcile", "--json"]);
    assert!(out.success(), "{}\n{}", out.stdout, out.stderr);
    let report: Value = crate::util::contract(&out.stdout);
    assert_nothing_failed(&report);
    (report, execs)
}

#[test]
fn a_legacy_reconcile_with_nothing_changed_starts_no_process() {
    let lab = new_lab();
    let net = adoption(&lab);
    let node = &net.node;
    // The operator's ban of the peer, first in INPUT (over IPv4 only: a ban of its IPv6 address
    // drops its neighbour discovery too, and the probe then says unreachable, not banned).
    let v4 = PEER_PUBLIC_V4.to_string();
    let ban = vec![
        "iptables-legacy",
        "-w",
        "-I",
        "INPUT",
        "1",
        "-s",
        &v4,
        "-j",
        "DROP",
    ];
    let (_listeners, host) = legacy_node(node, &[ban]);
    let public = node_public();
    expect(
        &net.outside,
        &public,
        OPENED,
        Probe::Reached,
        "the opening, applied",
    );
    expect(
        &net.peer,
        &public[..1],
        OPENED,
        Probe::TimedOut,
        "the banned peer, applied",
    );

    // Nothing changed: the fingerprint vouches for the legacy tables, nothing is exec'd.
    let (report, execs) = traced_reconcile(&host);
    assert_eq!(outcome(&report, "web/api"), "unchanged", "{report:#}");
    assert!(
        report["entries"][0]["detail"]
            .as_str()
            .is_some_and(|d| d.contains("legacy tables sha256:")),
        "the legacy tables' fingerprint vouched: {report:#}"
    );
    assert_only_the_binary(&execs, "a legacy firewall, nothing changed");
    expect(
        &net.outside,
        &public,
        OPENED,
        Probe::Reached,
        "the opening, unchanged",
    );
    expect(
        &net.peer,
        &public[..1],
        OPENED,
        Probe::TimedOut,
        "the banned peer, unchanged",
    );

    // Traffic moved the counters meanwhile: still nothing to read.
    let (report, execs) = traced_reconcile(&host);
    assert_eq!(outcome(&report, "web/api"), "unchanged", "{report:#}");
    assert_only_the_binary(&execs, "a legacy firewall after traffic");

    // Someone deletes the opening's rule by hand: the fingerprint changes, the tables are read
    // and the rule put back.
    delete_marked(node);
    expect(
        &net.outside,
        &[public[0]],
        OPENED,
        Probe::TimedOut,
        "the v4 rule deleted by hand",
    );
    let (report, execs) = traced_reconcile(&host);
    assert_eq!(outcome(&report, "web/api"), "created", "{report:#}");
    assert!(
        execs.iter().any(|e| e.contains("iptables-legacy-save")),
        "a changed fingerprint reads the tables:\n{}",
        execs.join("\n")
    );
    expect(
        &net.outside,
        &public,
        OPENED,
        Probe::Reached,
        "the opening, put back",
    );
    expect(
        &net.peer,
        &public[..1],
        OPENED,
        Probe::TimedOut,
        "the banned peer stays first",
    );
    let saved = run_ok(node, &["iptables-legacy-save", "-t", "filter"]);
    let first = saved.lines().find(|l| l.starts_with("-A INPUT")).unwrap();
    assert!(
        first.contains(&v4) && first.ends_with("-j DROP"),
        "the ban stays first:\n{saved}"
    );

    // And after the put-back, nothing again.
    let (report, execs) = traced_reconcile(&host);
    assert_eq!(outcome(&report, "web/api"), "unchanged", "{report:#}");
    assert_only_the_binary(&execs, "a legacy firewall after the put-back");
}

/// The rule of `web/api` in the node's legacy INPUT, as `iptables-legacy -D` takes it.
fn delete_marked(node: &Machine) {
    let saved = run_ok(node, &["iptables-legacy-save", "-t", "filter"]);
    let marked = saved
        .lines()
        .find(|l| l.starts_with("-A INPUT") && is_marked(l))
        .unwrap_or_else(|| panic!("no marked rule in INPUT:\n{saved}"));
    let mut delete: Vec<String> = vec!["iptables-legacy".into(), "-w".into(), "-D".into()];
    delete.extend(
        marked
            .trim_start_matches("-A ")
            .split(' ')
            .filter(|w| !w.is_empty())
            .map(|w| w.trim_matches('"').to_string()),
    );
    let delete: Vec<&str> = delete.iter().map(String::as_str).collect();
    run_ok(node, &delete);
}

/// The resident host's legacy period looks at the fingerprint and reads nothing more while it
/// holds; a rule deleted by hand changes it, and the next period puts the rule back.
#[test]
fn the_resident_legacy_period_rechecks_only_when_the_tables_changed() {
    let lab = new_lab();
    let net = adoption(&lab);
    let node = &net.node;
    let (_listeners, host) = legacy_node(node, &[]);
    let public = node_public();
    let resident = super::resident::Resident::start(&host, &["--legacy-period", "100"]);

    // Periods pass with the tables as they are: after one re-check, each only looks.
    let looked = "the legacy tables are as the last re-check found them";
    resident.wait_log(looked, 5, Duration::from_secs(20));
    let rechecks = |log: &str| {
        log.lines()
            .filter(|l| {
                l.contains("the legacy period") && l.contains("ruleset changed by another program")
            })
            .count()
    };
    let log = resident.log();
    assert!(
        rechecks(&log) <= 1,
        "the legacy period re-checked tables that had not changed:\n{log}"
    );
    expect(
        &net.outside,
        &public,
        OPENED,
        Probe::Reached,
        "the opening, resident",
    );

    // A rule deleted by hand: the next period re-checks and puts it back.
    delete_marked(node);
    let started = std::time::Instant::now();
    while net
        .outside
        .probe_tcp(public[0], OPENED, Duration::from_millis(300))
        .unwrap()
        != Probe::Reached
    {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the resident host did not put the opening back:\n{}",
            resident.log()
        );
    }
    resident.wait_log("put back", 1, Duration::from_secs(10));
    expect(
        &net.outside,
        &public,
        OPENED,
        Probe::Reached,
        "the opening, put back by the resident host",
    );
    // And it only looks again.
    let before = resident.log().matches(looked).count();
    resident.wait_log(looked, before + 3, Duration::from_secs(20));
}
