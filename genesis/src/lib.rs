//! Genesis: the in-use and port checks, the node's port settings and the bundle.

pub mod bundle;
pub mod checks;
pub mod ports;

pub use ports::{FoundationPorts, Proto};
