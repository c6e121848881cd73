//! Hand-written nftables: openings written natively, into the found chain, in the one atomic
//! batch of the convergence (stamped with the listing's generation by the engine).

use super::{Change, Cx, Driver, Removal, TableKey, TableView};
use crate::error::Result;
use crate::netlink::Position;
use crate::opening::Opening;
use crate::place::seen_nft;
use crate::rules::{self, Site};

pub struct Nftables;

impl Driver for Nftables {
    fn read(&self, key: &TableKey, cx: &mut Cx<'_>) -> Result<TableView> {
        Ok(read_nf(key, cx))
    }

    fn write(
        &self,
        key: &TableKey,
        view: &TableView,
        changes: &[Change],
        cx: &mut Cx<'_>,
    ) -> Result<()> {
        for c in changes {
            match c {
                Change::Remove {
                    chain,
                    how: Removal::Handle(h),
                    ..
                } => cx.batch.del_rule(key.family, &key.table, chain, *h)?,
                Change::Remove { .. } => {}
                Change::Add {
                    chain,
                    before,
                    opening,
                    site,
                } => {
                    let at = match before.and_then(|i| view.how.get(chain)?.get(i).cloned()) {
                        Some(Removal::Handle(h)) => Position::Before(h),
                        _ => Position::Append,
                    };
                    for body in rules::nft_bodies(opening, *site) {
                        cx.batch
                            .add_rule(key.family, &key.table, chain, &body, at)?;
                    }
                }
            }
        }
        Ok(())
    }

    fn rules_for(&self, o: &Opening, site: Site) -> usize {
        rules::source_count(o, site.family)
    }
}

/// Every chain of an nf_tables table from the listing, each rule reduced for placement and
/// removable by its handle (also how iptables-nft's tables are read: their order is iptables').
pub(super) fn read_nf(key: &TableKey, cx: &Cx<'_>) -> TableView {
    let mut view = TableView::default();
    for c in cx
        .ruleset
        .chains
        .iter()
        .filter(|c| c.family == key.family && c.table == key.table)
    {
        let mut seen = Vec::new();
        let mut how = Vec::new();
        for r in cx.ruleset.rules_of(key.family, &key.table, &c.name) {
            let mark = rules::listed_mark(r);
            seen.push(seen_nft(
                &r.exprs,
                mark,
                format!(
                    "rule handle {} in {} {} {}",
                    r.handle, key.family, key.table, c.name
                ),
            ));
            how.push(Removal::Handle(r.handle));
        }
        view.seen.insert(c.name.clone(), seen);
        view.how.insert(c.name.clone(), how);
    }
    view.index()
}
