//! Retiring the found firewall on the flip, and putting it back on return: the seam every kind's
//! driver answers in its own terms. Retiring is disabling, never flushing: what the found
//! firewall loads from its own configuration is taken out of the running ruleset, its
//! configuration files are never written, and tables other programs keep (the container
//! runtime's, fail2ban's or crowdsec's) stay in force.
//!
//! The seam is its own trait, [`Retire`](crate::backend::Retire), which every kind's driver
//! answers. The order is the caller's: [`survey`](crate::backend::Retire::survey) reads what
//! would be retired (the preview shows it), the caller keeps the [`Retired`] it returned
//! somewhere durable (the core's store), then [`retire`](crate::backend::Retire::retire) takes it
//! out, and on return [`restore`](crate::backend::Retire::restore) puts back exactly what was
//! saved. The firewall crate knows no service manager: the boot unit is named here and enabled or
//! disabled by the core.

use crate::found::Backend;
use std::path::Path as FsPath;

/// One kind's found firewall as it stood before the flip: what the flip takes out of the running
/// ruleset, and what return puts back.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Retired {
    pub backend: Backend,
    /// The unit that loads it at boot (`nftables.service`, `netfilter-persistent.service`, …),
    /// which the core disables on the flip and enables on return; `None` when it has none here.
    pub unit: Option<String>,
    /// Whether its unit runs the firewall itself (firewalld's daemon), so that return starts the
    /// unit before restoring; a unit that loads rules and exits (nftables', iptables') is never
    /// started by the host: Debian's loads a file that begins with `flush ruleset`.
    #[cfg_attr(feature = "serde", serde(default))]
    pub daemon: bool,
    /// Its configuration files, as paths under the machine's root: never written by the flip or
    /// the return.
    pub config: Vec<String>,
    /// What is taken out, each in the driver's own format (read back only by that driver).
    pub saved: Vec<Saved>,
}

/// One part of a found firewall as it was saved: a table, one family's rules.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Saved {
    /// What it is, for a person: `table inet filter`, `iptables-nft ip filter: 6 rules`.
    pub what: String,
    /// The driver's own text for it (a table's listing, a save and the rules taken out).
    pub text: String,
}

impl Retired {
    /// The nftables tables this kind's flip deletes, by family and name (none for other kinds):
    /// read from the parts as the nftables driver saved them, by that driver.
    pub fn nft_tables(&self) -> Vec<(crate::netlink::Family, String)> {
        if self.backend != Backend::Nftables {
            return Vec::new();
        }
        self.saved
            .iter()
            .filter_map(crate::backend::nftables::saved_table)
            .collect()
    }

    /// One line for the preview and the briefing: which kind, which parts, which unit.
    pub fn describe(&self) -> String {
        let parts: Vec<&str> = self.saved.iter().map(|s| s.what.as_str()).collect();
        format!(
            "{}: {} (configuration {}; boot unit {})",
            self.backend,
            if parts.is_empty() {
                "nothing loaded".to_string()
            } else {
                parts.join(", ")
            },
            if self.config.is_empty() {
                "none".to_string()
            } else {
                self.config.join(", ")
            },
            self.unit.as_deref().unwrap_or("none")
        )
    }
}

/// The regular files under `dir`, as paths under the machine's root: a kind's configuration,
/// named in what its survey saves.
pub(crate) fn config_files(dir: &FsPath, root: &FsPath, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        match e.file_type() {
            Ok(t) if t.is_dir() => config_files(&p, root, out),
            Ok(t) if t.is_file() => {
                let rel = p.strip_prefix(root).unwrap_or(&p);
                out.push(format!("/{}", rel.display()).replace("//", "/"));
            }
            _ => {}
        }
    }
}
