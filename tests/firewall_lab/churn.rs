//! An apply through the built binary on a lab node whose found firewall holds 50,000 rules while
//! an unrelated table changes 5 times a second (the issue saw 1 apply in 6 fail there, "listing
//! … interrupted … 10 times"): every apply succeeds, and each opening answers a real connection
//! from outside.

use super::*;
use firewall::netlink::{Batch, Position, RuleBody};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// A found nftables firewall of 50,000 source bans ahead of ssh, policy drop, and a foreign table
/// off the packets' way for the churn.
fn fifty_thousand_rules() -> String {
    let mut text = String::from(
        "table inet filter {\n chain input {\n  type filter hook input priority 0; policy drop;\n  \
         ct state established,related accept\n  iif lo accept\n",
    );
    for i in 0..50_000u32 {
        writeln!(
            text,
            "  ip saddr 10.{}.{}.{} drop",
            (i >> 16) & 255,
            (i >> 8) & 255,
            i & 255
        )
        .unwrap();
    }
    text.push_str("  tcp dport 22 accept\n }\n}\ntable inet churn {\n chain c {\n }\n}\n");
    text
}

/// Proves an apply of one opening through 50,000 rules under 5 unrelated changes a second
/// succeeds, three times in a row, each opening reached from outside after it and not before.
#[test]
fn an_apply_through_fifty_thousand_rules_under_five_changes_a_second_succeeds() {
    let lab = new_lab();
    let net = adoption(&lab);
    let node = &net.node;
    let host = Host::new(node);
    let loaded = Instant::now();
    load_nft(node, host.dir.path(), "found.nft", &fifty_thousand_rules());
    eprintln!("50,000 rules loaded in {:?}", loaded.elapsed());
    let ports = [OPENED, OPENED + 10, OPENED + 20];
    let _listeners: Vec<_> = ports
        .iter()
        .map(|p| node.listen_tcp(*p).expect("listener on the node"))
        .collect();

    // The churn: a rule added to `inet churn` every 200 ms, from a thread in the node's namespace.
    let stop = Arc::new(AtomicBool::new(false));
    let commits = Arc::new(AtomicU64::new(0));
    let churn = {
        let (node, stop, commits) = (node.clone(), stop.clone(), commits.clone());
        std::thread::spawn(move || {
            node.in_namespace(move || {
                let mut sock = NfSocket::open().expect("a netlink socket in the node");
                let mut n = 0u16;
                while !stop.load(Ordering::Relaxed) {
                    let mut b = Batch::new();
                    let body = RuleBody::new().tcp_dport(1000 + n % 5000).accept();
                    b.add_rule(
                        firewall::Family::Inet,
                        "churn",
                        "c",
                        &body,
                        Position::Prepend,
                    )
                    .unwrap();
                    sock.send(&b).expect("a churn commit");
                    commits.fetch_add(1, Ordering::Relaxed);
                    n += 1;
                    std::thread::sleep(Duration::from_millis(200));
                }
            })
            .expect("entering the node")
        })
    };
    let began = Instant::now();
    for (i, port) in ports.into_iter().enumerate() {
        expect(
            &net.outside,
            &node_public()[..1],
            port,
            Probe::TimedOut,
            "before its opening",
        );
        let t = Instant::now();
        // Each apply declares its own opening alone: the previous one is removed.
        let report = host.apply(&declaration(&[opening(
            &format!("app/o{i}"),
            port,
            "incoming",
        )]));
        eprintln!("apply {i} under churn: {:?}", t.elapsed());
        assert_eq!(
            outcome(&report, &format!("app/o{i}")),
            "created",
            "{report:#}"
        );
        expect(
            &net.outside,
            &node_public()[..1],
            port,
            Probe::Reached,
            "its opening, applied under churn",
        );
    }
    stop.store(true, Ordering::Relaxed);
    churn.join().unwrap();
    let rate = commits.load(Ordering::Relaxed) as f64 / began.elapsed().as_secs_f64();
    eprintln!("churn: {rate:.1} changes a second");
    assert!(rate >= 4.0, "the churn ran at {rate:.1} a second");
    expect(
        &net.outside,
        &node_public()[..1],
        ports[0],
        Probe::TimedOut,
        "the first opening, removed by the later applies",
    );
}
