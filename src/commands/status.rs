//! `mesh-host firewall status`: the found firewall's kind and layers with their evidence, every
//! declared opening with present or missing per layer, and the guard's state; `firewall explain`
//! in `status/explain.rs`.

mod explain;
pub use explain::{
    explain_command, explain_through, Explain, ExplainStatus, KernelProbe, WayPart, WayStatus,
    EXIT_DISAGREES,
};

use crate::declaration::openings::to_opening;
use crate::declaration::Resource;
use crate::node_firewall::{self, bpf, eval::Verdict, filter, Kernel, NodeFirewallRead};
use crate::store::State;
use anyhow::{Context, Result};
use serde::Serialize;
use std::fmt::Write as _;

/// What `firewall status` says: the found firewall, each declared opening through it, and the
/// guard; `--json` prints it as it is (document `firewall_status`), [`render`] for a person.
#[derive(Debug, Clone, Serialize)]
pub struct FirewallStatus {
    pub kind: String,
    pub refusal: Option<String>,
    pub notes: Vec<String>,
    pub layers: Vec<LayerStatus>,
    pub openings: Vec<OpeningStatus>,
    pub guard: GuardState,
}

/// One layer of the found firewall with its evidence.
#[derive(Debug, Clone, Serialize)]
pub struct LayerStatus {
    pub layer: String,
    pub backend: &'static str,
    pub hook: &'static str,
    pub path: &'static str,
    pub device: Option<String>,
    pub unwritable: Option<String>,
    pub family: String,
    pub table: String,
    pub chain: String,
    pub priority: i32,
    pub policy: String,
    pub rules: usize,
    pub can_drop: bool,
    pub evidence: String,
}

/// One declared opening: its verdict, and its marked rule on each layer it crosses.
#[derive(Debug, Clone, Serialize)]
pub struct OpeningStatus {
    pub id: String,
    pub port: u16,
    pub proto: &'static str,
    pub path: &'static str,
    pub verdict: Option<VerdictStatus>,
    pub layers: Vec<OpeningLayer>,
}

/// An opening's marked rule on one layer.
#[derive(Debug, Clone, Serialize)]
pub struct OpeningLayer {
    pub layer: String,
    pub chain: Option<String>,
    pub present: bool,
    /// One word for scripts ([`state_name`]).
    pub state: &'static str,
    pub detail: String,
}

/// An opening's verdict for scripts: its state, the sentence a person reads, the summary they
/// are said from (each way the parts end: the interfaces with their families, the sources when
/// not every source, the rule), and the parts of its sources with how each ends and the rule
/// that decides.
#[derive(Debug, Clone, Serialize)]
pub struct VerdictStatus {
    pub state: &'static str,
    pub detail: String,
    pub summary: Vec<ClauseStatus>,
    pub parts: Vec<PartStatus>,
}

/// One clause of a verdict's summary.
#[derive(Debug, Clone, Serialize)]
pub struct ClauseStatus {
    pub fate: &'static str,
    pub on: Vec<OnStatus>,
    pub sources: Option<Vec<String>>,
    pub everywhere: bool,
    pub rule: Option<String>,
}

/// An interface a clause holds on, with its families.
#[derive(Debug, Clone, Serialize)]
pub struct OnStatus {
    pub interface: String,
    pub families: Vec<&'static str>,
}

/// One part of a verdict: a family, an interface and sources, and how it ends.
#[derive(Debug, Clone, Serialize)]
pub struct PartStatus {
    pub family: &'static str,
    pub interface: String,
    pub sources: Vec<String>,
    pub fate: &'static str,
    pub rule: Option<String>,
    pub detail: String,
}

impl VerdictStatus {
    pub fn of(v: &Verdict) -> VerdictStatus {
        let s = v.summary();
        VerdictStatus {
            state: s.state,
            detail: s.text,
            summary: s
                .clauses
                .iter()
                .map(|c| ClauseStatus {
                    fate: c.fate.word(),
                    on: c
                        .on
                        .iter()
                        .map(|(iif, fams)| OnStatus {
                            interface: iif.clone(),
                            families: fams.iter().map(|f| f.name()).collect(),
                        })
                        .collect(),
                    sources: c.from.as_ref().map(|a| a.cidrs()),
                    everywhere: c.everywhere,
                    rule: c.fate.by().map(|b| b.to_string()),
                })
                .collect(),
            parts: v
                .parts
                .iter()
                .map(|p| PartStatus {
                    family: p.fam.name(),
                    interface: p.iif.clone(),
                    sources: p.sources.cidrs(),
                    fate: p.fate.word(),
                    rule: p.fate.by().map(|b| b.to_string()),
                    detail: p.fate.describe(),
                })
                .collect(),
        }
    }
}

/// The guard: its table as read (or no nf_tables), the layers that stand, its BPF layer.
#[derive(Debug, Clone, Serialize)]
pub struct GuardState {
    #[serde(flatten)]
    pub table: GuardTableState,
    /// The guard's layers in force, named as the briefing names them ([`layers_named`]).
    pub layers: &'static str,
    pub bpf: BpfState,
}

/// The guard's table `inet mesh_host`.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum GuardTableState {
    Read {
        /// The guard's refusals stand (never from the table's name alone).
        present: bool,
        /// The table is there, whatever it holds.
        table: bool,
        plain: bool,
        owned: bool,
        orphan: bool,
        dormant: bool,
        owner: Option<u32>,
        chains: Vec<String>,
        rules: Vec<String>,
        /// The derived filter's chains in the table, when either is there.
        filter: Option<FilterChains>,
    },
    /// The kernel has no nf_tables.
    NoNfTables {
        present: bool,
        table: bool,
        note: &'static str,
    },
}

/// The derived filter's chains in the mesh's table and their rules together.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FilterChains {
    pub chains: Vec<String>,
    pub rules: usize,
}

/// The guard's netfilter BPF layer: as pinned under the root (the same keys, empty, when the
/// pins cannot be read), and the links the kernel holds for this namespace's guard.
#[derive(Debug, Clone, Default, Serialize)]
pub struct BpfState {
    pub pinned: bool,
    pub pins: std::path::PathBuf,
    pub program: Option<String>,
    pub links: Vec<String>,
    pub link_ids: Vec<u32>,
    pub ports: Vec<String>,
    pub interfaces: Vec<String>,
    pub nets: Vec<String>,
    /// Not standing: whether this kernel takes the program at all.
    pub kernel: Option<String>,
    /// Why the pins could not be read.
    pub error: Option<String>,
    /// The ids of this namespace's guard links the kernel holds, pinned here or not.
    pub held: Vec<u32>,
    /// A link of this namespace's guard is attached at each of the four hooks.
    pub attached: bool,
    /// Why the links the kernel holds could not be read.
    pub held_error: Option<String>,
}

impl GuardTableState {
    fn present(&self) -> bool {
        matches!(self, GuardTableState::Read { present: true, .. })
    }

    fn filter(&self) -> bool {
        matches!(
            self,
            GuardTableState::Read {
                filter: Some(_),
                ..
            }
        )
    }
}

/// Reads the firewall as it is now, against the stored declaration's openings; the guard's BPF
/// layer is read from its pins under `root`.
pub fn firewall_status(root: &std::path::Path, state: Option<&State>) -> Result<FirewallStatus> {
    // The firewall's programs get the stored declaration's deadlines, as they do in an apply.
    let deadlines = state
        .and_then(|s| s.settings.as_ref())
        .and_then(|s| s.deadlines)
        .unwrap_or_default();
    read_status(&mut Kernel::new(root, "", deadlines), state)
}

/// [`firewall_status`] through `fw`: the kernel's, or the recording fake in unit tests.
pub fn read_status(fw: &mut dyn NodeFirewallRead, state: Option<&State>) -> Result<FirewallStatus> {
    fw.know_runtime_bridges(&recorded_bridges(state));
    let found = fw.detected().context("reading the found firewall")?;
    let settings = state.and_then(|s| s.settings.as_ref());
    let mut openings = Vec::new();
    if let Some(decl) = state.and_then(|s| s.declaration.as_ref()) {
        for r in &decl.resources {
            if let Resource::Opening(o) = r {
                openings.push(to_opening(o, settings)?);
            }
        }
    }
    let presence = fw.presence(&openings).context("checking the openings")?;
    let verdicts = fw
        .verdicts(&openings)
        .context("walking the openings' connections through the found firewall")?;
    let table = match fw.guard_status() {
        Ok(g) => GuardTableState::Read {
            present: g.present,
            table: g.table,
            plain: g.plain,
            owned: g.owned,
            orphan: g.orphan,
            dormant: g.dormant,
            owner: g.owner,
            chains: g.chains,
            rules: g.rules,
            filter: filter_chains(&g.others),
        },
        Err(node_firewall::Error::NoNfTables) => GuardTableState::NoNfTables {
            present: false,
            table: false,
            note: "the kernel has no nf_tables",
        },
        Err(e) => return Err(e).context("reading the guard"),
    };
    let bpf = bpf_state(fw);
    Ok(FirewallStatus {
        kind: found.kind(),
        refusal: found.refusal.clone(),
        notes: found.notes.clone(),
        layers: found
            .layers
            .iter()
            .map(|l| LayerStatus {
                layer: l.describe(),
                backend: l.backend.as_str(),
                hook: l.hook_name(),
                path: l.paths(),
                device: l.device.clone(),
                unwritable: l.unwritable.clone(),
                family: l.family.to_string(),
                table: l.table.clone(),
                chain: l.chain.clone(),
                priority: l.priority,
                policy: format!("{:?}", l.policy).to_lowercase(),
                rules: l.rules,
                can_drop: l.can_drop,
                evidence: l.evidence.clone(),
            })
            .collect(),
        openings: openings
            .iter()
            .map(|o| OpeningStatus {
                id: o.id.clone(),
                port: o.port,
                proto: o.proto.as_str(),
                path: o.path.as_str(),
                verdict: verdicts.get(&o.id).map(VerdictStatus::of),
                layers: presence
                    .get(&o.id)
                    .into_iter()
                    .flatten()
                    .map(|p| OpeningLayer {
                        layer: p.layer.to_string(),
                        chain: p.chain.clone(),
                        present: p.present(),
                        state: state_name(&p.state),
                        detail: p.state.describe(),
                    })
                    .collect(),
            })
            .collect(),
        guard: GuardState {
            layers: layers_named(table.present(), bpf.attached, table.filter()),
            table,
            bpf,
        },
    })
}

/// The runtime's bridges the last apply found (the guard's, or the derived filter's), as the
/// store records them for the boot step: a read-only question asks no runtime.
pub fn recorded_bridges(state: Option<&State>) -> Vec<String> {
    let Some(boot) = state.and_then(|s| s.boot.as_ref()) else {
        return Vec::new();
    };
    let mut out: Vec<String> = boot
        .guard
        .iter()
        .flat_map(|g| g.runtimes.iter())
        .chain(boot.filter.iter().flat_map(|f| f.bridges.iter()))
        .cloned()
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The derived filter's chains in the mesh's table, from the table's other chains: `None` when
/// neither is there.
fn filter_chains(others: &[(String, usize)]) -> Option<FilterChains> {
    let chains: Vec<&(String, usize)> = others
        .iter()
        .filter(|(n, _)| n == filter::INPUT_CHAIN || n == filter::FORWARD_CHAIN)
        .collect();
    (!chains.is_empty()).then(|| FilterChains {
        chains: chains.iter().map(|(n, _)| n.clone()).collect(),
        rules: chains.iter().map(|(_, r)| r).sum(),
    })
}

/// The guard's BPF layer, all from what the kernel holds: the pins under the root, and this
/// namespace's guard links attached (found by the kernel, pinned here or not).
fn bpf_state(fw: &mut dyn NodeFirewallRead) -> BpfState {
    let pins = fw.bpf_pins();
    let held = fw.bpf_held();
    let links: &[bpf::LinkInfo] = held
        .as_ref()
        .map(|h| h.links.as_slice())
        .unwrap_or_default();
    let attached = held.as_ref().is_ok_and(|h| h.attached());
    let mut out = match fw.bpf_pinned() {
        Ok(st) => BpfState {
            pinned: st.holds(),
            // Not standing: whether this kernel would take the program at all (what loading it
            // for the survey said).
            kernel: match (&held, attached) {
                (_, true) => None,
                (Ok(h), false) => Some(match &h.refused {
                    Some(e) => format!("refuses the program: {e}"),
                    None => "takes the program".to_string(),
                }),
                (Err(_), false) => Some(match fw.bpf_supported() {
                    Ok(()) => "takes the program".to_string(),
                    Err(e) => format!("refuses the program: {e}"),
                }),
            },
            program: st.program,
            links: st.links,
            link_ids: st.link_ids,
            ports: st.contents.ports,
            interfaces: st.contents.ifaces,
            nets: st.contents.nets,
            ..BpfState::default()
        },
        // The same keys as a layer read, empty: a script finds every key in every case.
        Err(e) => BpfState {
            error: Some(e.to_string()),
            ..BpfState::default()
        },
    };
    out.pins = pins.dir;
    out.held = links.iter().map(|l| l.id).collect();
    out.attached = attached;
    out.held_error = held.as_ref().err().map(|e| e.to_string());
    out
}

/// The guard's layers in force, by whether its rules stand in the table, this namespace's four
/// guard links are attached, and the derived filter is there.
fn layers_named(table: bool, bpf: bool, filter: bool) -> &'static str {
    use crate::node_firewall::{LAYERS_BOTH, LAYERS_TABLE_ALONE};
    match (table, bpf) {
        (true, true) => LAYERS_BOTH,
        (false, true) => {
            "guard: netfilter BPF alone: holds through any ruleset change; the guard's rules in \
             table inet mesh_host are gone until the next apply or reconcile"
        }
        (true, false) => LAYERS_TABLE_ALONE,
        (false, false) if filter => {
            "guard: none; the derived filter (table inet mesh_host, chains input and forward) \
             is in force in its place, as on a converged node"
        }
        (false, false) => "guard: no layer in force",
    }
}

/// One word for a state, for scripts.
fn state_name(s: &node_firewall::State) -> &'static str {
    use node_firewall::State;
    match s {
        State::NotNeeded(_) => "not-needed",
        State::Present => "present",
        State::Missing => "missing",
        State::Refused(_) => "refused",
        State::Unwritable(_) => "unwritable",
        State::Doubtful(_) => "doubtful",
        State::Bypass(_) => "not-admitted",
    }
}

/// The same, as a person reads it.
pub fn render(v: &FirewallStatus) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "found firewall  {}", v.kind);
    if let Some(r) = &v.refusal {
        let _ = writeln!(out, "refused         {r}");
    }
    for n in &v.notes {
        let _ = writeln!(out, "note            {n}");
    }
    let _ = writeln!(out, "\nlayers");
    for l in &v.layers {
        let _ = writeln!(
            out,
            "  {:<10} {:<40} priority {:<5} policy {:<6} {:>3} rules  {}  [{}]",
            l.hook,
            l.layer,
            l.priority,
            l.policy,
            l.rules,
            if l.can_drop { "can drop" } else { "passes  " },
            l.evidence
        );
    }
    let _ = writeln!(out, "\nopenings");
    for o in &v.openings {
        let _ = write!(out, "  {:<24} {}/{} {:<9}", o.id, o.proto, o.port, o.path);
        let _ = write!(
            out,
            " {}",
            o.verdict
                .as_ref()
                .map_or("no verdict", |v| v.detail.as_str())
        );
        let _ = writeln!(out);
        for l in &o.layers {
            let shown = match l.state {
                "present" => "rule present".to_string(),
                "not-needed" => l.detail.clone(),
                _ => format!("rule {}", l.detail),
            };
            let _ = writeln!(out, "      {:<40} {shown}", l.layer);
        }
    }
    let g = &v.guard;
    let _ = writeln!(out, "\nguard           {}", guard_state(&g.table));
    let _ = writeln!(out, "layers          {}", g.layers);
    let b = &g.bpf;
    if b.pinned {
        let _ = writeln!(
            out,
            "bpf             {} pinned in {}: links {}; ports {}; interfaces {}; private ranges {}",
            b.program.as_deref().unwrap_or(""),
            b.pins.display(),
            b.links.join(", "),
            b.ports.join(", "),
            b.interfaces.join(", "),
            b.nets.join(", ")
        );
    } else if b.attached {
        let held: Vec<String> = b.held.iter().map(u32::to_string).collect();
        let _ = writeln!(
            out,
            "bpf             attached but not pinned in {}: links {} held by the kernel; the next \
             apply or reconcile pins them again",
            b.pins.display(),
            held.join(", ")
        );
    } else if let Some(k) = &b.kernel {
        let _ = writeln!(out, "bpf             not attached; this kernel {k}");
    }
    if let GuardTableState::Read { rules, .. } = &g.table {
        for r in rules {
            let _ = writeln!(out, "  {r}");
        }
    }
    out
}

/// The guard's table as a person reads it: whether the guard's rules stand in it, what it is,
/// and what a save, a reload and a flush do to it.
fn guard_state(g: &GuardTableState) -> String {
    let GuardTableState::Read {
        present,
        owned,
        orphan,
        dormant,
        owner,
        filter,
        ..
    } = g
    else {
        return "absent: nothing applied yet, or a flush of the ruleset removed it; the next apply \
                or reconcile puts it back"
            .into();
    };
    if let GuardTableState::Read {
        present: false,
        table: false,
        ..
    } = g
    {
        return "absent: nothing applied yet, or a flush of the ruleset removed it; the next apply \
                or reconcile puts it back"
            .into();
    };
    let flags = if *owned {
        Some(format!(
            "held by netlink port {} with the owner flag (an earlier version's holder): a ruleset \
             saved now does not load again until it lets go",
            owner.map_or("null".to_string(), |o| o.to_string())
        ))
    } else if *orphan {
        Some(
            "an orphaned persist table of an earlier version: nft cannot load a ruleset saved \
             with it; the next apply or reconcile replaces it with a plain table"
                .to_string(),
        )
    } else if *dormant {
        Some("dormant, so not in force; the next apply or reconcile replaces it".to_string())
    } else {
        None
    };
    if *present {
        return match flags {
            Some(f) => format!("present, {f}"),
            None => "present, plain table: a saved ruleset carries it and restores it; a flush of \
                     the ruleset removes it until the next apply or reconcile"
                .into(),
        };
    }
    let holds = if filter.is_none() {
        "holds no guard rules"
    } else {
        "holds only the derived filter (chains input and forward), as on a converged node"
    };
    match flags {
        Some(f) => format!("no guard: table inet mesh_host {holds}; it is {f}"),
        None => format!("no guard: table inet mesh_host {holds}"),
    }
}

#[cfg(test)]
mod tests;
