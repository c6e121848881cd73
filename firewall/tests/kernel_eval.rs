//! The evaluator on rulesets loaded into a fresh namespace's kernel with `nft -f` and
//! iptables-nft, read back over netlink with every set's elements: the shapes that broke
//! shape-based placement (Arch's stock ruleset, the nftables wiki's server, the adversarial
//! pass of issue 20). The corpus suite proves the same answers against real connections.

mod common;

use common::{in_fresh_netns, ip, nft_load, run_ok};
use firewall::eval::{Addrs, Conn, Fam, Fate, Model, Placement, Refusal, Snapshot};
use firewall::NfSocket;
use std::net::IpAddr;

fn model() -> Model {
    let mut s = NfSocket::open().unwrap();
    Model::new(&Snapshot::read(&mut s).unwrap())
}

fn conn(fam: Fam, port: u16) -> Conn {
    let mut c = Conn::incoming(fam, 6, port, "eth0");
    c.iif_index = Some(2);
    c
}

fn fate(m: &Model, fam: Fam, port: u16, from: &str) -> Fate {
    let a = m.evaluate(&conn(fam, port), &Addrs::all(fam));
    a.fate_of(from.parse::<IpAddr>().unwrap()).unwrap().clone()
}

fn iptables(args: &[&str]) {
    run_ok("iptables-nft", args);
}

const ARCH: &str = r#"flush ruleset
table inet filter {
  chain input {
    type filter hook input priority filter; policy drop;
    ct state invalid drop comment "early drop of invalid connections"
    ct state {established, related} accept comment "allow tracked connections"
    iif lo accept comment "allow from loopback"
    ip protocol icmp accept comment "allow icmp"
    meta l4proto ipv6-icmp accept comment "allow icmp v6"
    tcp dport ssh accept comment "allow sshd"
    pkttype host limit rate 5/second counter reject with icmpx type admin-prohibited
    counter
  }
  chain forward {
    type filter hook forward priority filter; policy drop;
  }
}
"#;

#[test]
fn arch_s_stock_ruleset_places_the_opening_before_the_rate_limited_reject() {
    in_fresh_netns();
    nft_load(ARCH);
    let m = model();
    assert_eq!(fate(&m, Fam::V4, 22, "192.0.2.1"), Fate::Admitted);
    match fate(&m, Fam::V4, 9000, "192.0.2.1") {
        Fate::NotAdmitted { by } => assert!(by.handle.is_some(), "the reject decides: {by}"),
        f => panic!("{f:?}"),
    }
    let p = m
        .place(
            "inet filter",
            "input",
            &conn(Fam::V6, 9000),
            &Addrs::all(Fam::V6),
        )
        .unwrap();
    // Eight rules: the reject is the seventh (index 6).
    assert!(
        matches!(&p, Placement::At { chain, index: Some(6), .. } if chain == "input"),
        "{p:?}"
    );
    // Written there, the opening is admitted.
    nft_load("insert rule inet filter input handle 8 tcp dport 9000 accept comment \"x\"\n");
    let listed = common::nft(&["-a", "list", "chain", "inet", "filter", "input"]);
    assert!(listed.contains("tcp dport 9000 accept"), "{listed}");
}

const WIKI_SERVER: &str = r#"flush ruleset
table inet firewall {
  chain inbound_ipv4 {
    icmp type echo-request limit rate 5/second accept
  }
  chain inbound_ipv6 {
    icmpv6 type { nd-neighbor-solicit, nd-router-advert, nd-neighbor-advert } accept
    icmpv6 type echo-request limit rate 5/second accept
  }
  chain inbound {
    type filter hook input priority 0; policy drop;
    ct state vmap { established : accept, related : accept, invalid : drop }
    iifname lo accept
    meta protocol vmap { ip : jump inbound_ipv4, ip6 : jump inbound_ipv6 }
    tcp dport { 22, 80, 443 } accept
  }
  chain forward {
    type filter hook forward priority 0; policy drop;
  }
}
"#;

#[test]
fn the_wiki_s_server_ruleset_is_walked_through_its_verdict_maps() {
    in_fresh_netns();
    nft_load(WIKI_SERVER);
    let m = model();
    for fam in [Fam::V4, Fam::V6] {
        let from = if fam == Fam::V4 {
            "192.0.2.1"
        } else {
            "2001:db8::1"
        };
        assert_eq!(fate(&m, fam, 443, from), Fate::Admitted, "{fam:?}");
        assert!(
            matches!(fate(&m, fam, 9000, from), Fate::NotAdmitted { .. }),
            "{fam:?}"
        );
        let p = m.place(
            "inet firewall",
            "inbound",
            &conn(fam, 9000),
            &Addrs::all(fam),
        );
        assert!(
            matches!(&p, Some(Placement::At { chain, index: None, .. }) if chain == "inbound"),
            "{p:?}"
        );
    }
    // With the opening's rule at the end of the chain, the walk admits it.
    nft_load("add rule inet firewall inbound tcp dport 9000 accept\n");
    assert_eq!(fate(&model(), Fam::V4, 9000, "192.0.2.1"), Fate::Admitted);
}

#[test]
fn ports_refused_by_a_vmap_a_set_or_a_range_are_the_operator_s_word() {
    in_fresh_netns();
    nft_load(
        r#"flush ruleset
table inet f {
  set closed { type inet_service; elements = { 7000, 7001 } }
  chain input {
    type filter hook input priority 0; policy accept;
    tcp dport vmap { 9000 : drop, 22 : accept }
    tcp dport @closed drop
    tcp dport 9100-9110 drop
  }
}
"#,
    );
    let m = model();
    for port in [9000, 7001, 9105] {
        assert!(
            matches!(
                fate(&m, Fam::V4, port, "192.0.2.1"),
                Fate::Refused {
                    why: Refusal::Port,
                    ..
                }
            ),
            "port {port}"
        );
    }
    assert_eq!(fate(&m, Fam::V4, 9111, "192.0.2.1"), Fate::Admitted);
}

#[test]
fn the_adversarial_shapes_are_read_as_the_kernel_runs_them() {
    in_fresh_netns();
    nft_load(
        r#"flush ruleset
table inet a {
  chain wan { tcp dport 22 accept; drop; }
  chain input {
    type filter hook input priority 0; policy accept;
    iifname "eth0" jump wan
  }
}
"#,
    );
    assert!(matches!(
        fate(&model(), Fam::V4, 9000, "192.0.2.1"),
        Fate::NotAdmitted { .. }
    ));
    let p = model().place(
        "inet a",
        "input",
        &conn(Fam::V4, 9000),
        &Addrs::all(Fam::V4),
    );
    assert!(
        matches!(&p, Some(Placement::At { chain, index: Some(1), .. }) if chain == "wan"),
        "{p:?}"
    );
    for shape in [
        "tcp dport != 22 tcp dport != 8080 drop",
        "tcp dport != { 22, 8080 } drop",
        "tcp flags syn / syn,ack drop",
    ] {
        nft_load(&format!(
            "flush ruleset\ntable inet b {{ chain input {{ type filter hook input priority 0; policy accept; {shape}; }}; }}\n"
        ));
        assert!(
            matches!(
                fate(&model(), Fam::V4, 9000, "192.0.2.1"),
                Fate::NotAdmitted { .. }
            ),
            "{shape}"
        );
    }
    // A mark set in prerouting for the port, dropped at input.
    nft_load(
        r#"flush ruleset
table inet c {
  chain pre { type filter hook prerouting priority -150; policy accept; tcp dport 9000 meta mark set 0x66; }
  chain input { type filter hook input priority 0; policy accept; meta mark 0x66 drop; }
}
"#,
    );
    // The mark was set because of the port: its drop is the operator refusing the port.
    assert!(matches!(
        fate(&model(), Fam::V4, 9000, "192.0.2.1"),
        Fate::Refused {
            why: Refusal::Port,
            ..
        }
    ));
    assert_eq!(fate(&model(), Fam::V4, 9001, "192.0.2.1"), Fate::Admitted);
    // Nine unconditional jumps, the catch-all at the bottom.
    let mut nine = String::from("flush ruleset\ntable inet d {\n");
    for i in 1..=9 {
        nine += &format!("  chain c{i} {{ jump c{}; }}\n", i + 1);
    }
    nine += "  chain c10 { drop; }\n  chain input { type filter hook input priority 0; policy accept; jump c1; }\n}\n";
    nft_load(&nine);
    let p = model().place(
        "inet d",
        "input",
        &conn(Fam::V4, 9000),
        &Addrs::all(Fam::V4),
    );
    assert!(
        matches!(&p, Some(Placement::At { chain, index: Some(0), .. }) if chain == "c10"),
        "{p:?}"
    );
}

#[test]
fn a_ban_splits_the_sources_and_stays_first() {
    in_fresh_netns();
    nft_load(
        r#"flush ruleset
table ip crowdsec {
  set crowdsec-blacklists { type ipv4_addr; flags timeout; elements = { 10.200.1.2 timeout 1h } }
  chain crowdsec-chain { type filter hook input priority -10; policy accept; ip saddr @crowdsec-blacklists drop; }
}
table inet filter {
  set banned { type ipv4_addr; flags interval; elements = { 198.51.100.0/24 } }
  chain input {
    type filter hook input priority 0; policy drop;
    ip saddr @banned drop
    ip saddr 10.200.3.0/24 jump wan
    tcp dport 9000 accept
  }
  chain wan { drop; }
}
"#,
    );
    let m = model();
    let a = m.evaluate(&conn(Fam::V4, 9000), &Addrs::all(Fam::V4));
    for banned in ["10.200.1.2", "198.51.100.77", "10.200.3.9"] {
        assert!(
            matches!(
                a.fate_of(banned.parse().unwrap()),
                Some(Fate::Refused {
                    why: Refusal::Ban,
                    ..
                })
            ),
            "{banned}: {a:?}"
        );
    }
    assert_eq!(
        a.fate_of("192.0.2.1".parse().unwrap()),
        Some(&Fate::Admitted)
    );
    assert_eq!(a.summary(), &Fate::Admitted);
    assert_eq!(a.exceptions().count(), 3);
}

#[test]
fn iptables_nft_s_x_tables_matches_are_decoded() {
    in_fresh_netns();
    iptables(&["-P", "INPUT", "ACCEPT"]);
    iptables(&[
        "-A",
        "INPUT",
        "-p",
        "tcp",
        "-m",
        "multiport",
        "!",
        "--dports",
        "22,8080",
        "-j",
        "DROP",
    ]);
    let m = model();
    assert!(matches!(
        fate(&m, Fam::V4, 9000, "192.0.2.1"),
        Fate::NotAdmitted { .. }
    ));
    assert_eq!(fate(&m, Fam::V4, 8080, "192.0.2.1"), Fate::Admitted);
    iptables(&["-F", "INPUT"]);
    iptables(&[
        "-A", "INPUT", "-p", "tcp", "!", "--dport", "22", "-j", "REJECT",
    ]);
    assert!(matches!(
        fate(&model(), Fam::V4, 9000, "192.0.2.1"),
        Fate::NotAdmitted { .. }
    ));
    iptables(&["-F", "INPUT"]);
    iptables(&["-A", "INPUT", "-p", "tcp", "--syn", "-j", "DROP"]);
    assert!(matches!(
        fate(&model(), Fam::V4, 9000, "192.0.2.1"),
        Fate::NotAdmitted { .. }
    ));
    iptables(&["-F", "INPUT"]);
    iptables(&["-N", "WAN"]);
    iptables(&["-A", "WAN", "-j", "DROP"]);
    iptables(&["-A", "INPUT", "-i", "eth0", "-j", "WAN"]);
    iptables(&[
        "-A",
        "INPUT",
        "-m",
        "conntrack",
        "--ctstate",
        "NEW",
        "-p",
        "tcp",
        "--dport",
        "9000",
        "-j",
        "ACCEPT",
    ]);
    let m = model();
    assert!(matches!(
        fate(&m, Fam::V4, 9000, "192.0.2.1"),
        Fate::NotAdmitted { .. }
    ));
    let mut other = conn(Fam::V4, 9000);
    other.iif = "eth1".into();
    let a = m.evaluate(&other, &Addrs::all(Fam::V4));
    assert_eq!(a.summary(), &Fate::Admitted, "{a:?}");
}

/// A forwarded opening as iptables-nft stores `-m conntrack --ctstate DNAT --ctorigdstport P` in
/// DOCKER-USER (an x_tables conntrack match of revision 3, whose ports are a range in host
/// order): admitted before the drop that follows it, and only for its own port.
#[test]
fn an_iptables_nft_conntrack_original_port_match_admits_its_port_before_the_drop() {
    in_fresh_netns();
    iptables(&["-N", "DOCKER-USER"]);
    iptables(&["-P", "FORWARD", "DROP"]);
    iptables(&["-A", "FORWARD", "-j", "DOCKER-USER"]);
    iptables(&[
        "-A",
        "DOCKER-USER",
        "-p",
        "tcp",
        "-m",
        "conntrack",
        "--ctstate",
        "DNAT",
        "--ctorigdstport",
        "8082",
        "-m",
        "comment",
        "--comment",
        "mesh-host:web/http#fc31b24a",
        "-j",
        "ACCEPT",
    ]);
    iptables(&["-A", "DOCKER-USER", "-i", "eth0", "-j", "DROP"]);
    let m = model();
    let forwarded = |port: u16| {
        let mut c = Conn::incoming(Fam::V4, 6, port, "eth0");
        c.path = firewall::eval::Path::Forwarded;
        c.to_port = Some(80);
        c.iif_index = Some(2);
        c.oif = Some("docker0".into());
        c.daddr = Some("172.17.0.2".parse().unwrap());
        let a = m.evaluate(&c, &Addrs::all(Fam::V4));
        a.fate_of("192.0.2.1".parse::<IpAddr>().unwrap())
            .unwrap()
            .clone()
    };
    assert_eq!(forwarded(8082), Fate::Admitted);
    match forwarded(8083) {
        Fate::NotAdmitted { by } => assert!(by.text.contains("drop"), "{by}"),
        f => panic!("another port is not admitted by the opening: {f:?}"),
    }
}

/// Interfaces are told apart by what the kernel and the runtime say, never by their names: a
/// bridge named like a runtime's (`br-lan`, a router's LAN) and a veth with an address of its
/// own are ways in; loopback (by its flag), an interface with only a link-local address (a
/// bridge's port, a runtime's veth) and a bridge the runtime reports as its own are not. An
/// incoming opening from anywhere is asked about on exactly the ways in.
#[test]
fn interfaces_are_ways_in_by_what_the_kernel_and_the_runtime_say_not_by_name() {
    in_fresh_netns();
    ip(&["link", "set", "lo", "up"]);
    ip(&["link", "add", "br-lan", "type", "bridge"]);
    ip(&["address", "add", "192.168.1.1/24", "dev", "br-lan"]);
    ip(&["link", "set", "br-lan", "up"]);
    ip(&[
        "link", "add", "veth0", "type", "veth", "peer", "name", "veth1",
    ]);
    ip(&["address", "add", "10.9.0.1/24", "dev", "veth0"]);
    ip(&["link", "set", "veth0", "up"]);
    ip(&["link", "set", "veth1", "master", "br-lan"]);
    ip(&["link", "set", "veth1", "up"]);
    ip(&["link", "add", "docker0", "type", "bridge"]);
    ip(&["address", "add", "172.17.0.1/16", "dev", "docker0"]);
    ip(&["link", "set", "docker0", "up"]);
    let mut ifaces = firewall::eval::interfaces();
    let way_in = |ifaces: &[firewall::eval::Iface]| {
        ifaces
            .iter()
            .map(|i| (i.name.clone(), i.way_in))
            .collect::<std::collections::BTreeMap<_, _>>()
    };
    assert_eq!(
        way_in(&ifaces),
        [
            ("br-lan", true),
            ("docker0", true),
            ("lo", false),
            ("veth0", true),
            ("veth1", false),
        ]
        .into_iter()
        .map(|(n, w)| (n.to_string(), w))
        .collect(),
        "{ifaces:?}"
    );
    firewall::eval::mark_runtime_bridges(&mut ifaces, &["docker0".to_string()]);
    let o = firewall::Opening {
        id: "app/port".into(),
        port: 8080,
        proto: firewall::Proto::Tcp,
        from: firewall::opening::From::Anywhere,
        path: firewall::Path::Incoming,
    };
    let arrivals: Vec<String> = firewall::eval::ways(&o, Fam::V4, &ifaces, &[])
        .into_iter()
        .map(|w| w.conn.iif)
        .collect();
    assert_eq!(arrivals, ["br-lan", "veth0"]);
}
