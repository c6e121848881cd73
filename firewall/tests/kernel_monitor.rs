//! The monitor sees other processes' changes (as a reload would make them) and our own, each
//! transaction closed by a NEWGEN naming the process that committed it.

mod common;

use std::time::Duration;

use common::{in_fresh_netns, nft, nft_load};
use firewall::netlink::*;

/// Collects events up to and including the next NEWGEN.
fn transaction(m: &mut NfMonitor) -> (Vec<Event>, Generation) {
    let mut events = Vec::new();
    loop {
        match m.next_event(Some(Duration::from_secs(5))).unwrap() {
            Some(Event::NewGen(g)) => return (events, g),
            Some(e) => events.push(e),
            None => panic!("no NEWGEN within 5 s; got {events:#?}"),
        }
    }
}

#[test]
fn the_monitor_sees_a_reload_by_nft_and_our_own_batches() {
    in_fresh_netns();
    let mut m = NfMonitor::open().unwrap();
    assert!(m
        .next_event(Some(Duration::from_millis(50)))
        .unwrap()
        .is_none());

    nft_load(
        "table ip filter {\n\
           chain INPUT { type filter hook input priority 0; policy drop; tcp dport 22 accept; }\n\
         }\n",
    );
    let (events, generation) = transaction(&mut m);
    assert_eq!(generation.process.as_deref(), Some("nft"));
    assert!(generation.pid.is_some());
    assert!(events.iter().any(
        |e| matches!(e, Event::NewTable(t) if t.name == "filter" && t.family == Family::Ipv4)
    ));
    assert!(events.iter().any(|e| matches!(
        e,
        Event::NewChain(c) if c.name == "INPUT" && c.policy == Some(Policy::Drop)
    )));
    let rule = events
        .iter()
        .find_map(|e| match e {
            Event::NewRule(r) => Some(r),
            _ => None,
        })
        .expect("a NEWRULE event");
    assert_eq!(rule.family, Family::Ipv4);
    assert_eq!(
        rule.exprs.last().unwrap().as_verdict(),
        Some(&Verdict::Accept)
    );

    // Our own batch: the NEWGEN names this thread (libtest names it after the test).
    let mut s = NfSocket::open().unwrap();
    let mut b = Batch::new();
    b.add_table(Family::Inet, "meshguard", TableFlags::NONE)
        .unwrap();
    s.send(&b).unwrap();
    let (events, generation) = transaction(&mut m);
    assert!(matches!(&events[..], [Event::NewTable(t)] if t.name == "meshguard"));
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() } as u32;
    assert_eq!(generation.pid, Some(tid));
    assert!(
        "the_monitor_sees_a_reload_by_nft_and_our_own_batches"
            .starts_with(generation.process.as_deref().unwrap()),
        "{generation:?}"
    );

    // A flush by another process shows up as deletions.
    nft(&["flush", "ruleset"]);
    let (events, _) = transaction(&mut m);
    assert!(events
        .iter()
        .any(|e| matches!(e, Event::DelTable(t) if t.name == "filter")));
    assert!(events.iter().any(
        |e| matches!(e, Event::DelTable(t) if t.name == "meshguard" && t.family == Family::Inet)
    ));
    assert!(events.iter().any(|e| matches!(e, Event::DelRule(_))));
    assert!(m.pending().unwrap().is_empty());
}
