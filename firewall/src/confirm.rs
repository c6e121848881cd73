//! The kernel asked (`firewall explain --confirm`): the ruleset as it stands is loaded, by its
//! own tools, into scratch network namespaces made for the purpose, with the node's interface
//! names, addresses and routes; a real SYN is sent for each part of the evaluator's answer from
//! an address inside that part's sources, and the kernel's result (connected, refused, timed
//! out) is set beside the evaluator's fate. The namespaces are removed when the confirmation
//! ends, on error too.
//!
//! The scratch node has one interface per interface of the node, named as it is: a veth pair
//! where a probe arrives or leaves (its other end, `peer`, in a namespace of its own: the client
//! machines on that side, or the host behind), elsewhere a veth whose other end is in a sink. Each probe's source address is
//! put on the client's side and routed back through the interface it arrives on, and both sides
//! know each other's link address beforehand, so the one packet the ruleset is asked about is
//! the SYN (a ruleset that refuses neighbour discovery still gets the question).

mod scratch;
mod sock;

use crate::error::Result;
use crate::eval::{Addrs, Answer, Fam, Fate, Iface, Path, Way};
use run::Runner;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

pub use scratch::route_args;
pub use sock::NETNS_DIR;

/// How long a probe waits for the handshake: a veth between namespaces answers in well under a
/// millisecond, and a dropped SYN is resent after one second.
pub const PROBE_WAIT: Duration = Duration::from_millis(2500);

/// How long the whole confirmation may take, namespaces made and removed included.
pub const BUDGET: Duration = Duration::from_secs(60);

/// What cannot be cloned into the scratch namespaces, and how the confirmation treats it.
pub const NOT_CLONED: &[&str] = &[
    "sockets: the node's own listeners are not there; a listener on the port is made in the \
     scratch node (forwarded: on the container's port in the host behind), by the host as root, \
     and a rule that tests a socket sees that listener",
    "conntrack state: the scratch namespaces start with an empty table, so every probe is a new \
     connection, as the evaluator assumes",
    "cgroups and the processes in them: not there; a cgroup match decides as with no socket",
    "marks set by other processes, and policy routing (ip rule, other tables): not copied; marks \
     start at zero, as the evaluator assumes; the main table's routes are recreated",
    "bpf programs attached to the node (the guard's netfilter BPF links, tc and xdp programs): \
     not loaded; the ruleset, the guard's table inet mesh_host included, is confirmed without them",
    "interface kinds: every interface is a veth named as the node's",
    "stateful objects' history: quotas, limits and counters start from their listed values, a \
     rate limit's bucket full",
];

/// The kernel's answer to one SYN.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kernel {
    /// The handshake completed.
    Connected,
    /// Answered by a reset or an ICMP error (the detail says which).
    Refused(String),
    /// Nothing came back within [`PROBE_WAIT`]: dropped.
    TimedOut,
    /// No probe could be sent for this part (the reason says why).
    Unprobed(String),
}

impl Kernel {
    /// One word for scripts: `connected`, `refused`, `timed-out`, `unprobed`.
    pub fn word(&self) -> &'static str {
        match self {
            Kernel::Connected => "connected",
            Kernel::Refused(_) => "refused",
            Kernel::TimedOut => "timed-out",
            Kernel::Unprobed(_) => "unprobed",
        }
    }

    /// Whether the kernel admitted the connection, if a probe was sent.
    pub fn admitted(&self) -> Option<bool> {
        match self {
            Kernel::Connected => Some(true),
            Kernel::Refused(_) | Kernel::TimedOut => Some(false),
            Kernel::Unprobed(_) => None,
        }
    }

    /// As a person reads it.
    pub fn describe(&self) -> String {
        match self {
            Kernel::Connected => "connected".into(),
            Kernel::Refused(how) => format!("refused ({how})"),
            Kernel::TimedOut => format!("timed out (no answer within {PROBE_WAIT:?})"),
            Kernel::Unprobed(why) => format!("not probed: {why}"),
        }
    }
}

/// The kernel's result set beside the evaluator's fate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Agreement {
    /// Admitted and connected, or not admitted (refused, not admitted) and not connected.
    Agrees,
    /// The evaluator decided one way and the kernel the other.
    Disagrees,
    /// The evaluator could not tell (doubtful); the kernel's result settles it.
    Settled,
    /// No probe was sent.
    Unprobed,
}

impl Agreement {
    /// One word for scripts: `agrees`, `disagrees`, `settled`, `unprobed`.
    pub fn word(self) -> &'static str {
        match self {
            Agreement::Agrees => "agrees",
            Agreement::Disagrees => "disagrees",
            Agreement::Settled => "settled",
            Agreement::Unprobed => "unprobed",
        }
    }
}

/// Admitted ⇔ connected; a doubtful fate is settled by the kernel, not contradicted.
pub fn agreement(fate: &Fate, kernel: &Kernel) -> Agreement {
    match (kernel.admitted(), fate) {
        (None, _) => Agreement::Unprobed,
        (Some(_), Fate::Doubtful { .. }) => Agreement::Settled,
        (Some(k), f) if k == (*f == Fate::Admitted) => Agreement::Agrees,
        _ => Agreement::Disagrees,
    }
}

/// One probe: where it came from and went, and what the kernel said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    pub source: Option<IpAddr>,
    pub to: Option<SocketAddr>,
    /// Forwarded: the host behind that listened.
    pub behind: Option<SocketAddr>,
    pub kernel: Kernel,
}

/// The ruleset as it stands, as text its own tools load again.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listing {
    /// `nft list ruleset`, less the tables iptables-nft manages (their `xt` expressions do not
    /// load through nft) and less the `owner`/`persist` flags (an owned table would vanish with
    /// the nft that loaded it).
    pub nft: String,
    /// `iptables-nft-save` / `ip6tables-nft-save` of the tables iptables-nft manages.
    pub xt_nft: Vec<(Fam, String)>,
    /// `iptables-legacy-save` / `ip6tables-legacy-save`.
    pub legacy: Vec<(Fam, String)>,
    /// `ipset save`, where ipset exists.
    pub ipset: Option<String>,
    /// The node's routes, `ip -o route show` per family.
    pub routes: Vec<(Fam, String)>,
}

fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

/// Reads the ruleset of the calling process's namespace as text (it changes nothing).
pub fn capture(exec: &dyn Runner) -> Result<Listing> {
    let mut out = Listing::default();
    let nft = if exec.exists("nft") {
        crate::child::stdout(exec, "nft", &args(&["list", "ruleset"]), None)?
    } else {
        String::new()
    };
    let mut managed = Vec::new();
    for (fam, program, family) in [
        (Fam::V4, "iptables-nft-save", "ip"),
        (Fam::V6, "ip6tables-nft-save", "ip6"),
    ] {
        if !exec.exists(program) || nft.is_empty() {
            continue;
        }
        let text = managed_only(&crate::child::stdout(exec, program, &[], None)?);
        let tables = saved_tables(&text);
        if !tables.is_empty() {
            managed.extend(tables.into_iter().map(|t| format!("{family} {t}")));
            out.xt_nft.push((fam, text));
        }
    }
    out.nft = loadable_nft(&nft, &managed);
    for (fam, program) in [
        (Fam::V4, "iptables-legacy-save"),
        (Fam::V6, "ip6tables-legacy-save"),
    ] {
        if exec.exists(program) {
            let text = crate::child::stdout(exec, program, &[], None)?;
            if !saved_tables(&text).is_empty() {
                out.legacy.push((fam, text));
            }
        }
    }
    if exec.exists("ipset") {
        let text = crate::child::stdout(exec, "ipset", &args(&["save"]), None)?;
        if !text.trim().is_empty() {
            out.ipset = Some(text);
        }
    }
    for (fam, flag) in [(Fam::V4, "-4"), (Fam::V6, "-6")] {
        if let Ok(o) = crate::child::run(exec, "ip", &args(&[flag, "-o", "route", "show"]), None) {
            out.routes.push((fam, crate::child::text(&o.stdout)));
        }
    }
    Ok(out)
}

/// The tables of an `*-save` text (its `*filter` lines), as the crate's one reader of a save
/// finds them.
fn saved_tables(text: &str) -> Vec<String> {
    crate::eval::parse_save(text, "filter")
        .into_iter()
        .map(|(t, _, _)| t)
        .collect()
}

/// An `iptables-nft-save` text less the tables it says are not iptables-nft's (``# Table `nat'
/// contains incompatible base-chains``, ``# Table `filter' is incompatible``): it prints those
/// with empty chains, and nft lists and loads them whole.
fn managed_only(text: &str) -> String {
    let foreign: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# Table `"))
        .filter(|l| l.contains("incompatible"))
        .filter_map(|l| l.split('\'').next())
        .collect();
    let mut out = String::new();
    let mut skipping = false;
    for line in text.lines() {
        if let Some(t) = line.strip_prefix('*') {
            skipping = foreign.contains(&t.trim());
        }
        if !skipping {
            out.push_str(line);
            out.push('\n');
        } else if line == "COMMIT" {
            skipping = false;
        }
    }
    out
}

/// `nft list ruleset` without the tables named in `skip` (`ip filter`) and without the
/// `owner` and `persist` table flags.
pub fn loadable_nft(listing: &str, skip: &[String]) -> String {
    let mut out = String::new();
    let mut skipping = false;
    for line in listing.lines() {
        if let Some(head) = line.strip_prefix("table ") {
            let name = head.trim_end_matches('{').trim();
            skipping = skip.iter().any(|s| s == name);
        }
        if skipping {
            skipping = line != "}";
            continue;
        }
        let t = line.trim();
        if let Some(flags) = t.strip_prefix("flags ") {
            if line.starts_with('\t') && !line.starts_with("\t\t") {
                let kept: Vec<&str> = flags
                    .trim_end_matches(';')
                    .split(',')
                    .map(str::trim)
                    .filter(|f| *f != "owner" && *f != "persist")
                    .collect();
                if !kept.is_empty() {
                    out.push_str(&format!("\tflags {}\n", kept.join(",")));
                }
                continue;
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// One probe to send: a part's representative source, arriving on `iif`, to `dst` (the
/// node's address, which a runtime's DNAT sends on; routed on as sent, the host behind's own);
/// forwarded, the host behind on `oif` at `target`, `gateway` being the node's address on that
/// side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shot {
    pub fam: Fam,
    pub iif: String,
    pub src: IpAddr,
    pub dst: SocketAddr,
    pub behind: Option<Behind>,
    /// Probes of one round go at once; a source two probes share is routed back through one
    /// interface per round.
    pub round: usize,
}

/// The host behind the node on a forwarded way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Behind {
    pub oif: String,
    pub target: SocketAddr,
    pub gateway: IpAddr,
}

/// The addresses a probe may come from: unicast, not loopback, not multicast, not the
/// unspecified network; global unicast first in IPv6.
fn ordinary(fam: Fam) -> Vec<Addrs> {
    let n4 = |a: Ipv4Addr| u128::from(u32::from(a));
    let n6 = |a: Ipv6Addr| u128::from(a);
    match fam {
        Fam::V4 => {
            let bad = [
                Addrs::cidr(fam, n4(Ipv4Addr::new(0, 0, 0, 0)), 8),
                Addrs::cidr(fam, n4(Ipv4Addr::new(127, 0, 0, 0)), 8),
                Addrs::cidr(fam, n4(Ipv4Addr::new(224, 0, 0, 0)), 3),
                Addrs::cidr(fam, n4(Ipv4Addr::new(169, 254, 0, 0)), 16),
            ];
            vec![bad.iter().fold(Addrs::all(fam), |a, b| a.minus(b))]
        }
        Fam::V6 => {
            let global = Addrs::cidr(fam, n6(Ipv6Addr::new(0x2000, 0, 0, 0, 0, 0, 0, 0)), 3);
            let ula = Addrs::cidr(fam, n6(Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0)), 7);
            vec![global, ula]
        }
    }
}

fn to_ip(fam: Fam, n: u128) -> IpAddr {
    match fam {
        Fam::V4 => IpAddr::V4(Ipv4Addr::from(n as u32)),
        Fam::V6 => IpAddr::V6(Ipv6Addr::from(n)),
    }
}

fn to_num(a: IpAddr) -> u128 {
    match a {
        IpAddr::V4(v) => u128::from(u32::from(v)),
        IpAddr::V6(v) => u128::from(v),
    }
}

/// An address inside `sources` that a client can send from: ordinary unicast, none of `avoid`
/// (the node's own addresses and those other probes took), one past the start of its span
/// where the span allows (so not a network's first address).
pub fn representative(sources: &Addrs, avoid: &[IpAddr]) -> Option<IpAddr> {
    let fam = sources.fam;
    let avoided = avoid
        .iter()
        .filter(|a| Fam::of(**a) == fam)
        .fold(Addrs::none(fam), |s, a| s.union(&Addrs::one(*a)));
    for region in ordinary(fam) {
        for &(lo, hi) in sources.intersect(&region).spans() {
            let start = if hi > lo { lo + 1 } else { lo };
            let mut n = start;
            loop {
                if !avoided.contains(to_ip(fam, n)) {
                    return Some(to_ip(fam, n));
                }
                if n == hi {
                    break;
                }
                n += 1;
            }
            if start != lo && !avoided.contains(to_ip(fam, lo)) {
                return Some(to_ip(fam, lo));
            }
        }
    }
    None
}

fn is_link_local(a: IpAddr) -> bool {
    match a {
        IpAddr::V6(v) => v.segments()[0] & 0xffc0 == 0xfe80,
        IpAddr::V4(v) => v.is_link_local(),
    }
}

/// Why a part of a way gets no probe.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoShot {
    #[error("only tcp is confirmed (a SYN)")]
    NotTcp,
    #[error("no interface of this machine holds the container's network")]
    NoNetwork,
    #[error("{oif} has no address in the network of {target}")]
    NoGateway { oif: String, target: IpAddr },
    #[error("{iif} has no {family} address to send to")]
    NoAddress { iif: String, family: &'static str },
    #[error("it arrives on and leaves by {0} (a hairpin), which is not probed")]
    Hairpin(String),
    #[error("no unicast address in {0} to send from but this machine's or a host behind's own")]
    NoSource(String),
}

/// The probe for each part of each way, or why there is none. Pure: what the scratch
/// namespaces are then built for.
pub fn plan(
    ways: &[(Way, Answer)],
    ifaces: &[Iface],
) -> Vec<Vec<std::result::Result<Shot, NoShot>>> {
    // Neither the node's addresses nor a host behind it is taken as a probe's source: each is
    // held in a namespace of its own, where a source of the same address would answer itself,
    // and a source is routed back through the interface it arrives on, so a probe sent from a
    // host behind's address would take the scratch node's way to that host.
    let own: Vec<IpAddr> = ifaces
        .iter()
        .flat_map(|i| i.addrs.iter().map(|(a, _)| *a))
        .chain(
            ways.iter()
                .filter(|(w, _)| w.conn.path == Path::Forwarded)
                .filter_map(|(w, _)| w.conn.daddr),
        )
        .collect();
    let mut used = own.clone();
    // Which interface each source is routed back through, per round.
    let mut rounds: Vec<Vec<(IpAddr, String)>> = Vec::new();
    let mut out = Vec::new();
    for (w, a) in ways {
        let c = &w.conn;
        let node_addr = ifaces.iter().find(|i| i.name == c.iif).and_then(|i| {
            i.addrs
                .iter()
                .map(|(a, _)| *a)
                .find(|a| Fam::of(*a) == c.fam && !is_link_local(*a))
        });
        let behind = match c.path {
            Path::Incoming => Ok(None),
            Path::Forwarded => behind(c, ifaces).map(Some),
        };
        let mut shots = Vec::new();
        for part in &a.parts {
            let shot = (|| {
                if c.proto != 6 {
                    return Err(NoShot::NotTcp);
                }
                let behind = behind.clone()?;
                // Routed on as sent (no DNAT), the SYN is addressed to the host behind itself;
                // otherwise to the node, whose DNAT sends it on.
                let dst = match &behind {
                    Some(b) if c.routed => b.target.ip(),
                    _ => node_addr.ok_or_else(|| NoShot::NoAddress {
                        iif: c.iif.clone(),
                        family: c.fam.name(),
                    })?,
                };
                if behind.as_ref().is_some_and(|b| b.oif == c.iif) {
                    // The client and the host behind would share one side; on a node too the
                    // reply goes straight between them, never back through the translation.
                    return Err(NoShot::Hairpin(c.iif.clone()));
                }
                // A source of its own where the part has one to spare; otherwise one another
                // probe uses, sent in a later round when that one arrives elsewhere.
                let src = representative(&part.sources, &used)
                    .or_else(|| representative(&part.sources, &own))
                    .ok_or_else(|| NoShot::NoSource(part.sources.cidrs().join(", ")))?;
                used.push(src);
                let round = match rounds
                    .iter()
                    .position(|r| r.iter().all(|(a, i)| *a != src || *i == c.iif))
                {
                    Some(r) => r,
                    None => {
                        rounds.push(Vec::new());
                        rounds.len() - 1
                    }
                };
                rounds[round].push((src, c.iif.clone()));
                Ok(Shot {
                    fam: c.fam,
                    iif: c.iif.clone(),
                    src,
                    dst: SocketAddr::new(dst, c.port),
                    behind,
                    round,
                })
            })();
            shots.push(shot);
        }
        out.push(shots);
    }
    out
}

/// The host behind a forwarded way: the container's address and port on the interface it
/// leaves by, with the node's address in that network as its gateway.
fn behind(c: &crate::eval::Conn, ifaces: &[Iface]) -> std::result::Result<Behind, NoShot> {
    let (Some(target), Some(oif)) = (c.daddr, c.oif.as_ref()) else {
        return Err(NoShot::NoNetwork);
    };
    let iface = ifaces.iter().find(|i| &i.name == oif);
    let gw = iface.and_then(|i| {
        i.addrs.iter().find(|(a, len)| {
            Fam::of(*a) == c.fam
                && *a != target
                && Addrs::cidr(c.fam, to_num(*a), u32::from(*len)).contains(target)
        })
    });
    let Some((gateway, _)) = gw else {
        return Err(NoShot::NoGateway {
            oif: oif.clone(),
            target,
        });
    };
    Ok(Behind {
        oif: oif.clone(),
        target: SocketAddr::new(target, c.to_port.unwrap_or(c.port)),
        gateway: *gateway,
    })
}

/// What the confirmation found: one probe per part of each way, in the order asked, and the
/// scratch namespaces it made (all removed by the time this is returned).
#[derive(Debug, Clone, Default)]
pub struct Confirmation {
    pub probes: Vec<Vec<Probe>>,
    pub namespaces: Vec<String>,
    /// What was not recreated (a route the scratch node would not take).
    pub notes: Vec<String>,
}

/// The kernel asked about `ways` against the ruleset of the calling process's network namespace
/// as it stands now: its listing captured by its own tools ([`capture`]), the namespace's
/// interfaces read, and [`confirm`] run within `budget`. The one confirmation of a list of ways:
/// `firewall explain --confirm` asks it about one port's ways, `apply --confirm` about every
/// declared opening's at once.
pub fn on_node(
    exec: &dyn Runner,
    ways: &[(Way, Answer)],
    budget: Duration,
) -> Result<Confirmation> {
    let listing = capture(exec)?;
    let ifaces = crate::eval::interfaces();
    confirm(exec, &listing, &ifaces, ways, budget)
}

/// How the parts of some ways stand beside the kernel's probes: how many agree, disagree, were
/// settled where the evaluator was doubtful, and were not probed; and whether every part is
/// admitted with the kernel's verdict standing where it was asked (the evaluator's elsewhere).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Tally {
    pub agreeing: usize,
    pub disagreeing: usize,
    pub settled: usize,
    pub unprobed: usize,
    /// Every part admitted, by the kernel where it was probed; false when there is no way.
    pub kernel_admits: bool,
}

impl Tally {
    /// The tally of `ways` and their `probes` (one per part, in order, as [`Confirmation`]
    /// holds them).
    pub fn of(ways: &[(Way, Answer)], probes: &[Vec<Probe>]) -> Tally {
        let mut t = Tally {
            kernel_admits: !ways.is_empty(),
            ..Tally::default()
        };
        for ((_, a), probes) in ways.iter().zip(probes) {
            for (p, pr) in a.parts.iter().zip(probes) {
                t.kernel_admits &= pr.kernel.admitted().unwrap_or(p.fate == Fate::Admitted);
                match agreement(&p.fate, &pr.kernel) {
                    Agreement::Agrees => t.agreeing += 1,
                    Agreement::Disagrees => t.disagreeing += 1,
                    Agreement::Settled => t.settled += 1,
                    Agreement::Unprobed => t.unprobed += 1,
                }
            }
        }
        t
    }
}

/// A part's fate with the kernel's verdict standing, as one word of [`Fate::word`]: where the
/// kernel was asked, `admitted` when it connected, else the evaluator's `refused` (the
/// operator's refusal, which the kernel bore out) or `not-admitted`; where it was not asked,
/// the evaluator's word.
pub fn standing(fate: &Fate, kernel: &Kernel) -> &'static str {
    match kernel.admitted() {
        None => fate.word(),
        Some(true) => "admitted",
        Some(false) if matches!(fate, Fate::Refused { .. }) => "refused",
        Some(false) => "not-admitted",
    }
}

/// Loads `listing` into scratch namespaces shaped like `ifaces` and sends the probes of
/// [`plan`], within `budget`.
pub fn confirm(
    exec: &dyn Runner,
    listing: &Listing,
    ifaces: &[Iface],
    ways: &[(Way, Answer)],
    budget: Duration,
) -> Result<Confirmation> {
    let planned = plan(ways, ifaces);
    let reaped = scratch::reap(exec);
    let mut s = scratch::Scratch::new(exec, Instant::now() + budget);
    let result = scratch::run(&mut s, listing, ifaces, &planned);
    let namespaces = s.names.clone();
    s.remove();
    let (probes, mut notes) = result?;
    notes.extend(
        reaped
            .into_iter()
            .map(|n| format!("removed {n}, left by a confirmation whose process was killed")),
    );
    Ok(Confirmation {
        probes,
        namespaces,
        notes,
    })
}

#[cfg(test)]
mod tests;
