//! Genesis in the core: the request checked, the preflight, the node's settings from the
//! foundation's ports, the derived filter made the node's firewall first on a converged raise,
//! and the bundle applied through the core; or the preview of all that, changing nothing.

mod preview;

pub use preview::Preview;

use crate::apply::{self, ApplyError, Host, Report};
use crate::declaration::{validate, Declaration, Mode, PrivateNetwork, Settings, Source};
use crate::node_firewall::save;
use crate::store::{self, Store};
use genesis::checks::{self, Finding};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

/// What the operator asked genesis for.
#[derive(Debug, Clone)]
pub struct Request {
    pub adopted: bool,
    pub node: Option<String>,
    pub ports: Option<String>,
    pub private_range: Option<String>,
    /// The private network's IPv6 range beside an IPv4 `private_range` (`range_v6`).
    pub private_range_v6: Option<String>,
    pub private_interface: Option<String>,
    pub bundle: Option<PathBuf>,
    /// Say what genesis would do and change nothing.
    pub preview: bool,
}

/// How genesis ended.
#[derive(Debug)]
pub enum Outcome {
    /// The input was refused (exit 2): every problem named.
    Refused(Vec<String>),
    /// A check or a safety rule refused the act (exit 3): every finding named.
    Unsafe(Vec<String>),
    /// The foundation was applied; the report says how it went.
    Applied(Box<Report>),
    /// `--preview`: what genesis would do (and whether it would refuse); nothing was changed.
    Previewed(Box<Preview>),
}

/// The request, checked: every problem named at once.
struct Checked {
    mode: Mode,
    node: String,
    ports: genesis::FoundationPorts,
    range: (IpAddr, u8),
    range_text: String,
    range_v6: Option<String>,
    interface: String,
    bundle: String,
}

fn check(req: &Request) -> Result<Checked, Vec<String>> {
    let mut problems = Vec::new();
    let ports = match &req.ports {
        Some(spec) => genesis::ports::with_overrides(genesis::FoundationPorts::default(), spec)
            .unwrap_or_else(|e| {
                problems.extend(e);
                genesis::FoundationPorts::default()
            }),
        None => genesis::FoundationPorts::default(),
    };
    let range_text = req
        .private_range
        .clone()
        .unwrap_or_else(|| genesis::ports::DEFAULT_PRIVATE_RANGE.into());
    let range = validate::parse_cidr(&range_text, false).unwrap_or_else(|e| {
        problems.push(format!("--private-range: {e}"));
        ("0.0.0.0".parse().expect("an address"), 0)
    });
    if let Some(v6) = &req.private_range_v6 {
        match validate::parse_cidr(v6, false) {
            Err(e) => problems.push(format!("--private-range-v6: {e}")),
            Ok((IpAddr::V4(_), _)) => problems.push(format!(
                "--private-range-v6: {v6:?} is not an IPv6 network; the IPv4 range goes in \
                 --private-range"
            )),
            Ok(_) if range.0.is_ipv6() => problems.push(format!(
                "--private-range-v6: {v6:?} is given beside an IPv6 --private-range; it is the \
                 IPv6 range of a network whose --private-range is IPv4"
            )),
            Ok(_) => {}
        }
    }
    let interface = req
        .private_interface
        .clone()
        .unwrap_or_else(|| genesis::ports::DEFAULT_PRIVATE_INTERFACE.into());
    if let Err(e) = validate::check_interface(&interface) {
        problems.push(format!("--private-interface: {e}"));
    }
    let node = req.node.clone().unwrap_or_else(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_default()
    });
    let bundle = match &req.bundle {
        Some(path) => std::fs::read_to_string(path).unwrap_or_else(|e| {
            problems.push(format!("--bundle {}: {e}", path.display()));
            String::new()
        }),
        None => genesis::bundle::EMBEDDED.to_string(),
    };
    if problems.is_empty() {
        Ok(Checked {
            mode: if req.adopted {
                Mode::Adopted
            } else {
                Mode::Converged
            },
            node,
            ports,
            range,
            range_text,
            range_v6: req.private_range_v6.clone(),
            interface,
            bundle,
        })
    } else {
        Err(problems)
    }
}

/// Raises the first node: checks everything before changing anything, makes the given ports the
/// node's settings, and applies the bundle (with the openings derived from those settings)
/// through the core, source `bundle`.
pub fn run(
    root: &Path,
    host: &Host<'_>,
    req: &Request,
    machine: &dyn Fn() -> anyhow::Result<checks::Machine>,
) -> Result<Outcome, ApplyError> {
    let c = match check(req) {
        Ok(c) => c,
        Err(p) => return Ok(Outcome::Refused(p)),
    };
    if let Some(state) = store::peek(root)? {
        if let Some(node) = state.node {
            return Ok(Outcome::Unsafe(vec![format!(
                "genesis has already raised this machine as node {node:?} ({}); it runs once",
                state.mode.map(|m| m.as_str()).unwrap_or("?")
            )]));
        }
    }
    let m = machine().map_err(|e| ApplyError::Safety(crate::error_text(&e)))?;
    let findings: Vec<Finding> = checks::preflight(
        &m,
        c.mode == Mode::Converged,
        &c.ports,
        c.range,
        &c.interface,
    );
    let mut unsafe_why = Vec::new();
    if !findings.is_empty() {
        let mut why: Vec<String> = findings.iter().map(|f| f.to_string()).collect();
        if c.mode == Mode::Converged
            && findings
                .iter()
                .any(|f| matches!(f, Finding::ContainerRunning { .. } | Finding::Listening(_)))
        {
            why.push(
                "this machine is in use: a converged genesis would load a filter that closes it. \
                 Raise it adopted (--adopted) to keep what serves."
                    .into(),
            );
        }
        if !req.preview {
            return Ok(Outcome::Unsafe(why));
        }
        unsafe_why = why;
    }
    let values = genesis::bundle::Values {
        node: &c.node,
        mode: c.mode.as_str(),
        ports: c.ports,
        private_interface: &c.interface,
        private_range: &c.range_text,
    };
    let mut doc = match genesis::bundle::resolve(&c.bundle, &values) {
        Ok(v) => v,
        Err(p) => return Ok(Outcome::Refused(p)),
    };
    // The IPv6 range is the node's setting beside the bundle's private network (a bundle names
    // the interface and the range by reference; the IPv6 range is what genesis was given).
    if let Some(v6) = &c.range_v6 {
        if let Some(pn) = doc
            .pointer_mut("/settings/private_network")
            .and_then(|v| v.as_object_mut())
        {
            pn.entry("range_v6")
                .or_insert_with(|| serde_json::Value::String(v6.clone()));
        }
    }
    let settings = Settings {
        ports: c.ports,
        private_network: Some(PrivateNetwork {
            interface: c.interface.clone(),
            range: c.range_text.clone(),
            range_v6: c.range_v6.clone(),
        }),
        deadlines: None,
        originals_limit_bytes: None,
        found_read_limit_bytes: None,
        found_read_s: None,
    };
    let derived = crate::declaration::openings::derive_for(&settings, &[])
        .map_err(|e| ApplyError::firewall(e.into()))?;
    if let Some(resources) = doc.get_mut("resources").and_then(|r| r.as_array_mut()) {
        let have: Vec<String> = resources
            .iter()
            .filter_map(|r| r["id"].as_str().map(str::to_string))
            .collect();
        for o in &derived {
            if !have.contains(&o.id) {
                resources.push(crate::declaration::openings::to_resource(o));
            }
        }
    }
    let decl = match crate::declaration::validate_value(&doc, Source::Bundle) {
        Ok(d) => d,
        Err(p) => {
            return Ok(Outcome::Refused(
                p.0.iter().map(|p| format!("bundle: {p}")).collect(),
            ))
        }
    };
    if decl.mode != c.mode || decl.node != c.node {
        return Ok(Outcome::Refused(vec![format!(
            "bundle: it must raise the node genesis was asked for (node {:?}, {}), not node {:?}, {} \
             (write them as \"${{node}}\" and \"${{mode}}\")",
            c.node,
            c.mode.as_str(),
            decl.node,
            decl.mode.as_str()
        )]));
    }
    if decl.settings.as_ref() != Some(&settings) {
        return Ok(Outcome::Refused(vec![
            "bundle: its settings must be the node's settings (write them as {\"$setting\": …} references)".into(),
        ]));
    }
    let ssh = save::ssh_ports();
    let ssh_from = operator_addresses(&ssh);
    if req.preview {
        let mut p = preview::of(host, &decl, &settings, &m, &ssh, &ssh_from, unsafe_why)?;
        // The foundation's apply, planned as the act would make it: a refusal of it is genesis's.
        match apply::plan::plan(root, host.runner, "genesis", &decl, Source::Bundle) {
            Ok(plan) => p.apply = Some(plan),
            Err(r) => p.refused.push(r.why),
        }
        return Ok(Outcome::Previewed(Box::new(p)));
    }
    if decl.mode == Mode::Converged {
        filter_first(root, host, &decl, ssh, ssh_from)?;
    }
    apply::apply(host, &decl, Source::Bundle).map(|r| Outcome::Applied(Box::new(r)))
}

/// A converged raise makes the derived filter the node's firewall before anything is applied:
/// the found firewall is saved as a flip's first step (on a machine not in use there is little
/// or nothing to retire) with ssh's ports and the addresses the operator's ssh sessions come
/// from now, into the store. The apply then finds a flip saved and not done, as after a crash
/// between a flip's two steps, and its phase before the resources loads the filter (retiring
/// what was found, never flushing it) before the first container or service starts. From then
/// on the node is a flipped one: every apply of the converged declaration keeps the filter in
/// force, and `mesh-host adopt` returns it to the guard.
fn filter_first(
    root: &Path,
    host: &Host<'_>,
    decl: &Declaration,
    ssh: Vec<u16>,
    ssh_from: Vec<IpAddr>,
) -> Result<(), ApplyError> {
    let mut fw = (host.firewall)(root, decl);
    let mut saved = save::record_found(&mut *fw, host.runner).map_err(|e| {
        ApplyError::firewall(crate::node_firewall::Error::NotConvergeable {
            node: decl.node.clone(),
            source: Box::new(e),
        })
    })?;
    saved.ssh = ssh;
    saved.ssh_from = ssh_from;
    let mut store = Store::open(root)?;
    store.state.flip = Some(saved);
    store.save()?;
    Ok(())
}

/// Where the operator reaches ssh from now: the remote ends of the established connections to
/// ssh's ports on this machine (the sessions open as genesis runs, whoever started it, through
/// `sudo` or not) and the client of `SSH_CONNECTION` when genesis runs in one; loopback left out.
pub fn operator_addresses(ssh: &[u16]) -> Vec<IpAddr> {
    let mut out = genesis::inventory::peers_of(ssh).unwrap_or_else(|e| {
        tracing::warn!("reading the ssh sessions open now: {e}");
        Vec::new()
    });
    let client = std::env::var("SSH_CONNECTION")
        .ok()
        .and_then(|v| v.split_whitespace().next().and_then(|a| a.parse().ok()));
    out.extend(client.filter(|a: &IpAddr| !a.is_loopback()));
    out.sort();
    out.dedup();
    out
}
