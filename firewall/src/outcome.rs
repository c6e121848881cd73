//! What a convergence says: the scope it may sweep, how each opening stands in each layer, and
//! what it changed. The engine and every driver speak these; neither owns them.

use crate::found::Backend;
use crate::netlink::Family;
use std::collections::BTreeMap;
use std::fmt;

/// Which marked rules a convergence may remove.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Only rules of the openings given (their older versions, or where they no longer belong).
    Given,
    /// Every marked rule not of the openings given: a whole declaration's openings.
    All,
}

/// How an opening stands in one layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// The layer refuses nothing of it by default, or already accepts it: no rule is needed.
    NotNeeded(String),
    /// Its marked rules are in place.
    Present,
    /// Its rules are not (yet) in place.
    Missing,
    /// The operator's rule refuses exactly its port there; the host does not write ahead of it.
    Refused(String),
    /// The layer would refuse it and the host cannot write there.
    Unwritable(String),
    /// A rule on its way decides by something the host cannot follow (a verdict map, a
    /// queue): whether the layer admits it cannot be told, so it is not said to.
    Doubtful(String),
    /// Not admitted, and not written: every place its rule could go would also change what is
    /// not its own (forwarding, a ban, a limit, another port); says what and which rule.
    Bypass(String),
}

impl State {
    /// Whether the layer admits the opening.
    pub fn admits(&self) -> bool {
        matches!(self, State::NotNeeded(_) | State::Present)
    }

    /// How a person reads it.
    pub fn describe(&self) -> String {
        match self {
            State::NotNeeded(why) => format!("no rule needed: {why}"),
            State::Present => "present".into(),
            State::Missing => "missing".into(),
            State::Refused(rule) => format!("refused by the operator's rule {rule}"),
            State::Unwritable(why) => format!("missing: {why}"),
            State::Bypass(why) => format!("not admitted: {why}"),
            State::Doubtful(rule) => format!(
                "cannot be told: a rule on its way decides by something the host does not follow ({rule})"
            ),
        }
    }
}

/// Which layer a state is of: a base chain of one table, written by one backend. Read by its
/// fields; its words (`ip filter INPUT (iptables-nft)`) are its `Display`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LayerId {
    pub backend: Backend,
    pub family: Family,
    pub table: String,
    pub chain: String,
}

impl fmt::Display for LayerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {} ({})",
            self.family, self.table, self.chain, self.backend
        )
    }
}

/// Whether an opening is in force in one layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Presence {
    pub layer: LayerId,
    /// The chain its rule goes in, when it needs one (a chain the layer jumps to, or its own).
    pub chain: Option<String>,
    pub state: State,
}

impl Presence {
    pub fn present(&self) -> bool {
        self.state.admits()
    }
}

/// What a convergence changed, per layer, and where each opening stands after it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Converged {
    /// (opening id, table) for each opening written into a table.
    pub added: Vec<(String, String)>,
    /// (mark, table) for each marked rule removed.
    pub removed: Vec<(String, String)>,
    /// Opening id → how it stands in each layer its packets cross.
    pub states: BTreeMap<String, Vec<Presence>>,
    /// Marked rules of openings not given, left in place (scope `Given`): what a convergence of
    /// every declared opening with scope `All` would remove. Zero means there is nothing to sweep.
    pub stale: usize,
}
