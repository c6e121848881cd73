//! The boot bed (issue 31): a Debian 12 root made by `lab/fetch-boot-root` (debootstrap, cached
//! in /var/cache/mesh-lab), copied per test, the project's `.deb` installed in it with `dpkg -i`,
//! booted with systemd as PID 1 under `systemd-nspawn -b`, and probed from a lab namespace over
//! its veth from the moment the link exists to the resident host's first reconcile. Inside,
//! three listeners start in early boot, before the network (the store's stand-in on the store's
//! port, an undeclared service, a declared one), and a unit configures `host0` right after
//! `network-pre.target`, the way a network manager does. What is checked is what a packet meets:
//! on an adopted node not one connection reaches the store's port, v4 or v6, while the
//! undeclared service answers (the link was up and the probes worked); with the boot step
//! masked the same boot lets the store's port be reached (the probes can see the hole the step
//! closes); on a converged node rebooted the derived filter holds from the first packet (the
//! undeclared service is never reached, the declared one is).

mod package;
mod release;

use lab::{Lab, Machine, Probe};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const CACHE: &str = "/var/cache/mesh-lab/boot-bookworm/root";
const STORE: u16 = 5432;
const UNDECLARED: u16 = 9090;
const DECLARED: u16 = 8080;
const INSIDE_V4: &str = "10.99.0.2";
const OUTSIDE_V4: &str = "10.99.0.1";
const INSIDE_V6: &str = "fd99::2";
const OUTSIDE_V6: &str = "fd99::1";
/// How long one probe waits for a handshake: a dropped SYN times out, so this bounds the gap
/// between two probes of one port.
const PROBE_WAIT: Duration = Duration::from_millis(100);
/// How many times each node is booted and probed.
const BOOTS: usize = 5;

/// The `.deb` `packaging/debian/build-deb` made (lab/test runs it before the tests).
fn deb() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/packaging");
    let version = env!("CARGO_PKG_VERSION");
    let deb = dir.join(format!("mesh-host_{version}_amd64.deb"));
    assert!(
        deb.exists(),
        "{} is missing: run packaging/build-static debian and packaging/debian/build-deb \
         (lab/test --prepare does)",
        deb.display()
    );
    deb
}

/// Runs `argv` to completion within `deadline` (its process group killed past it), output
/// kept; panics naming it if it cannot.
fn run(argv: &[&str], deadline: Duration) -> run::Output {
    let mut cmd = Command::new(argv[0]);
    cmd.args(&argv[1..]).stdin(Stdio::null());
    run::command(&mut cmd, None, deadline).unwrap_or_else(|e| panic!("{argv:?}: {e}"))
}

fn run_ok(argv: &[&str], deadline: Duration) -> String {
    let out = run(argv, deadline);
    assert!(out.code == Some(0), "{argv:?}: {}", text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// One copy of the cached root, with the package installed and the bed's units in place.
struct Tree {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl Tree {
    fn new() -> Tree {
        assert!(
            Path::new(CACHE).join("lib/systemd/systemd").exists(),
            "{CACHE} is missing: run lab/fetch-boot-root (lab/test --prepare does)"
        );
        let dir = tempfile::Builder::new()
            .prefix("mesh-boot-")
            .tempdir_in("/var/tmp")
            .expect("a directory for the tree");
        let root = dir.path().join("root");
        let (from, to) = (CACHE.to_string(), root.display().to_string());
        run_ok(
            &["cp", "-a", "--reflink=auto", &from, &to],
            Duration::from_secs(120),
        );
        let tree = Tree { _dir: dir, root };
        std::fs::create_dir_all(tree.root.join("opt/bed")).unwrap();
        std::fs::copy(deb(), tree.root.join("opt/bed/mesh-host.deb")).expect("the .deb copied in");
        std::fs::copy("/bin/busybox", tree.root.join("usr/local/bin/busybox"))
            .expect("busybox copied in");
        let out = tree.nspawn(&["dpkg", "-i", "/opt/bed/mesh-host.deb"]);
        assert!(out.code == Some(0), "dpkg -i: {}", text(&out));
        tree.units();
        tree
    }

    /// A command in the tree as a container without booting it, in a network namespace of its
    /// own (never the machine's).
    fn nspawn(&self, argv: &[&str]) -> run::Output {
        let root = self.root.display().to_string();
        let mut full = vec![
            "systemd-nspawn",
            "-q",
            "-D",
            &root,
            "--register=no",
            "--keep-unit",
            "--private-network",
            "--pipe",
            "--",
        ];
        full.extend_from_slice(argv);
        run(&full, Duration::from_secs(120))
    }

    fn write(&self, path: &str, text: &str) {
        let p = self.root.join(path.trim_start_matches('/'));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    }

    fn link(&self, path: &str, to: &str) {
        let p = self.root.join(path.trim_start_matches('/'));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        let _ = std::fs::remove_file(&p);
        std::os::unix::fs::symlink(to, &p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    }

    /// The listeners from early boot and the network's unit, enabled the way `systemctl enable`
    /// leaves them.
    fn units(&self) {
        self.write(
            "/etc/systemd/system/mesh-lab-listen@.service",
            "[Unit]\nDescription=the boot bed's listener on port %i, from early boot\n\
             DefaultDependencies=no\nAfter=local-fs.target\nBefore=network-pre.target\n\
             [Service]\nExecStart=/usr/local/bin/busybox nc -ll -p %i -e /bin/true\n",
        );
        for port in [STORE, UNDECLARED, DECLARED] {
            self.link(
                &format!("/etc/systemd/system/sysinit.target.wants/mesh-lab-listen@{port}.service"),
                "/etc/systemd/system/mesh-lab-listen@.service",
            );
        }
        self.write(
            "/etc/systemd/system/mesh-lab-net.service",
            &format!(
                "[Unit]\nDescription=the boot bed's network: host0 addressed as a network \
                 manager would\nDefaultDependencies=no\nWants=network-pre.target\n\
                 After=network-pre.target\nBefore=network.target\n[Service]\nType=oneshot\n\
                 RemainAfterExit=yes\nExecStart=/usr/sbin/ip link set host0 up\n\
                 ExecStart=/usr/sbin/ip address add {INSIDE_V4}/24 dev host0\n\
                 ExecStart=/usr/sbin/ip -6 address add {INSIDE_V6}/64 dev host0 nodad\n"
            ),
        );
        self.link(
            "/etc/systemd/system/sysinit.target.wants/mesh-lab-net.service",
            "/etc/systemd/system/mesh-lab-net.service",
        );
        // The resident host starts at boot, as an operator enables it.
        self.link(
            "/etc/systemd/system/multi-user.target.wants/mesh-host.service",
            "/usr/lib/systemd/system/mesh-host.service",
        );
    }

    /// The control's tree: the boot step masked and the resident host not started at boot, so
    /// a boot shows what the machine does without them.
    fn without_the_host(&self) {
        self.link("/etc/systemd/system/mesh-host-boot.service", "/dev/null");
        std::fs::remove_file(
            self.root
                .join("etc/systemd/system/multi-user.target.wants/mesh-host.service"),
        )
        .expect("the resident host's enablement");
    }

    /// The package as installed again after [`Tree::without_the_host`]: the boot step unmasked
    /// and the resident host started at boot.
    fn as_installed(&self) {
        std::fs::remove_file(self.root.join("etc/systemd/system/mesh-host-boot.service"))
            .expect("the boot step's mask");
        self.link(
            "/etc/systemd/system/multi-user.target.wants/mesh-host.service",
            "/usr/lib/systemd/system/mesh-host.service",
        );
    }

    /// `mesh-host ARGS --json` in the tree; its exit code and JSON.
    fn host(&self, args: &[&str]) -> (Option<i32>, Value) {
        let mut argv = vec!["/usr/bin/mesh-host"];
        argv.extend_from_slice(args);
        argv.push("--json");
        let out = self.nspawn(&argv);
        let json = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("mesh-host {args:?}: not JSON ({e}): {}", text(&out)));
        crate::util::contract(&String::from_utf8_lossy(&out.stdout));
        (out.code, json)
    }

    fn declare(&self, mode: &str, resources: Vec<Value>) {
        let decl = json!({
            "version": 1, "node": "boot-node", "mode": mode,
            "settings": {"ports": {"store": STORE, "bus": 5672, "broker_management": 15672,
                                   "registry": 5000, "hub": 51820}},
            "resources": resources,
        });
        self.write("/opt/bed/decl.json", &decl.to_string());
    }
}

fn text(out: &run::Output) -> String {
    format!(
        "exit {:?} signal {:?}\n{}\n{}",
        out.code,
        out.signal,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// What the probes from outside counted over one boot.
#[derive(Debug, Default)]
struct Counts {
    /// (port, family) → (tried, reached).
    tried: std::collections::BTreeMap<(u16, &'static str), (usize, usize)>,
    /// How long from the link's outside end existing to the end of the window.
    window: Duration,
}

impl Counts {
    /// `other` added to these counts (another boot of the same tree).
    fn add(&mut self, other: Counts) {
        for (k, (t, r)) in other.tried {
            let e = self.tried.entry(k).or_default();
            e.0 += t;
            e.1 += r;
        }
        self.window += other.window;
    }

    fn reached(&self, port: u16) -> usize {
        self.tried
            .iter()
            .filter(|((p, _), _)| *p == port)
            .map(|(_, (_, r))| r)
            .sum()
    }
    fn tried_of(&self, port: u16, family: &'static str) -> usize {
        self.tried.get(&(port, family)).map_or(0, |(t, _)| *t)
    }
}

/// One boot of `tree`, its veth's outside end moved into `outside` the moment it exists.
struct Boot {
    child: Child,
    log: PathBuf,
    /// This boot's bpffs, unmounted when the boot is over.
    bpf: PathBuf,
}

impl Boot {
    fn start(tree: &Tree, name: &str, outside: &Machine) -> Boot {
        // The previous boot's veth, gone with its container's namespace, leaves the outside
        // machine when the kernel has destroyed the pair: awaited, so this boot's can move in.
        // Under load the kernel's cleanup of a dead namespace can lag for many seconds (a CI run
        // saw more than 20): after 5 s the bed deletes its own previous veth, which takes both
        // ends with it, and waits for that.
        let ve = format!("ve-{name}");
        let started = Instant::now();
        let mut deleted = false;
        while outside
            .run(&["ip", "link", "show", "dev", &ve])
            .is_ok_and(|o| o.status.success())
        {
            if !deleted && started.elapsed() > Duration::from_secs(5) {
                let _ = outside.run(&["ip", "link", "del", "dev", &ve]);
                deleted = true;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the previous boot's {ve} is still in {} (deleted: {deleted})",
                outside.name()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let log = tree.root.with_file_name(format!("{name}.console"));
        let console = std::fs::File::create(&log).unwrap();
        let root = tree.root.display().to_string();
        // A bpffs of this boot's own for the container's /sys/fs/bpf (nspawn mounts /sys
        // read-only): empty at every boot, as the kernel's is after a reboot.
        let bpf = tree.root.with_file_name(format!("{name}.bpf"));
        std::fs::create_dir_all(&bpf).unwrap();
        let bpf_dir = bpf.display().to_string();
        run_ok(
            &["mount", "-t", "bpf", "bpf", &bpf_dir],
            Duration::from_secs(10),
        );
        let child = Command::new("systemd-nspawn")
            .args([
                "-q",
                "-D",
                &root,
                "-b",
                "--console=pipe",
                "--register=no",
                "--keep-unit",
            ])
            .args(["--network-veth", "-M", name])
            .arg(format!("--bind={bpf_dir}:/sys/fs/bpf"))
            // What a machine's own PID 1 has and nspawn's sandbox withholds: netfilter BPF
            // (the bpf() call and its capabilities), for the guard's second layer.
            .args([
                "--capability=CAP_BPF,CAP_PERFMON,CAP_SYS_ADMIN",
                "--system-call-filter=bpf",
            ])
            .stdin(Stdio::null())
            .stdout(console.try_clone().unwrap())
            .stderr(console)
            .spawn()
            .expect("systemd-nspawn started");
        let boot = Boot { child, log, bpf };
        // The veth's outside end is moved once nspawn is done with it: nspawn looks the link up
        // by name after making it, and lets the container's PID 1 exec systemd only once its
        // network is set up, so the move waits for that exec (a move before it fails the boot
        // with "Failed to resolve interface ve-…"). systemd brings up no interface before
        // network-pre.target, so the probes still see the whole window.
        let until = Instant::now() + Duration::from_secs(20);
        let init_runs = |b: &Boot| {
            b.leader().is_some_and(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/comm"))
                    .is_ok_and(|c| c.trim() == "systemd")
            })
        };
        while !(Path::new("/sys/class/net").join(&ve).exists() && init_runs(&boot)) {
            assert!(
                Instant::now() < until,
                "{ve} never appeared, or the container's systemd never started: {}",
                boot.console()
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        run_ok(
            &["ip", "link", "set", "dev", &ve, "netns", outside.netns()],
            Duration::from_secs(10),
        );
        outside
            .add_address(&ve, OUTSIDE_V4.parse().unwrap(), 24)
            .unwrap();
        outside
            .run_ok(&[
                "ip",
                "-6",
                "address",
                "add",
                &format!("{OUTSIDE_V6}/64"),
                "dev",
                &ve,
                "nodad",
            ])
            .unwrap();
        outside.link_up(&ve).unwrap();
        boot
    }

    fn console(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The container's PID 1, as the host sees it.
    fn leader(&self) -> Option<u32> {
        let pid = self.child.id();
        let kids = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
        kids.split_whitespace().next()?.parse().ok()
    }

    /// `argv` inside the booted container, within 30 s.
    fn inside(&self, argv: &[&str]) -> Option<run::Output> {
        self.inside_for(argv, Duration::from_secs(30))
    }

    /// `argv` inside the booted container, within `deadline`.
    fn inside_for(&self, argv: &[&str], deadline: Duration) -> Option<run::Output> {
        let leader = self.leader()?.to_string();
        let mut full = vec!["nsenter", "-t", &leader, "-a", "--"];
        full.extend_from_slice(argv);
        Some(run(&full, deadline))
    }

    fn journal(&self, args: &[&str]) -> String {
        let mut argv = vec!["journalctl", "--no-pager", "-o", "cat", "-b"];
        argv.extend_from_slice(args);
        self.inside(&argv)
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }

    /// Polls, to `deadline`, until `done` says the window is over; the probes run meanwhile.
    fn probe_until(
        &self,
        outside: &Machine,
        ports: &[u16],
        deadline: Duration,
        done: impl Fn(&Boot, &Counts) -> bool,
    ) -> Counts {
        let probing = Probing::start(outside, ports);
        loop {
            let now = probing.counts();
            if done(self, &now) {
                break;
            }
            assert!(
                now.window < deadline,
                "the boot window did not end within {deadline:?} ({now:?}); console:\n{}\njournal:\n{}",
                self.console(),
                self.journal(&[])
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        probing.stop()
    }

    /// Whether the resident host's first reconcile is done (its journal says so).
    fn reconciled(&self) -> bool {
        self.journal(&["-u", "mesh-host.service"])
            .contains("reconciled")
    }

    /// Powers the container off and waits for nspawn to exit.
    fn halt(&mut self) {
        let _ = self.inside(&["systemctl", "poweroff"]);
        let until = Instant::now() + Duration::from_secs(30);
        while Instant::now() < until {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // Drop kills it, PID 1 first.
        panic!(
            "the container did not power off within 30 s: {}",
            self.console()
        );
    }
}

/// Probes from `outside` to each port, v4 and v6, one thread each (a dropped SYN waiting out its
/// timeout holds up no other), until stopped.
struct Probing {
    stop: Arc<AtomicBool>,
    started: Instant,
    targets: Vec<(u16, &'static str)>,
    tallies: Arc<Vec<(AtomicUsize, AtomicUsize)>>,
    probers: Vec<std::thread::JoinHandle<()>>,
}

impl Probing {
    fn start(outside: &Machine, ports: &[u16]) -> Probing {
        let stop = Arc::new(AtomicBool::new(false));
        let targets: Vec<(u16, &'static str, std::net::IpAddr)> = ports
            .iter()
            .flat_map(|p| {
                [
                    (*p, "v4", INSIDE_V4.parse().unwrap()),
                    (*p, "v6", INSIDE_V6.parse().unwrap()),
                ]
            })
            .collect();
        let tallies: Arc<Vec<(AtomicUsize, AtomicUsize)>> = Arc::new(
            targets
                .iter()
                .map(|_| (AtomicUsize::new(0), AtomicUsize::new(0)))
                .collect(),
        );
        let probers = targets
            .iter()
            .enumerate()
            .map(|(i, (port, _, addr))| {
                let (stop, tallies, outside, port, addr) =
                    (stop.clone(), tallies.clone(), outside.clone(), *port, *addr);
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let got = outside.probe_tcp(addr, port, PROBE_WAIT);
                        tallies[i].0.fetch_add(1, Ordering::Relaxed);
                        if matches!(got, Ok(Probe::Reached)) {
                            tallies[i].1.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        Probing {
            stop,
            started: Instant::now(),
            targets: targets.iter().map(|(p, f, _)| (*p, *f)).collect(),
            tallies,
            probers,
        }
    }

    /// What the probes have counted so far.
    fn counts(&self) -> Counts {
        Counts {
            tried: self
                .targets
                .iter()
                .zip(self.tallies.iter())
                .map(|(k, (t, r))| (*k, (t.load(Ordering::Relaxed), r.load(Ordering::Relaxed))))
                .collect(),
            window: self.started.elapsed(),
        }
    }

    /// The probes stopped; what they counted.
    fn stop(mut self) -> Counts {
        self.stop.store(true, Ordering::Relaxed);
        for p in std::mem::take(&mut self.probers) {
            p.join().expect("a prober");
        }
        self.counts()
    }
}

impl Drop for Probing {
    /// Probes a failed test left running are told to stop.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl Drop for Boot {
    /// A boot a failed test left running: its PID 1 killed first (which ends every process of
    /// its PID namespace: killing nspawn alone would leave the container running), then nspawn.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            if let Some(leader) = self.leader() {
                // SAFETY: kill(2) with a pid read from /proc and a constant signal.
                unsafe { libc::kill(leader as libc::pid_t, libc::SIGKILL) };
            }
            let until = Instant::now() + Duration::from_secs(10);
            while Instant::now() < until && matches!(self.child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let dir = self.bpf.display().to_string();
        let _ = run(&["umount", "-l", &dir], Duration::from_secs(10));
    }
}

/// `systemctl reload mesh-host` reconciles again (the journal says so), and `systemctl stop`
/// returns with the host stopped.
fn reload_and_stop(boot: &Boot) {
    let reconciles = |b: &Boot| {
        b.journal(&["-u", "mesh-host.service"])
            .matches("reconciled")
            .count()
    };
    let before = reconciles(boot);
    let out = boot
        .inside(&["systemctl", "reload", "mesh-host.service"])
        .expect("inside");
    assert_eq!(out.code, Some(0), "systemctl reload: {}", text(&out));
    let until = Instant::now() + Duration::from_secs(30);
    while reconciles(boot) <= before {
        assert!(
            Instant::now() < until,
            "no reconcile after systemctl reload: {}",
            boot.journal(&[])
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The unit's SyslogIdentifier: the launcher's and the host's lines are found by their tag.
    let tagged = boot.journal(&["-t", "mesh-host"]);
    assert!(
        tagged.contains("reconciled") && tagged.contains("resident host started"),
        "journalctl -t mesh-host: {tagged}"
    );
    let out = boot
        .inside(&["systemctl", "stop", "mesh-host.service"])
        .expect("inside");
    assert_eq!(out.code, Some(0), "systemctl stop: {}", text(&out));
    // The stop is said under the same tag, with what it waited for (nothing was under way here).
    let tagged = boot.journal(&["-t", "mesh-host"]);
    assert!(
        tagged.contains("stopping: asked to, and no apply is under way"),
        "journalctl -t mesh-host: {tagged}"
    );
    let out = boot
        .inside(&["systemctl", "is-active", "mesh-host.service"])
        .expect("inside");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "inactive",
        "{}",
        text(&out)
    );
}

fn lab() -> &'static Lab {
    static LAB: std::sync::OnceLock<&'static Lab> = std::sync::OnceLock::new();
    LAB.get_or_init(|| Lab::new().expect("a lab needs root").until_exit())
}

/// A short machine name (its veth is `ve-NAME`, at most 15 characters).
fn name(what: &str) -> String {
    format!("mb{}{}", std::process::id() % 100_000, what)
}

#[test]
fn an_adopted_node_boots_with_the_store_port_refused_from_the_first_packet() {
    let tree = Tree::new();
    tree.declare("adopted", vec![]);
    let (code, report) = tree.host(&["apply", "/opt/bed/decl.json"]);
    assert_eq!(code, Some(0), "the adopted apply: {report:#}");
    let state: Value = serde_json::from_slice(
        &std::fs::read(tree.root.join("var/lib/mesh-host/state.json")).unwrap(),
    )
    .unwrap();
    assert!(
        state["boot"]["guard"]["ports"].to_string().contains("5432"),
        "the store records no guard for the boot step: {state:#}"
    );

    // The boot step masked, the resident host not started: the store's stand-in is reached
    // once the link is up. The probes can see the hole.
    tree.without_the_host();
    let outside = lab()
        .machine(&format!("bo{}", std::process::id() % 100_000))
        .unwrap();
    let mut boot = Boot::start(&tree, &name("c"), &outside);
    let open = boot.probe_until(
        &outside,
        &[STORE, UNDECLARED],
        Duration::from_secs(60),
        |_, c| c.reached(UNDECLARED) >= 20,
    );
    assert!(
        open.reached(STORE) > 0,
        "without the boot step the store's port was never reached, so the probes cannot tell: {open:?}"
    );
    boot.halt();

    // The package as installed: the boot step and the resident host.
    tree.as_installed();
    let outside = lab()
        .machine(&format!("ba{}", std::process::id() % 100_000))
        .unwrap();
    let mut counts = Counts::default();
    let mut journal = String::new();
    for _ in 0..BOOTS {
        let mut boot = Boot::start(&tree, &name("a"), &outside);
        counts.add(boot.probe_until(
            &outside,
            &[STORE, UNDECLARED],
            Duration::from_secs(90),
            |b, c| c.reached(UNDECLARED) > 0 && b.reconciled(),
        ));
        journal = boot.journal(&["-u", "mesh-host-boot.service"]);
        reload_and_stop(&boot);
        boot.halt();
    }
    eprintln!(
        "adopted, {BOOTS} boots: {:?} from the link to the first reconcile in all: {counts:?}\n\
         the last boot step: {journal}",
        counts.window
    );
    assert_eq!(
        counts.reached(STORE),
        0,
        "the store's port was reached during boot: {counts:?}\n{journal}"
    );
    assert!(
        counts.tried_of(STORE, "v4") > 0 && counts.tried_of(STORE, "v6") > 0,
        "{counts:?}"
    );
    assert!(counts.reached(UNDECLARED) > 0, "{counts:?}");
    assert!(journal.contains("boot: refusing store 5432"), "{journal}");
    assert!(
        journal.contains("netfilter BPF (pinned)"),
        "the guard's BPF layer was not loaded at boot: {journal}"
    );
}

#[test]
fn a_converged_node_rebooted_keeps_its_derived_filter_from_the_first_packet() {
    let tree = Tree::new();
    let opening = json!({"id": "app/port", "type": "opening", "port": DECLARED, "proto": "tcp",
                         "from": "anywhere", "path": "incoming"});
    tree.declare("adopted", vec![opening.clone()]);
    let (code, report) = tree.host(&["apply", "/opt/bed/decl.json"]);
    assert_eq!(code, Some(0), "the adopted apply: {report:#}");
    let (code, report) = tree.host(&["converge"]);
    assert_eq!(code, Some(0), "the flip: {report:#}");
    let state: Value = serde_json::from_slice(
        &std::fs::read(tree.root.join("var/lib/mesh-host/state.json")).unwrap(),
    )
    .unwrap();
    assert!(
        state["boot"]["filter"]["openings"]
            .to_string()
            .contains("app/port"),
        "the store records no derived filter for the boot step: {state:#}"
    );

    let outside = lab()
        .machine(&format!("bv{}", std::process::id() % 100_000))
        .unwrap();
    // The control: the boot step masked and the resident host not started, the undeclared
    // service is reached (nothing else of the found firewall is in force after the flip).
    tree.without_the_host();
    let mut boot = Boot::start(&tree, &name("v"), &outside);
    let open = boot.probe_until(
        &outside,
        &[UNDECLARED, DECLARED],
        Duration::from_secs(60),
        |_, c| c.reached(DECLARED) >= 20,
    );
    assert!(
        open.reached(UNDECLARED) > 0,
        "without the boot step the undeclared service was never reached: {open:?}"
    );
    boot.halt();
    drop(boot);
    tree.as_installed();
    let mut counts = Counts::default();
    let mut journal = String::new();
    for _ in 0..BOOTS {
        let mut boot = Boot::start(&tree, &name("v"), &outside);
        counts.add(boot.probe_until(
            &outside,
            &[STORE, UNDECLARED, DECLARED],
            Duration::from_secs(90),
            |b, c| c.reached(DECLARED) > 0 && b.reconciled(),
        ));
        journal = boot.journal(&["-u", "mesh-host-boot.service"]);
        boot.halt();
    }
    eprintln!(
        "converged, {BOOTS} boots: {:?} from the link to the first reconcile in all: \
         {counts:?}\nthe last boot step: {journal}",
        counts.window
    );
    assert_eq!(counts.reached(STORE), 0, "{counts:?}\n{journal}");
    assert_eq!(counts.reached(UNDECLARED), 0, "{counts:?}\n{journal}");
    assert!(counts.tried_of(UNDECLARED, "v4") > 0 && counts.tried_of(UNDECLARED, "v6") > 0);
    assert!(counts.reached(DECLARED) > 0, "{counts:?}");
    assert!(
        journal.contains("boot: derived filter with 1 opening(s) loaded"),
        "{journal}"
    );
}

#[test]
fn a_store_that_cannot_be_read_at_boot_fails_closed_and_says_so_in_the_journal() {
    let tree = Tree::new();
    tree.declare("adopted", vec![]);
    let (code, report) = tree.host(&["apply", "/opt/bed/decl.json"]);
    assert_eq!(code, Some(0), "the adopted apply: {report:#}");
    tree.write("/var/lib/mesh-host/state.json", "{ this is not a store");
    // The resident host would fail on the same store and be started again: not started here.
    std::fs::remove_file(
        tree.root
            .join("etc/systemd/system/multi-user.target.wants/mesh-host.service"),
    )
    .unwrap();
    let outside = lab()
        .machine(&format!("bf{}", std::process::id() % 100_000))
        .unwrap();
    let mut boot = Boot::start(&tree, &name("f"), &outside);
    let counts = boot.probe_until(
        &outside,
        &[STORE, UNDECLARED],
        Duration::from_secs(60),
        |_, c| c.reached(UNDECLARED) >= 20,
    );
    let errors = boot.journal(&["-t", "mesh-host", "-p", "err"]);
    let state = boot
        .inside(&["systemctl", "is-failed", "mesh-host-boot.service"])
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    boot.halt();
    eprintln!("a store unreadable at boot: {counts:?}\nerrors: {errors}");
    assert_eq!(counts.reached(STORE), 0, "{counts:?}");
    assert!(counts.tried_of(STORE, "v4") > 0 && counts.tried_of(STORE, "v6") > 0);
    assert!(
        errors.contains("boot: reading the store") && errors.contains("default ports are refused"),
        "journalctl -t mesh-host -p err: {errors}"
    );
    assert_eq!(state, "failed", "the boot step's unit");
}
