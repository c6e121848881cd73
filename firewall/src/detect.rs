//! Detecting the found firewall: every filtering layer that can drop a packet on the incoming or
//! the forwarded path, with who wrote it and the evidence.
//!
//! A base chain at a hook runs in priority order with every other base chain at that hook; an
//! accept ends only its own chain and a drop in any is final, whether the other chains are
//! nftables or legacy iptables. So the found firewall is not "a kind" but a set of layers, and an
//! opening must be admitted by every layer on its path that could drop it. Detection only reads:
//! it never creates a table or chain it looks for (legacy tables are read only when
//! `/proc/net/ip_tables_names` says they exist, since listing one makes the kernel create it).

use crate::error::Result;
use crate::exec::Exec;
use crate::netlink::consts::{IFNAMSIZ, NFT_REG_VERDICT};
use crate::netlink::{ChainType, Expr, Family, Hook, MetaKey, NfSocket, Policy, Ruleset, Verdict};
use crate::opening::{Opening, Path};
use crate::rules::Site;
use std::fmt;
use std::path::Path as FsPath;

/// The mesh's own table (the guard, and later the derived filter); never a found layer.
pub const MESH_TABLE: &str = "mesh_host";

/// Who wrote a layer, and so in whose terms an opening is written into it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "kebab-case")
)]
pub enum Backend {
    /// Written with `nft` (a hand-written ruleset): openings are written natively.
    Nftables,
    /// Written through `iptables` on the nf_tables backend (the operator, Docker, Podman):
    /// openings are written with `iptables-nft`, so the tables stay readable by iptables.
    IptablesNft,
    /// The legacy x_tables: openings are written with `iptables-legacy`.
    IptablesLegacy,
    /// firewalld's own table: openings are rich rules in the mesh's firewalld policy, over
    /// firewalld's D-Bus API.
    Firewalld,
    /// ufw's chains: openings are written with `ufw allow` and `ufw route allow`.
    Ufw,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Nftables => "nftables",
            Backend::IptablesNft => "iptables-nft",
            Backend::IptablesLegacy => "iptables-legacy",
            Backend::Firewalld => "firewalld",
            Backend::Ufw => "ufw",
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One base chain (or legacy built-in chain) at a hook a packet crosses on its way to a
/// service: ingress, prerouting and input on the incoming path; ingress, prerouting and forward
/// on the forwarded path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layer {
    pub backend: Backend,
    pub hook: Hook,
    /// `ip`, `ip6`, `inet` or `netdev`; a legacy layer is `ip` (iptables) or `ip6` (ip6tables).
    pub family: Family,
    pub table: String,
    pub chain: String,
    pub priority: i32,
    pub policy: Policy,
    pub rules: usize,
    /// Whether anything in it can drop a packet: a drop policy, or a rule that drops, rejects,
    /// jumps elsewhere or does something this host cannot read.
    pub can_drop: bool,
    /// Why the host thinks `backend` wrote it.
    pub evidence: String,
    /// The device of an ingress chain: only packets arriving on it cross it.
    pub device: Option<String>,
    /// Why the host cannot write in this layer, when it cannot (a table only its owner may
    /// change): an opening it would refuse is reported missing there, naming the layer.
    pub unwritable: Option<String>,
}

impl Layer {
    /// Whether packets on `path` cross this layer.
    pub fn on(&self, path: Path) -> bool {
        match self.hook {
            Hook::Ingress | Hook::Prerouting => true,
            Hook::Input => path == Path::Incoming,
            Hook::Forward => path == Path::Forwarded,
            _ => false,
        }
    }

    /// Whether the packets an opening admits cross this layer: on its path, and for an ingress
    /// chain of one device, arriving on that device (an opening from an interface arrives only
    /// there).
    pub fn crossed_by(&self, o: &Opening) -> bool {
        self.on(o.path)
            && match (&self.device, &o.from) {
                (Some(d), crate::opening::From::Interface(i)) => d == i,
                _ => true,
            }
    }

    /// Whether the chain runs before destination NAT (-100): a published port is still on the
    /// packet there.
    pub fn before_dnat(&self) -> bool {
        self.hook == Hook::Ingress || (self.hook == Hook::Prerouting && self.priority < -100)
    }

    /// Where the chain runs, for an opening's rule.
    pub fn site(&self) -> Site {
        Site {
            family: self.family,
            before_dnat: self.before_dnat(),
        }
    }

    /// The hook's name, as nft prints it.
    pub fn hook_name(&self) -> &'static str {
        match self.hook {
            Hook::Ingress => "ingress",
            Hook::Prerouting => "prerouting",
            Hook::Input => "input",
            Hook::Forward => "forward",
            _ => "other",
        }
    }

    /// The paths that cross it, for reports: `incoming`, `forwarded` or `both`.
    pub fn paths(&self) -> &'static str {
        match (self.on(Path::Incoming), self.on(Path::Forwarded)) {
            (true, true) => "both",
            (true, false) => "incoming",
            (false, true) => "forwarded",
            _ => "none",
        }
    }

    /// `ip filter INPUT (iptables-nft)`, for reports.
    pub fn describe(&self) -> String {
        format!(
            "{} {} {} ({})",
            self.family, self.table, self.chain, self.backend
        )
    }
}

/// The found firewall.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Found {
    pub layers: Vec<Layer>,
    /// Why openings cannot be converged through it, if they cannot.
    pub refusal: Option<String>,
    /// What could not be read, if anything (reported, never guessed at).
    pub notes: Vec<String>,
    /// The legacy tables as `*-save` printed them while detecting, by family and table: the
    /// iptables-legacy driver reads them from here within the same convergence instead of
    /// running the program again.
    pub legacy_saves: std::collections::BTreeMap<(Family, String), String>,
}

impl Found {
    /// The layers that can drop a packet on a path: an opening must be admitted by each.
    pub fn droppers(&self, path: Path) -> impl Iterator<Item = &Layer> {
        self.layers.iter().filter(move |l| l.on(path) && l.can_drop)
    }

    /// `none`, one backend's name, or several joined with `+` (e.g. `iptables-legacy+nftables`).
    pub fn kind(&self) -> String {
        let mut kinds: Vec<Backend> = self
            .layers
            .iter()
            .filter(|l| l.can_drop)
            .map(|l| l.backend)
            .collect();
        kinds.sort();
        kinds.dedup();
        if kinds.is_empty() {
            "none".into()
        } else {
            kinds
                .iter()
                .map(|b| b.as_str())
                .collect::<Vec<_>>()
                .join("+")
        }
    }
}

/// Reads the found firewall from nf_tables (through `nf`, when the kernel has it) and from the
/// legacy x_tables named under `proc` (normally `/proc`).
pub fn detect(nf: Option<&mut NfSocket>, exec: &dyn Exec, proc: &FsPath) -> Result<Found> {
    let ruleset = match nf {
        Some(sock) => Some(sock.ruleset(None)?),
        None => None,
    };
    detect_in(ruleset.as_ref(), exec, proc)
}

/// Like [`detect`], from a ruleset already listed (`None` when the kernel has no nf_tables).
pub fn detect_in(ruleset: Option<&Ruleset>, exec: &dyn Exec, proc: &FsPath) -> Result<Found> {
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

/// Names of the built-in chains iptables creates.
const XT_BUILTIN: &[&str] = &["INPUT", "FORWARD", "OUTPUT", "PREROUTING", "POSTROUTING"];

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

/// Whether `chain` is firewalld's mark on an iptables table: with FirewallBackend=iptables it
/// writes iptables' tables itself, always with a `<BUILT-IN>_direct` chain beside each built-in
/// chain it uses.
fn firewalld_direct(chain: &str) -> bool {
    chain
        .strip_suffix("_direct")
        .is_some_and(|b| XT_BUILTIN.contains(&b))
}

/// Who wrote the table a base chain lives in, with the evidence.
fn writer(ruleset: &Ruleset, family: Family, table: &str, chain: &str) -> (Backend, String) {
    let chains_here = || {
        ruleset
            .chains
            .iter()
            .filter(move |c| c.family == family && c.table == table)
    };
    if table == "firewalld" {
        return (Backend::Firewalld, format!("table {family} firewalld"));
    }
    if let Some(c) = chains_here().find(|c| firewalld_direct(&c.name)) {
        return (
            Backend::Firewalld,
            format!(
                "firewalld's iptables backend: its chain {} in table {family} {table}",
                c.name
            ),
        );
    }
    if chains_here().any(|c| c.name.starts_with("ufw-") || c.name.starts_with("ufw6-")) {
        return (
            Backend::Ufw,
            format!("ufw chains in table {family} {table}"),
        );
    }
    let xt_family = matches!(family, Family::Ipv4 | Family::Ipv6);
    if xt_family && xt_priority(table, chain).is_some() {
        let docker = chains_here().any(|c| c.name.starts_with("DOCKER"));
        let who = if docker {
            "Docker and the operator, through iptables-nft"
        } else {
            "iptables-nft"
        };
        // nft itself calls a table iptables-nft's when it holds x_tables compat expressions.
        if has_xt(ruleset, family, table) {
            return (
                Backend::IptablesNft,
                format!("{who}: x_tables compat expressions in table {family} {table}"),
            );
        }
        match nft_sign(ruleset, family, table) {
            Some(sign) => {
                return (
                    Backend::Nftables,
                    format!("table {family} {table} has iptables' names but was written with nft: {sign}"),
                )
            }
            // Nothing tells the two apart; writing through iptables-nft keeps the table readable
            // by both iptables and nft.
            None => {
                return (
                    Backend::IptablesNft,
                    format!(
                        "{who}: iptables' table and chain names, a counter on every rule and nothing iptables never writes in table {family} {table}"
                    ),
                )
            }
        }
    }
    (
        Backend::Nftables,
        format!("table {family} {table}, written with nft"),
    )
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

/// One legacy table as `iptables-legacy-save` prints it: built-in chain policies and rules.
pub(crate) struct LegacyTable {
    pub policies: Vec<(String, String)>,
    pub rules: Vec<(String, String)>,
}

/// Parses `iptables-save` output for one table.
pub(crate) fn parse_save(text: &str) -> LegacyTable {
    let mut t = LegacyTable {
        policies: Vec::new(),
        rules: Vec::new(),
    };
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix(':') {
            let mut parts = rest.split_whitespace();
            if let (Some(chain), Some(policy)) = (parts.next(), parts.next()) {
                t.policies.push((chain.to_string(), policy.to_string()));
            }
        } else if let Some(rest) = line.strip_prefix("-A ") {
            let (chain, spec) = rest.split_once(' ').unwrap_or((rest, ""));
            t.rules.push((chain.to_string(), spec.to_string()));
        }
    }
    t
}

fn legacy_layers(exec: &dyn Exec, proc: &FsPath, found: &mut Found) -> Result<()> {
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
            let out = exec.run_ok(program, &["-t".into(), "nat".into()], None)?;
            found
                .legacy_saves
                .insert((family, "nat".into()), out.stdout);
        }
    }
    Ok(())
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
    exec: &dyn Exec,
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
    let out = exec.run_ok(program, &["-t".into(), name.into()], None)?;
    let table = parse_save(&out.stdout);
    found
        .legacy_saves
        .insert((family, name.to_string()), out.stdout.clone());
    for (chain, hook) in [
        ("PREROUTING", Hook::Prerouting),
        ("INPUT", Hook::Input),
        ("FORWARD", Hook::Forward),
    ] {
        let Some((_, policy)) = table.policies.iter().find(|(c, _)| c == chain) else {
            continue;
        };
        let rules: Vec<_> = table.rules.iter().filter(|(c, _)| c == chain).collect();
        let can_drop = policy != "ACCEPT"
            || rules.iter().any(|(_, spec)| {
                let target = spec
                    .split(" -j ")
                    .nth(1)
                    .or_else(|| spec.split(" -g ").nth(1));
                !matches!(
                    target.map(|t| t.split_whitespace().next().unwrap_or("")),
                    Some("ACCEPT") | Some("RETURN")
                )
            });
        let ufw = table.policies.iter().any(|(c, _)| c.starts_with("ufw"));
        let firewalld = table.policies.iter().any(|(c, _)| firewalld_direct(c));
        let backend = if ufw {
            Backend::Ufw
        } else if firewalld {
            Backend::Firewalld
        } else {
            Backend::IptablesLegacy
        };
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

fn refuse_what_no_driver_speaks(exec: &dyn Exec, found: &mut Found) {
    for l in &found.layers {
        let reason = match l.backend {
            // firewalld is spoken over D-Bus and ufw through its own command; ufw's absence
            // is named by its driver, firewalld's by each opening's state.
            Backend::Firewalld | Backend::Ufw => None,
            Backend::IptablesNft | Backend::IptablesLegacy if l.can_drop => {
                let variant = if l.backend == Backend::IptablesNft {
                    "nft"
                } else {
                    "legacy"
                };
                let base = if l.family == Family::Ipv6 {
                    "ip6tables"
                } else {
                    "iptables"
                };
                let missing: Vec<String> = ["-save", "-restore"]
                    .iter()
                    .map(|s| format!("{base}-{variant}{s}"))
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
            _ => None,
        };
        if let Some(r) = reason {
            found.refusal.get_or_insert(r);
        }
    }
}

#[cfg(test)]
mod tests;
