//! The runtime's bridges without a child process and followed live, against a real Docker engine
//! in the lab node: a reconcile with an unchanged generation exec's nothing but the binary
//! itself (traced with `strace -f -e trace=execve`), with the engine answering and with none;
//! and the resident host covers a network created after an apply with the guard within 100 ms,
//! so a container on it publishing the store's port is not reached from outside by the forward
//! path.

use super::resident::Resident;
use super::*;
use std::net::Ipv4Addr;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// The bound from `docker network create` to the guard covering its bridge (issue 31).
const BOUND: Duration = Duration::from_millis(100);

/// The programs `mesh-host ARGS` exec'd, traced: the binary itself is the first.
pub(super) fn traced_execs(
    host: &Host,
    docker_host: &str,
    args: &[&str],
) -> (lab::Output, Vec<String>) {
    let trace = host.dir.path().join("execve.trace");
    let _ = std::fs::remove_file(&trace);
    let root = host.root();
    let env = format!("DOCKER_HOST={docker_host}");
    let mut argv = vec![
        "strace",
        "-f",
        "-qq",
        "-e",
        "trace=execve",
        "-o",
        trace.to_str().unwrap(),
        "-E",
        &env,
        MESH,
        "--root",
        root.to_str().unwrap(),
    ];
    argv.extend_from_slice(args);
    let out = host
        .node
        .run(&argv)
        .expect("strace runs (lab/test installs it)");
    let text = std::fs::read_to_string(&trace).expect("strace's output file");
    let execs = text
        .lines()
        .filter(|l| l.contains("execve("))
        .map(str::to_string)
        .collect();
    (out, execs)
}

pub(super) fn assert_only_the_binary(execs: &[String], what: &str) {
    assert!(
        execs.len() == 1 && execs[0].contains(&format!("execve(\"{MESH}\"")),
        "{what}: the reconcile exec'd more than itself:\n{}",
        execs.join("\n")
    );
}

#[test]
fn a_reconcile_with_an_unchanged_generation_starts_no_process() {
    let lab = new_lab();
    let net = adoption(&lab);
    let node = &net.node;
    let mut docker = node
        .start_docker(&lab.dir().join("docker"))
        .expect("a Docker engine in the node's namespace (docker.io, busybox-static)");
    let host = Host::new(node);
    let decl = declaration(&[opening("web/api", OPENED, "incoming")]);
    host.apply_with_docker(docker.docker_host(), &decl);

    let (out, execs) = traced_execs(&host, docker.docker_host(), &["reconcile", "--json"]);
    assert!(out.success(), "{}\n{}", out.stdout, out.stderr);
    let report: Value = crate::util::contract(&out.stdout);
    assert_nothing_failed(&report);
    let entry = &report["entries"][0];
    assert!(
        entry["outcome"] == "unchanged"
            && entry["detail"]
                .as_str()
                .is_some_and(|d| d.contains("generation") && d.contains("unchanged")),
        "the ruleset's generation is the last apply's: {report:#}"
    );
    // The engine was asked: its bridge is in the guard, and no docker process did it.
    assert!(
        report["guard"]
            .as_str()
            .is_some_and(|g| g.contains("at the container ports routed to docker0")),
        "{report:#}"
    );
    assert_only_the_binary(&execs, "with the engine answering");

    // No engine: its socket is gone, and nothing is started to ask it either.
    docker.stop_daemon().expect("dockerd stops");
    let sock = docker
        .docker_host()
        .trim_start_matches("unix://")
        .to_string();
    let _ = std::fs::remove_file(&sock);
    let (out, execs) = traced_execs(&host, docker.docker_host(), &["reconcile", "--json"]);
    assert!(out.success(), "{}\n{}", out.stdout, out.stderr);
    assert_only_the_binary(&execs, "with no engine socket");
    let (out, execs) = traced_execs(&host, docker.docker_host(), &["reconcile", "--json"]);
    assert!(out.success(), "{}\n{}", out.stdout, out.stderr);
    let report: Value = crate::util::contract(&out.stdout);
    assert_eq!(outcome(&report, "web/api"), "unchanged", "{report:#}");
    assert_only_the_binary(&execs, "with no engine socket, generation unchanged");
}

/// The runtime bridges the guard table names, read in the node's namespace: its container rules'
/// comments read `mesh-host:guard/WHAT/container/PROTO/PORT/BRIDGE`, then the private network's
/// part and the hook (`/forward`) where there are.
fn guarded_bridges(sock: &mut NfSocket) -> Vec<String> {
    let rules = sock
        .rules_of(firewall::Family::Inet, "mesh_host", None)
        .unwrap_or_default();
    let mut out: Vec<String> = rules
        .iter()
        .filter_map(|r| r.comment.as_deref())
        .filter_map(|c| c.split_once("/container/"))
        .filter_map(|(_, rest)| rest.split('/').nth(2).map(str::to_string))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Polls the guard table in the node every half millisecond until it names a bridge not in
/// `before`, up to `limit`; the bridge and when it appeared (by both clocks).
type Seen = (String, Instant, SystemTime);

fn first_new_bridge(
    node: &Machine,
    before: Vec<String>,
    limit: Duration,
) -> std::thread::JoinHandle<Option<Seen>> {
    let node = node.clone();
    std::thread::spawn(move || {
        node.in_namespace(move || {
            let mut sock = NfSocket::open().expect("a netlink socket in the node");
            let until = Instant::now() + limit;
            while Instant::now() < until {
                if let Some(new) = guarded_bridges(&mut sock)
                    .into_iter()
                    .find(|b| !before.contains(b))
                {
                    return Some((new, Instant::now(), SystemTime::now()));
                }
                std::thread::sleep(Duration::from_micros(500));
            }
            None
        })
        .expect("entering the node")
    })
}

fn container_address(docker: &lab::Docker, name: &str, network: &str) -> IpAddr {
    let format = format!("{{{{(index .NetworkSettings.Networks \"{network}\").IPAddress}}}}");
    let out = docker
        .docker(&["inspect", "-f", &format, name])
        .expect("docker inspect")
        .stdout;
    out.trim().parse().expect("the container's address")
}

/// `docker network create --subnet 172.30.N.0/24 NAME`, Docker naming its bridge; the bridge's
/// name (`br-` and the id's first 12 characters) and when the command started and returned.
fn create_network(docker: &lab::Docker, name: &str, n: u8) -> (String, Instant, Instant) {
    let subnet = format!("172.30.{n}.0/24");
    let asked = Instant::now();
    let id = docker
        .docker(&["network", "create", "--subnet", &subnet, name])
        .expect("docker network create")
        .stdout;
    let created = Instant::now();
    (format!("br-{}", &id.trim()[..12]), asked, created)
}

/// When the engine says it created network `name` (its create event's time), since `since`.
fn created_at(docker: &lab::Docker, name: &str, since: SystemTime) -> SystemTime {
    let secs = |t: SystemTime| t.duration_since(UNIX_EPOCH).unwrap().as_secs_f64();
    let (since, until) = (
        format!("{:.3}", secs(since) - 1.0),
        format!("{:.3}", secs(SystemTime::now()) + 1.0),
    );
    let filter = format!("network={name}");
    let out = docker
        .docker(&[
            "events",
            "--since",
            &since,
            "--until",
            &until,
            "--filter",
            "type=network",
            "--filter",
            "event=create",
            "--filter",
            &filter,
            "--format",
            "{{.TimeNano}}",
        ])
        .expect("docker events")
        .stdout;
    let nanos: u64 = out
        .lines()
        .next()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("no create event of {name}: {out:?}"));
    UNIX_EPOCH + Duration::from_nanos(nanos)
}

#[test]
fn a_network_created_after_an_apply_is_guarded_within_100_ms() {
    let lab = new_lab();
    let net = adoption(&lab);
    let node = &net.node;
    let docker = node
        .start_docker(&lab.dir().join("docker"))
        .expect("a Docker engine in the node's namespace (docker.io, busybox-static)");
    let env = format!("DOCKER_HOST={}", docker.docker_host());
    let host = Host::wrapped(node, vec!["env".into(), env]);
    host.apply(&declaration(&[]));
    let serve = |name: &str, network: &str| {
        docker
            .run_container(
                name,
                &["--network", network, "-p", &format!("{STORE}:{STORE}")],
                &["/bin/httpd", "-f", "-p", &STORE.to_string(), "-h", "/www"],
            )
            .expect("the store's stand-in on its network, publishing the store's port")
    };
    let route = |third: u8| {
        let dest = IpAddr::V4(Ipv4Addr::new(172, 30, third, 0));
        net.outside
            .add_route(dest, 24, NODE_PUBLIC_V4.into())
            .unwrap();
        net.peer
            .add_route(dest, 24, NODE_PRIVATE_V4.into())
            .unwrap();
    };

    // The hole: a network made after the apply, and the guard made then does not know its bridge.
    let (bridge_a, _, _) = create_network(&docker, "lab-a", 1);
    route(1);
    serve("store-a", "lab-a");
    let a = [container_address(&docker, "store-a", "lab-a")];
    expect(
        &net.outside,
        &a,
        STORE,
        Probe::Reached,
        &format!("a network ({bridge_a}) the last apply did not know, without the resident host"),
    );

    // The resident host: its first reconcile covers lab-a; from then on it follows the engine.
    let resident = Resident::start(&host, &[]);
    let covered = node
        .in_namespace(|| guarded_bridges(&mut NfSocket::open().unwrap()))
        .unwrap();
    assert!(covered.contains(&bridge_a), "{covered:?}");
    expect(
        &net.outside,
        &a,
        STORE,
        Probe::TimedOut,
        "lab-a's store from outside, guarded",
    );

    // Networks made while it runs: each covered within the bound, timed from the command.
    let mut after_return = Vec::new();
    let mut after_ask = Vec::new();
    let mut after_event = Vec::new();
    for n in 2..=6u8 {
        let before = node
            .in_namespace(|| guarded_bridges(&mut NfSocket::open().unwrap()))
            .unwrap();
        let watch = first_new_bridge(node, before, Duration::from_secs(5));
        let wall = SystemTime::now();
        let (bridge, asked, created) = create_network(&docker, &format!("lab-{n}"), n);
        let (seen, at, at_wall) = watch.join().unwrap().unwrap_or_else(|| {
            panic!(
                "{bridge} never covered by the guard within 5 s:\n{}",
                resident.log()
            )
        });
        assert_eq!(seen, bridge, "the guard covers the new network's bridge");
        after_return.push(at.saturating_duration_since(created));
        after_ask.push(at.saturating_duration_since(asked));
        let event = created_at(&docker, &format!("lab-{n}"), wall);
        after_event.push(at_wall.duration_since(event).unwrap_or_default());
    }
    eprintln!(
        "docker network create -> guard covers the bridge: after the engine's create event \
         {after_event:?}; after the command returned {after_return:?} (0 when covered before it \
         returned); after the command was started {after_ask:?}"
    );
    let worst = after_event.iter().max().copied().unwrap_or_default();
    assert!(
        worst <= BOUND,
        "a new network's bridge was covered {worst:?} after the engine created it (bound \
         {BOUND:?}): {after_event:?}\n{}",
        resident.log()
    );
    let worst = after_return.iter().max().copied().unwrap_or_default();
    assert!(
        worst <= BOUND,
        "a new network's bridge was covered {worst:?} after `docker network create` returned \
         (bound {BOUND:?}): {after_return:?}\n{}",
        resident.log()
    );
    let log = resident.log();
    assert!(
        log.contains("hearing the container engine's network events")
            && log.contains("the container runtime's bridges changed; the guard covers them"),
        "the engine's events heard, and the guard written for them:\n{log}"
    );

    // The probe: a container on a network made after the apply, publishing the store's port, is
    // not reached from outside by the forward path; the private network still reaches it.
    route(2);
    docker.remove_container("store-a").unwrap();
    serve("store-2", "lab-2");
    let b = [container_address(&docker, "store-2", "lab-2")];
    expect(
        &net.outside,
        &b,
        STORE,
        Probe::TimedOut,
        "the store's port on a network made after the apply, from outside",
    );
    expect(
        &net.peer,
        &b,
        STORE,
        Probe::Reached,
        "the same container over the private network",
    );

    // A network removed leaves the guard too.
    docker.remove_container("store-2").unwrap();
    docker.docker(&["network", "rm", "lab-3"]).unwrap();
    let gone = Instant::now() + Duration::from_secs(5);
    loop {
        let now = node
            .in_namespace(|| guarded_bridges(&mut NfSocket::open().unwrap()))
            .unwrap();
        let bridge_3 = node
            .run_ok(&["ip", "-o", "link", "show", "type", "bridge"])
            .unwrap()
            .stdout;
        let left: Vec<&String> = now
            .iter()
            .filter(|b| *b != "docker0" && !bridge_3.contains(b.as_str()))
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < gone,
            "the guard still names removed bridges {left:?}:\n{}",
            resident.log()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The derived filter's rules that forward what leaves a bridge (comments `…leaving/BRIDGE`).
fn filter_bridges(sock: &mut NfSocket) -> Vec<String> {
    let rules = sock
        .rules_of(firewall::Family::Inet, "mesh_host", Some("forward"))
        .unwrap_or_default();
    rules
        .iter()
        .filter_map(|r| r.comment.as_deref())
        .filter_map(|c| c.split_once("leaving/").map(|(_, b)| b.to_string()))
        .collect()
}

/// Whether a container on `network` reaches the outside machine's web server through the node.
fn reaches_out(docker: &lab::Docker, network: &str) -> bool {
    // busybox's wget faults in the lab's image; nc asks the same server by hand.
    let ask = format!("printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 2 {OUTSIDE_PUBLIC_V4} {SERVED}");
    let args = [
        "run",
        "--rm",
        "--network",
        network,
        lab::BUSYBOX_IMAGE,
        "sh",
        "-c",
        &ask,
    ];
    let out = docker.command(&args).output().expect("docker run");
    let answered = String::from_utf8_lossy(&out.stdout).starts_with("HTTP/");
    if !answered {
        eprintln!(
            "from {network}: {} {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    answered
}

#[test]
fn on_a_converged_node_a_network_created_after_the_flip_is_forwarded_from_at_once() {
    let lab = new_lab();
    let net = adoption(&lab);
    let node = &net.node;
    let docker = node
        .start_docker(&lab.dir().join("docker"))
        .expect("a Docker engine in the node's namespace (docker.io, busybox-static)");
    let _web = net
        .outside
        .listen_tcp(SERVED)
        .expect("a web server outside");
    let env = format!("DOCKER_HOST={}", docker.docker_host());
    let host = Host::wrapped(node, vec!["env".into(), env]);
    let mut api = opening("api/port", OPENED, "incoming");
    api["module"] = json!("api");
    host.apply(&declaration(&[api]));
    let out = host.run(&["converge", "--json"]);
    assert!(out.success(), "the flip: {}\n{}", out.stdout, out.stderr);
    assert!(
        reaches_out(&docker, "bridge"),
        "docker0, known at the flip, forwards: {}",
        run_ok(node, &["nft", "list", "ruleset"])
    );

    // A network made after the flip, with no resident host: the filter does not forward from it.
    let (bridge_a, _, _) = create_network(&docker, "lab-a", 1);
    assert!(
        !reaches_out(&docker, "lab-a"),
        "{bridge_a}, unknown to the filter, is not forwarded from"
    );
    let resident = Resident::start(&host, &[]);
    let in_filter = || {
        node.in_namespace(|| filter_bridges(&mut NfSocket::open().unwrap()))
            .unwrap()
    };
    assert!(in_filter().contains(&bridge_a), "{:?}", in_filter());

    // While it runs: a new network is forwarded from within the bound, and its container reaches
    // out.
    let (bridge_b, _, created) = create_network(&docker, "lab-b", 2);
    let until = created + Duration::from_secs(5);
    while !in_filter().contains(&bridge_b) {
        assert!(
            Instant::now() < until,
            "{bridge_b} never in the derived filter:\n{}",
            resident.log()
        );
        std::thread::sleep(Duration::from_micros(500));
    }
    let took = created.elapsed();
    eprintln!("the derived filter forwards from {bridge_b} {took:?} after the command returned");
    assert!(took <= BOUND, "{took:?}:\n{}", resident.log());
    assert!(
        reaches_out(&docker, "lab-b"),
        "a container on {bridge_b} reaches out"
    );
    assert!(
        resident
            .log()
            .contains("the derived filter forwards from them"),
        "{}",
        resident.log()
    );
}

/// A Podman service in `node` (runc and cgroupfs, storage and networks under `dir`, as
/// tests/containers.rs starts one), with the lab's busybox image; its `CONTAINER_HOST`.
fn start_podman(node: &Machine, dir: &Path) -> (lab::Process, String) {
    assert!(
        mesh_host::system::on_path("podman") && mesh_host::system::on_path("runc"),
        "podman and runc must be installed (lab/test installs them)"
    );
    std::fs::create_dir_all(dir).unwrap();
    let d = dir.display();
    let conf = dir.join("containers.conf");
    std::fs::write(
        &conf,
        format!(
            "[containers]\ndefault_ulimits = [\"nofile=1024:1024\", \"nproc=1024:1024\"]\n\
             [engine]\nruntime = \"runc\"\ncgroup_manager = \"cgroupfs\"\ntmp_dir = \"{d}/tmp\"\n\
             [network]\nnetwork_config_dir = \"{d}/networks\"\n"
        ),
    )
    .unwrap();
    let storage = dir.join("storage.conf");
    std::fs::write(
        &storage,
        format!(
            "[storage]\ndriver = \"overlay\"\ngraphroot = \"{d}/root\"\nrunroot = \"{d}/run\"\n"
        ),
    )
    .unwrap();
    let endpoint = format!("unix://{d}/sock");
    let service = node
        .spawn(&[
            "env".to_string(),
            format!("CONTAINERS_CONF={}", conf.display()),
            format!("CONTAINERS_STORAGE_CONF={}", storage.display()),
            "podman".into(),
            "system".into(),
            "service".into(),
            "--time=0".into(),
            endpoint.clone(),
        ])
        .expect("podman system service");
    let until = Instant::now() + Duration::from_secs(60);
    while !podman(&endpoint, &["version"]).status.success() {
        assert!(
            Instant::now() < until,
            "podman system service did not answer"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let image = dir.join("image");
    for sub in ["bin", "www"] {
        std::fs::create_dir_all(image.join(sub)).unwrap();
    }
    std::fs::copy("/bin/busybox", image.join("bin/busybox")).expect("busybox-static");
    for applet in ["sh", "httpd"] {
        std::os::unix::fs::symlink("busybox", image.join("bin").join(applet)).unwrap();
    }
    std::fs::write(image.join("www/index.html"), "lab container\n").unwrap();
    let tar = dir.join("image.tar");
    let tarred = std::process::Command::new("tar")
        .arg("-C")
        .arg(&image)
        .arg("-cf")
        .arg(&tar)
        .arg(".")
        .status()
        .unwrap();
    assert!(tarred.success());
    let imported = podman(
        &endpoint,
        &["import", tar.to_str().unwrap(), lab::BUSYBOX_IMAGE],
    );
    assert!(imported.status.success(), "{imported:?}");
    (service, endpoint)
}

fn podman(endpoint: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new("podman")
        .env("CONTAINER_HOST", endpoint)
        .args(args)
        .output()
        .expect("running podman")
}

fn podman_ok(endpoint: &str, args: &[&str]) -> String {
    let out = podman(endpoint, args);
    assert!(
        out.status.success(),
        "podman {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Podman makes a network's bridge with its first container and says nothing of the network's
/// creation: the kernel's announcement of the bridge is what the resident host hears.
#[test]
fn a_podman_networks_bridge_is_guarded_as_its_first_container_starts() {
    let lab = new_lab();
    let net = adoption(&lab);
    let node = &net.node;
    let (_service, endpoint) = start_podman(node, &lab.dir().join("podman"));
    let host = Host::wrapped(
        node,
        vec![
            "env".into(),
            format!("CONTAINER_HOST={endpoint}"),
            "DOCKER_HOST=".into(),
        ],
    );
    host.apply(&declaration(&[]));
    let publish = format!("{STORE}:{STORE}");
    let port = STORE.to_string();
    let serve = |name: &str, network: &str| {
        let args = [
            "run",
            "-d",
            "--name",
            name,
            "--network",
            network,
            "-p",
            &publish,
            lab::BUSYBOX_IMAGE,
            "/bin/httpd",
            "-f",
            "-p",
            &port,
            "-h",
            "/www",
        ];
        podman_ok(&endpoint, &args)
    };
    let routed = |third: u8, name: &str, network: &str| -> IpAddr {
        let dest = IpAddr::V4(Ipv4Addr::new(172, 30, third, 0));
        net.outside
            .add_route(dest, 24, NODE_PUBLIC_V4.into())
            .unwrap();
        net.peer
            .add_route(dest, 24, NODE_PRIVATE_V4.into())
            .unwrap();
        let format = format!("{{{{(index .NetworkSettings.Networks \"{network}\").IPAddress}}}}");
        podman_ok(&endpoint, &["inspect", "-f", &format, name])
            .parse()
            .expect("the container's address")
    };
    let subnet = |third: u8| format!("172.30.{third}.0/24");

    // The hole without the resident host: a network the apply did not know, its store reached
    // from outside straight at the container's address.
    podman_ok(
        &endpoint,
        &["network", "create", "--subnet", &subnet(8), "lab-q"],
    );
    serve("store-q", "lab-q");
    let q = routed(8, "store-q", "lab-q");
    expect(
        &net.outside,
        &[q],
        STORE,
        Probe::Reached,
        "a Podman network the last apply did not know, without the resident host",
    );
    podman_ok(&endpoint, &["rm", "--force", "--time", "0", "store-q"]);

    let resident = Resident::start(&host, &[]);
    podman_ok(
        &endpoint,
        &["network", "create", "--subnet", &subnet(7), "lab-p"],
    );
    let inspect = [
        "network",
        "inspect",
        "--format",
        "{{.NetworkInterface}}",
        "lab-p",
    ];
    let bridge = podman_ok(&endpoint, &inspect);
    let before = node
        .in_namespace(|| guarded_bridges(&mut NfSocket::open().unwrap()))
        .unwrap();
    assert!(
        !before.contains(&bridge),
        "no bridge before its first container: {before:?}"
    );
    let watch = first_new_bridge(node, before, Duration::from_secs(10));
    serve("store-p", "lab-p");
    let started = Instant::now();
    let (seen, at, _) = watch
        .join()
        .unwrap()
        .unwrap_or_else(|| panic!("{bridge} never covered:\n{}", resident.log()));
    assert_eq!(seen, bridge);
    let after = at.saturating_duration_since(started);
    eprintln!("podman run -> the guard covers {bridge} {after:?} after the command returned");
    assert!(after <= BOUND, "{after:?}:\n{}", resident.log());

    let addr = routed(7, "store-p", "lab-p");
    expect(
        &net.peer,
        &[addr],
        STORE,
        Probe::Reached,
        "the store's stand-in over the private network",
    );
    expect(
        &net.outside,
        &[addr],
        STORE,
        Probe::TimedOut,
        "the store's port on a Podman network made after the apply, from outside",
    );
    let _ = podman(&endpoint, &["rm", "--all", "--force", "--time", "0"]);
}
