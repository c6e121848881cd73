//! The kernel asked on every ruleset of the corpus (issue 30, point 5): after the apply, the
//! built binary runs `firewall explain PORT --confirm --json` on the lab node for each declared
//! opening's port and for the port no opening names, as an operator would. The command clones
//! the ruleset as it then stands (the openings written) into scratch namespaces of its own and
//! sends a real SYN per part of the evaluator's answer; every part must agree, no scratch
//! namespace may be left behind, and a part the evaluator found doubtful is counted apart, not
//! as an agreement (settled by the kernel: allowed only where the fixture says why the evaluator
//! cannot decide).

use std::path::Path;
use std::time::{Duration, Instant};

use lab::Machine;
use serde_json::Value;

use super::mesh;

/// Where `ip netns add` names a namespace.
const NETNS_DIR: &str = "/var/run/netns";

/// The documented exit code of a disagreement (docs/operator.md, `--help`).
const EXIT_DISAGREES: i32 = 7;

/// One part of one way of a confirmation, as the document says it.
#[derive(Debug, Clone)]
pub(super) struct Part {
    /// `ipv4 on eth0`.
    pub way: String,
    /// The part's sources, the first two CIDRs.
    pub sources: String,
    /// The evaluator's fate.
    pub fate: String,
    /// The kernel's verdict: `connected`, `refused`, `timed-out`, `unprobed`.
    pub kernel: String,
    /// Why the kernel's verdict is what it is (for an unprobed part: why no probe was sent).
    pub detail: String,
    /// `agrees`, `disagrees`, `settled`, `unprobed`.
    pub agreement: String,
    /// Where the probe came from and went (`SOURCE -> TO`, `behind HOST`).
    pub probe: String,
}

/// One `firewall explain PORT --confirm --json` on the node.
#[derive(Debug, Clone)]
pub(super) struct Confirmed {
    pub port: u16,
    pub path: &'static str,
    /// The exit code, or why the document could not be read.
    pub outcome: Result<(Option<i32>, Vec<Part>), String>,
    /// The document's own `confirm.agrees`.
    pub agrees: bool,
    /// Scratch namespaces the command named that still exist after it.
    pub left: Vec<String>,
    /// The confirmation's notes (what it did not recreate).
    pub notes: Vec<String>,
    /// How long the command took.
    pub took: Duration,
}

impl Confirmed {
    /// The parts, none when the command failed.
    pub fn parts(&self) -> &[Part] {
        match &self.outcome {
            Ok((_, p)) => p,
            Err(_) => &[],
        }
    }

    /// Counts: (agrees, disagrees, settled, unprobed).
    pub fn tally(&self) -> [usize; 4] {
        let mut t = [0; 4];
        for p in self.parts() {
            let k = match p.agreement.as_str() {
                "agrees" => 0,
                "disagrees" => 1,
                "settled" => 2,
                _ => 3,
            };
            t[k] += 1;
        }
        t
    }
}

/// Confirms each `(port, path)` at once, each in its own process and scratch namespaces.
pub(super) fn confirm_all(
    node: &Machine,
    root: &Path,
    wrap: &[String],
    ports: &[(u16, &'static str)],
) -> Vec<Confirmed> {
    std::thread::scope(|s| {
        let handles: Vec<_> = ports
            .iter()
            .map(|&(port, path)| s.spawn(move || confirm(node, root, wrap, port, path)))
            .collect();
        handles
            .into_iter()
            .zip(ports)
            .map(|(h, &(port, path))| {
                h.join().unwrap_or_else(|_| Confirmed {
                    port,
                    path,
                    outcome: Err("the confirmation's thread panicked".into()),
                    agrees: false,
                    left: Vec::new(),
                    notes: Vec::new(),
                    took: Duration::ZERO,
                })
            })
            .collect()
    })
}

fn confirm(
    node: &Machine,
    root: &Path,
    wrap: &[String],
    port: u16,
    path: &'static str,
) -> Confirmed {
    let p = port.to_string();
    let started = Instant::now();
    let out = mesh(
        node,
        root,
        wrap,
        &[
            "firewall",
            "explain",
            &p,
            "--path",
            path,
            "--confirm",
            "--json",
        ],
    );
    let mut c = Confirmed {
        port,
        path,
        outcome: Err(String::new()),
        agrees: false,
        left: Vec::new(),
        notes: Vec::new(),
        took: started.elapsed(),
    };
    let v: Value = match serde_json::from_str(&out.stdout) {
        Ok(v) => v,
        Err(e) => {
            c.outcome = Err(format!(
                "printed no JSON ({e}), exit {}: {}",
                out.status,
                out.stderr.trim()
            ));
            return c;
        }
    };
    if let Err(problems) = mesh_host::json_contract::check(&v) {
        c.outcome = Err(format!(
            "the report breaks the JSON contract: {}",
            problems.join("; ")
        ));
        return c;
    }
    c.agrees = v["confirm"]["agrees"] == true;
    c.notes = v["confirm"]["notes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect();
    c.left = v["confirm"]["namespaces"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter(|n| Path::new(NETNS_DIR).join(n).exists())
        .map(str::to_owned)
        .collect();
    if v["confirm"]["namespaces"]
        .as_array()
        .is_none_or(|a| a.is_empty())
    {
        c.outcome = Err(format!("the confirmation named no scratch namespace: {v}"));
        return c;
    }
    c.outcome = Ok((out.status.code(), parts(&v)));
    c
}

/// Each part of each way.
fn parts(v: &Value) -> Vec<Part> {
    let mut out = Vec::new();
    for w in v["ways"].as_array().into_iter().flatten() {
        let way = format!(
            "{} on {}",
            w["family"].as_str().unwrap_or("?"),
            w["interface"].as_str().unwrap_or("?")
        );
        for p in w["parts"].as_array().into_iter().flatten() {
            let sources: Vec<&str> = p["sources"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .take(2)
                .collect();
            let word = |v: &Value| v.as_str().unwrap_or("none").to_owned();
            out.push(Part {
                way: way.clone(),
                sources: sources.join(","),
                fate: word(&p["fate"]),
                kernel: word(&p["kernel"]["verdict"]),
                detail: word(&p["kernel"]["detail"]),
                agreement: word(&p["kernel"]["agreement"]),
                probe: format!(
                    "{} -> {}{}",
                    word(&p["kernel"]["source"]),
                    word(&p["kernel"]["to"]),
                    p["kernel"]["behind"]
                        .as_str()
                        .map(|b| format!(", behind {b}"))
                        .unwrap_or_default()
                ),
            });
        }
    }
    out
}

/// What is wrong with one confirmation on a fixture, one line each: a disagreement, a doubtful
/// part on a fixture that does not say why the evaluator cannot decide, a part no probe was sent
/// for where one could have been, a namespace left behind, an exit code that says otherwise than
/// the parts, or a command that failed.
pub(super) fn problems(c: &Confirmed, known_gap: bool) -> Vec<String> {
    let mut out = Vec::new();
    let head = format!("firewall explain {} --path {} --confirm", c.port, c.path);
    let (code, parts) = match &c.outcome {
        Ok((code, parts)) => (*code, parts),
        Err(e) => return vec![format!("{head}: {e}")],
    };
    for n in &c.left {
        out.push(format!("{head}: the scratch namespace {n} was left behind"));
    }
    let [_, disagree, _, _] = c.tally();
    if (disagree > 0) != (code == Some(EXIT_DISAGREES)) || (disagree > 0) == c.agrees {
        out.push(format!(
            "{head}: exit {code:?} and confirm.agrees {} say otherwise than its parts \
             ({disagree} disagreeing)",
            c.agrees
        ));
    }
    if !matches!(code, Some(0 | 1 | EXIT_DISAGREES)) {
        out.push(format!("{head}: exit {code:?}"));
    }
    if parts.is_empty() {
        out.push(format!("{head}: no part in the answer"));
    }
    for p in parts {
        let said = format!(
            "{head}: {} from {}: the evaluator says {}, the kernel {} ({}; probe {})",
            p.way, p.sources, p.fate, p.kernel, p.detail, p.probe
        );
        match p.agreement.as_str() {
            "agrees" => {}
            "settled" if known_gap => {}
            "settled" => out.push(format!(
                "{said}: doubtful where the fixture names no known gap"
            )),
            "unprobed" if unprobable(&p.detail) => {}
            _ => out.push(format!("{said}: {}", p.agreement)),
        }
    }
    if !out.is_empty() && !c.notes.is_empty() {
        out.push(format!("{head}: its notes: {}", c.notes.join("; ")));
    }
    out
}

/// Whether an unprobed part's reason is one the confirmation documents as not probed: an
/// interface with no address of the family, a forwarded hairpin, or a part whose only sources
/// are the node's or the host behind's own addresses (Docker's hairpin rule gives the
/// container's address a part of its own).
fn unprobable(detail: &str) -> bool {
    detail.contains("address to send to")
        || detail.contains("(a hairpin)")
        || detail.contains("to send from but this machine's or a host behind's own")
}
