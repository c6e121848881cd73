//! The private network is its interface **and** its range: a peer on `mesh0` that forwards for
//! an outside host (`ip_forward=1`, the node's `rp_filter` off) brings that host's packets in on
//! the private interface with the host's own outside source, and the guard refuses them in both
//! layers and both families, while the peer's own private addresses still reach the store; on a
//! converged node the derived filter judges it the same way.

use super::guard_bpf::{Bpffs, BOTH};
use super::*;

/// Makes the peer a relay for the outside machine: the outside routes the private network via
/// the peer's public addresses, the peer forwards, and the node takes a packet on `mesh0` from a
/// source its routes put on `eth0` (loose or no reverse-path filter, as the issue measured).
fn relay_through_the_peer(net: &Adoption) {
    let peer = &net.peer;
    peer.set_sysctl("net/ipv4/ip_forward", "1").unwrap();
    peer.set_sysctl("net/ipv6/conf/all/forwarding", "1")
        .unwrap();
    for conf in ["all", "default", PRIVATE_IF, PUBLIC_IF] {
        net.node
            .set_sysctl(&format!("net/ipv4/conf/{conf}/rp_filter"), "0")
            .unwrap();
    }
    net.outside
        .add_route(
            PRIVATE_V4_NET.into(),
            PRIVATE_V4_PREFIX,
            PEER_PUBLIC_V4.into(),
        )
        .unwrap();
    net.outside
        .add_route(
            PRIVATE_V6_NET.into(),
            PRIVATE_V6_PREFIX,
            PEER_PUBLIC_V6.into(),
        )
        .unwrap();
}

/// Before any guard, the relay carries: the outside host reaches the node's private addresses
/// through the peer (polled to a deadline while neighbours resolve), so a refusal later is the
/// guard's.
fn the_relay_carries(net: &Adoption) {
    for addr in node_private() {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let got = net.outside.probe_tcp(addr, STORE, ANSWER).unwrap();
            if got == Probe::Reached {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the relay never carried outside -> [{addr}]:{STORE}: {got}"
            );
        }
    }
}

fn refused_through_the_relay_and_reached_from_the_peer(net: &Adoption, why: &str) {
    for port in [STORE, BROKER_MANAGEMENT] {
        expect(
            &net.outside,
            &node_private(),
            port,
            Probe::TimedOut,
            &format!("{why}: the outside relayed in on {PRIVATE_IF}"),
        );
        expect(
            &net.peer,
            &node_private(),
            port,
            Probe::Reached,
            &format!("{why}: the peer's own private addresses"),
        );
    }
    expect(
        &net.outside,
        &node_private(),
        SERVED,
        Probe::Reached,
        &format!("{why}: another port through the relay"),
    );
}

fn listeners(node: &Machine) -> Vec<lab::Process> {
    [STORE, BROKER_MANAGEMENT, SERVED]
        .iter()
        .map(|p| node.listen_tcp(*p).expect("listener on the node"))
        .collect()
}

#[test]
fn a_relaying_peer_brings_no_outside_source_to_the_store_through_the_table_alone() {
    let lab = new_lab();
    let net = adoption(&lab);
    let _listeners = listeners(&net.node);
    relay_through_the_peer(&net);
    the_relay_carries(&net);
    // No bpffs under the root: the table holds alone.
    let host = Host::new(&net.node);
    let report = host.apply(&declaration(&[]));
    let line = report["guard"].as_str().unwrap_or_default();
    assert!(line.contains("guard: table inet mesh_host alone"), "{line}");
    assert!(
        line.contains("on mesh0 from 10.77.0.0/24, fd77::/64"),
        "{line}"
    );
    refused_through_the_relay_and_reached_from_the_peer(&net, "the table alone");
}

#[test]
fn a_relaying_peer_brings_no_outside_source_to_the_store_through_either_layer() {
    let lab = new_lab();
    let net = adoption(&lab);
    let _listeners = listeners(&net.node);
    relay_through_the_peer(&net);
    the_relay_carries(&net);
    let host = Host::new(&net.node);
    let _fs = Bpffs::mount(&host);
    let report = host.apply(&declaration(&[]));
    assert!(
        report["guard"].as_str().unwrap_or_default().contains(BOTH),
        "{report:#}"
    );
    let status = host.status();
    assert_eq!(
        status["guard"]["bpf"]["interfaces"],
        json!(["lo exempt", format!("{PRIVATE_IF} private")]),
        "{status:#}"
    );
    assert_eq!(
        status["guard"]["bpf"]["nets"],
        json!(["10.77.0.0/24", "fd77::/64"]),
        "{status:#}"
    );
    refused_through_the_relay_and_reached_from_the_peer(&net, "both layers");
    // A foreign flush leaves the BPF layer alone, which judges the source too.
    run_ok(&net.node, &["nft", "flush", "ruleset"]);
    refused_through_the_relay_and_reached_from_the_peer(&net, "the BPF layer alone");
}

/// On a converged node the derived filter stands in the guard's place, and judges the private
/// network the same way: ssh and an opening declared from the private network admit a packet on
/// `mesh0` only from the private ranges, so the relayed outside host reaches neither, in either
/// family, while the peer's own private addresses reach both.
#[test]
fn on_a_converged_node_a_relaying_peer_brings_no_outside_source_to_ssh_or_a_private_opening() {
    let lab = new_lab();
    let net = adoption(&lab);
    let _listeners: Vec<lab::Process> = [STORE, SSH, SERVED]
        .iter()
        .map(|p| net.node.listen_tcp(*p).expect("listener on the node"))
        .collect();
    relay_through_the_peer(&net);
    the_relay_carries(&net);
    let host = Host::new(&net.node);
    let mut store = opening("store/port", STORE, "incoming");
    store["from"] = json!("private");
    store["module"] = json!("store");
    host.apply(&declaration(&[store]));
    let out = host.run(&["converge", "--json"]);
    assert!(out.success(), "the flip: {}\n{}", out.stdout, out.stderr);
    for port in [STORE, SSH] {
        expect(
            &net.outside,
            &node_private(),
            port,
            Probe::TimedOut,
            &format!("converged: the outside relayed in on {PRIVATE_IF}"),
        );
        expect(
            &net.peer,
            &node_private(),
            port,
            Probe::Reached,
            "converged: the peer's own private addresses",
        );
    }
    let table = run_ok(
        &net.node,
        &["nft", "list", "chain", "inet", "mesh_host", "input"],
    );
    assert!(
        table.contains("iifname \"mesh0\" ip saddr 10.77.0.0/24 tcp dport 22 accept")
            && table.contains("iifname \"mesh0\" ip6 saddr fd77::/64 tcp dport 22 accept"),
        "the derived filter's ssh rules:\n{table}"
    );
    // Not declared, so the flip closed it for everyone: the relay is not what refuses.
    expect(
        &net.outside,
        &node_private(),
        SERVED,
        Probe::TimedOut,
        "converged: an undeclared port through the relay",
    );
}
