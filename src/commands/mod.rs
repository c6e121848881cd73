//! The commands: what each subcommand of `mesh-host` does, above the domain (declaration, store,
//! apply, node_firewall, resident, system), which never imports this layer.

pub mod boot;
pub mod cli;
pub mod converge;
pub mod enrol;
pub mod exit;
pub mod genesis;
pub mod inventory;
pub mod link_status;
pub mod man;
pub mod release;
pub mod status;

pub use exit::{Exit, Refusal};
