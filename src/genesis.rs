//! Genesis in the core: the node's settings from the foundation's ports, and back.

use crate::declaration::Ports;

/// The genesis crate's view of the node's ports.
pub fn foundation_ports(p: Ports) -> genesis::FoundationPorts {
    genesis::FoundationPorts {
        store: p.store,
        bus: p.bus,
        broker_management: p.broker_management,
        registry: p.registry,
        hub: p.hub,
    }
}

/// The node's settings' ports from the genesis crate's.
pub fn settings_ports(g: genesis::FoundationPorts) -> Ports {
    Ports {
        store: g.store,
        bus: g.bus,
        broker_management: g.broker_management,
        registry: g.registry,
        hub: g.hub,
    }
}
