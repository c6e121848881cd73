//! The lab's own tests: real namespaces, real probes, a real Docker engine, and a teardown that
//! leaves nothing behind. They need root, iproute2, nftables, iptables, busybox-static and docker.io.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::os::unix::process::CommandExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::process::Command;
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use lab::addr::*;
use lab::{Adoption, Lab, Machine, Probe, LAB_ROOT, NETNS_DIR};

/// Long enough for a real answer on a loaded two-core machine.
const ANSWER: Duration = Duration::from_secs(3);
/// How long a probe that must time out waits.
const SILENCE: Duration = Duration::from_millis(700);

fn new_lab() -> Lab {
    Lab::new().expect("the lab needs root, iproute2 and nsenter; it never skips")
}

fn adoption(lab: &Lab) -> Adoption {
    Adoption::build(lab).expect("building the adoption topology")
}

fn namespaces_with_prefix(prefix: &str) -> Vec<String> {
    std::fs::read_dir(NETNS_DIR)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.starts_with(&format!("{prefix}-")))
                .collect()
        })
        .unwrap_or_default()
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            !s.rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

fn host_interfaces() -> BTreeSet<String> {
    std::fs::read_dir("/sys/class/net")
        .expect("reading /sys/class/net")
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect()
}

/// Probes until `want` is seen or `within` passes; returns the last outcome.
fn probe_until(from: &Machine, addr: IpAddr, port: u16, want: Probe, within: Duration) -> Probe {
    let deadline = Instant::now() + within;
    loop {
        let got = from.probe_tcp(addr, port, ANSWER).expect("tcp probe");
        if got == want || Instant::now() >= deadline {
            return got;
        }
        thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn topology_machines_reach_each_other_over_both_families() {
    let before = host_interfaces();
    let lab = new_lab();
    let net = adoption(&lab);
    let _web = net.node.listen_tcp(8080).expect("tcp listener on the node");
    let echo = net.node.listen_udp(5353).expect("udp echo on the node");

    let public: [IpAddr; 2] = [NODE_PUBLIC_V4.into(), NODE_PUBLIC_V6.into()];
    let private: [IpAddr; 2] = [NODE_PRIVATE_V4.into(), NODE_PRIVATE_V6.into()];
    for addr in public {
        for from in [&net.outside, &net.peer] {
            assert_eq!(
                from.probe_tcp(addr, 8080, ANSWER).unwrap(),
                Probe::Reached,
                "tcp {} -> {addr}",
                from.name()
            );
            assert_eq!(
                from.probe_udp(addr, 5353, ANSWER).unwrap(),
                Probe::Reached,
                "udp {} -> {addr}",
                from.name()
            );
        }
    }
    for addr in private {
        assert_eq!(
            net.peer.probe_tcp(addr, 8080, ANSWER).unwrap(),
            Probe::Reached,
            "tcp peer -> {addr}"
        );
        assert_eq!(
            net.peer.probe_udp(addr, 5353, ANSWER).unwrap(),
            Probe::Reached,
            "udp peer -> {addr}"
        );
        // The outside machine has no route to the private network at all.
        assert_eq!(
            net.outside.probe_tcp(addr, 8080, ANSWER).unwrap(),
            Probe::Unreachable,
            "tcp outside -> {addr}"
        );
    }
    // The peer's private-network probes arrived from its private addresses, over mesh0.
    let sources: BTreeSet<IpAddr> = echo.received_from().iter().map(|s| s.ip()).collect();
    for expected in [
        IpAddr::from(OUTSIDE_PUBLIC_V4),
        OUTSIDE_PUBLIC_V6.into(),
        PEER_PRIVATE_V4.into(),
        PEER_PRIVATE_V6.into(),
    ] {
        assert!(
            sources.contains(&expected),
            "echo saw {sources:?}, missing {expected}"
        );
    }
    // The node's interfaces are exactly those of the topology (plus lo), with their kinds.
    let links = net
        .node
        .run_ok(&["ip", "-o", "link", "show"])
        .unwrap()
        .stdout;
    assert!(
        links.contains(": eth0@") && links.contains(": mesh0@"),
        "node links:\n{links}"
    );
    let bridge = net
        .wire
        .machine()
        .run_ok(&["ip", "-o", "link", "show", "master", "br0"])
        .unwrap()
        .stdout;
    for port in ["node", "outside", "peer"] {
        assert!(
            bridge.contains(&format!(": {port}@")),
            "bridge ports:\n{bridge}"
        );
    }
    // Nothing the topology made appeared in the host's own namespace.
    let added: Vec<String> = host_interfaces().difference(&before).cloned().collect();
    for name in ["eth0", "mesh0", "br0", "node", "outside", "peer"] {
        assert!(
            !added.contains(&name.to_owned()),
            "{name} appeared in the host namespace: {added:?}"
        );
    }
}

#[test]
fn probes_tell_reached_refused_unreachable_and_timed_out_apart() {
    let lab = new_lab();
    let net = adoption(&lab);
    let node: IpAddr = NODE_PUBLIC_V4.into();
    let node6: IpAddr = NODE_PUBLIC_V6.into();
    let _web = net.node.listen_tcp(8081).unwrap();
    let _echo = net.node.listen_udp(5000).unwrap();

    for addr in [node, node6] {
        assert_eq!(
            net.outside.probe_tcp(addr, 8081, ANSWER).unwrap(),
            Probe::Reached
        );
        assert_eq!(
            net.outside.probe_tcp(addr, 8099, ANSWER).unwrap(),
            Probe::Refused
        );
        assert_eq!(
            net.outside.probe_udp(addr, 5000, ANSWER).unwrap(),
            Probe::Reached
        );
        assert_eq!(
            net.outside.probe_udp(addr, 5001, ANSWER).unwrap(),
            Probe::Refused
        );
    }

    // A firewall in the node's namespace only: drop one port, reject another as prohibited.
    let rules = "table inet labprobe {
        chain input {
            type filter hook input priority 0; policy accept;
            tcp dport 8081 drop
            udp dport 5000 drop
            tcp dport 8099 reject with icmpx admin-prohibited
        }
    }";
    let rules_path = lab.dir().join("probe.nft");
    std::fs::write(&rules_path, rules).unwrap();
    net.node
        .run_ok(&["nft", "-f", rules_path.to_str().unwrap()])
        .expect("loading the namespace-local drop rule");
    for addr in [node, node6] {
        assert_eq!(
            net.outside.probe_tcp(addr, 8081, SILENCE).unwrap(),
            Probe::TimedOut
        );
        assert_eq!(
            net.outside.probe_udp(addr, 5000, SILENCE).unwrap(),
            Probe::TimedOut
        );
        assert_eq!(
            net.outside.probe_tcp(addr, 8099, ANSWER).unwrap(),
            Probe::Unreachable
        );
    }
    // The listener is still there: the peer reaches it over the private network, which the rule
    // above does not distinguish, so remove the table and see the port answer again.
    net.node
        .run_ok(&["nft", "delete", "table", "inet", "labprobe"])
        .unwrap();
    assert_eq!(
        net.outside.probe_tcp(node, 8081, ANSWER).unwrap(),
        Probe::Reached
    );
}

#[test]
fn a_spoofed_private_source_arrives_on_the_public_interface() {
    let lab = new_lab();
    let net = adoption(&lab);
    net.spoof_private_source().unwrap();
    let echo = net.node.listen_udp(7000).unwrap();
    let spoofed: [(IpAddr, IpAddr); 2] = [
        (SPOOFED_PRIVATE_V4.into(), NODE_PRIVATE_V4.into()),
        (SPOOFED_PRIVATE_V6.into(), NODE_PRIVATE_V6.into()),
    ];
    for (source, target) in spoofed {
        net.outside
            .send_udp_from(source, target, 7000, b"spoof")
            .unwrap();
    }
    let deadline = Instant::now() + ANSWER;
    while echo.received_from().len() < 2 && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
    }
    let sources: BTreeSet<IpAddr> = echo.received_from().iter().map(|s| s.ip()).collect();
    assert_eq!(
        sources,
        spoofed.iter().map(|(s, _)| *s).collect(),
        "without a guard the spoofed datagrams arrive"
    );

    // A guard matching the interface, in the node's namespace, stops them.
    let guard = lab.dir().join("guard.nft");
    std::fs::write(
        &guard,
        "table inet labguard {
        chain input {
            type filter hook input priority 0; policy accept;
            udp dport 7000 iifname != \"mesh0\" drop
        }
    }",
    )
    .unwrap();
    net.node
        .run_ok(&["nft", "-f", guard.to_str().unwrap()])
        .unwrap();
    let seen = echo.received_from().len();
    for (source, target) in spoofed {
        net.outside
            .send_udp_from(source, target, 7000, b"spoof")
            .unwrap();
    }
    // The peer's real private-network datagram is still let through, and arrives after the spoofed
    // ones were sent, so by the time it is echoed they would have arrived too.
    assert_eq!(
        net.peer
            .probe_udp(NODE_PRIVATE_V4.into(), 7000, ANSWER)
            .unwrap(),
        Probe::Reached
    );
    let after: Vec<IpAddr> = echo.received_from()[seen..]
        .iter()
        .map(|s| s.ip())
        .collect();
    assert_eq!(after, vec![IpAddr::from(PEER_PRIVATE_V4)]);
    // A TCP probe from the spoofed source cannot complete: the node answers over mesh0.
    let _web = net.node.listen_tcp(8083).unwrap();
    net.node
        .run_ok(&["nft", "delete", "table", "inet", "labguard"])
        .unwrap();
    assert_eq!(
        net.outside
            .probe_tcp_from(
                SPOOFED_PRIVATE_V4.into(),
                NODE_PRIVATE_V4.into(),
                8083,
                SILENCE
            )
            .unwrap(),
        Probe::TimedOut
    );
}

#[test]
fn commands_report_program_arguments_status_and_stderr() {
    let lab = new_lab();
    let node = lab.machine("node").unwrap();
    let out = node.run(&["ip", "-o", "link", "show", "lo"]).unwrap();
    assert!(out.success() && out.stdout.contains("lo:"), "{out:?}");
    let err = node
        .run_ok(&["ip", "link", "set", "nosuch0", "up"])
        .unwrap_err()
        .to_string();
    for part in [
        "program ip",
        "nosuch0",
        &format!("in namespace {}", node.netns()),
        "exited with exit status: 1",
        "Cannot find device",
    ] {
        assert!(err.contains(part), "{part:?} missing from: {err}");
    }
    let err = node
        .run_ok(&["/nonexistent/program"])
        .unwrap_err()
        .to_string();
    assert!(err.contains("/nonexistent/program"), "{err}");
    let err = lab.machine("Bad Name").unwrap_err().to_string();
    assert!(err.contains("invalid machine name \"Bad Name\""), "{err}");
}

#[test]
fn teardown_removes_everything_even_when_the_test_panics() {
    let seen: Mutex<Option<(String, [u32; 2], std::path::PathBuf)>> = Mutex::new(None);
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let lab = new_lab();
        let net = adoption(&lab);
        let listener = net.node.listen_tcp(8084).unwrap();
        // A raw process left running inside a namespace, which the lab never registered.
        let mut stray = Command::new("nsenter");
        stray
            .arg(format!("--net={}", net.peer.netns_path().display()))
            .args(["--", "sleep", "300"]);
        let stray = stray.spawn().unwrap();
        // Wait until it has entered the namespace and become `sleep`, so it is really inside.
        let deadline = Instant::now() + ANSWER;
        while std::fs::read(format!("/proc/{}/cmdline", stray.id()))
            .is_ok_and(|c| !c.starts_with(b"sleep"))
        {
            assert!(Instant::now() < deadline, "the stray never started");
            thread::sleep(Duration::from_millis(5));
        }
        *seen.lock().unwrap() = Some((
            lab.prefix().to_owned(),
            [listener.pid(), stray.id()],
            lab.dir().to_owned(),
        ));
        assert_eq!(namespaces_with_prefix(lab.prefix()).len(), 4);
        // Leak the listener's handle: the lab must still kill it.
        std::mem::forget(listener);
        std::mem::forget(stray);
        panic!("deliberate panic to prove the lab is torn down while unwinding");
    }));
    assert!(outcome.is_err());
    let (prefix, pids, dir) = seen.lock().unwrap().clone().expect("the lab was built");
    assert_eq!(namespaces_with_prefix(&prefix), Vec::<String>::new());
    for pid in pids {
        assert!(!alive(pid), "process {pid} survived the lab");
    }
    assert!(!dir.exists(), "{} survived the lab", dir.display());
}

#[test]
fn sweep_stale_removes_what_dead_runs_left_and_spares_live_labs() {
    // A pid above pid_max can never belong to a running process.
    let pid_max: u32 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let dead = format!("mh-{}-0", pid_max + 1);
    let stale_ns = format!("{dead}-stale");
    let status = Command::new("ip")
        .args(["netns", "add", &stale_ns])
        .status()
        .unwrap();
    assert!(status.success());
    let mut sleeper = Command::new("nsenter")
        .arg(format!("--net={NETNS_DIR}/{stale_ns}"))
        .args(["--", "sleep", "300"])
        .spawn()
        .unwrap();
    let stale_dir = Path::new(LAB_ROOT).join(&dead);
    std::fs::create_dir_all(stale_dir.join("www")).unwrap();

    let live = new_lab();
    let machine = live.machine("alive").unwrap();
    let report = Lab::sweep_stale(&dead).unwrap();
    assert_eq!(report.removed_namespaces, vec![stale_ns.clone()]);
    assert_eq!(report.removed_dirs, vec![stale_dir.clone()]);
    assert!(report.killed.contains(&(sleeper.id() as i32)), "{report:?}");
    assert!(!Path::new(NETNS_DIR).join(&stale_ns).exists());
    assert!(!stale_dir.exists());
    let status = sleeper.wait().unwrap();
    assert!(
        !status.success(),
        "the process inside the stale namespace was killed"
    );

    // The whole stem: this process still runs, so its labs are skipped.
    let report = Lab::sweep_stale("mh-").unwrap();
    assert!(
        report.skipped.contains(&machine.netns().to_owned()),
        "{report:?}"
    );
    assert!(machine.netns_path().exists());
}

/// Runs as a normal test, and is also run alone in a child process by the next test to show that
/// labs never dropped (kept until exit, or parked in a static) are removed when that process exits.
#[test]
fn labs_never_dropped_hold_their_namespaces() {
    let kept = new_lab().until_exit();
    static PARKED: std::sync::OnceLock<Lab> = std::sync::OnceLock::new();
    let parked = PARKED.get_or_init(new_lab);
    for lab in [kept, parked] {
        let machine = lab.machine("kept").unwrap();
        assert!(machine.netns_path().exists());
        println!("never-dropped-lab={}", lab.prefix());
    }
}

#[test]
fn labs_never_dropped_are_removed_when_the_process_exits() {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "labs_never_dropped_hold_their_namespaces",
            "--nocapture",
            "--test-threads=1",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let prefixes: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.split("never-dropped-lab=").nth(1))
        .collect();
    assert_eq!(
        prefixes.len(),
        2,
        "the child printed both prefixes:\n{stdout}"
    );
    for prefix in prefixes {
        assert_eq!(namespaces_with_prefix(prefix), Vec::<String>::new());
        assert!(!Path::new(LAB_ROOT).join(prefix).exists());
    }
}

#[test]
fn lab_refuses_to_start_without_root() {
    // Run a copy of this test binary as nobody, on the test below, which checks for the refusal.
    // The copy lives in a fresh directory under /tmp, since the build directory may sit where
    // nobody cannot reach it.
    let dir = Path::new("/tmp").join(format!("mesh-lab-nobody-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let copy = dir.join("lab-tests");
    std::fs::copy(std::env::current_exe().unwrap(), &copy).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
    // Another test's thread forking while the copy was being written holds its write descriptor
    // until that child execs, and exec answers ETXTBSY meanwhile: tried again to a deadline.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let out = loop {
        let out = Command::new(&copy)
            .args(["--exact", "lab_new_requires_root", "--nocapture"])
            .current_dir("/")
            .uid(65534)
            .gid(65534)
            .output();
        match out {
            Err(e)
                if e.kind() == std::io::ErrorKind::ExecutableFileBusy
                    && std::time::Instant::now() < until =>
            {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            other => break other,
        }
    };
    std::fs::remove_dir_all(&dir).unwrap();
    let out = out.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "as nobody:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(
            "refused: the lab needs root to create network namespaces, but runs with effective uid 65534"
        ),
        "{stdout}"
    );
}

/// As root the lab starts; as anyone else it refuses with an error naming the uid, never skipping.
#[test]
fn lab_new_requires_root() {
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    match Lab::new() {
        Ok(lab) => assert_eq!(uid, 0, "lab {} started without root", lab.prefix()),
        Err(e) => {
            assert_ne!(uid, 0, "root could not start a lab: {e}");
            println!("refused: {e}");
        }
    }
}

#[test]
fn docker_engine_in_the_node_publishes_a_port_reachable_from_outside() {
    // The host's own ruleset, read (never changed) to show the engine's rules stay in the node.
    let host_rules = || {
        let out = Command::new("nft")
            .args(["-s", "list", "ruleset"])
            .output()
            .unwrap();
        assert!(out.status.success(), "reading the host ruleset");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let host_before = host_rules();
    let lab = new_lab();
    let net = adoption(&lab);
    let docker = net
        .node
        .start_docker(&lab.dir().join("docker"))
        .expect("docker engine in the node namespace");
    assert!(docker.docker_host().starts_with("unix:///tmp/mesh-lab/"));
    let images = docker
        .docker(&["image", "ls", "--format", "{{.Repository}}:{{.Tag}}"])
        .unwrap()
        .stdout;
    assert!(images.lines().any(|l| l == lab::BUSYBOX_IMAGE), "{images}");

    let id = docker
        .run_container(
            "web",
            &["-p", "8082:80"],
            &["/bin/httpd", "-f", "-p", "80", "-h", "/www"],
        )
        .unwrap();
    assert_eq!(id.len(), 64, "container id {id}");
    for addr in [IpAddr::from(NODE_PUBLIC_V4), NODE_PUBLIC_V6.into()] {
        let got = probe_until(
            &net.outside,
            addr,
            8082,
            Probe::Reached,
            Duration::from_secs(20),
        );
        assert_eq!(
            got,
            Probe::Reached,
            "published port 8082 on {addr} from outside"
        );
    }
    // It is the container's httpd that answers.
    let page = net
        .outside
        .run_ok(&[
            "busybox",
            "wget",
            "-q",
            "-O",
            "-",
            "http://192.0.2.10:8082/",
        ])
        .unwrap()
        .stdout;
    assert_eq!(page, "lab container\n");
    // Docker's DNAT is in the node's namespace, and the host's ruleset did not change.
    let nat = net
        .node
        .run_ok(&["iptables", "-t", "nat", "-S", "DOCKER"])
        .unwrap()
        .stdout;
    assert!(
        nat.contains("--dport 8082") && nat.contains("-j DNAT"),
        "{nat}"
    );
    assert_eq!(host_rules(), host_before, "the host ruleset changed");

    let dir = docker.dir().to_owned();
    let pid = docker.pid();
    docker.stop().expect("stopping the engine");
    assert!(!alive(pid), "dockerd {pid} survived");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mounts.contains(dir.to_str().unwrap()),
        "mounts left under {}:\n{mounts}",
        dir.display()
    );
    assert!(!dir.exists(), "{} survived", dir.display());
    assert_eq!(
        net.outside
            .probe_tcp(NODE_PUBLIC_V6.into(), 8082, ANSWER)
            .unwrap(),
        Probe::Refused
    );
}

#[test]
fn a_crashed_docker_engine_is_swept_with_its_containers() {
    let lab = new_lab();
    let node = lab.machine("node").unwrap();
    let docker = node
        .start_docker(&lab.dir().join("docker"))
        .expect("docker engine in the node namespace");
    let id = docker
        .run_container("sleeper", &[], &["/bin/sleep", "300"])
        .unwrap();
    let inspect = docker
        .docker(&["inspect", "--format", "{{.State.Pid}}", &id])
        .unwrap();
    let container_pid: u32 = inspect.stdout.trim().parse().unwrap();
    assert!(alive(container_pid));

    // Crash the engine the way a killed test run leaves it: dockerd, containerd and the shim die
    // at once, and the container's process lives on without them.
    let needle = format!("{}/", docker.dir().display());
    let engine: Vec<i32> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&needle))
        })
        .collect();
    assert!(
        engine.len() >= 3,
        "dockerd, containerd and a shim: {engine:?}"
    );
    for pid in &engine {
        // SAFETY: kill has no memory effects; these are the lab engine's own processes.
        unsafe { libc::kill(*pid, libc::SIGKILL) };
    }
    let deadline = Instant::now() + ANSWER;
    while engine.iter().any(|p| alive(*p as u32)) {
        assert!(Instant::now() < deadline, "the engine did not die");
        thread::sleep(Duration::from_millis(20));
    }
    assert!(alive(container_pid), "the container outlives its engine");

    let dir = docker.dir().to_owned();
    drop(docker);
    assert!(
        !alive(container_pid),
        "container process {container_pid} survived the sweep"
    );
    let cgroups: Vec<_> = std::fs::read_dir("/sys/fs/cgroup")
        .unwrap()
        .filter_map(|h| Some(h.ok()?.path().join("docker").join(&id)))
        .chain([Path::new("/sys/fs/cgroup/docker").join(&id)])
        .filter(|p| p.exists())
        .collect();
    assert_eq!(cgroups, Vec::<std::path::PathBuf>::new(), "cgroups left");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mounts.contains(dir.to_str().unwrap()),
        "mounts left under {}",
        dir.display()
    );
    assert!(!dir.exists(), "{} survived", dir.display());
}
