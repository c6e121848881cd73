//! A machine of the lab: one network namespace, with commands, background processes, addresses,
//! listeners and probes run inside it.

use std::ffi::OsStr;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::docker::{self, Docker};
use crate::error::{Error, Result};
use crate::exec::{self, Described, Output, Process};
use crate::lab::{validate_name, Shared};
use crate::netns;
use crate::probe::{self, Probe, UdpEcho};

/// The variable with which the lab asks mesh-host, under a `--root` other than `/`, for the
/// machine's own service and package managers and container runtime (mesh-host's
/// `system::HOST_TOOLS_VAR`): set on every program a machine runs, since the lab's stubs and
/// private engines stand in for them.
pub const HOST_TOOLS_VAR: &str = "MESH_HOST_HOST_TOOLS";

/// How long a lab listener may take to start listening.
const READY_WAIT: Duration = Duration::from_secs(15);

/// A handle on one machine of a [`crate::Lab`]; cheap to clone, valid while the lab lives.
#[derive(Debug, Clone)]
pub struct Machine {
    name: String,
    netns: String,
    shared: Arc<Shared>,
}

impl Machine {
    pub(crate) fn new(name: String, netns: String, shared: Arc<Shared>) -> Machine {
        Machine {
            name,
            netns,
            shared,
        }
    }

    /// The short name given at creation (`node`, `outside`, ...).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The full namespace name, `<prefix>-<name>`.
    pub fn netns(&self) -> &str {
        &self.netns
    }

    /// The namespace's bind mount, `/var/run/netns/<prefix>-<name>`.
    pub fn netns_path(&self) -> PathBuf {
        netns::netns_path(&self.netns)
    }

    /// A command running `argv` inside this machine through
    /// `nsenter --net=/var/run/netns/NAME -- argv…`, with stdin closed. Only the network namespace
    /// changes (unlike `ip netns exec`, /sys is not remounted, which dockerd needs). Add
    /// environment variables to it and run it with [`crate::run`] or [`crate::run_ok`].
    pub fn command<S: AsRef<OsStr>>(&self, argv: &[S]) -> Command {
        let mut net = std::ffi::OsString::from("--net=");
        net.push(self.netns_path());
        let mut cmd = Command::new("nsenter");
        cmd.arg(net).arg("--");
        cmd.args(argv);
        cmd.stdin(Stdio::null());
        // mesh-host under a `--root` other than `/` refuses the machine's service and package
        // managers unless asked for them: the lab's stubs stand in for them, so it asks.
        cmd.env(HOST_TOOLS_VAR, "1");
        cmd
    }

    fn described<S: AsRef<OsStr>>(&self, argv: &[S]) -> Described {
        Described::of_argv(Some(&self.netns), argv)
    }

    /// Runs `argv` inside the machine and returns its output whatever its exit status.
    pub fn run<S: AsRef<OsStr>>(&self, argv: &[S]) -> Result<Output> {
        self.run_timeout(argv, exec::DEFAULT_TIMEOUT)
    }

    /// Like [`Machine::run`] with an explicit bound on how long the program may take.
    pub fn run_timeout<S: AsRef<OsStr>>(&self, argv: &[S], timeout: Duration) -> Result<Output> {
        exec::run_described(&mut self.command(argv), &self.described(argv), timeout)
    }

    /// Runs `argv` inside the machine; a non-zero exit is an error naming the namespace, the
    /// program, its arguments, its status and its stderr.
    pub fn run_ok<S: AsRef<OsStr>>(&self, argv: &[S]) -> Result<Output> {
        exec::ok(self.run(argv)?, &self.described(argv))
    }

    /// Starts `argv` in the background inside the machine; its output goes to a log file in the
    /// lab directory, and it is killed (with its process group) when the handle drops.
    pub fn spawn<S: AsRef<OsStr>>(&self, argv: &[S]) -> Result<Process> {
        let what = self.described(argv);
        let log = self.shared.log_path(&self.name, &what.program);
        Process::spawn(self.command(argv), what, log, self.shared.registry.clone())
    }

    /// Like [`Machine::spawn`] with these variables added to the program's environment.
    pub fn spawn_env<S: AsRef<OsStr>>(
        &self,
        argv: &[S],
        env: &[(String, std::ffi::OsString)],
    ) -> Result<Process> {
        let what = self.described(argv);
        let log = self.shared.log_path(&self.name, &what.program);
        let mut cmd = self.command(argv);
        cmd.envs(env.iter().map(|(k, v)| (k, v)));
        Process::spawn(cmd, what, log, self.shared.registry.clone())
    }

    /// Runs `f` on a helper thread that has joined this machine's namespace (sockets it opens live
    /// there). A panic in `f` is propagated.
    pub fn in_namespace<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T> {
        netns::in_netns(&self.netns, f)
    }

    /// Brings an interface up.
    pub fn link_up(&self, ifname: &str) -> Result<()> {
        validate_name("interface", ifname, 15)?;
        self.run_ok(&["ip", "link", "set", ifname, "up"])?;
        Ok(())
    }

    /// Adds `addr/prefix_len` to an interface. IPv6 addresses are added `nodad`, so they are usable
    /// at once instead of after duplicate address detection.
    pub fn add_address(&self, ifname: &str, addr: IpAddr, prefix_len: u8) -> Result<()> {
        validate_name("interface", ifname, 15)?;
        let cidr = format!("{addr}/{prefix_len}");
        let mut argv = vec!["ip", "address", "add", &cidr, "dev", ifname];
        if addr.is_ipv6() {
            argv.push("nodad");
        }
        self.run_ok(&argv)?;
        Ok(())
    }

    /// Adds a route to `dest/prefix_len` through the gateway `via`.
    pub fn add_route(&self, dest: IpAddr, prefix_len: u8, via: IpAddr) -> Result<()> {
        let cidr = format!("{dest}/{prefix_len}");
        let via = via.to_string();
        self.run_ok(&["ip", "route", "add", &cidr, "via", &via])?;
        Ok(())
    }

    /// Writes a sysctl of this namespace, `key` in slash form below /proc/sys
    /// (`net/ipv4/conf/all/rp_filter`). Written from a thread inside the namespace, because
    /// /proc/sys/net shows the namespace of the thread that opens it.
    pub fn set_sysctl(&self, key: &str, value: &str) -> Result<()> {
        if key.split('/').any(|part| part.is_empty() || part == "..") {
            return Err(Error::InvalidName {
                what: "sysctl",
                name: key.to_owned(),
                reason: "must be a relative path below /proc/sys",
            });
        }
        let path = Path::new("/proc/sys").join(key);
        self.in_namespace(|| std::fs::write(&path, value))?
            .map_err(|e| Error::io(&path, e))
    }

    /// Connects to `addr:port` over TCP from inside this machine.
    pub fn probe_tcp(&self, addr: IpAddr, port: u16, timeout: Duration) -> Result<Probe> {
        self.probe(None, addr, port, timeout, "tcp probe", probe::tcp)
    }

    /// Like [`Machine::probe_tcp`], from the source address `source`, which must be an address of
    /// this machine (e.g. a private-range address added to the outside machine to spoof one).
    pub fn probe_tcp_from(
        &self,
        source: IpAddr,
        addr: IpAddr,
        port: u16,
        timeout: Duration,
    ) -> Result<Probe> {
        self.probe(Some(source), addr, port, timeout, "tcp probe", probe::tcp)
    }

    /// Sends a datagram to `addr:port` and waits for it to be echoed; see [`Probe`] for what
    /// `Reached` means for UDP.
    pub fn probe_udp(&self, addr: IpAddr, port: u16, timeout: Duration) -> Result<Probe> {
        self.probe(None, addr, port, timeout, "udp probe", probe::udp)
    }

    /// Like [`Machine::probe_udp`], from the source address `source` of this machine.
    pub fn probe_udp_from(
        &self,
        source: IpAddr,
        addr: IpAddr,
        port: u16,
        timeout: Duration,
    ) -> Result<Probe> {
        self.probe(Some(source), addr, port, timeout, "udp probe", probe::udp)
    }

    fn probe(
        &self,
        source: Option<IpAddr>,
        addr: IpAddr,
        port: u16,
        timeout: Duration,
        what: &'static str,
        f: fn(Option<IpAddr>, SocketAddr, Duration) -> std::io::Result<Probe>,
    ) -> Result<Probe> {
        self.in_namespace(|| f(source, SocketAddr::new(addr, port), timeout))?
            .map_err(|source| self.socket_error(what, port, source))
    }

    /// Sends one datagram from `source` (an address of this machine) to `addr:port` without waiting
    /// for a reply: for spoofed sources, check arrival with [`UdpEcho::received_from`].
    pub fn send_udp_from(
        &self,
        source: IpAddr,
        addr: IpAddr,
        port: u16,
        payload: &[u8],
    ) -> Result<()> {
        self.in_namespace(|| probe::udp_send(source, SocketAddr::new(addr, port), payload))?
            .map_err(|e| self.socket_error("udp send", port, e))
    }

    /// Starts `busybox httpd -f -p PORT` inside the machine (both families, every address), a real
    /// separate process standing in for a served port, and returns once the port is listening.
    pub fn listen_tcp(&self, port: u16) -> Result<Process> {
        exec::require("busybox", "busybox-static")?;
        let www = self.shared.dir.join("www");
        let port_arg = port.to_string();
        let argv = [
            OsStr::new("busybox"),
            OsStr::new("httpd"),
            OsStr::new("-f"),
            OsStr::new("-p"),
            OsStr::new(&port_arg),
            OsStr::new("-h"),
            www.as_os_str(),
        ];
        let mut process = self.spawn(&argv)?;
        self.wait_listening(&mut process, port)?;
        Ok(process)
    }

    /// Waits until `process` has a TCP socket listening on `port`, read from the process's own
    /// /proc/PID/net tables so no firewall rule in the machine can fool the check.
    pub fn wait_listening(&self, process: &mut Process, port: u16) -> Result<()> {
        let deadline = Instant::now() + READY_WAIT;
        loop {
            if tcp_listening(process.pid(), port) {
                return Ok(());
            }
            if !process.is_running() || Instant::now() >= deadline {
                return Err(Error::NotReady {
                    namespace: self.netns.clone(),
                    what: process.described(),
                    port,
                    waited: READY_WAIT,
                    log: process.log(),
                });
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts a [`UdpEcho`] on `[::]:port` (both families) inside the machine.
    pub fn listen_udp(&self, port: u16) -> Result<UdpEcho> {
        let socket = self
            .in_namespace(|| UdpSocket::bind(("::", port)))?
            .map_err(|e| self.socket_error("udp echo", port, e))?;
        UdpEcho::start(socket).map_err(|e| self.socket_error("udp echo", port, e))
    }

    /// Starts a Docker engine inside this machine with every directory of its own under `dir`; see
    /// [`Docker`]. `dir` must be short enough for `dir/sock` to be a unix socket path.
    pub fn start_docker(&self, dir: &Path) -> Result<Docker> {
        docker::start(self, dir, &docker::EngineOptions::default())
    }

    /// Like [`Machine::start_docker`], with [`docker::EngineOptions`].
    pub fn start_docker_with(&self, dir: &Path, options: &docker::EngineOptions) -> Result<Docker> {
        docker::start(self, dir, options)
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    fn socket_error(&self, what: &'static str, port: u16, source: std::io::Error) -> Error {
        Error::Socket {
            namespace: self.netns.clone(),
            what,
            port,
            source,
        }
    }
}

/// Whether /proc/PID/net/tcp or tcp6 (the tables of that process's namespace) has a socket in
/// state LISTEN (0A) on `port`.
fn tcp_listening(pid: u32, port: u16) -> bool {
    let want = format!("{port:04X}");
    ["tcp", "tcp6"].iter().any(|table| {
        std::fs::read_to_string(format!("/proc/{pid}/net/{table}"))
            .map(|text| {
                text.lines().skip(1).any(|line| {
                    let fields: Vec<&str> = line.split_whitespace().collect();
                    fields.len() > 3
                        && fields[3] == "0A"
                        && fields[1].rsplit(':').next() == Some(want.as_str())
                })
            })
            .unwrap_or(false)
    })
}
