//! The ready topology of the adoption ADR's lab: the node being adopted, a machine outside the
//! private network, and a peer on it.

use std::net::IpAddr;

use crate::error::Result;
use crate::lab::{Lab, Switch};
use crate::machine::Machine;

/// Fixed addresses and interface names of [`Adoption`]. Only documentation and test ranges are
/// used, and only inside the lab's own namespaces.
///
/// | machine   | `eth0` (public, on the `wire` bridge) | `mesh0` (private, veth to the other) |
/// |-----------|----------------------------------------|--------------------------------------|
/// | `node`    | 192.0.2.10/24, 2001:db8:1::10/64       | 10.77.0.1/24, fd77::1/64             |
/// | `outside` | 192.0.2.20/24, 2001:db8:1::20/64       | —                                    |
/// | `peer`    | 192.0.2.30/24, 2001:db8:1::30/64       | 10.77.0.2/24, fd77::2/64             |
pub mod addr {
    use std::net::{Ipv4Addr, Ipv6Addr};

    /// The public interface of every machine, a port of the `wire` bridge.
    pub const PUBLIC_IF: &str = "eth0";
    /// The private network's interface on the node and the peer (the guard matches this name).
    pub const PRIVATE_IF: &str = "mesh0";

    /// The public network, 192.0.2.0/24 (TEST-NET-1) and 2001:db8:1::/64 (documentation).
    pub const PUBLIC_V4_NET: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 0);
    pub const PUBLIC_V4_PREFIX: u8 = 24;
    pub const PUBLIC_V6_NET: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0);
    pub const PUBLIC_V6_PREFIX: u8 = 64;

    /// The private network, 10.77.0.0/24 and fd77::/64.
    pub const PRIVATE_V4_NET: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 0);
    pub const PRIVATE_V4_PREFIX: u8 = 24;
    pub const PRIVATE_V6_NET: Ipv6Addr = Ipv6Addr::new(0xfd77, 0, 0, 0, 0, 0, 0, 0);
    pub const PRIVATE_V6_PREFIX: u8 = 64;

    pub const NODE_PUBLIC_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
    pub const NODE_PUBLIC_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0x10);
    pub const OUTSIDE_PUBLIC_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 20);
    pub const OUTSIDE_PUBLIC_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0x20);
    pub const PEER_PUBLIC_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 30);
    pub const PEER_PUBLIC_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0x30);

    pub const NODE_PRIVATE_V4: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
    pub const NODE_PRIVATE_V6: Ipv6Addr = Ipv6Addr::new(0xfd77, 0, 0, 0, 0, 0, 0, 1);
    pub const PEER_PRIVATE_V4: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
    pub const PEER_PRIVATE_V6: Ipv6Addr = Ipv6Addr::new(0xfd77, 0, 0, 0, 0, 0, 0, 2);

    /// Private-range sources the outside machine claims after
    /// [`Adoption::spoof_private_source`](super::Adoption::spoof_private_source).
    pub const SPOOFED_PRIVATE_V4: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 66);
    pub const SPOOFED_PRIVATE_V6: Ipv6Addr = Ipv6Addr::new(0xfd77, 0, 0, 0, 0, 0, 0, 0x66);
}

/// The adoption lab: `node` (the machine being adopted), `outside` (on the public side only) and
/// `peer` (on the public side and on the private network, reaching the node over `mesh0`), with
/// the public side joined by the switch `wire`. Addresses are in [`addr`].
#[derive(Debug, Clone)]
pub struct Adoption {
    pub node: Machine,
    pub outside: Machine,
    pub peer: Machine,
    pub wire: Switch,
}

impl Adoption {
    /// Builds the topology in `lab`: four namespaces, three bridge ports, one private veth pair,
    /// every address of [`addr`] assigned and every link up.
    pub fn build(lab: &Lab) -> Result<Adoption> {
        use addr::*;
        let wire = lab.switch("wire")?;
        let node = lab.machine("node")?;
        let outside = lab.machine("outside")?;
        let peer = lab.machine("peer")?;
        let public = [
            (&node, NODE_PUBLIC_V4, NODE_PUBLIC_V6),
            (&outside, OUTSIDE_PUBLIC_V4, OUTSIDE_PUBLIC_V6),
            (&peer, PEER_PUBLIC_V4, PEER_PUBLIC_V6),
        ];
        for (machine, v4, v6) in public {
            wire.attach(machine, PUBLIC_IF)?;
            machine.add_address(PUBLIC_IF, v4.into(), PUBLIC_V4_PREFIX)?;
            machine.add_address(PUBLIC_IF, v6.into(), PUBLIC_V6_PREFIX)?;
        }
        lab.veth(&node, PRIVATE_IF, &peer, PRIVATE_IF)?;
        node.add_address(PRIVATE_IF, NODE_PRIVATE_V4.into(), PRIVATE_V4_PREFIX)?;
        node.add_address(PRIVATE_IF, NODE_PRIVATE_V6.into(), PRIVATE_V6_PREFIX)?;
        peer.add_address(PRIVATE_IF, PEER_PRIVATE_V4.into(), PRIVATE_V4_PREFIX)?;
        peer.add_address(PRIVATE_IF, PEER_PRIVATE_V6.into(), PRIVATE_V6_PREFIX)?;
        Ok(Adoption {
            node,
            outside,
            peer,
            wire,
        })
    }

    /// Lets `outside` pretend to be on the private network: adds [`addr::SPOOFED_PRIVATE_V4`] and
    /// [`addr::SPOOFED_PRIVATE_V6`] to its `eth0` and routes the private network through the
    /// node's public addresses, so its packets to the node's private addresses arrive on the node's
    /// `eth0` with a private source. Replies go out the node's `mesh0` and never return, so a TCP
    /// probe from there never completes; send UDP with [`Machine::send_udp_from`] and check
    /// arrival with [`crate::UdpEcho::received_from`].
    pub fn spoof_private_source(&self) -> Result<()> {
        use addr::*;
        let outside = &self.outside;
        outside.add_address(PUBLIC_IF, SPOOFED_PRIVATE_V4.into(), 32)?;
        outside.add_address(PUBLIC_IF, SPOOFED_PRIVATE_V6.into(), 128)?;
        outside.add_route(
            IpAddr::V4(PRIVATE_V4_NET),
            PRIVATE_V4_PREFIX,
            NODE_PUBLIC_V4.into(),
        )?;
        outside.add_route(
            IpAddr::V6(PRIVATE_V6_NET),
            PRIVATE_V6_PREFIX,
            NODE_PUBLIC_V6.into(),
        )?;
        Ok(())
    }
}
