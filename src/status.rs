//! `mesh-host firewall status`: the found firewall's kind and layers with their evidence, every
//! declared opening with present or missing per layer, and the guard's state.

use crate::declaration::openings::to_opening;
use crate::declaration::Resource;
use crate::node_firewall::{self, bpf, eval::Verdict, filter, Kernel, NodeFirewallRead};
use crate::store::State;
use anyhow::{Context, Result};
use serde::Serialize;
use serde_json::{json, Value};
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
                        layer: p.layer.clone(),
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

/// How `firewall explain` answers: with the kernel asked too, and as JSON.
#[derive(Debug, Clone)]
pub struct Explain {
    pub confirm: bool,
    pub json: bool,
    /// The runtime's bridges the store records ([`recorded_bridges`]).
    pub bridges: Vec<String>,
}

/// The exit code of `firewall explain --confirm` when the kernel disagrees with the evaluator.
pub const EXIT_DISAGREES: u8 = crate::apply::DISAGREES;

/// `mesh-host firewall explain`: every problem with the arguments named at once (exit 2), then
/// the walk of each way the connection comes, as text or JSON; exit 0 when every way admits it.
/// With `confirm`, the kernel is asked in scratch namespaces too, its verdict stands, and a
/// disagreement exits [`EXIT_DISAGREES`].
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

pub fn explain_command(
    port: u16,
    proto: &str,
    from: Option<String>,
    interface: Option<String>,
    path: &str,
    how: Explain,
) -> Result<std::process::ExitCode> {
    let json = how.json;
    let mut problems = Vec::new();
    if port == 0 {
        problems.push("port: must be 1 to 65535".to_string());
    }
    let proto = match proto {
        "tcp" => Some(node_firewall::Proto::Tcp),
        "udp" => Some(node_firewall::Proto::Udp),
        other => {
            problems.push(format!("--proto: {other:?} is not tcp or udp"));
            None
        }
    };
    let path = match path {
        "incoming" => Some(node_firewall::opening::Path::Incoming),
        "forwarded" => Some(node_firewall::opening::Path::Forwarded),
        other => {
            problems.push(format!("--path: {other:?} is not incoming or forwarded"));
            None
        }
    };
    let networks = match &from {
        None => None,
        Some(f) => match crate::declaration::validate::parse_cidr(f, true) {
            Ok((addr, len)) => Some(vec![node_firewall::Network { addr, len }]),
            Err(e) => {
                problems.push(format!("--from: {e}"));
                None
            }
        },
    };
    if let Some(i) = &interface {
        if let Err(e) = crate::declaration::validate::check_interface(i) {
            problems.push(format!("--interface: {e}"));
        }
    }
    if how.confirm && proto == Some(node_firewall::Proto::Udp) {
        problems.push("--confirm: only tcp is confirmed (the kernel is asked with a SYN)".into());
    }
    let (Some(proto), Some(path), true) = (proto, path, problems.is_empty()) else {
        for p in &problems {
            eprintln!("error: {p}");
        }
        eprintln!("nothing was read or changed");
        return Ok(std::process::ExitCode::from(2));
    };
    let opening = node_firewall::Opening {
        id: "explain".into(),
        port,
        proto,
        from: match (networks, &interface) {
            (Some(n), _) => node_firewall::opening::From::Networks(n),
            (None, Some(i)) => node_firewall::opening::From::Interface(i.clone()),
            (None, None) => node_firewall::opening::From::Anywhere,
        },
        path,
    };
    let mut fw = Kernel::new(std::path::Path::new("/"), "", Default::default());
    fw.know_runtime_bridges(&how.bridges);
    let ways = fw
        .explain(&opening, interface.as_deref())
        .context("walking the connection through the found firewall")?;
    let evaluated = !ways.is_empty()
        && ways.iter().all(|(_, a)| {
            a.parts
                .iter()
                .all(|p| p.fate == node_firewall::eval::Fate::Admitted)
        });
    let confirmation = if how.confirm {
        Some(fw.ask_kernel(&ways)?)
    } else {
        None
    };
    let mut v = explain_json(&ways, confirmation.as_ref());
    let tally = confirmation
        .as_ref()
        .map(|c| node_firewall::confirm::Tally::of(&ways, &c.probes));
    let admitted = match &tally {
        Some(t) => t.kernel_admits,
        None => evaluated,
    };
    v["port"] = json!(port);
    v["proto"] = json!(proto.as_str());
    v["path"] = json!(path.as_str());
    v["from"] = json!(from.unwrap_or_else(|| "anywhere".into()));
    v["admitted"] = json!(admitted);
    // Without --confirm the two keys are there, null: the document's keys do not depend on it.
    v["evaluator_admitted"] = Value::Null;
    v["confirm"] = Value::Null;
    if let (Some(c), Some(t)) = (&confirmation, &tally) {
        v["evaluator_admitted"] = json!(evaluated);
        v["confirm"] = json!({
            "agrees": t.disagreeing == 0,
            "parts_agreeing": t.agreeing,
            "parts_disagreeing": t.disagreeing,
            "parts_settled": t.settled,
            "parts_unprobed": t.unprobed,
            "namespaces": c.namespaces,
            "notes": c.notes,
            "not_cloned": node_firewall::confirm::NOT_CLONED,
        });
    }
    let code = if tally.is_some_and(|t| t.disagreeing > 0) {
        EXIT_DISAGREES
    } else if admitted {
        0
    } else {
        1
    };
    if json {
        crate::json_contract::print("firewall_explain", code, &v)?;
    } else {
        print!("{}", render_explain(&v));
    }
    Ok(std::process::ExitCode::from(code))
}

/// The ways and their parts for scripts, each part with the kernel's probe when it was asked.
fn explain_json(
    ways: &[(node_firewall::eval::Way, node_firewall::eval::Answer)],
    confirmation: Option<&node_firewall::confirm::Confirmation>,
) -> Value {
    json!({
        "ways": ways.iter().enumerate().map(|(i, (w, a))| json!({
            "family": w.conn.fam.name(),
            "interface": w.conn.iif,
            "to": w.conn.daddr.map(|d| d.to_string()),
            "to_port": w.conn.to_port,
            "leaves_by": w.conn.oif,
            "parts": a.parts.iter().enumerate().map(|(j, p)| {
                let mut part = json!({
                    "sources": p.sources.cidrs(),
                    "fate": p.fate.word(),
                    "rule": p.fate.by().map(|b| b.to_string()),
                    "table": p.fate.by().map(|b| b.table.clone()),
                    "chain": p.fate.by().map(|b| b.chain.clone()),
                    "handle": p.fate.by().and_then(|b| b.handle),
                    "detail": p.fate.describe(),
                    "walk": p.trace,
                    "kernel": null,
                });
                if let Some(pr) = confirmation.map(|c| &c.probes[i][j]) {
                    part["kernel"] = json!({
                        "verdict": pr.kernel.word(),
                        "detail": pr.kernel.describe(),
                        "source": pr.source.map(|a| a.to_string()),
                        "to": pr.to.map(|a| a.to_string()),
                        "behind": pr.behind.map(|a| a.to_string()),
                        "agreement": node_firewall::confirm::agreement(&p.fate, &pr.kernel).word(),
                    });
                }
                part
            }).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

fn render_explain(v: &Value) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} port {} ({}) from {}",
        v["proto"].as_str().unwrap_or(""),
        v["port"],
        v["path"].as_str().unwrap_or(""),
        v["from"].as_str().unwrap_or("")
    );
    let ways = v["ways"].as_array().cloned().unwrap_or_default();
    if ways.is_empty() {
        let _ = writeln!(
            out,
            "  no way to ask about: nothing publishes the port, or no interface arrives here"
        );
    }
    for w in ways {
        let _ = write!(
            out,
            "\n{} arriving on {}",
            w["family"].as_str().unwrap_or(""),
            w["interface"].as_str().unwrap_or("")
        );
        if let Some(to) = w["to"].as_str() {
            let _ = write!(out, " to {to}");
        }
        if let Some(p) = w["to_port"].as_u64() {
            let _ = write!(out, " port {p}");
        }
        let _ = writeln!(out);
        for p in w["parts"].as_array().into_iter().flatten() {
            let sources: Vec<&str> = p["sources"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let _ = writeln!(out, "  from {}:", sources.join(", "));
            for step in p["walk"].as_array().into_iter().flatten() {
                let _ = writeln!(out, "    {}", step.as_str().unwrap_or(""));
            }
            let _ = writeln!(out, "    => {}", p["detail"].as_str().unwrap_or(""));
            if p["kernel"].is_object() {
                let _ = writeln!(out, "    kernel: {}", kernel_line(p));
            }
        }
    }
    let c = &v["confirm"];
    if c.is_object() {
        let _ = writeln!(
            out,
            "\nconfirmed by the kernel in scratch namespaces (removed): {} part(s) agree, {} \
             disagree, {} settled where the evaluator was doubtful, {} not probed",
            c["parts_agreeing"], c["parts_disagreeing"], c["parts_settled"], c["parts_unprobed"]
        );
        if c["agrees"] != true {
            let _ = writeln!(
                out,
                "THE KERNEL DISAGREES WITH THE EVALUATOR: the kernel's verdict stands ({})",
                if v["admitted"] == true {
                    "admitted"
                } else {
                    "not admitted"
                }
            );
        }
    }
    out
}

/// A part's probe as a person reads it: what the kernel did, from where to where, and whether
/// the evaluator said the same.
fn kernel_line(p: &Value) -> String {
    let k = &p["kernel"];
    let mut line = k["detail"].as_str().unwrap_or("").to_string();
    if let (Some(src), Some(to)) = (k["source"].as_str(), k["to"].as_str()) {
        line.push_str(&format!(" from {src} to {to}"));
    }
    if let Some(b) = k["behind"].as_str() {
        line.push_str(&format!(" (forwarded to {b})"));
    }
    let fate = p["fate"].as_str().unwrap_or("");
    match k["agreement"].as_str().unwrap_or("") {
        "agrees" => line.push_str(&format!(": agrees with the evaluator ({fate})")),
        "disagrees" => line.push_str(&format!(
            ": DISAGREES with the evaluator, which says {fate}; the kernel's verdict stands"
        )),
        "settled" => line.push_str(": settles what the evaluator could not tell"),
        _ => {}
    }
    line
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
mod tests {
    use super::*;
    use crate::node_firewall::fake::{input_layer, Recording};
    use crate::node_firewall::{bpf::BpfStatus, Backend, Found, GuardStatus, Held, Presence};
    use serde_json::json;

    #[test]
    fn a_verdict_s_json_says_its_state_words_and_summary_from_one_summary() {
        use node_firewall::eval::{Addrs, Decider, Fam, Fate, Part, Refusal};
        let by = Decider {
            table: "netdev filter".into(),
            chain: "ingress_eth0".into(),
            handle: Some(3),
            index: Some(0),
            text: "tcp dport 9000 drop".into(),
        };
        let part = |fam: Fam, iif: &str, fate: Fate| Part {
            fam,
            iif: iif.into(),
            sources: Addrs::all(fam),
            fate,
        };
        let refused = Fate::Refused {
            by,
            why: Refusal::Port,
        };
        let v = Verdict {
            parts: vec![
                part(Fam::V4, "eth0", refused.clone()),
                part(Fam::V4, "mesh0", Fate::Admitted),
                part(Fam::V6, "eth0", refused),
                part(Fam::V6, "mesh0", Fate::Admitted),
            ],
            none: None,
        };
        let j = serde_json::to_value(VerdictStatus::of(&v)).unwrap();
        assert_eq!(j["state"], "refused");
        assert_eq!(j["detail"], v.describe());
        assert_eq!(
            j["summary"],
            json!([
                {"fate": "refused", "on": [{"interface": "eth0", "families": ["ipv4", "ipv6"]}],
                 "sources": null, "everywhere": false,
                 "rule": "netdev filter ingress_eth0: tcp dport 9000 drop"},
                {"fate": "admitted", "on": [{"interface": "mesh0", "families": ["ipv4", "ipv6"]}],
                 "sources": null, "everywhere": false, "rule": null},
            ])
        );
        assert_eq!(j["parts"].as_array().map(Vec::len), Some(4));
    }

    #[test]
    fn the_guards_layers_are_named_by_what_holds() {
        assert_eq!(
            super::layers_named(true, true, false),
            "guard: table inet mesh_host + netfilter BPF (pinned): holds through any ruleset change"
        );
        assert!(super::layers_named(true, false, false)
            .starts_with("guard: table inet mesh_host alone"));
        assert!(super::layers_named(true, false, false).contains("8.6 ms per reload"));
        assert!(super::layers_named(false, true, false).starts_with("guard: netfilter BPF alone"));
        assert_eq!(
            super::layers_named(false, false, false),
            "guard: no layer in force"
        );
        // After converge: the table holds the derived filter, not the guard.
        assert!(super::layers_named(false, false, true)
            .starts_with("guard: none; the derived filter (table inet mesh_host"));
    }

    #[test]
    fn a_probe_is_rendered_with_both_verdicts_where_they_differ() {
        let part = |fate: &str, verdict: &str, detail: &str, agreement: &str| {
            json!({"fate": fate, "kernel": {"verdict": verdict, "detail": detail,
                   "source": "1.0.0.1", "to": "192.0.2.10:9000", "agreement": agreement}})
        };
        assert_eq!(
            super::kernel_line(&part("admitted", "timed-out", "timed out", "disagrees")),
            "timed out from 1.0.0.1 to 192.0.2.10:9000: DISAGREES with the evaluator, which \
             says admitted; the kernel's verdict stands"
        );
        assert_eq!(
            super::kernel_line(&part("refused", "refused", "refused (reset)", "agrees")),
            "refused (reset) from 1.0.0.1 to 192.0.2.10:9000: agrees with the evaluator (refused)"
        );
    }

    /// The guard's table as read: `flags` one of `plain`, `owned` (by port 7), `orphan`,
    /// `dormant`; with the derived filter's two chains when `filter`.
    fn table(present: bool, table: bool, flags: &str, filter: bool) -> GuardTableState {
        GuardTableState::Read {
            present,
            table,
            plain: flags == "plain",
            owned: flags == "owned",
            orphan: flags == "orphan",
            dormant: flags == "dormant",
            owner: (flags == "owned").then_some(7),
            chains: Vec::new(),
            rules: Vec::new(),
            filter: filter.then(|| FilterChains {
                chains: vec!["input".into(), "forward".into()],
                rules: 9,
            }),
        }
    }

    #[test]
    fn the_guard_is_rendered_by_its_table() {
        let render = |g: GuardTableState| super::guard_state(&g);
        assert!(render(table(false, false, "", false)).starts_with("absent"));
        let none = GuardTableState::NoNfTables {
            present: false,
            table: false,
            note: "the kernel has no nf_tables",
        };
        assert!(render(none).starts_with("absent"));
        assert!(render(table(true, true, "plain", false)).starts_with("present, plain table"));
        assert!(render(table(true, true, "owned", false))
            .starts_with("present, held by netlink port 7"));
        assert!(render(table(true, true, "orphan", false)).contains("orphaned"));
        assert!(render(table(true, true, "dormant", false)).contains("dormant"));
        // The table's name alone is no guard: after converge it holds only the derived filter.
        let converged = render(table(false, true, "plain", true));
        assert_eq!(
            converged,
            "no guard: table inet mesh_host holds only the derived filter (chains input and \
             forward), as on a converged node"
        );
        assert!(!converged.contains("present"));
        assert_eq!(
            render(table(false, true, "dormant", false)),
            "no guard: table inet mesh_host holds no guard rules; it is dormant, so not in force; \
             the next apply or reconcile replaces it"
        );
    }

    fn stored(resources: serde_json::Value) -> State {
        let v = json!({
            "version": 1, "node": "n1", "mode": "adopted",
            "settings": {
                "ports": {"store": 15432, "bus": 5672, "broker_management": 15672,
                          "registry": 5000, "hub": 51820}
            },
            "resources": resources
        });
        let decl = crate::declaration::validate_value(&v, crate::declaration::Source::Local)
            .unwrap_or_else(|p| panic!("refused:\n{p}"));
        State {
            settings: decl.settings.clone(),
            declaration: Some(decl),
            ..State::default()
        }
    }

    /// A fake whose found firewall is iptables-nft with one dropping INPUT chain, where `web/http`
    /// is missing and refused by the operator's rule, the guard's table stands with its BPF layer
    /// pinned and attached.
    fn scripted() -> Recording {
        let fake = Recording::default();
        {
            let mut s = fake.script.borrow_mut();
            s.found = Found {
                layers: vec![input_layer(Backend::IptablesNft, 4, true)],
                notes: vec!["ip6tables-legacy: not installed".into()],
                ..Found::default()
            };
            s.presence.insert(
                "web/http".into(),
                vec![Presence {
                    layer: "ip filter INPUT (iptables-nft)".into(),
                    chain: None,
                    state: node_firewall::State::Missing,
                }],
            );
            s.verdicts.insert("web/http".into(), refused_on_eth0());
            s.guard = Some(GuardStatus {
                present: true,
                table: true,
                plain: true,
                chains: vec!["prerouting".into(), "input".into(), "forward".into()],
                rules: vec!["mesh-host:guard/store/tcp/15432".into()],
                ..GuardStatus::default()
            });
            s.bpf = BpfStatus {
                program: Some("mh_guard_v2".into()),
                links: bpf::HOOKS.iter().map(|(_, _, n)| n.to_string()).collect(),
                link_ids: vec![11, 12, 13, 14],
                ..BpfStatus::default()
            };
            s.held = Held {
                links: bpf::HOOKS
                    .iter()
                    .zip(11..)
                    .map(|((pf, hook, _), id)| {
                        let mut l = bpf::LinkInfo::default();
                        (l.id, l.pf, l.hooknum) = (id, *pf, *hook);
                        l
                    })
                    .collect(),
                refused: None,
            };
        }
        fake
    }

    fn refused_on_eth0() -> Verdict {
        use node_firewall::eval::{Addrs, Decider, Fam, Fate, Part, Refusal};
        let by = Decider {
            table: "ip filter".into(),
            chain: "INPUT".into(),
            handle: Some(3),
            index: Some(0),
            text: "tcp dport 80 drop".into(),
        };
        Verdict {
            parts: vec![Part {
                fam: Fam::V4,
                iif: "eth0".into(),
                sources: Addrs::all(Fam::V4),
                fate: Fate::Refused {
                    by,
                    why: Refusal::Port,
                },
            }],
            none: None,
        }
    }

    #[test]
    fn status_through_the_fake_says_each_opening_each_layer_and_the_guard() {
        let fake = scripted();
        let state = stored(json!([
            {"id": "web/http", "type": "opening", "port": 80, "proto": "tcp", "from": "anywhere",
             "path": "incoming"}
        ]));
        let st = read_status(&mut fake.clone(), Some(&state)).expect("the fake answers");
        // Only reads were asked, the openings' in one call each.
        assert_eq!(
            fake.methods(),
            [
                "detected",
                "presence",
                "verdicts",
                "guard_status",
                "bpf_held",
                "bpf_pinned"
            ]
        );
        assert_eq!(fake.first("presence").unwrap().openings, ["web/http"]);

        let doc = crate::json_contract::document("firewall_status", 0, &st);
        crate::json_contract::check(&doc).unwrap_or_else(|p| panic!("{p:?}\n{doc:#}"));
        let v = serde_json::to_value(&st).unwrap();
        assert_eq!(v["kind"], "iptables-nft");
        assert_eq!(v["refusal"], serde_json::Value::Null);
        assert_eq!(v["notes"], json!(["ip6tables-legacy: not installed"]));
        assert_eq!(
            v["layers"],
            json!([{"layer": "ip filter INPUT (iptables-nft)", "backend": "iptables-nft",
                    "hook": "input", "path": "incoming", "device": null, "unwritable": null,
                    "family": "ip", "table": "filter", "chain": "INPUT", "priority": 0,
                    "policy": "drop", "rules": 4, "can_drop": true, "evidence": "the fake's"}])
        );
        let o = &v["openings"][0];
        assert_eq!(
            (&o["id"], &o["port"], &o["proto"], &o["path"]),
            (
                &json!("web/http"),
                &json!(80),
                &json!("tcp"),
                &json!("incoming")
            )
        );
        assert_eq!(o["verdict"]["state"], "refused");
        assert_eq!(
            o["verdict"]["parts"][0]["rule"],
            "ip filter INPUT: tcp dport 80 drop"
        );
        assert_eq!(
            o["layers"],
            json!([{"layer": "ip filter INPUT (iptables-nft)", "chain": null, "present": false,
                    "state": "missing", "detail": node_firewall::State::Missing.describe()}])
        );
        assert_eq!(
            v["guard"],
            json!({"present": true, "table": true, "plain": true, "owned": false,
                   "orphan": false, "dormant": false, "owner": null,
                   "chains": ["prerouting", "input", "forward"],
                   "rules": ["mesh-host:guard/store/tcp/15432"], "filter": null,
                   "layers": node_firewall::LAYERS_BOTH,
                   "bpf": {"pinned": true, "pins": "/sys/fs/bpf/mesh-host",
                           "program": "mh_guard_v2",
                           "links": ["link-ipv4-input", "link-ipv4-forward", "link-ipv6-input",
                                     "link-ipv6-forward"],
                           "link_ids": [11, 12, 13, 14], "ports": [], "interfaces": [],
                           "nets": [], "kernel": null, "error": null, "held": [11, 12, 13, 14],
                           "attached": true, "held_error": null}})
        );

        let text = render(&st);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "found firewall  iptables-nft");
        assert_eq!(lines[1], "note            ip6tables-legacy: not installed");
        assert_eq!(
            lines[4],
            "  input      ip filter INPUT (iptables-nft)           priority 0     policy drop     \
             4 rules  can drop  [the fake's]"
        );
        assert_eq!(
            lines[7],
            format!(
                "  web/http                 tcp/80 incoming  {}",
                refused_on_eth0().describe()
            )
        );
        assert_eq!(
            lines[8],
            format!(
                "      ip filter INPUT (iptables-nft)           rule {}",
                node_firewall::State::Missing.describe()
            )
        );
        assert!(
            lines[10].starts_with("guard           present, plain table"),
            "{text}"
        );
        assert_eq!(
            lines[11],
            format!("layers          {}", node_firewall::LAYERS_BOTH)
        );
        assert_eq!(
            lines[12],
            "bpf             mh_guard_v2 pinned in /sys/fs/bpf/mesh-host: links \
             link-ipv4-input, link-ipv4-forward, link-ipv6-input, link-ipv6-forward; ports ; \
             interfaces ; private ranges "
        );
        assert_eq!(lines[13], "  mesh-host:guard/store/tcp/15432");
        assert_eq!(lines.len(), 14, "{text}");
    }

    #[test]
    fn status_without_nf_tables_keeps_every_key_a_script_reads() {
        let fake = Recording::default();
        fake.script.borrow_mut().held.refused = Some("EPERM".into());
        let st = read_status(&mut fake.clone(), None).expect("the fake answers");
        let doc = crate::json_contract::document("firewall_status", 0, &st);
        crate::json_contract::check(&doc).unwrap_or_else(|p| panic!("{p:?}\n{doc:#}"));
        let v = serde_json::to_value(&st).unwrap();
        assert_eq!(v["kind"], "none");
        assert_eq!(v["openings"], json!([]));
        let mut keys: Vec<&String> = v["guard"].as_object().unwrap().keys().collect();
        keys.sort();
        assert_eq!(keys, ["bpf", "layers", "note", "present", "table"]);
        assert_eq!(v["guard"]["note"], "the kernel has no nf_tables");
        assert_eq!(v["guard"]["layers"], "guard: no layer in force");
        assert_eq!(v["guard"]["bpf"]["kernel"], "refuses the program: EPERM");
        assert_eq!(v["guard"]["bpf"]["attached"], false);
        let text = render(&st);
        assert!(text.contains("\nguard           absent: "), "{text}");
        assert!(
            text.contains(
                "\nbpf             not attached; this kernel refuses the program: EPERM\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_status_that_cannot_read_the_found_firewall_says_so() {
        let fake = Recording::default();
        fake.script.borrow_mut().fail.push("detected");
        let e = read_status(&mut fake.clone(), None).unwrap_err();
        assert!(
            format!("{e:#}").starts_with("reading the found firewall: "),
            "{e:#}"
        );
    }
}
