//! Retiring a found iptables firewall (either variant) and putting it back. Its rules are the
//! ones its own rules file loads at boot (`/etc/iptables/rules.v4` and `rules.v6`, or the RHEL
//! and Arch equivalents): the flip deletes exactly those from the running tables, sets the
//! built-in chains it gave a refusing policy back to ACCEPT and deletes the chains it made once
//! they are empty and unreferenced — the runtime's chains and rules (Docker's `DOCKER*`), the
//! blocklists' (`f2b-*`) and anything else its file does not hold stay in force, and the file is
//! never written. Whether a rule of the file is in force is asked of iptables itself (`-C`), so a
//! hand-written file need not be in `iptables-save`'s canonical form.
//!
//! What was taken out is recorded as `iptables-save` printed it (before and after), so return puts
//! back exactly those rules at the places they held, around whatever the runtime added meanwhile,
//! and the policies the chains had.

use super::{program, quoted, Variant};
use crate::backend::Cx;
use crate::error::{Error, Result};
use crate::netlink::Family;
use crate::retire::{Retired, Saved};
use crate::rules;
use std::collections::BTreeMap;
use std::path::Path as FsPath;

/// Where each system keeps the rules its boot unit loads, per family, with that unit.
const CONFIGS: [(&str, &str, &str); 3] = [
    (
        "/etc/iptables/rules.v4",
        "/etc/iptables/rules.v6",
        "netfilter-persistent.service",
    ),
    (
        "/etc/sysconfig/iptables",
        "/etc/sysconfig/ip6tables",
        "iptables.service",
    ),
    (
        "/etc/iptables/iptables.rules",
        "/etc/iptables/ip6tables.rules",
        "iptables.service",
    ),
];

/// Marks the end of the `iptables-save` text in a saved part and the start of what was taken
/// out.
const REMOVED: &str = "# mesh-host: taken out by the flip\n";

const BUILTIN: [&str; 5] = ["INPUT", "FORWARD", "OUTPUT", "PREROUTING", "POSTROUTING"];

/// One table as a save or a rules file holds it: its chains with their policies (`-` for a user
/// chain) and its rules in order, each `(chain, spec)`.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Tab {
    pub chains: Vec<(String, String)>,
    pub rules: Vec<(String, String)>,
}

impl Tab {
    fn rules_of<'a>(&'a self, chain: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.rules
            .iter()
            .filter(move |(c, _)| c == chain)
            .map(|(_, s)| s.as_str())
    }
}

/// Every table of an `iptables-save` text or a rules file, read through the crate's one reader
/// of a save ([`crate::eval::parse_save`]); a table named twice is one table.
pub(crate) fn parse_tables(text: &str) -> BTreeMap<String, Tab> {
    let mut out: BTreeMap<String, Tab> = BTreeMap::new();
    for (table, chains, rules) in crate::eval::parse_save(text, "filter") {
        let tab = out.entry(table).or_default();
        tab.chains.extend(
            chains
                .into_iter()
                .map(|(c, p)| (c, p.unwrap_or_else(|| "-".into()))),
        );
        tab.rules.extend(rules);
    }
    out
}

/// The rules file of a family on this machine, with its unit.
fn config(root: &FsPath, family: Family) -> Option<(&'static str, &'static str)> {
    CONFIGS.iter().find_map(|(v4, v6, unit)| {
        let path = if family == Family::Ipv6 { v6 } else { v4 };
        root.join(path.trim_start_matches('/'))
            .is_file()
            .then_some((*path, *unit))
    })
}

fn save(variant: Variant, family: Family, table: &str, cx: &Cx<'_>) -> Result<String> {
    crate::child::stdout(
        cx.exec,
        &program(family, variant, "-save"),
        &["-t".into(), table.into()],
        None,
    )
}

/// Whether the rule `spec` of `chain` is in force, asked of iptables (`-C`).
fn in_force(
    variant: Variant,
    family: Family,
    table: &str,
    chain: &str,
    spec: &str,
    cx: &Cx<'_>,
) -> bool {
    let Some(words) = rules::split_spec(spec) else {
        return false;
    };
    let mut args = vec![
        "-w".to_string(),
        "5".into(),
        "-t".into(),
        table.into(),
        "-C".into(),
        chain.into(),
    ];
    args.extend(words);
    crate::child::run(cx.exec, &program(family, variant, ""), &args, None)
        .is_ok_and(|o| o.code == Some(0))
}

/// The found iptables firewall of this variant: the rules its files hold that are in force in
/// this variant's tables, each table saved. `None` when no file is there, or none of its rules
/// nor refusing policies are in force in this variant (they are the other variant's).
pub(crate) fn survey(variant: Variant, root: &FsPath, cx: &mut Cx<'_>) -> Result<Option<Retired>> {
    let backend = variant.backend();
    let mut saved = Vec::new();
    let mut configs = Vec::new();
    let mut unit = None;
    for family in [Family::Ipv4, Family::Ipv6] {
        let Some((path, u)) = config(root, family) else {
            continue;
        };
        let text =
            std::fs::read_to_string(root.join(path.trim_start_matches('/'))).map_err(|e| {
                Error::Malformed {
                    what: format!("the found firewall's rules file {path}"),
                    reason: e.to_string(),
                }
            })?;
        for (table, file) in parse_tables(&text) {
            let now = save(variant, family, &table, cx)?;
            let running = parse_tables(&now).remove(&table).unwrap_or_default();
            let present = file
                .rules
                .iter()
                .filter(|(c, s)| in_force(variant, family, &table, c, s, cx))
                .count();
            // A refusing policy the file gives is this variant's when its table has the chain
            // with that policy and the file's rules are here, or the file has no rules at all.
            let policies = file.chains.iter().any(|(c, p)| {
                p != "-" && p != "ACCEPT" && running.chains.contains(&(c.clone(), p.clone()))
            });
            if present == 0 && !(policies && file.rules.is_empty()) {
                continue;
            }
            configs.push(path.to_string());
            unit = Some(u.to_string());
            let section: String = text_section(&text, &table);
            saved.push(Saved {
                what: format!(
                    "{} {} {table}: {present} of the {} rules of {path}",
                    backend,
                    family,
                    file.rules.len()
                ),
                text: format!("{now}{REMOVED}{section}"),
            });
        }
    }
    if saved.is_empty() {
        return Ok(None);
    }
    configs.dedup();
    Ok(Some(Retired {
        backend,
        unit,
        daemon: false,
        config: configs,
        saved,
    }))
}

/// The lines of one table of a rules file.
fn text_section(text: &str, table: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    for line in text.lines() {
        let t = line.trim();
        if let Some(name) = t.strip_prefix('*') {
            inside = name == table;
        }
        if inside {
            out.push_str(t);
            out.push('\n');
        }
        if t == "COMMIT" {
            inside = false;
        }
    }
    out
}

fn table_of(s: &Saved) -> Option<(Family, String)> {
    let mut w = s.what.split_whitespace();
    let (_, fam, table) = (w.next()?, w.next()?, w.next()?);
    let family = if fam == "ip6" {
        Family::Ipv6
    } else {
        Family::Ipv4
    };
    Some((family, table.trim_end_matches(':').to_string()))
}

fn malformed(s: &Saved) -> Error {
    Error::Malformed {
        what: "a saved iptables table".into(),
        reason: format!("{:?} names no table", s.what),
    }
}

/// Takes the file's rules out, one restore per table; returns the parts with what was taken out
/// as `iptables-save` printed it before and after, for return.
pub(crate) fn retire(variant: Variant, saved: &Retired, cx: &mut Cx<'_>) -> Result<Retired> {
    let mut out = saved.clone();
    for part in &mut out.saved {
        let (family, table) = table_of(part).ok_or_else(|| malformed(part))?;
        let file_text = part
            .text
            .split_once(REMOVED)
            .map(|(_, f)| f.to_string())
            .unwrap_or_default();
        let file = parse_tables(&file_text).remove(&table).unwrap_or_default();
        let before_text = save(variant, family, &table, cx)?;
        let before = parse_tables(&before_text)
            .remove(&table)
            .unwrap_or_default();
        let mut script = format!("*{table}\n");
        let mut deleted: Vec<(String, String)> = Vec::new();
        for (chain, spec) in &file.rules {
            if in_force(variant, family, &table, chain, spec, cx) {
                script.push_str(&format!("-D {chain} {spec}\n"));
                deleted.push((chain.clone(), spec.clone()));
            }
        }
        for (chain, policy) in &file.chains {
            let builtin = BUILTIN.contains(&chain.as_str());
            if builtin && policy != "ACCEPT" && policy != "-" {
                script.push_str(&format!(":{chain} ACCEPT [0:0]\n"));
            }
        }
        // A chain the file made goes once nothing but the file's rules are in it or point at
        // it: what remains (a blocklist's jump, a runtime's rule) keeps it.
        for (chain, _) in file
            .chains
            .iter()
            .filter(|(c, _)| !BUILTIN.contains(&c.as_str()))
        {
            let is_file = |c: &str, s: &str| {
                file.rules.iter().any(|(fc, fs)| fc == c && fs == s)
                    || deleted.iter().any(|(dc, ds)| dc == c && ds == s)
            };
            let others_in = before.rules_of(chain).any(|s| !is_file(chain, s))
                && before.rules_of(chain).count() > file.rules_of(chain).count();
            let fam = match family {
                Family::Ipv6 => crate::eval::Fam::V6,
                _ => crate::eval::Fam::V4,
            };
            let jumps = |s: &str| crate::eval::saved_rule_goes_to(s, fam, chain);
            let referenced = before
                .rules
                .iter()
                .any(|(c, s)| jumps(s) && !file.rules.iter().any(|(fc, fs)| fc == c && fs == s));
            let exists = before.chains.iter().any(|(c, _)| c == chain);
            if exists && !others_in && !referenced {
                script.push_str(&format!("-X {chain}\n"));
            }
        }
        script.push_str("COMMIT\n");
        crate::child::run_ok(
            cx.exec,
            &program(family, variant, "-restore"),
            &["-w".into(), "5".into(), "--noflush".into()],
            Some(&script),
        )?;
        let after = parse_tables(&save(variant, family, &table, cx)?)
            .remove(&table)
            .unwrap_or_default();
        // What went: the rules of the save before that the save after no longer holds, in
        // their canonical form, and the chains and policies that changed.
        let mut gone = String::new();
        for (chain, _) in &before.chains {
            let mut now: Vec<&str> = after.rules_of(chain).collect();
            for spec in before.rules_of(chain) {
                if let Some(i) = now.iter().position(|s| *s == spec) {
                    now.remove(i);
                } else {
                    gone.push_str(&format!("-A {chain} {spec}\n"));
                }
            }
        }
        part.text = format!("{before_text}{REMOVED}{gone}");
    }
    Ok(out)
}

/// Puts back what [`retire`] took out: chains it deleted made again, its rules inserted at the
/// places they held among the rules there now, the built-in chains' policies as they were; one
/// restore per table.
pub(crate) fn restore(variant: Variant, saved: &Retired, cx: &mut Cx<'_>) -> Result<()> {
    for part in &saved.saved {
        let (family, table) = table_of(part).ok_or_else(|| malformed(part))?;
        let (before_text, gone_text) = part
            .text
            .split_once(REMOVED)
            .ok_or_else(|| malformed(part))?;
        let before = parse_tables(before_text).remove(&table).unwrap_or_default();
        let gone: Vec<(String, String)> = crate::eval::parse_save(gone_text, &table)
            .into_iter()
            .flat_map(|(_, _, rules)| rules)
            .collect();
        let now = parse_tables(&save(variant, family, &table, cx)?)
            .remove(&table)
            .unwrap_or_default();
        let script = restore_script(&table, &before, &now, &gone);
        crate::child::run_ok(
            cx.exec,
            &program(family, variant, "-restore"),
            &["-w".into(), "5".into(), "--noflush".into()],
            Some(&script),
        )?;
    }
    Ok(())
}

/// The restore input that puts `gone` back into `now` at the places `before` had them.
pub(crate) fn restore_script(
    table: &str,
    before: &Tab,
    now: &Tab,
    gone: &[(String, String)],
) -> String {
    let mut script = format!("*{table}\n");
    for (chain, policy) in &before.chains {
        let exists = now.chains.iter().any(|(c, _)| c == chain);
        if BUILTIN.contains(&chain.as_str()) {
            script.push_str(&format!(":{chain} {policy} [0:0]\n"));
        } else if !exists {
            script.push_str(&format!(":{chain} - [0:0]\n"));
        }
    }
    let mut was_gone: Vec<(String, String)> = gone.to_vec();
    for (chain, _) in &before.chains {
        let mut cur: Vec<String> = now.rules_of(chain).map(str::to_string).collect();
        let mut j = 0;
        for spec in before.rules_of(chain) {
            if cur.get(j).is_some_and(|c| c == spec) {
                j += 1;
                continue;
            }
            if let Some(k) = cur[j..].iter().position(|c| c == spec) {
                j += k + 1;
                continue;
            }
            let Some(g) = was_gone.iter().position(|(c, s)| c == chain && s == spec) else {
                // Gone for another reason (the runtime removed it): not the flip's to put back.
                continue;
            };
            was_gone.remove(g);
            let words: Vec<String> = rules::split_spec(spec)
                .unwrap_or_default()
                .iter()
                .map(|w| quoted(w))
                .collect();
            script.push_str(&format!("-I {chain} {} {}\n", j + 1, words.join(" ")));
            cur.insert(j, spec.to_string());
            j += 1;
        }
    }
    script.push_str("COMMIT\n");
    script
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn return_puts_the_rules_back_at_their_places_around_what_the_runtime_added() {
        let before = parse_tables(
            "*filter\n:INPUT DROP [0:0]\n:FORWARD DROP [0:0]\n:svc - [0:0]\n:DOCKER - [0:0]\n\
             -A INPUT -i lo -j ACCEPT\n-A INPUT -j svc\n-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT\n\
             -A FORWARD -j DOCKER\n-A svc -p tcp -m tcp --dport 80 -j ACCEPT\nCOMMIT\n",
        )
        .remove("filter")
        .unwrap();
        // After the flip, and Docker added a rule meanwhile.
        let now = parse_tables(
            "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:DOCKER - [0:0]\n\
             -A FORWARD -j DOCKER\n-A DOCKER -d 172.17.0.2/32 -j ACCEPT\nCOMMIT\n",
        )
        .remove("filter")
        .unwrap();
        let gone = vec![
            ("INPUT".to_string(), "-i lo -j ACCEPT".to_string()),
            ("INPUT".to_string(), "-j svc".to_string()),
            (
                "INPUT".to_string(),
                "-p tcp -m tcp --dport 22 -j ACCEPT".to_string(),
            ),
            (
                "svc".to_string(),
                "-p tcp -m tcp --dport 80 -j ACCEPT".to_string(),
            ),
        ];
        assert_eq!(
            restore_script("filter", &before, &now, &gone),
            "*filter\n:INPUT DROP [0:0]\n:FORWARD DROP [0:0]\n:svc - [0:0]\n\
             -I INPUT 1 -i lo -j ACCEPT\n-I INPUT 2 -j svc\n\
             -I INPUT 3 -p tcp -m tcp --dport 22 -j ACCEPT\n\
             -I svc 1 -p tcp -m tcp --dport 80 -j ACCEPT\nCOMMIT\n"
        );
    }

    #[test]
    fn a_rule_the_runtime_removed_meanwhile_is_not_put_back() {
        let before = parse_tables(
            "*filter\n:DOCKER - [0:0]\n-A DOCKER -d 172.17.0.9/32 -j ACCEPT\nCOMMIT\n",
        )
        .remove("filter")
        .unwrap();
        let now = parse_tables("*filter\n:DOCKER - [0:0]\nCOMMIT\n")
            .remove("filter")
            .unwrap();
        assert_eq!(
            restore_script("filter", &before, &now, &[]),
            "*filter\nCOMMIT\n"
        );
    }
}
