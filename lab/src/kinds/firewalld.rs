//! firewalld as a predecessor leaves it: its public zone in `/etc/firewalld/zones/public.xml`
//! (the lab's copy of `/etc/firewalld`, below the bed's root) admitting ssh and the served port,
//! its target `DROP` refusing the rest; firewalld itself (`found.rs`'s daemon on a bus of its
//! own) loads it at boot, `firewall-cmd --reload` loads it again, and the stand-in for systemctl
//! starts it when the host starts `firewalld.service` on the return.
//!
//! The runtime's bridge is not put in a zone here: Docker, sharing firewalld's bus, binds
//! `docker0` to its own `docker` zone (target ACCEPT) itself, as it does on a real machine, and
//! an interface belongs to one zone only.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::{normalise, write_file, FoundFirewall, Live, Policy};
use crate::error::{Error, Result};
use crate::machine::Machine;

/// The configuration directory below the machine's root, and the zone file the predecessor
/// wrote in it.
const ETC: &str = "etc/firewalld";
const ZONE: &str = "etc/firewalld/zones/public.xml";

/// The mesh's own policy and zone in firewalld (the host's `firewall::backend::firewalld`),
/// whose chains, and the jumps to them, are the mesh's.
const MESH_NAMES: [&str; 2] = ["mesh-host", "mesh-private"];

pub(super) struct Firewalld;

impl FoundFirewall for Firewalld {
    fn name(&self) -> &'static str {
        "firewalld"
    }

    fn boot_unit(&self) -> &'static str {
        "firewalld.service"
    }

    fn programs(&self) -> &'static [(&'static str, &'static str)] {
        &[
            ("firewalld", "firewalld"),
            ("firewall-cmd", "firewalld"),
            ("dbus-daemon", "dbus"),
            ("setsid", "util-linux"),
            ("iptables-nft-save", "iptables"),
            ("ip6tables-nft-save", "iptables"),
        ]
    }

    fn write(&self, root: &Path, policy: &Policy) -> Result<Vec<PathBuf>> {
        // The machine's /etc/firewalld as installed (firewalld.conf: the nftables backend), then
        // the predecessor's zone in it.
        let etc = root.join(ETC);
        if !etc.exists() {
            if let Some(parent) = etc.parent() {
                std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
            }
            crate::found::FirewalldProgram::system().copy_config(&etc)?;
        }
        let mut text = String::from(
            "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n\
             <zone target=\"DROP\">\n\
             \x20 <short>Public</short>\n\
             \x20 <description>The predecessor's zone: what it serves; the rest dropped.</description>\n",
        );
        for port in &policy.incoming_tcp {
            let _ = writeln!(text, "  <port protocol=\"tcp\" port=\"{port}\"/>");
        }
        text.push_str("</zone>\n");
        let zone = root.join(ZONE);
        write_file(&zone, &text)?;
        Ok(vec![zone, etc.join("firewalld.conf")])
    }

    fn load(&self, _node: &Machine, _root: &Path) -> Result<()> {
        Err(no_daemon())
    }

    fn boot(&self, node: &Machine, root: &Path, dir: &Path, _policy: &Policy) -> Result<Live> {
        let fw = node.start_firewalld_with(dir, &root.join(ETC))?;
        Ok(Live {
            firewalld: Some(fw),
            ufw: None,
        })
    }

    fn reload(&self, _node: &Machine, _root: &Path, live: &mut Live) -> Result<()> {
        daemon(live)?.cmd(&["--reload"])?;
        Ok(())
    }

    fn power_down(&self, live: &mut Live) {
        if let Some(fw) = live.firewalld.as_mut() {
            fw.stop();
        }
    }

    fn power_up(&self, _node: &Machine, _root: &Path, live: &mut Live) -> Result<()> {
        live.firewalld.as_mut().ok_or_else(no_daemon)?.start()
    }

    fn unit_start(&self, live: &Live) -> Option<Vec<String>> {
        let fw = live.firewalld.as_ref()?;
        Some(fw.start_argv())
    }

    fn reload_removes_runtime_nat(&self) -> bool {
        // firewalld 1.3 flushes every iptables table on a reload; Docker, on its bus, puts its
        // rules back when it hears the reload.
        false
    }

    fn rules(&self, node: &Machine, _root: &Path) -> Result<String> {
        let out = node.run(&["nft", "list", "table", "inet", "firewalld"])?;
        let mut text = String::new();
        if out.success() {
            // The chains of the mesh's policy and zone, and the jumps to them, are the mesh's:
            // firewalld's rich rules carry no comment, so they are shown marked here.
            let mut in_mesh_chain = false;
            for line in normalise(&out.stdout).lines() {
                let mesh = MESH_NAMES.iter().any(|n| line.contains(n));
                if line.starts_with("chain ") {
                    in_mesh_chain = mesh;
                }
                if in_mesh_chain || mesh {
                    text.push_str("mesh-host: ");
                }
                text.push_str(line);
                text.push('\n');
                if in_mesh_chain && line == "}" {
                    in_mesh_chain = false;
                }
            }
        }
        // The runtime's chains beside it (firewalld's nftables backend writes none there).
        // Docker puts its rules back on every firewalld reload or start, in an order of its own
        // each time, so they are compared as a set.
        let mut runtime: Vec<String> = super::iptables::filter_chains(node, "nft")?
            .lines()
            .map(str::to_owned)
            .collect();
        runtime.sort();
        for line in runtime {
            text.push_str(&line);
            text.push('\n');
        }
        Ok(text)
    }
}

fn no_daemon() -> Error {
    Error::NotRunning {
        kind: "firewalld",
        what: "firewalld",
    }
}

fn daemon(live: &Live) -> Result<&crate::found::Firewalld> {
    live.firewalld.as_ref().ok_or_else(no_daemon)
}
