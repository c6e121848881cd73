//! The kinds of found firewall: the firewall a predecessor leaves on a machine, in each kind the
//! host speaks, its configuration written where that kind keeps it, loaded the way its boot unit
//! loads it, and read back as text.
//!
//! One [`FoundFirewall`] per kind, one file per kind under `kinds/`, chosen by [`FoundKind`]. A
//! kind added later (firewalld, ufw) is one more variant and one more file here (which may drive
//! the daemon a lab machine runs for it): nothing else in the bed knows how a kind is written or
//! loaded.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::exec;
use crate::machine::Machine;

mod iptables;
mod nftables;

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
}

impl FoundKind {
    /// Every kind the bed prepares today, in the order the suite runs them.
    pub const ALL: [FoundKind; 3] = [
        FoundKind::Nftables,
        FoundKind::IptablesNft,
        FoundKind::IptablesLegacy,
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

    /// Whether loading the configuration again removes the container runtime's address
    /// translation (native nftables' `flush ruleset` does), so published ports stop working until
    /// the runtime writes its rules again.
    fn reload_removes_runtime_nat(&self) -> bool;

    /// The directory to put first on the container runtime's PATH, holding `iptables` links to
    /// the backend this kind uses, so the runtime writes its rules where the machine's own
    /// iptables would; `None` when the machine's default `iptables` is right.
    fn runtime_iptables(&self, dir: &Path) -> Result<Option<PathBuf>>;

    /// The found firewall's rules as the kernel holds them, as text for comparison: counters
    /// left out, the mesh's own table left out, one rule per line.
    fn rules(&self, node: &Machine) -> Result<String>;
}

/// Writes `text` to `path`, making its directory.
fn write_file(path: &Path, text: &str) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    }
    std::fs::write(path, text).map_err(|e| Error::io(path, e))
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
