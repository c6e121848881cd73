//! The guard's second layer: a netfilter BPF program beside the `inet mesh_host` table, which no
//! ruleset change can lift (`nft flush ruleset`, `nft -f`, `iptables-restore` leave it), pinned
//! in bpffs so it holds while no mesh-host runs.
//!
//! One program is attached by four netfilter links (IPv4 and IPv6, INPUT and FORWARD, priority
//! -150, fragments reassembled first); three maps say what it refuses: the ports (host ports on
//! INPUT, container ports on FORWARD towards a runtime's bridge), the interfaces (exempt:
//! loopback and the runtime's bridges; private: the private network's; runtime: the bridges) and
//! the nets (the private network's source ranges, a longest-prefix-match map): a packet on the
//! private interface passes only from a source in them. The maps are changed in place, new
//! entries before stale ones go, so a change never opens a window.
//!
//! Links belong to the network namespace of the thread that creates them; everything here acts
//! in the calling thread's namespace. Pins are found and reclaimed by name, so a restart after
//! `kill -9` takes the same links back and never attaches a second set.

pub mod asm;
pub mod btf;
mod pins;
mod place;
pub mod prog;
pub mod seam;
pub mod sys;

pub use pins::{is_bpffs, Pins};

use std::os::fd::{AsRawFd, OwnedFd};

use crate::error::{Errno, Error, Result};
use crate::guard::GuardSpec;
use crate::opening::check_exact_interface;
use prog::{
    iface_key, net_key, port_key, Layout, HOOK_FORWARD, HOOK_LOCAL_IN, IFACE_EXEMPT, IFACE_PRIVATE,
    IFACE_RUNTIME, KIND_CONTAINER, KIND_HOST, NET_KEY_SIZE, NET_V4, NFPROTO_IPV4, NFPROTO_IPV6,
};
pub use sys::{LinkInfo, F_NETFILTER_IP_DEFRAG};

/// The program's name in the kernel; the version after `_v` changes whenever its code does, so
/// a host of another version replaces a pinned program rather than reclaiming it.
pub const PROG_NAME: &str = "mh_guard_v2";
/// Where the pins live under a root (`/` on a node): `sys/fs/bpf/mesh-host`.
pub const PIN_SUBDIR: &str = "sys/fs/bpf/mesh-host";
/// The bpffs mount point under a root.
pub const BPFFS_SUBDIR: &str = "sys/fs/bpf";
/// The hook priority: ahead of destination NAT (-100), after conntrack and defragmentation.
pub const PRIORITY: i32 = -150;
/// The kernel refuses two BPF hooks at one priority of one hook (EBUSY), so a link that
/// replaces another is attached at the other of two neighbouring priorities, and the old one
/// detached after: the layer is at -150 or at -149.
pub const PRIORITIES: [i32; 2] = [PRIORITY, PRIORITY + 1];

const PORTS_MAX: u32 = 256;
const IFACES_MAX: u32 = 1024;
const NETS_MAX: u32 = 64;

/// The four hooks, each with its pin's name.
pub const HOOKS: [(u32, u32, &str); 4] = [
    (NFPROTO_IPV4, HOOK_LOCAL_IN, "link-ipv4-input"),
    (NFPROTO_IPV4, HOOK_FORWARD, "link-ipv4-forward"),
    (NFPROTO_IPV6, HOOK_LOCAL_IN, "link-ipv6-input"),
    (NFPROTO_IPV6, HOOK_FORWARD, "link-ipv6-forward"),
];

/// The ports map's entries a spec asks for.
fn want_ports(spec: &GuardSpec) -> Vec<[u8; 4]> {
    let mut out = Vec::new();
    for p in &spec.ports {
        out.push(port_key(p.host_port, p.proto.number(), KIND_HOST));
        out.push(port_key(p.container_port, p.proto.number(), KIND_CONTAINER));
    }
    out.sort();
    out.dedup();
    out
}

/// The interfaces map's entries a spec asks for.
fn want_ifaces(spec: &GuardSpec) -> Result<Vec<([u8; 16], u32)>> {
    let private = spec.private.as_ref().map(|p| &p.interface);
    for name in spec.allowed.iter().chain(&spec.runtimes).chain(private) {
        check_exact_interface(name, "guard").map_err(|reason| Error::InvalidOpening {
            id: "guard".into(),
            reason: reason.to_string(),
        })?;
    }
    let mut out = Vec::new();
    for name in &spec.allowed {
        let runtime = spec.runtimes.iter().any(|r| r == name);
        let flags = IFACE_EXEMPT | if runtime { IFACE_RUNTIME } else { 0 };
        out.push((iface_key(name), flags));
    }
    for name in &spec.runtimes {
        if !spec.allowed.contains(name) {
            out.push((iface_key(name), IFACE_EXEMPT | IFACE_RUNTIME));
        }
    }
    if let Some(p) = &spec.private {
        if !out.iter().any(|(k, _)| *k == iface_key(&p.interface)) {
            out.push((iface_key(&p.interface), IFACE_PRIVATE));
        }
    }
    Ok(out)
}

/// The nets map's entries a spec asks for: the private network's ranges.
fn want_nets(spec: &GuardSpec) -> Vec<[u8; NET_KEY_SIZE]> {
    let mut out: Vec<[u8; NET_KEY_SIZE]> = spec
        .private
        .iter()
        .flat_map(|p| &p.ranges)
        .map(|n| net_key(n.addr, n.len))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The program and its maps, loaded in the kernel (not yet attached or pinned).
pub struct Program {
    pub prog: OwnedFd,
    pub ports: OwnedFd,
    pub ifaces: OwnedFd,
    pub nets: OwnedFd,
    /// The kernel's layout, read when the program was assembled here (not for one reclaimed).
    pub layout: Option<Layout>,
}

impl Program {
    /// Creates the maps and loads the program for the running kernel's layout.
    pub fn load() -> Result<Program> {
        let ports = sys::map_create("mh_guard_ports", 4, 1, PORTS_MAX)?;
        let ifaces = sys::map_create("mh_guard_ifaces", 16, 4, IFACES_MAX)?;
        let nets = sys::map_create_lpm("mh_guard_nets", NET_KEY_SIZE as u32, 4, NETS_MAX)?;
        Program::load_with(ports, ifaces, nets)
    }

    fn load_with(ports: OwnedFd, ifaces: OwnedFd, nets: OwnedFd) -> Result<Program> {
        let layout = Layout::from_btf(&btf::Btf::vmlinux()?)?;
        let insns = prog::build(
            &layout,
            ports.as_raw_fd(),
            ifaces.as_raw_fd(),
            nets.as_raw_fd(),
            sys::netns_cookie()?,
        );
        let prog = sys::prog_load_netfilter(PROG_NAME, &insns)?;
        Ok(Program {
            prog,
            ports,
            ifaces,
            nets,
            layout: Some(layout),
        })
    }

    /// Makes the maps say what `spec` says, in place: entries added or changed first, stale
    /// ones removed last. Returns whether anything changed.
    pub fn set(&self, spec: &GuardSpec) -> Result<bool> {
        let ports = want_ports(spec);
        let ifaces = want_ifaces(spec)?;
        let nets = want_nets(spec);
        let mut changed = false;
        // A prefix map's lookup answers with the longest match, not the key: compared by keys.
        let have_nets = sys::map_keys(&self.nets, "map mh_guard_nets", NET_KEY_SIZE)?;
        for k in &nets {
            if !have_nets.iter().any(|h| h[..] == k[..]) {
                sys::map_update(&self.nets, "map mh_guard_nets", k, &1u32.to_ne_bytes())?;
                changed = true;
            }
        }
        for k in &ports {
            if sys::map_lookup(&self.ports, "map mh_guard_ports", k, 1)?.is_none() {
                sys::map_update(&self.ports, "map mh_guard_ports", k, &[1])?;
                changed = true;
            }
        }
        for (k, flags) in &ifaces {
            let v = flags.to_ne_bytes();
            let now = sys::map_lookup(&self.ifaces, "map mh_guard_ifaces", k, 4)?;
            if now.as_deref() != Some(&v[..]) {
                sys::map_update(&self.ifaces, "map mh_guard_ifaces", k, &v)?;
                changed = true;
            }
        }
        for k in sys::map_keys(&self.ports, "map mh_guard_ports", 4)? {
            if !ports.iter().any(|p| p[..] == k[..]) {
                sys::map_delete(&self.ports, "map mh_guard_ports", &k)?;
                changed = true;
            }
        }
        for k in sys::map_keys(&self.ifaces, "map mh_guard_ifaces", 16)? {
            if !ifaces.iter().any(|(i, _)| i[..] == k[..]) {
                sys::map_delete(&self.ifaces, "map mh_guard_ifaces", &k)?;
                changed = true;
            }
        }
        for k in have_nets {
            if !nets.iter().any(|n| n[..] == k[..]) {
                sys::map_delete(&self.nets, "map mh_guard_nets", &k)?;
                changed = true;
            }
        }
        Ok(changed)
    }

    /// What the maps hold now.
    pub fn contents(&self) -> Result<Contents> {
        contents(&self.ports, &self.ifaces, &self.nets)
    }

    /// Runs the program once on `packet` as if at `hook` of family `pf` (`BPF_PROG_TEST_RUN`;
    /// outside LOCAL_OUT the packet starts with its Ethernet header); returns the verdict.
    pub fn test_run(&self, pf: u32, hook: u32, packet: &[u8]) -> Result<u32> {
        let layout = match self.layout {
            Some(l) => l,
            None => Layout::from_btf(&btf::Btf::vmlinux()?)?,
        };
        let mut ctx = vec![0u8; layout.state_size as usize];
        ctx[layout.state_hook as usize] = hook as u8;
        ctx[layout.state_pf as usize] = pf as u8;
        sys::prog_test_run(&self.prog, packet, &ctx)
    }
}

/// What the two maps hold, as a person reads them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Contents {
    /// `tcp/5432 host`, `tcp/5432 container`, sorted.
    pub ports: Vec<String>,
    /// `lo exempt`, `docker0 exempt runtime`, `mesh0 private`, sorted.
    pub ifaces: Vec<String>,
    /// The private network's source ranges, `10.77.0.0/24`, sorted.
    #[cfg_attr(feature = "serde", serde(default))]
    pub nets: Vec<String>,
}

fn contents(ports: &OwnedFd, ifaces: &OwnedFd, nets: &OwnedFd) -> Result<Contents> {
    let mut out = Contents::default();
    for k in sys::map_keys(ports, "map mh_guard_ports", 4)? {
        let proto = match k[2] {
            6 => "tcp".to_string(),
            17 => "udp".to_string(),
            n => format!("proto{n}"),
        };
        let kind = if k[3] == KIND_CONTAINER {
            "container"
        } else {
            "host"
        };
        out.ports.push(format!(
            "{proto}/{} {kind}",
            u16::from_be_bytes([k[0], k[1]])
        ));
    }
    for k in sys::map_keys(ifaces, "map mh_guard_ifaces", 16)? {
        let v = sys::map_lookup(ifaces, "map mh_guard_ifaces", &k, 4)?.unwrap_or_default();
        let flags = u32::from_ne_bytes(v.try_into().unwrap_or([0; 4]));
        let end = k.iter().position(|&b| b == 0).unwrap_or(16);
        let mut s = String::from_utf8_lossy(&k[..end]).into_owned();
        if flags & IFACE_EXEMPT != 0 {
            s.push_str(" exempt");
        }
        if flags & IFACE_RUNTIME != 0 {
            s.push_str(" runtime");
        }
        if flags & IFACE_PRIVATE != 0 {
            s.push_str(" private");
        }
        out.ifaces.push(s);
    }
    for k in sys::map_keys(nets, "map mh_guard_nets", NET_KEY_SIZE)? {
        let len = u32::from_ne_bytes([k[0], k[1], k[2], k[3]]).saturating_sub(32);
        let addr: std::net::IpAddr = if k[4] == NET_V4 {
            std::net::Ipv4Addr::new(k[8], k[9], k[10], k[11]).into()
        } else {
            let mut a = [0u8; 16];
            a.copy_from_slice(&k[8..24]);
            std::net::Ipv6Addr::from(a).into()
        };
        out.nets.push(format!("{addr}/{len}"));
    }
    out.nets.sort();
    out.ports.sort();
    out.ifaces.sort();
    Ok(out)
}

/// What [`ensure`] found and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loaded {
    /// Nothing was pinned: the program was loaded, attached and pinned.
    Created,
    /// The pinned program and its four links were there and taken back as they are.
    Reclaimed,
    /// Something pinned was missing or of another version: what was there was kept until the
    /// new links were attached, then replaced.
    Replaced,
    /// Nothing was pinned here, but the kernel held this namespace's program and links (pinned
    /// in a bpffs mounted over, or a pin deleted while a link held on): they were taken back by
    /// id and pinned again, never a second set.
    Found,
}

/// How the layer stands after [`ensure`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BpfReport {
    pub loaded: Loaded,
    /// Whether the maps had to be changed.
    pub changed: bool,
    /// The kernel's ids of the four links.
    pub link_ids: Vec<u32>,
    /// This namespace's guard links the kernel held beside the four, detached.
    pub detached: Vec<u32>,
}

/// The layer as it is pinned, read without changing anything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct BpfStatus {
    /// The program pinned, by its name (its version).
    pub program: Option<String>,
    /// The links pinned and attached, by pin name.
    pub links: Vec<String>,
    /// Their kernel ids, in the same order.
    pub link_ids: Vec<u32>,
    pub contents: Contents,
}

impl BpfStatus {
    /// All four links pinned with the program of this version: the layer holds.
    pub fn holds(&self) -> bool {
        self.program.as_deref() == Some(PROG_NAME) && self.links.len() == HOOKS.len()
    }
}

/// A pinned link that still is what its name says: a netfilter link of that family and hook,
/// at the guard's priority, with the defrag flag, running program `prog_id`.
pub(super) fn link_ok(info: &LinkInfo, pf: u32, hook: u32, prog_id: u32) -> bool {
    info.link_type == sys::LINK_TYPE_NETFILTER
        && info.pf == pf
        && info.hooknum == hook
        && PRIORITIES.contains(&info.priority)
        && info.flags & F_NETFILTER_IP_DEFRAG != 0
        && info.prog_id == prog_id
}

/// The program and the maps pinned together, when every one of them is.
struct Pinned {
    prog: OwnedFd,
    ports: OwnedFd,
    ifaces: OwnedFd,
    nets: OwnedFd,
}

/// The objects pinned beside the links, by pin name.
const OBJECTS: [&str; 4] = ["prog", "ports", "ifaces", "nets"];

fn open_pinned(pins: &Pins) -> Result<Option<Pinned>> {
    let prog = sys::obj_get(&pins.path("prog"))?;
    let ports = sys::obj_get(&pins.path("ports"))?;
    let ifaces = sys::obj_get(&pins.path("ifaces"))?;
    let nets = sys::obj_get(&pins.path("nets"))?;
    Ok(match (prog, ports, ifaces, nets) {
        (Some(prog), Some(ports), Some(ifaces), Some(nets)) => Some(Pinned {
            prog,
            ports,
            ifaces,
            nets,
        }),
        _ => None,
    })
}

/// One of this namespace's guard links as the kernel holds it, pinned here or not.
pub struct HeldLink {
    pub info: LinkInfo,
    pub fd: OwnedFd,
}

/// The netfilter links in the kernel (every namespace's: `BPF_LINK_GET_NEXT_ID` walks them all)
/// whose program is named [`PROG_NAME`] with `tag`, and still attached. The tag is a digest of
/// the program's instructions, which carry the cookie of the namespace it was loaded for, so
/// these are this namespace's guard links and no other's. A detached link lives on while a pin
/// holds it and reads as it was; the kernel refuses a second BPF hook at a priority one holds
/// (EBUSY), so `probe` (a guard program) is attached at each link's hook and priority for an
/// instant: refused, the link is attached; taken, it is not, and the probe is closed at once.
pub fn held_links(tag: [u8; 8], probe: &OwnedFd) -> Result<Vec<HeldLink>> {
    let mut out = Vec::new();
    let mut ours: std::collections::HashMap<u32, bool> = std::collections::HashMap::new();
    let mut id = 0;
    while let Some(next) = sys::link_next_id(id)? {
        id = next;
        let Some(fd) = sys::link_by_id(id)? else {
            continue;
        };
        let info = sys::link_info(&fd, &format!("link {id}"))?;
        if info.link_type != sys::LINK_TYPE_NETFILTER {
            continue;
        }
        let mine = match ours.get(&info.prog_id) {
            Some(m) => *m,
            None => {
                let m = match sys::prog_by_id(info.prog_id)? {
                    Some(p) => {
                        let pi = sys::prog_info(&p, &format!("program {}", info.prog_id))?;
                        pi.name() == PROG_NAME && pi.tag == tag
                    }
                    None => false,
                };
                ours.insert(info.prog_id, m);
                m
            }
        };
        if mine && attached(probe, &info)? {
            out.push(HeldLink { info, fd });
        }
    }
    Ok(out)
}

/// Whether a netfilter link of this namespace is attached: whether its priority at its hook is
/// held by a BPF hook here.
fn attached(probe: &OwnedFd, info: &LinkInfo) -> Result<bool> {
    match sys::link_create_netfilter(probe, info.pf, info.hooknum, info.priority, info.flags) {
        Ok(fd) => {
            drop(fd);
            Ok(false)
        }
        Err(Error::Bpf {
            errno: Errno(e), ..
        }) if e == nix::errno::Errno::EBUSY as i32 => Ok(true),
        Err(e) => Err(e),
    }
}

/// This namespace's guard as the kernel holds it when nothing is pinned here: the program (of
/// `fresh`'s name and tag) that most of its links run, and its maps, opened by id.
fn found_in_kernel(fresh: &Program) -> Result<Option<(Program, u32)>> {
    let me = sys::prog_info(&fresh.prog, "guard program")?;
    let mut counts: std::collections::BTreeMap<u32, usize> = Default::default();
    for l in held_links(me.tag, &fresh.prog)? {
        if l.info.prog_id != me.id {
            *counts.entry(l.info.prog_id).or_default() += 1;
        }
    }
    let Some((&id, _)) = counts.iter().max_by_key(|(_, n)| **n) else {
        return Ok(None);
    };
    let Some(prog) = sys::prog_by_id(id)? else {
        return Ok(None);
    };
    let (mut ports, mut ifaces, mut nets) = (None, None, None);
    for mid in sys::prog_map_ids(&prog, "the guard program found in the kernel")? {
        let Some(m) = sys::map_by_id(mid)? else {
            continue;
        };
        match sys::map_info(&m, &format!("map {mid}"))?.name().as_str() {
            "mh_guard_ports" => ports = Some(m),
            "mh_guard_ifaces" => ifaces = Some(m),
            "mh_guard_nets" => nets = Some(m),
            _ => {}
        }
    }
    let (Some(ports), Some(ifaces), Some(nets)) = (ports, ifaces, nets) else {
        return Ok(None);
    };
    let program = Program {
        prog,
        ports,
        ifaces,
        nets,
        layout: fresh.layout,
    };
    Ok(Some((program, id)))
}

/// The pinned objects reused when they are of this version's shapes, with the program's id and
/// name.
fn reusable(pinned: Option<Pinned>) -> Result<Option<(Pinned, u32, String)>> {
    let Some(p) = pinned else {
        return Ok(None);
    };
    let pi = sys::prog_info(&p.prog, "pinned program")?;
    let mi = sys::map_info(&p.ports, "pinned map mh_guard_ports")?;
    let ii = sys::map_info(&p.ifaces, "pinned map mh_guard_ifaces")?;
    let ni = sys::map_info(&p.nets, "pinned map mh_guard_nets")?;
    let shapes = (mi.key_size, mi.value_size, ii.key_size, ii.value_size);
    let nets = (ni.map_type, ni.key_size, ni.value_size);
    Ok(
        (shapes == (4, 1, 16, 4) && nets == (sys::MAP_TYPE_LPM_TRIE, NET_KEY_SIZE as u32, 4))
            .then(|| (p, pi.id, pi.name())),
    )
}

/// Loads, attaches and pins the layer as `spec` says, or reclaims what is pinned or what the
/// kernel holds for this namespace; idempotent. Must run on a thread in the node's namespace.
pub fn ensure(pins: &Pins, spec: &GuardSpec) -> Result<BpfReport> {
    pins.prepare()?;
    // One host at a time: an apply ensures the guard before it takes the store's lock, so a
    // resident host's reconcile may be doing the same.
    let _lock = pins.lock()?;
    // The maps: the pinned ones when they have the right shape (the old program, still attached,
    // keeps using them), new ones otherwise; with nothing pinned, what the kernel holds.
    let (program, old_prog, mut loaded) = match reusable(open_pinned(pins)?)? {
        Some((p, id, name)) if name == PROG_NAME => {
            let prog = Program {
                prog: p.prog,
                ports: p.ports,
                ifaces: p.ifaces,
                nets: p.nets,
                layout: None,
            };
            (prog, Some(id), Loaded::Reclaimed)
        }
        Some((p, _, _)) => (
            Program::load_with(p.ports, p.ifaces, p.nets)?,
            None,
            Loaded::Replaced,
        ),
        None => {
            let fresh = Program::load()?;
            match found_in_kernel(&fresh)? {
                Some((found, id)) => (found, Some(id), Loaded::Found),
                None => (fresh, None, Loaded::Created),
            }
        }
    };
    // The maps first: a new link refuses what the settings say from its first packet.
    let changed = program.set(spec)?;
    let me = sys::prog_info(&program.prog, "guard program")?;
    let prog_id = me.id;
    let mut held = held_links(me.tag, &program.prog)?;
    let placed = place::place_links(
        &seam::Kernel,
        pins,
        &program.prog,
        prog_id,
        old_prog,
        &mut held,
    )?;
    if placed.attached_new && loaded == Loaded::Reclaimed {
        loaded = Loaded::Replaced;
    }
    let link_ids = placed.link_ids;
    // This namespace's guard links beyond the four (a second set an earlier version attached
    // past a pin it could not see): detached, now that the four are in place.
    let mut detached = Vec::new();
    for l in held.into_iter().filter(|l| !link_ids.contains(&l.info.id)) {
        if sys::link_detach(&l.fd, &format!("stray guard link {}", l.info.id)).is_ok() {
            detached.push(l.info.id);
        }
    }
    if loaded != Loaded::Reclaimed {
        for (fd, name) in [
            &program.prog,
            &program.ports,
            &program.ifaces,
            &program.nets,
        ]
        .into_iter()
        .zip(OBJECTS)
        {
            let path = pins.path(name);
            seam::unpin(&path)?;
            sys::obj_pin(fd, &path)?;
        }
    }
    Ok(BpfReport {
        loaded,
        changed,
        link_ids,
        detached,
    })
}

/// This namespace's guard program: the pinned one when it is of this version, else one loaded
/// now (never attached, dropped with the handle); `None` where the kernel refuses the program,
/// so none of it can be attached. Its tag finds the namespace's links among all.
pub fn own_program(pins: &Pins) -> Result<Option<OwnedFd>> {
    if let Some(p) = pinned_program(pins)? {
        return Ok(Some(p));
    }
    Ok(Program::load().ok().map(|p| p.prog))
}

/// This namespace's guard links the kernel holds attached, pinned here or not, by the tag of
/// [`own_program`].
pub fn held(pins: &Pins) -> Result<Vec<LinkInfo>> {
    Ok(survey(pins)?.0)
}

/// [`held`], and where nothing of this version is pinned, whether this kernel takes the program
/// at all (the error it refused it with): one program loaded at most, for the status.
pub fn survey(pins: &Pins) -> Result<(Vec<LinkInfo>, Option<Error>)> {
    let prog = match pinned_program(pins)? {
        Some(p) => p,
        None => match Program::load() {
            Ok(p) => p.prog,
            Err(e) => return Ok((Vec::new(), Some(e))),
        },
    };
    let tag = sys::prog_info(&prog, "guard program")?.tag;
    let links = held_links(tag, &prog)?;
    Ok((links.into_iter().map(|l| l.info).collect(), None))
}

/// The pinned program when it is of this version.
fn pinned_program(pins: &Pins) -> Result<Option<OwnedFd>> {
    if !is_bpffs(&pins.fs) {
        return Ok(None);
    }
    let Some(prog) = sys::obj_get(&pins.path("prog"))? else {
        return Ok(None);
    };
    Ok((sys::prog_info(&prog, "pinned program")?.name() == PROG_NAME).then_some(prog))
}

/// Detaches and unpins the layer, and detaches every link of this namespace's guard the kernel
/// holds besides (pinned in a bpffs out of sight); returns whether there was any. The bpffs and
/// the pins' directory stay.
pub fn remove(pins: &Pins) -> Result<bool> {
    let prog = own_program(pins)?;
    let mut found = remove_pinned(pins)?;
    if let Some(prog) = prog {
        let tag = sys::prog_info(&prog, "guard program")?.tag;
        for l in held_links(tag, &prog)? {
            found = true;
            let _ = sys::link_detach(&l.fd, &format!("guard link {}", l.info.id));
        }
    }
    Ok(found)
}

fn remove_pinned(pins: &Pins) -> Result<bool> {
    if !is_bpffs(&pins.fs) {
        return Ok(false);
    }
    let _lock = match pins.lock() {
        Ok(l) => l,
        Err(_) if !pins.dir.exists() => return Ok(false),
        Err(e) => return Err(e),
    };
    let mut found = false;
    for (_, _, name) in HOOKS {
        let path = pins.path(name);
        if let Some(link) = sys::obj_get(&path)? {
            found = true;
            // Detached first, so the hook is gone even while another process holds the link.
            let _ = sys::link_detach(&link, &format!("link {}", path.display()));
            seam::unpin(&path)?;
        }
    }
    for name in OBJECTS {
        let path = pins.path(name);
        found |= path.exists();
        seam::unpin(&path)?;
    }
    // The directory stays: a host waiting on its lock finds it there.
    Ok(found)
}

/// Reads the pinned layer without changing anything.
pub fn status(pins: &Pins) -> Result<BpfStatus> {
    let mut st = BpfStatus::default();
    if !is_bpffs(&pins.fs) {
        return Ok(st);
    }
    let Some(pinned) = open_pinned(pins)? else {
        return Ok(st);
    };
    let pi = sys::prog_info(&pinned.prog, "pinned program")?;
    st.program = Some(pi.name());
    for (pf, hook, name) in HOOKS {
        let path = pins.path(name);
        if let Some(link) = sys::obj_get(&path)? {
            let info = sys::link_info(&link, &format!("pinned link {}", path.display()))?;
            if link_ok(&info, pf, hook, pi.id) {
                st.links.push(name.to_string());
                st.link_ids.push(info.id);
            }
        }
    }
    st.contents = contents(&pinned.ports, &pinned.ifaces, &pinned.nets)?;
    Ok(st)
}

/// Whether this kernel takes the program (netfilter programs, the kfunc, BTF): loads it once,
/// attaches nothing. The error says what the kernel refused.
pub fn supported() -> Result<()> {
    Program::load().map(drop)
}

#[cfg(test)]
mod tests;
