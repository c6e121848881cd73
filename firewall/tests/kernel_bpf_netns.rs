//! The guard's BPF layer on the real kernel between lab namespaces, probed from an outside
//! machine: it holds the guarded ports closed through 50 foreign `nft flush ruleset` and 50
//! `nft -f` reloads (both families), leaves the private network, a routed LAN host and other
//! ports reached, covers an interface made after it was loaded, answers no fragmented IPv4 SYN
//! and no IPv6 SYN behind a destination-options or an atomic fragment header,
//! cuts a connection opened before it (every packet, not only new connections), holds pinned
//! with no process holding it, is reclaimed (never duplicated), replaced across versions with no
//! window, changed in place with no window, and removed.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;
#[path = "kernel_bpf_netns/links.rs"]
mod links;

use common::raw::{fragmented_syn_answered, v6_syn_answered};
use firewall::bpf::{self, Loaded, Pins};
use firewall::netlink::NfSocket;
use firewall::{guard, GuardSpec};
use lab::{addr, Adoption, Lab, Machine, Probe};

const STORE: u16 = 5432;
const BROKER: u16 = 15672;
const OTHER: u16 = 8080;

/// A private bpffs for one test's pins, unmounted (which releases what is pinned) on drop.
struct PinRoot {
    root: PathBuf,
}

impl PinRoot {
    fn new(name: &str) -> PinRoot {
        let root = std::env::temp_dir().join(format!("mh-bpf-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&root).unwrap();
        PinRoot { root }
    }

    fn pins(&self) -> Pins {
        Pins::mounting(&self.root)
    }
}

impl Drop for PinRoot {
    fn drop(&mut self) {
        let fs = self.pins().fs;
        let c = std::ffi::CString::new(fs.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: umount2 reads the NUL-terminated path only.
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// The node's guard: from `mesh0` only the private ranges pass.
fn spec() -> GuardSpec {
    let v4 = firewall::Network {
        addr: addr::PRIVATE_V4_NET.into(),
        len: addr::PRIVATE_V4_PREFIX,
    };
    let v6 = firewall::Network {
        addr: addr::PRIVATE_V6_NET.into(),
        len: addr::PRIVATE_V6_PREFIX,
    };
    GuardSpec::for_node(STORE, BROKER, Some(addr::PRIVATE_IF)).private_ranges(&[v4, v6])
}

fn ensure(node: &Machine, pins: &Pins, spec: &GuardSpec) -> bpf::BpfReport {
    node.in_namespace(|| bpf::ensure(pins, spec))
        .unwrap()
        .unwrap_or_else(|e| panic!("the bpf guard must load on this kernel: {e}"))
}

fn v4(a: Ipv4Addr) -> IpAddr {
    IpAddr::V4(a)
}

fn v6(a: Ipv6Addr) -> IpAddr {
    IpAddr::V6(a)
}

fn probe(from: &Machine, to: IpAddr, port: u16) -> Probe {
    from.probe_tcp(to, port, Duration::from_millis(300))
        .unwrap()
}

/// A link whose last reference was its pin is released by the kernel after an RCU grace period
/// and a work item, not by the unlink itself, so the port reopens a moment later: probe until it
/// answers, for at most two seconds, and return the last answer.
fn probe_until_reached(from: &Machine, to: IpAddr, port: u16) -> Probe {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let got = probe(from, to, port);
        if got == Probe::Reached || Instant::now() >= deadline {
            return got;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The adoption topology, a LAN host behind the node (10.88.0.2, fd88::2, listening on 5432 and
/// reached from outside through the node) and listeners on the node's guarded and other ports.
struct Net {
    net: Adoption,
    _listeners: Vec<lab::Process>,
}

const LAN_V4: Ipv4Addr = Ipv4Addr::new(10, 88, 0, 2);
const LAN_V6: Ipv6Addr = Ipv6Addr::new(0xfd88, 0, 0, 0, 0, 0, 0, 2);

fn build(lab: &Lab) -> Net {
    let net = Adoption::build(lab).unwrap();
    let lan = lab.machine("lan").unwrap();
    lab.veth(&net.node, "lan0", &lan, "eth0").unwrap();
    net.node
        .add_address("lan0", "10.88.0.1".parse().unwrap(), 24)
        .unwrap();
    net.node
        .add_address("lan0", "fd88::1".parse().unwrap(), 64)
        .unwrap();
    lan.add_address("eth0", LAN_V4.into(), 24).unwrap();
    lan.add_address("eth0", LAN_V6.into(), 64).unwrap();
    lan.run_ok(&["ip", "route", "add", "default", "via", "10.88.0.1"])
        .unwrap();
    lan.run_ok(&["ip", "-6", "route", "add", "default", "via", "fd88::1"])
        .unwrap();
    net.node.set_sysctl("net/ipv4/ip_forward", "1").unwrap();
    net.node
        .set_sysctl("net/ipv6/conf/all/forwarding", "1")
        .unwrap();
    let node4 = addr::NODE_PUBLIC_V4.to_string();
    let node6 = addr::NODE_PUBLIC_V6.to_string();
    net.outside
        .run_ok(&["ip", "route", "add", "10.88.0.0/24", "via", &node4])
        .unwrap();
    net.outside
        .run_ok(&["ip", "-6", "route", "add", "fd88::/64", "via", &node6])
        .unwrap();
    let mut listeners = Vec::new();
    for port in [STORE, BROKER, OTHER] {
        listeners.push(net.node.listen_tcp(port).unwrap());
    }
    listeners.push(lan.listen_tcp(STORE).unwrap());
    // The routed path is up (neighbours resolved) before anything is measured over it.
    for to in [v4(LAN_V4), v6(LAN_V6)] {
        let start = Instant::now();
        while !probe(&net.outside, to, STORE).is_reached() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "the lan host {to} is never reached"
            );
        }
    }
    Net {
        net,
        _listeners: listeners,
    }
}

/// Probes `targets` from `from` in a loop on one thread each until `stop`, each probe given
/// `timeout`, `pace` apart; returns per target (connections that got through, probes made).
fn probe_loop(
    from: &Machine,
    targets: &[(IpAddr, u16)],
    timeout: Duration,
    pace: Duration,
    stop: &Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<(u32, u32)>> {
    targets
        .iter()
        .map(|&(to, port)| {
            let (from, stop) = (from.clone(), stop.clone());
            std::thread::spawn(move || {
                let (mut got, mut tries) = (0, 0);
                while !stop.load(Ordering::Relaxed) {
                    let p = from.probe_tcp(to, port, timeout).unwrap();
                    tries += 1;
                    got += u32::from(p.is_reached());
                    // Paced: busybox httpd's listen backlog is small, and a SYN it overflows
                    // is retried only after a second.
                    std::thread::sleep(pace);
                }
                (got, tries)
            })
        })
        .collect()
}

/// The ruleset a Debian machine loads, `flush ruleset` on top, then what is there now.
fn saved_ruleset(node: &Machine, dir: &Path) -> PathBuf {
    let listing = node.run_ok(&["nft", "list", "ruleset"]).unwrap().stdout;
    let text = format!(
        "flush ruleset\n{listing}\ntable inet filter {{\n\tchain input {{ type filter hook input priority filter; policy accept; }}\n\
         \tchain forward {{ type filter hook forward priority filter; policy accept; }}\n}}\n"
    );
    let path = dir.join("saved.nft");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn the_guarded_ports_stay_closed_through_50_flushes_and_50_reloads_in_both_families() {
    let lab = Lab::new().unwrap();
    let Net { net, _listeners } = build(&lab);
    let root = PinRoot::new("flush");
    // Both layers, as on an adopted node: the plain table, then the program.
    net.node
        .in_namespace(|| guard::ensure(&mut NfSocket::open().unwrap(), &spec()).map(drop))
        .unwrap()
        .unwrap();
    let r = ensure(&net.node, &root.pins(), &spec());
    assert_eq!(r.loaded, Loaded::Created);
    // Nothing holds the program now but its pins.
    let saved = saved_ruleset(&net.node, &root.root);

    let guarded: Vec<(IpAddr, u16)> = [STORE, BROKER]
        .iter()
        .flat_map(|&p| [(v4(addr::NODE_PUBLIC_V4), p), (v6(addr::NODE_PUBLIC_V6), p)])
        .collect();
    let control = [
        (v4(addr::NODE_PUBLIC_V4), OTHER),
        (v6(addr::NODE_PUBLIC_V6), OTHER),
        (v4(LAN_V4), STORE),
        (v6(LAN_V6), STORE),
    ];
    let stop = Arc::new(AtomicBool::new(false));
    // A connection that gets through completes in well under a millisecond here, so 15 ms per
    // guarded probe misses none; the probes expected to succeed get time enough on two busy
    // cores.
    let (quick, patient) = (Duration::from_millis(15), Duration::from_secs(1));
    let pace = Duration::from_millis(10);
    let g = probe_loop(&net.outside, &guarded, quick, Duration::ZERO, &stop);
    let c = probe_loop(&net.outside, &control, patient, pace, &stop);
    let p = probe_loop(
        &net.peer,
        &[
            (v4(addr::NODE_PRIVATE_V4), STORE),
            (v6(addr::NODE_PRIVATE_V6), STORE),
        ],
        patient,
        pace,
        &stop,
    );
    for i in 0..50 {
        net.node.run_ok(&["nft", "flush", "ruleset"]).unwrap();
        std::thread::sleep(Duration::from_millis(25));
        // The saved ruleset loads again: the program is not part of it.
        let out = net
            .node
            .run(&["nft", "-f", saved.to_str().unwrap()])
            .unwrap();
        assert!(out.status.success(), "reload {i}: {}", out.stderr);
        std::thread::sleep(Duration::from_millis(25));
    }
    stop.store(true, Ordering::Relaxed);
    let counts = |h: Vec<std::thread::JoinHandle<(u32, u32)>>| -> Vec<(u32, u32)> {
        h.into_iter().map(|h| h.join().unwrap()).collect()
    };
    let (g, c, p) = (counts(g), counts(c), counts(p));
    eprintln!("guarded (got, probes) {guarded:?}: {g:?}");
    eprintln!("control {control:?}: {c:?}");
    eprintln!("private network: {p:?}");
    for ((to, port), (got, tries)) in guarded.iter().zip(&g) {
        assert!(*tries >= 50, "only {tries} probes to {to} port {port}");
        assert_eq!(
            *got, 0,
            "{got} of {tries} connections to {to} port {port} got through"
        );
    }
    for ((to, port), (got, tries)) in control.iter().zip(&c) {
        assert_eq!(got, tries, "{to} port {port}: {got} of {tries} reached");
    }
    for (got, tries) in &p {
        assert_eq!(got, tries, "private network: {got} of {tries} reached");
    }
}

#[test]
fn an_interface_made_later_is_covered_and_exempt_ones_pass() {
    let lab = Lab::new().unwrap();
    let Net { net, _listeners } = build(&lab);
    let root = PinRoot::new("late");
    // Before: the store is reached from outside (the listeners serve).
    assert_eq!(
        probe(&net.outside, v4(addr::NODE_PUBLIC_V4), STORE),
        Probe::Reached
    );
    ensure(&net.node, &root.pins(), &spec());
    assert_eq!(
        probe(&net.outside, v4(addr::NODE_PUBLIC_V4), STORE),
        Probe::TimedOut
    );
    assert_eq!(
        probe(&net.outside, v6(addr::NODE_PUBLIC_V6), BROKER),
        Probe::TimedOut
    );
    // The private interface and loopback are exempt.
    assert_eq!(
        probe(&net.peer, v4(addr::NODE_PRIVATE_V4), STORE),
        Probe::Reached
    );
    assert_eq!(
        probe(&net.node, v4(Ipv4Addr::LOCALHOST), STORE),
        Probe::Reached
    );
    assert_eq!(
        probe(&net.node, v6(Ipv6Addr::LOCALHOST), BROKER),
        Probe::Reached
    );
    // A machine on an interface made after loading, nothing done since.
    let late = lab.machine("late").unwrap();
    lab.veth(&net.node, "late0", &late, "eth0").unwrap();
    net.node
        .add_address("late0", "10.99.0.1".parse().unwrap(), 24)
        .unwrap();
    late.add_address("eth0", "10.99.0.2".parse().unwrap(), 24)
        .unwrap();
    let to = "10.99.0.1".parse().unwrap();
    assert_eq!(probe(&late, to, OTHER), Probe::Reached);
    assert_eq!(probe(&late, to, STORE), Probe::TimedOut);
    // Exempting it, in place, lets it through; taking the port out of the set opens the port.
    let mut s = spec();
    s.allowed.push("late0".into());
    let r = ensure(&net.node, &root.pins(), &s);
    assert_eq!((r.loaded, r.changed), (Loaded::Reclaimed, true));
    assert_eq!(probe(&late, to, STORE), Probe::Reached);
    assert_eq!(
        probe(&net.outside, v4(addr::NODE_PUBLIC_V4), STORE),
        Probe::TimedOut
    );
}

#[test]
fn pinned_it_holds_with_nothing_running_is_reclaimed_once_and_removed() {
    let lab = Lab::new().unwrap();
    let Net { net, _listeners } = build(&lab);
    let root = PinRoot::new("reclaim");
    let pins = root.pins();
    let first = ensure(&net.node, &pins, &spec());
    assert_eq!((first.loaded, first.link_ids.len()), (Loaded::Created, 4));
    let again = ensure(&net.node, &pins, &spec());
    assert_eq!((again.loaded, again.changed), (Loaded::Reclaimed, false));
    assert_eq!(
        again.link_ids, first.link_ids,
        "the same four links, not a second set"
    );
    let st = net
        .node
        .in_namespace(|| bpf::status(&pins))
        .unwrap()
        .unwrap();
    assert!(st.holds(), "{st:?}");
    assert_eq!(st.link_ids, first.link_ids);
    assert_eq!(
        st.contents.ifaces,
        ["lo exempt", &format!("{} private", addr::PRIVATE_IF)]
    );
    assert_eq!(st.contents.nets, ["10.77.0.0/24", "fd77::/64"]);
    assert_eq!(
        probe(&net.outside, v4(addr::NODE_PUBLIC_V4), STORE),
        Probe::TimedOut
    );
    // One link lost (its pin removed, so it is released): the next ensure attaches one new link
    // and keeps the other three.
    std::fs::remove_file(pins.dir.join("link-ipv6-input")).unwrap();
    assert_eq!(
        probe_until_reached(&net.outside, v6(addr::NODE_PUBLIC_V6), STORE),
        Probe::Reached,
        "the link whose pin was removed is released and the port answers"
    );
    let fixed = ensure(&net.node, &pins, &spec());
    assert_eq!(fixed.loaded, Loaded::Replaced);
    assert_eq!(fixed.link_ids[..2], first.link_ids[..2]);
    assert_eq!(fixed.link_ids[3], first.link_ids[3]);
    assert_ne!(fixed.link_ids[2], first.link_ids[2]);
    assert_eq!(
        probe(&net.outside, v6(addr::NODE_PUBLIC_V6), STORE),
        Probe::TimedOut
    );
    // Removed: the ports answer again and nothing is pinned.
    assert!(net
        .node
        .in_namespace(|| bpf::remove(&pins))
        .unwrap()
        .unwrap());
    assert_eq!(
        probe(&net.outside, v4(addr::NODE_PUBLIC_V4), STORE),
        Probe::Reached
    );
    assert_eq!(
        probe(&net.outside, v6(addr::NODE_PUBLIC_V6), BROKER),
        Probe::Reached
    );
    let st = net
        .node
        .in_namespace(|| bpf::status(&pins))
        .unwrap()
        .unwrap();
    assert_eq!(st, bpf::BpfStatus::default());
    assert!(!net
        .node
        .in_namespace(|| bpf::remove(&pins))
        .unwrap()
        .unwrap());
}

/// Renames the node's private interface through a longer name and back, as udev and
/// systemd-networkd do at boot: the kernel keeps the long name's tail after the short name's
/// NUL in the device's 16 bytes. Its addresses are kept across the down and up.
fn rename_through_a_long_name(node: &Machine) {
    let i = addr::PRIVATE_IF;
    let long = "mesh0-renamed01";
    assert_eq!(long.len(), 15);
    node.set_sysctl(&format!("net/ipv6/conf/{i}/keep_addr_on_down"), "1")
        .unwrap();
    for argv in [
        vec!["ip", "link", "set", i, "down"],
        vec!["ip", "link", "set", i, "name", long],
        vec!["ip", "link", "set", long, "name", i],
        vec!["ip", "link", "set", i, "up"],
    ] {
        node.run_ok(&argv).unwrap();
    }
}

/// Probes until `to:port` answers, for at most ten seconds (the link's carrier and IPv6's
/// duplicate address detection come back after an up); the last answer.
fn probe_until_reached_within(from: &Machine, to: IpAddr, port: u16, within: Duration) -> Probe {
    let deadline = Instant::now() + within;
    loop {
        let got = probe(from, to, port);
        if got == Probe::Reached || Instant::now() >= deadline {
            return got;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_private_interface_renamed_through_a_long_name_and_back_still_passes() {
    let lab = Lab::new().unwrap();
    let Net { net, _listeners } = build(&lab);
    let root = PinRoot::new("rename");
    // The BPF layer alone: no table in this namespace.
    ensure(&net.node, &root.pins(), &spec());
    let private = [v4(addr::NODE_PRIVATE_V4), v6(addr::NODE_PRIVATE_V6)];
    for to in private {
        assert_eq!(probe(&net.peer, to, STORE), Probe::Reached, "{to} before");
    }
    rename_through_a_long_name(&net.node);
    let names = net
        .node
        .run_ok(&["ip", "-o", "link", "show"])
        .unwrap()
        .stdout;
    assert!(
        names.contains(" mesh0@") && !names.contains("renamed"),
        "{names}"
    );
    for to in private {
        for port in [STORE, BROKER] {
            assert_eq!(
                probe_until_reached_within(&net.peer, to, port, Duration::from_secs(10)),
                Probe::Reached,
                "the private network to {to} port {port} after the rename"
            );
        }
    }
    for to in [v4(addr::NODE_PUBLIC_V4), v6(addr::NODE_PUBLIC_V6)] {
        for port in [STORE, BROKER] {
            assert_eq!(
                probe(&net.outside, to, port),
                Probe::TimedOut,
                "{to}:{port}"
            );
        }
        assert_eq!(
            probe(&net.outside, to, OTHER),
            Probe::Reached,
            "{to}:{OTHER}"
        );
    }
}

#[test]
fn a_fragmented_ipv4_syn_to_the_store_gets_no_answer() {
    let lab = Lab::new().unwrap();
    let Net { net, _listeners } = build(&lab);
    let root = PinRoot::new("frag");
    let (src, dst) = (addr::OUTSIDE_PUBLIC_V4, addr::NODE_PUBLIC_V4);
    let wait = Duration::from_millis(800);
    // The crafted fragments are a real SYN: before the guard, and to another port after it, the
    // node answers them.
    let answered = |port| {
        net.outside
            .in_namespace(|| fragmented_syn_answered(src, dst, port, wait))
            .unwrap()
    };
    assert!(
        answered(STORE),
        "the fragmented syn to {STORE} went unanswered before the guard"
    );
    ensure(&net.node, &root.pins(), &spec());
    assert!(
        answered(OTHER),
        "the fragmented syn to {OTHER} went unanswered"
    );
    assert!(
        !answered(STORE),
        "a fragmented syn to {STORE} was answered through the guard"
    );
}

#[test]
fn changing_the_port_set_and_the_bridges_in_place_never_opens_a_guarded_port() {
    let lab = Lab::new().unwrap();
    let Net { net, _listeners } = build(&lab);
    let root = PinRoot::new("inplace");
    let pins = root.pins();
    ensure(&net.node, &pins, &spec());
    // Two settings that both guard the store and the broker, differing in everything else: a
    // third port, a container port, a runtime bridge, another private interface.
    let mut other = GuardSpec::for_node(STORE, BROKER, Some("wg0")).container_ports(6432, BROKER);
    other.add_runtime_bridge("docker0");
    other.ports.push(firewall::GuardedPort {
        what: "extra".into(),
        proto: firewall::Proto::Tcp,
        host_port: 7000,
        container_port: 7000,
    });
    let targets = [
        (v4(addr::NODE_PUBLIC_V4), STORE),
        (v6(addr::NODE_PUBLIC_V6), STORE),
        (v4(addr::NODE_PUBLIC_V4), BROKER),
        (v6(addr::NODE_PUBLIC_V6), BROKER),
    ];
    let stop = Arc::new(AtomicBool::new(false));
    let g = probe_loop(
        &net.outside,
        &targets,
        Duration::from_millis(15),
        Duration::ZERO,
        &stop,
    );
    for i in 0..100 {
        let s = if i % 2 == 0 { &other } else { &spec() };
        let r = ensure(&net.node, &pins, s);
        assert_eq!(
            (r.loaded, r.changed),
            (Loaded::Reclaimed, true),
            "change {i}"
        );
        // A change takes well under a millisecond: paced, so the probes see each setting.
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::Relaxed);
    let g: Vec<(u32, u32)> = g.into_iter().map(|h| h.join().unwrap()).collect();
    eprintln!("guarded (got, probes) through 100 changes {targets:?}: {g:?}");
    for ((to, port), (got, tries)) in targets.iter().zip(&g) {
        assert!(*tries >= 20, "only {tries} probes to {to} port {port}");
        assert_eq!(
            *got, 0,
            "{got} of {tries} connections to {to} port {port} got through"
        );
    }
}

#[test]
fn a_dstopts_syn_and_an_atomic_fragment_syn_to_the_store_get_no_answer() {
    let lab = Lab::new().unwrap();
    let Net { net, _listeners } = build(&lab);
    let root = PinRoot::new("ext6");
    let (src, dst) = (addr::OUTSIDE_PUBLIC_V6, addr::NODE_PUBLIC_V6);
    let wait = Duration::from_millis(800);
    // A destination-options header (a PadN) and an atomic fragment header (offset 0, no more
    // fragments), each followed by TCP.
    let dstopts: [u8; 8] = [6, 0, 1, 4, 0, 0, 0, 0];
    let atomic: [u8; 8] = [6, 0, 0, 0, 0, 0, 0x4d, 0x48];
    let answered = |first: u8, ext: &[u8], port: u16| {
        net.outside
            .in_namespace(|| v6_syn_answered(src, dst, port, first, ext, wait))
            .unwrap()
    };
    // Real SYNs: the node answers them before the guard, and to another port after it.
    assert!(
        answered(60, &dstopts, STORE),
        "the dstopts syn went unanswered before the guard"
    );
    assert!(
        answered(44, &atomic, STORE),
        "the atomic fragment went unanswered before the guard"
    );
    ensure(&net.node, &root.pins(), &spec());
    assert!(
        answered(60, &dstopts, OTHER),
        "the dstopts syn to {OTHER} went unanswered"
    );
    assert!(
        answered(44, &atomic, OTHER),
        "the atomic fragment to {OTHER} went unanswered"
    );
    assert!(
        !answered(60, &dstopts, STORE),
        "a dstopts syn to {STORE} was answered"
    );
    assert!(
        !answered(44, &atomic, STORE),
        "an atomic fragment syn to {STORE} was answered"
    );
}

/// A connection from the calling thread's namespace to `to:port`, opened now.
fn connect(to: IpAddr, port: u16) -> std::net::TcpStream {
    let s = std::net::TcpStream::connect_timeout(
        &std::net::SocketAddr::new(to, port),
        Duration::from_secs(2),
    )
    .unwrap_or_else(|e| panic!("connecting to {to} port {port}: {e}"));
    s.set_read_timeout(Some(Duration::from_millis(1500)))
        .unwrap();
    s
}

/// Whether a request on `s` gets any answer before its read timeout.
fn answered(mut s: std::net::TcpStream) -> bool {
    use std::io::{Read, Write};
    s.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    let mut buf = [0u8; 64];
    matches!(s.read(&mut buf), Ok(n) if n > 0)
}

#[test]
fn a_connection_opened_before_the_layer_is_cut_every_packet_not_only_new_ones() {
    let lab = Lab::new().unwrap();
    let Net { net, _listeners } = build(&lab);
    let root = PinRoot::new("established");
    let to = v4(addr::NODE_PUBLIC_V4);
    // Connections made while nothing guards the store, to it and to another port.
    let (store, other) = net
        .outside
        .in_namespace(|| (connect(to, STORE), connect(to, OTHER)))
        .unwrap();
    let (store6, _) = net
        .outside
        .in_namespace(|| (connect(v6(addr::NODE_PUBLIC_V6), STORE), ()))
        .unwrap();
    ensure(&net.node, &root.pins(), &spec());
    assert!(answered(other), "the connection to {OTHER} was cut");
    assert!(
        !answered(store),
        "the connection to {STORE} opened before the guard still answers"
    );
    assert!(
        !answered(store6),
        "the v6 connection to {STORE} opened before the guard still answers"
    );
}

/// What iptables-nft saves reloads with the layer in place (the program is no part of the
/// x_tables view either), and the guarded ports stay closed through the restore.
#[test]
fn iptables_nft_save_reloads_with_the_layer_in_place() {
    let lab = Lab::new().unwrap();
    let Net { net, _listeners } = build(&lab);
    let root = PinRoot::new("iptsave");
    for argv in [
        &[
            "iptables-nft",
            "-w",
            "-A",
            "INPUT",
            "-p",
            "tcp",
            "--dport",
            "22",
            "-j",
            "ACCEPT",
        ][..],
        &[
            "ip6tables-nft",
            "-w",
            "-A",
            "INPUT",
            "-p",
            "tcp",
            "--dport",
            "22",
            "-j",
            "ACCEPT",
        ][..],
    ] {
        net.node.run_ok(argv).unwrap();
    }
    let r = ensure(&net.node, &root.pins(), &spec());
    assert_eq!(r.loaded, Loaded::Created);
    for (save, restore) in [
        ("iptables-nft-save", "iptables-nft-restore"),
        ("ip6tables-nft-save", "ip6tables-nft-restore"),
    ] {
        let saved = net.node.run_ok(&[save]).unwrap().stdout;
        assert!(saved.contains("--dport 22"), "{save}: {saved}");
        let file = root.root.join(format!("{save}.rules"));
        std::fs::write(&file, &saved).unwrap();
        let out = net
            .node
            .run(&[restore, "-w", "5", file.to_str().unwrap()])
            .unwrap();
        assert!(out.status.success(), "{restore}: {}", out.stderr);
        assert_eq!(
            net.node
                .run_ok(&[save])
                .unwrap()
                .stdout
                .lines()
                .filter(|l| l.starts_with('-'))
                .count(),
            saved.lines().filter(|l| l.starts_with('-')).count(),
            "{save} after the restore"
        );
    }
    for to in [v4(addr::NODE_PUBLIC_V4), v6(addr::NODE_PUBLIC_V6)] {
        for port in [STORE, BROKER] {
            assert_ne!(
                probe(&net.outside, to, port),
                Probe::Reached,
                "{to} port {port} after the restores"
            );
        }
        assert_eq!(
            probe(&net.outside, to, OTHER),
            Probe::Reached,
            "{to} port {OTHER}"
        );
    }
}
