//! Genesis: the in-use and port checks, the node's port settings and the bundle.
//!
//! [`inventory`] reads what runs on this machine (listening sockets with their processes,
//! interfaces, routes) straight from the kernel, with no external command.

pub mod bundle;
pub mod checks;
mod error;
pub mod inventory;
pub mod ports;

pub use crate::error::{Error, Result};
pub use ports::{FoundationPorts, Proto};
