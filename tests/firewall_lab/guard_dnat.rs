//! The guard's table alone closes what a foreign translation sends to the store: with no BPF
//! layer (no bpffs under the root, as where the kernel refuses the program), another program's
//! `redirect to :5432` and `dnat to NODE:5432` from other ports (and the same to 15672) reach
//! nothing from outside, because the table refuses at input the port a packet reaches after
//! translation; the private network still reaches the store through them.

use super::*;

/// Another program's destination NAT: three ports to each guarded one, by redirect and by dnat
/// to the node's own public address, in both families.
fn foreign_nat() -> String {
    let v4 = NODE_PUBLIC_V4;
    let v6 = NODE_PUBLIC_V6;
    format!(
        "table inet foreign_nat {{\n\
         \tchain pre {{\n\
         \t\ttype nat hook prerouting priority dstnat; policy accept;\n\
         \t\ttcp dport 8081 redirect to :{STORE}\n\
         \t\tmeta nfproto ipv4 tcp dport 8082 dnat ip to {v4}:{STORE}\n\
         \t\tmeta nfproto ipv6 tcp dport 8082 dnat ip6 to [{v6}]:{STORE}\n\
         \t\ttcp dport 8083 redirect to :{STORE}\n\
         \t\ttcp dport 8084 redirect to :{BROKER_MANAGEMENT}\n\
         \t\tmeta nfproto ipv4 tcp dport 8085 dnat ip to {v4}:{BROKER_MANAGEMENT}\n\
         \t\tmeta nfproto ipv6 tcp dport 8085 dnat ip6 to [{v6}]:{BROKER_MANAGEMENT}\n\
         \t\ttcp dport 8086 redirect to :{BROKER_MANAGEMENT}\n\
         \t}}\n\
         }}\n"
    )
}

const TRANSLATED: [u16; 6] = [8081, 8082, 8083, 8084, 8085, 8086];

#[test]
fn with_the_table_alone_a_foreign_dnat_or_redirect_to_the_guarded_ports_reaches_nothing() {
    let lab = new_lab();
    let net = adoption(&lab);
    let node = &net.node;
    let _listeners: Vec<_> = [STORE, BROKER_MANAGEMENT, SERVED]
        .iter()
        .map(|p| node.listen_tcp(*p).expect("listener on the node"))
        .collect();
    load_nft(node, lab.dir(), "foreign-nat.nft", &foreign_nat());
    let public = node_public();
    // Before the guard the translations carry: every port reaches its guarded listener.
    for port in TRANSLATED {
        expect(
            &net.outside,
            &public,
            port,
            Probe::Reached,
            "the foreign translation before the guard",
        );
    }
    // No bpffs under the root: the guard is the table alone.
    let host = Host::new(node);
    let report = host.apply(&declaration(&[]));
    let line = report["guard"].as_str().unwrap_or_default();
    assert!(line.contains("guard: table inet mesh_host alone"), "{line}");
    assert_eq!(host.status()["guard"]["bpf"]["pinned"], false);
    for port in TRANSLATED {
        expect(
            &net.outside,
            &public,
            port,
            Probe::TimedOut,
            "a foreign translation to a guarded port, the table alone",
        );
    }
    for port in [STORE, BROKER_MANAGEMENT] {
        expect(
            &net.outside,
            &public,
            port,
            Probe::TimedOut,
            "the guarded port itself",
        );
    }
    expect(
        &net.outside,
        &public,
        SERVED,
        Probe::Reached,
        "another port",
    );
    // The private network goes through the same translations (8081 redirects on every address).
    expect(
        &net.peer,
        &node_private(),
        8081,
        Probe::Reached,
        "the private network through a redirect",
    );
    // The foreign table is still there: the guard only refuses, it removed nothing.
    let listing = run_ok(node, &["nft", "list", "table", "inet", "foreign_nat"]);
    assert!(listing.contains("redirect to :5432"), "{listing}");
}
