//! Found firewalls that are daemons or keep files: firewalld on a private D-Bus and ufw with its
//! own `/etc/ufw`, each inside one lab machine, so that neither ever touches the machine's own
//! namespace, bus or files. Reusable by every lab test that needs one of these kinds.
//!
//! firewalld runs as netavark's tests run it: its own `dbus-daemon` listening on a socket in the
//! lab directory, and `firewalld --nofork --system-config DIR --default-config /usr/lib/firewalld`
//! entered in the machine's network namespace, with `DBUS_SYSTEM_BUS_ADDRESS` naming that bus.
//! ufw has no option for another configuration directory, so it runs in a mount namespace of its
//! own (held open by a `sleep`) where the lab's copies of `/etc/ufw` and `/etc/default/ufw` are
//! bind-mounted over the machine's; every ufw command, and the host under test, enters that mount
//! namespace as well as the machine's network namespace.

use crate::error::{Error, Result};
use crate::exec::{self, Output, Process};
use crate::machine::Machine;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long firewalld or ufw may take to come up on a loaded two-core machine.
const READY: Duration = Duration::from_secs(90);

/// Which firewalld a lab machine runs: the machine's own (Debian 12's firewalld 1.3, from its
/// package), or Debian trixie's firewalld 2.3 that `lab/fetch-firewalld` unpacks into the lab's
/// own place with the trixie userspace it runs on (for `StrictForwardPorts`, which 1.3 has not). Settings given with [`FirewalldProgram::with_setting`] are
/// written into the copy of `firewalld.conf` the lab machine starts with.
#[derive(Debug, Clone)]
pub struct FirewalldProgram {
    /// What comes before the program's path in an argv: the environment, the loader and the
    /// interpreter, for an unpacked firewalld; nothing for the machine's own.
    python: Vec<String>,
    firewalld: String,
    firewall_cmd: String,
    default_config: PathBuf,
    /// The configuration directory the lab's copy is made from.
    etc: PathBuf,
    settings: Vec<(String, String)>,
}

/// Where `lab/fetch-firewalld` unpacks firewalld 2.3 (its `MESH_LAB_FIREWALLD` overrides the
/// directory above `root`, and so does the lab's).
const FETCHED: &str = "/var/cache/mesh-lab/firewalld-2.3";

impl FirewalldProgram {
    /// The machine's own firewalld and firewall-cmd, from `PATH`.
    pub fn system() -> FirewalldProgram {
        FirewalldProgram {
            python: Vec::new(),
            firewalld: "firewalld".into(),
            firewall_cmd: "firewall-cmd".into(),
            default_config: "/usr/lib/firewalld".into(),
            etc: "/etc/firewalld".into(),
            settings: Vec::new(),
        }
    }

    /// firewalld 2.3 as `lab/fetch-firewalld` unpacked it, with trixie's userspace under it (its
    /// python, and libnftables 1.1: Debian 12's cannot parse the rules firewalld 2.3 writes for
    /// `StrictForwardPorts`), started by that tree's own loader with its libraries (no chroot:
    /// every path is the machine's). An error naming that script when it has not run (a test
    /// that needs it fails, it never skips).
    pub fn fetched() -> Result<FirewalldProgram> {
        let dir = std::env::var_os("MESH_LAB_FIREWALLD")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(FETCHED));
        let root = dir.join("root");
        let lib = root.join("usr/lib/x86_64-linux-gnu");
        let loader = lib.join("ld-linux-x86-64.so.2");
        let python = root.join("usr/bin/python3");
        for need in [
            root.join("usr/sbin/firewalld"),
            root.join("usr/bin/firewall-cmd"),
            root.join("usr/lib/python3/dist-packages/nftables"),
            loader.clone(),
            python.clone(),
        ] {
            if !need.exists() {
                return Err(Error::NotFetched {
                    what: "firewalld 2.3".into(),
                    path: need,
                    fetch: "lab/fetch-firewalld",
                });
            }
        }
        // The loader's --library-path holds for the python process and what it loads (GLib,
        // libnftables through ctypes), not for the machine's programs firewalld starts.
        Ok(FirewalldProgram {
            python: vec![
                format!("PYTHONHOME={}", root.join("usr").display()),
                format!("GI_TYPELIB_PATH={}", lib.join("girepository-1.0").display()),
                loader.display().to_string(),
                "--library-path".into(),
                lib.display().to_string(),
                python.display().to_string(),
            ],
            firewalld: root.join("usr/sbin/firewalld").display().to_string(),
            firewall_cmd: root.join("usr/bin/firewall-cmd").display().to_string(),
            default_config: root.join("usr/lib/firewalld"),
            etc: root.join("etc/firewalld"),
            settings: Vec::new(),
        })
    }

    /// The same program with `key=value` in its `firewalld.conf` (for example
    /// `StrictForwardPorts=yes`).
    pub fn with_setting(mut self, key: &str, value: &str) -> FirewalldProgram {
        self.settings.push((key.into(), value.into()));
        self
    }

    /// `program args…` as an argv after `env`: the interpreter and its path first for an
    /// unpacked firewalld.
    fn argv(&self, program: &str, args: &[&str]) -> Vec<String> {
        let mut out = self.python.clone();
        out.push(program.into());
        out.extend(args.iter().map(|a| a.to_string()));
        out
    }

    fn require(&self) -> Result<()> {
        if self.python.is_empty() {
            exec::require(&self.firewalld, "firewalld")?;
        }
        Ok(())
    }

    /// Makes the lab's copy of the configuration at `etc`, its settings written in.
    pub(crate) fn copy_config(&self, etc: &Path) -> Result<()> {
        exec::run_ok(
            std::process::Command::new("cp")
                .arg("-a")
                .arg(&self.etc)
                .arg(etc),
        )?;
        if self.settings.is_empty() {
            return Ok(());
        }
        let conf = etc.join("firewalld.conf");
        let text = std::fs::read_to_string(&conf).map_err(|e| Error::io(&conf, e))?;
        let mut lines: Vec<String> = text.lines().map(String::from).collect();
        for (key, value) in &self.settings {
            let line = format!("{key}={value}");
            match lines
                .iter_mut()
                .find(|l| l.trim_start().starts_with(&format!("{key}=")))
            {
                Some(l) => *l = line,
                None => lines.push(line),
            }
        }
        std::fs::write(&conf, lines.join("\n") + "\n").map_err(|e| Error::io(&conf, e))
    }
}

/// firewalld running inside a lab machine, on a bus of its own.
pub struct Firewalld {
    machine: Machine,
    program: FirewalldProgram,
    etc: PathBuf,
    socket: PathBuf,
    bus: Option<Process>,
    daemon: Option<Process>,
}

const BUS_CONFIG: &str = r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path=SOCKET</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="root"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
"#;

impl Machine {
    /// Starts firewalld inside this machine with its configuration copied from the machine's
    /// `/etc/firewalld` into `dir/etc` (so tests may change it), on a private bus at `dir/bus`.
    /// Waits until `firewall-cmd --state` says running.
    pub fn start_firewalld(&self, dir: &Path) -> Result<Firewalld> {
        self.start_firewalld_with(dir, &dir.join("etc"))
    }

    /// Starts firewalld as [`Machine::start_firewalld`] does, with its configuration directory
    /// at `etc` (a copy of the machine's `/etc/firewalld` made there if missing), so a bed keeps
    /// it where the host under test looks (`ROOT/etc/firewalld`).
    pub fn start_firewalld_with(&self, dir: &Path, etc: &Path) -> Result<Firewalld> {
        self.start_firewalld_program(&FirewalldProgram::system(), dir, etc)
    }

    /// Starts `program`'s firewalld as [`Machine::start_firewalld_with`] does, its configuration
    /// copied from the program's own (with its settings) into `etc` if missing.
    pub fn start_firewalld_program(
        &self,
        program: &FirewalldProgram,
        dir: &Path,
        etc: &Path,
    ) -> Result<Firewalld> {
        program.require()?;
        exec::require("dbus-daemon", "dbus")?;
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        if !etc.exists() {
            program.copy_config(etc)?;
        }
        let socket = dir.join("bus");
        let conf = dir.join("bus.conf");
        std::fs::write(
            &conf,
            BUS_CONFIG.replace("SOCKET", &socket.display().to_string()),
        )
        .map_err(|e| Error::io(&conf, e))?;
        let _ = std::fs::remove_file(&socket);
        let bus = self.spawn(&[
            OsString::from("dbus-daemon"),
            OsString::from("--nofork"),
            OsString::from(format!("--config-file={}", conf.display())),
        ])?;
        let until = Instant::now() + READY;
        while !socket.exists() {
            if Instant::now() > until {
                return Err(Error::NotReady {
                    namespace: self.netns().into(),
                    what: "dbus-daemon".into(),
                    port: 0,
                    waited: READY,
                    log: bus.log(),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut fw = Firewalld {
            machine: self.clone(),
            program: program.clone(),
            etc: etc.to_path_buf(),
            socket,
            bus: Some(bus),
            daemon: None,
        };
        fw.start()?;
        Ok(fw)
    }
}

impl Firewalld {
    /// The bus address, as `DBUS_SYSTEM_BUS_ADDRESS` takes it.
    pub fn address(&self) -> String {
        format!("unix:path={}", self.socket.display())
    }

    /// `DBUS_SYSTEM_BUS_ADDRESS=…`, for `env` in front of a command.
    pub fn env(&self) -> String {
        format!("DBUS_SYSTEM_BUS_ADDRESS={}", self.address())
    }

    /// `DBUS_SYSTEM_BUS_ADDRESS` and the bus address, for a spawned program's environment (the
    /// engine's, which shares this bus).
    pub(crate) fn env_var(&self) -> (String, std::ffi::OsString) {
        ("DBUS_SYSTEM_BUS_ADDRESS".to_owned(), self.address().into())
    }

    /// firewalld's configuration directory (its `/etc/firewalld`).
    pub fn config_dir(&self) -> PathBuf {
        self.etc.clone()
    }

    /// Runs `firewall-cmd args…` in the machine against this firewalld.
    pub fn cmd(&self, args: &[&str]) -> Result<Output> {
        self.machine.run_ok(&self.cmd_argv(args))
    }

    /// The argv of `firewall-cmd args…` against this firewalld.
    fn cmd_argv(&self, args: &[&str]) -> Vec<String> {
        let mut argv = vec!["env".to_string(), self.env()];
        argv.extend(self.program.argv(&self.program.firewall_cmd, args));
        argv
    }

    /// The daemon's pid, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.daemon.as_ref().map(Process::pid)
    }

    /// Whether the daemon is still running (a retire stops it).
    pub fn is_running(&mut self) -> bool {
        self.daemon.as_mut().is_some_and(Process::is_running)
    }

    /// Starts the daemon, as its unit would, and waits until it says running.
    pub fn start(&mut self) -> Result<()> {
        if self.is_running() {
            return Ok(());
        }
        let daemon = self.machine.spawn(&self.start_argv())?;
        self.daemon = Some(daemon);
        let until = Instant::now() + READY;
        loop {
            let out = self.machine.run(&self.cmd_argv(&["--state"]))?;
            if out.stdout.trim() == "running" {
                return Ok(());
            }
            if Instant::now() > until || !self.is_running() {
                return Err(Error::NotReady {
                    namespace: self.machine.netns().into(),
                    what: "firewalld".into(),
                    port: 0,
                    waited: READY,
                    log: self.daemon.as_ref().map(Process::log).unwrap_or_default(),
                });
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The argv that starts the daemon in the machine, as its unit's `ExecStart` would.
    pub fn start_argv(&self) -> Vec<String> {
        let etc = self.config_dir().display().to_string();
        let defaults = self.program.default_config.display().to_string();
        let mut argv = vec!["env".to_string(), self.env()];
        argv.extend(self.program.argv(
            &self.program.firewalld,
            &[
                "--nofork",
                "--nopid",
                "--system-config",
                &etc,
                "--default-config",
                &defaults,
                "--log-target",
                "console",
            ],
        ));
        argv
    }

    /// Stops the daemon as its unit would (SIGTERM; it removes its rules) and waits for it.
    pub fn stop(&mut self) {
        if let Some(mut d) = self.daemon.take() {
            d.terminate(Duration::from_secs(30));
        }
    }

    /// A Docker engine in the same machine that shares this firewalld's bus, as on a machine
    /// where both run: Docker then puts its rules back when firewalld reloads or restarts
    /// (firewalld 1.3 flushes every iptables table when it starts, reloads or stops).
    pub fn start_docker(&self, dir: &Path) -> Result<crate::Docker> {
        self.start_docker_with(dir, &crate::EngineOptions::default())
    }

    /// [`Firewalld::start_docker`] with more of the engine's options (its `daemon.json`, say).
    pub fn start_docker_with(
        &self,
        dir: &Path,
        options: &crate::EngineOptions,
    ) -> Result<crate::Docker> {
        let mut options = options.clone();
        options.env.push(self.env_var());
        crate::docker::start(&self.machine, dir, &options)
    }

    /// What the daemon printed.
    pub fn log(&self) -> String {
        self.daemon.as_ref().map(Process::log).unwrap_or_default()
    }
}

impl Drop for Firewalld {
    fn drop(&mut self) {
        self.stop();
        if let Some(mut b) = self.bus.take() {
            b.terminate(Duration::from_secs(5));
        }
    }
}

/// ufw inside a lab machine, with its own files in a mount namespace of its own.
pub struct Ufw {
    machine: Machine,
    dir: PathBuf,
    holder: Process,
}

impl Machine {
    /// Prepares ufw inside this machine: copies of the machine's `/etc/ufw` and
    /// `/etc/default/ufw` under `dir`, bind-mounted over the originals in a mount namespace that
    /// only the lab's commands enter. ufw is not enabled yet: configure it with [`Ufw::cmd`],
    /// then `ufw --force enable`.
    pub fn prepare_ufw(&self, dir: &Path) -> Result<Ufw> {
        exec::require("ufw", "ufw")?;
        exec::require("unshare", "util-linux")?;
        std::fs::create_dir_all(dir.join("default")).map_err(|e| Error::io(dir, e))?;
        let etc = dir.join("ufw");
        if !etc.exists() {
            exec::run_ok(
                std::process::Command::new("cp")
                    .arg("-a")
                    .arg("/etc/ufw")
                    .arg(&etc),
            )?;
        }
        let default = dir.join("default/ufw");
        std::fs::copy("/etc/default/ufw", &default).map_err(|e| Error::io(&default, e))?;
        // The mount namespace, held open by a sleep; private propagation keeps its mounts from
        // the machine's.
        let holder = self.spawn(&[
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sleep",
            "infinity",
        ])?;
        let ufw = Ufw {
            machine: self.clone(),
            dir: dir.to_path_buf(),
            holder,
        };
        // unshare has exec'd sleep once the namespace differs from ours.
        let until = Instant::now() + READY;
        let ours = std::fs::read_link("/proc/self/ns/mnt").ok();
        while std::fs::read_link(format!("/proc/{}/ns/mnt", ufw.holder.pid())).ok() == ours {
            if Instant::now() > until {
                return Err(Error::NotReady {
                    namespace: self.netns().into(),
                    what: "ufw's mount namespace".into(),
                    port: 0,
                    waited: READY,
                    log: ufw.holder.log(),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        for (from, to) in [(etc, "/etc/ufw"), (default, "/etc/default/ufw")] {
            let from = from.display().to_string();
            ufw.machine
                .run_ok(&ufw.enter(&["mount", "--bind", &from, to]))?;
        }
        Ok(ufw)
    }
}

impl Ufw {
    /// `argv` prefixed so that it runs in ufw's mount namespace (the machine's network
    /// namespace is entered by [`Machine::run`]).
    pub fn enter(&self, argv: &[&str]) -> Vec<String> {
        let mut out = vec![
            "nsenter".to_string(),
            format!("--mount=/proc/{}/ns/mnt", self.holder.pid()),
            "--".to_string(),
        ];
        out.extend(argv.iter().map(|s| s.to_string()));
        out
    }

    /// Runs `ufw args…` in the machine, with ufw's own files.
    pub fn cmd(&self, args: &[&str]) -> Result<Output> {
        let mut argv = vec!["ufw"];
        argv.extend_from_slice(args);
        self.machine.run_ok(&self.enter(&argv))
    }

    /// The lab's copy of `/etc/ufw`.
    pub fn config_dir(&self) -> PathBuf {
        self.dir.join("ufw")
    }

    /// The mount namespace's holder, whose `/proc/PID/ns/mnt` other commands enter.
    pub fn holder_pid(&self) -> u32 {
        self.holder.pid()
    }
}

impl Drop for Ufw {
    fn drop(&mut self) {
        // ufw's chains live in the machine's network namespace and go with it; the mount
        // namespace goes with its holder.
        self.holder.kill();
    }
}
