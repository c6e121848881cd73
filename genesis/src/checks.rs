//! The checks genesis makes before it changes anything, all reported at once: whether the
//! machine is in use (for a converged raise), whether each foundation port is free, and whether
//! the private network's range overlaps an address or route already on the machine.
//!
//! They are pure functions over a [`Machine`] view, which the core fills from the inventory and
//! the container runtime, so they are tested without a machine.

use crate::ports::{FoundationPorts, Proto};
use std::fmt;
use std::net::IpAddr;

/// A socket listening (TCP) or bound (UDP) on the machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    pub proto: Proto,
    pub addr: IpAddr,
    pub port: u16,
    pub pid: Option<u32>,
    pub process: Option<String>,
}

/// A port a running container publishes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    pub addr: Option<IpAddr>,
    pub port: u16,
    pub proto: Proto,
}

/// A running container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Container {
    pub name: String,
    pub image: String,
    pub published: Vec<Published>,
}

/// An address or a route on an interface, as a network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Network {
    pub interface: String,
    pub addr: IpAddr,
    pub len: u8,
}

/// What genesis reads of the machine.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Machine {
    pub listeners: Vec<Listener>,
    pub containers: Vec<Container>,
    pub networks: Vec<Network>,
}

/// One reason genesis refuses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// A container is running (a converged raise refuses a machine in use).
    ContainerRunning { name: String, image: String },
    /// Something listens on an address other than loopback, and it is not ssh.
    Listening(Listener),
    /// A foundation port is held.
    PortHeld {
        name: &'static str,
        port: u16,
        proto: Proto,
        by: String,
    },
    /// The private range overlaps a network already on an interface.
    RangeOverlaps {
        range: String,
        interface: String,
        network: String,
    },
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Finding::ContainerRunning { name, image } => {
                write!(f, "in use: container {name} ({image}) is running")
            }
            Finding::Listening(l) => write!(f, "in use: {} {}", l.proto, describe(l)),
            Finding::PortHeld {
                name,
                port,
                proto,
                by,
            } => {
                write!(f, "port: the {name} port {proto}/{port} is held by {by}; give another with --ports {name}=PORT")
            }
            Finding::RangeOverlaps {
                range,
                interface,
                network,
            } => {
                write!(f, "private range: {range} overlaps {network} on interface {interface}; give another with --private-range")
            }
        }
    }
}

fn describe(l: &Listener) -> String {
    let addr = match l.addr {
        IpAddr::V6(a) => format!("[{a}]:{}", l.port),
        IpAddr::V4(a) => format!("{a}:{}", l.port),
    };
    match (&l.process, l.pid) {
        (Some(p), Some(pid)) => format!("{addr} is listened on by {p} (pid {pid})"),
        (None, Some(pid)) => format!("{addr} is listened on by pid {pid}"),
        _ => format!("{addr} is listened on (owner not visible)"),
    }
}

/// Whether a listener is ssh's: the machine's way in is never counted as "in use".
fn is_ssh(l: &Listener) -> bool {
    l.process.as_deref() == Some("sshd") || (l.proto == Proto::Tcp && l.port == 22)
}

/// Everything that makes a machine in use: every running container, and every listener on an
/// address other than loopback that is not ssh's.
pub fn in_use(m: &Machine) -> Vec<Finding> {
    let mut out: Vec<Finding> = m
        .containers
        .iter()
        .map(|c| Finding::ContainerRunning {
            name: c.name.clone(),
            image: c.image.clone(),
        })
        .collect();
    out.extend(
        m.listeners
            .iter()
            .filter(|l| !l.addr.is_loopback() && !is_ssh(l))
            .map(|l| Finding::Listening(l.clone())),
    );
    out
}

/// Every foundation port something already holds, named with what holds it. A container's
/// published port is named by the container (its proxy process is the same holder).
pub fn held_ports(m: &Machine, ports: &FoundationPorts) -> Vec<Finding> {
    let mut out = Vec::new();
    for (name, port, proto) in ports.each() {
        let container = m.containers.iter().find(|c| {
            c.published
                .iter()
                .any(|p| p.port == port && p.proto == proto)
        });
        let by = match container {
            Some(c) => Some(format!("container {} ({})", c.name, c.image)),
            None => m
                .listeners
                .iter()
                .find(|l| l.port == port && l.proto == proto)
                .map(|l| match (&l.process, l.pid) {
                    (Some(p), Some(pid)) => format!("{p} (pid {pid})"),
                    (None, Some(pid)) => format!("pid {pid}"),
                    _ => "a socket whose owner is not visible".to_string(),
                }),
        };
        if let Some(by) = by {
            out.push(Finding::PortHeld {
                name,
                port,
                proto,
                by,
            });
        }
    }
    out
}

/// The network an address belongs to at a prefix length: `10.77.0.1/16` is in `10.77.0.0/16`.
fn network_of(addr: IpAddr, len: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let mask = u32::MAX
                .checked_shl(32 - u32::from(len.min(32)))
                .unwrap_or(0);
            IpAddr::V4((u32::from(a) & mask).into())
        }
        IpAddr::V6(a) => {
            let mask = u128::MAX
                .checked_shl(128 - u32::from(len.min(128)))
                .unwrap_or(0);
            IpAddr::V6((u128::from(a) & mask).into())
        }
    }
}

fn overlaps(a: IpAddr, alen: u8, b: IpAddr, blen: u8) -> bool {
    let len = alen.min(blen);
    match (a, b) {
        (IpAddr::V4(x), IpAddr::V4(y)) => {
            let mask = if len == 0 {
                0
            } else {
                u32::MAX << (32 - len as u32)
            };
            u32::from(x) & mask == u32::from(y) & mask
        }
        (IpAddr::V6(x), IpAddr::V6(y)) => {
            let mask = if len == 0 {
                0
            } else {
                u128::MAX << (128 - len as u32)
            };
            u128::from(x) & mask == u128::from(y) & mask
        }
        _ => false,
    }
}

/// Every network on an interface (other than the private network's own) that the private range
/// overlaps: a predecessor's tunnel still running, a LAN on the same range. Default routes are
/// not networks and are skipped. An address is named by its network, so an interface's address
/// and the route the kernel makes for it are one finding, not two.
pub fn range_overlaps(m: &Machine, range: (IpAddr, u8), private_interface: &str) -> Vec<Finding> {
    let text = format!("{}/{}", range.0, range.1);
    let mut out: Vec<Finding> = Vec::new();
    for n in &m.networks {
        if n.len == 0
            || n.interface == private_interface
            || !overlaps(range.0, range.1, n.addr, n.len)
        {
            continue;
        }
        let f = Finding::RangeOverlaps {
            range: text.clone(),
            interface: n.interface.clone(),
            network: format!("{}/{}", network_of(n.addr, n.len), n.len),
        };
        if !out.contains(&f) {
            out.push(f);
        }
    }
    out
}

/// All of genesis's checks at once. `converged` adds the in-use check.
pub fn preflight(
    m: &Machine,
    converged: bool,
    ports: &FoundationPorts,
    range: (IpAddr, u8),
    private_interface: &str,
) -> Vec<Finding> {
    let mut out = Vec::new();
    if converged {
        out.extend(in_use(m));
    }
    out.extend(held_ports(m, ports));
    out.extend(range_overlaps(m, range, private_interface));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listener(addr: &str, port: u16, process: &str, pid: u32) -> Listener {
        Listener {
            proto: Proto::Tcp,
            addr: addr.parse().unwrap(),
            port,
            pid: Some(pid),
            process: Some(process.into()),
        }
    }

    fn machine() -> Machine {
        Machine {
            listeners: vec![
                listener("0.0.0.0", 22, "sshd", 10),
                listener("127.0.0.1", 6379, "redis-server", 11),
                listener("::", 8080, "httpd", 12),
                listener("0.0.0.0", 5000, "docker-proxy", 13),
            ],
            containers: vec![Container {
                name: "predecessor-registry".into(),
                image: "registry:2".into(),
                published: vec![Published {
                    addr: None,
                    port: 5000,
                    proto: Proto::Tcp,
                }],
            }],
            networks: vec![
                Network {
                    interface: "eth0".into(),
                    addr: "192.0.2.10".parse().unwrap(),
                    len: 24,
                },
                Network {
                    interface: "wg0".into(),
                    addr: "10.77.0.0".parse().unwrap(),
                    len: 16,
                },
                Network {
                    interface: "eth0".into(),
                    addr: "0.0.0.0".parse().unwrap(),
                    len: 0,
                },
            ],
        }
    }

    #[test]
    fn in_use_names_every_container_and_listener_but_ssh_and_loopback() {
        let f = in_use(&machine());
        let text: Vec<String> = f.iter().map(|x| x.to_string()).collect();
        assert_eq!(
            text,
            vec![
                "in use: container predecessor-registry (registry:2) is running",
                "in use: tcp [::]:8080 is listened on by httpd (pid 12)",
                "in use: tcp 0.0.0.0:5000 is listened on by docker-proxy (pid 13)",
            ]
        );
    }

    #[test]
    fn a_held_port_names_its_holder() {
        let f = held_ports(&machine(), &FoundationPorts::default());
        assert_eq!(f.len(), 1);
        assert_eq!(
            f[0].to_string(),
            "port: the registry port tcp/5000 is held by container predecessor-registry (registry:2); give another with --ports registry=PORT"
        );
        let moved = FoundationPorts {
            registry: 5001,
            ..FoundationPorts::default()
        };
        assert!(held_ports(&machine(), &moved).is_empty());
        let on_listener = FoundationPorts { bus: 8080, ..moved };
        assert!(held_ports(&machine(), &on_listener)[0]
            .to_string()
            .contains("held by httpd (pid 12)"));
    }

    #[test]
    fn an_overlapping_range_names_the_interface() {
        let f = range_overlaps(&machine(), ("10.77.0.0".parse().unwrap(), 24), "mesh0");
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].to_string(), "private range: 10.77.0.0/24 overlaps 10.77.0.0/16 on interface wg0; give another with --private-range");
        assert!(range_overlaps(&machine(), ("10.78.0.0".parse().unwrap(), 24), "mesh0").is_empty());
        assert!(range_overlaps(&machine(), ("10.77.0.0".parse().unwrap(), 24), "wg0").is_empty());
    }

    #[test]
    fn an_address_and_its_route_are_one_overlap_named_by_the_network() {
        let tunnel = |addr: &str| Network {
            interface: "wg-old".into(),
            addr: addr.parse().unwrap(),
            len: 16,
        };
        let m = Machine {
            networks: vec![tunnel("10.77.0.1"), tunnel("10.77.0.0")],
            ..Machine::default()
        };
        let f = range_overlaps(&m, ("10.77.0.0".parse().unwrap(), 24), "mesh0");
        let text: Vec<String> = f.iter().map(|x| x.to_string()).collect();
        assert_eq!(text, ["private range: 10.77.0.0/24 overlaps 10.77.0.0/16 on interface wg-old; give another with --private-range"]);
        assert_eq!(
            network_of("fd77::1".parse().unwrap(), 64),
            "fd77::".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            network_of("10.1.2.3".parse().unwrap(), 0),
            "0.0.0.0".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            network_of("10.1.2.3".parse().unwrap(), 32),
            "10.1.2.3".parse::<IpAddr>().unwrap()
        );
    }

    #[test]
    fn an_adopted_preflight_does_not_count_use() {
        let ports = FoundationPorts {
            registry: 5001,
            ..FoundationPorts::default()
        };
        let range = ("10.78.0.0".parse().unwrap(), 24);
        assert!(preflight(&machine(), false, &ports, range, "mesh0").is_empty());
        assert_eq!(preflight(&machine(), true, &ports, range, "mesh0").len(), 3);
    }
}
