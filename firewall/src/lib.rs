//! The firewall engine: detects the found firewall, converges marked openings through it and keeps the guard.

pub mod backend;
pub mod bpf;
pub mod child;
pub mod confirm;
pub mod dbus;
pub mod derive;
pub mod detect;
pub mod engine;
pub mod error;
pub mod eval;
pub mod filter;
pub mod found;
pub mod guard;
pub mod netlink;
pub mod opening;
pub mod outcome;
mod pair;
pub mod probe;
pub mod published;
pub mod retire;
pub mod rules;
pub mod xtables;

pub use derive::{derive, FoundationPorts, Inputs, Listen};
pub use engine::Firewall;
pub use error::{Errno, Error, Result};
pub use filter::FilterSpec;
pub use found::{Backend, Found, Layer, MESH_TABLE};
pub use guard::{
    GuardReport, GuardSpec, GuardStatus, GuardTable, GuardedPort, OldTable, PrivateSources,
};
pub use netlink::{
    BaseChain, Batch, Chain, ChainHook, ChainType, Claim, CmpOp, CtDirection, CtKey, CtState,
    Event, Expr, Family, Generation, Hook, ImmediateData, L4Proto, MetaKey, NfMonitor, NfSocket,
    PayloadBase, Policy, Position, Rule, RuleBody, Ruleset, Set, Table, TableFlags, Verdict,
};
pub use opening::{Network, Opening, Path, Proto};
pub use outcome::{Converged, LayerId, Presence, Scope, State};
pub use retire::{Retired, Saved};
