//! Times what the resident host (`mesh-host run`) promises, in lab namespaces, as whole
//! processes (run as root; `bench/run` runs it):
//!
//! 1. **Restore window**: a TCP probe every millisecond from the outside machine, each a new
//!    connection, against an opening while the found firewall is reloaded from its file 50 times
//!    (`nft -f` with `flush ruleset`; `iptables-nft-restore`; `iptables-legacy-restore` with the
//!    host's legacy period); the window is the span of failed probes around each reload.
//!    Incoming and forwarded (a DNAT to a machine behind the node) for nftables.
//! 2. **Guard exposure**: probes of the store's port from outside while another process runs
//!    `nft flush ruleset` 50 times: connections that got through; then the same with the
//!    guard's netfilter BPF layer pinned beside the table, through 50 flushes and 50 `nft -f`
//!    reloads.
//! 3. **Idle cost**: resident memory and CPU per change after 1,000 foreign ruleset changes; CPU
//!    per SIGHUP (each its own reconcile); a minute of one-second timer ticks.
//!
//! It finds the binary at `$MESH_HOST` or beside its own directory (`target/release/mesh-host`).
//! `--reloads N` changes the 50; `--check` runs each part once, briefly, and checks the results
//! are right (the openings back, the guard back) without reading anything into the figures.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lab::addr::*;
use lab::{Adoption, Lab, Machine};

const OPENED: u16 = 9100;
const FORWARDED: u16 = 9200;
const STORE: u16 = 5432;

fn mesh_host() -> PathBuf {
    if let Some(p) = std::env::var_os("MESH_HOST") {
        return PathBuf::from(p);
    }
    let me = std::env::current_exe().expect("the example's own path");
    me.parent()
        .and_then(|examples| examples.parent())
        .map(|profile| profile.join("mesh-host"))
        .expect("the example lives in target/PROFILE/examples")
}

fn ok(m: &Machine, argv: &[&str]) -> String {
    m.run_ok(argv)
        .unwrap_or_else(|e| panic!("in {}: {e}", m.name()))
        .stdout
}

/// The found firewall of the node: input drops but for ssh; forward drops; a DNAT of
/// `FORWARDED` to the peer behind the node's private link (masqueraded, so replies return).
const FOUND_NFT: &str = "flush ruleset
table inet filter {
	chain input {
		type filter hook input priority filter; policy drop;
		ct state established,related accept
		iif \"lo\" accept
		meta l4proto ipv6-icmp accept
		tcp dport 22 accept
	}
	chain forward {
		type filter hook forward priority filter; policy drop;
		ct state established,related accept
	}
}
table ip nat {
	chain prerouting {
		type nat hook prerouting priority dstnat;
		tcp dport 9200 dnat to 10.77.0.2:9200
	}
	chain postrouting {
		type nat hook postrouting priority srcnat;
		oifname \"mesh0\" masquerade
	}
}
";

/// Accepts and drops connections on `port` in a machine, on a thread, until stopped.
struct Listener {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Listener {
    fn start(m: &Machine, port: u16) -> Listener {
        let l = m
            .in_namespace(move || TcpListener::bind(("0.0.0.0", port)).expect("bind"))
            .expect("into the namespace");
        l.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match l.accept() {
                    Ok(_) => {}
                    Err(_) => std::thread::sleep(Duration::from_micros(200)),
                }
            }
        });
        Listener {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One probe: when it was sent and whether it connected within `PROBE_WAIT`.
type Outcome = (Instant, bool);
const PROBE_WAIT: Duration = Duration::from_millis(100);

/// Probes `addr:port` from `m` with a new TCP connection every millisecond until `stop`.
fn probe_loop(
    m: &Machine,
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Vec<Outcome>> {
    let m = m.clone();
    std::thread::spawn(move || {
        m.in_namespace(move || {
            let mut out = Vec::new();
            let mut inflight: Vec<(Instant, OwnedFd)> = Vec::new();
            let mut next = Instant::now();
            while !stop.load(Ordering::Relaxed) || !inflight.is_empty() {
                let now = Instant::now();
                if now >= next && !stop.load(Ordering::Relaxed) {
                    next += Duration::from_millis(1);
                    if let Some(fd) = connect_nonblocking(addr) {
                        inflight.push((now, fd));
                    }
                }
                let mut pfds: Vec<libc::pollfd> = inflight
                    .iter()
                    .map(|(_, fd)| libc::pollfd {
                        fd: fd.as_raw_fd(),
                        events: libc::POLLOUT,
                        revents: 0,
                    })
                    .collect();
                // SAFETY: a valid pollfd array and its length.
                unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, 0) };
                let mut keep = Vec::new();
                for ((sent, fd), p) in inflight.drain(..).zip(pfds) {
                    if p.revents & libc::POLLOUT != 0 {
                        out.push((sent, so_error(&fd) == 0));
                    } else if sent.elapsed() > PROBE_WAIT {
                        out.push((sent, false));
                    } else {
                        keep.push((sent, fd));
                    }
                }
                inflight = keep;
                std::thread::sleep(Duration::from_micros(100));
            }
            out.sort_by_key(|(t, _)| *t);
            out
        })
        .expect("probing from the namespace")
    })
}

fn connect_nonblocking(addr: SocketAddr) -> Option<OwnedFd> {
    let SocketAddr::V4(a) = addr else { return None };
    // SAFETY: plain socket calls on a descriptor this function owns.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_NONBLOCK, 0);
        if fd < 0 {
            return None;
        }
        let fd = OwnedFd::from_raw_fd(fd);
        let sin = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: a.port().to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(*a.ip()).to_be(),
            },
            sin_zero: [0; 8],
        };
        libc::connect(
            fd.as_raw_fd(),
            (&sin as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        );
        Some(fd)
    }
}

fn so_error(fd: &OwnedFd) -> i32 {
    let mut err: i32 = 0;
    let mut len = std::mem::size_of::<i32>() as libc::socklen_t;
    // SAFETY: reading an int socket option into an int.
    unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            (&mut err as *mut i32).cast(),
            &mut len,
        );
    }
    err
}

/// The window of failed probes after each reload: from the first failure to the last, plus
/// one probe interval; zero when none failed.
fn windows(probes: &[Outcome], reloads: &[Instant], span: Duration) -> Vec<Duration> {
    reloads
        .iter()
        .map(|r| {
            let failed: Vec<Instant> = probes
                .iter()
                .filter(|(t, ok)| !ok && *t + Duration::from_millis(2) >= *r && *t < *r + span)
                .map(|(t, _)| *t)
                .collect();
            match (failed.first(), failed.last()) {
                (Some(a), Some(b)) => *b - *a + Duration::from_millis(1),
                _ => Duration::ZERO,
            }
        })
        .collect()
}

fn median_max(mut v: Vec<Duration>) -> (Duration, Duration) {
    v.sort();
    (v[v.len() / 2], *v.last().unwrap())
}

/// The node with its found firewall, the host applied, and `mesh-host run` started.
struct Bed {
    _lab: Lab,
    net: Adoption,
    root: tempfile::TempDir,
    resident: Option<Child>,
}

impl Bed {
    fn new(kind: &str) -> Bed {
        let lab = Lab::new().expect("the lab needs root");
        let net = Adoption::build(&lab).expect("the adoption topology");
        let node = &net.node;
        node.set_sysctl("net/ipv4/ip_forward", "1").unwrap();
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("root")).unwrap();
        match kind {
            "nftables" => {
                std::fs::write(root.path().join("nftables.conf"), FOUND_NFT).unwrap();
                ok(
                    node,
                    &[
                        "nft",
                        "-f",
                        root.path().join("nftables.conf").to_str().unwrap(),
                    ],
                );
            }
            variant => {
                let program = format!("iptables-{variant}");
                for rule in [
                    vec!["-P", "INPUT", "DROP"],
                    vec![
                        "-A",
                        "INPUT",
                        "-m",
                        "conntrack",
                        "--ctstate",
                        "RELATED,ESTABLISHED",
                        "-j",
                        "ACCEPT",
                    ],
                    vec!["-A", "INPUT", "-i", "lo", "-j", "ACCEPT"],
                    vec!["-A", "INPUT", "-p", "tcp", "--dport", "22", "-j", "ACCEPT"],
                ] {
                    let mut argv = vec![program.as_str(), "-w"];
                    argv.extend(rule);
                    ok(node, &argv);
                }
                let saved = ok(node, &[&format!("{program}-save")]);
                std::fs::write(root.path().join("rules.v4"), saved).unwrap();
            }
        }
        // The forwarded opening only where the found firewall has the DNAT it admits (the
        // nftables kind): elsewhere it would be NOT ADMITTED, and the apply exit 5.
        let mut resources = vec![serde_json::json!(
            {"id": "bench/in", "type": "opening", "port": OPENED, "proto": "tcp", "from": "anywhere", "path": "incoming"}
        )];
        if kind == "nftables" {
            resources.push(serde_json::json!(
                {"id": "bench/fwd", "type": "opening", "port": FORWARDED, "proto": "tcp", "from": "anywhere", "path": "forwarded"}
            ));
        }
        let decl = serde_json::json!({
            "version": 1, "node": "bench-node", "mode": "adopted", "taken": [],
            "settings": {
                "ports": {"store": STORE, "bus": 5672, "broker_management": 15672, "registry": 5000, "hub": 51820},
                "private_network": {"interface": PRIVATE_IF, "range": "10.77.0.0/24"}
            },
            "resources": resources
        });
        let file = root.path().join("declaration.json");
        std::fs::write(&file, serde_json::to_vec(&decl).unwrap()).unwrap();
        let r = root.path().join("root");
        let mh = mesh_host();
        let out = node
            .run(&[
                mh.to_str().unwrap(),
                "--root",
                r.to_str().unwrap(),
                "apply",
                file.to_str().unwrap(),
            ])
            .unwrap();
        assert!(out.success(), "{}\n{}", out.stdout, out.stderr);
        let mut bed = Bed {
            _lab: lab,
            net,
            root,
            resident: None,
        };
        bed.start_resident(&["--legacy-period", "1000"]);
        bed
    }

    fn start_resident(&mut self, extra: &[&str]) {
        let r = self.root.path().join("root");
        let mh = mesh_host();
        let mut argv = vec![mh.to_str().unwrap(), "--root", r.to_str().unwrap(), "run"];
        argv.extend_from_slice(extra);
        // The resident host's own log, kept beside the bed (`$BENCH_LOG` names a file to keep).
        let log = match std::env::var_os("BENCH_LOG") {
            Some(p) => std::fs::File::create(p)
                .map(Stdio::from)
                .unwrap_or(Stdio::null()),
            None => Stdio::null(),
        };
        let child = self
            .net
            .node
            .command(&argv)
            .env("RUST_LOG", "mesh_host=info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.resident = Some(child);
        std::thread::sleep(Duration::from_millis(800));
    }

    fn pid(&self) -> u32 {
        self.resident.as_ref().unwrap().id()
    }

    fn reload(&self, kind: &str) {
        let node = &self.net.node;
        match kind {
            "nftables" => ok(
                node,
                &[
                    "nft",
                    "-f",
                    self.root.path().join("nftables.conf").to_str().unwrap(),
                ],
            ),
            variant => ok(
                node,
                &[
                    &format!("iptables-{variant}-restore"),
                    "-w",
                    "30",
                    self.root.path().join("rules.v4").to_str().unwrap(),
                ],
            ),
        };
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        if let Some(mut c) = self.resident.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Reloads the found firewall `n` times under probes of `port` (at `to`); returns the windows.
fn restore_windows(
    bed: &Bed,
    kind: &str,
    to: (Ipv4Addr, u16),
    n: usize,
    gap: Duration,
) -> Vec<Duration> {
    let stop = Arc::new(AtomicBool::new(false));
    let probes = probe_loop(
        &bed.net.outside,
        SocketAddr::new(IpAddr::V4(to.0), to.1),
        stop.clone(),
    );
    std::thread::sleep(Duration::from_millis(100));
    let mut reloads = Vec::new();
    for _ in 0..n {
        reloads.push(Instant::now());
        bed.reload(kind);
        std::thread::sleep(gap);
    }
    stop.store(true, Ordering::Relaxed);
    let probes = probes.join().unwrap();
    let failed_before = probes
        .iter()
        .filter(|(t, ok)| !ok && *t < reloads[0])
        .count();
    assert_eq!(
        failed_before, 0,
        "probes failed before any reload: the bed is wrong"
    );
    windows(&probes, &reloads, gap)
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of stat, 12 and 13 after the command's name.
    f.get(11).and_then(|u| u.parse::<u64>().ok()).unwrap_or(0)
        + f.get(12).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0)
}

fn row(what: &str, v: Vec<Duration>) {
    let (med, max) = median_max(v.clone());
    println!(
        "{what:<58} median {:>8.2} ms   worst {:>8.2} ms   ({} reloads)",
        med.as_secs_f64() * 1e3,
        max.as_secs_f64() * 1e3,
        v.len()
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let check = args.iter().any(|a| a == "--check");
    let n: usize = args
        .iter()
        .position(|a| a == "--reloads")
        .and_then(|i| args.get(i + 1)?.parse().ok())
        .unwrap_or(if check { 3 } else { 50 });
    let gap = Duration::from_millis(250);
    let node_v4 = NODE_PUBLIC_V4;

    // 1. Restore windows.
    let bed = Bed::new("nftables");
    let _in = Listener::start(&bed.net.node, OPENED);
    let _fwd = Listener::start(&bed.net.peer, FORWARDED);
    let w = restore_windows(&bed, "nftables", (node_v4, OPENED), n, gap);
    row("restore window, incoming, nft -f with flush ruleset", w);
    let w = restore_windows(&bed, "nftables", (node_v4, FORWARDED), n, gap);
    row(
        "restore window, forwarded (DNAT), nft -f with flush ruleset",
        w,
    );

    // 2. Guard exposure: another process flushes the ruleset under probes of the store.
    let _store = Listener::start(&bed.net.node, STORE);
    let stop = Arc::new(AtomicBool::new(false));
    let probes = probe_loop(
        &bed.net.outside,
        SocketAddr::new(IpAddr::V4(node_v4), STORE),
        stop.clone(),
    );
    std::thread::sleep(Duration::from_millis(100));
    for _ in 0..n {
        ok(&bed.net.node, &["nft", "flush", "ruleset"]);
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::Relaxed);
    let probes = probes.join().unwrap();
    let through = probes.iter().filter(|(_, ok)| *ok).count();
    println!(
        "{:<58} {through} of {} probes connected ({n} flushes)",
        "guard exposure, nft flush ruleset by another process",
        probes.len()
    );
    let guard_back = ok(
        &bed.net.node,
        &["nft", "list", "table", "inet", "mesh_host"],
    );
    assert!(
        guard_back.contains("mesh-host:guard/store"),
        "the guard is back"
    );

    // 2b. The same with the guard's second layer: a bpffs at the root's /sys/fs/bpf (as on a
    // node), the host's reconcile loading the netfilter BPF program beside the table; then
    // 50 foreign flushes and 50 `nft -f` reloads of the found file (`flush ruleset` on top).
    let r = bed.root.path().join("root");
    let fs = r.join("sys/fs/bpf");
    std::fs::create_dir_all(&fs).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "bpf", "bpf"])
        .arg(&fs)
        .status()
        .expect("mount must exist");
    assert!(mounted.success(), "mount -t bpf at {}", fs.display());
    // The flushes took the found firewall's DNAT with them: loaded again from its file, as its
    // unit would, so the reconcile finds the forwarded opening admitted (else it exits 5).
    let found = bed.root.path().join("nftables.conf");
    ok(&bed.net.node, &["nft", "-f", found.to_str().unwrap()]);
    let mh = mesh_host();
    let out = bed
        .net
        .node
        .run(&[
            mh.to_str().unwrap(),
            "--root",
            r.to_str().unwrap(),
            "reconcile",
            "--json",
        ])
        .expect("the reconcile with a bpffs");
    // Its report, whatever it exits with: a refusal is read from it.
    assert!(
        out.success(),
        "the reconcile with a bpffs exited {}:\n{}\n{}",
        out.status,
        out.stdout,
        out.stderr
    );
    let line = out.stdout;
    assert!(
        line.contains("netfilter BPF (pinned): holds through any ruleset change"),
        "the reconcile did not load the bpf layer: {line}"
    );
    let stop = Arc::new(AtomicBool::new(false));
    let probes = probe_loop(
        &bed.net.outside,
        SocketAddr::new(IpAddr::V4(node_v4), STORE),
        stop.clone(),
    );
    std::thread::sleep(Duration::from_millis(100));
    for _ in 0..n {
        ok(&bed.net.node, &["nft", "flush", "ruleset"]);
        std::thread::sleep(Duration::from_millis(50));
        ok(&bed.net.node, &["nft", "-f", found.to_str().unwrap()]);
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::Relaxed);
    let probes = probes.join().unwrap();
    let through = probes.iter().filter(|(_, ok)| *ok).count();
    println!(
        "{:<58} {through} of {} probes connected ({n} flushes, {n} reloads)",
        "guard exposure, table + netfilter BPF (pinned)",
        probes.len()
    );
    // Unmounted, the pins go and the links with them: the rows below measure the host alone.
    let _ = std::process::Command::new("umount")
        .arg("-l")
        .arg(&fs)
        .status();

    // 3. Idle cost: 1,000 foreign changes, then a minute of one-second ticks.
    let pid = bed.pid();
    let (rss0, cpu0) = (rss_kib(pid), cpu_ticks(pid));
    let events = if check { 20 } else { 1000 };
    for i in 0..events {
        let t = format!("bench{i}");
        ok(&bed.net.node, &["nft", "add", "table", "inet", &t]);
        ok(&bed.net.node, &["nft", "delete", "table", "inet", &t]);
    }
    std::thread::sleep(Duration::from_millis(300));
    let (rss1, cpu1) = (rss_kib(pid), cpu_ticks(pid));
    // SAFETY: sysconf with a valid name.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    println!(
        "{:<58} {} KiB resident before, {} KiB after; {:.3} ms CPU per event",
        format!("idle cost, {} foreign changes", events * 2),
        rss0,
        rss1,
        (cpu1 - cpu0) as f64 / hz * 1e3 / (events * 2) as f64
    );
    // A SIGHUP each (the operator's or a dispatcher's rouse), spaced past the host's settle so
    // each one runs its own reconcile of an unchanged declaration and ruleset.
    let hups = if check { 3 } else { 40 };
    let cpu2 = cpu_ticks(pid);
    for _ in 0..hups {
        // SAFETY: kill with a live child's pid and a valid signal.
        unsafe { libc::kill(pid as i32, libc::SIGHUP) };
        std::thread::sleep(Duration::from_millis(600));
    }
    let cpu3 = cpu_ticks(pid);
    println!(
        "{:<58} {:.3} ms CPU per SIGHUP",
        format!("rouse cost, {hups} SIGHUPs 600 ms apart"),
        (cpu3 - cpu2) as f64 / hz * 1e3 / hups as f64
    );
    drop(bed);
    let mut bed = Bed::new("nftables");
    if let Some(mut c) = bed.resident.take() {
        let _ = c.kill();
        let _ = c.wait();
    }
    bed.start_resident(&["--period", "1"]);
    let ticks = if check { 3 } else { 60 };
    std::thread::sleep(Duration::from_secs(ticks));
    let pid = bed.pid();
    println!(
        "{:<58} {} KiB resident, {:.1} ms CPU per tick",
        format!("idle cost, {ticks} one-second reconcile ticks"),
        rss_kib(pid),
        cpu_ticks(pid) as f64 / hz * 1e3 / ticks as f64
    );
    drop(bed);

    // iptables-nft and iptables-legacy (the latter with the host's legacy period, 1 s here).
    for variant in ["nft", "legacy"] {
        let bed = Bed::new(variant);
        let _in = Listener::start(&bed.net.node, OPENED);
        let reloads = if variant == "legacy" { n.min(10) } else { n };
        let gap = if variant == "legacy" {
            Duration::from_millis(2500)
        } else {
            gap
        };
        let w = restore_windows(&bed, variant, (node_v4, OPENED), reloads, gap);
        row(
            &format!("restore window, incoming, iptables-{variant}-restore"),
            w,
        );
    }
}
