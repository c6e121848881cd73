//! What the nf_tables listing tells both table drivers, in one place: a table read as a
//! [`TableView`] (hand-written nftables and iptables-nft alike live in nf_tables tables, in the
//! order their writer gave), and the shape iptables-nft gives its tables (its tables' and chains'
//! names at its own priorities), with the signs that say a table of that shape was written with
//! nft after all. Neither driver reads the other; both read this.

use super::seam::{Removal, TableKey, TableView};
use crate::netlink::consts::IFNAMSIZ;
use crate::netlink::{Expr, Family, MetaKey, Ruleset};
use crate::rules;

/// Every chain of an nf_tables table from the listing, each rule's mark and its handle to
/// remove it by.
pub fn read(key: &TableKey, ruleset: &Ruleset) -> TableView {
    let mut view = TableView::default();
    for c in ruleset
        .chains
        .iter()
        .filter(|c| c.family == key.family && c.table == key.table)
    {
        let mut marks = Vec::new();
        let mut how = Vec::new();
        for r in ruleset.rules_of(key.family, &key.table, &c.name) {
            marks.push(rules::listed_mark(r));
            how.push(Removal::Handle(r.handle));
        }
        view.marks.insert(c.name.clone(), marks);
        view.how.insert(c.name.clone(), how);
    }
    view
}

/// Names of the built-in chains iptables creates.
pub const XT_BUILTIN: &[&str] = &["INPUT", "FORWARD", "OUTPUT", "PREROUTING", "POSTROUTING"];

/// How an nf_tables table stands to iptables' shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shape {
    /// Not an `ip` or `ip6` table, or the chain is none of iptables' built-in chains at its
    /// priority.
    Other,
    /// iptables' names, holding x_tables compat expressions (nft itself calls such a table
    /// iptables-nft's).
    Compat,
    /// iptables' names, a counter on every rule and nothing iptables never writes: nothing tells
    /// it from iptables-nft's.
    Names,
    /// iptables' names, but written with nft: the sign says how it shows.
    Nft(String),
}

/// The shape of table `family table`, as its base chain `chain` and its rules show it.
pub fn shape(ruleset: &Ruleset, family: Family, table: &str, chain: &str) -> Shape {
    let xt_family = matches!(family, Family::Ipv4 | Family::Ipv6);
    if !xt_family || xt_priority(table, chain).is_none() {
        return Shape::Other;
    }
    if has_xt(ruleset, family, table) {
        return Shape::Compat;
    }
    match nft_sign(ruleset, family, table) {
        Some(sign) => Shape::Nft(sign),
        None => Shape::Names,
    }
}

fn has_xt(ruleset: &Ruleset, family: Family, table: &str) -> bool {
    ruleset.rules.iter().any(|r| {
        r.family == family
            && r.table == table
            && r.exprs
                .iter()
                .any(|e| matches!(e, Expr::Raw { name, .. } if name == "match" || name == "target"))
    })
}

/// The priority iptables-nft gives the built-in chain `chain` of its table `table`, if it is one.
fn xt_priority(table: &str, chain: &str) -> Option<i32> {
    if !XT_BUILTIN.contains(&chain) {
        return None;
    }
    Some(match (table, chain) {
        ("filter", _) => 0,
        ("mangle", _) => -150,
        ("raw", _) => -300,
        ("security", _) => 50,
        ("nat", "PREROUTING" | "OUTPUT") => -100,
        ("nat", "INPUT" | "POSTROUTING") => 100,
        _ => return None,
    })
}

/// Why a table with iptables' names must have been written with nft: something iptables-nft
/// never writes. iptables-nft puts a counter in every rule, never uses sets or maps, compares an
/// interface name with its terminating NUL only (nft compares all 16 bytes), and makes only its
/// built-in chains base chains, at its own priorities.
fn nft_sign(ruleset: &Ruleset, family: Family, table: &str) -> Option<String> {
    for c in ruleset
        .chains
        .iter()
        .filter(|c| c.family == family && c.table == table)
    {
        if let Some(h) = &c.hook {
            if xt_priority(table, &c.name) != Some(h.priority) {
                return Some(format!(
                    "base chain {} at priority {}, which iptables never makes",
                    c.name, h.priority
                ));
            }
        }
    }
    if ruleset
        .sets
        .iter()
        .any(|s| s.family == family && s.table == table)
    {
        return Some("sets, which iptables never makes".into());
    }
    for r in ruleset
        .rules
        .iter()
        .filter(|r| r.family == family && r.table == table)
    {
        if !r.exprs.iter().any(|e| matches!(e, Expr::Counter { .. })) {
            return Some(format!(
                "a rule in {} without a counter (iptables counts every rule)",
                r.chain
            ));
        }
        if r.exprs.iter().any(|e| matches!(e, Expr::Lookup { .. })) {
            return Some(format!("a set or map lookup in {}", r.chain));
        }
        // A 15-byte name and its NUL fill 16 bytes either way, so only a shorter name padded
        // with more than one NUL tells nft's encoding apart.
        let ifname_16 = r.exprs.windows(2).any(|w| {
            matches!(
                (&w[0], &w[1]),
                (Expr::Meta { key: MetaKey::IifName | MetaKey::OifName, .. }, Expr::Cmp { data, .. })
                    if data.len() == IFNAMSIZ
                        && data.iter().position(|b| *b == 0).is_some_and(|n| n < IFNAMSIZ - 1)
            )
        });
        if ifname_16 {
            return Some(format!(
                "an interface name in {} compared as nft does (all 16 bytes)",
                r.chain
            ));
        }
    }
    None
}
