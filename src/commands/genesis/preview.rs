//! `mesh-host genesis --preview`: what genesis would do, changing nothing. For a converged raise
//! the derived filter it would load (ssh's ports, from where, the openings) and what it does to
//! every listener on the machine, beside where the found firewall lets it be reached from now:
//! kept, narrowed to where the filter admits it, opened (closed now, admitted after), or closed.

use crate::apply::{ApplyError, Host};
use crate::declaration::{Declaration, Mode, Settings};
use crate::node_firewall::opening::{From, Opening, Path};
use crate::node_firewall::spec::filter_spec;
use genesis::checks::{Listener, Machine};
use serde::Serialize;
use std::fmt::Write as _;
use std::net::IpAddr;

/// What genesis would do.
#[derive(Serialize, Debug, Clone)]
pub struct Preview {
    pub node: String,
    pub mode: &'static str,
    /// Why genesis would refuse; empty when it would raise the node.
    pub refused: Vec<String>,
    /// The derived filter a converged raise loads before anything else (none on an adopted one).
    pub filter: Option<Filter>,
    /// What the foundation's apply would do, resource by resource: the document's plan keys
    /// ([`Preview::document`]).
    #[serde(skip)]
    pub apply: Option<crate::apply::plan::Plan>,
}

/// The derived filter as genesis would load it.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    /// ssh's ports, admitted over the private network's interface and from `ssh_from`.
    pub ssh: Vec<u16>,
    pub private_interface: Option<String>,
    /// Where the ssh sessions open now come from: admitted to ssh's ports.
    pub ssh_from: Vec<IpAddr>,
    /// Each declared opening, in words.
    pub openings: Vec<String>,
    /// What the filter does to each listener on the machine.
    pub listeners: Vec<Fate>,
}

/// What the filter does to one listener.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct Fate {
    pub listener: String,
    /// `kept` (reached as now), `narrowed` (reached only from where it says), `opens` (the
    /// found firewall closes it now; the filter admits it), `closed`.
    pub fate: &'static str,
    pub why: String,
}

/// The preview of raising `decl` on the machine `m` read: the filter derived as the raise would
/// derive it, with ssh's ports `ssh` and the operator's addresses `ssh_from`.
pub(super) fn of(
    host: &Host<'_>,
    decl: &Declaration,
    settings: &Settings,
    m: &Machine,
    ssh: &[u16],
    ssh_from: &[IpAddr],
    refused: Vec<String>,
) -> Result<Preview, ApplyError> {
    let filter = match decl.mode {
        Mode::Adopted => None,
        Mode::Converged => {
            let mut fw = (host.firewall)(host.root, decl);
            let spec = filter_spec(&mut *fw, host.runner, decl, Some(settings), ssh, ssh_from)
                .map_err(ApplyError::firewall)?;
            let private = spec.private.clone();
            let now = reached_now(&mut *fw, &m.listeners);
            Some(Filter {
                listeners: m
                    .listeners
                    .iter()
                    .map(|l| {
                        let now = now.get(&now_id(l)).map(String::as_str);
                        fate(l, &spec.openings, ssh, private.as_deref(), ssh_from, now)
                    })
                    .collect(),
                openings: spec.openings.iter().map(opening_words).collect(),
                ssh: ssh.to_vec(),
                private_interface: private,
                ssh_from: ssh_from.to_vec(),
            })
        }
    };
    Ok(Preview {
        node: decl.node.clone(),
        mode: decl.mode.as_str(),
        refused,
        filter,
        apply: None,
    })
}

/// The key of a listener's answer in [`reached_now`].
fn now_id(l: &Listener) -> String {
    format!("now/{}/{}/{}", l.proto, l.addr, l.port)
}

/// Where each listener is reached from now, as the evaluator walks a new connection from
/// anywhere through the found firewall (`converge --preview`'s words: `anywhere`, `nowhere`,
/// `anywhere except …`); a firewall that cannot be read answers nothing, and each fate is then
/// said from the filter alone.
fn reached_now(
    fw: &mut dyn crate::node_firewall::NodeFirewall,
    listeners: &[Listener],
) -> std::collections::BTreeMap<String, String> {
    let asked: Vec<Opening> = listeners
        .iter()
        .filter(|l| !l.addr.is_loopback())
        .map(|l| Opening {
            id: now_id(l),
            port: l.port,
            proto: l.proto,
            from: From::Anywhere,
            path: Path::Incoming,
        })
        .collect();
    match fw.verdicts(&asked) {
        Ok(v) => v
            .iter()
            .map(|(id, v)| (id.clone(), crate::commands::converge::reached_from(v)))
            .collect(),
        Err(e) => {
            tracing::warn!(error = %e, "the found firewall could not be walked for the listeners");
            Default::default()
        }
    }
}

fn from_words(from: &From) -> String {
    match from {
        From::Anywhere => "anywhere".into(),
        From::Interface(i) => format!("interface {i}"),
        From::Networks(n) => n
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", "),
    }
}

fn opening_words(o: &Opening) -> String {
    format!(
        "{} {}/{} from {}{}",
        o.id,
        o.proto,
        o.port,
        from_words(&o.from),
        if o.path == Path::Forwarded {
            " (to a container)"
        } else {
            ""
        }
    )
}

fn listener_words(l: &Listener) -> String {
    let addr = match l.addr {
        IpAddr::V6(a) => format!("[{a}]"),
        IpAddr::V4(a) => a.to_string(),
    };
    let owner = match (&l.process, l.pid) {
        (Some(p), Some(pid)) => format!(" ({p}, pid {pid})"),
        (None, Some(pid)) => format!(" (pid {pid})"),
        _ => String::new(),
    };
    format!("{} {addr}:{}{owner}", l.proto, l.port)
}

/// ssh's admission in words: over the private interface and from the operator's addresses.
fn ssh_words(private: Option<&str>, ssh_from: &[IpAddr]) -> String {
    let mut parts: Vec<String> = private.map(|i| format!("over {i}")).into_iter().collect();
    if !ssh_from.is_empty() {
        parts.push(format!(
            "from {} (the ssh sessions open now)",
            ssh_from
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    parts.join(" and ")
}

/// What the filter does to listener `l`, beside where it is reached from `now` (`None`: not
/// known).
fn fate(
    l: &Listener,
    openings: &[Opening],
    ssh: &[u16],
    private: Option<&str>,
    ssh_from: &[IpAddr],
    now: Option<&str>,
) -> Fate {
    let listener = listener_words(l);
    if l.addr.is_loopback() {
        return Fate {
            listener,
            fate: "kept",
            why: "on loopback, which the filter admits".into(),
        };
    }
    if l.proto == crate::node_firewall::Proto::Tcp && ssh.contains(&l.port) {
        return match private {
            None => Fate {
                listener,
                fate: "kept",
                why: "ssh, admitted from anywhere (the node has no private network)".into(),
            },
            Some(_) => Fate {
                listener,
                fate: "narrowed",
                why: format!(
                    "ssh, admitted only {}; closed from anywhere else",
                    ssh_words(private, ssh_from)
                ),
            },
        };
    }
    let admitting: Vec<&Opening> = openings
        .iter()
        .filter(|o| o.proto == l.proto && o.port == l.port)
        .collect();
    let closed_now = now == Some("nowhere");
    match admitting.first() {
        Some(o) if closed_now => Fate {
            listener,
            fate: "opens",
            why: format!(
                "the found firewall closes it now; opening {} admits it from {}",
                o.id,
                from_words(&o.from)
            ),
        },
        Some(o) if o.from == From::Anywhere => match now {
            Some(n) if n != "anywhere" => Fate {
                listener,
                fate: "opens",
                why: format!(
                    "reached from {n} now; opening {} admits it from anywhere",
                    o.id
                ),
            },
            _ => Fate {
                listener,
                fate: "kept",
                why: format!("admitted by opening {}", o.id),
            },
        },
        Some(o) => Fate {
            listener,
            fate: "narrowed",
            why: format!(
                "admitted by opening {} only from {}",
                o.id,
                from_words(&o.from)
            ),
        },
        None if closed_now => Fate {
            listener,
            fate: "closed",
            why: "the found firewall closes it now and the derived filter admits no opening to \
                  it: it stays closed"
                .into(),
        },
        None => Fate {
            listener,
            fate: "closed",
            why: "the derived filter admits no opening to it".into(),
        },
    }
}

impl Preview {
    /// The `--json` document: a plan, as every preview's (the foundation's apply, or an empty
    /// one when genesis would refuse), with genesis's own `refused` and `filter` beside it.
    pub fn document(&self) -> serde_json::Value {
        let code = self.exit_code();
        let mut plan = self.apply.clone().unwrap_or_else(|| {
            crate::apply::plan::Plan::empty(
                "genesis",
                &self.node,
                self.mode,
                crate::declaration::Source::Bundle,
            )
        });
        plan.pending = code == crate::apply::plan::CHANGES_PENDING;
        let mut v = crate::json_contract::document("plan", code, &plan);
        if let (Some(doc), Ok(serde_json::Value::Object(own))) =
            (v.as_object_mut(), serde_json::to_value(self))
        {
            for (k, val) in own {
                doc.entry(k).or_insert(val);
            }
        }
        v
    }

    /// The preview in words, for the terminal; the foundation's unchanged resources listed only
    /// when `verbose`.
    pub fn render(&self, verbose: bool) -> String {
        let mut out = format!(
            "genesis of node {} ({}), a preview: nothing was changed\n",
            self.node, self.mode
        );
        match &self.filter {
            None => out.push_str(
                "firewall: the found firewall stays in force; the guard refuses the foundation's \
                 ports from outside the private network\n",
            ),
            Some(f) => {
                let _ = writeln!(
                    out,
                    "firewall: the derived filter is loaded before anything else, drop by \
                     default; ssh {} admitted {}",
                    f.ssh
                        .iter()
                        .map(u16::to_string)
                        .collect::<Vec<_>>()
                        .join(","),
                    match f.private_interface.as_deref() {
                        None => "from anywhere".to_string(),
                        p => ssh_words(p, &f.ssh_from),
                    }
                );
                for o in &f.openings {
                    let _ = writeln!(out, "  opening {o}");
                }
                for l in &f.listeners {
                    let _ = writeln!(out, "  {:<9} {}: {}", l.fate, l.listener, l.why);
                }
                if !f.listeners.iter().any(|l| l.fate == "closed") {
                    out.push_str("  nothing listening here closes\n");
                }
            }
        }
        if let Some(plan) = &self.apply {
            out.push_str(&plan.render_body(verbose));
        }
        for r in &self.refused {
            let _ = writeln!(out, "refused: {r}");
        }
        if let (Some(plan), true) = (&self.apply, self.refused.is_empty()) {
            let filter = self.filter.as_ref().map(|f| {
                let opens = f.listeners.iter().filter(|l| l.fate == "opens").count();
                let closes = f.listeners.iter().filter(|l| l.fate == "closed").count();
                let n = |k: usize| if k == 1 { "listener" } else { "listeners" };
                format!(
                    "the derived filter to load ({opens} {} it opens, {closes} {} closed)",
                    n(opens),
                    n(closes)
                )
            });
            let guard = plan.guard.as_ref().is_some_and(|g| !g.in_force);
            let _ = writeln!(out, "{}", plan.summary.line(guard, filter.as_deref()));
        }
        out
    }

    /// Its exit code: 3 when genesis would refuse, 4 when it would change the machine (the
    /// filter loaded, or the foundation's apply pending), 0 when nothing would change.
    pub fn exit_code(&self) -> u8 {
        if !self.refused.is_empty() {
            3
        } else if self.filter.is_some() || self.apply.as_ref().is_some_and(|a| a.pending) {
            4
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listener(addr: &str, port: u16, process: &str) -> Listener {
        Listener {
            proto: crate::node_firewall::Proto::Tcp,
            addr: addr.parse().unwrap(),
            port,
            pid: Some(7),
            process: Some(process.into()),
        }
    }

    #[test]
    fn ssh_is_narrowed_an_undeclared_listener_closed_loopback_and_openings_kept() {
        let bus = Opening {
            id: "broker/bus".into(),
            port: 5672,
            proto: crate::node_firewall::Proto::Tcp,
            from: From::Anywhere,
            path: Path::Forwarded,
        };
        let peers: Vec<IpAddr> = vec!["192.0.2.30".parse().unwrap()];
        let f = |l: Listener| {
            fate(
                &l,
                std::slice::from_ref(&bus),
                &[22],
                Some("mesh0"),
                &peers,
                Some("anywhere"),
            )
        };
        let ssh = f(listener("0.0.0.0", 22, "sshd"));
        assert_eq!(ssh.fate, "narrowed");
        assert_eq!(
            ssh.why,
            "ssh, admitted only over mesh0 and from 192.0.2.30 (the ssh sessions open now); \
             closed from anywhere else"
        );
        let web = f(listener("192.0.2.10", 8081, "busybox"));
        assert_eq!(
            (web.fate, web.listener.as_str()),
            ("closed", "tcp 192.0.2.10:8081 (busybox, pid 7)")
        );
        assert_eq!(f(listener("127.0.0.1", 6379, "redis")).fate, "kept");
        assert_eq!(f(listener("::", 5672, "docker-proxy")).fate, "kept");
        // Closed by the found firewall now, admitted by the filter: it opens, and says so.
        let closed_now = |l: Listener, now: &str| {
            fate(
                &l,
                std::slice::from_ref(&bus),
                &[22],
                Some("mesh0"),
                &peers,
                Some(now),
            )
        };
        let opens = closed_now(listener("0.0.0.0", 5672, "docker-proxy"), "nowhere");
        assert_eq!(
            (opens.fate, opens.why.as_str()),
            (
                "opens",
                "the found firewall closes it now; opening broker/bus admits it from anywhere"
            )
        );
        let wider = closed_now(
            listener("0.0.0.0", 5672, "docker-proxy"),
            "anywhere except 192.0.2.0/24",
        );
        assert_eq!(wider.fate, "opens", "{}", wider.why);
        let stays = closed_now(listener("192.0.2.10", 8081, "busybox"), "nowhere");
        assert_eq!(stays.fate, "closed");
        assert!(stays.why.ends_with("it stays closed"), "{}", stays.why);

        let preview = Preview {
            node: "n1".into(),
            mode: "converged",
            refused: vec!["in use: tcp 192.0.2.10:8081 is listened on by busybox (pid 7)".into()],
            filter: Some(Filter {
                ssh: vec![22],
                private_interface: Some("mesh0".into()),
                ssh_from: peers.clone(),
                openings: vec![opening_words(&bus)],
                listeners: vec![ssh, web],
            }),
            apply: None,
        };
        let text = preview.render(false);
        for line in [
            "genesis of node n1 (converged), a preview: nothing was changed",
            "firewall: the derived filter is loaded before anything else, drop by default; ssh 22 \
             admitted over mesh0 and from 192.0.2.30 (the ssh sessions open now)",
            "  opening broker/bus tcp/5672 from anywhere (to a container)",
            "  closed    tcp 192.0.2.10:8081 (busybox, pid 7): the derived filter admits no opening \
             to it",
            "refused: in use: tcp 192.0.2.10:8081 is listened on by busybox (pid 7)",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} not in:\n{text}");
        }
    }
}
