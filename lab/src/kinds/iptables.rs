//! iptables as netfilter-persistent leaves it: `/etc/iptables/rules.v4` and `rules.v6`, loaded with
//! `iptables-restore` and `ip6tables-restore` of one backend (nf_tables or legacy x_tables).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::{normalise, save_line_chain, write_file, FoundFirewall, Policy};
use crate::error::{Error, Result};
use crate::machine::Machine;

const V4: &str = "etc/iptables/rules.v4";
const V6: &str = "etc/iptables/rules.v6";

/// One backend of iptables; the programs are `iptables-<backend>-restore` and so on.
pub(super) struct Iptables {
    name: &'static str,
    backend: &'static str,
    programs: &'static [(&'static str, &'static str)],
}

pub(super) const IPTABLES_NFT: Iptables = Iptables {
    name: "iptables-nft",
    backend: "nft",
    programs: &[
        ("iptables-nft-restore", "iptables"),
        ("ip6tables-nft-restore", "iptables"),
        ("iptables-nft-save", "iptables"),
        ("ip6tables-nft-save", "iptables"),
    ],
};

pub(super) const IPTABLES_LEGACY: Iptables = Iptables {
    name: "iptables-legacy",
    backend: "legacy",
    programs: &[
        ("iptables-legacy-restore", "iptables"),
        ("ip6tables-legacy-restore", "iptables"),
        ("iptables-legacy-save", "iptables"),
        ("ip6tables-legacy-save", "iptables"),
        ("xtables-legacy-multi", "iptables"),
    ],
};

/// The chains of the filter table the predecessor wrote; the runtime's own chains are its.
const CHAINS: [&str; 3] = ["INPUT", "FORWARD", "OUTPUT"];

fn rules_file(v6: bool, policy: &Policy) -> String {
    let mut text = String::from(
        "# The predecessor's firewall: incoming, only what it serves; forwarding is left to the\n\
         # container runtime.\n\
         *filter\n\
         :INPUT DROP [0:0]\n\
         :FORWARD ACCEPT [0:0]\n\
         :OUTPUT ACCEPT [0:0]\n\
         -A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n\
         -A INPUT -i lo -j ACCEPT\n",
    );
    text.push_str(if v6 {
        "-A INPUT -p ipv6-icmp -j ACCEPT\n"
    } else {
        "-A INPUT -p icmp -j ACCEPT\n"
    });
    for interface in &policy.trusted_interfaces {
        let _ = writeln!(text, "-A INPUT -i {interface} -j ACCEPT");
    }
    for port in &policy.incoming_tcp {
        let _ = writeln!(text, "-A INPUT -p tcp -m tcp --dport {port} -j ACCEPT");
    }
    text.push_str("COMMIT\n");
    text
}

impl Iptables {
    fn program(&self, v6: bool, verb: &str) -> String {
        let family = if v6 { "ip6tables" } else { "iptables" };
        format!("{family}-{}-{verb}", self.backend)
    }
}

impl FoundFirewall for Iptables {
    fn name(&self) -> &'static str {
        self.name
    }

    fn boot_unit(&self) -> &'static str {
        // Debian's iptables-persistent loads both files through this one unit.
        "netfilter-persistent.service"
    }

    fn programs(&self) -> &'static [(&'static str, &'static str)] {
        self.programs
    }

    fn write(&self, root: &Path, policy: &Policy) -> Result<Vec<PathBuf>> {
        let mut paths = Vec::new();
        for (file, v6) in [(V4, false), (V6, true)] {
            let path = root.join(file);
            write_file(&path, rules_file(v6, policy))?;
            paths.push(path);
        }
        Ok(paths)
    }

    fn load(&self, node: &Machine, root: &Path) -> Result<()> {
        for (file, v6) in [(V4, false), (V6, true)] {
            let path = root.join(file);
            let program = self.program(v6, "restore");
            node.run_ok(&[program.as_ref(), "--wait=30".as_ref(), path.as_os_str()])?;
        }
        Ok(())
    }

    fn reload_removes_runtime_nat(&self) -> bool {
        // The files hold only the filter table; `*-restore` replaces the tables it is given, so
        // the runtime's nat table stays (its filter chains go, and its published ports still work
        // through a forward chain that accepts).
        false
    }

    fn runtime_iptables(&self, dir: &Path) -> Result<Option<PathBuf>> {
        if self.backend == "nft" {
            // The machine's default `iptables` is the nf_tables one, checked: a machine where it
            // is not would make this kind's runtime write legacy rules.
            return Ok(None);
        }
        let bin = dir.join("iptables-legacy-bin");
        std::fs::create_dir_all(&bin).map_err(|e| Error::io(&bin, e))?;
        let multi = crate::exec::which("xtables-legacy-multi").ok_or(Error::MissingProgram {
            program: "xtables-legacy-multi".into(),
            package: "iptables".into(),
        })?;
        for name in [
            "iptables",
            "iptables-save",
            "iptables-restore",
            "ip6tables",
            "ip6tables-save",
            "ip6tables-restore",
        ] {
            let link = bin.join(name);
            if !link.exists() {
                std::os::unix::fs::symlink(&multi, &link).map_err(|e| Error::io(&link, e))?;
            }
        }
        Ok(Some(bin))
    }

    fn rules(&self, node: &Machine, _root: &Path) -> Result<String> {
        filter_chains(node, self.backend)
    }
}

/// The built-in chains of the filter table, both families, as the `*-save` of one backend
/// (`nft`, `legacy`) prints them, each line prefixed with the program: the chains the found
/// firewall wrote and the container runtime jumps from.
pub(super) fn filter_chains(node: &Machine, backend: &str) -> Result<String> {
    let mut text = String::new();
    for family in ["iptables", "ip6tables"] {
        let program = format!("{family}-{backend}-save");
        let out = node.run_ok(&[program.as_str()])?;
        let mut in_filter = false;
        for line in normalise(&out.stdout).lines() {
            if let Some(table) = line.strip_prefix('*') {
                in_filter = table == "filter";
                continue;
            }
            if in_filter && save_line_chain(line).is_some_and(|c| CHAINS.contains(&c)) {
                let _ = writeln!(text, "{program}: {line}");
            }
        }
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rules_files_admit_exactly_the_policys_ports() {
        let policy = Policy {
            incoming_tcp: vec![22, 8080],
            trusted_interfaces: vec!["docker0".into()],
        };
        let v4 = rules_file(false, &policy);
        assert!(v4.contains("-A INPUT -p tcp -m tcp --dport 8080 -j ACCEPT\n"));
        assert!(v4.contains(":INPUT DROP") && v4.ends_with("COMMIT\n"));
        assert!(rules_file(true, &policy).contains("ipv6-icmp"));
    }
}
