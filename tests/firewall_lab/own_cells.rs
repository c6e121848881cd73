//! An opening changes only itself (issue 30): every write is checked against the whole ruleset
//! before it is sent, so a rule that would land in a chain shared with the forward path, or in a
//! log-and-drop chain that bans and the catch-all share, is put where it admits only its own
//! connections — for this machine's own addresses, or before the jump of the catch-all — and
//! probed: the opening answers from outside, a host routed behind the node stays refused on the
//! same port, a banned source gets no answer.

use super::*;
use lab::addr::{PEER_PUBLIC_V4, PEER_PUBLIC_V6};
use std::net::{Ipv4Addr, Ipv6Addr};

/// The LAN behind the node (documentation ranges): the node's side, then the LAN host's.
const LAN_NODE_V4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
const LAN_HOST_V4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 2);
const LAN_NODE_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x50, 0, 0, 0, 0, 1);
const LAN_HOST_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x50, 0, 0, 0, 0, 2);

/// A router's zone firewall as fw4 renders it: input and forward from the wan zone both end in
/// `reject_from_wan`, which jumps to the one `handle_reject` chain.
const ROUTER_NFT: &str = "flush ruleset
table inet fw4 {
	chain input {
		type filter hook input priority filter; policy drop;
		iif \"lo\" accept
		ct state established,related accept
		iifname \"eth0\" jump input_wan
		iifname \"lan0\" jump input_lan
	}
	chain forward {
		type filter hook forward priority filter; policy drop;
		ct state established,related accept
		iifname \"eth0\" jump forward_wan
		iifname \"lan0\" jump forward_lan
	}
	chain input_wan {
		meta l4proto ipv6-icmp accept
		meta l4proto icmp accept
		tcp dport 22 accept
		jump reject_from_wan
	}
	chain forward_wan {
		meta l4proto ipv6-icmp accept
		jump reject_from_wan
	}
	chain input_lan {
		accept
	}
	chain forward_lan {
		accept
	}
	chain reject_from_wan {
		iifname \"eth0\" counter jump handle_reject
	}
	chain handle_reject {
		meta l4proto tcp reject with tcp reset
		reject
	}
}
";

/// The same shape in iptables: INPUT and FORWARD both end in one shared reject chain.
fn router_xt(program: &str) -> Vec<Vec<String>> {
    let icmp = if program.starts_with("ip6") {
        "ipv6-icmp"
    } else {
        "icmp"
    };
    let rules: Vec<Vec<&str>> = vec![
        vec!["-N", "handle_reject"],
        vec![
            "-A",
            "handle_reject",
            "-p",
            "tcp",
            "-j",
            "REJECT",
            "--reject-with",
            "tcp-reset",
        ],
        vec!["-A", "handle_reject", "-j", "REJECT"],
        vec!["-N", "reject_from_wan"],
        vec!["-A", "reject_from_wan", "-i", "eth0", "-j", "handle_reject"],
        vec!["-A", "INPUT", "-i", "lo", "-j", "ACCEPT"],
        vec![
            "-A",
            "INPUT",
            "-m",
            "conntrack",
            "--ctstate",
            "RELATED,ESTABLISHED",
            "-j",
            "ACCEPT",
        ],
        vec!["-A", "INPUT", "-p", icmp, "-j", "ACCEPT"],
        vec!["-A", "INPUT", "-p", "tcp", "--dport", "22", "-j", "ACCEPT"],
        vec!["-A", "INPUT", "-i", "lan0", "-j", "ACCEPT"],
        vec!["-A", "INPUT", "-j", "reject_from_wan"],
        vec![
            "-A",
            "FORWARD",
            "-m",
            "conntrack",
            "--ctstate",
            "RELATED,ESTABLISHED",
            "-j",
            "ACCEPT",
        ],
        vec!["-A", "FORWARD", "-p", icmp, "-j", "ACCEPT"],
        vec!["-A", "FORWARD", "-i", "lan0", "-j", "ACCEPT"],
        vec!["-A", "FORWARD", "-j", "reject_from_wan"],
    ];
    rules
        .into_iter()
        .map(|r| {
            let mut argv = vec![program.to_string(), "-w".to_string()];
            argv.extend(r.iter().map(|s| s.to_string()));
            argv
        })
        .collect()
}

/// A hosting panel with its "log dropped bans" setting: banned addresses and the final
/// catch-all both go to one log-and-drop chain (the peer's public addresses are banned).
fn panel_nft() -> String {
    format!(
        "flush ruleset
table inet panel {{
	set banned {{
		type ipv4_addr
		elements = {{ {PEER_PUBLIC_V4} }}
	}}
	set banned6 {{
		type ipv6_addr
		elements = {{ {PEER_PUBLIC_V6} }}
	}}
	chain input {{
		type filter hook input priority filter; policy accept;
		iif \"lo\" accept
		ct state established,related accept
		ip saddr @banned jump logdrop
		ip6 saddr @banned6 jump logdrop
		meta l4proto ipv6-icmp accept
		meta l4proto icmp accept
		tcp dport 22 accept
		jump logdrop
	}}
	chain logdrop {{
		log prefix \"panel drop: \"
		drop
	}}
}}
"
    )
}

/// The lab with a LAN host routed behind the node, listening on the opened port, and the
/// outside machine routing the LAN through the node.
fn with_lan(lab: &Lab, net: &Adoption) -> (Machine, lab::Process) {
    let node = &net.node;
    let lan = lab.machine("lan").expect("the LAN host's namespace");
    lab.veth(node, "lan0", &lan, "eth0").expect("the LAN link");
    node.add_address("lan0", LAN_NODE_V4.into(), 24).unwrap();
    node.add_address("lan0", LAN_NODE_V6.into(), 64).unwrap();
    lan.add_address("eth0", LAN_HOST_V4.into(), 24).unwrap();
    lan.add_address("eth0", LAN_HOST_V6.into(), 64).unwrap();
    lan.add_route(Ipv4Addr::UNSPECIFIED.into(), 0, LAN_NODE_V4.into())
        .unwrap();
    lan.add_route(Ipv6Addr::UNSPECIFIED.into(), 0, LAN_NODE_V6.into())
        .unwrap();
    node.set_sysctl("net/ipv4/ip_forward", "1").unwrap();
    node.set_sysctl("net/ipv6/conf/all/forwarding", "1")
        .unwrap();
    net.outside
        .add_route("198.51.100.0".parse().unwrap(), 24, NODE_PUBLIC_V4.into())
        .unwrap();
    net.outside
        .add_route("2001:db8:50::".parse().unwrap(), 64, NODE_PUBLIC_V6.into())
        .unwrap();
    let listener = lan.listen_tcp(OPENED).expect("the LAN host's service");
    (lan, listener)
}

/// No connection from `from` to any of `addrs`: the ban drops the source's packets, its IPv6
/// neighbour discovery too (so a probe may also end unreachable).
fn not_reached(from: &Machine, addrs: &[IpAddr], port: u16, why: &str) {
    for a in addrs {
        let got = from.probe_tcp(*a, port, ANSWER).expect("probe");
        assert!(
            !got.is_reached(),
            "{why}: {} -> [{a}]:{port} was reached",
            from.name()
        );
    }
}

fn lan_host() -> [IpAddr; 2] {
    [LAN_HOST_V4.into(), LAN_HOST_V6.into()]
}

/// Applies one opening of OPENED from anywhere, incoming, and says what the status says of it.
fn open_and_status(host: &Host) -> (Value, Value) {
    let report = host.apply(&declaration(&[opening("web", OPENED, "incoming")]));
    let status = host.status();
    (report, status)
}

fn router_case(load: impl FnOnce(&Machine, &Path)) {
    let lab = new_lab();
    let net = adoption(&lab);
    let node = &net.node;
    let (_lan, _service) = with_lan(&lab, &net);
    let _opened = node.listen_tcp(OPENED).expect("the node's service");
    load(node, lab.dir());
    // Refused both ways before: the router rejects from wan, to itself and forwarded.
    expect(
        &net.outside,
        &node_public(),
        OPENED,
        Probe::Refused,
        "the node, before",
    );
    expect(
        &net.outside,
        &lan_host(),
        OPENED,
        Probe::Refused,
        "the LAN host, before",
    );
    let host = Host::new(node);
    let (_report, status) = open_and_status(&host);
    expect(
        &net.outside,
        &node_public(),
        OPENED,
        Probe::Reached,
        "the node, opened",
    );
    expect(
        &net.outside,
        &lan_host(),
        OPENED,
        Probe::Refused,
        "the LAN host behind the node: an incoming opening opens no forwarding",
    );
    assert_eq!(status_verdict(&status, "web"), "present", "{status:#}");
    // A reconcile leaves the rule where the check put it: nothing is rewritten.
    let written = rules_now(node);
    assert!(written.contains("mesh-host:web#"), "{written}");
    host.reconcile();
    assert_eq!(rules_now(node), written, "the reconcile rewrote rules");
    expect(
        &net.outside,
        &lan_host(),
        OPENED,
        Probe::Refused,
        "after a reconcile",
    );
    expect(
        &net.outside,
        &node_public(),
        OPENED,
        Probe::Reached,
        "after a reconcile",
    );
}

/// Every rule of the node with its handle, counters left out (the probes move them).
fn rules_now(node: &Machine) -> String {
    let mut text = run_ok(node, &["nft", "-a", "list", "ruleset"]);
    for program in ["iptables-legacy-save", "ip6tables-legacy-save"] {
        text.push_str(&run_ok(node, &[program]));
    }
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let l = match l.find(" [") {
                Some(i) if l.starts_with(':') => &l[..i],
                _ => l,
            };
            match l.find("counter packets") {
                Some(i) => l[..i].to_string(),
                None => l.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn an_opening_in_a_routers_shared_reject_chain_opens_no_forwarding_nftables() {
    router_case(|node, dir| {
        load_nft(node, dir, "fw4.nft", ROUTER_NFT);
    });
}

#[test]
fn an_opening_in_a_routers_shared_reject_chain_opens_no_forwarding_iptables_legacy() {
    router_case(|node, _| {
        for program in ["iptables-legacy", "ip6tables-legacy"] {
            let argv = router_xt(program);
            for a in &argv {
                let a: Vec<&str> = a.iter().map(String::as_str).collect();
                run_ok(node, &a);
            }
            run_ok(node, &[program, "-w", "-P", "INPUT", "DROP"]);
            run_ok(node, &[program, "-w", "-P", "FORWARD", "DROP"]);
        }
    });
}

#[test]
fn an_opening_in_a_panels_log_and_drop_chain_keeps_the_ban() {
    let lab = new_lab();
    let net = adoption(&lab);
    let node = &net.node;
    let _opened = node.listen_tcp(OPENED).expect("the node's service");
    load_nft(node, lab.dir(), "panel.nft", &panel_nft());
    expect(
        &net.outside,
        &node_public(),
        OPENED,
        Probe::TimedOut,
        "before",
    );
    not_reached(&net.peer, &node_public(), OPENED, "banned, before");
    let host = Host::new(node);
    let (_report, status) = open_and_status(&host);
    expect(
        &net.outside,
        &node_public(),
        OPENED,
        Probe::Reached,
        "opened",
    );
    not_reached(
        &net.peer,
        &node_public(),
        OPENED,
        "the banned source: the opening is written after the ban",
    );
    assert_eq!(status_verdict(&status, "web"), "present", "{status:#}");
    let listing = run_ok(node, &["nft", "list", "chain", "inet", "panel", "logdrop"]);
    assert!(
        !listing.contains("mesh-host:"),
        "the opening went into the shared log-and-drop chain:\n{listing}"
    );
}
