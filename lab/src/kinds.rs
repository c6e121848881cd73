//! The kinds of found firewall: the firewall a predecessor leaves on a machine, in each kind the
//! host speaks, its configuration written where that kind keeps it, loaded the way its boot unit
//! loads it, and read back as text.
//!
//! One [`FoundFirewall`] per kind, one file per kind under `kinds/`, chosen by [`FoundKind`]. A
//! kind that is a daemon or keeps its files elsewhere (firewalld, ufw) drives what `found.rs` runs
//! for it and hands the bed a [`Live`]: what runs for it, and what every program the bed runs in
//! the node needs in front of it to see that kind (firewalld's bus, ufw's mount namespace).
//! Nothing else in the bed knows how a kind is written or loaded.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::exec;
use crate::machine::Machine;

mod firewalld;
mod iptables;
mod nftables;
mod ufw;

/// The kinds of found firewall the bed prepares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum FoundKind {
    /// Hand-written nftables: `/etc/nftables.conf`, starting with `flush ruleset` as Debian's does,
    /// loaded with `nft -f`.
    Nftables,
    /// iptables through its nf_tables backend: `/etc/iptables/rules.v4` and `rules.v6`, loaded with
    /// `iptables-nft-restore` (netfilter-persistent's files).
    IptablesNft,
    /// iptables on the legacy x_tables backend: the same files, loaded with
    /// `iptables-legacy-restore`.
    IptablesLegacy,
    /// firewalld (its nftables backend) on a bus of its own: the public zone, in the lab's copy
    /// of `/etc/firewalld`, admitting the served port and ssh and refusing the rest.
    Firewalld,
    /// ufw with its own `/etc/ufw`: `ufw default deny incoming`, `ufw allow` of ssh and the served
    /// port, `ufw enable`.
    Ufw,
}

impl FoundKind {
    /// Every kind the bed prepares today, in the order the suite runs them.
    pub const ALL: [FoundKind; 5] = [
        FoundKind::Nftables,
        FoundKind::IptablesNft,
        FoundKind::IptablesLegacy,
        FoundKind::Firewalld,
        FoundKind::Ufw,
    ];

    /// The kind's name as the host reports it (`nftables`, `iptables-nft`, `iptables-legacy`).
    pub fn name(self) -> &'static str {
        self.firewall().name()
    }

    /// The kind with this name.
    pub fn from_name(name: &str) -> Option<FoundKind> {
        FoundKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// How this kind is written, loaded and read.
    pub fn firewall(self) -> &'static dyn FoundFirewall {
        match self {
            FoundKind::Nftables => &nftables::Nftables,
            FoundKind::IptablesNft => &iptables::IPTABLES_NFT,
            FoundKind::IptablesLegacy => &iptables::IPTABLES_LEGACY,
            FoundKind::Firewalld => &firewalld::Firewalld,
            FoundKind::Ufw => &ufw::Ufw,
        }
    }

    /// Fails naming the first program this kind needs that is not installed, and its package.
    pub fn require(self) -> Result<()> {
        for (program, package) in self.firewall().programs() {
            exec::require(program, package)?;
        }
        Ok(())
    }
}

impl std::fmt::Display for FoundKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What the predecessor's firewall admits: incoming, nothing but established traffic, loopback,
/// ICMP, what arrives from its own containers' bridges and these TCP ports (ssh's among them);
/// everything else arriving for the machine is dropped. The forwarded path is left to the
/// container runtime, as a firewall that filters only incoming traffic does (so a published port
/// is reachable whether a rule mentions it or not).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub incoming_tcp: Vec<u16>,
    /// Interfaces everything is admitted from (the runtime's bridge, so containers reach the
    /// machine's own services, as on most machines that run containers).
    pub trusted_interfaces: Vec<String>,
}

/// What runs for a kind that is a daemon or keeps its files out of the machine's sight: its
/// daemon (firewalld, which a reload and the service manager's start talk to), its mount
/// namespace (ufw), and what a program run in the node needs in front of it to see them.
#[derive(Default)]
pub struct Live {
    pub firewalld: Option<crate::found::Firewalld>,
    pub ufw: Option<crate::found::Ufw>,
}

impl std::fmt::Debug for Live {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Live")
            .field("firewalld", &self.firewalld.as_ref().map(|d| d.address()))
            .field("ufw", &self.ufw.as_ref().map(|u| u.holder_pid()))
            .finish()
    }
}

impl Live {
    /// The argv to put in front of any program run in the node so that it sees this kind as
    /// the machine's own programs would: `env DBUS_SYSTEM_BUS_ADDRESS=…` for firewalld's bus,
    /// `nsenter --mount=…` for ufw's files; nothing for the others.
    pub fn prefix(&self) -> Vec<String> {
        let mut argv = Vec::new();
        if let Some(fw) = &self.firewalld {
            argv.extend(["env".to_owned(), fw.env()]);
        }
        if let Some(ufw) = &self.ufw {
            argv.extend(ufw.enter(&[]));
        }
        argv
    }

    /// More of the container runtime's environment (firewalld's bus: Docker puts its rules back
    /// when firewalld reloads, as on a machine where both run).
    pub fn runtime_env(&self) -> Vec<(String, std::ffi::OsString)> {
        self.firewalld.iter().map(|fw| fw.env_var()).collect()
    }
}

/// One kind of found firewall.
pub trait FoundFirewall: Sync {
    /// The kind's name as the host reports it.
    fn name(&self) -> &'static str;

    /// The programs this kind needs, each with the Debian package that has it.
    fn programs(&self) -> &'static [(&'static str, &'static str)];

    /// The boot unit that loads the configuration (`nftables.service`, ...).
    fn boot_unit(&self) -> &'static str;

    /// Writes the kind's configuration files under `root` (the machine's `/`) as the predecessor
    /// left them, and returns their paths.
    fn write(&self, root: &Path, policy: &Policy) -> Result<Vec<PathBuf>>;

    /// Loads the configuration from its files into `node`, as the kind's boot unit does, and as
    /// its reload does (the same command: `nft -f`, `*-restore`).
    fn load(&self, node: &Machine, root: &Path) -> Result<()>;

    /// Brings the kind up as the machine's boot does, once its files are written: loads them, or
    /// starts what runs for the kind (its daemon under `dir`) and configures it. Returns what
    /// runs.
    fn boot(&self, node: &Machine, root: &Path, _dir: &Path, _policy: &Policy) -> Result<Live> {
        self.load(node, root)?;
        Ok(Live::default())
    }

    /// Loads the configuration again, as the kind's reload does.
    fn reload(&self, node: &Machine, root: &Path, _live: &mut Live) -> Result<()> {
        self.load(node, root)
    }

    /// What a power cycle does to the kind before the tables are emptied (a daemon dies with the
    /// machine), and how it comes up again at boot when its unit is enabled.
    fn power_down(&self, _live: &mut Live) {}
    fn power_up(&self, node: &Machine, root: &Path, live: &mut Live) -> Result<()> {
        self.reload(node, root, live)
    }

    /// The argv the stand-in for systemctl runs for `systemctl start UNIT` of the boot unit, when
    /// the host starts it on the return (firewalld's unit); `None` when the host never does.
    fn unit_start(&self, _live: &Live) -> Option<Vec<String>> {
        None
    }

    /// A found file's bytes as the comparison before and after sees them: the file itself, or,
    /// for a kind whose own tool writes the mesh's rules into its files (ufw), without them.
    fn comparable(&self, bytes: Vec<u8>) -> Vec<u8> {
        bytes
    }

    /// Whether loading the configuration again removes the container runtime's address
    /// translation (native nftables' `flush ruleset` does), so published ports stop working until
    /// the runtime writes its rules again.
    fn reload_removes_runtime_nat(&self) -> bool;

    /// The directory to put first on the container runtime's PATH, holding `iptables` links to
    /// the backend this kind uses, so the runtime writes its rules where the machine's own
    /// iptables would; `None` when the machine's default `iptables` is right.
    fn runtime_iptables(&self, _dir: &Path) -> Result<Option<PathBuf>> {
        Ok(None)
    }

    /// The found firewall's rules as the kernel holds them, as text for comparison: counters
    /// left out, the mesh's own table left out, one rule per line. A kind whose rules cannot
    /// carry the mesh's mark in the kernel (firewalld's rich rules, ufw's rules) shows the
    /// mesh's rules prefixed `mesh-host: `, knowing them from where the kind keeps them (the
    /// mesh's policy and zone in firewalld; the rule's comment in ufw's files below `root`).
    fn rules(&self, node: &Machine, root: &Path) -> Result<String>;
}

/// Writes `bytes` to `path`, making its directory.
pub(crate) fn write_file(path: &Path, bytes: impl AsRef<[u8]>) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    }
    std::fs::write(path, bytes).map_err(|e| Error::io(path, e))
}

/// The chain an `iptables-save` line names: a chain's header (`:INPUT DROP`) or a rule in it
/// (`-A INPUT …`); `None` for any other line.
fn save_line_chain(line: &str) -> Option<&str> {
    line.strip_prefix(':')
        .or_else(|| line.strip_prefix("-A "))
        .and_then(|rest| rest.split_whitespace().next())
}

/// Whitespace within each line normalised, counters' values dropped, blank lines left out.
fn normalise(listing: &str) -> String {
    let mut out = String::new();
    for line in listing.lines() {
        let mut words = line.split_whitespace().peekable();
        let mut kept: Vec<&str> = Vec::new();
        while let Some(w) = words.next() {
            if w.starts_with('[') && w.ends_with(']') && w.contains(':') {
                continue; // an iptables-save counter, [packets:bytes]
            }
            kept.push(w);
            if w == "counter" && words.peek() == Some(&"packets") {
                for _ in 0..4 {
                    words.next();
                }
            }
        }
        if !kept.is_empty() {
            out.push_str(&kept.join(" "));
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_found_by_its_name() {
        for kind in FoundKind::ALL {
            assert_eq!(FoundKind::from_name(kind.name()), Some(kind));
        }
        assert_eq!(FoundKind::from_name("pf"), None);
    }

    #[test]
    fn normalising_drops_counters_and_spacing() {
        let got = normalise(
            ":INPUT DROP [12:345]\n\n\t\ttcp dport 22  counter packets 3 bytes 180 accept\n",
        );
        assert_eq!(got, ":INPUT DROP\ntcp dport 22 counter accept\n");
    }
}
