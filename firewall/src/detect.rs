//! Detecting the found firewall: every filtering layer that can drop a packet on the incoming or
//! the forwarded path, with who wrote it and the evidence.
//!
//! A base chain at a hook runs in priority order with every other base chain at that hook; an
//! accept ends only its own chain and a drop in any is final, whether the other chains are
//! nftables or legacy iptables. So the found firewall is not "a kind" but a set of layers, and an
//! opening must be admitted by every layer on its path that could drop it. Detection only reads:
//! it never creates a table or chain it looks for (legacy tables are read only when
//! `/proc/net/ip_tables_names` says they exist, since listing one makes the kernel create it).
//!
//! Which kind wrote a layer is each kind's own knowledge ([`backend::Detect`], in its driver's
//! file); detection keeps only the order the kinds are asked in and the decision (the first that
//! claims a table), and the layers themselves: hooks, priorities, policies, whether a chain can
//! drop.

use crate::backend;
use crate::error::Result;
use crate::found::{Backend, Found, Layer, MESH_TABLE};
use crate::netlink::consts::NFT_REG_VERDICT;
use crate::netlink::{ChainType, Expr, Family, Hook, NfSocket, Policy, Ruleset, Verdict};
use run::Runner;
use std::path::Path as FsPath;

/// Reads the found firewall from nf_tables (through `nf`, when the kernel has it) and from the
/// legacy x_tables named under `proc` (normally `/proc`).
pub fn detect(nf: Option<&mut NfSocket>, exec: &dyn Runner, proc: &FsPath) -> Result<Found> {
    let ruleset = match nf {
        Some(sock) => Some(sock.ruleset(None)?),
        None => None,
    };
    detect_in(ruleset.as_ref(), exec, proc)
}

/// Like [`detect`], from a ruleset already listed (`None` when the kernel has no nf_tables).
pub fn detect_in(ruleset: Option<&Ruleset>, exec: &dyn Runner, proc: &FsPath) -> Result<Found> {
    let mut found = Found::default();
    match ruleset {
        Some(ruleset) => nft_layers(ruleset, &mut found),
        None => found
            .notes
            .push("nf_tables is not available; only legacy tables were read".into()),
    }
    legacy_layers(exec, proc, &mut found)?;
    refuse_what_no_driver_speaks(exec, &mut found);
    Ok(found)
}

/// The hooks a packet crosses on its way to a service, in the families that filter there.
fn filters_on_the_way(family: Family, hook: Hook) -> bool {
    match family {
        Family::Netdev => hook == Hook::Ingress,
        Family::Ipv4 | Family::Ipv6 => {
            matches!(hook, Hook::Prerouting | Hook::Input | Hook::Forward)
        }
        Family::Inet => matches!(
            hook,
            Hook::Ingress | Hook::Prerouting | Hook::Input | Hook::Forward
        ),
        _ => false,
    }
}

/// The kinds that may have written an nf_tables table, in the order they are asked: the first
/// that says it wrote a table is its writer. firewalld's table and its direct chains go first, then
/// ufw's chains (both live in tables with iptables' names), then iptables-nft's shape, and
/// hand-written nftables takes what is left.
const NF_ORDER: [Backend; 4] = [
    Backend::Firewalld,
    Backend::Ufw,
    Backend::IptablesNft,
    Backend::Nftables,
];

/// The kinds that may have written a legacy table, in the order they are asked; iptables-legacy
/// takes what is left.
const LEGACY_ORDER: [Backend; 3] = [Backend::Ufw, Backend::Firewalld, Backend::IptablesLegacy];

/// Who wrote the table a base chain lives in, with the evidence: the first kind in
/// [`NF_ORDER`] that says it did.
fn writer(ruleset: &Ruleset, family: Family, table: &str, chain: &str) -> (Backend, String) {
    NF_ORDER
        .into_iter()
        .find_map(|b| {
            backend::kind(b)
                .detect
                .wrote(ruleset, family, table, chain)
                .map(|evidence| (b, evidence))
        })
        .unwrap_or_else(|| {
            (
                Backend::Nftables,
                format!("table {family} {table}, written with nft"),
            )
        })
}

/// Who wrote a legacy table with these chains: the first kind in [`LEGACY_ORDER`] that says it
/// did.
fn legacy_writer(chains: &[&str]) -> Backend {
    LEGACY_ORDER
        .into_iter()
        .find(|b| backend::kind(*b).detect.wrote_legacy(chains))
        .unwrap_or(Backend::IptablesLegacy)
}

/// Expressions that never decide a packet's fate, when this crate keeps them raw: matches,
/// loads, stores, logging and accounting. A raw expression of any other kind (reject, queue, an
/// x_tables target, synproxy, fwd, an object reference, a lookup or immediate this crate could
/// not read, or one it has never heard of) is taken as able to drop.
const VERDICT_FREE: &[&str] = &[
    "log",
    "limit",
    "quota",
    "counter",
    "notrack",
    "match",
    "range",
    "byteorder",
    "exthdr",
    "rt",
    "hash",
    "numgen",
    "socket",
    "fib",
    "osf",
    "meta",
    "ct",
    "payload",
    "cmp",
    "bitwise",
    "dynset",
    "connlimit",
    "dup",
    "xfrm",
    "last",
];

/// Whether one expression of a rule can end in a drop: a verdict other than accept, continue
/// or return (a jump or goto leads to rules that may drop), a verdict map, or something this
/// crate cannot tell is verdict-free.
fn expr_can_drop(e: &Expr) -> bool {
    if let Some(v) = e.as_verdict() {
        return !matches!(v, Verdict::Accept | Verdict::Continue | Verdict::Return);
    }
    match e {
        // A lookup into the verdict register is a verdict map (`vmap`).
        Expr::Lookup { dreg, .. } => *dreg == Some(NFT_REG_VERDICT),
        Expr::Raw { name, .. } => !VERDICT_FREE.contains(&name.as_str()),
        _ => false,
    }
}

fn nft_layers(ruleset: &Ruleset, found: &mut Found) {
    for c in &ruleset.chains {
        let Some(hook) = &c.hook else { continue };
        if !filters_on_the_way(c.family, hook.hook) {
            continue;
        }
        if c.table == MESH_TABLE && c.family == Family::Inet {
            continue;
        }
        if c.chain_type
            .as_ref()
            .is_some_and(|t| *t != ChainType::Filter)
        {
            continue;
        }
        let rules: Vec<_> = ruleset.rules_of(c.family, &c.table, &c.name).collect();
        let policy = c.policy.unwrap_or(Policy::Accept);
        let can_drop =
            policy != Policy::Accept || rules.iter().any(|r| r.exprs.iter().any(expr_can_drop));
        let (backend, evidence) = writer(ruleset, c.family, &c.table, &c.name);
        let unwritable = ruleset
            .table(c.family, &c.table)
            .and_then(|t| t.owner)
            .map(|port| {
                format!(
                    "table {} {} is owned by another process (netlink port {port}): only its owner can change its rules",
                    c.family, c.table
                )
            });
        found.layers.push(Layer {
            backend,
            hook: hook.hook,
            family: c.family,
            table: c.table.clone(),
            chain: c.name.clone(),
            priority: hook.priority,
            policy,
            rules: rules.len(),
            can_drop,
            evidence,
            device: hook.device.clone(),
            unwritable,
        });
    }
}

fn legacy_layers(exec: &dyn Runner, proc: &FsPath, found: &mut Found) -> Result<()> {
    for (names, program, family) in [
        ("net/ip_tables_names", "iptables-legacy-save", Family::Ipv4),
        (
            "net/ip6_tables_names",
            "ip6tables-legacy-save",
            Family::Ipv6,
        ),
    ] {
        let listed = std::fs::read_to_string(proc.join(names)).unwrap_or_default();
        // Every legacy table with a PREROUTING, INPUT or FORWARD chain filters: a drop in raw,
        // mangle or security is as final as one in filter. Only a table /proc lists is read,
        // since listing one makes the kernel create it.
        for (name, priority) in LEGACY_TABLES {
            if !listed.lines().any(|l| l.trim() == *name) {
                continue;
            }
            legacy_table(exec, proc, names, program, family, name, *priority, found)?;
        }
        // The nat table refuses nothing, but its DNAT rules say where a published port leads
        // (`published::targets`), which ufw's route rules and firewalld's strict forward ports
        // name: saved beside the others when the kernel has it, never created by listing it.
        if listed.lines().any(|l| l.trim() == "nat") && exec.exists(program) {
            let out = crate::child::stdout(exec, program, &["-t".into(), "nat".into()], None)?;
            found.legacy_saves.insert((family, "nat".into()), out);
        }
    }
    Ok(())
}

/// The legacy tables' saves as [`detect_in`] reads them (the same tables, the same programs),
/// nothing parsed: what shows whether the legacy layers are still as a model read them.
pub(crate) fn legacy_saves_now(
    exec: &dyn Runner,
    proc: &FsPath,
) -> Result<std::collections::BTreeMap<(Family, String), String>> {
    let mut out = std::collections::BTreeMap::new();
    for (names, program, family) in [
        ("net/ip_tables_names", "iptables-legacy-save", Family::Ipv4),
        (
            "net/ip6_tables_names",
            "ip6tables-legacy-save",
            Family::Ipv6,
        ),
    ] {
        let listed = std::fs::read_to_string(proc.join(names)).unwrap_or_default();
        if !exec.exists(program) {
            continue;
        }
        for name in LEGACY_TABLES.iter().map(|(n, _)| *n).chain(["nat"]) {
            if listed.lines().any(|l| l.trim() == name) {
                let got = crate::child::stdout(exec, program, &["-t".into(), name.into()], None)?;
                out.insert((family, name.to_string()), got);
            }
        }
    }
    Ok(out)
}

/// Whether two sets of legacy saves say the same rules: the tools' comment lines (which carry
/// the time of the save) and the chains' packet and byte counts (which traffic moves) aside.
pub(crate) fn same_saves(
    a: &std::collections::BTreeMap<(Family, String), String>,
    b: &std::collections::BTreeMap<(Family, String), String>,
) -> bool {
    fn said(text: &str) -> impl Iterator<Item = &str> {
        text.lines().filter(|l| !l.starts_with('#')).map(|l| {
            if l.starts_with(':') {
                l.rsplit_once(" [").map_or(l, |(head, _)| head)
            } else {
                l
            }
        })
    }
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|((ka, ta), (kb, tb))| ka == kb && said(ta).eq(said(tb)))
}

/// The legacy tables whose PREROUTING, INPUT and FORWARD chains can drop, with their hook
/// priorities.
const LEGACY_TABLES: &[(&str, i32)] = &[
    ("raw", -300),
    ("mangle", -150),
    ("filter", 0),
    ("security", 50),
];

#[allow(clippy::too_many_arguments)]
fn legacy_table(
    exec: &dyn Runner,
    proc: &FsPath,
    names: &str,
    program: &str,
    family: Family,
    name: &str,
    priority: i32,
    found: &mut Found,
) -> Result<()> {
    if !exec.exists(program) {
        found.refusal.get_or_insert(format!(
            "legacy {family} {name} table is in force but {program} is not installed to read it"
        ));
        return Ok(());
    }
    let out = crate::child::stdout(exec, program, &["-t".into(), name.into()], None)?;
    // The evaluator's reader of a save; the lines of other tables, if the tool printed any, are
    // not this table's.
    let (_, policies, saved_rules) = crate::eval::parse_save(&out, name)
        .into_iter()
        .find(|(t, _, _)| t == name)
        .unwrap_or_default();
    let chains: Vec<&str> = policies.iter().map(|(c, _)| c.as_str()).collect();
    found
        .legacy_saves
        .insert((family, name.to_string()), out.clone());
    for (chain, hook) in [
        ("PREROUTING", Hook::Prerouting),
        ("INPUT", Hook::Input),
        ("FORWARD", Hook::Forward),
    ] {
        let Some(policy) = policies
            .iter()
            .find(|(c, _)| c == chain)
            .and_then(|(_, p)| p.as_deref())
        else {
            continue;
        };
        let rules: Vec<_> = saved_rules.iter().filter(|(c, _)| c == chain).collect();
        let fam = if family == Family::Ipv6 {
            crate::eval::Fam::V6
        } else {
            crate::eval::Fam::V4
        };
        let can_drop = policy != "ACCEPT"
            || rules
                .iter()
                .any(|(_, spec)| !crate::eval::saved_rule_lets_on(spec, fam));
        let backend = legacy_writer(&chains);
        found.layers.push(Layer {
            backend,
            hook,
            family,
            table: name.into(),
            chain: chain.into(),
            priority,
            policy: if policy == "ACCEPT" {
                Policy::Accept
            } else {
                Policy::Drop
            },
            rules: rules.len(),
            can_drop,
            evidence: format!(
                "{}/{names} lists {name}; read with {program} -t {name}",
                proc.display()
            ),
            device: None,
            unwritable: None,
        });
    }
    Ok(())
}

/// The first reason a kind gives that openings cannot be written through one of its layers here.
fn refuse_what_no_driver_speaks(exec: &dyn Runner, found: &mut Found) {
    for l in &found.layers {
        if let Some(r) = backend::kind(l.backend).detect.refusal(l, exec) {
            found.refusal.get_or_insert(r);
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
