//! firewalld: openings as rich rules in firewalld's runtime configuration, inside a policy that
//! is the mesh's (`mesh-host`: from any zone to the host, after every zone's own rules), spoken
//! over firewalld's D-Bus API. Its `inet firewalld` table is owned by firewalld, so the host never
//! writes there itself.
//!
//! Why a policy: a policy's rules run after each zone's deny and allow rules and before the
//! zone's final refusal, so a ban the operator made in a zone (a rich rule refusing a source)
//! stays first, and everything in the policy is the mesh's, so removing its rules removes only
//! what the mesh made. firewalld's rules cannot name an interface (it admits by zone), so an
//! opening from the private network's interface — the mesh's own — lives in a zone of the
//! mesh's, `mesh-private`, that interface bound to it at run time (only when no zone of the
//! operator's holds it). firewalld creates policies and zones only in its permanent
//! configuration: the host adds these two, empty, once (`/etc/firewalld/policies/mesh-host.xml`,
//! `/etc/firewalld/zones/mesh-private.xml`) and reloads firewalld so they exist at run time; the
//! openings and the binding live only in the runtime configuration, are lost on every reload (as
//! firewalld's runtime is), and are put back by the host's next check (the resident host
//! listens for firewalld's `Reloaded` signal).
//!
//! Forwarded openings need no rule while firewalld accepts every connection another program's
//! DNAT forwards; under its `StrictForwardPorts=yes` (firewalld 2.3) they are forward ports in
//! the mesh's policy, one per place the runtime's DNAT sends the port (`firewalld/forward.rs`).
//!
//! Retired without firewalld's own cleanup, which flushes every iptables table (the container
//! runtime's too): ended as `CleanupOnExit=no` would end it, its one table taken out in the
//! caller's batch, its configuration untouched, its unit disabled by the core; restored by its
//! unit starting it again, which loads the same configuration (a container runtime that shares
//! its bus puts its own rules back then, as it does on every firewalld reload).

use super::nf::XT_BUILTIN;
use super::seam::{Converger, Cx, Detect, Kind, Retire, WholeDriver};
use crate::error::{Error, Result};
use crate::found::{Backend, Layer};
use crate::netlink::{Family, Hook, NfSocket, Ruleset};
use crate::opening::{From, Opening, Path};
use crate::outcome::{Converged, Presence, Scope, State};
use crate::retire::{config_files, Retired, Saved};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::path::Path as FsPath;
use std::time::{Duration, Instant};

mod forward;
mod fw;
use forward::ForwardPort;
use fw::{Fw, IFACE, OBJ};
pub use fw::{POLICY, ZONE};

/// An interface an opening admits from is in a firewalld zone of the operator's, which the host
/// does not move it out of.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("interface {interface} is bound to firewalld zone {zone}, the operator's; mesh-host binds only an unbound interface to its zone {ZONE}")]
struct OperatorZone {
    interface: String,
    zone: String,
}

/// How long a stopping or starting firewalld is waited for.
const SETTLE: Duration = Duration::from_secs(60);

pub struct Firewalld;

/// firewalld behind every seam.
pub const KIND: Kind = Kind {
    detect: &Firewalld,
    converge: Converger::Whole(&Firewalld),
    retire: &Firewalld,
};

/// An opening's rich rules: one from anywhere or from the private network's interface (the
/// zone says where from), or one per source network with its family. Values are validated
/// openings (a port number, a protocol word, an exact network), so nothing else reaches the
/// rule's text.
fn rich_rules(o: &Opening) -> Vec<String> {
    let tail = format!("port port=\"{}\" protocol=\"{}\" accept", o.port, o.proto);
    match &o.from {
        From::Anywhere | From::Interface(_) => vec![format!("rule {tail}")],
        From::Networks(nets) => nets
            .iter()
            .map(|n| {
                let family = match n.addr {
                    IpAddr::V4(_) => "ipv4",
                    IpAddr::V6(_) => "ipv6",
                };
                format!("rule family=\"{family}\" source address=\"{n}\" {tail}")
            })
            .collect(),
    }
}

/// The interface an opening admits from, when it admits from one (then its rules live in the
/// mesh's zone, the interface bound to it; otherwise in the mesh's policy).
fn interface(o: &Opening) -> Option<&str> {
    match &o.from {
        From::Interface(i) => Some(i),
        _ => None,
    }
}

/// Whether firewalld is strict about forwarded ports (firewalld 2.3's `StrictForwardPorts`):
/// then it no longer accepts every connection another program's DNAT forwards.
fn strict_forward(fw: &mut Fw) -> Result<bool> {
    Ok(fw
        .config_property("StrictForwardPorts")?
        .is_some_and(|v| v.eq_ignore_ascii_case("yes")))
}

impl Detect for Firewalld {
    /// Its own table `inet firewalld`, or, with its iptables backend, iptables' tables holding
    /// its `<BUILT-IN>_direct` chains.
    fn wrote(
        &self,
        ruleset: &Ruleset,
        family: Family,
        table: &str,
        _chain: &str,
    ) -> Option<String> {
        if table == "firewalld" {
            return Some(format!("table {family} firewalld"));
        }
        ruleset
            .chains
            .iter()
            .find(|c| c.family == family && c.table == table && direct(&c.name))
            .map(|c| {
                format!(
                    "firewalld's iptables backend: its chain {} in table {family} {table}",
                    c.name
                )
            })
    }

    fn wrote_legacy(&self, chains: &[&str]) -> bool {
        chains.iter().any(|c| direct(c))
    }
}

/// Whether `chain` is firewalld's mark on an iptables table: with FirewallBackend=iptables it
/// writes iptables' tables itself, always with a `<BUILT-IN>_direct` chain beside each built-in
/// chain it uses.
fn direct(chain: &str) -> bool {
    chain
        .strip_suffix("_direct")
        .is_some_and(|b| XT_BUILTIN.contains(&b))
}

/// Each interface an opening admits from: bound to the mesh's zone (true), not yet (false), or
/// in a zone of the operator's (why the host leaves it there).
type Bound = BTreeMap<String, std::result::Result<bool, OperatorZone>>;

/// What the openings want of firewalld: its rich rules (each with its opening) in the mesh's
/// policy and zone, and under StrictForwardPorts its forward ports.
#[derive(Default)]
struct Wanted {
    policy: BTreeMap<String, String>,
    zone: BTreeMap<String, String>,
    /// Each forwarded opening's forward ports, or why it has none.
    forwarded: BTreeMap<String, std::result::Result<Vec<ForwardPort>, forward::NoForwardPort>>,
    /// The ports and protocols of the forwarded openings given.
    given: BTreeSet<(String, String)>,
    /// Each forward port wanted, with its opening.
    forward: BTreeMap<ForwardPort, String>,
}

/// What firewalld holds of the mesh's once the writes are done: read back, never assumed.
struct Held {
    policy: Vec<String>,
    forward_ports: Vec<ForwardPort>,
    zone: Vec<String>,
    bound: Bound,
    strict: bool,
}

impl WholeDriver for Firewalld {
    fn converge(
        &self,
        layers: &[Layer],
        openings: &[Opening],
        scope: Scope,
        write: bool,
        cx: &mut Cx<'_>,
    ) -> Result<Converged> {
        let mut done = Converged::default();
        // firewalld's iptables backend shares iptables' tables with everyone else; its policy
        // would serve there too, but that has not been measured, so it is not claimed.
        let (layers, iptables): (Vec<Layer>, Vec<Layer>) =
            layers.iter().cloned().partition(|l| l.table == "firewalld");
        unreachable_everywhere(
            &iptables,
            openings,
            "it runs with FirewallBackend=iptables, which mesh-host does not speak yet (set FirewallBackend=nftables, firewalld's default)",
            &mut done,
        );
        let layers = layers.as_slice();
        if layers.is_empty() {
            return Ok(done);
        }
        let mut fw = match Fw::open() {
            Ok(fw) => fw,
            Err(e) => {
                unreachable_everywhere(
                    layers,
                    openings,
                    &format!("it cannot be asked: {e}"),
                    &mut done,
                );
                return Ok(done);
            }
        };
        let input_drops = layers.iter().any(|l| l.hook == Hook::Input && l.can_drop);
        let incoming: Vec<&Opening> = if input_drops {
            openings
                .iter()
                .filter(|o| o.path == Path::Incoming)
                .collect()
        } else {
            Vec::new()
        };
        let zoned = incoming.iter().any(|o| interface(o).is_some());
        let strict = strict_forward(&mut fw)?;
        let forward_drops = layers.iter().any(|l| l.hook == Hook::Forward && l.can_drop);
        let mut wanted = if strict && forward_drops {
            wanted_forward(openings, cx)
        } else {
            Wanted::default()
        };
        if write && (!incoming.is_empty() || !wanted.forward.is_empty()) {
            fw.ensure_objects(zoned)?;
        }
        let policy_active = fw.runtime_policies()?.iter().any(|p| p == POLICY);
        let zone_active = fw.runtime_zones()?.iter().any(|z| z == ZONE);
        let bound = bind_interfaces(&mut fw, &incoming, write && zone_active, &mut done)?;
        wanted_rules(&incoming, &bound, &mut wanted);
        let (policy, forward_ports) = if policy_active {
            converge_policy(&mut fw, &wanted, scope, write, &mut done)?
        } else {
            (Vec::new(), Vec::new())
        };
        let zone = if zone_active {
            converge_zone(&mut fw, &wanted, &bound, scope, write, &mut done)?
        } else {
            Vec::new()
        };
        done.stale = policy
            .iter()
            .filter(|r| !wanted.policy.contains_key(*r))
            .count()
            + zone
                .iter()
                .filter(|r| !wanted.zone.contains_key(*r))
                .count()
            + forward_ports
                .iter()
                .filter(|fp| !wanted.forward.contains_key(*fp))
                .count();
        let held = Held {
            policy,
            forward_ports,
            zone,
            bound,
            strict,
        };
        for l in layers {
            for o in openings.iter().filter(|o| l.crossed_by(o)) {
                let (state, chain) = presence(l, o, &wanted, &held);
                done.states.entry(o.id.clone()).or_default().push(Presence {
                    layer: l.id(),
                    chain,
                    state,
                });
            }
        }
        Ok(done)
    }
}

/// Under StrictForwardPorts, each forwarded opening's forward ports (or why it has none), the
/// ports and protocols they are for, and each forward port with its opening.
fn wanted_forward(openings: &[Opening], cx: &Cx<'_>) -> Wanted {
    let mut wanted = Wanted::default();
    for o in openings.iter().filter(|o| o.path == Path::Forwarded) {
        let targets = crate::published::targets(cx.ruleset, cx.legacy_saves, o.proto, o.port);
        wanted
            .forwarded
            .insert(o.id.clone(), forward::wanted(o, &targets));
        wanted
            .given
            .insert((o.port.to_string(), o.proto.to_string()));
    }
    wanted.forward = openings
        .iter()
        .filter_map(|o| Some((o, wanted.forwarded.get(&o.id)?.as_ref().ok()?)))
        .flat_map(|(o, fps)| fps.iter().map(|fp| (fp.clone(), o.id.clone())))
        .collect();
    wanted
}

/// Binds each interface an opening admits from to the mesh's zone when no zone holds it and
/// `bind` (writing, the zone active); an interface in a zone of the operator's stays there.
fn bind_interfaces(
    fw: &mut Fw,
    incoming: &[&Opening],
    bind: bool,
    done: &mut Converged,
) -> Result<Bound> {
    let mut bound = Bound::new();
    for i in incoming.iter().filter_map(|o| interface(o)) {
        if bound.contains_key(i) {
            continue;
        }
        let zone = fw.zone_of_interface(i)?;
        let state = if zone == ZONE {
            Ok(true)
        } else if !zone.is_empty() {
            Err(OperatorZone {
                interface: i.to_string(),
                zone,
            })
        } else if bind {
            fw.bind_interface(i)?;
            done.added
                .push((i.to_string(), format!("firewalld zone {ZONE}")));
            Ok(true)
        } else {
            Ok(false)
        };
        bound.insert(i.to_string(), state);
    }
    Ok(bound)
}

/// The rich rules wanted in the policy and in the zone, each with its opening (none for an
/// opening whose interface is the operator's).
fn wanted_rules(incoming: &[&Opening], bound: &Bound, wanted: &mut Wanted) {
    for o in incoming {
        let into = match interface(o) {
            Some(i) if matches!(bound.get(i), Some(Err(_))) => continue,
            Some(_) => &mut wanted.zone,
            None => &mut wanted.policy,
        };
        for r in rich_rules(o) {
            into.insert(r, o.id.clone());
        }
    }
}

/// Writes the mesh's policy's rich rules and forward ports to what is wanted (with scope
/// `Given`, others are kept), and returns them as firewalld then holds them. They come in one
/// reply, read once, and once more only after either was written.
fn converge_policy(
    fw: &mut Fw,
    wanted: &Wanted,
    scope: Scope,
    write: bool,
    done: &mut Converged,
) -> Result<(Vec<String>, Vec<ForwardPort>)> {
    let (policy, forward_ports) = fw.policy_settings()?;
    if !write {
        return Ok((policy, forward_ports));
    }
    let mut next: Vec<&str> = Vec::new();
    let mut changed = false;
    for rule in &policy {
        if wanted.policy.contains_key(rule) || scope == Scope::Given {
            next.push(rule);
        } else {
            changed = true;
            done.removed
                .push((rule.clone(), format!("firewalld policy {POLICY}")));
        }
    }
    for (rule, id) in &wanted.policy {
        if !policy.contains(rule) {
            changed = true;
            next.push(rule);
            done.added
                .push((id.clone(), format!("firewalld policy {POLICY}")));
        }
    }
    if changed {
        fw.set_policy_rules(&next)?;
    }
    let plan = forward::plan(&forward_ports, &wanted.forward, &wanted.given, scope);
    if !plan.added.is_empty() || !plan.removed.is_empty() {
        changed = true;
        fw.set_policy_forward_ports(&plan.next)?;
    }
    for fp in plan.removed {
        done.removed.push((
            format!("forward port {fp}"),
            format!("firewalld policy {POLICY}"),
        ));
    }
    for (_, id) in plan.added {
        done.added.push((id, format!("firewalld policy {POLICY}")));
    }
    if changed {
        return fw.policy_settings();
    }
    Ok((policy, forward_ports))
}

/// Writes the mesh's zone's rich rules to what is wanted (with scope `All`, others removed and
/// every interface no opening admits from unbound), and returns its rules as firewalld then
/// holds them.
fn converge_zone(
    fw: &mut Fw,
    wanted: &Wanted,
    bound: &Bound,
    scope: Scope,
    write: bool,
    done: &mut Converged,
) -> Result<Vec<String>> {
    let zone = fw.zone_rules()?;
    if !write {
        return Ok(zone);
    }
    for rule in zone.iter().filter(|r| !wanted.zone.contains_key(*r)) {
        if scope == Scope::All {
            fw.remove_zone_rule(rule)?;
            done.removed
                .push((rule.clone(), format!("firewalld zone {ZONE}")));
        }
    }
    for (rule, id) in &wanted.zone {
        if !zone.contains(rule) {
            fw.add_zone_rule(rule)?;
            done.added
                .push((id.clone(), format!("firewalld zone {ZONE}")));
        }
    }
    // An interface no opening admits from any more goes back where it was: unbound.
    if scope == Scope::All {
        for i in fw.zone_interfaces()? {
            if !bound.contains_key(&i) {
                fw.unbind_interface(&i)?;
                done.removed.push((i, format!("firewalld zone {ZONE}")));
            }
        }
    }
    fw.zone_rules()
}

/// How opening `o` stands in layer `l` given what firewalld holds, and where (the policy or the
/// zone) it is admitted.
fn presence(l: &Layer, o: &Opening, wanted: &Wanted, held: &Held) -> (State, Option<String>) {
    if !l.can_drop {
        return (
            State::NotNeeded(format!("nothing in {} can drop", l.chain)),
            None,
        );
    }
    match (l.hook, interface(o)) {
        (Hook::Input, None) => (
            if rich_rules(o).iter().all(|r| held.policy.contains(r)) {
                State::Present
            } else {
                State::Missing
            },
            Some(format!("policy {POLICY}")),
        ),
        (Hook::Input, Some(i)) => (
            match held.bound.get(i) {
                Some(Err(why)) => State::Unwritable(why.to_string()),
                Some(Ok(true)) if rich_rules(o).iter().all(|r| held.zone.contains(r)) => {
                    State::Present
                }
                _ => State::Missing,
            },
            Some(format!("zone {ZONE}")),
        ),
        (Hook::Forward, _) if held.strict => (
            match wanted.forwarded.get(&o.id) {
                Some(Ok(fps)) if fps.iter().all(|fp| held.forward_ports.contains(fp)) => {
                    State::Present
                }
                Some(Ok(_)) => State::Missing,
                Some(Err(why)) => State::Unwritable(why.to_string()),
                None => State::Missing,
            },
            Some(format!("policy {POLICY}")),
        ),
        (Hook::Forward, _) => (State::NotNeeded(
            "firewalld accepts every connection the container runtime's DNAT forwards (ct status dnat accept; StrictForwardPorts is off)".into(),
        ), None),
        _ => (State::NotNeeded(format!(
            "firewalld refuses nothing by port in {} (it drops there only by reverse path and ICMPv6 type)",
            l.chain
        )), None),
    }
}

impl Retire for Firewalld {
    fn survey(&self, root: &FsPath, cx: &mut Cx<'_>) -> Result<Option<Retired>> {
        let table = cx.ruleset.table(Family::Inet, "firewalld").is_some();
        let mut fw = match Fw::open() {
            Ok(fw) => fw,
            Err(_) if !table => return Ok(None),
            Err(e) => return Err(e),
        };
        if !fw.running()? {
            if table {
                return Err(Error::Unsupported {
                    reason: "table inet firewalld is loaded but firewalld is not on the system bus: it cannot be retired in its own way".into(),
                });
            }
            return Ok(None);
        }
        let backend = fw
            .config_property("FirewallBackend")?
            .unwrap_or_else(|| "nftables".into());
        if !backend.eq_ignore_ascii_case("nftables") {
            return Err(Error::Unsupported {
                reason: format!(
                    "firewalld runs with FirewallBackend={backend}: its rules share the iptables tables with the container runtime's, so they cannot be taken out alone and mesh-host will not retire it (set FirewallBackend=nftables first)"
                ),
            });
        }
        let cleanup = fw
            .config_property("CleanupOnExit")?
            .unwrap_or_else(|| "yes".into());
        let chains = cx
            .ruleset
            .chains
            .iter()
            .filter(|c| c.table == "firewalld")
            .count();
        let rules = cx
            .ruleset
            .rules
            .iter()
            .filter(|r| r.table == "firewalld")
            .count();
        let mut config = Vec::new();
        config_files(&root.join("etc/firewalld"), root, &mut config);
        config.sort();
        Ok(Some(Retired {
            backend: Backend::Firewalld,
            unit: Some("firewalld.service".into()),
            daemon: true,
            config,
            saved: vec![Saved {
                what: format!("firewalld (nftables backend): table inet firewalld, {chains} chains, {rules} rules"),
                text: format!("cleanup-on-exit={cleanup}\n"),
            }],
        }))
    }

    fn retire(&self, saved: &Retired, cx: &mut Cx<'_>) -> Result<Retired> {
        let cleanup = !saved
            .saved
            .iter()
            .any(|s| s.text.contains("cleanup-on-exit=no"));
        let mut fw = Fw::open()?;
        if fw.running()? {
            let pid = fw.pid()?;
            // firewalld's own cleanup at exit flushes every iptables table (firewalld 1.3 runs
            // it over every backend it probed), the container runtime's too. So unless its
            // configuration already says CleanupOnExit=no, it is ended without that cleanup,
            // exactly as CleanupOnExit=no would end it, and its one table is taken out below.
            use nix::sys::signal::{kill, Signal};
            let signal = if cleanup {
                Signal::SIGKILL
            } else {
                Signal::SIGTERM
            };
            // The pid is the bus's owner of firewalld's name.
            if let Err(errno) = kill(nix::unistd::Pid::from_raw(pid as i32), signal) {
                return Err(Error::Unsupported {
                    reason: format!("firewalld (pid {pid}) could not be stopped: {errno}"),
                });
            }
            let until = Instant::now() + SETTLE;
            while alive(pid) {
                if Instant::now() > until {
                    return Err(Error::Unsupported {
                        reason: format!(
                            "firewalld (pid {pid}) was still running {} s after it was stopped",
                            SETTLE.as_secs()
                        ),
                    });
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        // Its table outlives it when it was made persistent (or CleanupOnExit=no): it goes with
        // the caller's batch, in one transaction with what replaces it. A table made with the
        // owner flag alone went with the process.
        let mut sock = NfSocket::open()?;
        if sock
            .ruleset(Some(Family::Inet))?
            .table(Family::Inet, "firewalld")
            .is_some()
        {
            cx.batch.del_table(Family::Inet, "firewalld")?;
        }
        Ok(saved.clone())
    }

    fn restore(&self, _saved: &Retired, _cx: &mut Cx<'_>) -> Result<()> {
        // firewalld is started again by its unit, which the core enables and starts; it loads
        // the configuration that was never written. Here the host waits for it to be running.
        let until = Instant::now() + SETTLE;
        loop {
            if let Ok(mut fw) = Fw::open() {
                if fw.running().unwrap_or(false)
                    && fw.state().map(|s| s == "RUNNING").unwrap_or(false)
                {
                    return Ok(());
                }
            }
            if Instant::now() > until {
                return Err(Error::Unsupported {
                    reason: format!(
                        "firewalld did not come back on the system bus within {} s: start firewalld.service",
                        SETTLE.as_secs()
                    ),
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// How long the reload listener waits before it tries the bus again when the bus or firewalld
/// is not there.
const RETRY: Duration = Duration::from_secs(10);

/// Listens for firewalld's `Reloaded` signal on the system bus for the life of the process,
/// calling `heard` for each (firewalld's runtime configuration, and with it every opening, is
/// gone after a reload). A bus that is not there, or goes away, is tried again every 10 s, so a
/// firewalld started later is heard too. The thread blocks on the bus socket and does nothing
/// else.
pub fn listen_for_reloads(
    heard: impl Fn() + Send + 'static,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("firewalld-reloads".into())
        .spawn(move || loop {
            let subscribed = crate::dbus::system().and_then(|bus| {
                let rule = zbus::MatchRule::builder()
                    .msg_type(zbus::message::Type::Signal)
                    .interface(IFACE)
                    .and_then(|r| r.member("Reloaded"))
                    .and_then(|r| r.path(OBJ))
                    .map(|r| r.build())
                    .map_err(|e| crate::dbus::call_error(IFACE, "Reloaded", e))?;
                zbus::blocking::MessageIterator::for_match_rule(rule, &bus, Some(64))
                    .map_err(|e| crate::dbus::call_error(IFACE, "Reloaded", e))
            });
            let Ok(signals) = subscribed else {
                std::thread::sleep(RETRY);
                continue;
            };
            // The iterator waits without a deadline (the call deadline bounds calls only); it
            // ends, or fails, when the bus goes away (or firewalld's with it): connect again
            // later.
            for m in signals {
                match m {
                    Ok(m) if m.header().member().is_some_and(|n| n == "Reloaded") => heard(),
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
            std::thread::sleep(RETRY);
        })
}

/// Whether process `pid` still runs: one of its threads exists and is not a zombie. A stopped
/// firewalld whose parent has not yet reaped it has finished; its leader can be a zombie while
/// its other threads (and with them its sockets: its bus name, its table's ownership) are still
/// going away, so every thread is looked at.
fn alive(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().any(|t| {
        std::fs::read_to_string(t.path().join("stat"))
            .ok()
            .and_then(|stat| {
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().next().map(String::from))
            })
            .is_some_and(|state| state != "Z" && state != "X")
    })
}

/// Every opening crossing a layer that can drop is reported unwritable, naming why.
fn unreachable_everywhere(layers: &[Layer], openings: &[Opening], why: &str, done: &mut Converged) {
    for l in layers.iter().filter(|l| l.can_drop) {
        for o in openings.iter().filter(|o| l.crossed_by(o)) {
            done.states.entry(o.id.clone()).or_default().push(Presence {
                layer: l.id(),
                chain: None,
                state: State::Unwritable(format!("firewalld: {why}")),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::opening::{Network, Proto};

    fn opening(from: From) -> Opening {
        Opening {
            id: "web".into(),
            port: 8080,
            proto: Proto::Tcp,
            from,
            path: Path::Incoming,
        }
    }

    /// Rich rules in firewalld's own syntax: one from anywhere, one per network with its
    /// family, and one from an interface (the zone it lives in says where from).
    #[test]
    fn rich_rules_per_source() {
        assert_eq!(
            rich_rules(&opening(From::Anywhere)),
            ["rule port port=\"8080\" protocol=\"tcp\" accept"]
        );
        let nets = From::Networks(vec![
            Network {
                addr: "10.0.0.0".parse().unwrap(),
                len: 8,
            },
            Network {
                addr: "fd00::".parse().unwrap(),
                len: 8,
            },
        ]);
        assert_eq!(
            rich_rules(&opening(nets)),
            [
                "rule family=\"ipv4\" source address=\"10.0.0.0/8\" port port=\"8080\" protocol=\"tcp\" accept",
                "rule family=\"ipv6\" source address=\"fd00::/8\" port port=\"8080\" protocol=\"tcp\" accept",
            ]
        );
        let private = opening(From::Interface("wg0".into()));
        assert_eq!(rich_rules(&private), rich_rules(&opening(From::Anywhere)));
        assert_eq!(interface(&private), Some("wg0"));
    }
}
