//! ufw as a predecessor leaves it: `ufw default deny incoming`, `ufw allow` of ssh and the served
//! port, everything from the runtime's bridge allowed, `ufw enable`; its files are the lab's copy
//! of `/etc/ufw` and `/etc/default/ufw` below the bed's root, bind-mounted over the machine's in
//! `found.rs`'s mount namespace, which every program the bed runs in the node enters. Loaded at
//! boot by what ufw's unit runs (`ufw-init start`), again by `ufw reload`.
//!
//! ufw writes every rule into its files itself, the mesh's openings too (marked `mesh-host:` in
//! the rule, hex-encoded in ufw's tuple line): the files are compared with those left out.

use std::path::{Path, PathBuf};

use super::{normalise, save_line_chain, FoundFirewall, Live, Policy};
use crate::error::{Error, Result};
use crate::machine::Machine;

/// The files ufw keeps its configuration in, below the machine's root.
const FILES: [&str; 4] = [
    "etc/ufw/user.rules",
    "etc/ufw/user6.rules",
    "etc/ufw/ufw.conf",
    "etc/default/ufw",
];

/// `mesh-host:` as ufw writes a rule's comment in its tuple lines (hex).
const MARK_HEX: &str = "6d6573682d686f73743a";

/// What ufw's unit runs to load it at boot.
const UFW_INIT: &str = "/lib/ufw/ufw-init";

pub(super) struct Ufw;

impl FoundFirewall for Ufw {
    fn name(&self) -> &'static str {
        "ufw"
    }

    fn boot_unit(&self) -> &'static str {
        "ufw.service"
    }

    fn programs(&self) -> &'static [(&'static str, &'static str)] {
        &[
            ("ufw", "ufw"),
            ("unshare", "util-linux"),
            ("nsenter", "util-linux"),
            ("iptables-nft-save", "iptables"),
            ("ip6tables-nft-save", "iptables"),
        ]
    }

    fn write(&self, root: &Path, _policy: &Policy) -> Result<Vec<PathBuf>> {
        // ufw writes its files itself, from its commands, once its mount namespace is there
        // (`boot`); these are where they will be.
        Ok(FILES.iter().map(|f| root.join(f)).collect())
    }

    fn load(&self, _node: &Machine, _root: &Path) -> Result<()> {
        Err(no_namespace())
    }

    fn boot(&self, node: &Machine, root: &Path, _dir: &Path, policy: &Policy) -> Result<Live> {
        // The copies land at ROOT/etc/ufw and ROOT/etc/default/ufw, where the host reads them.
        let ufw = node.prepare_ufw(&root.join("etc"))?;
        ufw.cmd(&["default", "deny", "incoming"])?;
        for port in &policy.incoming_tcp {
            ufw.cmd(&["allow", &format!("{port}/tcp")])?;
        }
        for interface in &policy.trusted_interfaces {
            ufw.cmd(&["allow", "in", "on", interface])?;
        }
        ufw.cmd(&["--force", "enable"])?;
        Ok(Live {
            firewalld: None,
            ufw: Some(ufw),
        })
    }

    fn reload(&self, _node: &Machine, _root: &Path, live: &mut Live) -> Result<()> {
        live.ufw
            .as_ref()
            .ok_or_else(no_namespace)?
            .cmd(&["reload"])?;
        Ok(())
    }

    fn power_up(&self, node: &Machine, _root: &Path, live: &mut Live) -> Result<()> {
        let ufw = live.ufw.as_ref().ok_or_else(no_namespace)?;
        node.run_ok(&ufw.enter(&[UFW_INIT, "start"]))?;
        Ok(())
    }

    fn comparable(&self, bytes: Vec<u8>) -> Vec<u8> {
        let text = String::from_utf8_lossy(&bytes);
        let mut out = String::new();
        for (line, _) in in_mesh_tuple(&text).filter(|(_, mesh)| !mesh) {
            out.push_str(line);
            out.push('\n');
        }
        out.into_bytes()
    }

    fn reload_removes_runtime_nat(&self) -> bool {
        false
    }

    fn rules(&self, node: &Machine, root: &Path) -> Result<String> {
        // ufw's chains and the built-in ones of the filter table, both families (the runtime's
        // own chains, which change with its containers, left out). ufw puts a rule's comment
        // only in its files (the tuple line before the rule), so the mesh's rules are known from
        // there and shown marked.
        let mut text = String::new();
        for (program, file) in [
            ("iptables-nft-save", "etc/ufw/user.rules"),
            ("ip6tables-nft-save", "etc/ufw/user6.rules"),
        ] {
            let path = root.join(file);
            let kept = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
            let mut mesh = mesh_rules(&kept);
            let out = node.run_ok(&[program, "-t", "filter"])?;
            for line in normalise(&out.stdout).lines() {
                if !save_line_chain(line).is_some_and(|c| {
                    c.starts_with("ufw") || ["INPUT", "FORWARD", "OUTPUT"].contains(&c)
                }) {
                    continue;
                }
                // Each of the mesh's rules in the files marks one rule the kernel holds.
                if let Some(i) = mesh.iter().position(|m| *m == canonical(line)) {
                    mesh.swap_remove(i);
                    text.push_str("mesh-host: ");
                }
                text.push_str(program);
                text.push_str(": ");
                text.push_str(line);
                text.push('\n');
            }
        }
        Ok(text)
    }
}

/// The rules (`-A …` lines) that ufw's file `text` holds for tuples whose comment is the mesh's,
/// in [`canonical`] form.
fn mesh_rules(text: &str) -> Vec<Vec<String>> {
    in_mesh_tuple(text)
        .filter(|(line, mesh)| *mesh && line.starts_with("-A "))
        .map(|(line, _)| canonical(line))
        .collect()
}

/// The lines of ufw's file `text` but the blank ones, each with whether it belongs to one of the
/// mesh's rules: a mesh's rule is its tuple line (the comment in hex) and the rules after it, up
/// to the blank line that ends the block.
fn in_mesh_tuple(text: &str) -> impl Iterator<Item = (&str, bool)> {
    let mut mesh = false;
    text.lines().filter_map(move |line| {
        if line.starts_with("### tuple ###") {
            mesh = line.contains(MARK_HEX);
        } else if line.trim().is_empty() {
            mesh = false;
            return None;
        }
        Some((line, mesh))
    })
}

/// A rule's words as a sorted list, the protocol match iptables-save adds (`-m tcp` after `-p
/// tcp`) left out and a host address given its full prefix as iptables-save prints it (ufw writes
/// `-d 172.17.0.2`, the kernel lists `-d 172.17.0.2/32`), so a rule as ufw writes it and as the
/// kernel lists it compare equal.
fn canonical(rule: &str) -> Vec<String> {
    let words: Vec<&str> = rule.split_whitespace().collect();
    let mut kept = Vec::new();
    let mut i = 0;
    while i < words.len() {
        if words[i] == "-m" && matches!(words.get(i + 1), Some(&("tcp" | "udp"))) {
            i += 2;
            continue;
        }
        let address = i > 0 && matches!(words[i - 1], "-s" | "-d");
        match words[i].parse::<std::net::IpAddr>() {
            Ok(ip) if address => kept.push(format!("{ip}/{}", if ip.is_ipv4() { 32 } else { 128 })),
            _ => kept.push(words[i].to_owned()),
        }
        i += 1;
    }
    kept.sort();
    kept
}

fn no_namespace() -> Error {
    Error::NotRunning {
        kind: "ufw",
        what: "mount namespace for its files",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mesh_rules_ufw_wrote_are_left_out_of_the_comparison() {
        let file = "### tuple ### allow tcp 22 0.0.0.0/0 any 0.0.0.0/0 in\n\
                    -A ufw-user-input -p tcp --dport 22 -j ACCEPT\n\n\
                    ### tuple ### allow tcp 9000 0.0.0.0/0 any 0.0.0.0/0 in comment=6d6573682d686f73743a77\n\
                    -A ufw-user-input -p tcp --dport 9000 -j ACCEPT\n\n\
                    ### tuple ### allow tcp 80 0.0.0.0/0 any 0.0.0.0/0 in\n\
                    -A ufw-user-input -p tcp --dport 80 -j ACCEPT\n";
        let kept = String::from_utf8(Ufw.comparable(file.as_bytes().to_vec())).unwrap();
        assert_eq!(
            kept,
            "### tuple ### allow tcp 22 0.0.0.0/0 any 0.0.0.0/0 in\n\
             -A ufw-user-input -p tcp --dport 22 -j ACCEPT\n\
             ### tuple ### allow tcp 80 0.0.0.0/0 any 0.0.0.0/0 in\n\
             -A ufw-user-input -p tcp --dport 80 -j ACCEPT\n"
        );
        let mesh = mesh_rules(file);
        assert_eq!(
            mesh,
            vec![canonical(
                "-A ufw-user-input -p tcp -m tcp --dport 9000 -j ACCEPT"
            )]
        );
        assert_ne!(
            mesh[0],
            canonical("-A ufw-user-input -p tcp -m tcp --dport 22 -j ACCEPT")
        );
    }

    /// A route rule to a container as ufw writes it in its file and as the kernel lists it.
    #[test]
    fn a_host_address_compares_with_its_full_prefix() {
        assert_eq!(
            canonical("-A ufw-user-forward -p tcp -d 172.17.0.2 --dport 80 -j ACCEPT"),
            canonical("-A ufw-user-forward -d 172.17.0.2/32 -p tcp -m tcp --dport 80 -j ACCEPT")
        );
        assert_eq!(
            canonical("-A ufw6-user-forward -p tcp -d fd00:d0c::2 --dport 80 -j ACCEPT"),
            canonical("-A ufw6-user-forward -d fd00:d0c::2/128 -p tcp -m tcp --dport 80 -j ACCEPT")
        );
        assert_ne!(
            canonical("-A ufw-user-forward -p tcp -d 172.17.0.2 --dport 80 -j ACCEPT"),
            canonical("-A ufw-user-forward -d 172.17.0.3/32 -p tcp -m tcp --dport 80 -j ACCEPT")
        );
    }
}
