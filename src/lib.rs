//! The mesh-host core: declarations, the store, the apply loop, adoption of what is found, the
//! briefing and the command line. The firewall and genesis crates are driven from here.

pub mod accounts;
pub mod apply;
pub mod beneath;
pub mod briefing;
pub mod build;
pub mod commands;
pub mod counter;
pub mod declaration;
pub mod error;
pub mod failpoint;
pub mod firewall_terms;
pub mod json_contract;
pub mod launch;
pub mod link;
pub mod logging;
pub mod node_firewall;
pub mod pid_file;
pub mod progress;
pub mod release;
pub mod resident;
pub mod store;
pub mod system;
mod wakeup;

pub use commands::cli::{run, Cli};
pub use error::error_text;
