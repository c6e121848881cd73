//! `mesh-host firewall explain`: the evaluator's walk of each way one port's connections come,
//! per family and interface, and with `--confirm` the kernel asked in scratch namespaces; a typed
//! answer ([`ExplainStatus`]) printed as JSON or said in words.

use crate::commands::Exit;
use crate::node_firewall::{self, Kernel, NodeFirewallRead};
use anyhow::{Context, Result};
use serde::Serialize;
use std::fmt::Write as _;

/// How `firewall explain` answers: with the kernel asked too, and as JSON.
#[derive(Debug, Clone)]
pub struct Explain {
    pub confirm: bool,
    pub json: bool,
    /// The runtime's bridges the store records ([`super::recorded_bridges`]).
    pub bridges: Vec<String>,
}

/// The exit code of `firewall explain --confirm` when the kernel disagrees with the evaluator.
pub const EXIT_DISAGREES: u8 = crate::apply::DISAGREES;

/// `mesh-host firewall explain`: every problem with the arguments named at once (exit 2), then
/// the walk of each way the connection comes, as text or JSON; exit 0 when every way admits it.
/// With `confirm`, the kernel is asked in scratch namespaces too, its verdict stands, and a
/// disagreement exits [`EXIT_DISAGREES`].
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
        return Ok(Exit::Refused);
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
    let from = from.unwrap_or_else(|| "anywhere".into());
    let v = explain_through(&mut fw, &opening, interface.as_deref(), from, how.confirm)?;
    let code = v.exit_code();
    if json {
        crate::json_contract::print("firewall_explain", code, &v)?;
    } else {
        print!("{}", render_explain(&v));
    }
    Ok(Exit::of(code))
}

/// What `firewall explain` says: each way the connection comes with its parts and how each
/// ends, whether it is admitted and, with `--confirm`, what the kernel said; `--json` prints it
/// as it is (document `firewall_explain`), [`render_explain`] for a person.
#[derive(Debug, Clone, Serialize)]
pub struct ExplainStatus {
    pub port: u16,
    pub proto: &'static str,
    pub path: &'static str,
    pub from: String,
    /// Every way admitted: by the kernel where it was asked, else by the evaluator.
    pub admitted: bool,
    /// With `--confirm`, the evaluator's own answer; `null` without (the document's keys do not
    /// depend on it).
    pub evaluator_admitted: Option<bool>,
    pub confirm: Option<ConfirmStatus>,
    pub ways: Vec<WayStatus>,
}

/// The kernel's answers counted against the evaluator's.
#[derive(Debug, Clone, Serialize)]
pub struct ConfirmStatus {
    pub agrees: bool,
    pub parts_agreeing: usize,
    pub parts_disagreeing: usize,
    pub parts_settled: usize,
    pub parts_unprobed: usize,
    pub namespaces: Vec<String>,
    pub notes: Vec<String>,
    pub not_cloned: &'static [&'static str],
}

/// One way the connection comes: its family, the interface it arrives on and, forwarded, where
/// it goes.
#[derive(Debug, Clone, Serialize)]
pub struct WayStatus {
    pub family: &'static str,
    pub interface: String,
    pub to: Option<String>,
    pub to_port: Option<u16>,
    pub leaves_by: Option<String>,
    pub parts: Vec<WayPart>,
}

/// One part of a way's sources: how it ends, the rule that decides, the walk to it, and the
/// kernel's probe when it was asked.
#[derive(Debug, Clone, Serialize)]
pub struct WayPart {
    pub sources: Vec<String>,
    pub fate: &'static str,
    pub rule: Option<String>,
    pub table: Option<String>,
    pub chain: Option<String>,
    pub handle: Option<u64>,
    pub detail: String,
    pub walk: Vec<String>,
    pub kernel: Option<KernelProbe>,
}

/// What the kernel did with a part's probe, and whether the evaluator said the same.
#[derive(Debug, Clone, Serialize)]
pub struct KernelProbe {
    pub verdict: &'static str,
    pub detail: String,
    pub source: Option<String>,
    pub to: Option<String>,
    pub behind: Option<String>,
    pub agreement: &'static str,
}

impl ExplainStatus {
    /// 0 admitted, 1 not, [`EXIT_DISAGREES`] when the kernel disagrees with the evaluator.
    pub fn exit_code(&self) -> u8 {
        if self.confirm.as_ref().is_some_and(|c| !c.agrees) {
            EXIT_DISAGREES
        } else if self.admitted {
            0
        } else {
            1
        }
    }
}

/// The walk of `opening`'s ways (those arriving on `only_iif`, when given) through `fw`, with
/// the kernel asked too when `confirm`: the kernel's, or the recording fake in unit tests.
pub fn explain_through(
    fw: &mut dyn NodeFirewallRead,
    opening: &node_firewall::Opening,
    only_iif: Option<&str>,
    from: String,
    confirm: bool,
) -> Result<ExplainStatus> {
    let ways = fw
        .explain(opening, only_iif)
        .context("walking the connection through the found firewall")?;
    let evaluated = !ways.is_empty()
        && ways.iter().all(|(_, a)| {
            a.parts
                .iter()
                .all(|p| p.fate == node_firewall::eval::Fate::Admitted)
        });
    let confirmation = if confirm {
        Some(fw.ask_kernel(&ways)?)
    } else {
        None
    };
    let tally = confirmation
        .as_ref()
        .map(|c| node_firewall::confirm::Tally::of(&ways, &c.probes));
    Ok(ExplainStatus {
        port: opening.port,
        proto: opening.proto.as_str(),
        path: opening.path.as_str(),
        from,
        admitted: tally.as_ref().map_or(evaluated, |t| t.kernel_admits),
        evaluator_admitted: tally.as_ref().map(|_| evaluated),
        confirm: confirmation
            .as_ref()
            .zip(tally.as_ref())
            .map(|(c, t)| ConfirmStatus {
                agrees: t.disagreeing == 0,
                parts_agreeing: t.agreeing,
                parts_disagreeing: t.disagreeing,
                parts_settled: t.settled,
                parts_unprobed: t.unprobed,
                namespaces: c.namespaces.clone(),
                notes: c.notes.clone(),
                not_cloned: node_firewall::confirm::NOT_CLONED,
            }),
        ways: ways
            .iter()
            .enumerate()
            .map(|(i, (w, a))| WayStatus {
                family: w.conn.fam.name(),
                interface: w.conn.iif.clone(),
                to: w.conn.daddr.map(|d| d.to_string()),
                to_port: w.conn.to_port,
                leaves_by: w.conn.oif.clone(),
                parts: a
                    .parts
                    .iter()
                    .enumerate()
                    .map(|(j, p)| WayPart {
                        sources: p.sources.cidrs(),
                        fate: p.fate.word(),
                        rule: p.fate.by().map(|b| b.to_string()),
                        table: p.fate.by().map(|b| b.table.clone()),
                        chain: p.fate.by().map(|b| b.chain.clone()),
                        handle: p.fate.by().and_then(|b| b.handle),
                        detail: p.fate.describe(),
                        walk: p.trace.clone(),
                        kernel: confirmation.as_ref().map(|c| &c.probes[i][j]).map(|pr| {
                            KernelProbe {
                                verdict: pr.kernel.word(),
                                detail: pr.kernel.describe(),
                                source: pr.source.map(|a| a.to_string()),
                                to: pr.to.map(|a| a.to_string()),
                                behind: pr.behind.map(|a| a.to_string()),
                                agreement: node_firewall::confirm::agreement(&p.fate, &pr.kernel)
                                    .word(),
                            }
                        }),
                    })
                    .collect(),
            })
            .collect(),
    })
}

fn render_explain(v: &ExplainStatus) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} port {} ({}) from {}",
        v.proto, v.port, v.path, v.from
    );
    if v.ways.is_empty() {
        let _ = writeln!(
            out,
            "  no way to ask about: nothing publishes the port, or no interface arrives here"
        );
    }
    for w in &v.ways {
        let _ = write!(out, "\n{} arriving on {}", w.family, w.interface);
        if let Some(to) = &w.to {
            let _ = write!(out, " to {to}");
        }
        if let Some(p) = w.to_port {
            let _ = write!(out, " port {p}");
        }
        let _ = writeln!(out);
        for p in &w.parts {
            let _ = writeln!(out, "  from {}:", p.sources.join(", "));
            for step in &p.walk {
                let _ = writeln!(out, "    {step}");
            }
            let _ = writeln!(out, "    => {}", p.detail);
            if let Some(k) = &p.kernel {
                let _ = writeln!(out, "    kernel: {}", kernel_line(p.fate, k));
            }
        }
    }
    if let Some(c) = &v.confirm {
        let _ = writeln!(
            out,
            "\nconfirmed by the kernel in scratch namespaces (removed): {} part(s) agree, {} \
             disagree, {} settled where the evaluator was doubtful, {} not probed",
            c.parts_agreeing, c.parts_disagreeing, c.parts_settled, c.parts_unprobed
        );
        if !c.agrees {
            let _ = writeln!(
                out,
                "THE KERNEL DISAGREES WITH THE EVALUATOR: the kernel's verdict stands ({})",
                if v.admitted {
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
/// the evaluator (which said `fate`) said the same.
fn kernel_line(fate: &str, k: &KernelProbe) -> String {
    let mut line = k.detail.clone();
    if let (Some(src), Some(to)) = (&k.source, &k.to) {
        line.push_str(&format!(" from {src} to {to}"));
    }
    if let Some(b) = &k.behind {
        line.push_str(&format!(" (forwarded to {b})"));
    }
    match k.agreement {
        "agrees" => line.push_str(&format!(": agrees with the evaluator ({fate})")),
        "disagrees" => line.push_str(&format!(
            ": DISAGREES with the evaluator, which says {fate}; the kernel's verdict stands"
        )),
        "settled" => line.push_str(": settles what the evaluator could not tell"),
        _ => {}
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node_firewall::fake::Recording;
    use serde_json::json;

    #[test]
    fn a_probe_is_rendered_with_both_verdicts_where_they_differ() {
        let probe = |verdict: &'static str, detail: &str, agreement: &'static str| KernelProbe {
            verdict,
            detail: detail.into(),
            source: Some("1.0.0.1".into()),
            to: Some("192.0.2.10:9000".into()),
            behind: None,
            agreement,
        };
        assert_eq!(
            super::kernel_line("admitted", &probe("timed-out", "timed out", "disagrees")),
            "timed out from 1.0.0.1 to 192.0.2.10:9000: DISAGREES with the evaluator, which \
             says admitted; the kernel's verdict stands"
        );
        assert_eq!(
            super::kernel_line("refused", &probe("refused", "refused (reset)", "agrees")),
            "refused (reset) from 1.0.0.1 to 192.0.2.10:9000: agrees with the evaluator (refused)"
        );
    }

    /// `firewall explain` of tcp port 80 from anywhere through a fake whose evaluator admits it on
    /// eth0 in both families, the kernel asked when `kernel` is given.
    fn explained(
        only_iif: Option<&str>,
        kernel: Option<Vec<crate::node_firewall::fake::Probed>>,
    ) -> (ExplainStatus, Recording) {
        use crate::node_firewall::eval::Fam;
        use crate::node_firewall::fake::admitted_way;
        let fake = Recording::default();
        {
            let mut s = fake.script.borrow_mut();
            s.answers.insert(
                "explain".into(),
                vec![
                    admitted_way(Fam::V4, 80, "eth0"),
                    admitted_way(Fam::V6, 80, "eth0"),
                ],
            );
            s.kernel = kernel.clone().unwrap_or_default();
        }
        let opening = node_firewall::Opening {
            id: "explain".into(),
            port: 80,
            proto: node_firewall::Proto::Tcp,
            from: node_firewall::opening::From::Anywhere,
            path: node_firewall::opening::Path::Incoming,
        };
        let v = explain_through(
            &mut fake.clone(),
            &opening,
            only_iif,
            "anywhere".into(),
            kernel.is_some(),
        )
        .expect("the fake answers");
        let doc = crate::json_contract::document("firewall_explain", v.exit_code(), &v);
        crate::json_contract::check(&doc).unwrap_or_else(|p| panic!("{p:?}\n{doc:#}"));
        (v, fake)
    }

    #[test]
    fn explain_through_the_fake_walks_each_way_and_exits_by_the_evaluator() {
        let (v, fake) = explained(None, None);
        assert_eq!(fake.methods(), ["explain"]);
        assert_eq!(
            (v.admitted, v.evaluator_admitted, v.exit_code()),
            (true, None, 0)
        );
        let j = serde_json::to_value(&v).unwrap();
        assert_eq!(j["confirm"], serde_json::Value::Null);
        assert_eq!(
            j["ways"][0],
            json!({"family": "ipv4", "interface": "eth0", "to": null, "to_port": null,
                   "leaves_by": null,
                   "parts": [{"sources": ["0.0.0.0/0"], "fate": "admitted", "rule": null,
                              "table": null, "chain": null, "handle": null,
                              "detail": "admitted", "walk": ["ipv4 filter INPUT: policy accept"],
                              "kernel": null}]})
        );
        assert_eq!(
            render_explain(&v),
            "tcp port 80 (incoming) from anywhere\n\
             \nipv4 arriving on eth0\n\
             \x20 from 0.0.0.0/0:\n\
             \x20   ipv4 filter INPUT: policy accept\n\
             \x20   => admitted\n\
             \nipv6 arriving on eth0\n\
             \x20 from ::/0:\n\
             \x20   ipv6 filter INPUT: policy accept\n\
             \x20   => admitted\n"
        );

        let (none, _) = explained(Some("mesh0"), None);
        assert!(none.ways.is_empty());
        assert_eq!((none.admitted, none.exit_code()), (false, 1));
        assert_eq!(
            render_explain(&none),
            "tcp port 80 (incoming) from anywhere\n  no way to ask about: nothing publishes the \
             port, or no interface arrives here\n"
        );
    }

    #[test]
    fn explain_confirmed_by_the_fake_kernel_lets_the_kernel_s_verdict_stand() {
        use crate::node_firewall::fake::Probed;
        let (v, fake) = explained(None, Some(vec![Probed::TimedOut, Probed::Connected]));
        assert_eq!(fake.methods(), ["explain", "ask_kernel"]);
        assert_eq!(
            (v.admitted, v.evaluator_admitted, v.exit_code()),
            (false, Some(true), EXIT_DISAGREES)
        );
        let c = v.confirm.as_ref().expect("the kernel was asked");
        assert_eq!(
            (c.agrees, c.parts_agreeing, c.parts_disagreeing),
            (false, 1, 1)
        );
        assert_eq!(c.namespaces, ["mesh-confirm-fake"]);
        let k = v.ways[0].parts[0].kernel.as_ref().expect("a probe");
        assert_eq!((k.verdict, k.agreement), ("timed-out", "disagrees"));
        let text = render_explain(&v);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[6],
            format!("    kernel: {}", kernel_line("admitted", k)),
            "{text}"
        );
        assert_eq!(
            lines[lines.len() - 2],
            "confirmed by the kernel in scratch namespaces (removed): 1 part(s) agree, 1 \
             disagree, 0 settled where the evaluator was doubtful, 0 not probed"
        );
        assert_eq!(
            lines[lines.len() - 1],
            "THE KERNEL DISAGREES WITH THE EVALUATOR: the kernel's verdict stands (not admitted)"
        );
    }
}
