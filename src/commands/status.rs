//! `mesh-host firewall status`: the found firewall's kind and layers with their evidence, every
//! declared opening with present or missing per layer, and the guard's state.

use crate::commands::Exit;
use crate::declaration::openings::to_opening;
use crate::declaration::Resource;
use crate::node_firewall::open_found;
use crate::store::State;
use anyhow::{Context, Result};
use serde_json::{json, Value};
use std::fmt::Write as _;

/// Reads the firewall as it is now, against the stored declaration's openings; the guard's BPF
/// layer is read from its pins under `root`.
pub fn firewall_status(root: &std::path::Path, state: Option<&State>) -> Result<Value> {
    // The firewall's programs get the stored declaration's deadlines, as they do in an apply.
    let deadlines = state
        .and_then(|s| s.settings.as_ref())
        .and_then(|s| s.deadlines)
        .unwrap_or_default();
    let mut fw = open_found(deadlines)?;
    fw.set_runtime_bridges(&recorded_bridges(state));
    let found = fw.found().context("reading the found firewall")?.clone();
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
    let guard = match fw.socket() {
        Some(sock) => {
            let g = firewall::guard::status(sock).context("reading the guard")?;
            json!({"present": g.present, "table": g.table, "plain": g.plain, "owned": g.owned,
                   "orphan": g.orphan, "dormant": g.dormant, "owner": g.owner,
                   "chains": g.chains, "rules": g.rules, "filter": filter_json(&g.others)})
        }
        None => json!({"present": false, "table": false, "note": "the kernel has no nf_tables"}),
    };
    let guard = with_bpf(guard, root);
    Ok(json!({
        "kind": found.kind(),
        "refusal": found.refusal,
        "notes": found.notes,
        "layers": found.layers.iter().map(|l| json!({
            "layer": l.describe(),
            "backend": l.backend.as_str(),
            "hook": l.hook_name(),
            "path": l.paths(),
            "device": l.device,
            "unwritable": l.unwritable,
            "family": l.family.to_string(),
            "table": l.table,
            "chain": l.chain,
            "priority": l.priority,
            "policy": format!("{:?}", l.policy).to_lowercase(),
            "rules": l.rules,
            "can_drop": l.can_drop,
            "evidence": l.evidence,
        })).collect::<Vec<_>>(),
        "openings": openings.iter().map(|o| json!({
            "id": o.id,
            "port": o.port,
            "proto": o.proto.as_str(),
            "path": o.path.as_str(),
            "verdict": verdicts.get(&o.id).map(verdict_json),
            "layers": presence.get(&o.id).map(|ps| ps.iter().map(|p| json!({
                "layer": p.layer.to_string(),
                "chain": p.chain,
                "present": p.present(),
                "state": state_name(&p.state),
                "detail": p.state.describe(),
            })).collect::<Vec<_>>()).unwrap_or_default(),
        })).collect::<Vec<_>>(),
        "guard": guard,
    }))
}

/// An opening's verdict for scripts: its state, the sentence a person reads, the summary they
/// are said from (each way the parts end: the interfaces with their families, the sources when
/// not every source, the rule), and the parts of its sources with how each ends and the rule
/// that decides.
pub fn verdict_json(v: &firewall::eval::Verdict) -> Value {
    let s = v.summary();
    json!({
        "state": s.state,
        "detail": s.text,
        "summary": s.clauses.iter().map(|c| json!({
            "fate": c.fate.word(),
            "on": c.on.iter().map(|(iif, fams)| json!({
                "interface": iif,
                "families": fams.iter().map(|f| f.name()).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "sources": c.from.as_ref().map(|a| a.cidrs()),
            "everywhere": c.everywhere,
            "rule": c.fate.by().map(|b| b.to_string()),
        })).collect::<Vec<_>>(),
        "parts": v.parts.iter().map(|p| json!({
            "family": p.fam.name(),
            "interface": p.iif,
            "sources": p.sources.cidrs(),
            "fate": p.fate.word(),
            "rule": p.fate.by().map(|b| b.to_string()),
            "detail": p.fate.describe(),
        })).collect::<Vec<_>>(),
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
) -> Result<Exit> {
    let json = how.json;
    let mut problems = Vec::new();
    if port == 0 {
        problems.push("port: must be 1 to 65535".to_string());
    }
    let proto = match proto {
        "tcp" => Some(firewall::Proto::Tcp),
        "udp" => Some(firewall::Proto::Udp),
        other => {
            problems.push(format!("--proto: {other:?} is not tcp or udp"));
            None
        }
    };
    let path = match path {
        "incoming" => Some(firewall::Path::Incoming),
        "forwarded" => Some(firewall::Path::Forwarded),
        other => {
            problems.push(format!("--path: {other:?} is not incoming or forwarded"));
            None
        }
    };
    let networks = match &from {
        None => None,
        Some(f) => match crate::declaration::validate::parse_cidr(f, true) {
            Ok((addr, len)) => Some(vec![firewall::Network { addr, len }]),
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
    if how.confirm && proto == Some(firewall::Proto::Udp) {
        problems.push("--confirm: only tcp is confirmed (the kernel is asked with a SYN)".into());
    }
    let (Some(proto), Some(path), true) = (proto, path, problems.is_empty()) else {
        for p in &problems {
            eprintln!("error: {p}");
        }
        eprintln!("nothing was read or changed");
        return Ok(Exit::Refused);
    };
    let opening = firewall::Opening {
        id: "explain".into(),
        port,
        proto,
        from: match (networks, &interface) {
            (Some(n), _) => firewall::opening::From::Networks(n),
            (None, Some(i)) => firewall::opening::From::Interface(i.clone()),
            (None, None) => firewall::opening::From::Anywhere,
        },
        path,
    };
    let mut fw = open_found(Default::default())?;
    fw.set_runtime_bridges(&how.bridges);
    let ways = fw
        .explain(&opening, interface.as_deref())
        .context("walking the connection through the found firewall")?;
    let evaluated = !ways.is_empty()
        && ways.iter().all(|(_, a)| {
            a.parts
                .iter()
                .all(|p| p.fate == firewall::eval::Fate::Admitted)
        });
    let confirmation = if how.confirm {
        let runner = run::Deadlined {
            runner: &run::SystemRunner,
            deadlines: Default::default(),
        };
        Some(
            firewall::confirm::on_node(&runner, &ways, firewall::confirm::BUDGET)
                .context("asking the kernel in scratch network namespaces")?,
        )
    } else {
        None
    };
    let mut v = explain_json(&ways, confirmation.as_ref());
    let tally = confirmation
        .as_ref()
        .map(|c| firewall::confirm::Tally::of(&ways, &c.probes));
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
            "not_cloned": firewall::confirm::NOT_CLONED,
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
    Ok(Exit::of(code))
}

/// The ways and their parts for scripts, each part with the kernel's probe when it was asked.
fn explain_json(
    ways: &[(firewall::eval::Way, firewall::eval::Answer)],
    confirmation: Option<&firewall::confirm::Confirmation>,
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
                        "agreement": firewall::confirm::agreement(&p.fate, &pr.kernel).word(),
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

/// The derived filter's chains in the mesh's table, from the table's other chains: `null` when
/// neither is there.
fn filter_json(others: &[(String, usize)]) -> Value {
    let chains: Vec<&(String, usize)> = others
        .iter()
        .filter(|(n, _)| n == firewall::filter::INPUT_CHAIN || n == firewall::filter::FORWARD_CHAIN)
        .collect();
    if chains.is_empty() {
        return Value::Null;
    }
    json!({
        "chains": chains.iter().map(|(n, _)| n).collect::<Vec<_>>(),
        "rules": chains.iter().map(|(_, r)| r).sum::<usize>(),
    })
}

/// The guard's JSON with its BPF layer and the layers that stand, named as the briefing names
/// them, all from what the kernel holds: the guard's rules in the table, this namespace's guard
/// links attached (found by the kernel, pinned here or not), the derived filter's chains.
fn with_bpf(mut guard: Value, root: &std::path::Path) -> Value {
    let pins = firewall::bpf::Pins::under(root);
    let survey = firewall::bpf::survey(&pins);
    let held = survey.as_ref().map(|(links, _)| links);
    let links: &[firewall::bpf::LinkInfo] = held.as_deref().map(Vec::as_slice).unwrap_or_default();
    let held_ids: Vec<u32> = links.iter().map(|l| l.id).collect();
    // Standing: a link of this namespace's guard attached at each of the four hooks.
    let stands = firewall::bpf::HOOKS
        .iter()
        .all(|(pf, hook, _)| links.iter().any(|l| l.pf == *pf && l.hooknum == *hook));
    let mut bpf = match firewall::bpf::status(&pins) {
        Ok(st) => {
            let pinned = st.holds();
            // Not standing: whether this kernel would take the program at all (what loading it
            // for the survey said).
            let kernel = match (&survey, stands) {
                (_, true) => Value::Null,
                (Ok((_, Some(e))), false) => json!(format!("refuses the program: {e}")),
                (Ok((_, None)), false) => json!("takes the program"),
                (Err(_), false) => match firewall::bpf::supported() {
                    Ok(()) => json!("takes the program"),
                    Err(e) => json!(format!("refuses the program: {e}")),
                },
            };
            json!({"pinned": pinned, "pins": pins.dir, "program": st.program,
                   "links": st.links, "link_ids": st.link_ids,
                   "ports": st.contents.ports, "interfaces": st.contents.ifaces,
                   "nets": st.contents.nets, "kernel": kernel, "error": null})
        }
        // The same keys as a layer read, empty: a script finds every key in every case.
        Err(e) => json!({"pinned": false, "pins": pins.dir, "program": null, "links": [],
                         "link_ids": [], "ports": [], "interfaces": [], "nets": [],
                         "kernel": null, "error": e.to_string()}),
    };
    bpf["held"] = json!(held_ids);
    bpf["attached"] = json!(stands);
    bpf["held_error"] = match &held {
        Err(e) => json!(e.to_string()),
        Ok(_) => Value::Null,
    };
    let filter = !guard["filter"].is_null();
    guard["layers"] = json!(layers_named(guard["present"] == true, stands, filter));
    guard["bpf"] = bpf;
    guard
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
fn state_name(s: &firewall::State) -> &'static str {
    match s {
        firewall::State::NotNeeded(_) => "not-needed",
        firewall::State::Present => "present",
        firewall::State::Missing => "missing",
        firewall::State::Refused(_) => "refused",
        firewall::State::Unwritable(_) => "unwritable",
        firewall::State::Doubtful(_) => "doubtful",
        firewall::State::Bypass(_) => "not-admitted",
    }
}

/// The same, as a person reads it.
pub fn render(v: &Value) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "found firewall  {}", v["kind"].as_str().unwrap_or("?"));
    if let Some(r) = v["refusal"].as_str() {
        let _ = writeln!(out, "refused         {r}");
    }
    for n in v["notes"].as_array().into_iter().flatten() {
        let _ = writeln!(out, "note            {}", n.as_str().unwrap_or(""));
    }
    let _ = writeln!(out, "\nlayers");
    for l in v["layers"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "  {:<10} {:<40} priority {:<5} policy {:<6} {:>3} rules  {}  [{}]",
            l["hook"].as_str().unwrap_or(""),
            l["layer"].as_str().unwrap_or(""),
            l["priority"],
            l["policy"].as_str().unwrap_or(""),
            l["rules"],
            if l["can_drop"] == true {
                "can drop"
            } else {
                "passes  "
            },
            l["evidence"].as_str().unwrap_or("")
        );
    }
    let _ = writeln!(out, "\nopenings");
    for o in v["openings"].as_array().into_iter().flatten() {
        let _ = write!(
            out,
            "  {:<24} {}/{} {:<9}",
            o["id"].as_str().unwrap_or(""),
            o["proto"].as_str().unwrap_or(""),
            o["port"],
            o["path"].as_str().unwrap_or("")
        );
        let layers = o["layers"].as_array().cloned().unwrap_or_default();
        let _ = write!(
            out,
            " {}",
            o["verdict"]["detail"].as_str().unwrap_or("no verdict")
        );
        let _ = writeln!(out);
        for l in layers {
            let state = l["state"].as_str().unwrap_or("");
            let shown = match state {
                "present" => "rule present".to_string(),
                "not-needed" => l["detail"].as_str().unwrap_or("").to_string(),
                _ => format!("rule {}", l["detail"].as_str().unwrap_or("")),
            };
            let _ = writeln!(
                out,
                "      {:<40} {shown}",
                l["layer"].as_str().unwrap_or("")
            );
        }
    }
    let g = &v["guard"];
    let state = guard_state(g);
    let _ = writeln!(out, "\nguard           {state}");
    let _ = writeln!(
        out,
        "layers          {}",
        g["layers"].as_str().unwrap_or("")
    );
    let b = &g["bpf"];
    if b["pinned"] == true {
        let list = |k: &str| -> String {
            b[k].as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = writeln!(
            out,
            "bpf             {} pinned in {}: links {}; ports {}; interfaces {}; private ranges {}",
            b["program"].as_str().unwrap_or(""),
            b["pins"].as_str().unwrap_or(""),
            list("links"),
            list("ports"),
            list("interfaces"),
            list("nets")
        );
    } else if b["attached"] == true {
        let held: Vec<String> = b["held"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|v| v.to_string())
            .collect();
        let _ = writeln!(
            out,
            "bpf             attached but not pinned in {}: links {} held by the kernel; the next \
             apply or reconcile pins them again",
            b["pins"].as_str().unwrap_or(""),
            held.join(", ")
        );
    } else if let Some(k) = b["kernel"].as_str() {
        let _ = writeln!(out, "bpf             not attached; this kernel {k}");
    }
    for r in g["rules"].as_array().into_iter().flatten() {
        let _ = writeln!(out, "  {}", r.as_str().unwrap_or(""));
    }
    out
}

/// The guard's table as a person reads it: whether the guard's rules stand in it, what it is,
/// and what a save, a reload and a flush do to it.
fn guard_state(g: &Value) -> String {
    if g["present"] != true && g["table"] != true {
        return "absent: nothing applied yet, or a flush of the ruleset removed it; the next apply \
                or reconcile puts it back"
            .into();
    }
    let flags = if g["owned"] == true {
        Some(format!(
            "held by netlink port {} with the owner flag (an earlier version's holder): a ruleset \
             saved now does not load again until it lets go",
            g["owner"]
        ))
    } else if g["orphan"] == true {
        Some(
            "an orphaned persist table of an earlier version: nft cannot load a ruleset saved \
             with it; the next apply or reconcile replaces it with a plain table"
                .to_string(),
        )
    } else if g["dormant"] == true {
        Some("dormant, so not in force; the next apply or reconcile replaces it".to_string())
    } else {
        None
    };
    if g["present"] == true {
        return match flags {
            Some(f) => format!("present, {f}"),
            None => "present, plain table: a saved ruleset carries it and restores it; a flush of \
                     the ruleset removes it until the next apply or reconcile"
                .into(),
        };
    }
    let holds = if g["filter"].is_null() {
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
    use serde_json::json;

    #[test]
    fn a_verdict_s_json_says_its_state_words_and_summary_from_one_summary() {
        use firewall::eval::{Addrs, Decider, Fam, Fate, Part, Refusal, Verdict};
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
        let j = super::verdict_json(&v);
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

    #[test]
    fn the_guard_is_rendered_by_its_table() {
        let render = |g: serde_json::Value| super::guard_state(&g);
        assert!(render(json!({"present": false})).starts_with("absent"));
        assert!(render(json!({"present": true, "plain": true})).starts_with("present, plain table"));
        assert!(render(json!({"present": true, "owned": true, "owner": 7}))
            .starts_with("present, held by netlink port 7"));
        assert!(render(json!({"present": true, "orphan": true})).contains("orphaned"));
        assert!(render(json!({"present": true, "dormant": true})).contains("dormant"));
        // The table's name alone is no guard: after converge it holds only the derived filter.
        let converged = render(json!({"present": false, "table": true, "plain": true,
                                      "filter": {"chains": ["input", "forward"], "rules": 9}}));
        assert_eq!(
            converged,
            "no guard: table inet mesh_host holds only the derived filter (chains input and \
             forward), as on a converged node"
        );
        assert!(!converged.contains("present"));
        assert_eq!(
            render(json!({"present": false, "table": true, "dormant": true})),
            "no guard: table inet mesh_host holds no guard rules; it is dormant, so not in force; \
             the next apply or reconcile replaces it"
        );
    }
}
