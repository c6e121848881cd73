//! What runs on this machine, read from the kernel: listening sockets and the processes holding
//! them, interfaces with their kinds and addresses, and routes.
//!
//! Everything is read for the network namespace of the *calling thread*: the socket and route
//! tables come from `/proc/thread-self/net/…` (`/proc/net` follows the main thread instead), and
//! interfaces from netlink and `getifaddrs`, whose sockets live in the caller's namespace. /sys is
//! deliberately not used for interfaces: it shows the namespace of whoever mounted it, so under
//! `nsenter --net` it would list the host's interfaces.
//!
//! Containers are not listed here; the core's container runtime seam supplies them.

mod interfaces;
mod netlink;
mod owners;
mod routes;
mod sockets;

use std::path::PathBuf;

pub use self::interfaces::{interfaces, Interface, InterfaceAddress, InterfaceKind};
pub use self::netlink::LinkEvents;
pub use self::owners::Owner;
pub use self::routes::{routes, Route};
pub use self::sockets::{listeners, peers_of, Listener, Proto};

use crate::error::Result;

/// Everything genesis found running on the machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inventory {
    /// Listening TCP sockets and bound, unconnected UDP sockets.
    pub listeners: Vec<Listener>,
    /// Every interface, loopback included, in index order.
    pub interfaces: Vec<Interface>,
    /// The main routing table of both families.
    pub routes: Vec<Route>,
}

impl Inventory {
    /// Reads the listeners, interfaces and routes of the calling thread's network namespace.
    /// Owners of sockets are found only among processes this one may inspect (all, as root).
    pub fn read() -> Result<Inventory> {
        Ok(Inventory {
            listeners: listeners()?,
            interfaces: interfaces()?,
            routes: routes()?,
        })
    }

    /// The listeners holding `port` for `protocol`, on any address or family.
    pub fn holding(&self, protocol: Proto, port: u16) -> Vec<&Listener> {
        self.listeners
            .iter()
            .filter(|l| l.protocol == protocol && l.port == port)
            .collect()
    }

    /// The interface called `name`, if there is one.
    pub fn interface(&self, name: &str) -> Option<&Interface> {
        self.interfaces.iter().find(|i| i.name == name)
    }
}

/// A table of the calling thread's network namespace, e.g. `net_table("tcp6")`.
fn net_table(name: &str) -> PathBuf {
    PathBuf::from("/proc/thread-self/net").join(name)
}
