//! `mesh-host inventory`: what runs on this machine — every listening socket with its process,
//! every running container with its published ports, every interface with its addresses and
//! kind (tunnels included), and the routes. Genesis and the converge preview read this same view.

use crate::runner::Runner;
use crate::system::{self, Container};
use anyhow::{Context, Result};
use genesis::checks;
use genesis::inventory::{Inventory, Protocol};
use serde_json::{json, Value};
use std::fmt::Write as _;

/// The machine as genesis reads it.
pub struct View {
    pub inventory: Inventory,
    pub containers: Vec<Container>,
    /// Which runtime answered, or why none did.
    pub runtime: Result<String, String>,
}

/// The running containers, through whichever runtime is on the machine (none is not an error:
/// a machine without a runtime runs no containers).
pub fn running_containers(runner: &dyn Runner) -> Result<(Vec<Container>, Result<String, String>)> {
    let Some(kind) = system::detect_runtime(|k| std::env::var(k).ok(), system::on_path) else {
        return Ok((
            Vec::new(),
            Err("no container runtime on this machine".into()),
        ));
    };
    let runtime = system::container_runtime(runner).map_err(anyhow::Error::msg)?;
    let argv: Vec<String> = [kind.as_str(), "ps", "--format", "{{.Names}}"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let out = runner
        .run(&argv, std::path::Path::new("/"), &[])
        .with_context(|| format!("starting {}", kind.as_str()))?;
    if !out.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        // A Docker client whose engine is not running: no container runs without its engine
        // (unless live-restore is on, which the note says), so none is counted, and the view
        // says why rather than pretending the runtime answered.
        if stderr.contains("Cannot connect to the Docker daemon") {
            return Ok((
                Vec::new(),
                Err(format!(
                    "{} is installed but its engine does not answer ({}); no containers counted",
                    kind.as_str(),
                    stderr.trim()
                )),
            ));
        }
        anyhow::bail!(
            "listing containers: {}",
            crate::runner::describe(&argv, &out)
        );
    }
    let mut containers = Vec::new();
    for name in String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|n| !n.is_empty())
    {
        if let Some(c) = runtime
            .inspect(name)
            .map_err(|e| anyhow::anyhow!("inspecting container {name}: {e}"))?
        {
            if c.running {
                containers.push(c);
            }
        }
    }
    Ok((containers, Ok(kind.as_str().to_string())))
}

pub fn read(runner: &dyn Runner) -> Result<View> {
    let inventory = Inventory::read().context("reading the inventory")?;
    let (containers, runtime) = running_containers(runner)?;
    Ok(View {
        inventory,
        containers,
        runtime,
    })
}

fn proto(p: Protocol) -> genesis::Proto {
    match p {
        Protocol::Tcp => genesis::Proto::Tcp,
        Protocol::Udp => genesis::Proto::Udp,
    }
}

impl View {
    /// What genesis's checks read.
    pub fn machine(&self) -> checks::Machine {
        let listeners = self
            .inventory
            .listeners
            .iter()
            .map(|l| {
                let owner = l.owners.first();
                checks::Listener {
                    proto: proto(l.protocol),
                    addr: l.address,
                    port: l.port,
                    pid: owner.map(|o| o.pid),
                    process: owner.map(|o| o.name.clone()),
                }
            })
            .collect();
        let containers = self
            .containers
            .iter()
            .map(|c| checks::Container {
                name: c.name.clone(),
                image: c.image.clone(),
                published: c
                    .ports
                    .iter()
                    .map(|p| checks::Published {
                        addr: p.host_address.as_deref().and_then(|a| a.parse().ok()),
                        port: p.host_port,
                        proto: match p.proto {
                            crate::declaration::Proto::Tcp => genesis::Proto::Tcp,
                            crate::declaration::Proto::Udp => genesis::Proto::Udp,
                        },
                    })
                    .collect(),
            })
            .collect();
        let mut networks: Vec<checks::Network> = Vec::new();
        for i in &self.inventory.interfaces {
            for a in &i.addresses {
                networks.push(checks::Network {
                    interface: i.name.clone(),
                    addr: a.address,
                    len: a.prefix_len,
                });
            }
        }
        for r in &self.inventory.routes {
            networks.push(checks::Network {
                interface: r.interface.clone(),
                addr: r.destination,
                len: r.prefix_len,
            });
        }
        checks::Machine {
            listeners,
            containers,
            networks,
        }
    }

    pub fn to_json(&self) -> Value {
        json!({
            "listeners": self.inventory.listeners.iter().map(|l| json!({
                "proto": l.protocol.to_string(),
                "address": l.address.to_string(),
                "port": l.port,
                "pid": l.owners.first().map(|o| o.pid),
                "process": l.owners.first().map(|o| o.name.clone()),
                "owners": l.owners.iter().map(|o| json!({"pid": o.pid, "process": o.name})).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "runtime": match &self.runtime { Ok(k) => json!(k), Err(e) => json!({"none": e}) },
            "containers": self.containers.iter().map(|c| json!({
                "name": c.name,
                "image": c.image,
                "status": c.status,
                "ports": c.ports.iter().map(|p| json!({
                    "host_address": p.host_address,
                    "host_port": p.host_port,
                    "container_port": p.container_port,
                    "proto": p.proto.as_str(),
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "interfaces": self.inventory.interfaces.iter().map(|i| json!({
                "name": i.name,
                "kind": i.kind.to_string(),
                "up": i.up,
                "addresses": i.addresses.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "routes": self.inventory.routes.iter().map(|r| json!({
                "destination": format!("{}/{}", r.destination, r.prefix_len),
                "gateway": r.gateway.map(|g| g.to_string()),
                "interface": r.interface,
            })).collect::<Vec<_>>(),
        })
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "listeners");
        for l in &self.inventory.listeners {
            let owner = l
                .owners
                .first()
                .map(|o| format!("{} (pid {})", o.name, o.pid))
                .unwrap_or_else(|| "owner not visible".into());
            let _ = writeln!(
                out,
                "  {:<4} {:<40} {owner}",
                l.protocol,
                std::net::SocketAddr::new(l.address, l.port).to_string()
            );
        }
        let _ = writeln!(
            out,
            "containers ({})",
            self.runtime.as_deref().unwrap_or_else(|e| e)
        );
        for c in &self.containers {
            let ports: Vec<String> = c
                .ports
                .iter()
                .map(|p| {
                    format!(
                        "{}{}->{}/{}",
                        p.host_address
                            .as_deref()
                            .map(|a| format!("{a}:"))
                            .unwrap_or_default(),
                        p.host_port,
                        p.container_port,
                        p.proto.as_str()
                    )
                })
                .collect();
            let _ = writeln!(out, "  {:<24} {:<28} {}", c.name, c.image, ports.join(", "));
        }
        let _ = writeln!(out, "interfaces");
        for i in &self.inventory.interfaces {
            let addrs: Vec<String> = i.addresses.iter().map(|a| a.to_string()).collect();
            let _ = writeln!(
                out,
                "  {:<16} {:<12} {}",
                i.name,
                i.kind.to_string(),
                addrs.join(" ")
            );
        }
        out
    }
}
