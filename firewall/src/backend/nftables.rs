//! Hand-written nftables: openings written natively, into the found chain, in the one atomic
//! batch of the convergence (stamped with the listing's generation by the engine). Retired on the
//! flip by deleting the tables its configuration file loads (never by stopping its unit, whose
//! stop flushes the whole ruleset), restored from their saved listings with `nft -f`. Its layers
//! are every nf_tables table no other kind claims.

use super::nf::{self, Shape};
use super::seam::{
    Change, Converger, Cx, Detect, Kind, Removal, Retire, TableDriver, TableKey, TableView,
};
use crate::error::{Error, Result};
use crate::found::{Backend, MESH_TABLE};
use crate::netlink::{Family, Position, Ruleset};
use crate::opening::Opening;
use crate::retire::{Retired, Saved};
use crate::rules::{self, Site};
use std::path::Path as FsPath;

pub struct Nftables;

/// Hand-written nftables behind every seam.
pub const KIND: Kind = Kind {
    detect: &Nftables,
    converge: Converger::Table(&Nftables),
    retire: &Nftables,
};

impl Detect for Nftables {
    /// Every nf_tables table no other kind claims (detection asks this kind last).
    fn wrote(&self, ruleset: &Ruleset, family: Family, table: &str, chain: &str) -> Option<String> {
        Some(match nf::shape(ruleset, family, table, chain) {
            Shape::Nft(sign) => format!(
                "table {family} {table} has iptables' names but was written with nft: {sign}"
            ),
            _ => format!("table {family} {table}, written with nft"),
        })
    }

    fn wrote_legacy(&self, _chains: &[&str]) -> bool {
        false
    }
}

impl TableDriver for Nftables {
    fn read(&self, key: &TableKey, cx: &mut Cx<'_>) -> Result<TableView> {
        Ok(nf::read(key, cx.ruleset))
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

impl Retire for Nftables {
    fn survey(&self, root: &FsPath, cx: &mut Cx<'_>) -> Result<Option<Retired>> {
        survey(root, cx)
    }

    fn retire(&self, saved: &Retired, cx: &mut Cx<'_>) -> Result<Retired> {
        retire(saved, cx).map(|()| saved.clone())
    }

    fn restore(&self, saved: &Retired, cx: &mut Cx<'_>) -> Result<()> {
        restore(saved, cx)
    }
}

/// The files a hand-written nftables firewall boots from, as paths on the machine: Debian's and
/// Arch's, then Fedora's and RHEL's, then Alpine's (which includes `/etc/nftables.d/*.nft`).
pub const CONFIGS: [&str; 3] = [
    "/etc/nftables.conf",
    "/etc/sysconfig/nftables.conf",
    "/etc/nftables.nft",
];

/// The unit that loads it at boot. Never stopped: its stop runs `nft flush ruleset`.
pub const UNIT: &str = "nftables.service";

/// The tables a configuration file loads, `include`s followed (under `root`), in order, once
/// each: `table FAMILY NAME`, `add table …`, `create table …`; the family is `ip` when not given.
/// A `delete`, `destroy` or `flush` of a table loads nothing.
pub fn config_tables(root: &FsPath, file: &str, seen: &mut Vec<String>) -> Vec<(Family, String)> {
    let mut out = Vec::new();
    if seen.iter().any(|s| s == file) || seen.len() > 64 {
        return out;
    }
    seen.push(file.to_string());
    let Ok(text) = std::fs::read_to_string(root.join(file.trim_start_matches('/'))) else {
        return out;
    };
    // Comments out, then words: braces and semicolons are words of their own.
    let mut words: Vec<String> = Vec::new();
    for line in text.lines() {
        let line = match line.find('#') {
            Some(i) if !line[..i].contains('"') => &line[..i],
            _ => line,
        };
        let spaced = line
            .replace('{', " { ")
            .replace('}', " } ")
            .replace(';', " ; ");
        words.extend(spaced.split_whitespace().map(str::to_string));
        words.push(";".into());
    }
    let family = |w: &str| match w {
        "ip" => Some(Family::Ipv4),
        "ip6" => Some(Family::Ipv6),
        "inet" => Some(Family::Inet),
        "arp" => Some(Family::Arp),
        "bridge" => Some(Family::Bridge),
        "netdev" => Some(Family::Netdev),
        _ => None,
    };
    let mut depth = 0usize;
    let mut at_start = true;
    let mut i = 0;
    while i < words.len() {
        let w = words[i].as_str();
        match w {
            "{" => {
                depth += 1;
                at_start = true;
            }
            "}" => {
                depth = depth.saturating_sub(1);
                at_start = true;
            }
            ";" => at_start = true,
            _ if at_start && depth == 0 => {
                at_start = false;
                let mut j = i;
                if w == "add" || w == "create" {
                    j += 1;
                }
                if words.get(j).map(String::as_str) == Some("table") {
                    let (fam, name) = match words.get(j + 1).and_then(|f| family(f)) {
                        Some(f) => (f, words.get(j + 2)),
                        None => (Family::Ipv4, words.get(j + 1)),
                    };
                    if let Some(name) = name.filter(|n| !matches!(n.as_str(), "{" | ";")) {
                        let key = (fam, name.trim_matches('"').to_string());
                        if !out.contains(&key) {
                            out.push(key);
                        }
                    }
                } else if w == "include" {
                    if let Some(path) = words.get(i + 1) {
                        let path = path.trim_matches('"');
                        for file in include_files(root, path) {
                            for t in config_tables(root, &file, seen) {
                                if !out.contains(&t) {
                                    out.push(t);
                                }
                            }
                        }
                    }
                }
            }
            _ => at_start = false,
        }
        i += 1;
    }
    out
}

/// The files an `include` names, as nft reads them: the path itself, or for a pattern with
/// `*` in its last part (`/etc/nftables.d/*.nft`, Alpine's), every matching file of that
/// directory in name order.
fn include_files(root: &FsPath, path: &str) -> Vec<String> {
    let (dir, pattern) = match path.rsplit_once('/') {
        Some((d, p)) => (d, p),
        None => ("", path),
    };
    let Some((before, after)) = pattern.split_once('*') else {
        return vec![path.to_string()];
    };
    if dir.contains('*') || after.contains('*') {
        return Vec::new();
    }
    let Ok(entries) = std::fs::read_dir(root.join(dir.trim_start_matches('/'))) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .flatten()
        .filter(|e| e.path().is_file())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| {
            n.starts_with(before) && n.ends_with(after) && n.len() >= before.len() + after.len()
        })
        .collect();
    names.sort();
    names.into_iter().map(|n| format!("{dir}/{n}")).collect()
}

/// The found firewall a configuration file loads: its tables as they are now, each saved with
/// `nft list table` (the machine's own `nft`, which that file's boot unit needs too).
fn survey(root: &FsPath, cx: &mut Cx<'_>) -> Result<Option<Retired>> {
    let Some(config) = CONFIGS
        .iter()
        .find(|c| root.join(c.trim_start_matches('/')).is_file())
    else {
        return Ok(None);
    };
    let mut saved = Vec::new();
    for (family, name) in config_tables(root, config, &mut Vec::new()) {
        if name == MESH_TABLE || cx.ruleset.table(family, &name).is_none() {
            continue;
        }
        let listing = crate::child::stdout(
            cx.exec,
            "nft",
            &[
                "list".into(),
                "table".into(),
                family.nft_name(),
                name.clone(),
            ],
            None,
        )?;
        saved.push(Saved {
            what: format!("table {family} {name}"),
            text: listing,
        });
    }
    Ok(Some(Retired {
        backend: Backend::Nftables,
        unit: Some(UNIT.into()),
        daemon: false,
        config: vec![config.to_string()],
        saved,
    }))
}

/// `table FAMILY NAME` from a saved part's name.
pub(crate) fn saved_table(s: &Saved) -> Option<(Family, String)> {
    let mut w = s.what.split_whitespace();
    let (_, fam, name) = (w.next()?, w.next()?, w.next()?);
    let family = Family::ALL.into_iter().find(|f| f.nft_name() == fam)?;
    Some((family, name.to_string()))
}

/// Each saved table deleted in the caller's batch (one transaction with the derived filter).
fn retire(saved: &Retired, cx: &mut Cx<'_>) -> Result<()> {
    for s in &saved.saved {
        let (family, name) = saved_table(s).ok_or_else(|| Error::Malformed {
            what: "a saved nftables table".into(),
            reason: format!("{:?} names no table", s.what),
        })?;
        if cx.ruleset.table(family, &name).is_some() {
            cx.batch.del_table(family, &name)?;
        }
    }
    Ok(())
}

/// Each saved table loaded again exactly as listed, with `nft -f`, in one transaction that first
/// deletes a table of the same name if one was made meanwhile.
fn restore(saved: &Retired, cx: &mut Cx<'_>) -> Result<()> {
    let mut script = String::new();
    for s in &saved.saved {
        let (family, name) = saved_table(s).ok_or_else(|| Error::Malformed {
            what: "a saved nftables table".into(),
            reason: format!("{:?} names no table", s.what),
        })?;
        script.push_str(&format!(
            "table {family} {name}\ndelete table {family} {name}\n"
        ));
        script.push_str(&s.text);
        script.push('\n');
    }
    if script.is_empty() {
        return Ok(());
    }
    crate::child::run_ok(cx.exec, "nft", &["-f".into(), "-".into()], Some(&script))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alpine_s_file_and_its_included_directory_name_every_table() {
        let root = tempfile_dir();
        std::fs::create_dir_all(root.join("etc/nftables.d")).unwrap();
        std::fs::write(
            root.join("etc/nftables.nft"),
            "#!/usr/sbin/nft -f\nflush ruleset\ntable inet filter {\n chain input { type filter hook input priority 0; policy drop; }\n}\ninclude \"/etc/nftables.d/*.nft\"\n",
        )
        .unwrap();
        std::fs::write(root.join("etc/nftables.d/b-nat.nft"), "table ip nat {\n}\n").unwrap();
        std::fs::write(
            root.join("etc/nftables.d/a-ban.nft"),
            "table ip6 ban {\n}\n",
        )
        .unwrap();
        std::fs::write(
            root.join("etc/nftables.d/skip.conf"),
            "table ip nope {\n}\n",
        )
        .unwrap();
        let got = config_tables(&root, "/etc/nftables.nft", &mut Vec::new());
        assert_eq!(
            got,
            [
                (Family::Inet, "filter".to_string()),
                (Family::Ipv6, "ban".to_string()),
                (Family::Ipv4, "nat".to_string())
            ]
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    fn tempfile_dir() -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!(
            "mesh-nft-config-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }
}
