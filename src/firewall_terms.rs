//! The firewall crate's plain terms the core names — an opening and its parts, the guard's and
//! the filter's specs, a retired kind, a layer's identity, the evaluator's verdicts, the derived
//! openings' inputs — and its pure functions (`derive`, `rules::mark`, `opening::check_interface`),
//! handed on with no act of their own: the declaration, the store and the system
//! backends name them from here without importing `node_firewall/` (which imports them: that
//! would be a loop), and `node_firewall/` re-exports them for the rest. Every act on the
//! firewall goes through `node_firewall/`; this file and that folder are the only places of
//! `src/` that name the firewall crate.

pub use firewall::{
    derive, Backend, Converged, Family, FilterSpec, Found, FoundationPorts, GuardReport, GuardSpec,
    GuardStatus, Inputs, Layer, LayerId, Listen, Network, Opening, Presence, Proto, Retired, Scope,
    State, MESH_TABLE,
};
/// The evaluator's terms: a connection's ways, their parts and how each ends.
pub mod eval {
    pub use firewall::eval::{Addrs, Answer, Decider, Fam, Fate, Part, Refusal, Verdict, Way};
}
/// An opening's parts and the checks of its values.
pub mod opening {
    pub use firewall::opening::{check_interface, From, Opening, Path, MAX_ID_LEN};
}
/// The marks of the mesh's rules.
pub mod rules {
    pub use firewall::rules::{id_of, mark};
}
/// The guard's BPF layer: where it is pinned and what the kernel says of its links.
pub mod bpf {
    pub use firewall::bpf::{BpfReport, BpfStatus, LinkInfo, Loaded, Pins, HOOKS};
}
/// The derived filter's chains in the mesh's table.
pub mod filter {
    pub use firewall::filter::{FORWARD_CHAIN, INPUT_CHAIN};
}
