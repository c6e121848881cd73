//! What the guard refuses, by where a packet goes and where it arrives, never by a name: traffic
//! the node routes to a LAN behind it is untouched; an operator's bridge named like a runtime's
//! (`br-lan`) is outside; a declared private interface that does not exist is said in the
//! briefing, and the guard still refuses everywhere else.

use super::*;
use std::net::{Ipv4Addr, Ipv6Addr};

/// The LAN behind the node (documentation ranges): the node's side, then the LAN host's.
const LAN_NODE_V4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
const LAN_HOST_V4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 2);
const LAN_NODE_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x50, 0, 0, 0, 0, 1);
const LAN_HOST_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x50, 0, 0, 0, 0, 2);

/// A found firewall on a router: its input chain drops by default but serves the store's port
/// (so only the guard keeps it from outside), its forward chain passes what it routes.
#[derive(Debug, Clone, Copy)]
enum Router {
    None,
    Nftables,
    Iptables(&'static str),
}

fn load_router(node: &Machine, dir: &Path, found: Router) {
    match found {
        Router::None => {}
        Router::Nftables => {
            load_nft(
                node,
                dir,
                "router.nft",
                &INET_INPUT_DROP.replace(
                    "tcp dport { 22, 8080 } accept",
                    "tcp dport { 22, 8080, 5432 } accept",
                ),
            );
        }
        Router::Iptables(variant) => {
            for family in ["iptables", "ip6tables"] {
                let program = format!("{family}-{variant}");
                run_all(node, &xt_input_drop(&program));
                run_ok(
                    node,
                    &[
                        &program, "-w", "-A", "INPUT", "-p", "tcp", "--dport", "5432", "-j",
                        "ACCEPT",
                    ],
                );
            }
        }
    }
}

#[test]
fn a_lan_the_node_routes_for_keeps_its_database_port_while_the_nodes_own_is_refused() {
    a_routed_lan_keeps_working(Router::None);
}

#[test]
fn behind_a_found_nftables_router_the_lan_keeps_its_database_port() {
    a_routed_lan_keeps_working(Router::Nftables);
}

#[test]
fn behind_a_found_iptables_nft_router_the_lan_keeps_its_database_port() {
    a_routed_lan_keeps_working(Router::Iptables("nft"));
}

#[test]
fn behind_a_found_iptables_legacy_router_the_lan_keeps_its_database_port() {
    a_routed_lan_keeps_working(Router::Iptables("legacy"));
}

fn a_routed_lan_keeps_working(found: Router) {
    let lab = new_lab();
    let net = adoption(&lab);
    let node = &net.node;
    load_router(node, lab.dir(), found);
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
    let _database = lan.listen_tcp(STORE).expect("the LAN's database");
    let _store = node.listen_tcp(STORE).expect("the node's store");
    let lan_host: [IpAddr; 2] = [LAN_HOST_V4.into(), LAN_HOST_V6.into()];
    let lan_side: [IpAddr; 2] = [LAN_NODE_V4.into(), LAN_NODE_V6.into()];
    // The found firewall serves the node's own store port: only the guard will refuse it.
    expect(
        &net.outside,
        &node_public(),
        STORE,
        Probe::Reached,
        "the node's store, before",
    );

    expect(
        &net.outside,
        &lan_host,
        STORE,
        Probe::Reached,
        "routed, no guard",
    );
    let host = Host::new(node);
    host.apply(&declaration(&[]));
    expect(
        &net.outside,
        &lan_host,
        STORE,
        Probe::Reached,
        "routed through the node with the guard in force",
    );
    expect(
        &net.outside,
        &node_public(),
        STORE,
        Probe::TimedOut,
        "the node's own store",
    );
    // Every address of the node is its own, the one on the LAN side too.
    expect(
        &net.outside,
        &lan_side,
        STORE,
        Probe::TimedOut,
        "the node's own address on the LAN side",
    );
}

#[test]
fn an_operators_bridge_named_like_a_runtimes_is_outside() {
    let lab = new_lab();
    let net = adoption(&lab);
    let node = &net.node;
    // The node's outside link in a plain bridge named as OpenWrt names its LAN bridge (Docker
    // names its own networks br-…), the public addresses moved onto the bridge.
    run_all(
        node,
        &[
            vec!["ip", "link", "add", "br-lan", "type", "bridge"],
            vec!["ip", "address", "flush", "dev", PUBLIC_IF],
            vec!["ip", "link", "set", PUBLIC_IF, "master", "br-lan"],
        ],
    );
    node.link_up("br-lan").unwrap();
    node.add_address("br-lan", NODE_PUBLIC_V4.into(), PUBLIC_V4_PREFIX)
        .unwrap();
    node.add_address("br-lan", NODE_PUBLIC_V6.into(), PUBLIC_V6_PREFIX)
        .unwrap();
    let _listeners: Vec<_> = [STORE, BROKER_MANAGEMENT, SERVED]
        .iter()
        .map(|p| node.listen_tcp(*p).expect("listener on the node"))
        .collect();
    let public = node_public();
    expect(
        &net.outside,
        &public,
        STORE,
        Probe::Reached,
        "over br-lan, no guard",
    );

    let host = Host::new(node);
    let report = host.apply(&declaration(&[]));
    for port in [STORE, BROKER_MANAGEMENT] {
        expect(&net.outside, &public, port, Probe::TimedOut, "over br-lan");
    }
    expect(
        &net.outside,
        &public,
        SERVED,
        Probe::Reached,
        "the guard refuses only its own ports",
    );
    let line = report["guard"].as_str().unwrap_or_default();
    assert!(
        line.contains(&format!(
            "except on lo and on {PRIVATE_IF} from {PRIVATE_V4_NET}/{PRIVATE_V4_PREFIX}, \
             {PRIVATE_V6_NET}/{PRIVATE_V6_PREFIX}, and no runtime bridge"
        )),
        "{report:#}"
    );
}

#[test]
fn a_declared_private_interface_that_does_not_exist_is_said_and_the_guard_still_refuses() {
    let lab = new_lab();
    let net = adoption(&lab);
    let node = &net.node;
    let _listeners: Vec<_> = [STORE, SERVED]
        .iter()
        .map(|p| node.listen_tcp(*p).expect("listener on the node"))
        .collect();
    let range = format!("{PRIVATE_V4_NET}/{PRIVATE_V4_PREFIX}");
    let mut decl = declaration(&[]);
    decl["settings"]["private_network"]["interface"] = json!("wg0");

    let host = Host::new(node);
    // The briefing says failed, so the apply exits 5, never 0.
    let report = host.apply_not_in_force(&decl);
    assert_eq!(report["private_network"]["mark"], "failed", "{report:#}");
    let briefing = host.json(&["briefing", "--json"]);
    assert_eq!(briefing["outcome"], "failed", "{briefing:#}");
    let line = briefing["lines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["subject"] == "private network")
        .unwrap_or_else(|| panic!("no private network line: {briefing:#}"));
    assert_eq!(line["mark"], "failed", "{briefing:#}");
    let detail = line["detail"].as_str().unwrap();
    assert!(
        detail.contains("interface wg0 does not exist")
            && detail.contains(&format!(
                "{range} is on {PRIVATE_IF} ({NODE_PRIVATE_V4}/24)"
            )),
        "{detail}"
    );

    // The guard lets through lo and the declared (absent) wg0 only: the store is refused from
    // outside, and from the peer over mesh0 too, since mesh0 is not the declared interface.
    expect(
        &net.outside,
        &node_public(),
        STORE,
        Probe::TimedOut,
        "store from outside",
    );
    expect(
        &net.peer,
        &node_private(),
        STORE,
        Probe::TimedOut,
        "store from the peer over mesh0, which is not declared",
    );
    expect(
        &net.peer,
        &node_private(),
        SERVED,
        Probe::Reached,
        "the peer reaches the node over mesh0",
    );

    // Declared right, the briefing says ok and the peer reaches the store again.
    let report = host.apply(&declaration(&[]));
    assert_eq!(report["private_network"]["mark"], "ok", "{report:#}");
    assert_eq!(host.json(&["briefing", "--json"])["outcome"], "ok");
    expect(
        &net.peer,
        &node_private(),
        STORE,
        Probe::Reached,
        "store over the declared private network",
    );
}
