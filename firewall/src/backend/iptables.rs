//! iptables, on either backend: iptables-nft (the operator's, Docker's, Podman's rules on
//! nf_tables) and iptables-legacy (the x_tables). A table is read with `PROGRAM-save -t TABLE`
//! and its changes are written with one `PROGRAM-restore --noflush`, so removals and additions
//! are one transaction, a failure leaves the table as it was, and the tables stay readable by
//! iptables. The two differ only in their programs' names ([`Variant`]); iptables-nft's tables are
//! read from the nf_tables listing through the view both table drivers share (`nf.rs`). Retiring and restoring the operator's
//! own iptables firewall on the flip and return is in `iptables/retire.rs`.

mod retire;

use super::nf::{self, Shape};
use super::seam::{
    Change, Converger, Cx, Detect, Kind, Removal, Retire, TableDriver, TableKey, TableView,
};
use crate::error::{Error, Result};
use crate::found::{Backend, Layer};
use crate::netlink::{Family, Ruleset};
use crate::opening::Opening;
use crate::retire::Retired;
use crate::rules::{self, Site};
use run::Runner;
use std::path::Path as FsPath;

/// Which iptables: on the nf_tables backend or the legacy x_tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    Nft,
    Legacy,
}

impl Variant {
    /// The word its programs carry: `iptables-nft`, `iptables-legacy`.
    pub fn as_str(self) -> &'static str {
        match self {
            Variant::Nft => "nft",
            Variant::Legacy => "legacy",
        }
    }

    /// The kind of found firewall it writes.
    pub fn backend(self) -> Backend {
        match self {
            Variant::Nft => Backend::IptablesNft,
            Variant::Legacy => Backend::IptablesLegacy,
        }
    }
}

/// The iptables driver for one variant.
pub struct Iptables {
    pub variant: Variant,
}

/// iptables-nft behind every seam.
pub const NFT: Kind = Kind {
    detect: &Iptables {
        variant: Variant::Nft,
    },
    converge: Converger::Table(&Iptables {
        variant: Variant::Nft,
    }),
    retire: &Iptables {
        variant: Variant::Nft,
    },
};

/// iptables-legacy behind every seam.
pub const LEGACY: Kind = Kind {
    detect: &Iptables {
        variant: Variant::Legacy,
    },
    converge: Converger::Table(&Iptables {
        variant: Variant::Legacy,
    }),
    retire: &Iptables {
        variant: Variant::Legacy,
    },
};

impl Detect for Iptables {
    /// iptables-nft's tables have iptables' names at its priorities and either its x_tables
    /// compat expressions or nothing iptables never writes (then writing through iptables-nft
    /// keeps the table readable by both iptables and nft).
    fn wrote(&self, ruleset: &Ruleset, family: Family, table: &str, chain: &str) -> Option<String> {
        if self.variant != Variant::Nft {
            return None;
        }
        let docker = ruleset
            .chains
            .iter()
            .any(|c| c.family == family && c.table == table && c.name.starts_with("DOCKER"));
        let who = if docker {
            "Docker and the operator, through iptables-nft"
        } else {
            "iptables-nft"
        };
        match nf::shape(ruleset, family, table, chain) {
            Shape::Compat => Some(format!(
                "{who}: x_tables compat expressions in table {family} {table}"
            )),
            Shape::Names => Some(format!(
                "{who}: iptables' table and chain names, a counter on every rule and nothing iptables never writes in table {family} {table}"
            )),
            Shape::Other | Shape::Nft(_) => None,
        }
    }

    /// Every legacy table no other kind claims (detection asks this kind last).
    fn wrote_legacy(&self, _chains: &[&str]) -> bool {
        self.variant == Variant::Legacy
    }

    fn refusal(&self, l: &Layer, exec: &dyn Runner) -> Option<String> {
        if !l.can_drop {
            return None;
        }
        let missing: Vec<String> = ["-save", "-restore"]
            .iter()
            .map(|s| program(l.family, self.variant, s))
            .filter(|p| !exec.exists(p))
            .collect();
        (!missing.is_empty()).then(|| {
            format!(
                "{} is in force, and {} {} not installed to write openings in its terms",
                l.describe(),
                missing.join(" and "),
                if missing.len() == 1 { "is" } else { "are" }
            )
        })
    }
}

impl TableDriver for Iptables {
    /// iptables-nft's tables are nf_tables tables: read from the convergence's listing, in the
    /// order iptables shows them, with no program run. Legacy tables come from what detection
    /// read moments before, or from `iptables-legacy-save`.
    fn read(&self, key: &TableKey, cx: &mut Cx<'_>) -> Result<TableView> {
        if self.variant == Variant::Nft {
            return Ok(nf::read(key, cx.ruleset));
        }
        if let Some(text) = cx.legacy_saves.get(&(key.family, key.table.clone())) {
            return Ok(parse(text));
        }
        read(key, self.variant, cx)
    }

    fn write(
        &self,
        key: &TableKey,
        _view: &TableView,
        changes: &[Change],
        cx: &mut Cx<'_>,
    ) -> Result<()> {
        write(key, self.variant, changes, cx)
    }

    fn rules_for(&self, o: &Opening, site: Site) -> usize {
        rules::source_count(o, site.family)
    }
}

impl Retire for Iptables {
    fn survey(&self, root: &FsPath, cx: &mut Cx<'_>) -> Result<Option<Retired>> {
        retire::survey(self.variant, root, cx)
    }

    fn retire(&self, saved: &Retired, cx: &mut Cx<'_>) -> Result<Retired> {
        retire::retire(self.variant, saved, cx)
    }

    fn restore(&self, saved: &Retired, cx: &mut Cx<'_>) -> Result<()> {
        retire::restore(self.variant, saved, cx)
    }
}

/// `iptables-nft`, `ip6tables-legacy`, …: the program for a family and a variant.
pub fn program(family: Family, variant: Variant, suffix: &str) -> String {
    let base = if family == Family::Ipv6 {
        "ip6tables"
    } else {
        "iptables"
    };
    format!("{base}-{}{suffix}", variant.as_str())
}

/// Reads one table with `PROGRAM-save -t TABLE`.
pub fn read(key: &TableKey, variant: Variant, cx: &Cx<'_>) -> Result<TableView> {
    let save = program(key.family, variant, "-save");
    let out = crate::child::run_ok(cx.exec, &save, &["-t".into(), key.table.clone()], None)?;
    let (stdout, stderr) = (
        crate::child::text(&out.stdout),
        crate::child::text(&out.stderr),
    );
    if stdout.contains("incompatible") || stderr.contains("incompatible") {
        return Err(Error::Unsupported {
            reason: format!(
                "{save} cannot list table {} (it holds rules iptables cannot show), so openings cannot be written there in iptables' terms",
                key.table
            ),
        });
    }
    Ok(parse(&stdout))
}

/// One `iptables-save` table as a view: every chain (built-in and user), rules in order, read
/// through the evaluator's reader of a save ([`crate::eval::parse_save`]).
pub fn parse(text: &str) -> TableView {
    let mut view = TableView::default();
    let tables = crate::eval::parse_save(text, "filter");
    for (c, _) in tables.iter().flat_map(|(_, chains, _)| chains) {
        view.marks.insert(c.clone(), Vec::new());
        view.how.insert(c.clone(), Vec::new());
    }
    for (chain, spec) in tables.iter().flat_map(|(_, _, rules)| rules) {
        let mark = rules::spec_mark(spec);
        let how = match rules::split_spec(spec) {
            Some(words) => Removal::Spec(words),
            None => Removal::Spec(Vec::new()),
        };
        view.marks.entry(chain.clone()).or_default().push(mark);
        view.how.entry(chain.clone()).or_default().push(how);
    }
    view
}

/// The changes with every removal's spec, read with `*-save` only when a removal has none (a
/// table read from the nf_tables listing): adding openings runs no save at all.
fn with_specs(
    key: &TableKey,
    variant: Variant,
    changes: &[Change],
    cx: &Cx<'_>,
) -> Result<Vec<Change>> {
    let needs = changes.iter().any(|c| {
        matches!(
            c,
            Change::Remove {
                how: Removal::Handle(_),
                ..
            }
        )
    });
    if !needs {
        return Ok(changes.to_vec());
    }
    let saved = read(key, variant, cx)?;
    let mut out = Vec::new();
    let mut done: Vec<(String, String)> = Vec::new();
    for c in changes {
        match c {
            Change::Remove {
                chain,
                mark,
                how: Removal::Handle(_),
                ..
            } => {
                // Every rule of this mark in the chain: the plan removes a mark's rules together.
                if done.contains(&(chain.clone(), mark.clone())) {
                    continue;
                }
                done.push((chain.clone(), mark.clone()));
                let marks = saved
                    .marks
                    .get(chain)
                    .map(Vec::as_slice)
                    .unwrap_or_default();
                let how = saved.how.get(chain).map(Vec::as_slice).unwrap_or_default();
                for (i, (m, h)) in marks.iter().zip(how).enumerate() {
                    if m.as_deref() == Some(mark.as_str()) {
                        out.push(Change::Remove {
                            chain: chain.clone(),
                            index: i,
                            mark: mark.clone(),
                            how: h.clone(),
                        });
                    }
                }
            }
            other => out.push(other.clone()),
        }
    }
    Ok(out)
}

/// One argument as `iptables-restore` reads it back: quoted when it holds a space, a quote or
/// a backslash, or is empty.
pub(crate) fn quoted(word: &str) -> String {
    if !word.is_empty() && !word.contains([' ', '"', '\\', '\t']) {
        return word.to_string();
    }
    let mut out = String::from('"');
    for c in word.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// The restore input for one table's changes: removals first, then additions, each addition at
/// its place counted after the removals, additions further down the chain first so an earlier
/// insertion never moves a later one's place.
pub fn restore_input(key: &TableKey, changes: &[Change]) -> String {
    let mut out = format!("*{}\n", key.table);
    let mut removed: Vec<(&str, usize)> = Vec::new();
    for c in changes {
        if let Change::Remove {
            chain,
            index,
            how: Removal::Spec(words),
            ..
        } = c
        {
            let spec: Vec<String> = words.iter().map(|w| quoted(w)).collect();
            out.push_str(&format!("-D {chain} {}\n", spec.join(" ")));
            removed.push((chain, *index));
        }
    }
    // (chain, before which rule, the specs to insert).
    type Insert<'c> = (&'c str, Option<usize>, Vec<Vec<String>>);
    let mut adds: Vec<Insert<'_>> = changes
        .iter()
        .filter_map(|c| match c {
            Change::Add {
                chain,
                before,
                opening,
                site,
            } => Some((chain.as_str(), *before, rules::xt_specs_at(opening, *site))),
            Change::Remove { .. } => None,
        })
        .collect();
    // Appends keep their order; insertions go from the bottom of the chain up.
    adds.sort_by_key(|(chain, before, _)| {
        (*chain, std::cmp::Reverse(before.unwrap_or(usize::MAX)))
    });
    for (chain, before, specs) in adds {
        for spec in specs {
            let spec: Vec<String> = spec.iter().map(|w| quoted(w)).collect();
            match before {
                Some(i) => {
                    let gone = removed
                        .iter()
                        .filter(|(c, at)| *c == chain && *at < i)
                        .count();
                    out.push_str(&format!("-I {chain} {} {}\n", i + 1 - gone, spec.join(" ")));
                }
                None => out.push_str(&format!("-A {chain} {}\n", spec.join(" "))),
            }
        }
    }
    out.push_str("COMMIT\n");
    out
}

/// Writes one table's changes with `PROGRAM-restore --noflush`, one transaction.
pub fn write(key: &TableKey, variant: Variant, changes: &[Change], cx: &mut Cx<'_>) -> Result<()> {
    if changes.is_empty() {
        return Ok(());
    }
    // A rule read from the listing is removed by its own spec, as `*-save` prints it: the one
    // `-D` that never deletes a rule inserted or removed by someone else since (a number could).
    let changes = with_specs(key, variant, changes, cx)?;
    let input = restore_input(key, &changes);
    let restore = program(key.family, variant, "-restore");
    // `-w` waits for the xtables lock instead of failing when Docker or the operator holds it.
    crate::child::run_ok(
        cx.exec,
        &restore,
        &["-w".into(), "5".into(), "--noflush".into()],
        Some(&input),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::opening::{From, Path, Proto};

    #[test]
    fn one_restore_removes_then_inserts_before_the_catch_all() {
        let save = "*filter\n:INPUT DROP [0:0]\n:FORWARD ACCEPT [0:0]\n\
            -A INPUT -i lo -j ACCEPT\n\
            -A INPUT -p tcp -m tcp --dport 9000 -m comment --comment \"mesh-host:old#0011aabb\" -j ACCEPT\n\
            -A INPUT -s 203.0.113.0/24 -j DROP\n\
            -A INPUT -j REJECT --reject-with icmp-port-unreachable\nCOMMIT\n";
        let view = parse(save);
        let key = TableKey {
            backend: crate::found::Backend::IptablesLegacy,
            family: Family::Ipv4,
            table: "filter".into(),
        };
        let o = Opening {
            id: "web/api".into(),
            port: 9000,
            proto: Proto::Tcp,
            from: From::Anywhere,
            path: Path::Incoming,
        };
        let changes = vec![
            Change::Remove {
                chain: "INPUT".into(),
                index: 1,
                mark: "mesh-host:old#0011aabb".into(),
                how: view.how["INPUT"][1].clone(),
            },
            Change::Add {
                chain: "INPUT".into(),
                before: Some(3),
                opening: o.clone(),
                site: Site::late(Family::Ipv4),
            },
        ];
        let text = restore_input(&key, &changes);
        let m = rules::mark(&o);
        assert_eq!(
            text,
            format!(
                "*filter\n\
                 -D INPUT -p tcp -m tcp --dport 9000 -m comment --comment mesh-host:old#0011aabb -j ACCEPT\n\
                 -I INPUT 3 -p tcp -m tcp --dport 9000 -m comment --comment {m} -j ACCEPT\n\
                 COMMIT\n"
            )
        );
        assert_eq!(quoted("a b"), "\"a b\"");
        assert_eq!(quoted("say \"x\""), "\"say \\\"x\\\"\"");
        assert_eq!(quoted(""), "\"\"");
    }
}
