//! An opening's verdict said per family and interface on rulesets loaded into a fresh namespace's
//! kernel (issue 30, point 4): an early `netdev` ingress refusal of the port on the outside
//! interface only is *refused on eth0*, not "present, except from anywhere", while the
//! LAN interface admits it; a ban in the same chain stays an exception named with its interface;
//! and `explain` names for each part the rule that decides it, not the first part's.

mod common;

use common::{in_fresh_netns, ip, nft_load};
use firewall::eval::{Addrs, Conn, Fam, Fate, Model, Refusal, Snapshot};
use firewall::opening::From;
use firewall::{NfSocket, Opening, Path, Proto};
use std::net::IpAddr;

fn model() -> Model {
    let mut s = NfSocket::open().unwrap();
    Model::new(&Snapshot::read(&mut s).unwrap())
}

fn opening(port: u16) -> Opening {
    Opening {
        id: format!("app/{port}"),
        port,
        proto: Proto::Tcp,
        from: From::Anywhere,
        path: Path::Incoming,
    }
}

/// `eth0` (the outside) and `eth1` (the LAN), each a veth with addresses of both families (its
/// peer, with none of its own, is no way in).
fn two_ways_in() {
    ip(&["link", "set", "lo", "up"]);
    for (name, peer, v4, v6) in [
        ("eth0", "eth0p", "203.0.113.1/24", "2001:db8:1::1/64"),
        ("eth1", "eth1p", "10.0.0.1/24", "fd00:1::1/64"),
    ] {
        ip(&["link", "add", name, "type", "veth", "peer", "name", peer]);
        ip(&["address", "add", v4, "dev", name]);
        ip(&["address", "add", v6, "dev", name, "nodad"]);
        ip(&["link", "set", name, "up"]);
        ip(&["link", "set", peer, "up"]);
    }
}

const INGRESS_ON_ETH0: &str = r#"flush ruleset
table netdev filter {
	chain ingress_eth0 {
		type filter hook ingress device "eth0" priority -500; policy accept;
		ip saddr 198.51.100.7 drop
		tcp dport 9000 drop
	}
}
table inet filter {
	chain input {
		type filter hook input priority filter; policy drop;
		ct state established,related accept
		iif "lo" accept
		tcp dport { 9000, 9001 } accept
	}
}
"#;

#[test]
fn a_netdev_ingress_refusal_on_the_outside_interface_is_refused_there_not_present() {
    in_fresh_netns();
    two_ways_in();
    nft_load(INGRESS_ON_ETH0);
    let ifaces = firewall::eval::interfaces();
    let ways: Vec<&str> = ifaces
        .iter()
        .filter(|i| i.outside())
        .map(|i| i.name.as_str())
        .collect();
    assert_eq!(ways, ["eth0", "eth1"], "{ifaces:?}");
    let m = model();

    // The port refused on eth0 in both families (the banned source by its ban, ahead of it);
    // eth1 admits it.
    let banned = Addrs::one("198.51.100.7".parse().unwrap());
    let v = m.verdict(&opening(9000), &ifaces, &[]);
    for p in &v.parts {
        match p.iif.as_str() {
            "eth0" => match &p.fate {
                Fate::Refused { by, why } => {
                    assert_eq!(by.place(), "netdev filter ingress_eth0", "{v:#?}");
                    assert_eq!(*why == Refusal::Ban, p.sources == banned, "{v:#?}");
                }
                f => panic!("eth0 ({}) is {f:?}: {v:#?}", p.fam.name()),
            },
            "eth1" => assert_eq!(p.fate, Fate::Admitted, "{v:#?}"),
            other => panic!("a part arriving on {other}: {v:#?}"),
        }
    }
    assert_eq!(v.state(), "refused", "{v:#?}");
    let text = v.describe();
    assert!(
        text.starts_with(
            "REFUSED on eth0 (ipv4, ipv6) by the operator's rule netdev filter ingress_eth0: "
        ) && text.contains(
            "th dport 9000 drop, which names the port; refused from \
                               198.51.100.7/32 on eth0 (ipv4) by the operator's rule netdev \
                               filter ingress_eth0: "
        ) && text.ends_with("(a ban of these sources); admitted on eth1 (ipv4, ipv6)")
            && !text.contains("present")
            && !text.contains("anywhere"),
        "{text}"
    );
    let d = v
        .decider()
        .expect("a refused verdict names its deciding part");
    assert_eq!(d.iif, "eth0");
    assert_eq!(
        d.fate.by().map(|b| b.place()).as_deref(),
        Some("netdev filter ingress_eth0")
    );

    // 9001: only the ban, on eth0 in ipv4: present, the ban an exception on that interface.
    let v = m.verdict(&opening(9001), &ifaces, &[]);
    assert_eq!(v.state(), "present", "{v:#?}");
    let text = v.describe();
    assert!(
        text.starts_with(
            "present, except from 198.51.100.7/32 on eth0 (refused by the operator's rule netdev \
             filter ingress_eth0: "
        ) && text.ends_with("(a ban of these sources))")
            && !text.contains("; "),
        "{text}"
    );
    assert_eq!(v.decider(), None);
}

#[test]
fn explain_names_for_each_part_its_own_deciding_rule_on_a_listed_ruleset() {
    // The panel's shape from issue 30: a DNS reply rule for one source ahead of the port's accept.
    in_fresh_netns();
    ip(&["link", "set", "lo", "up"]);
    nft_load(
        r#"flush ruleset
table inet filter {
	chain input {
		type filter hook input priority filter; policy drop;
		ip saddr 8.8.8.8 th sport 53 accept
		tcp dport 9000 accept
	}
}
"#,
    );
    let m = model();
    let mut conn = Conn::incoming(Fam::V4, 6, 9000, "eth0");
    conn.iif_index = Some(2);
    let a = m.explain(&conn, &Addrs::all(Fam::V4));
    let dns: IpAddr = "8.8.8.8".parse().unwrap();
    let other: IpAddr = "192.0.2.1".parse().unwrap();
    assert!(a.parts.iter().all(|p| p.fate == Fate::Admitted), "{a:#?}");
    let theirs = a
        .parts
        .iter()
        .find(|p| p.sources.contains(other))
        .expect("a part holds 192.0.2.1");
    assert!(
        theirs.trace.iter().any(|t| t.contains("dport 9000"))
            && !theirs.trace.iter().any(|t| t.contains("8.8.8.8")),
        "{theirs:#?}"
    );
    // The one source's own accept is named, on a part of that source alone; so is every walk
    // that meets its rule.
    let named: Vec<_> = a
        .parts
        .iter()
        .filter(|p| p.trace.iter().any(|t| t.contains("8.8.8.8")))
        .collect();
    assert!(
        named.iter().any(|p| p
            .trace
            .last()
            .is_some_and(|t| t.contains("8.8.8.8") && t.ends_with("→ accept"))),
        "{a:#?}"
    );
    for p in named {
        assert_eq!(p.sources, Addrs::one(dns), "{a:#?}");
    }
}
