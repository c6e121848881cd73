//! Hand-written nftables as Debian leaves it: `/etc/nftables.conf`, starting with `flush ruleset`,
//! loaded by `nft -f` at boot and again on every reload.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::{normalise, write_file, FoundFirewall, Policy};
use crate::error::Result;
use crate::machine::Machine;

/// Where the file lives below the machine's root.
const CONF: &str = "etc/nftables.conf";

pub(super) struct Nftables;

impl FoundFirewall for Nftables {
    fn name(&self) -> &'static str {
        "nftables"
    }

    fn boot_unit(&self) -> &'static str {
        "nftables.service"
    }

    fn programs(&self) -> &'static [(&'static str, &'static str)] {
        &[
            ("nft", "nftables"),
            ("iptables-nft-save", "iptables"),
            ("ip6tables-nft-save", "iptables"),
        ]
    }

    fn write(&self, root: &Path, policy: &Policy) -> Result<Vec<PathBuf>> {
        let ports: Vec<String> = policy.incoming_tcp.iter().map(u16::to_string).collect();
        let mut text = String::from(
            "#!/usr/sbin/nft -f\n\
             # The predecessor's firewall: incoming, only what it serves; forwarding is left to\n\
             # the container runtime.\n\
             flush ruleset\n\n\
             table inet filter {\n\
             \tchain input {\n\
             \t\ttype filter hook input priority filter; policy drop;\n\
             \t\tct state established,related accept\n\
             \t\tiifname \"lo\" accept\n\
             \t\tmeta l4proto { icmp, ipv6-icmp } accept\n",
        );
        for interface in &policy.trusted_interfaces {
            let _ = writeln!(text, "\t\tiifname \"{interface}\" accept");
        }
        let _ = writeln!(text, "\t\ttcp dport {{ {} }} accept", ports.join(", "));
        text.push_str(
            "\t}\n\
             \tchain forward {\n\
             \t\ttype filter hook forward priority filter; policy accept;\n\
             \t}\n\
             \tchain output {\n\
             \t\ttype filter hook output priority filter; policy accept;\n\
             \t}\n\
             }\n",
        );
        let path = root.join(CONF);
        write_file(&path, &text)?;
        Ok(vec![path])
    }

    fn load(&self, node: &Machine, root: &Path) -> Result<()> {
        let path = root.join(CONF);
        node.run_ok(&["nft".as_ref(), "-f".as_ref(), path.as_os_str()])?;
        Ok(())
    }

    fn reload_removes_runtime_nat(&self) -> bool {
        true
    }

    fn rules(&self, node: &Machine, _root: &Path) -> Result<String> {
        let out = node.run(&["nft", "list", "table", "inet", "filter"])?;
        // A table that is gone (retired, flushed) reads as nothing, which is what it holds.
        let mut text = if out.success() {
            normalise(&out.stdout)
        } else {
            String::new()
        };
        // The runtime's chains beside it, written through iptables-nft, where forwarded openings
        // go: the mesh may add only marked rules there too.
        text.push_str(&super::iptables::filter_chains(node, "nft")?);
        Ok(text)
    }
}
