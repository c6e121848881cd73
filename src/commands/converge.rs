//! `mesh-host take`, `mesh-host converge [--preview]` and `mesh-host adopt`: the operator's acts
//! on an adopted node, each a change to the stored declaration applied like any other (source
//! `local`). The preview changes nothing and shows what the flip would keep, close, take and
//! retire; the flip itself is refused exactly when the preview says it would be.

use crate::apply::Host;
use crate::declaration::openings as opening;
use crate::declaration::{Declaration, Mode, Resource, Shape, Source};
use crate::node_firewall;
use crate::node_firewall::save::ssh_ports;
use crate::store::{self, State};
use anyhow::{Context, Result};
use serde::Serialize;
use std::fmt::Write as _;
use std::net::IpAddr;

/// What an operator's act comes to: refused with an exit code and the reason, or a declaration
/// to apply.
pub enum Asked {
    Refused { code: u8, why: String },
    Apply(Box<Declaration>),
}

fn refused(code: u8, why: impl Into<String>) -> Asked {
    Asked::Refused {
        code,
        why: why.into(),
    }
}

/// The stored state and declaration, or why there is none to act on.
fn stored(root: &std::path::Path) -> Result<std::result::Result<(State, Declaration), Asked>> {
    let state = store::peek(root).context("reading the store")?;
    let Some(state) = state else {
        return Ok(Err(refused(
            3,
            "nothing has been applied on this node yet (no store): raise it with `mesh-host \
             genesis` or apply a declaration first",
        )));
    };
    let Some(decl) = state.declaration.clone() else {
        return Ok(Err(refused(
            3,
            "the store holds no declaration to act on: apply one first",
        )));
    };
    Ok(Ok((state, decl)))
}

/// The modules the declaration's resources belong to, in the order they first appear.
pub fn modules(decl: &Declaration) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for r in &decl.resources {
        if let Some(m) = r.module() {
            if !out.iter().any(|o| o == m) {
                out.push(m.to_string());
            }
        }
    }
    out
}

/// `take MODULE`: the module added to the stored declaration's taken modules.
pub fn taking(root: &std::path::Path, module: &str) -> Result<Asked> {
    let (state, mut decl) = match stored(root)? {
        Ok(s) => s,
        Err(a) => return Ok(a),
    };
    let known = modules(&decl);
    if !known.iter().any(|m| m == module) {
        return Ok(refused(
            2,
            format!(
                "no module {module:?} in node {}'s declaration; the modules it has are: {}",
                decl.node,
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            ),
        ));
    }
    if state.mode == Some(Mode::Converged) || decl.mode == Mode::Converged {
        return Ok(refused(
            3,
            format!(
                "node {} is converged: every module converges there already",
                decl.node
            ),
        ));
    }
    if decl.taken.iter().any(|t| t == module) {
        return Ok(refused(
            2,
            format!("module {module} is already taken on node {}", decl.node),
        ));
    }
    decl.taken.push(module.to_string());
    Ok(Asked::Apply(Box::new(decl)))
}

/// The declaration the flip applies: converged, every module of the declaration taken.
fn converged(decl: &Declaration) -> Declaration {
    let mut d = decl.clone();
    d.mode = Mode::Converged;
    for m in modules(decl) {
        if !d.taken.contains(&m) {
            d.taken.push(m);
        }
    }
    d
}

/// The refusal of a converge (or its preview) on a node that is converged, with no flip left
/// unfinished; `None` when the flip may go on.
fn converged_already(state: &State, decl: &Declaration) -> Option<Asked> {
    let done = state
        .flip
        .as_ref()
        .is_none_or(|f| f.stage == store::FlipStage::Done);
    (state.mode == Some(Mode::Converged) && done)
        .then(|| refused(3, format!("node {} is converged already", decl.node)))
}

/// `converge`: the stored declaration, converged.
pub fn converging(root: &std::path::Path) -> Result<Asked> {
    let (state, decl) = match stored(root)? {
        Ok(s) => s,
        Err(a) => return Ok(a),
    };
    if let Some(asked) = converged_already(&state, &decl) {
        return Ok(asked);
    }
    Ok(Asked::Apply(Box::new(converged(&decl))))
}

/// `adopt`: the stored declaration, adopted again; what was taken stays taken.
pub fn adopting(root: &std::path::Path) -> Result<Asked> {
    let (state, mut decl) = match stored(root)? {
        Ok(s) => s,
        Err(a) => return Ok(a),
    };
    // A return that did not finish (the store is adopted and still holds the flip) is finished.
    if state.mode != Some(Mode::Converged) && state.flip.is_none() {
        return Ok(refused(3, format!("node {} is adopted already", decl.node)));
    }
    if state.flip.is_none() {
        return Ok(refused(
            3,
            format!(
                "node {} was raised converged, not flipped: there is no found firewall saved to \
                 return to",
                decl.node
            ),
        ));
    }
    decl.mode = Mode::Adopted;
    Ok(Asked::Apply(Box::new(decl)))
}

/// One thing reachable on the machine now, and what the flip does to it.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct Reach {
    pub proto: String,
    pub address: String,
    pub port: u16,
    /// The process (listeners) or container (published ports) behind it.
    pub by: String,
    /// The opening that admits it after the flip (`ssh` for ssh's listener), or `None`.
    pub admitted_by: Option<String>,
    /// From where it stays reachable, when it does.
    pub from: Option<String>,
    /// Whether the flip closes it.
    pub closes: bool,
    /// From where a new connection reaches it now, as the evaluator walks the found firewall.
    pub now: String,
    /// What the flip does to it, from the two: `kept`, `NARROWS: from anywhere → from the
    /// private network (mesh0) only`, `opens: …`, `WILL CLOSE`, `stays closed`.
    pub change: String,
}

/// A module the flip takes, with the held files it replaces.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct Take {
    pub module: String,
    pub files: Vec<HeldFile>,
}

#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct HeldFile {
    pub path: String,
    /// Where its original is kept.
    pub original: Option<String>,
}

/// The found firewall the flip disables, and how.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct Retiring {
    pub kind: String,
    pub parts: Vec<String>,
    pub config: Vec<String>,
    pub unit: Option<String>,
    pub how: String,
}

/// What `converge --preview` shows.
#[derive(Serialize, Debug, Clone)]
pub struct Preview {
    pub node: String,
    pub listening: Vec<Reach>,
    pub published: Vec<Reach>,
    pub take: Vec<Take>,
    pub found_firewall: Vec<Retiring>,
    /// What the derived filter admits besides the openings.
    pub filter: String,
    /// Why the flip would be refused; empty when it would go ahead.
    pub refusals: Vec<String>,
    /// The refusals the flip lifts: bans of sources of a port that stays reachable, held in a
    /// found nftables table the flip deletes, which the derived filter does not carry.
    pub lifts: Vec<String>,
    /// The converge's apply planned resource by resource, as every preview's plan (its keys
    /// are the document's, beside the flip's own account above).
    #[serde(skip)]
    pub plan: crate::apply::plan::Plan,
}

/// The processes that hold a published port's socket for the runtime, so they are shown as the
/// container's port they are.
const PROXIES: [&str; 3] = ["docker-proxy", "rootlessport", "conmon"];

fn loopback(a: &IpAddr) -> bool {
    a.is_loopback()
}

/// The preview, read from the store, the machine and the found firewall; changes nothing.
pub fn preview(host: &Host<'_>) -> Result<std::result::Result<Preview, Asked>> {
    let (state, decl) = match stored(host.root)? {
        Ok(s) => s,
        Err(a) => return Ok(Err(a)),
    };
    if let Some(asked) = converged_already(&state, &decl) {
        return Ok(Err(asked));
    }
    let target = converged(&decl);
    let settings = state.settings.as_ref();
    let openings: Vec<(node_firewall::Opening, String)> = target
        .resources
        .iter()
        .filter_map(|r| match r {
            Resource::Opening(o) => opening::to_opening(o, settings)
                .ok()
                .map(|op| (op, o.id.clone())),
            _ => None,
        })
        .collect();
    let admit = |port: u16, proto: node_firewall::Proto, path: node_firewall::opening::Path| {
        openings
            .iter()
            .find(|(o, _)| o.port == port && o.proto == proto && o.path == path)
            .map(|(o, id)| (id.clone(), o.from.describe()))
    };
    let ssh = ssh_ports();
    let private = settings
        .and_then(|s| s.private_network.as_ref())
        .map(|p| p.interface.clone());
    let inventory = ::genesis::inventory::listeners().context("reading this node's listeners")?;
    let mut listening = Vec::new();
    for l in &inventory {
        if loopback(&l.address) {
            continue;
        }
        if l.owners.iter().any(|o| PROXIES.contains(&o.name.as_str())) {
            continue;
        }
        let by = match l.owners.first() {
            Some(o) => format!("{} (pid {})", o.name, o.pid),
            None => "an unknown process".to_string(),
        };
        let mut r = Reach {
            proto: l.protocol.as_str().to_string(),
            address: l.address.to_string(),
            port: l.port,
            by,
            admitted_by: None,
            from: None,
            closes: true,
            now: String::new(),
            change: String::new(),
        };
        if let Some((id, from)) = admit(l.port, l.protocol, node_firewall::opening::Path::Incoming)
        {
            (r.admitted_by, r.from, r.closes) = (Some(id), Some(from), false);
        } else if l.protocol == node_firewall::Proto::Tcp && ssh.contains(&l.port) {
            r.admitted_by = Some("ssh".into());
            r.from = Some(match &private {
                Some(i) => format!("the private network ({i})"),
                None => "anywhere (the node has no private network)".into(),
            });
            r.closes = false;
        }
        if !listening.contains(&r) {
            listening.push(r);
        }
    }
    let (containers, _) = crate::commands::inventory::running_containers(host.runner)
        .context("listing the running containers")?;
    let mut published = Vec::new();
    for c in &containers {
        for p in &c.ports {
            let mut r = Reach {
                proto: p.proto.as_str().to_string(),
                address: p.host_address.clone().unwrap_or_else(|| "*".into()),
                port: p.host_port,
                by: format!("container {} (port {})", c.name, p.container_port),
                admitted_by: None,
                from: None,
                closes: true,
                now: String::new(),
                change: String::new(),
            };
            if let Some((id, from)) = admit(
                p.host_port,
                p.proto,
                node_firewall::opening::Path::Forwarded,
            ) {
                (r.admitted_by, r.from, r.closes) = (Some(id), Some(from), false);
            }
            if !published.contains(&r) {
                published.push(r);
            }
        }
    }
    let take = modules(&decl)
        .into_iter()
        .filter(|m| !decl.taken.contains(m))
        .map(|m| Take {
            files: state
                .held
                .iter()
                .filter(|h| h.shape == Shape::File && h.module.as_deref() == Some(m.as_str()))
                .map(|h| HeldFile {
                    path: h.key.clone(),
                    original: state.original(&h.key).map(|o| o.saved.clone()),
                })
                .collect(),
            module: m,
        })
        .collect();
    let mut f = (host.firewall)(host.root, &decl);
    let surveyed = f.survey().context("reading the found firewall")?;
    // The nftables tables the flip deletes: a ban held there is lifted by the flip.
    let retired_tables: Vec<String> = surveyed
        .iter()
        .flat_map(node_firewall::Retired::nft_tables)
        .map(|(family, table)| format!("{family} {table}"))
        .collect();
    // Where each is reachable from now: the evaluator's walk of a connection from anywhere
    // through the found firewall, beside where the derived filter admits it after the flip.
    let asked: Vec<node_firewall::Opening> = listening
        .iter()
        .map(|r| (r, node_firewall::opening::Path::Incoming))
        .chain(
            published
                .iter()
                .map(|r| (r, node_firewall::opening::Path::Forwarded)),
        )
        .map(|(r, path)| node_firewall::Opening {
            id: now_id(r, path),
            port: r.port,
            proto: if r.proto == "udp" {
                node_firewall::Proto::Udp
            } else {
                node_firewall::Proto::Tcp
            },
            from: node_firewall::opening::From::Anywhere,
            path,
        })
        .collect();
    let verdicts = f
        .verdicts(&asked)
        .map_err(|e| anyhow::anyhow!("walking connections through the found firewall: {e}"))?;
    let mut lifts: Vec<String> = Vec::new();
    for (r, path) in listening
        .iter_mut()
        .map(|r| (r, node_firewall::opening::Path::Incoming))
        .chain(
            published
                .iter_mut()
                .map(|r| (r, node_firewall::opening::Path::Forwarded)),
        )
    {
        let Some(v) = verdicts.get(&now_id(r, path)) else {
            continue;
        };
        (r.now, r.change) = reach_change(v, r);
        if !r.closes {
            for p in v.parts.iter().filter(|p| {
                matches!(
                    p.fate,
                    node_firewall::eval::Fate::Refused {
                        why: node_firewall::eval::Refusal::Ban,
                        ..
                    }
                )
            }) {
                if let Some(by) = p.fate.by().filter(|b| retired_tables.contains(&b.table)) {
                    let line = format!(
                        "{} banned by {} ({} {}:{} stays reachable, the derived filter carries no ban)",
                        p.sources, by, r.proto, r.address, r.port
                    );
                    if !lifts
                        .iter()
                        .any(|l| l.starts_with(&format!("{} banned by {by}", p.sources)))
                    {
                        lifts.push(line);
                    }
                }
            }
        }
    }
    let found_firewall = surveyed
        .iter()
        .map(|r| Retiring {
            kind: r.backend.as_str().to_string(),
            parts: r.saved.iter().map(|s| s.what.clone()).collect(),
            config: r.config.clone(),
            unit: r.unit.clone(),
            how: retiring_how(r),
        })
        .collect();
    let mut refusals = crate::apply::refusals(&state, &target);
    // The act's own answer, resource by resource, read as every preview reads it.
    let plan = match crate::apply::plan::plan(
        host.root,
        host.runner,
        "converge",
        &target,
        Source::Local,
    ) {
        Ok(p) => p,
        Err(r) => {
            if r.code == 1 {
                anyhow::bail!(r.why);
            }
            // Refused for the held containers listed above already, or for another reason.
            if !r.held {
                refusals.push(r.why);
            }
            crate::apply::plan::Plan::empty(
                "converge",
                &decl.node,
                Mode::Converged.as_str(),
                Source::Local,
            )
        }
    };
    let incoming = openings
        .iter()
        .filter(|(o, _)| o.path == node_firewall::opening::Path::Incoming)
        .count();
    Ok(Ok(Preview {
        node: decl.node.clone(),
        listening,
        published,
        take,
        found_firewall,
        filter: format!(
            "drop by default on input and forward, both families; admits established and related \
             traffic, loopback, the ICMP and ICMPv6 a machine needs, ssh ({}) from {}, what leaves \
             the runtime's bridges, and the {} opening(s) declared ({incoming} incoming, {} \
             forwarded)",
            ssh.iter()
                .map(u16::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            private.as_deref().unwrap_or("anywhere"),
            openings.len(),
            openings.len() - incoming
        ),
        refusals,
        lifts,
        plan,
    }))
}

fn now_id(r: &Reach, path: node_firewall::opening::Path) -> String {
    format!("now/{}/{}/{}/{}", path.as_str(), r.proto, r.address, r.port)
}

/// From where it is reached now, and what the flip changes of that.
fn reach_change(v: &node_firewall::eval::Verdict, r: &Reach) -> (String, String) {
    let now = reached_from(v);
    let after = r.from.clone().unwrap_or_default();
    let anywhere = now == "anywhere" || now.starts_with("anywhere except ");
    let change = match (r.closes, now.as_str(), after.as_str()) {
        (true, "nowhere", _) => "stays closed".to_string(),
        (true, _, _) => format!("WILL CLOSE: reached from {now} now, no opening admits it"),
        (false, _, "anywhere") if anywhere => "kept".to_string(),
        (false, _, a) if anywhere => format!("NARROWS: from {now} → from {a} only"),
        (false, "nowhere", a) => format!("opens: from nowhere → from {a}"),
        (false, n, a) => format!("changes: from {n} → from {a}"),
    };
    (now, change)
}

/// Where a new connection from anywhere is admitted, by the interfaces it arrives on: `anywhere`,
/// `anywhere except 10.200.1.2/32`, `nowhere`, or each interface's own answer.
pub(crate) fn reached_from(v: &node_firewall::eval::Verdict) -> String {
    use node_firewall::eval::{Addrs, Fam, Fate};
    let mut ifaces: Vec<&str> = v.parts.iter().map(|p| p.iif.as_str()).collect();
    ifaces.sort();
    ifaces.dedup();
    // Per interface: the sources admitted and those not, both families.
    let mut each: Vec<(&str, String)> = Vec::new();
    for i in &ifaces {
        let mut refused: Vec<Addrs> = Vec::new();
        let mut admitted_any = false;
        let mut refused_all = true;
        for fam in [Fam::V4, Fam::V6] {
            let parts = v.parts.iter().filter(|p| p.iif == *i && p.fam == fam);
            let mut yes = Addrs::none(fam);
            let mut no = Addrs::none(fam);
            for p in parts {
                if p.fate == Fate::Admitted {
                    yes = yes.union(&p.sources);
                } else {
                    no = no.union(&p.sources);
                }
            }
            admitted_any |= !yes.is_empty();
            refused_all &= yes.is_empty();
            if !no.is_empty() {
                refused.push(no);
            }
        }
        let text = if refused.is_empty() {
            "anywhere".to_string()
        } else if refused_all || !admitted_any {
            "nowhere".to_string()
        } else {
            format!(
                "anywhere except {}",
                refused
                    .iter()
                    .map(|a| a.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        each.push((i, text));
    }
    if each.is_empty() {
        return "nowhere".into();
    }
    let first = &each[0].1;
    if each.iter().all(|(_, t)| t == first) {
        return first.clone();
    }
    each.iter()
        .map(|(i, t)| format!("on {i} from {t}"))
        .collect::<Vec<_>>()
        .join("; ")
}

impl Preview {
    /// What the flip closes, counted as the lines say it: a port reached now that no opening
    /// admits `WILL CLOSE`; one reached from nowhere now `stays closed`.
    fn closing_words(&self) -> String {
        let all: Vec<&Reach> = self.listening.iter().chain(&self.published).collect();
        let stays = all
            .iter()
            .filter(|r| r.closes && r.change == "stays closed")
            .count();
        let closes = all.iter().filter(|r| r.closes).count() - stays;
        let ports = |n: usize| if n == 1 { "port" } else { "ports" };
        let stay = |n: usize| {
            format!(
                "{n} {} closed now {}",
                ports(n),
                if n == 1 {
                    "stays closed"
                } else {
                    "stay closed"
                }
            )
        };
        match (closes, stays) {
            (0, 0) => "no port closes".into(),
            (c, 0) => format!("{c} {} reached now would close", ports(c)),
            (0, s) => format!("no port reached now closes; {}", stay(s)),
            (c, s) => format!("{c} {} reached now would close; {}", ports(c), stay(s)),
        }
    }
}

/// How a kind is retired, in a sentence for the operator.
fn retiring_how(r: &node_firewall::Retired) -> String {
    let unit = r
        .unit
        .as_deref()
        .map(|u| format!("its boot unit {u} disabled (not stopped)"))
        .unwrap_or_else(|| "no boot unit found".into());
    let what = match r.backend {
        node_firewall::Backend::Nftables => "its tables deleted in the flip's one transaction",
        node_firewall::Backend::IptablesNft | node_firewall::Backend::IptablesLegacy => {
            "the rules its rules file loads deleted, its refusing policies set to ACCEPT, the \
             chains it made deleted; the runtime's and blocklists' chains stay"
        }
        node_firewall::Backend::Firewalld => {
            "firewalld ended without its own cleanup (as CleanupOnExit=no ends it: its stop \
             flushes every iptables table, the runtime's included) and its table inet firewalld \
             deleted in the flip's one transaction; started again and its runtime state put back \
             on return"
        }
        node_firewall::Backend::Ufw => {
            "stopped with ufw-init stop, what ufw.service runs (`ufw disable` would rewrite \
             ufw.conf); started again with ufw-init start on return"
        }
    };
    format!(
        "{what}; {unit}; its configuration ({}) stays on disk as it is, and `mesh-host adopt` \
         puts it back exactly as saved",
        if r.config.is_empty() {
            "none".to_string()
        } else {
            r.config.join(", ")
        }
    )
}

impl Preview {
    /// 3 when the flip would be refused; else 4, changes pending (a flip always changes the
    /// firewall).
    pub fn exit_code(&self) -> u8 {
        if self.refusals.is_empty() {
            crate::apply::plan::CHANGES_PENDING
        } else {
            3
        }
    }

    /// The `--json` document: a plan, as every preview's, with the flip's account beside it.
    pub fn document(&self) -> serde_json::Value {
        let mut plan = self.plan.clone();
        plan.pending = self.exit_code() == crate::apply::plan::CHANGES_PENDING;
        let mut v = crate::json_contract::document("plan", self.exit_code(), &plan);
        if let (Some(doc), Ok(serde_json::Value::Object(own))) =
            (v.as_object_mut(), serde_json::to_value(self))
        {
            for (k, val) in own {
                doc.entry(k).or_insert(val);
            }
        }
        v
    }

    /// The preview as a person reads it: the flip's account, then the converge's plan resource
    /// by resource (unchanged ones listed only when `verbose`) and its summary line.
    pub fn render(&self, verbose: bool) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "converge preview for node {}: adopted → converged (nothing has changed)",
            self.node
        );
        let line = |out: &mut String, r: &Reach| {
            let after = match (&r.admitted_by, r.closes) {
                (Some(id), false) => format!(
                    "{}: {id}, from {} (now from {})",
                    r.change,
                    r.from.as_deref().unwrap_or("anywhere"),
                    r.now
                ),
                _ if r.change.is_empty() => "WILL CLOSE: no opening admits it".to_string(),
                _ => r.change.clone(),
            };
            let _ = writeln!(
                out,
                "  {:<4} {:<22} {:<34} {after}",
                r.proto,
                format!("{}:{}", r.address, r.port),
                r.by
            );
        };
        let _ = writeln!(out, "\nlistening on this machine now:");
        if self.listening.is_empty() {
            let _ = writeln!(out, "  (nothing but loopback)");
        }
        for r in &self.listening {
            line(&mut out, r);
        }
        let _ = writeln!(out, "\npublished by containers now:");
        if self.published.is_empty() {
            let _ = writeln!(out, "  (none)");
        }
        for r in &self.published {
            line(&mut out, r);
        }
        let _ = writeln!(out, "\nmodules the flip takes:");
        if self.take.is_empty() {
            let _ = writeln!(out, "  (none: every module is taken already)");
        }
        for t in &self.take {
            if t.files.is_empty() {
                let _ = writeln!(out, "  {}: no held file", t.module);
            }
            for f in &t.files {
                let _ = writeln!(
                    out,
                    "  {}: replaces held file {}{}",
                    t.module,
                    f.path,
                    f.original
                        .as_deref()
                        .map(|o| format!(" (original kept at {o})"))
                        .unwrap_or_default()
                );
            }
        }
        let _ = writeln!(out, "\nfound firewall, disabled (never flushed):");
        if self.found_firewall.is_empty() {
            let _ = writeln!(out, "  (none configured here)");
        }
        for r in &self.found_firewall {
            let _ = writeln!(
                out,
                "  {}: {}",
                r.kind,
                if r.parts.is_empty() {
                    "nothing loaded now".to_string()
                } else {
                    r.parts.join(", ")
                }
            );
            let _ = writeln!(out, "    {}", r.how);
        }
        let _ = writeln!(out, "\nderived filter: {}", self.filter);
        if !self.lifts.is_empty() {
            let _ = writeln!(out, "\nrefusals the flip LIFTS:");
            for l in &self.lifts {
                let _ = writeln!(out, "  lifts: {l}");
            }
        }
        if self.refusals.is_empty() {
            let _ = writeln!(out);
            out.push_str(&self.plan.render(verbose));
            let _ = writeln!(
                out,
                "\nthe flip would go ahead ({}): run `mesh-host converge`",
                self.closing_words()
            );
        } else {
            let _ = writeln!(out, "\nthe flip would be REFUSED:");
            for r in &self.refusals {
                let _ = writeln!(out, "  {r}");
            }
        }
        out
    }
}
