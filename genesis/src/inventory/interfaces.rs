//! Interfaces with their kind and addresses: links from an rtnetlink dump, addresses from
//! `getifaddrs`, both in the calling thread's network namespace.

use nix::sys::socket::SockaddrStorage;
use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

use super::netlink::{self, Link};
use crate::error::{Error, Result};

/// What an interface is, as far as adopting a machine cares.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum InterfaceKind {
    Loopback,
    /// A hardware (or virtio) Ethernet device: no rtnetlink kind, Ethernet hardware type.
    Ethernet,
    Veth,
    Bridge,
    /// A layer-3 tun device; a userspace WireGuard (wireguard-go) interface is one of these.
    Tun,
    /// A layer-2 tap device.
    Tap,
    /// A kernel WireGuard interface.
    WireGuard,
    /// An encapsulating tunnel, named by its kind (`gre`, `ipip`, `sit`, `vxlan`, `geneve`…).
    Tunnel(String),
    /// Anything else, named by its rtnetlink kind or hardware type (`vlan`, `macvlan`, `bond`…).
    Other(String),
}

impl fmt::Display for InterfaceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InterfaceKind::Loopback => f.write_str("loopback"),
            InterfaceKind::Ethernet => f.write_str("ethernet"),
            InterfaceKind::Veth => f.write_str("veth"),
            InterfaceKind::Bridge => f.write_str("bridge"),
            InterfaceKind::Tun => f.write_str("tun"),
            InterfaceKind::Tap => f.write_str("tap"),
            InterfaceKind::WireGuard => f.write_str("wireguard"),
            InterfaceKind::Tunnel(k) => write!(f, "tunnel {k}"),
            InterfaceKind::Other(k) => f.write_str(k),
        }
    }
}

/// An address assigned to an interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct InterfaceAddress {
    pub address: IpAddr,
    pub prefix_len: u8,
}

impl fmt::Display for InterfaceAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.address, self.prefix_len)
    }
}

/// A network interface of the machine.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Interface {
    pub index: u32,
    pub name: String,
    pub kind: InterfaceKind,
    /// Administratively up (`IFF_UP`).
    pub up: bool,
    pub mtu: u32,
    /// The hardware address as `aa:bb:cc:dd:ee:ff`, when the device has a non-zero one.
    pub mac: Option<String>,
    /// The bridge or bond this interface is a port of.
    pub master: Option<String>,
    /// IPv4 then IPv6 addresses, link-local ones included.
    pub addresses: Vec<InterfaceAddress>,
}

const ARPHRD_ETHER: u16 = 1;
const ARPHRD_LOOPBACK: u16 = 772;
const ARPHRD_NONE: u16 = 65534;
const IFF_UP: u32 = 0x1;
const IFF_LOOPBACK: u32 = 0x8;

/// Every interface of the calling thread's network namespace, in index order.
pub fn interfaces() -> Result<Vec<Interface>> {
    let links = netlink::dump_links().map_err(|source| Error::Netlink {
        request: "RTM_GETLINK",
        source,
    })?;
    let mut addresses = addresses()?;
    let names: BTreeMap<u32, String> = links.iter().map(|l| (l.index, l.name.clone())).collect();
    let mut found: Vec<Interface> = links
        .into_iter()
        .map(|link| {
            let mut addrs = addresses.remove(&link.name).unwrap_or_default();
            addrs.sort_by_key(|a| (a.address.is_ipv6(), a.address, a.prefix_len));
            addrs.dedup();
            Interface {
                index: link.index,
                kind: classify(&link),
                up: link.flags & IFF_UP != 0,
                mtu: link.mtu,
                mac: mac(&link.address),
                master: link.master.and_then(|m| names.get(&m).cloned()),
                addresses: addrs,
                name: link.name,
            }
        })
        .collect();
    found.sort_by_key(|i| i.index);
    Ok(found)
}

/// Decides the kind from the rtnetlink kind first (it is what the device was created as), then
/// from the hardware type for devices that have none.
pub(crate) fn classify(link: &Link) -> InterfaceKind {
    if link.hw_type == ARPHRD_LOOPBACK || link.flags & IFF_LOOPBACK != 0 {
        return InterfaceKind::Loopback;
    }
    match link.kind.as_deref() {
        Some("veth") => InterfaceKind::Veth,
        Some("bridge") => InterfaceKind::Bridge,
        Some("wireguard") => InterfaceKind::WireGuard,
        Some("tun") => match (link.tun_type, link.hw_type) {
            (Some(2), _) | (None, ARPHRD_ETHER) => InterfaceKind::Tap,
            _ => InterfaceKind::Tun,
        },
        Some(
            k @ ("ipip" | "gre" | "gretap" | "ip6gre" | "ip6gretap" | "sit" | "ip6tnl" | "vti"
            | "vti6" | "vxlan" | "geneve" | "erspan" | "ip6erspan" | "bareudp" | "gtp"),
        ) => InterfaceKind::Tunnel(k.to_owned()),
        Some(other) => InterfaceKind::Other(other.to_owned()),
        None if link.hw_type == ARPHRD_ETHER => InterfaceKind::Ethernet,
        None if link.hw_type == ARPHRD_NONE => InterfaceKind::Tun,
        None => InterfaceKind::Other(format!("hardware type {}", link.hw_type)),
    }
}

fn mac(address: &[u8]) -> Option<String> {
    if address.len() != 6 || address.iter().all(|b| *b == 0) {
        return None;
    }
    Some(
        address
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":"),
    )
}

/// Addresses by interface name, from getifaddrs (which asks rtnetlink in the caller's namespace).
fn addresses() -> Result<BTreeMap<String, Vec<InterfaceAddress>>> {
    let list = nix::ifaddrs::getifaddrs().map_err(|errno| Error::Addresses {
        source: errno.into(),
    })?;
    let mut found: BTreeMap<String, Vec<InterfaceAddress>> = BTreeMap::new();
    for entry in list {
        let Some(address) = entry.address.as_ref().and_then(ip_of) else {
            continue;
        };
        let prefix_len = match entry.netmask.as_ref().and_then(ip_of) {
            Some(IpAddr::V4(m)) => u32::from(m).count_ones() as u8,
            Some(IpAddr::V6(m)) => u128::from(m).count_ones() as u8,
            None if address.is_ipv4() => 32,
            None => 128,
        };
        found
            .entry(entry.interface_name)
            .or_default()
            .push(InterfaceAddress {
                address,
                prefix_len,
            });
    }
    Ok(found)
}

/// The IP address of an AF_INET or AF_INET6 socket address; `None` for any other family.
fn ip_of(sa: &SockaddrStorage) -> Option<IpAddr> {
    if let Some(v4) = sa.as_sockaddr_in() {
        return Some(IpAddr::V4(v4.ip()));
    }
    sa.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(hw_type: u16, flags: u32, kind: Option<&str>, tun_type: Option<u8>) -> Link {
        Link {
            hw_type,
            flags,
            kind: kind.map(str::to_owned),
            tun_type,
            ..Link::default()
        }
    }

    #[test]
    fn kinds_come_from_the_link_kind_then_the_hardware_type() {
        let cases = [
            (
                link(ARPHRD_LOOPBACK, IFF_LOOPBACK, None, None),
                InterfaceKind::Loopback,
            ),
            (link(ARPHRD_ETHER, 0, None, None), InterfaceKind::Ethernet),
            (
                link(ARPHRD_ETHER, 0, Some("veth"), None),
                InterfaceKind::Veth,
            ),
            (
                link(ARPHRD_ETHER, 0, Some("bridge"), None),
                InterfaceKind::Bridge,
            ),
            (
                link(ARPHRD_NONE, 0, Some("tun"), Some(1)),
                InterfaceKind::Tun,
            ),
            (
                link(ARPHRD_ETHER, 0, Some("tun"), Some(2)),
                InterfaceKind::Tap,
            ),
            (link(ARPHRD_ETHER, 0, Some("tun"), None), InterfaceKind::Tap),
            (
                link(ARPHRD_NONE, 0, Some("wireguard"), None),
                InterfaceKind::WireGuard,
            ),
            (
                link(778, 0, Some("gre"), None),
                InterfaceKind::Tunnel("gre".into()),
            ),
            (
                link(ARPHRD_ETHER, 0, Some("vxlan"), None),
                InterfaceKind::Tunnel("vxlan".into()),
            ),
            (
                link(ARPHRD_ETHER, 0, Some("vlan"), None),
                InterfaceKind::Other("vlan".into()),
            ),
            (link(ARPHRD_NONE, 0, None, None), InterfaceKind::Tun),
            (
                link(512, 0, None, None),
                InterfaceKind::Other("hardware type 512".into()),
            ),
        ];
        for (link, expected) in cases {
            assert_eq!(classify(&link), expected, "{link:?}");
        }
    }

    #[test]
    fn zero_or_odd_hardware_addresses_have_no_mac() {
        assert_eq!(
            mac(&[0x02, 0x42, 0xac, 0x11, 0, 2]).as_deref(),
            Some("02:42:ac:11:00:02")
        );
        assert_eq!(mac(&[0; 6]), None);
        assert_eq!(mac(&[]), None);
    }
}
