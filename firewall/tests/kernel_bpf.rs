//! The guard's netfilter BPF program on the real kernel: its verdicts on crafted packets through
//! `BPF_PROG_TEST_RUN` (IPv4 and IPv6, guarded and other ports, exempt and outside interfaces,
//! extension headers and fragments), and its maps changed in place.

mod common;

use common::in_fresh_netns;
use firewall::bpf::prog::{HOOK_FORWARD, HOOK_LOCAL_IN, NFPROTO_IPV4, NFPROTO_IPV6};
use firewall::bpf::Program;
use firewall::GuardSpec;

const DROP: u32 = 0;
const ACCEPT: u32 = 1;

/// An Ethernet header for `ethertype`, as a test run outside LOCAL_OUT wants it.
fn eth(ethertype: u16) -> Vec<u8> {
    let mut p = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
    p.extend(ethertype.to_be_bytes());
    p
}

/// A TCP SYN (20 bytes) to `dport`, or a UDP header (8) when `udp`.
fn l4(dport: u16, udp: bool) -> Vec<u8> {
    let mut t = 40000u16.to_be_bytes().to_vec();
    t.extend(dport.to_be_bytes());
    if udp {
        t.extend([0, 8, 0, 0]);
    } else {
        t.extend([0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02, 0xff, 0xff, 0, 0, 0, 0]);
    }
    t
}

/// An IPv4 packet carrying `payload` with protocol `proto` and fragment field `frag`.
fn v4(proto: u8, frag: u16, payload: &[u8]) -> Vec<u8> {
    let mut p = eth(0x0800);
    let len = (20 + payload.len()) as u16;
    p.extend([0x45, 0]);
    p.extend(len.to_be_bytes());
    p.extend([0, 1]);
    p.extend(frag.to_be_bytes());
    p.extend([64, proto, 0, 0, 192, 0, 2, 1, 192, 0, 2, 2]);
    p.extend(payload);
    p
}

/// An IPv6 packet: `next` first, then `ext` (already chained), then the payload.
fn v6(next: u8, ext: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut p = eth(0x86dd);
    let len = (ext.len() + payload.len()) as u16;
    p.extend([0x60, 0, 0, 0]);
    p.extend(len.to_be_bytes());
    p.extend([next, 64]);
    p.extend(
        [0x20, 0x01, 0x0d, 0xb8]
            .iter()
            .chain([0u8; 11].iter())
            .chain([1u8].iter()),
    );
    p.extend(
        [0x20, 0x01, 0x0d, 0xb8]
            .iter()
            .chain([0u8; 11].iter())
            .chain([2u8].iter()),
    );
    p.extend(ext);
    p.extend(payload);
    p
}

/// A destination-options header (8 bytes, a PadN) whose next header is `next`.
fn dstopts(next: u8) -> Vec<u8> {
    vec![next, 0, 1, 4, 0, 0, 0, 0]
}

/// A fragment header: offset in 8-byte units, more-fragments flag.
fn fraghdr(next: u8, offset: u16, more: bool) -> Vec<u8> {
    let f = (offset << 3) | u16::from(more);
    let mut h = vec![next, 0];
    h.extend(f.to_be_bytes());
    h.extend([0, 0, 0, 7]);
    h
}

fn net(a: &str, len: u8) -> firewall::Network {
    firewall::Network {
        addr: a.parse().unwrap(),
        len,
    }
}

fn spec(exempt_lo: bool) -> GuardSpec {
    let mut s = GuardSpec::for_node(5432, 15672, Some("mesh0"))
        .private_ranges(&[net("10.77.0.0", 24), net("fd77::", 64)])
        .container_ports(6432, 15672);
    if !exempt_lo {
        s.allowed.retain(|i| i != "lo");
    }
    s.add_runtime_bridge("docker0");
    s
}

/// The program loaded in a fresh namespace with `spec`. On this kernel (6.18) a test run gives
/// the program no input device at all (`verify_and_copy_hook_state` picks the devices by the
/// default hook, LOCAL_OUT, so only `out` is set, to the namespace's loopback): every test-run
/// packet comes from "outside". Exemption by input interface is checked with real packets in
/// `kernel_bpf_netns.rs`; `lo` is left out here so nothing depends on which device it is.
fn loaded(exempt_lo: bool) -> Program {
    in_fresh_netns();
    let p = Program::load().unwrap_or_else(|e| panic!("this kernel must take the program: {e}"));
    p.set(&spec(exempt_lo)).unwrap();
    p
}

fn check(p: &Program, pf: u32, hook: u32, packet: &[u8], want: u32, what: &str) {
    let got = p.test_run(pf, hook, packet).unwrap();
    assert_eq!(got, want, "{what}: verdict {got}, wanted {want}");
}

#[test]
fn a_syn_to_a_guarded_port_from_outside_is_dropped_and_other_ports_pass() {
    let p = loaded(false);
    let (v4i, v6i) = ((NFPROTO_IPV4, HOOK_LOCAL_IN), (NFPROTO_IPV6, HOOK_LOCAL_IN));
    check(
        &p,
        v4i.0,
        v4i.1,
        &v4(6, 0, &l4(5432, false)),
        DROP,
        "v4 syn to 5432",
    );
    check(
        &p,
        v4i.0,
        v4i.1,
        &v4(6, 0, &l4(15672, false)),
        DROP,
        "v4 syn to 15672",
    );
    check(
        &p,
        v4i.0,
        v4i.1,
        &v4(6, 0, &l4(22, false)),
        ACCEPT,
        "v4 syn to 22",
    );
    check(
        &p,
        v4i.0,
        v4i.1,
        &v4(17, 0, &l4(5432, true)),
        ACCEPT,
        "v4 udp to 5432",
    );
    check(
        &p,
        v4i.0,
        v4i.1,
        &v4(6, 0, &l4(6432, false)),
        ACCEPT,
        "v4 syn to the container port on input",
    );
    check(
        &p,
        v4i.0,
        v4i.1,
        &v4(1, 0, &[8, 0, 0, 0, 0, 0, 0, 0]),
        ACCEPT,
        "v4 icmp",
    );
    check(
        &p,
        v6i.0,
        v6i.1,
        &v6(6, &[], &l4(5432, false)),
        DROP,
        "v6 syn to 5432",
    );
    check(
        &p,
        v6i.0,
        v6i.1,
        &v6(6, &[], &l4(15672, false)),
        DROP,
        "v6 syn to 15672",
    );
    check(
        &p,
        v6i.0,
        v6i.1,
        &v6(6, &[], &l4(22, false)),
        ACCEPT,
        "v6 syn to 22",
    );
    check(
        &p,
        v6i.0,
        v6i.1,
        &v6(58, &[], &[128, 0, 0, 0, 0, 0, 0, 0]),
        ACCEPT,
        "v6 echo",
    );
}

#[test]
fn extension_headers_are_walked_and_later_fragments_dropped() {
    let p = loaded(false);
    let pf = NFPROTO_IPV6;
    let h = HOOK_LOCAL_IN;
    check(
        &p,
        pf,
        h,
        &v6(60, &dstopts(6), &l4(5432, false)),
        DROP,
        "dstopts syn to 5432",
    );
    check(
        &p,
        pf,
        h,
        &v6(60, &dstopts(6), &l4(22, false)),
        ACCEPT,
        "dstopts syn to 22",
    );
    check(
        &p,
        pf,
        h,
        &v6(44, &fraghdr(6, 0, false), &l4(5432, false)),
        DROP,
        "atomic fragment syn to 5432",
    );
    check(
        &p,
        pf,
        h,
        &v6(44, &fraghdr(6, 0, false), &l4(22, false)),
        ACCEPT,
        "atomic fragment syn to 22",
    );
    check(
        &p,
        pf,
        h,
        &v6(44, &fraghdr(6, 3, false), &l4(22, false)),
        DROP,
        "a later fragment",
    );
    let mut chain = Vec::new();
    for _ in 0..3 {
        chain.extend(dstopts(0));
    }
    chain.extend(dstopts(6));
    check(
        &p,
        pf,
        h,
        &v6(0, &chain, &l4(5432, false)),
        DROP,
        "four headers then 5432",
    );
    check(
        &p,
        pf,
        h,
        &v6(0, &chain, &l4(22, false)),
        ACCEPT,
        "four headers then 22",
    );
    // More headers than the program reads: the transport header is never reached, so dropped.
    let mut long = Vec::new();
    for _ in 0..12 {
        long.extend(dstopts(60));
    }
    long.extend(dstopts(6));
    check(
        &p,
        pf,
        h,
        &v6(60, &long, &l4(22, false)),
        DROP,
        "thirteen headers",
    );
    // A header cut short: unreadable, dropped.
    check(
        &p,
        pf,
        h,
        &v6(6, &[], &[0x9c, 0x40]),
        DROP,
        "a truncated tcp header",
    );
    // IPv4: a later fragment of TCP carries no port; dropped.
    check(
        &p,
        NFPROTO_IPV4,
        h,
        &v4(6, 100, &[0; 16]),
        DROP,
        "v4 later fragment",
    );
}

#[test]
fn forwarded_packets_are_left_alone_unless_towards_a_runtime_bridge() {
    // A test run's output device on FORWARD is the namespace's loopback: "lo" as a runtime bridge
    // stands for one.
    let p = loaded(false);
    let fwd = HOOK_FORWARD;
    check(
        &p,
        NFPROTO_IPV4,
        fwd,
        &v4(6, 0, &l4(6432, false)),
        ACCEPT,
        "v4 forward to a lan host",
    );
    check(
        &p,
        NFPROTO_IPV6,
        fwd,
        &v6(6, &[], &l4(6432, false)),
        ACCEPT,
        "v6 forward to a lan host",
    );
    let mut s = spec(false);
    s.runtimes.push("lo".into());
    p.set(&s).unwrap();
    check(
        &p,
        NFPROTO_IPV4,
        fwd,
        &v4(6, 0, &l4(6432, false)),
        DROP,
        "v4 forward to a container port",
    );
    check(
        &p,
        NFPROTO_IPV4,
        fwd,
        &v4(6, 0, &l4(5432, false)),
        ACCEPT,
        "v4 forward to the host port",
    );
    check(
        &p,
        NFPROTO_IPV6,
        fwd,
        &v6(6, &[], &l4(6432, false)),
        DROP,
        "v6 forward to a container port",
    );
}

#[test]
fn the_maps_change_in_place() {
    let p = loaded(false);
    let c = p.contents().unwrap();
    assert_eq!(
        c.ports,
        [
            "tcp/15672 container",
            "tcp/15672 host",
            "tcp/5432 host",
            "tcp/6432 container"
        ]
    );
    assert_eq!(c.ifaces, ["docker0 exempt runtime", "mesh0 private"]);
    assert_eq!(c.nets, ["10.77.0.0/24", "fd77::/64"]);
    assert!(
        !p.set(&spec(false)).unwrap(),
        "the same spec changes nothing"
    );
    let s = GuardSpec::for_node(7000, 15672, Some("wg0")).private_ranges(&[net("10.9.0.0", 16)]);
    assert!(p.set(&s).unwrap());
    let c = p.contents().unwrap();
    assert_eq!(
        c.ports,
        [
            "tcp/15672 container",
            "tcp/15672 host",
            "tcp/7000 container",
            "tcp/7000 host"
        ]
    );
    assert_eq!(c.ifaces, ["lo exempt", "wg0 private"]);
    assert_eq!(c.nets, ["10.9.0.0/16"]);
    check(
        &p,
        NFPROTO_IPV4,
        HOOK_LOCAL_IN,
        &v4(6, 0, &l4(7000, false)),
        DROP,
        "the new port",
    );
    check(
        &p,
        NFPROTO_IPV4,
        HOOK_LOCAL_IN,
        &v4(6, 0, &l4(5432, false)),
        ACCEPT,
        "the old port",
    );
}
