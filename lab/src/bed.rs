//! The adoption ADR's lab bed: a machine prepared the way the predecessor leaves one, with its
//! firewall of a given kind, a served container whose name a module also uses, a file that module
//! declares, a stand-in for the predecessor's control rewriting that file, and a container holding
//! the registry's port; a second machine on the private network and one outside it.
//!
//! The bed knows the predecessor and the machines; it knows nothing of mesh-host but how an
//! operator runs it (its binary, `--root`, `DOCKER_HOST`) and the declaration a module is.

use std::ffi::OsStr;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::docker::{Docker, EngineOptions, BUSYBOX_IMAGE};
use crate::error::{Error, Result};
use crate::exec::{self, lock, Output, Process};
use crate::kinds::{FoundKind, Live, Policy};
use crate::lab::Lab;
use crate::topology::{addr, Adoption};
use crate::units::StubSystemctl;

/// The ports of the bed.
pub mod ports {
    /// ssh's port: a listener on it stands in for sshd.
    pub const SSH: u16 = 22;
    /// The port the predecessor's service container publishes, which its firewall admits and the
    /// service module declares.
    pub const SERVED: u16 = 8080;
    /// A port a predecessor's container publishes that no firewall rule mentions and no module
    /// declares: reachable while adopted (forwarded past a firewall that filters only incoming
    /// traffic), closed by the flip.
    pub const UNDECLARED: u16 = 9090;
    /// A port the found firewall does not admit, listened on only while the bed checks that.
    pub const DENIED: u16 = 7000;
    /// The catalogue's registry port, which the predecessor's registry holds.
    pub const REGISTRY: u16 = 5000;
    /// The registry port given at genesis instead.
    pub const REGISTRY_GIVEN: u16 = 5001;
    /// The foundation's other ports, at the catalogue's defaults.
    pub const STORE: u16 = 5432;
    pub const BUS: u16 = 5672;
    pub const BROKER_MANAGEMENT: u16 = 15672;
    pub const HUB: u16 = 51820;
}

/// The service module: its name, which is also the predecessor's container's name.
pub const SERVICE_MODULE: &str = "web";
/// The file the service module declares, which the predecessor's control writes.
pub const HELD_FILE: &str = "/etc/web/site.conf";
/// A second module that holds only a file the predecessor wrote, so a flip has a module to take.
pub const FILE_MODULE: &str = "site";
pub const FILE_MODULE_FILE: &str = "/etc/site/motd";
/// The predecessor's registry container and its container that publishes [`ports::UNDECLARED`].
pub const OLD_REGISTRY: &str = "old-registry";
pub const UNDECLARED_CONTAINER: &str = "extra";

/// How long the stand-in waits between two writes of the held file.
const STAND_IN_PERIOD_US: &str = "300000";
/// How long a freshly started container may take before its port answers.
const SETTLE: Duration = Duration::from_secs(30);

/// A machine prepared as the predecessor leaves it, of one found-firewall kind.
#[derive(Debug)]
pub struct Bed {
    pub kind: FoundKind,
    pub net: Adoption,
    pub docker: Docker,
    root: PathBuf,
    found_files: Vec<PathBuf>,
    units: StubSystemctl,
    /// What runs for the found firewall (firewalld, ufw's mount namespace); dropped after the
    /// engine, which may share firewalld's bus.
    live: Live,
    stand_in: Mutex<Option<Process>>,
    /// How many times the stand-in was started: each start's lines carry it, so a restarted
    /// stand-in never writes again a line an earlier one wrote (the held file's content at the
    /// adoption would come back at the restart's K-th pass, and a reconcile reading it then
    /// would rightly see no change).
    stand_in_runs: std::sync::atomic::AtomicU32,
    _ssh: Process,
}

/// A container command serving `port` with busybox httpd that ends on SIGTERM (a bare busybox as
/// PID 1 ignores it, and every stop would wait out the runtime's ten seconds).
pub fn serve(ports: &[u16]) -> Vec<String> {
    let mut script = String::from("trap 'exit 0' TERM;");
    for p in ports {
        script.push_str(&format!(" httpd -f -p {p} -h /www &"));
    }
    script.push_str(" wait");
    vec!["/bin/sh".into(), "-c".into(), script]
}

impl Bed {
    /// Prepares the bed in `lab`: the adoption topology, the found firewall written under the
    /// bed's root and loaded as at boot, then the Docker engine (writing its rules with the same
    /// iptables), the predecessor's containers, its files, ssh's listener and the stand-in for
    /// its control, running.
    pub fn prepare(lab: &Lab, kind: FoundKind) -> Result<Bed> {
        kind.require()?;
        for (program, package) in [("busybox", "busybox-static"), ("nft", "nftables")] {
            exec::require(program, package)?;
        }
        let net = Adoption::build(lab)?;
        let node = &net.node;
        let root = lab.dir().join(format!("root-{}", kind.name()));
        std::fs::create_dir_all(&root).map_err(|e| Error::io(&root, e))?;
        let firewall = kind.firewall();
        let policy = Policy {
            incoming_tcp: vec![ports::SSH, ports::SERVED],
            trusted_interfaces: vec!["docker0".into()],
        };
        let found_files = firewall.write(&root, &policy)?;
        let live = firewall.boot(
            node,
            &root,
            &lab.dir().join(format!("found-{}", kind.name())),
            &policy,
        )?;
        // The found firewall's boot unit, enabled, in the stand-in for systemctl, which starts
        // the kind's daemon when asked to start the unit (the host does so for firewalld).
        let units = StubSystemctl::install(&lab.dir().join(format!("systemctl-{}", kind.name())))?;
        units.set(firewall.boot_unit(), true)?;
        if let Some(argv) = firewall.unit_start(&live) {
            units.set_start(firewall.boot_unit(), &argv)?;
        }
        let engine_dir = lab.dir().join(format!("d-{}", kind.name()));
        let options = EngineOptions {
            path_first: firewall.runtime_iptables(lab.dir())?,
            env: live.runtime_env(),
            ..EngineOptions::default()
        };
        let legacy_runtime = options.path_first.is_some();
        let docker = node.start_docker_with(&engine_dir, &options)?;
        // dockerd wrote its rules through the links it was given: its nat chain is in the
        // legacy tables.
        if legacy_runtime {
            let nat = node.run_ok(&["iptables-legacy-save", "-t", "nat"])?.stdout;
            if !nat.contains(":DOCKER") {
                return Err(Error::RuntimeElsewhere {
                    kind: kind.name(),
                    listing: nat,
                });
            }
        }

        let web = serve(&[80]);
        let web: Vec<&str> = web.iter().map(String::as_str).collect();
        let restart = ["--restart", "unless-stopped", "-p"];
        let published = |host: u16, container: u16| format!("{host}:{container}");
        let run = |name: &str, port: String, argv: &[&str]| {
            let mut options = restart.to_vec();
            options.push(&port);
            docker.run_container(name, &options, argv)
        };
        run(SERVICE_MODULE, published(ports::SERVED, 80), &web)?;
        run(UNDECLARED_CONTAINER, published(ports::UNDECLARED, 80), &web)?;
        let registry = serve(&[ports::REGISTRY]);
        let registry: Vec<&str> = registry.iter().map(String::as_str).collect();
        run(
            OLD_REGISTRY,
            published(ports::REGISTRY, ports::REGISTRY),
            &registry,
        )?;

        let bed = Bed {
            kind,
            net: net.clone(),
            docker,
            root,
            found_files,
            units,
            live,
            stand_in: Mutex::new(None),
            stand_in_runs: std::sync::atomic::AtomicU32::new(0),
            _ssh: node.listen_tcp(ports::SSH)?,
        };
        bed.write(FILE_MODULE_FILE, b"welcome, from the predecessor\n")?;
        bed.write(HELD_FILE, b"written by the predecessor's control\n")?;
        bed.start_stand_in()?;
        for port in [ports::SERVED, ports::UNDECLARED, ports::REGISTRY] {
            bed.wait_reached(&net.outside, addr::NODE_PUBLIC_V4.into(), port)?;
        }
        // The found firewall denies the rest: a port listened on that it does not admit is not
        // reached from outside (a listener for the check only, gone before anyone counts).
        {
            let _check = node.listen_tcp(ports::DENIED)?;
            let got = net.outside.probe_tcp(
                addr::NODE_PUBLIC_V4.into(),
                ports::DENIED,
                Duration::from_millis(1200),
            )?;
            if got != crate::Probe::TimedOut {
                return Err(Error::NotDenied {
                    kind: kind.name(),
                    port: ports::DENIED,
                    got: got.to_string(),
                });
            }
        }
        Ok(bed)
    }

    /// The machine's `/` for mesh-host (`--root`): the found firewall's files and the module's
    /// files live below it.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// A machine path (`/etc/web/site.conf`) below the root.
    pub fn path(&self, machine_path: &str) -> PathBuf {
        self.root.join(machine_path.trim_start_matches('/'))
    }

    /// The found firewall's configuration files, below the root.
    pub fn found_files(&self) -> &[PathBuf] {
        &self.found_files
    }

    /// The stand-in for systemctl that mesh-host finds first on its PATH in the node (systemd
    /// cannot run as PID 1 here), holding the found firewall's boot unit.
    pub fn units(&self) -> &StubSystemctl {
        &self.units
    }

    /// The found firewall's boot unit (`nftables.service`, `netfilter-persistent.service`).
    pub fn boot_unit(&self) -> &'static str {
        self.kind.firewall().boot_unit()
    }

    /// Whether the host starts the found firewall's boot unit on the return (its daemon ended
    /// by the flip: firewalld's), where every other kind's is only enabled again.
    pub fn unit_started_on_return(&self) -> bool {
        self.kind.firewall().unit_start(&self.live).is_some()
    }

    /// The PATH mesh-host runs with in the node: the stand-in for systemctl first.
    fn path_env(&self) -> std::ffi::OsString {
        exec::path_with_first(self.units.dir())
    }

    /// The bytes of each found configuration file, to compare before and after.
    pub fn found_file_bytes(&self) -> Result<Vec<Vec<u8>>> {
        self.found_files
            .iter()
            .map(|p| {
                std::fs::read(p)
                    .map(|b| self.kind.firewall().comparable(b))
                    .map_err(|e| Error::io(p, e))
            })
            .collect()
    }

    fn write(&self, machine_path: &str, bytes: &[u8]) -> Result<()> {
        crate::kinds::write_file(&self.path(machine_path), bytes)
    }

    /// The argv running `binary --root ROOT ARGS…` inside the node with the node's engine as
    /// `DOCKER_HOST`, the way an operator's shell on that machine would: behind what the found
    /// firewall's kind needs to be seen ([`Bed::prefix`]).
    fn mesh_argv(&self, binary: &Path, args: &[&str]) -> Vec<std::ffi::OsString> {
        let mut argv: Vec<std::ffi::OsString> = self.prefix().into_iter().map(Into::into).collect();
        argv.extend([
            binary.as_os_str().to_owned(),
            "--root".into(),
            self.root.as_os_str().to_owned(),
        ]);
        argv.extend(args.iter().map(Into::into));
        argv
    }

    /// The argv to put in front of any program run in the node so that it sees the found
    /// firewall as the machine's own programs do: firewalld's bus in its environment (`env
    /// DBUS_SYSTEM_BUS_ADDRESS=…`), ufw's mount namespace (`nsenter --mount=…`); empty for the
    /// kinds that are the kernel's tables and files below the root alone.
    pub fn prefix(&self) -> Vec<String> {
        self.live.prefix()
    }

    /// Runs mesh-host (the built `binary`) inside the node, as an operator would.
    pub fn mesh(&self, binary: &Path, args: &[&str]) -> Result<Output> {
        let argv = self.mesh_argv(binary, args);
        let mut cmd = self.net.node.command(&argv);
        cmd.env("DOCKER_HOST", self.docker.docker_host())
            .env("PATH", self.path_env())
            .env_remove("CONTAINER_HOST")
            .env_remove("DOCKER_CONTEXT");
        exec::run(&mut cmd)
    }

    /// Starts mesh-host in the background inside the node (the resident host: `run`), with
    /// `env` added to its environment (`RUST_LOG`, say); its output goes to its log.
    pub fn spawn_mesh(
        &self,
        binary: &Path,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Result<Process> {
        let argv = self.mesh_argv(binary, args);
        let mut env: Vec<(String, std::ffi::OsString)> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).into()))
            .collect();
        env.push(("DOCKER_HOST".to_owned(), self.docker.docker_host().into()));
        env.push(("PATH".to_owned(), self.path_env()));
        self.net.node.spawn_env(&argv, &env)
    }

    /// Starts the stand-in for the predecessor's control: a process in the node rewriting the
    /// held file every 300 ms with a new line each time, never one an earlier start wrote (each
    /// line names the start and the pass: `pass 2.17`). Nothing if it runs already.
    pub fn start_stand_in(&self) -> Result<()> {
        let mut slot = lock(&self.stand_in);
        if slot.as_mut().is_some_and(Process::is_running) {
            return Ok(());
        }
        let path = self.path(HELD_FILE);
        let run = (1 + self
            .stand_in_runs
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed))
        .to_string();
        // The path and the start's number are arguments of the script, never part of it.
        let script = format!(
            "n=0; while :; do n=$((n+1)); \
             printf 'written by the predecessor'\"'\"'s control, pass %s.%s\\n' \"$2\" \"$n\" > \"$1.new\" \
             && mv \"$1.new\" \"$1\"; busybox usleep {STAND_IN_PERIOD_US}; done"
        );
        let argv = [
            OsStr::new("busybox"),
            OsStr::new("sh"),
            OsStr::new("-c"),
            OsStr::new(&script),
            OsStr::new("stand-in"),
            path.as_os_str(),
            OsStr::new(&run),
        ];
        *slot = Some(self.net.node.spawn(&argv)?);
        Ok(())
    }

    /// Stops the stand-in, as the operator stops the predecessor's control before adopting.
    pub fn stop_stand_in(&self) {
        if let Some(mut p) = lock(&self.stand_in).take() {
            p.kill();
        }
        // A write it had begun is finished or gone with it; its temporary file is its own.
        let _ = std::fs::remove_file(self.path(&format!("{HELD_FILE}.new")));
    }

    /// Loads the found firewall from its files again, as its unit's reload does.
    pub fn reload_found(&mut self) -> Result<()> {
        self.kind
            .firewall()
            .reload(&self.net.node, &self.root, &mut self.live)
    }

    /// Whether reloading the found firewall removes the container runtime's rules (native
    /// nftables' `flush ruleset`), so an operator must restart the runtime after it.
    pub fn reload_removes_runtime_nat(&self) -> bool {
        self.kind.firewall().reload_removes_runtime_nat()
    }

    /// Restarts the container runtime, which writes its rules again.
    pub fn restart_runtime(&mut self) -> Result<()> {
        self.docker.restart()
    }

    /// The machine goes down and comes up, as far as a namespace can: the container runtime is
    /// stopped (its containers with it), every table of the node's firewall is gone as in a
    /// fresh kernel (nf_tables and legacy x_tables, forwarding off), then the boot order: the
    /// found firewall loaded from its files if its boot unit is enabled, the runtime started (its
    /// containers come back by their restart policy, its rules written again). The host is the
    /// caller's to stop before and start after, as its unit is.
    pub fn power_cycle(&mut self) -> Result<()> {
        let node = self.net.node.clone();
        self.docker.stop_daemon()?;
        self.kind.firewall().power_down(&mut self.live);
        node.run_ok(&["nft", "flush", "ruleset"])?;
        wipe_legacy(&node)?;
        node.set_sysctl("net/ipv4/ip_forward", "0")?;
        if self.units.enabled(self.boot_unit()) == Some(true) {
            self.kind
                .firewall()
                .power_up(&node, &self.root, &mut self.live)?;
        }
        self.docker.start_daemon()
    }

    /// The found firewall's rules as the kernel holds them now (see
    /// [`crate::FoundFirewall::rules`]).
    pub fn found_rules(&self) -> Result<String> {
        self.kind.firewall().rules(&self.net.node, &self.root)
    }

    /// An HTTP request to `addr:port` with busybox nc from a throw-away container on the node's
    /// runtime's default network; the container reached the port if it printed an HTTP status
    /// line (busybox's static wget cannot run in the image: glibc's resolver needs its modules).
    pub fn fetch_from_container(&self, addr: IpAddr, port: u16) -> Result<Output> {
        let (addr, port) = (addr.to_string(), port.to_string());
        let script = r#"printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 3 "$0" "$1""#;
        let mut cmd = self.docker.command(&[
            "run",
            "--rm",
            BUSYBOX_IMAGE,
            "sh",
            "-c",
            script,
            &addr,
            &port,
        ]);
        exec::run(&mut cmd)
    }

    /// Probes until the port answers or the settle time passes; an error names what never
    /// answered.
    pub fn wait_reached(&self, from: &crate::Machine, addr: IpAddr, port: u16) -> Result<()> {
        let deadline = Instant::now() + SETTLE;
        loop {
            let got = from.probe_tcp(addr, port, Duration::from_secs(2))?;
            if got == crate::Probe::Reached {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(Error::NotReached {
                    from: from.name().to_owned(),
                    addr,
                    port,
                    got: got.to_string(),
                    waited: SETTLE,
                });
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    }
}

/// Empties every legacy x_tables table of the node (flushed, its chains deleted, its built-in
/// chains' policies accept), as a fresh kernel has them.
fn wipe_legacy(node: &crate::Machine) -> Result<()> {
    for (names, program) in [
        ("ip_tables_names", "iptables-legacy"),
        ("ip6_tables_names", "ip6tables-legacy"),
    ] {
        let file = PathBuf::from("/proc/thread-self/net").join(names);
        let tables = node
            .in_namespace(|| std::fs::read_to_string(&file))?
            .unwrap_or_default();
        for table in tables.split_whitespace() {
            let save = format!("{program}-save");
            let listing = node.run_ok(&[save.as_str(), "-t", table])?.stdout;
            for line in listing.lines() {
                let mut words = line.split_whitespace();
                if let (Some(chain), Some(policy)) =
                    (words.next().and_then(|w| w.strip_prefix(':')), words.next())
                {
                    if policy != "-" {
                        node.run_ok(&[program, "-w", "-t", table, "-P", chain, "ACCEPT"])?;
                    }
                }
            }
            node.run_ok(&[program, "-w", "-t", table, "-F"])?;
            node.run_ok(&[program, "-w", "-t", table, "-X"])?;
        }
    }
    Ok(())
}

/// The bundle `embedded` (mesh-host's, as JSON text) with every container's image replaced by
/// the lab's busybox serving its container ports, since no registry is reachable here. Ids,
/// names, modules and every `$setting` reference stay, so the bed raises what a node raises.
pub fn stand_in_bundle(embedded: &str) -> Result<String> {
    let bad = |why: &str| Error::Bundle(why.to_owned());
    let mut v: Value = serde_json::from_str(embedded).map_err(|e| bad(&e.to_string()))?;
    let resources = v["resources"]
        .as_array_mut()
        .ok_or_else(|| bad("no resources array"))?;
    for r in resources.iter_mut().filter(|r| r["type"] == "container") {
        let mut container_ports = Vec::new();
        for p in r["ports"].as_array().into_iter().flatten() {
            let port = p["container_port"]
                .as_u64()
                .and_then(|n| u16::try_from(n).ok())
                .ok_or_else(|| bad("a container port that is not a literal port"))?;
            container_ports.push(port);
        }
        r["image"] = json!(BUSYBOX_IMAGE);
        r["command"] = json!(serve(&container_ports));
    }
    serde_json::to_string_pretty(&v).map_err(|e| bad(&e.to_string()))
}

/// The resources of the bed's two modules as a declaration lists them: the service module (its
/// container on the served port under the predecessor's container's name, its file, its port's
/// opening) and the module that holds only a file.
pub fn module_resources() -> Vec<Value> {
    vec![
        json!({"id": "web/config", "module": SERVICE_MODULE, "type": "file", "path": HELD_FILE,
               "content": "written by the mesh\n", "mode": "0644"}),
        json!({"id": "web/container", "module": SERVICE_MODULE, "type": "container",
               "name": SERVICE_MODULE, "image": BUSYBOX_IMAGE, "command": serve(&[80]),
               "ports": [{"host_port": ports::SERVED, "container_port": 80, "proto": "tcp"}],
               "restart": "unless-stopped"}),
        json!({"id": "web/http", "module": SERVICE_MODULE, "type": "opening",
               "port": ports::SERVED, "proto": "tcp", "from": "anywhere", "path": "forwarded"}),
        json!({"id": "site/motd", "module": FILE_MODULE, "type": "file", "path": FILE_MODULE_FILE,
               "content": "welcome, from the mesh\n", "mode": "0644"}),
    ]
}
