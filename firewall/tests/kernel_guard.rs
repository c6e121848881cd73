//! The guard on a real kernel, in a fresh namespace: a plain table whose `nft list ruleset`
//! loads again with `nft -f` and reads back as the guard wrote it, and an earlier version's
//! owned or orphaned table replaced in one transaction or, held by another live socket, left
//! to its holder.

mod common;

use std::time::Duration;

use common::{in_fresh_netns, nft, nft_try};
use firewall::guard::{self, GuardSpec, GuardTable, OldTable};
use firewall::netlink::*;
use firewall::{Error, MESH_TABLE};

fn spec() -> GuardSpec {
    let net = |a: &str, len| firewall::Network {
        addr: a.parse().unwrap(),
        len,
    };
    GuardSpec::for_node(5432, 15672, Some("mesh0"))
        .private_ranges(&[net("10.77.0.0", 24), net("fd77::", 64)])
}

/// `nft list ruleset` saved with `flush ruleset` on top, as Debian's file, then `nft -f` of it:
/// whether the load succeeded, and what nft said.
fn save_and_reload(name: &str) -> (bool, String, String) {
    let text = format!("flush ruleset\n{}", nft(&["list", "ruleset"]));
    // SAFETY: gettid has no preconditions.
    let path = std::env::temp_dir().join(format!(
        "mesh-host-{}-{}-{name}.nft",
        std::process::id(),
        unsafe { libc::gettid() }
    ));
    std::fs::write(&path, &text).unwrap();
    let (ok, _, stderr) = nft_try(&["-f", path.to_str().unwrap()]);
    std::fs::remove_file(&path).unwrap();
    (ok, stderr, text)
}

#[test]
fn the_plain_guard_is_saved_and_reloaded_by_nft_and_reads_back_unchanged() {
    in_fresh_netns();
    let mut s = NfSocket::open().unwrap();
    let r = guard::ensure(&mut s, &spec()).unwrap();
    assert_eq!((r.table, r.changed), (GuardTable::Created, true));
    let listing = nft(&["list", "table", "inet", MESH_TABLE]);
    assert_eq!(
        listing,
        "table inet mesh_host {\n\
         \tchain guard {\n\
         \t\ttype filter hook prerouting priority mangle; policy accept;\n\
         \t\tiifname != \"lo\" iifname != \"mesh0\" fib daddr type local tcp dport 5432 drop comment \"mesh-host:guard/store/tcp/5432\"\n\
         \t\tiifname \"mesh0\" ip saddr != 10.77.0.0/24 fib daddr type local tcp dport 5432 drop comment \"mesh-host:guard/store/tcp/5432/mesh0/ipv4-beyond-10.77.0.0/24\"\n\
         \t\tiifname \"mesh0\" ip6 saddr != fd77::/64 fib daddr type local tcp dport 5432 drop comment \"mesh-host:guard/store/tcp/5432/mesh0/ipv6-beyond-fd77::/64\"\n\
         \t\tiifname != \"lo\" iifname != \"mesh0\" fib daddr type local tcp dport 15672 drop comment \"mesh-host:guard/broker-management/tcp/15672\"\n\
         \t\tiifname \"mesh0\" ip saddr != 10.77.0.0/24 fib daddr type local tcp dport 15672 drop comment \"mesh-host:guard/broker-management/tcp/15672/mesh0/ipv4-beyond-10.77.0.0/24\"\n\
         \t\tiifname \"mesh0\" ip6 saddr != fd77::/64 fib daddr type local tcp dport 15672 drop comment \"mesh-host:guard/broker-management/tcp/15672/mesh0/ipv6-beyond-fd77::/64\"\n\
         \t}\n\
         \n\
         \tchain guard_input {\n\
         \t\ttype filter hook input priority mangle; policy accept;\n\
         \t\tiifname != \"lo\" iifname != \"mesh0\" tcp dport 5432 drop comment \"mesh-host:guard/store/tcp/5432/input\"\n\
         \t\tiifname \"mesh0\" ip saddr != 10.77.0.0/24 tcp dport 5432 drop comment \"mesh-host:guard/store/tcp/5432/mesh0/ipv4-beyond-10.77.0.0/24/input\"\n\
         \t\tiifname \"mesh0\" ip6 saddr != fd77::/64 tcp dport 5432 drop comment \"mesh-host:guard/store/tcp/5432/mesh0/ipv6-beyond-fd77::/64/input\"\n\
         \t\tiifname != \"lo\" iifname != \"mesh0\" tcp dport 15672 drop comment \"mesh-host:guard/broker-management/tcp/15672/input\"\n\
         \t\tiifname \"mesh0\" ip saddr != 10.77.0.0/24 tcp dport 15672 drop comment \"mesh-host:guard/broker-management/tcp/15672/mesh0/ipv4-beyond-10.77.0.0/24/input\"\n\
         \t\tiifname \"mesh0\" ip6 saddr != fd77::/64 tcp dport 15672 drop comment \"mesh-host:guard/broker-management/tcp/15672/mesh0/ipv6-beyond-fd77::/64/input\"\n\
         \t}\n\
         \n\
         \tchain guard_forward {\n\
         \t\ttype filter hook forward priority mangle; policy accept;\n\
         \t}\n\
         }\n"
    );
    let (ok, stderr, text) = save_and_reload("plain");
    assert!(ok, "{stderr}\n{text}");
    // What nft wrote from the text is, expression for expression, what the guard writes.
    let r = guard::ensure(&mut s, &spec()).unwrap();
    assert_eq!((r.table, r.changed), (GuardTable::Present, false));
    let st = guard::status(&mut s).unwrap();
    assert!(st.present && st.plain && !st.owned && !st.orphan, "{st:?}");
}

#[test]
fn an_orphaned_table_is_replaced_in_one_transaction() {
    in_fresh_netns();
    // An earlier version's guard: owned and persistent, its holder gone.
    let mut old = NfSocket::open().unwrap();
    assert_eq!(
        old.claim_table(Family::Inet, MESH_TABLE).unwrap(),
        Claim::Created
    );
    drop(old);
    let mut s = NfSocket::open().unwrap();
    // The kernel releases a closed socket's tables from a work queue: an instant later.
    let released = std::time::Instant::now();
    while !guard::status(&mut s).unwrap().orphan {
        assert!(
            released.elapsed() < std::time::Duration::from_secs(2),
            "the table never became an orphan"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // The measured fact behind the plain table: nft 1.0.6 cannot load its own listing of it.
    let (ok, stderr, text) = save_and_reload("orphan");
    assert!(!ok, "an orphan's listing loaded:\n{text}");
    assert!(text.contains("\tflags \n"), "{text}");
    assert!(stderr.contains("syntax error"), "{stderr}");

    let mut m = NfMonitor::open().unwrap();
    let r = guard::ensure(&mut s, &spec()).unwrap();
    assert_eq!(
        (r.table, r.changed),
        (GuardTable::Replaced(OldTable::Orphaned), true)
    );
    // Every change before the one NEWGEN that closes the transaction: the old table deleted,
    // the plain one, its three chains and the twelve refusals created (each port from elsewhere,
    // and from the private interface beyond its range in each family, at prerouting and input).
    let mut events = Vec::new();
    loop {
        match m.next_event(Some(Duration::from_secs(5))).unwrap() {
            Some(Event::NewGen(_)) => break,
            Some(e) => events.push(e),
            None => panic!("no NEWGEN within 5 s; got {events:#?}"),
        }
    }
    let del = events
        .iter()
        .position(|e| matches!(e, Event::DelTable(t) if t.name == MESH_TABLE))
        .expect("the old table deleted");
    let new = events
        .iter()
        .position(|e| matches!(e, Event::NewTable(t) if t.name == MESH_TABLE))
        .expect("the plain table created");
    assert!(del < new, "{events:#?}");
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e, Event::NewRule(_)))
            .count(),
        12,
        "{events:#?}"
    );
    let st = guard::status(&mut s).unwrap();
    assert!(st.plain && st.rules.len() == 12, "{st:?}");
    let (ok, stderr, text) = save_and_reload("replaced");
    assert!(ok, "{stderr}\n{text}");
}

#[test]
fn a_table_held_by_another_live_socket_is_left_to_it_and_one_held_here_is_replaced() {
    in_fresh_netns();
    let mut holder = NfSocket::open().unwrap();
    holder.claim_table(Family::Inet, MESH_TABLE).unwrap();
    // The measured fact: a listing with a live owner's table does not load again at all.
    let (ok, stderr, text) = save_and_reload("owned");
    assert!(!ok, "{text}");
    assert!(
        text.contains("# progname") && text.contains("flags owner"),
        "{text}"
    );
    assert!(stderr.contains("Operation not permitted"), "{stderr}");

    let mut s = NfSocket::open().unwrap();
    match guard::ensure(&mut s, &spec()) {
        Err(Error::Unsupported { reason }) => assert!(
            reason.contains(&format!("held by netlink port {}", holder.portid())),
            "{reason}"
        ),
        other => panic!("expected the holder named, got {other:?}"),
    }
    assert_eq!(guard::status(&mut s).unwrap().owner, Some(holder.portid()));

    // The same socket that owns it (as a process of an earlier version would) replaces it.
    let r = guard::ensure(&mut holder, &spec()).unwrap();
    assert_eq!(r.table, GuardTable::Replaced(OldTable::OwnedHere));
    let st = guard::status(&mut s).unwrap();
    assert!(st.plain && !st.owned && st.owner.is_none(), "{st:?}");
}

#[test]
fn the_status_is_the_guards_rules_not_the_tables_name() {
    in_fresh_netns();
    let mut s = NfSocket::open().unwrap();
    guard::ensure(&mut s, &spec()).unwrap();
    let st = guard::status(&mut s).unwrap();
    assert!(st.present && st.table, "{st:?}");
    assert_eq!(st.chains, ["guard", "guard_input", "guard_forward"]);
    assert_eq!(st.rules.len(), 12);
    // What converge leaves: the guard's chains gone, the table holding another chain (the
    // derived filter's input) with a rule.
    nft(&["add chain inet mesh_host input { type filter hook input priority 0; policy drop; }"]);
    nft(&["add rule inet mesh_host input tcp dport 22 accept"]);
    for chain in ["guard", "guard_input", "guard_forward"] {
        nft(&["delete", "chain", "inet", MESH_TABLE, chain]);
    }
    let st = guard::status(&mut s).unwrap();
    assert!(!st.present && st.table && st.plain, "{st:?}");
    assert!(st.chains.is_empty() && st.rules.is_empty(), "{st:?}");
    assert_eq!(st.others, [("input".to_string(), 1)]);
    // One chain of the three back, empty: still no guard.
    nft(&[
        "add chain inet mesh_host guard { type filter hook prerouting priority -150; policy accept; }",
    ]);
    let st = guard::status(&mut s).unwrap();
    assert!(!st.present, "{st:?}");
    assert_eq!(st.chains, ["guard"]);
}
