//! A real Docker engine (Debian's `docker.io`, engine 20.10) inside a lab machine, with a local
//! busybox image, containers with published ports, and a teardown that leaves nothing behind.

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::exec::{self, Described, Output, Process};
use crate::machine::Machine;
use crate::netns;

/// The image every lab engine has: busybox-static with links for its common applets, `CMD
/// ["/bin/sh"]`, and `/www/index.html` for `httpd -h /www`. Built locally because no registry can
/// be reached.
pub const BUSYBOX_IMAGE: &str = "lab/busybox:1";

/// Applets linked in the image's /bin.
const APPLETS: &[&str] = &[
    "sh", "httpd", "nc", "sleep", "cat", "echo", "ls", "ps", "wget", "true", "false", "env", "id",
    "kill", "mkdir", "rm", "touch", "date", "hostname", "ip", "ifconfig", "netstat",
];

/// How long the engine may take to answer; dockerd starts in seconds, but two cores shared with a
/// concurrent cargo build can stretch that a lot.
const ENGINE_WAIT: Duration = Duration::from_secs(120);

/// What the lab needs to stop an engine even when its [`Docker`] handle was leaked.
#[derive(Debug, Clone)]
pub(crate) struct EngineRecord {
    pub dir: PathBuf,
    pub host: String,
    pub pid: i32,
}

/// How a lab engine is started, beyond what every lab engine gets.
#[derive(Debug, Clone, Default)]
pub struct EngineOptions {
    /// A directory put first on dockerd's PATH: dockerd writes its rules with the `iptables` it
    /// finds there (links to `iptables-legacy`, say, on a machine whose firewall is legacy).
    pub path_first: Option<PathBuf>,
    /// More of dockerd's environment (`DBUS_SYSTEM_BUS_ADDRESS` for a lab firewalld's bus, say).
    pub env: Vec<(String, std::ffi::OsString)>,
    /// dockerd's `daemon.json` (IPv6 for its bridge, say); `{}` when none is given.
    pub config: Option<String>,
}

impl EngineOptions {
    /// An engine that publishes in IPv6 too: its default bridge gets the IPv6 network `net`
    /// (`fd00:d0c::/64`, say) and its ports ip6tables' DNAT, which Docker 20.10 keeps behind
    /// `experimental`. Without it the engine is IPv4 only, and an IPv6 connection to a published
    /// port reaches docker-proxy on the incoming path instead.
    pub fn ipv6(net: &str) -> EngineOptions {
        EngineOptions {
            config: Some(format!(
                "{{\"ipv6\": true, \"fixed-cidr-v6\": \"{net}\", \"experimental\": true, \"ip6tables\": true}}\n"
            )),
            ..EngineOptions::default()
        }
    }
}

/// A Docker engine running inside a lab machine.
///
/// dockerd is started through `nsenter --net` (not `ip netns exec`, which remounts /sys and makes
/// dockerd fail with "Devices cgroup isn't mounted") with its own `--data-root`, `--exec-root`,
/// `--pidfile`, unix socket and a `--config-file` of its own (empty unless given) under the given directory, the cgroupfs
/// driver (no systemd) and lowered default ulimits (the sandbox lacks CAP_SYS_RESOURCE). Its
/// iptables rules and its docker0 bridge therefore land in that machine's namespace only.
///
/// If a system containerd is already running at /run/containerd/containerd.sock, dockerd 20.10
/// uses it instead of its own; the lab expects none to run.
///
/// Dropping it removes every container, stops dockerd (SIGTERM, then SIGKILL after 20 s), kills any
/// process still rooted or named under its directory, detaches the mounts there and removes what it
/// created in the directory.
#[derive(Debug)]
pub struct Docker {
    machine: Machine,
    record: EngineRecord,
    process: Option<Process>,
    argv: Vec<std::ffi::OsString>,
    env: Vec<(String, std::ffi::OsString)>,
}

pub(crate) fn start(machine: &Machine, dir: &Path, options: &EngineOptions) -> Result<Docker> {
    exec::require("dockerd", "docker.io")?;
    exec::require("docker", "docker.io")?;
    exec::require("tar", "tar")?;
    fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let dir = fs::canonicalize(dir).map_err(|e| Error::io(dir, e))?;
    let sock = dir.join("sock");
    let len = sock.as_os_str().len();
    if len > 107 {
        return Err(Error::SocketPathTooLong { path: sock, len });
    }
    let config = dir.join("daemon.json");
    // A configuration of the lab's own (empty unless given) keeps a host
    // /etc/docker/daemon.json from leaking into the lab.
    let text = options.config.as_deref().unwrap_or("{}\n");
    fs::write(&config, text).map_err(|e| Error::io(&config, e))?;
    let host = format!("unix://{}", sock.display());
    let arg = |name: &str, path: &Path| {
        let mut s = std::ffi::OsString::from(name);
        s.push(path);
        s
    };
    let argv: Vec<std::ffi::OsString> = vec![
        "dockerd".into(),
        arg("--config-file=", &config),
        arg("--data-root=", &dir.join("data")),
        arg("--exec-root=", &dir.join("exec")),
        arg("--pidfile=", &dir.join("dockerd.pid")),
        format!("--host={host}").into(),
        "--exec-opt=native.cgroupdriver=cgroupfs".into(),
        "--default-ulimit=nofile=1024:1024".into(),
        "--default-ulimit=nproc=1024:1024".into(),
    ];
    let mut env = options.env.clone();
    if let Some(first) = &options.path_first {
        env.push(("PATH".to_owned(), exec::path_with_first(first)));
    }
    let process = machine.spawn_env(&argv, &env)?;
    let record = EngineRecord {
        dir: dir.clone(),
        host,
        pid: process.pid() as i32,
    };
    // Recorded before waiting, so a lab torn down mid-start still stops this engine.
    machine.shared().add_engine(record.clone());
    let mut docker = Docker {
        machine: machine.clone(),
        record,
        process: Some(process),
        argv,
        env,
    };
    docker.wait_ready()?;
    docker.import_busybox()?;
    Ok(docker)
}

impl Docker {
    /// The value for `DOCKER_HOST`, `unix://DIR/sock`, through which tools and the program under
    /// test reach this engine.
    pub fn docker_host(&self) -> &str {
        &self.record.host
    }

    /// The machine the engine runs in.
    pub fn machine(&self) -> &Machine {
        &self.machine
    }

    /// The engine's directory.
    pub fn dir(&self) -> &Path {
        &self.record.dir
    }

    /// The pid of dockerd.
    pub fn pid(&self) -> u32 {
        self.record.pid as u32
    }

    /// What dockerd has logged so far.
    pub fn log(&self) -> String {
        self.process.as_ref().map(Process::log).unwrap_or_default()
    }

    /// A `docker` client command talking to this engine (runs in the host namespace; the unix
    /// socket is what connects it).
    pub fn command<S: AsRef<OsStr>>(&self, args: &[S]) -> Command {
        let mut cmd = Command::new("docker");
        cmd.env("DOCKER_HOST", &self.record.host)
            .env_remove("DOCKER_CONTEXT")
            .args(args)
            .stdin(Stdio::null());
        cmd
    }

    /// Runs `docker ARGS…` against this engine; a non-zero exit is an error with its stderr.
    pub fn docker<S: AsRef<OsStr>>(&self, args: &[S]) -> Result<Output> {
        let mut argv: Vec<&OsStr> = vec![OsStr::new("docker")];
        argv.extend(args.iter().map(AsRef::as_ref));
        let what = Described::of_argv(None, &argv);
        exec::ok(
            exec::run_described(&mut self.command(args), &what, exec::DEFAULT_TIMEOUT)?,
            &what,
        )
    }

    /// `docker run -d --name NAME OPTIONS… lab/busybox:1 ARGV…`; returns the container id.
    /// Example: `run_container("web", &["-p", "8082:80"], &["/bin/httpd", "-f", "-p", "80", "-h", "/www"])`.
    pub fn run_container(&self, name: &str, options: &[&str], argv: &[&str]) -> Result<String> {
        let mut args = vec!["run", "-d", "--name", name];
        args.extend_from_slice(options);
        args.push(BUSYBOX_IMAGE);
        args.extend_from_slice(argv);
        Ok(self.docker(&args)?.stdout.trim().to_owned())
    }

    /// Removes a container, running or not.
    pub fn remove_container(&self, name: &str) -> Result<()> {
        self.docker(&["rm", "-f", name])?;
        Ok(())
    }

    /// Stops dockerd the way a machine going down does (SIGTERM: it stops its containers and
    /// exits) and starts it again on the same data, as the machine coming up does: containers
    /// with a restart policy come back, and dockerd writes its rules again.
    pub fn restart(&mut self) -> Result<()> {
        self.stop_daemon()?;
        self.start_daemon()
    }

    /// Stops dockerd as a machine going down does (SIGTERM: it stops its containers, keeping
    /// them, and exits), leaving its data for [`Docker::start_daemon`].
    pub fn stop_daemon(&mut self) -> Result<()> {
        if let Some(mut p) = self.process.take() {
            // dockerd stops each container with its own grace (ten seconds) before it exits.
            p.terminate(Duration::from_secs(60));
        }
        Ok(())
    }

    /// Starts dockerd again on the same data, as the machine coming up does: containers with a
    /// restart policy come back, and dockerd writes its rules again. Nothing if it runs.
    pub fn start_daemon(&mut self) -> Result<()> {
        if self.process.as_mut().is_some_and(Process::is_running) {
            return Ok(());
        }
        let process = self.machine.spawn_env(&self.argv, &self.env)?;
        self.record.pid = process.pid() as i32;
        self.machine.shared().remove_engine(&self.record.dir);
        self.machine.shared().add_engine(self.record.clone());
        self.process = Some(process);
        self.wait_ready()
    }

    /// Stops the engine now and reports the first problem met (dropping does the same silently).
    pub fn stop(mut self) -> Result<()> {
        match self.shutdown().into_iter().next() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn shutdown(&mut self) -> Vec<Error> {
        let problems = stop_engine(&self.record);
        if let Some(mut p) = self.process.take() {
            p.kill();
        }
        self.machine.shared().remove_engine(&self.record.dir);
        problems
    }

    fn wait_ready(&mut self) -> Result<()> {
        let deadline = Instant::now() + ENGINE_WAIT;
        loop {
            let probe = exec::run_described(
                &mut self.command(&["version", "--format", "{{.Server.Version}}"]),
                &Described::of_argv(None, &["docker", "version"]),
                Duration::from_secs(15),
            );
            if matches!(&probe, Ok(out) if out.success()) {
                return Ok(());
            }
            let running = self.process.as_mut().is_some_and(Process::is_running);
            if !running || Instant::now() >= deadline {
                let log_path = self
                    .process
                    .as_ref()
                    .map(|p| p.log_path().to_owned())
                    .unwrap_or_default();
                let log = self.log();
                let tail: Vec<&str> = log.lines().rev().take(40).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                let mut log = tail.join("\n");
                if !running {
                    log.push_str("\n(dockerd has exited)");
                }
                return Err(Error::DockerNotReady {
                    namespace: self.machine.netns().to_owned(),
                    host: self.record.host.clone(),
                    waited: ENGINE_WAIT,
                    log_path,
                    log,
                });
            }
            thread::sleep(Duration::from_millis(250));
        }
    }

    /// Lays out busybox-static with its links, packs it with `tar -C DIR -cf image.tar .` and
    /// imports that as `lab/busybox:1` (no shell).
    fn import_busybox(&self) -> Result<()> {
        let root = self.record.dir.join("image");
        let busybox = static_busybox()?;
        for sub in ["bin", "www", "tmp", "etc"] {
            let d = root.join(sub);
            fs::create_dir_all(&d).map_err(|e| Error::io(&d, e))?;
        }
        let target = root.join("bin/busybox");
        fs::copy(&busybox, &target).map_err(|e| Error::io(&target, e))?;
        for applet in APPLETS {
            let link = root.join("bin").join(applet);
            if !link.exists() {
                std::os::unix::fs::symlink("busybox", &link).map_err(|e| Error::io(&link, e))?;
            }
        }
        let index = root.join("www/index.html");
        fs::write(&index, "lab container\n").map_err(|e| Error::io(&index, e))?;

        // The image's files into a tarball beside it, which `docker import` reads by path: two
        // bounded runs, where a pipe between them would leave tar without a deadline.
        let tarball = self.record.dir.join("image.tar");
        exec::run_ok(
            Command::new("tar")
                .arg("-C")
                .arg(&root)
                .arg("-cf")
                .arg(&tarball)
                .arg(".")
                .stdin(Stdio::null()),
        )?;
        let mut import_args = vec![
            OsStr::new("import"),
            OsStr::new("--change"),
            OsStr::new(r#"CMD ["/bin/sh"]"#),
        ];
        import_args.push(tarball.as_os_str());
        import_args.push(OsStr::new(BUSYBOX_IMAGE));
        let imported = self.docker(&import_args);
        let _ = fs::remove_file(&tarball);
        imported?;
        Ok(())
    }
}

impl Drop for Docker {
    fn drop(&mut self) {
        for problem in self.shutdown() {
            eprintln!(
                "docker engine {}: teardown: {problem}",
                self.record.dir.display()
            );
        }
    }
}

/// The busybox binary to put in the image; it must be static, since the image has no libc.
fn static_busybox() -> Result<PathBuf> {
    let missing = || Error::MissingProgram {
        program: "busybox (statically linked)".to_owned(),
        package: "busybox-static".to_owned(),
    };
    for candidate in ["/bin/busybox", "/usr/bin/busybox"] {
        let path = Path::new(candidate);
        if let Ok(bytes) = fs::read(path) {
            if is_static_elf(&bytes) {
                return Ok(path.to_owned());
            }
            return Err(missing());
        }
    }
    Err(missing())
}

/// Whether an ELF64 file has no PT_INTERP program header (no dynamic loader).
fn is_static_elf(bytes: &[u8]) -> bool {
    let u16_at = |o: usize| {
        bytes
            .get(o..o + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
    };
    let u32_at = |o: usize| {
        bytes
            .get(o..o + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let u64_at = |o: usize| {
        bytes
            .get(o..o + 8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("eight bytes")))
    };
    if bytes.get(..5) != Some(b"\x7fELF\x02") {
        return false;
    }
    let (Some(phoff), Some(phentsize), Some(phnum)) = (u64_at(0x20), u16_at(0x36), u16_at(0x38))
    else {
        return false;
    };
    (0..usize::from(phnum)).all(|i| {
        let at = phoff as usize + i * usize::from(phentsize);
        u32_at(at).is_some_and(|kind| kind != 3)
    })
}

/// Stops one engine: containers removed, dockerd terminated, stray processes killed, mounts under
/// its directory detached, its files removed. Returns every problem met.
pub(crate) fn stop_engine(engine: &EngineRecord) -> Vec<Error> {
    let mut problems = Vec::new();
    if netns::alive(engine.pid) {
        let client = |args: &[&str]| {
            let mut cmd = Command::new("docker");
            cmd.env("DOCKER_HOST", &engine.host)
                .env_remove("DOCKER_CONTEXT")
                .args(args)
                .stdin(Stdio::null());
            let mut argv = vec!["docker"];
            argv.extend_from_slice(args);
            let what = Described::of_argv(None, &argv);
            exec::run_described(&mut cmd, &what, Duration::from_secs(60))
                .and_then(|out| exec::ok(out, &what))
        };
        // Removing the containers through the engine also removes their cgroups and mounts.
        match client(&["ps", "-aq"]) {
            Ok(out) => {
                let ids: Vec<&str> = out.stdout.split_whitespace().collect();
                if !ids.is_empty() {
                    let mut args = vec!["rm", "-f"];
                    args.extend(ids);
                    if let Err(e) = client(&args) {
                        problems.push(e);
                    }
                }
            }
            Err(e) => problems.push(e),
        }
        // SAFETY: kill has no memory effects; the pid is alive and is the engine's dockerd.
        unsafe { libc::kill(engine.pid, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(20);
        while netns::alive(engine.pid) && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(50));
        }
        if netns::alive(engine.pid) {
            exec::kill_group(engine.pid, libc::SIGKILL);
        }
    }
    let (_, more) = sweep_dir(&engine.dir);
    problems.extend(more);
    for entry in [
        "data",
        "exec",
        "image",
        "daemon.json",
        "dockerd.pid",
        "sock",
    ] {
        let path = engine.dir.join(entry);
        let removed = if path.is_dir() {
            fs::remove_dir_all(&path)
        } else {
            fs::remove_file(&path)
        };
        match removed {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                problems.push(Error::io(&path, e))
            }
            _ => {}
        }
    }
    // The directory itself goes too when nothing else was kept in it.
    let _ = fs::remove_dir(&engine.dir);
    problems
}

/// Kills whatever still runs from `dir` (a dead engine's containerd and shims, found by the paths
/// on their command lines, and its containers' processes, found by the container ids in their
/// cgroups), removes those containers' cgroups and detaches every mount under `dir`; returns the
/// pids killed and the problems met. Container processes cannot be found by path: they live in
/// their own mount namespace, where their root reads as `/`.
pub(crate) fn sweep_dir(dir: &Path) -> (Vec<i32>, Vec<Error>) {
    let ids = container_ids(dir, 4);
    let mut pids = netns::pids_under(dir);
    pids.extend(netns::pids_in_cgroups(&ids));
    pids.sort_unstable();
    pids.dedup();
    let killed = netns::kill_and_wait(&pids, Duration::from_secs(10));
    for id in &ids {
        remove_container_cgroups(id);
    }
    (killed, netns::unmount_under(dir))
}

/// Ids of the containers an engine under `dir` knows: the entries of every `data/containers`
/// directory found within `depth` levels.
fn container_ids(dir: &Path, depth: usize) -> Vec<String> {
    let containers = dir.join("data").join("containers");
    let mut ids: Vec<String> = fs::read_dir(&containers)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|id| id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit()))
                .collect()
        })
        .unwrap_or_default();
    if depth > 0 {
        if let Ok(entries) = fs::read_dir(dir) {
            for entry in entries.filter_map(|e| e.ok()) {
                let path = entry.path();
                // Only real directories: never follow a link out of the lab, nor into a mount.
                let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
                if is_dir && path.file_name() != Some(std::ffi::OsStr::new("data")) {
                    ids.extend(container_ids(&path, depth - 1));
                }
            }
        }
    }
    ids
}

/// Removes the (now empty) cgroups the cgroupfs driver made for a container, in every hierarchy.
fn remove_container_cgroups(id: &str) {
    let Ok(hierarchies) = fs::read_dir("/sys/fs/cgroup") else {
        return;
    };
    let mut candidates = vec![Path::new("/sys/fs/cgroup/docker").join(id)];
    for h in hierarchies.filter_map(|e| e.ok()) {
        candidates.push(h.path().join("docker").join(id));
    }
    for cgroup in candidates {
        // rmdir is the only way to remove a cgroup, and succeeds only once it is empty.
        let _ = fs::remove_dir(cgroup);
    }
}

#[cfg(test)]
mod tests {
    use super::is_static_elf;

    #[test]
    fn static_elf_detection_reads_program_headers() {
        assert!(!is_static_elf(b"not an elf"));
        // The test binary itself is dynamically linked against glibc.
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        assert!(!is_static_elf(&me));
    }
}
