//! The evaluator of the found firewall: the verdict of a new connection computed through every
//! base chain at every hook it crosses, as the kernel would decide it, with its sources kept as
//! a set so that a ban splits them ("admitted, except from 10.200.1.2, refused by …") instead of
//! making the answer a guess.
//!
//! What the host says about an opening is what the operator acts on, so it comes from here and
//! not from the shapes of rules: [`Model`] reads the listing (nf_tables over netlink with every
//! set's elements, iptables-legacy from its save), [`Model::evaluate`] walks it for a [`Conn`].
//! A match that does not depend on which connection it is (counter, log, `limit`, quota,
//! `pkttype host`, `ct state new`, the protocol, the family, comments) is read as what it is: a
//! rate-limited reject refuses. A limit over a rate or a count (`add @s { ip saddr limit rate
//! over … } drop`, `ct count over`) does not hold for a connection that does not flood, but is
//! recorded in [`Outcome::limits`] and never placed behind. A test the evaluator cannot decide
//! yields *doubtful* where the two ways it could go end differently, naming the rule and what it
//! tests. How each expression is read: docs/EXPRESSIONS.md.
//!
//! The connection is concrete in everything but its source: family, protocol, destination port
//! (and, forwarded, the port the runtime's DNAT sends it to), the interface it arrives on and
//! leaves by, state new, no mark until a rule sets one, a SYN for tcp, a unicast source that the
//! reverse-path check accepts, a destination of this machine (incoming) or routed on.

mod addrs;
pub mod check;
mod ipsets;
mod ir;
mod legacy;
mod lower;
mod model;
mod opening;
mod summary;
mod values;
mod walk;
mod xt;

#[cfg(test)]
mod expr_tests;
#[cfg(test)]
mod fuzz;
#[cfg(test)]
mod place_tests;
#[cfg(test)]
mod summary_tests;

pub use addrs::{Addrs, Fam};
pub use model::{parse_save, Edit, EditWhat, Model, SavedTable, Snapshot};
pub use opening::{
    families, interfaces, mark_runtime_bridges, placed_ways, ways, Iface, Part, Verdict, Way,
};
pub use summary::{Clause, Summary};

use std::fmt;
use std::net::IpAddr;

/// The way a new connection takes through this machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Path {
    /// To a service of this machine: ingress, prerouting, input.
    Incoming,
    /// To a container behind DNAT: ingress, prerouting (DNAT at priority -100), forward,
    /// postrouting.
    Forwarded,
}

/// A symbolic new connection: concrete but for its sources, which the walk keeps as a set.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Conn {
    pub fam: Fam,
    /// 6 (tcp) or 17 (udp).
    pub proto: u8,
    /// The destination port as sent (the published port, when forwarded).
    pub port: u16,
    pub path: Path,
    /// Forwarded: the port after the runtime's DNAT (the container's), when known.
    pub to_port: Option<u16>,
    /// The interface it arrives on, and its index (1 is always `lo`).
    pub iif: String,
    pub iif_index: Option<u32>,
    /// Forwarded: the interface it leaves by (the runtime's bridge), and its index.
    pub oif: Option<String>,
    pub oif_index: Option<u32>,
    /// The address it is sent to, when known: a rule about the destination is decided only then.
    pub daddr: Option<IpAddr>,
    /// Forwarded without the runtime's DNAT: routed on to a host behind this machine as sent
    /// (conntrack says no `dnat`); the check asks about these beside the published ports.
    pub routed: bool,
}

impl Conn {
    /// A connection to `port` arriving on `iif`, to this machine.
    pub fn incoming(fam: Fam, proto: u8, port: u16, iif: &str) -> Conn {
        Conn {
            fam,
            proto,
            port,
            path: Path::Incoming,
            to_port: None,
            iif: iif.to_string(),
            iif_index: None,
            oif: None,
            oif_index: None,
            daddr: None,
            routed: false,
        }
    }
}

/// A rule, a policy or a chain that decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decider {
    /// `inet filter`, `ip6 filter`, `iptables-legacy filter`.
    pub table: String,
    pub chain: String,
    /// The nf_tables handle, or a legacy rule's position in its save.
    pub handle: Option<u64>,
    /// The rule's index in its chain as listed (the mesh's rules included).
    pub index: Option<usize>,
    /// The rule as listed, or `policy drop`.
    pub text: String,
}

impl Decider {
    /// Where it stands: `inet filter input`.
    pub fn place(&self) -> String {
        format!("{} {}", self.table, self.chain)
    }
}

impl fmt::Display for Decider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.table, self.chain, self.text)
    }
}

/// Why the operator's firewall refuses some sources.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// A refusal of particular sources (a blocklist set, an address, a network's chain).
    Ban,
    /// A refusal that names this port (equal, in a range, a set or a verdict map).
    Port,
}

/// How a new connection from some sources ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fate {
    /// It reaches accept on every base chain on its way.
    Admitted,
    /// The operator refuses it by naming its sources or its port: the operator's word.
    Refused { by: Decider, why: Refusal },
    /// A refusal of everything not admitted before it (a catch-all, a rate-limited reject, a
    /// policy drop): what an opening's rule is written ahead of.
    NotAdmitted { by: Decider },
    /// A test the evaluator cannot decide would change the answer.
    Doubtful { by: Decider, what: String },
}

impl Fate {
    /// The same answer (the same kind and the same deciding rule).
    pub fn same(&self, other: &Fate) -> bool {
        self == other
    }

    /// One word for scripts: `admitted`, `refused`, `not-admitted`, `doubtful`.
    pub fn word(&self) -> &'static str {
        match self {
            Fate::Admitted => "admitted",
            Fate::Refused { .. } => "refused",
            Fate::NotAdmitted { .. } => "not-admitted",
            Fate::Doubtful { .. } => "doubtful",
        }
    }

    /// The rule that decided, if one did.
    pub fn by(&self) -> Option<&Decider> {
        match self {
            Fate::Admitted => None,
            Fate::Refused { by, .. } | Fate::NotAdmitted { by } | Fate::Doubtful { by, .. } => {
                Some(by)
            }
        }
    }

    /// As a person reads it.
    pub fn describe(&self) -> String {
        match self {
            Fate::Admitted => "admitted".into(),
            Fate::Refused {
                by,
                why: Refusal::Ban,
            } => format!("refused by the operator's rule {by} (a ban of these sources)"),
            Fate::Refused {
                by,
                why: Refusal::Port,
            } => format!("refused by the operator's rule {by}, which names the port"),
            Fate::NotAdmitted { by } => format!("not admitted: {by}"),
            Fate::Doubtful { by, what } => {
                format!("doubtful: {by} tests {what}, which cannot be told")
            }
        }
    }
}

/// One part of the sources and how its connections end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub sources: Addrs,
    pub fate: Fate,
    /// The verdicts met on the way, when a trace was asked for.
    pub trace: Vec<String>,
    /// The limits these connections passed on their way, in order: rules that refuse a source
    /// past a rate or a count (`add @s { ip saddr limit rate over … } drop`, `ct count over`,
    /// `--hashlimit-above`), which do not decide a connection that does not flood but are
    /// refusals that must stay ahead of any opening. A write that makes a connection skip one
    /// changes this list.
    pub limits: Vec<Decider>,
}

/// One way of a connection's walk where a test on it cannot be decided: the sources on it, how
/// it ends, the limits met, and each undecided test it took (the rule) and which way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Branch {
    pub sources: Addrs,
    pub fate: Fate,
    pub limits: Vec<Decider>,
    pub forks: Vec<(Decider, bool)>,
}

/// The answer for a connection: its sources partitioned by fate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub parts: Vec<Outcome>,
}

impl Answer {
    /// The fate of a connection from `addr`, if `addr` is among the sources asked about.
    pub fn fate_of(&self, addr: IpAddr) -> Option<&Fate> {
        self.parts
            .iter()
            .find(|o| o.sources.contains(addr))
            .map(|o| &o.fate)
    }

    /// The opening's state: present when every source the operator does not refuse is
    /// admitted; otherwise the first part that is doubtful, then not admitted, then refused.
    pub fn summary(&self) -> &Fate {
        const ADMITTED: Fate = Fate::Admitted;
        let pick = |w: &str| {
            self.parts
                .iter()
                .find(|o| o.fate.word() == w)
                .map(|o| &o.fate)
        };
        if let Some(f) = pick("doubtful").or_else(|| pick("not-admitted")) {
            return f;
        }
        if self.parts.iter().any(|o| o.fate == Fate::Admitted) {
            return &ADMITTED;
        }
        pick("refused").unwrap_or(&ADMITTED)
    }

    /// The parts refused by the operator while others are admitted: its bans doing their job.
    pub fn exceptions(&self) -> impl Iterator<Item = &Outcome> {
        self.parts
            .iter()
            .filter(|o| matches!(o.fate, Fate::Refused { .. }))
    }
}

/// Where an opening's rule goes in one base chain, from the walk of that chain alone with the
/// mesh's own rules left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// Every source is accepted or let on by this chain already.
    NotNeeded(String),
    /// Before the rule at `index` of `chain` (the refusal that would take it), or at the end of
    /// `chain` when `None` (its policy refuses).
    At {
        chain: String,
        index: Option<usize>,
        by: Decider,
    },
    /// The operator refuses exactly this port, or every declared source is banned.
    Refused(Decider),
    /// A test on the way cannot be decided; `then` is where it would go otherwise.
    Doubtful {
        by: Decider,
        what: String,
        then: Box<Placement>,
    },
}

/// Whether a listed nf_tables rule is about new connections of protocol `proto` to port `port`
/// alone, as the evaluator reads its tests: an equality on the protocol and a first test of the
/// destination port that names `port` and no other. Where a runtime's DNAT leads
/// ([`crate::published`]) is read through this.
pub fn nft_rule_is_for(exprs: &[crate::netlink::Expr], proto: u8, port: u16) -> bool {
    is_for(lower::from_nft(exprs, &|_| None), proto, port)
}

/// The same for a saved iptables rule (what follows `-A CHAIN` in a save, of family `fam`).
pub fn saved_rule_is_for(spec: &str, fam: Fam, proto: u8, port: u16) -> bool {
    is_for(legacy::legacy_items(spec, fam, &[]), proto, port)
}

/// Whether a saved iptables rule (of family `fam`) can only let a packet on, as the evaluator
/// reads its verdict: `-j ACCEPT`, `-j RETURN`. Anything else (a refusal, a jump, a target it
/// does not know, no verdict at all) may lead to a drop. Detection asks this of an accepting
/// legacy chain's rules to tell whether the chain can drop.
pub fn saved_rule_lets_on(spec: &str, fam: Fam) -> bool {
    matches!(
        legacy::legacy_items(spec, fam, &[]).last(),
        Some(ir::Item::Act(ir::Act::Accept | ir::Act::Return))
    )
}

/// Whether a saved iptables rule (of family `fam`) jumps or goes to `chain`, as the evaluator
/// reads its verdict (`-j chain`, `-g chain`). Retiring a found rules file asks this of what
/// stays, to tell whether a chain the file made is still pointed at.
pub fn saved_rule_goes_to(spec: &str, fam: Fam, chain: &str) -> bool {
    let chains = [chain.to_string()];
    legacy::legacy_items(spec, fam, &chains)
        .iter()
        .any(|i| matches!(i, ir::Item::Act(ir::Act::Jump(c) | ir::Act::Goto(c)) if c == chain))
}

fn is_for(items: Vec<ir::Item>, proto: u8, port: u16) -> bool {
    let names_proto = items.iter().any(|i| match i {
        ir::Item::Cond(c) => {
            c.key.len() == 1
                && c.key[0].mask.is_none()
                && c.key[0].src == ir::Src::Meta(crate::netlink::MetaKey::L4Proto)
                && c.test
                    == ir::Test::Cmp {
                        op: crate::netlink::CmpOp::Eq,
                        data: vec![proto],
                    }
        }
        _ => false,
    });
    let rule = ir::IrRule {
        items,
        handle: 0,
        text: ir::RuleText::Nft(None),
        marked: false,
    };
    names_proto && rule.port_keys().as_deref() == Some(&[port][..])
}

impl Model {
    /// The verdict of a new connection from `sources` (addresses of `conn.fam`).
    pub fn evaluate(&self, conn: &Conn, sources: &Addrs) -> Answer {
        Answer {
            parts: walk::Walker::new(self, false).run(conn, sources),
        }
    }

    /// Every branch of the walk apart (see [`Branch`]): where the answer is doubtful, what each
    /// way of its undecided tests ends in.
    pub fn branches(&self, conn: &Conn, sources: &Addrs) -> Vec<Branch> {
        walk::Walker::new(self, false).branches(conn, sources)
    }

    /// The same, with the verdicts met on each part's way: `mesh-host firewall explain`.
    pub fn explain(&self, conn: &Conn, sources: &Addrs) -> Answer {
        Answer {
            parts: walk::Walker::new(self, true).run(conn, sources),
        }
    }

    /// The base chain `chain` of table `table` (as the model names it: `inet filter`).
    pub fn base(&self, table: &str, chain: &str) -> Option<&model::Base> {
        self.bases
            .iter()
            .find(|b| self.tables[b.table].name == table && b.chain == chain)
    }

    /// The verdict of one base chain alone.
    pub fn evaluate_base(
        &self,
        table: &str,
        chain: &str,
        conn: &Conn,
        sources: &Addrs,
        skip_marked: bool,
    ) -> Option<Vec<Outcome>> {
        let base = self.base(table, chain)?;
        Some(walk::Walker::new(self, false).run_base(base, conn, sources, skip_marked))
    }

    /// The same, each branch of an undecided test kept with its own end beside the doubtful
    /// part (as placement reads a chain).
    pub fn evaluate_base_branches(
        &self,
        table: &str,
        chain: &str,
        conn: &Conn,
        sources: &Addrs,
    ) -> Option<Vec<Outcome>> {
        let base = self.base(table, chain)?;
        Some(
            walk::Walker::new(self, false)
                .with_branches()
                .run_base(base, conn, sources, false),
        )
    }

    /// Where an opening's rule goes in one base chain so that what its sources reach is accept,
    /// less what the operator refuses of particular sources or of exactly this port: ahead of
    /// the first refusal that would take all of it, behind every ban.
    pub fn place(
        &self,
        table: &str,
        chain: &str,
        conn: &Conn,
        sources: &Addrs,
    ) -> Option<Placement> {
        // Each branch of an undecided test apart: a branch refused by default is where the rule
        // goes, even where another branch would be admitted (the doubt is said beside it).
        let base = self.base(table, chain)?;
        let parts = walk::Walker::new(self, false)
            .with_branches()
            .run_base(base, conn, sources, true);
        let mut refused = None;
        let mut doubt = None;
        let mut at = None;
        for o in &parts {
            match &o.fate {
                Fate::Admitted => {}
                Fate::NotAdmitted { by } if at.is_none() => {
                    at = Some(Placement::At {
                        chain: by.chain.clone(),
                        index: by.index,
                        by: by.clone(),
                    })
                }
                Fate::NotAdmitted { .. } => {}
                Fate::Refused {
                    by,
                    why: Refusal::Port,
                } => refused = Some(by.clone()),
                Fate::Refused { .. } => {}
                Fate::Doubtful { by, what } if doubt.is_none() => {
                    doubt = Some((by.clone(), what.clone()))
                }
                Fate::Doubtful { .. } => {}
            }
        }
        if let Some(by) = refused {
            return Some(Placement::Refused(by));
        }
        let then = match at {
            Some(p) => self.after_limits(p, &parts),
            None if parts.iter().any(|o| o.fate == Fate::Admitted) => {
                Placement::NotNeeded(format!("{table} {chain} lets it on already"))
            }
            None => match parts.iter().find_map(|o| match &o.fate {
                Fate::Refused { by, .. } => Some(by.clone()),
                _ => None,
            }) {
                // Every declared source is banned: the operator's word.
                Some(by) => return Some(Placement::Refused(by)),
                None => Placement::NotNeeded(format!("{table} {chain} lets it on already")),
            },
        };
        Some(match doubt {
            Some((by, what)) => Placement::Doubtful {
                by,
                what,
                then: Box::new(then),
            },
            None => then,
        })
    }
}

impl Model {
    /// A placement moved behind every limit met on the way in its chain: an opening's rule
    /// never goes ahead of a rule that refuses a flooding source.
    fn after_limits(&self, p: Placement, parts: &[Outcome]) -> Placement {
        let Placement::At { chain, index, by } = p else {
            return p;
        };
        let behind = parts
            .iter()
            .flat_map(|o| &o.limits)
            .filter(|l| l.table == by.table && l.chain == chain)
            .filter_map(|l| l.index)
            .max();
        let len = self
            .tables
            .iter()
            .find(|t| t.name == by.table)
            .and_then(|t| t.chains.get(&chain))
            .map(|c| c.rules.len());
        let index = match (index, behind) {
            // Behind the last rule: the end of the chain.
            (Some(i), Some(l)) if l >= i => Some(l + 1).filter(|n| Some(*n) < len),
            (i, _) => i,
        };
        Placement::At { chain, index, by }
    }
}

#[cfg(test)]
mod tests;
