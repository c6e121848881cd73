//! `mesh-host inventory`: what runs on this machine — every listening socket with its process,
//! every running container with its published ports, every interface with its addresses and
//! kind (tunnels included), and the routes. Genesis and the converge preview read this same view.

use crate::system::{self, Container};
use anyhow::{Context, Result};
use genesis::checks;
use genesis::inventory::Inventory;
use run::Runner;
use serde_json::{json, Value};
use std::fmt::Write as _;

/// The machine as genesis reads it.
pub struct View {
    pub inventory: Inventory,
    pub containers: Vec<Container>,
    /// Which runtime answered, or why none did.
    pub runtime: Runtime,
}

/// Which container runtime the inventory's containers come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Runtime {
    /// This runtime's CLI (or its engine's API) answered.
    Answered(String),
    /// None answered, and why (none on this machine, an engine that does not answer): no
    /// containers are counted.
    None(String),
}

impl Runtime {
    /// The runtime's name, or why there is none.
    pub fn as_str(&self) -> &str {
        match self {
            Runtime::Answered(s) | Runtime::None(s) => s,
        }
    }
}

/// How many containers one `inspect` call names: well inside any argv limit, and one call for
/// every machine measured (the control-node runs 60).
const INSPECT_AT_ONCE: usize = 200;

/// The running containers, through whichever runtime is on the machine (none is not an error:
/// a machine without a runtime runs no containers).
pub fn running_containers(runner: &dyn Runner) -> Result<(Vec<Container>, Runtime)> {
    // Under a root other than `/` the engine is this machine's, not the root's: not asked.
    if let Some(why) = system::confined("container runtime") {
        return Ok((Vec::new(), Runtime::None(why)));
    }
    let Some(kind) = system::detect_runtime(|k| std::env::var(k).ok(), system::on_path) else {
        return Ok((
            Vec::new(),
            Runtime::None("no container runtime on this machine".into()),
        ));
    };
    // The engine's own API first: one request on its socket where the CLI is two processes.
    // An engine that cannot be asked so (reached over tcp or ssh, a socket that does not answer)
    // is asked through its CLI, as before.
    if let Some(socket) = system::engine_api::socket(kind, |k| std::env::var(k).ok()) {
        match system::engine_api::running(&socket) {
            Ok(mut containers) => {
                containers.retain(|c| c.running);
                return Ok((containers, Runtime::Answered(kind.as_str().to_string())));
            }
            Err(e) => tracing::debug!(error = %e, "asking the engine's CLI instead"),
        }
    }
    let runtime = system::container_runtime(runner).map_err(anyhow::Error::msg)?;
    running_with(runner, kind.as_str(), runtime.as_ref())
}

/// Why a runtime's command gave no answer: it could not start, or (the message naming the command
/// and its deadline already) it did not finish in time.
fn not_run(program: &str, e: std::io::Error) -> anyhow::Error {
    if e.kind() == std::io::ErrorKind::TimedOut {
        e.into()
    } else {
        anyhow::Error::new(e).context(format!("starting {program}"))
    }
}

/// The running containers of the runtime whose CLI is `program`: one listing, then one
/// `inspect` naming them all. A CLI call costs tens of milliseconds, so inspecting one container
/// at a time made the preflight on a machine running 60 containers twenty times slower than
/// `ss -ltnp` plus `docker ps` (docs/PERFORMANCE.md).
fn running_with(
    runner: &dyn Runner,
    program: &str,
    runtime: &dyn system::ContainerRuntime,
) -> Result<(Vec<Container>, Runtime)> {
    let argv: Vec<String> = [program, "ps", "--format", "{{.Names}}"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let out = runner
        .run(&argv, std::path::Path::new("/"), &[])
        .map_err(|e| not_run(program, e))?;
    if !out.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        // A Docker client whose engine is not running: no container runs without its engine
        // (unless live-restore is on, which the note says), so none is counted, and the view
        // says why rather than pretending the runtime answered.
        if stderr.contains("Cannot connect to the Docker daemon") {
            return Ok((
                Vec::new(),
                Runtime::None(format!(
                    "{program} is installed but its engine does not answer ({}); no containers counted",
                    stderr.trim()
                )),
            ));
        }
        anyhow::bail!("listing containers: {}", run::describe(&argv, &out));
    }
    let names = system::listed_names(&out.stdout);
    let mut containers = Vec::new();
    for chunk in names.chunks(INSPECT_AT_ONCE) {
        containers.extend(inspect_all(runner, program, runtime, chunk)?);
    }
    containers.retain(|c| c.running);
    Ok((containers, Runtime::Answered(program.to_string())))
}

/// Inspects every named container in one call. A container removed since the listing makes the
/// call fail for all of them, so then each is inspected on its own, where an absent one is simply
/// not there.
fn inspect_all(
    runner: &dyn Runner,
    program: &str,
    runtime: &dyn system::ContainerRuntime,
    names: &[String],
) -> Result<Vec<Container>> {
    let mut argv: Vec<String> = vec![program.into(), "container".into(), "inspect".into()];
    argv.extend(names.iter().cloned());
    let out = runner
        .run(&argv, std::path::Path::new("/"), &[])
        .map_err(|e| not_run(program, e))?;
    if out.success() {
        let all: serde_json::Value = serde_json::from_slice(&out.stdout)
            .with_context(|| format!("{program} container inspect gave no JSON array"))?;
        let items = all
            .as_array()
            .with_context(|| format!("{program} container inspect gave no JSON array"))?;
        return items
            .iter()
            .map(|item| {
                let one = serde_json::to_vec(&[item]).expect("a JSON value serializes");
                system::parse_inspect(&one)
                    .map_err(|e| anyhow::anyhow!("inspecting containers: {e}"))
            })
            .collect();
    }
    let mut found = Vec::new();
    for name in names {
        if let Some(c) = runtime
            .inspect(name)
            .map_err(|e| anyhow::anyhow!("inspecting container {name}: {e}"))?
        {
            found.push(c);
        }
    }
    Ok(found)
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
                    proto: l.protocol,
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
                        proto: p.proto,
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
            "runtime": match &self.runtime { Runtime::Answered(k) => json!(k), Runtime::None(e) => json!({"none": e}) },
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
        let _ = writeln!(out, "containers ({})", self.runtime.as_str());
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

#[cfg(test)]
mod tests {
    use super::*;
    use run::{Output, RecordingRunner};

    /// One container as `docker container inspect` describes it, trimmed to what is read.
    fn inspected(name: &str, running: bool, host_port: u16) -> serde_json::Value {
        json!({
            "Id": format!("{name}-id"),
            "Name": format!("/{name}"),
            "Image": "sha256:82020d1a6ba2",
            "State": {"Status": if running { "running" } else { "exited" }, "Running": running, "ExitCode": 0},
            "Config": {"Env": [], "Cmd": ["/bin/httpd"], "Image": "lab/busybox:1", "Labels": {}},
            "HostConfig": {"PortBindings": {"80/tcp": [{"HostIp": "", "HostPort": host_port.to_string()}]},
                           "RestartPolicy": {"Name": "no"}},
            "NetworkSettings": {"Networks": {"bridge": {}}}
        })
    }

    fn answer(code: i32, stdout: &str, stderr: &str) -> Output {
        Output {
            code: Some(code),
            signal: None,
            stdout: stdout.as_bytes().to_vec(),
            stderr: stderr.as_bytes().to_vec(),
        }
    }

    fn runner(answers: Vec<Output>) -> RecordingRunner {
        let r = RecordingRunner::default();
        r.answers.borrow_mut().extend(answers);
        r
    }

    #[test]
    fn every_container_is_inspected_in_one_call() {
        let both = json!([inspected("web", true, 8080), inspected("old", false, 8081)]);
        let r = runner(vec![
            answer(0, "web\nold\n", ""),
            answer(0, &both.to_string(), ""),
        ]);
        let rt = system::docker::new(&r);
        let (found, kind) = running_with(&r, "docker", &rt).unwrap();
        assert_eq!(kind, Runtime::Answered("docker".into()));
        let names: Vec<&str> = found.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["web"], "only running containers count");
        assert_eq!(found[0].ports[0].host_port, 8080);
        assert_eq!(
            *r.calls.borrow(),
            [
                vec!["docker", "ps", "--format", "{{.Names}}"],
                vec!["docker", "container", "inspect", "web", "old"],
            ]
        );
    }

    #[test]
    fn a_container_gone_since_the_listing_is_left_out() {
        let web = json!([inspected("web", true, 8080)]);
        let r = runner(vec![
            answer(0, "web\ngone\n", ""),
            answer(1, &web.to_string(), "Error: No such container: gone"),
            answer(0, &web.to_string(), ""),
            answer(1, "[]", "Error: No such container: gone"),
        ]);
        let rt = system::docker::new(&r);
        let (found, _) = running_with(&r, "docker", &rt).unwrap();
        let names: Vec<&str> = found.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["web"]);
        assert_eq!(r.calls.borrow().len(), 4);
    }

    #[test]
    fn an_engine_that_does_not_answer_counts_no_containers_and_says_why() {
        let r = runner(vec![answer(
            1,
            "",
            "Cannot connect to the Docker daemon at unix:///x.sock. Is the docker daemon running?",
        )]);
        let rt = system::docker::new(&r);
        let (found, kind) = running_with(&r, "docker", &rt).unwrap();
        assert!(found.is_empty());
        assert!(
            matches!(&kind, Runtime::None(why) if why.contains("does not answer")),
            "{kind:?}"
        );
    }
}
