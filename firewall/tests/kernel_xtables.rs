//! The legacy tables' fingerprint against the real kernel: none without legacy tables; the same
//! while traffic moves the counters and a rate limit spends its credit; another when a rule is
//! replaced by one of the same size, when a policy changes, and when ip6tables changes.

mod common;

use common::{in_fresh_netns, ip, run_ok};
use std::net::{Ipv4Addr, SocketAddrV4, TcpStream};
use std::process::Command;
use std::time::Duration;

/// The packet counter of INPUT's rule `n` (from 1), as `iptables-legacy -L -v -x` says it.
fn rule_packets(n: usize) -> u64 {
    let out = Command::new("iptables-legacy")
        .args(["-w", "-L", "INPUT", "-v", "-x", "-n"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .nth(n + 1)
        .and_then(|l| l.split_whitespace().next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no rule {n} in {text}"))
}

/// Sends `n` connection attempts to 127.0.0.1:22 (nothing listens: each is a SYN and a reset).
fn knock(n: usize) {
    for _ in 0..n {
        let _ = TcpStream::connect_timeout(
            &SocketAddrV4::new(Ipv4Addr::LOCALHOST, 22).into(),
            Duration::from_millis(200),
        );
    }
}

#[test]
fn the_fingerprint_follows_the_rules_and_not_the_traffic() {
    in_fresh_netns();
    ip(&["link", "set", "lo", "up"]);
    assert_eq!(
        firewall::xtables::fingerprint().unwrap(),
        None,
        "a new namespace has no legacy tables"
    );

    // A rate limit first (its credit is spent by the first knock), then what accepts the rest.
    let limited = "-p tcp --dport 22 -m limit --limit 1/hour --limit-burst 1 -j ACCEPT";
    let add = |rule: &str| {
        let mut args = vec!["-w", "-A", "INPUT"];
        args.extend(rule.split(' '));
        run_ok("iptables-legacy", &args);
    };
    add(limited);
    add("-p tcp --dport 22 -j ACCEPT");
    let first = firewall::xtables::fingerprint()
        .unwrap()
        .expect("a legacy table now");
    assert!(first.starts_with("sha256:") && first.len() == 71, "{first}");

    // Traffic: the counters move (and the limit spends its one credit), the fingerprint stays.
    let before = (rule_packets(1), rule_packets(2));
    knock(5);
    let after = (rule_packets(1), rule_packets(2));
    assert!(
        after.0 > before.0 && after.1 > before.1,
        "the knocks did not reach both rules, the limit's credit spent ({before:?} → {after:?})"
    );
    assert_eq!(
        firewall::xtables::fingerprint().unwrap().as_deref(),
        Some(first.as_str())
    );

    // A rule replaced by one of the same size: another fingerprint.
    run_ok(
        "iptables-legacy",
        &[
            "-w", "-R", "INPUT", "2", "-p", "tcp", "--dport", "23", "-j", "ACCEPT",
        ],
    );
    let replaced = firewall::xtables::fingerprint().unwrap().unwrap();
    assert_ne!(replaced, first, "a rule replaced by one of the same size");

    // Put back exactly: the first fingerprint again.
    run_ok(
        "iptables-legacy",
        &[
            "-w", "-R", "INPUT", "2", "-p", "tcp", "--dport", "22", "-j", "ACCEPT",
        ],
    );
    assert_eq!(
        firewall::xtables::fingerprint().unwrap().as_deref(),
        Some(first.as_str())
    );

    // A policy.
    run_ok("iptables-legacy", &["-w", "-P", "FORWARD", "DROP"]);
    let policy = firewall::xtables::fingerprint().unwrap().unwrap();
    assert_ne!(policy, first, "a chain's policy changed");

    // The other family.
    run_ok(
        "ip6tables-legacy",
        &[
            "-w", "-A", "INPUT", "-p", "tcp", "--dport", "22", "-j", "ACCEPT",
        ],
    );
    let six = firewall::xtables::fingerprint().unwrap().unwrap();
    assert_ne!(six, policy, "an ip6tables rule added");

    // Another table of the same family (nat), made by listing it.
    run_ok(
        "iptables-legacy",
        &[
            "-w",
            "-t",
            "nat",
            "-A",
            "PREROUTING",
            "-p",
            "tcp",
            "--dport",
            "80",
            "-j",
            "REDIRECT",
            "--to-ports",
            "8080",
        ],
    );
    assert_ne!(
        firewall::xtables::fingerprint().unwrap().unwrap(),
        six,
        "a nat rule added"
    );
}
