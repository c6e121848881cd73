//! A real RabbitMQ broker for the link's tests and benchmark: Debian's `rabbitmq-server`, started
//! on ports of its own (the TLS listener, Erlang distribution and its own epmd) with a certificate
//! made for it by `openssl`, every file under one directory owned by the `rabbitmq` user, and
//! stopped when dropped (or when the process exits, for a broker kept in a static). `rabbitmqctl`
//! runs with a deadline, from argv arrays.

use crate::error::{Error, Result};
use crate::exec::{self, Described, Output};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The deadline of one `rabbitmqctl` call (the Erlang VM starts for each).
pub const CTL_DEADLINE: Duration = Duration::from_secs(60);
/// How long the broker may take to start: about 5 s here, much longer with cores shared.
pub const START_DEADLINE: Duration = Duration::from_secs(120);

/// The administrator the broker is created with: the controller's stand-in connects as it.
pub const ADMIN_USER: &str = "controller";

static NEXT: AtomicU64 = AtomicU64::new(0);

/// Brokers not yet stopped, stopped at process exit (a broker kept in a static is never dropped).
static LIVE: Mutex<Vec<Ctl>> = Mutex::new(Vec::new());

/// How to reach one broker's `rabbitmqctl`: its node name and environment.
#[derive(Debug, Clone)]
pub struct Ctl {
    node: String,
    env: Vec<(String, String)>,
    dir: PathBuf,
}

impl Ctl {
    /// Runs `rabbitmqctl ARGS` against this broker within [`CTL_DEADLINE`]; a non-zero exit is
    /// an error carrying the arguments and stderr.
    pub fn run(&self, args: &[&str]) -> Result<Output> {
        self.run_within(args, CTL_DEADLINE)
    }

    pub fn run_within(&self, args: &[&str], deadline: Duration) -> Result<Output> {
        let mut cmd = Command::new("rabbitmqctl");
        cmd.arg("-n").arg(&self.node).arg("-q").args(args);
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        cmd.stdin(Stdio::null());
        let what = Described::of_command(&cmd);
        exec::ok(exec::run_described(&mut cmd, &what, deadline)?, &what)
    }

    /// Imports a definitions document (users, permissions, queues …) in one call.
    pub fn import(&self, definitions: &serde_json::Value) -> Result<()> {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = self.dir.join(format!("definitions-{n}.json"));
        std::fs::write(&path, serde_json::to_vec(definitions).expect("json"))
            .map_err(|e| Error::io(&path, e))?;
        chown_rabbitmq(&path)?;
        let r = self.run(&["import_definitions", &path.to_string_lossy()]);
        let _ = std::fs::remove_file(&path);
        r.map(|_| ())
    }

    fn stop(&self) -> Result<()> {
        self.run(&["stop"]).map(|_| ())
    }

    fn pid(&self) -> Option<i32> {
        std::fs::read_to_string(self.dir.join("pid"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }
}

/// A running broker.
#[derive(Debug)]
pub struct Rabbit {
    ctl: Ctl,
    /// The TLS listener's port on 127.0.0.1.
    pub port: u16,
    /// The SHA-256 of its certificate's DER, lowercase hex.
    pub fingerprint: String,
    /// The administrator's password.
    pub admin_password: String,
    pub dir: PathBuf,
}

/// A port free on 127.0.0.1 just now.
pub fn free_port() -> Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| Error::io("127.0.0.1:0", e))?;
    Ok(l.local_addr()
        .map_err(|e| Error::io("127.0.0.1:0", e))?
        .port())
}

fn chown_rabbitmq(path: &Path) -> Result<()> {
    exec::run_ok(
        Command::new("chown")
            .args(["-R", "rabbitmq:rabbitmq"])
            .arg(path),
    )
    .map(|_| ())
}

impl Rabbit {
    /// Starts a broker with a fresh certificate on ports of its own and waits until it answers.
    /// Needs root, `rabbitmq-server` and `openssl`; a missing one is an error, never a skip.
    pub fn start() -> Result<Rabbit> {
        Self::start_with(None)
    }

    /// Starts a cluster of `n` brokers on this machine: one epmd shared by its members (so they
    /// find each other), one certificate presented by every member (the pin is one fingerprint),
    /// the others joined to the first. Users, permissions and queue definitions are the
    /// cluster's; a classic queue lives on the member it was declared on.
    pub fn cluster(n: usize) -> Result<Vec<Rabbit>> {
        let first = Self::start_with(None)?;
        let mut members = vec![];
        for _ in 1..n {
            let m = Self::start_with(Some(&first))?;
            m.ctl.run(&["stop_app"])?;
            m.ctl.run(&["join_cluster", &first.ctl.node])?;
            m.ctl.run(&["start_app"])?;
            m.ctl.run(&["await_startup"])?;
            members.push(m);
        }
        members.insert(0, first);
        Ok(members)
    }

    /// The node name `rabbitmqctl` and the cluster know this broker by.
    pub fn node_name(&self) -> &str {
        &self.ctl.node
    }

    fn start_with(join: Option<&Rabbit>) -> Result<Rabbit> {
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        if uid != 0 {
            return Err(Error::NotRoot { uid });
        }
        exec::require("rabbitmq-server", "rabbitmq-server")?;
        exec::require("setpriv", "util-linux")?;
        exec::require("rabbitmqctl", "rabbitmq-server")?;
        exec::require("openssl", "openssl")?;
        sweep_stale();
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = format!("mhb{}x{n}", std::process::id());
        // The broker runs as `rabbitmq`, so its directory and every parent must be readable by it.
        let dir = PathBuf::from(format!("/tmp/mesh-broker-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("mnesia")).map_err(|e| Error::io(&dir, e))?;
        std::fs::create_dir_all(dir.join("log")).map_err(|e| Error::io(&dir, e))?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| Error::io(&dir, e))?;
        if let Some(other) = join {
            for f in ["key.pem", "cert.pem"] {
                std::fs::copy(other.dir.join(f), dir.join(f))
                    .map_err(|e| Error::io(dir.join(f), e))?;
            }
        } else {
            exec::run_ok(
                Command::new("openssl")
                    .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
                    .args(["ec_paramgen_curve:prime256v1", "-nodes", "-days", "3"])
                    .args(["-subj", "/CN=mesh-broker", "-keyout"])
                    .arg(dir.join("key.pem"))
                    .arg("-out")
                    .arg(dir.join("cert.pem")),
            )?;
        }
        let der = exec::run_ok(
            Command::new("openssl")
                .args(["x509", "-outform", "der", "-in"])
                .arg(dir.join("cert.pem"))
                .arg("-out")
                .arg(dir.join("cert.der")),
        )
        .and_then(|_| {
            std::fs::read(dir.join("cert.der")).map_err(|e| Error::io(dir.join("cert.der"), e))
        })?;
        let fingerprint = link::fingerprint(&der);
        let port = free_port()?;
        let dist_port = free_port()?;
        let epmd_port = match join {
            Some(other) => other
                .ctl
                .env
                .iter()
                .find(|(k, _)| k == "ERL_EPMD_PORT")
                .and_then(|(_, v)| v.parse().ok())
                .unwrap_or(free_port()?),
            None => free_port()?,
        };
        // A member that joins a cluster takes the cluster's users, the first member's
        // administrator among them.
        let admin_password = match join {
            Some(other) => other.admin_password.clone(),
            None => format!("admin-{}-{n}", std::process::id()),
        };
        let conf = format!(
            "listeners.tcp = none\n\
             listeners.ssl.default = 127.0.0.1:{port}\n\
             ssl_options.certfile = {d}/cert.pem\n\
             ssl_options.keyfile = {d}/key.pem\n\
             ssl_options.verify = verify_none\n\
             ssl_options.fail_if_no_peer_cert = false\n\
             loopback_users = none\n\
             default_user = {ADMIN_USER}\n\
             default_pass = {admin_password}\n\
             log.file.level = info\n\
             log.console = false\n",
            d = dir.display()
        );
        let write = |p: PathBuf, s: &str| std::fs::write(&p, s).map_err(|e| Error::io(&p, e));
        write(dir.join("rabbit.conf"), &conf)?;
        write(dir.join("enabled_plugins"), "[].\n")?;
        chown_rabbitmq(&dir)?;
        let d = dir.display();
        let env: Vec<(String, String)> = [
            ("RABBITMQ_NODENAME", format!("{name}@localhost")),
            ("RABBITMQ_NODE_PORT", free_port()?.to_string()),
            ("RABBITMQ_DIST_PORT", dist_port.to_string()),
            ("ERL_EPMD_PORT", epmd_port.to_string()),
            ("RABBITMQ_MNESIA_BASE", format!("{d}/mnesia")),
            ("RABBITMQ_LOG_BASE", format!("{d}/log")),
            ("RABBITMQ_PID_FILE", format!("{d}/pid")),
            ("RABBITMQ_CONFIG_FILE", format!("{d}/rabbit")),
            (
                "RABBITMQ_ENABLED_PLUGINS_FILE",
                format!("{d}/enabled_plugins"),
            ),
            ("HOME", d.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let env_text: String = env.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
        write(dir.join("env"), &env_text)?;
        let ctl = Ctl {
            node: format!("{name}@localhost"),
            env,
            dir: dir.clone(),
        };
        let rabbit = Rabbit {
            ctl: ctl.clone(),
            port,
            fingerprint,
            admin_password,
            dir,
        };
        lock(&LIVE).push(ctl);
        register_exit_hook();
        rabbit.launch()?;
        Ok(rabbit)
    }

    fn launch(&self) -> Result<()> {
        let out = std::fs::File::create(self.dir.join("server.out"))
            .map_err(|e| Error::io(self.dir.join("server.out"), e))?;
        let err = out
            .try_clone()
            .map_err(|e| Error::io(self.dir.join("server.out"), e))?;
        // The VM is started as `rabbitmq` with setpriv rather than the Debian wrapper's `su`,
        // which goes through PAM and drops the open-files limit to 1,024: the broker holds one
        // descriptor per connection, and the fleet benchmark gives it thousands.
        let mut cmd = Command::new("setpriv");
        cmd.args([
            "--reuid=rabbitmq",
            "--regid=rabbitmq",
            "--init-groups",
            "/usr/lib/rabbitmq/bin/rabbitmq-server",
        ]);
        cmd.current_dir(&self.dir);
        cmd.envs(self.ctl.env.iter().map(|(k, v)| (k, v)))
            // The Erlang cookie `rabbitmqctl` reads (through the wrapper's `su`, as `rabbitmq`)
            // is the one in that user's home.
            .env("HOME", "/var/lib/rabbitmq")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        let what = Described::of_command(&cmd);
        // The server's own wrapper execs the VM as `rabbitmq`; it is stopped with `rabbitmqctl
        // stop` (and its pid from the pid file if that fails), and reaped by a thread here.
        let mut child = cmd.spawn().map_err(|e| what.spawn_error(e))?;
        std::thread::spawn(move || {
            let _ = child.wait();
        });
        self.wait_up()
    }

    fn wait_up(&self) -> Result<()> {
        let started = Instant::now();
        loop {
            if self
                .ctl
                .run_within(&["await_startup"], Duration::from_secs(30))
                .is_ok()
                && std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok()
            {
                return Ok(());
            }
            if started.elapsed() > START_DEADLINE {
                return Err(Error::Failed {
                    namespace: None,
                    program: "rabbitmq-server".into(),
                    args: vec![],
                    status: format!("not up within {START_DEADLINE:?}"),
                    stderr: std::fs::read_to_string(self.dir.join("server.out"))
                        .unwrap_or_default(),
                });
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// `127.0.0.1:PORT`, the TLS listener.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Runs `rabbitmqctl` against this broker.
    pub fn ctl(&self) -> &Ctl {
        &self.ctl
    }

    /// Stops the broker (its data stays) and starts it again on the same ports.
    pub fn restart(&self) -> Result<()> {
        self.ctl.stop()?;
        self.launch()
    }

    /// Stops the broker and keeps it stopped until [`Rabbit::start_again`].
    pub fn stop(&self) -> Result<()> {
        self.ctl.stop()
    }

    pub fn start_again(&self) -> Result<()> {
        self.launch()
    }

    /// The broker's log so far.
    pub fn log(&self) -> String {
        let mut text = String::new();
        if let Ok(entries) = std::fs::read_dir(self.dir.join("log")) {
            for e in entries.flatten() {
                if e.file_name().to_string_lossy().ends_with(".log") {
                    text.push_str(&std::fs::read_to_string(e.path()).unwrap_or_default());
                }
            }
        }
        text
    }

    /// The broker VM's pid, from the pid file it wrote.
    pub fn pid(&self) -> Option<i32> {
        self.ctl.pid()
    }

    /// The broker VM's resident memory in bytes, from `/proc`.
    pub fn rss_bytes(&self) -> Option<u64> {
        let pid = self.ctl.pid()?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let kb: u64 = status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        Some(kb * 1024)
    }

    /// The users of the connections the broker holds now.
    pub fn connection_users(&self) -> Result<Vec<String>> {
        let out = self.ctl.run(&["list_connections", "user"])?;
        Ok(out
            .stdout
            .lines()
            .skip_while(|l| l.trim() == "user")
            .map(|l| l.trim().to_string())
            .filter(|l| !l.is_empty())
            .collect())
    }
}

fn stop_ctl(ctl: &Ctl) {
    let pid = ctl.pid();
    if ctl.stop().is_err() {
        if let Some(pid) = pid {
            // SAFETY: kill(2) on the broker VM's own pid, read from the pid file it wrote.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }
    // epmd refuses to go while it still lists the node: wait for the VM to be gone first.
    if let Some(pid) = pid {
        let deadline = Instant::now() + Duration::from_secs(15);
        while Path::new(&format!("/proc/{pid}")).exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    // Its own epmd, started on its own port, goes with it.
    if let Some((_, port)) = ctl.env.iter().find(|(k, _)| k == "ERL_EPMD_PORT") {
        let _ = exec::run_described(
            Command::new("epmd").args(["-port", port, "-kill"]),
            &Described::of_argv(None, &["epmd", "-port", port, "-kill"]),
            Duration::from_secs(10),
        );
    }
    let _ = std::fs::remove_dir_all(&ctl.dir);
}

/// Stops what brokers of test processes that died (an abort runs no exit hook) left behind:
/// their VMs, their epmd and their directories. Brokers of live processes are left alone.
fn sweep_stale() {
    let Ok(entries) = std::fs::read_dir("/tmp") else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix("mesh-broker-") else {
            continue;
        };
        let Some(owner) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if Path::new(&format!("/proc/{owner}")).exists() {
            continue;
        }
        let dir = e.path();
        let Ok(conf) = std::fs::read_to_string(dir.join("env")) else {
            let _ = std::fs::remove_dir_all(&dir);
            continue;
        };
        let env: Vec<(String, String)> = conf
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let node = env
            .iter()
            .find(|(k, _)| k == "RABBITMQ_NODENAME")
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        stop_ctl(&Ctl { node, env, dir });
    }
}

impl Drop for Rabbit {
    fn drop(&mut self) {
        lock(&LIVE).retain(|c| c.dir != self.dir);
        stop_ctl(&self.ctl);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

extern "C" fn stop_at_exit() {
    for ctl in std::mem::take(&mut *lock(&LIVE)) {
        stop_ctl(&ctl);
    }
}

fn register_exit_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: registering a plain extern "C" function with no arguments.
        unsafe {
            libc::atexit(stop_at_exit);
        }
    });
}
