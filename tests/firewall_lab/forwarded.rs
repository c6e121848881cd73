//! A router-like node with a hand-written forward chain: a forwarded opening admits the
//! translated (published) port only, never an untranslated packet routed through to the same
//! port on a machine behind the node.

use super::*;

/// The port published on the node and the port the machine behind serves it on.
const PUBLISHED: u16 = 443;
const BEHIND_SERVES: u16 = 80;
const BACK_IF: &str = "back0";
const NODE_BACK_V4: std::net::Ipv4Addr = std::net::Ipv4Addr::new(10, 99, 0, 1);
const BEHIND_V4: std::net::Ipv4Addr = std::net::Ipv4Addr::new(10, 99, 0, 2);

#[test]
fn a_forwarded_opening_admits_the_published_port_and_not_an_untranslated_destination() {
    let lab = new_lab();
    let net = adoption(&lab);
    let node = &net.node;
    // A machine behind the node, reachable only through it.
    let behind = lab.machine("behind").expect("a machine behind the node");
    lab.veth(node, BACK_IF, &behind, PUBLIC_IF)
        .expect("a link from the node to the machine behind it");
    node.add_address(BACK_IF, NODE_BACK_V4.into(), 24).unwrap();
    behind.add_address(PUBLIC_IF, BEHIND_V4.into(), 24).unwrap();
    behind
        .add_route(
            std::net::Ipv4Addr::UNSPECIFIED.into(),
            0,
            NODE_BACK_V4.into(),
        )
        .unwrap();
    node.set_sysctl("net/ipv4/ip_forward", "1").unwrap();
    // The outside routes the network behind the node through the node, as a neighbour can.
    net.outside
        .add_route(BEHIND_V4.into(), 32, NODE_PUBLIC_V4.into())
        .unwrap();
    let _listeners: Vec<_> = [PUBLISHED, BEHIND_SERVES]
        .iter()
        .map(|p| behind.listen_tcp(*p).expect("a listener behind the node"))
        .collect();

    // The operator's router: the node's port 443 published to the machine behind (DNAT), and a
    // forward chain that drops by default.
    load_nft(
        node,
        lab.dir(),
        "router.nft",
        &format!(
            "flush ruleset
table ip nat {{
	chain prerouting {{
		type nat hook prerouting priority dstnat; policy accept;
		ip daddr {NODE_PUBLIC_V4} tcp dport {PUBLISHED} dnat to {BEHIND_V4}:{BEHIND_SERVES}
	}}
}}
table inet filter {{
	chain forward {{
		type filter hook forward priority filter; policy drop;
		ct state established,related accept
	}}
}}
"
        ),
    );
    let published: [IpAddr; 1] = [NODE_PUBLIC_V4.into()];
    let direct: [IpAddr; 1] = [BEHIND_V4.into()];
    expect(
        &net.outside,
        &published,
        PUBLISHED,
        Probe::TimedOut,
        "the forward chain drops the published port",
    );
    expect(
        &net.outside,
        &direct,
        PUBLISHED,
        Probe::TimedOut,
        "the forward chain drops a routed packet",
    );

    let host = Host::new(node);
    let report = host.apply(&declaration(&[opening(
        "web/https",
        PUBLISHED,
        "forwarded",
    )]));
    assert_eq!(outcome(&report, "web/https"), "created", "{report:#}");
    let status = host.status();
    assert_eq!(status["kind"], "nftables", "{status:#}");
    assert_eq!(
        presence(&status, "web/https"),
        ["inet filter forward (nftables)=present"],
        "{status:#}"
    );

    expect(
        &net.outside,
        &published,
        PUBLISHED,
        Probe::Reached,
        "the published port, translated at prerouting",
    );
    expect(
        &net.outside,
        &direct,
        PUBLISHED,
        Probe::TimedOut,
        "an untranslated packet to the same port behind the node",
    );
    expect(
        &net.outside,
        &direct,
        BEHIND_SERVES,
        Probe::TimedOut,
        "the translated-to port, sent to directly",
    );
    // In nft's terms, the translated-connection match iptables' `--ctstate DNAT` is.
    let listed = run_ok(node, &["nft", "list", "chain", "inet", "filter", "forward"]);
    assert!(
        listed.contains("meta l4proto tcp ct status dnat ct original proto-dst 443 accept comment \"mesh-host:web/https#"),
        "{listed}"
    );
}
