//! A small nf_tables codec over raw netlink sockets: atomic batches on a socket the caller keeps,
//! tolerant listing per family, the expressions mesh-host writes, table ownership, and events.
//!
//! It needs no `nft`, no libnftnl and no kernel headers: constants are defined in [`consts`].

pub(crate) mod attr;
pub mod backoff;
mod batch;
pub mod consts;
mod expr;
mod ipset;
mod keys;
mod list;
mod listing;
mod monitor;
mod msg;
mod rule;
mod socket;
mod types;
mod watch;

#[cfg(test)]
mod fuzz;

pub use backoff::Backoff;
pub use batch::{BaseChain, Batch, Position};
pub use expr::{CmpOp, CtDirection, CtKey, Expr, FibResult, ImmediateData, MetaKey, PayloadBase};
pub use ipset::{Ipset, Member};
pub use list::{Chain, ChainHook, Elem, ElemData, Rule, Ruleset, Set, Table};
pub use listing::{BY_TABLE_FOR, WHOLE_TRIES};
pub use monitor::{Event, Generation, NfMonitor};
pub use rule::{
    decode_comment_udata, encode_comment_udata, CtState, L4Proto, RuleBody, MAX_COMMENT_LEN,
};
pub use socket::{Claim, NfSocket};
pub use types::{ChainType, Family, Hook, Policy, TableFlags, Verdict};
