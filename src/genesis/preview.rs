//! `mesh-host genesis --preview`: what genesis would do, changing nothing. For a converged raise
//! the derived filter it would load (ssh's ports, from where, the openings) and what it does to
//! every listener on the machine: kept, narrowed to where the filter admits it, or closed.

use crate::apply::{ApplyError, Host};
use crate::declaration::{Declaration, Mode, Settings};
use crate::node_firewall::spec::filter_spec;
use firewall::opening::{From, Opening, Path};
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
    /// What the foundation's apply would do, resource by resource.
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
    /// `kept` (reached as now), `narrowed` (reached only from where it says), `closed`.
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
                .map_err(|e| ApplyError::Safety(e.to_string()))?;
            let private = spec.private.clone();
            Some(Filter {
                listeners: m
                    .listeners
                    .iter()
                    .map(|l| fate(l, &spec.openings, ssh, private.as_deref(), ssh_from))
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

fn fate(
    l: &Listener,
    openings: &[Opening],
    ssh: &[u16],
    private: Option<&str>,
    ssh_from: &[IpAddr],
) -> Fate {
    let listener = listener_words(l);
    if l.addr.is_loopback() {
        return Fate {
            listener,
            fate: "kept",
            why: "on loopback, which the filter admits".into(),
        };
    }
    if l.proto == firewall::Proto::Tcp && ssh.contains(&l.port) {
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
    match admitting.first() {
        Some(o) if o.from == From::Anywhere => Fate {
            listener,
            fate: "kept",
            why: format!("admitted by opening {}", o.id),
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
        None => Fate {
            listener,
            fate: "closed",
            why: "the derived filter admits no opening to it".into(),
        },
    }
}

impl Preview {
    /// The preview in words, for the terminal.
    pub fn render(&self) -> String {
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
            out.push_str(&plan.render());
        }
        for r in &self.refused {
            let _ = writeln!(out, "refused: {r}");
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
            proto: firewall::Proto::Tcp,
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
            proto: firewall::Proto::Tcp,
            from: From::Anywhere,
            path: Path::Forwarded,
        };
        let peers: Vec<IpAddr> = vec!["192.0.2.30".parse().unwrap()];
        let f = |l: Listener| fate(&l, std::slice::from_ref(&bus), &[22], Some("mesh0"), &peers);
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
        let text = preview.render();
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
