//! `mesh-host take`, `mesh-host converge [--preview]` and `mesh-host adopt`: the operator's acts
//! on an adopted node, each a change to the stored declaration applied like any other (source
//! `local`). The preview changes nothing and shows what the flip would keep, close, take and
//! retire; the flip itself is refused exactly when the preview says it would be.

mod render;

use crate::apply::Host;
use crate::declaration::openings as opening;
use crate::declaration::{Declaration, Mode, Resource, Shape, Source};
use crate::node_firewall;
use crate::node_firewall::save::ssh_ports;
use crate::store::{self, State};
use anyhow::{Context, Result};
use serde::Serialize;
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
    let openings = declared_openings(&target, settings);
    let ssh = ssh_ports();
    let private = settings
        .and_then(|s| s.private_network.as_ref())
        .map(|p| p.interface.clone());
    let inventory = ::genesis::inventory::listeners().context("reading this node's listeners")?;
    let mut listening = listening(&inventory, &openings, &ssh, private.as_deref());
    let (containers, _) = crate::commands::inventory::running_containers(host.runner)
        .context("listing the running containers")?;
    let mut published = published(&containers, &openings);
    let take = taken_by_the_flip(&state, &decl);
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
    let verdicts = f
        .verdicts(&asked_now(&listening, &published))
        .map_err(|e| anyhow::anyhow!("walking connections through the found firewall: {e}"))?;
    let lifts = walked(&mut listening, &mut published, &verdicts, &retired_tables);
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
    let plan = converge_plan(host, &target, &decl, &mut refusals)?;
    Ok(Ok(Preview {
        node: decl.node.clone(),
        listening,
        published,
        take,
        found_firewall,
        filter: filter_words(&ssh, private.as_deref(), &openings),
        refusals,
        lifts,
        plan,
    }))
}

/// The declaration's openings as the firewall's terms, each with its resource's id.
fn declared_openings(
    target: &Declaration,
    settings: Option<&crate::declaration::Settings>,
) -> Vec<(node_firewall::Opening, String)> {
    target
        .resources
        .iter()
        .filter_map(|r| match r {
            Resource::Opening(o) => opening::to_opening(o, settings)
                .ok()
                .map(|op| (op, o.id.clone())),
            _ => None,
        })
        .collect()
}

/// The declared opening that admits a port on a path after the flip: its id and from where.
fn admitted(
    openings: &[(node_firewall::Opening, String)],
    port: u16,
    proto: node_firewall::Proto,
    path: node_firewall::opening::Path,
) -> Option<(String, String)> {
    openings
        .iter()
        .find(|(o, _)| o.port == port && o.proto == proto && o.path == path)
        .map(|(o, id)| (id.clone(), o.from.describe()))
}

/// What listens on the machine beyond loopback and the runtime's proxies, each with what admits
/// it after the flip: a declared opening, or ssh's own admission.
fn listening(
    inventory: &[::genesis::inventory::Listener],
    openings: &[(node_firewall::Opening, String)],
    ssh: &[u16],
    private: Option<&str>,
) -> Vec<Reach> {
    let mut listening = Vec::new();
    for l in inventory {
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
        let incoming = node_firewall::opening::Path::Incoming;
        if let Some((id, from)) = admitted(openings, l.port, l.protocol, incoming) {
            (r.admitted_by, r.from, r.closes) = (Some(id), Some(from), false);
        } else if l.protocol == node_firewall::Proto::Tcp && ssh.contains(&l.port) {
            r.admitted_by = Some("ssh".into());
            r.from = Some(match private {
                Some(i) => format!("the private network ({i})"),
                None => "anywhere (the node has no private network)".into(),
            });
            r.closes = false;
        }
        if !listening.contains(&r) {
            listening.push(r);
        }
    }
    listening
}

/// The ports the running containers publish, each with the declared opening that admits it
/// forwarded after the flip.
fn published(
    containers: &[crate::system::Container],
    openings: &[(node_firewall::Opening, String)],
) -> Vec<Reach> {
    let mut published = Vec::new();
    for c in containers {
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
            let forwarded = node_firewall::opening::Path::Forwarded;
            if let Some((id, from)) = admitted(openings, p.host_port, p.proto, forwarded) {
                (r.admitted_by, r.from, r.closes) = (Some(id), Some(from), false);
            }
            if !published.contains(&r) {
                published.push(r);
            }
        }
    }
    published
}

/// The modules the flip takes (those not taken yet), each with the held files it replaces.
fn taken_by_the_flip(state: &State, decl: &Declaration) -> Vec<Take> {
    modules(decl)
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
        .collect()
}

/// What is reachable now as openings from anywhere, for the evaluator to walk through the found
/// firewall; each named by [`now_id`].
fn asked_now(listening: &[Reach], published: &[Reach]) -> Vec<node_firewall::Opening> {
    listening
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
        .collect()
}

/// Each reachable port's verdict now set beside what the flip does to it; the bans the flip
/// lifts (held in a retired nftables table, of a port that stays reachable) returned.
fn walked(
    listening: &mut [Reach],
    published: &mut [Reach],
    verdicts: &std::collections::BTreeMap<String, node_firewall::eval::Verdict>,
    retired_tables: &[String],
) -> Vec<String> {
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
    lifts
}

/// The act's own answer, resource by resource, read as every preview reads it; a refusal of the
/// plan (other than for the held containers the preview lists already) added to `refusals`.
fn converge_plan(
    host: &Host<'_>,
    target: &Declaration,
    decl: &Declaration,
    refusals: &mut Vec<String>,
) -> Result<crate::apply::plan::Plan> {
    match crate::apply::plan::plan(host.root, host.runner, "converge", target, Source::Local) {
        Ok(p) => Ok(p),
        Err(r) => {
            if r.code == 1 {
                anyhow::bail!(r.why);
            }
            // Refused for the held containers listed above already, or for another reason.
            if !r.held {
                refusals.push(r.why);
            }
            Ok(crate::apply::plan::Plan::empty(
                "converge",
                &decl.node,
                Mode::Converged.as_str(),
                Source::Local,
            ))
        }
    }
}

/// What the derived filter admits, in a sentence: ssh from where, and the openings declared.
fn filter_words(
    ssh: &[u16],
    private: Option<&str>,
    openings: &[(node_firewall::Opening, String)],
) -> String {
    let incoming = openings
        .iter()
        .filter(|(o, _)| o.path == node_firewall::opening::Path::Incoming)
        .count();
    format!(
        "drop by default on input and forward, both families; admits established and related \
         traffic, loopback, the ICMP and ICMPv6 a machine needs, ssh ({}) from {}, what leaves \
         the runtime's bridges, and the {} opening(s) declared ({incoming} incoming, {} \
         forwarded)",
        ssh.iter()
            .map(u16::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        private.unwrap_or("anywhere"),
        openings.len(),
        openings.len() - incoming
    )
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
