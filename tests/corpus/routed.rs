//! The forwarded path of every corpus cell (issue 30, point 6): a LAN host routed behind the node
//! (`lan0`), serving every declared port, which the outside machine reaches through the node; each
//! opening's port is probed at the LAN host from outside and from the banned source, both
//! families, before the apply and after it, and an opening that makes the LAN host reachable where
//! it was not is a failure (an incoming opening opens no forwarding; a ban stays a ban).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use lab::addr::*;
use lab::{Adoption, Lab, Machine, Probe, Process};

use super::{Family, Source, PROBE_WAIT};

/// The LAN behind the node (documentation ranges): the node's side, then the LAN host's.
const LAN_NODE_V4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
const LAN_HOST_V4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 2);
const LAN_NODE_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x50, 0, 0, 0, 0, 1);
const LAN_HOST_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x50, 0, 0, 0, 0, 2);
/// The interface of the LAN on the node (the name the router fixture's lan zone uses).
pub(super) const LAN_IF: &str = "lan0";

/// The sources the forwarded path is probed from.
pub(super) const FROM: [(Source, Family); 4] = [
    (Source::Outside, Family::V4),
    (Source::Outside, Family::V6),
    (Source::Banned, Family::V4),
    (Source::Banned, Family::V6),
];

/// The LAN host's address in `family`.
fn lan_host(family: Family) -> IpAddr {
    match family {
        Family::V4 => LAN_HOST_V4.into(),
        Family::V6 => LAN_HOST_V6.into(),
    }
}

/// The LAN host with its listeners, kept until the fixture is done.
pub(super) struct Lan {
    _host: Machine,
    _listeners: Vec<Process>,
}

/// Gives the node a LAN host behind `lan0` listening on `ports`, turns forwarding on in both
/// families, and routes the LAN through the node from the outside machine.
pub(super) fn build(lab: &Lab, net: &Adoption, ports: &[u16]) -> Lan {
    let node = &net.node;
    let host = lab.machine("lan").expect("the LAN host's namespace");
    lab.veth(node, LAN_IF, &host, "eth0").expect("the LAN link");
    node.add_address(LAN_IF, LAN_NODE_V4.into(), 24).unwrap();
    node.add_address(LAN_IF, LAN_NODE_V6.into(), 64).unwrap();
    host.add_address("eth0", LAN_HOST_V4.into(), 24).unwrap();
    host.add_address("eth0", LAN_HOST_V6.into(), 64).unwrap();
    host.add_route(Ipv4Addr::UNSPECIFIED.into(), 0, LAN_NODE_V4.into())
        .unwrap();
    host.add_route(Ipv6Addr::UNSPECIFIED.into(), 0, LAN_NODE_V6.into())
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
    let listeners = ports
        .iter()
        .map(|p| host.listen_tcp(*p).expect("a listener on the LAN host"))
        .collect();
    Lan {
        _host: host,
        _listeners: listeners,
    }
}

/// Before any firewall is loaded the outside machine reaches the LAN host through the node, v4
/// and v6, within 10 s (as `lab_carries_the_outside` for the node itself).
pub(super) fn lab_carries_the_lan(net: &Adoption, port: u16) {
    for family in Family::ALL {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let got = net
                .outside
                .probe_tcp(lan_host(family), port, Duration::from_millis(500))
                .expect("probing from the outside machine");
            if got == Probe::Reached {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the lab: the outside machine does not reach the LAN host behind the node in {} \
                 with no firewall loaded ({got:?} for 10 s)",
                family.name()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// One probe of the LAN host: from `source` in `family` to `port`.
fn probe(net: &Adoption, source: Source, family: Family, port: u16) -> Result<Probe, String> {
    net.outside
        .probe_tcp_from(source.addr(family), lan_host(family), port, PROBE_WAIT)
        .map_err(|e| e.to_string())
}

/// Every port in `ports` probed at the LAN host from every source of [`FROM`], all at once: one
/// result per port, in [`FROM`]'s order.
pub(super) fn probe_all(net: &Adoption, ports: &[u16]) -> Vec<Vec<Result<Probe, String>>> {
    std::thread::scope(|s| {
        let handles: Vec<Vec<_>> = ports
            .iter()
            .map(|&port| {
                FROM.iter()
                    .map(|&(source, family)| s.spawn(move || probe(net, source, family, port)))
                    .collect()
            })
            .collect();
        handles
            .into_iter()
            .map(|hs| {
                hs.into_iter()
                    .map(|h| {
                        h.join()
                            .unwrap_or_else(|_| Err("the probe panicked".into()))
                    })
                    .collect()
            })
            .collect()
    })
}

/// The banned source's connections to the node itself (incoming) on every port of `ports`, v4
/// then v6, all at once: what the ban does before any opening is written.
pub(super) fn probe_banned(net: &Adoption, ports: &[u16]) -> Vec<[Result<Probe, String>; 2]> {
    std::thread::scope(|s| {
        let handles: Vec<_> = ports
            .iter()
            .map(|&port| {
                Family::ALL.map(|family| {
                    s.spawn(move || {
                        net.outside
                            .probe_tcp_from(
                                Source::Banned.addr(family),
                                Source::Banned.target(family),
                                port,
                                PROBE_WAIT,
                            )
                            .map_err(|e| e.to_string())
                    })
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|hs| {
                hs.map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err("the probe panicked".into()))
                })
            })
            .collect()
    })
}

/// The forwarded path of one opening's port: what each source of [`FROM`] got at the LAN host
/// before the apply and after it.
#[derive(Debug, Clone)]
pub(super) struct Routed {
    pub before: Vec<Result<Probe, String>>,
    pub after: Vec<Result<Probe, String>>,
}

impl Routed {
    /// Whether the source at `i` of [`FROM`] holds: it reaches the LAN host after the apply only
    /// if it did before; a probe that failed to run holds nothing.
    pub fn holds(&self, i: usize) -> bool {
        match (&self.before[i], &self.after[i]) {
            (Ok(b), Ok(a)) => !a.is_reached() || b.is_reached(),
            _ => false,
        }
    }
}

#[test]
fn a_lan_host_reached_only_after_the_apply_fails_the_cell() {
    let r = |b: Probe, a: Probe| Routed {
        before: vec![Ok(b); 4],
        after: vec![Ok(a); 4],
    };
    assert!(r(Probe::Refused, Probe::Refused).holds(0));
    assert!(r(Probe::Reached, Probe::Reached).holds(0));
    assert!(r(Probe::Reached, Probe::TimedOut).holds(0));
    assert!(!r(Probe::Refused, Probe::Reached).holds(0));
    assert!(!r(Probe::TimedOut, Probe::Reached).holds(3));
    let failed = Routed {
        before: vec![Err("no probe".into()); 4],
        after: vec![Ok(Probe::Refused); 4],
    };
    assert!(!failed.holds(1), "a probe that did not run holds nothing");
}
