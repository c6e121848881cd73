//! Lab tests of `mesh-host genesis` through the built binary, run inside a lab node's network
//! namespace with a real Docker engine in that namespace, as the adoption ADR's bed prescribes: a
//! converged raise refused on a machine in use, an adopted raise refused while a container holds
//! the registry's port and raised on the port given instead (which then stays the node's), a
//! private range refused where a predecessor's tunnel still runs, and the store and the bus
//! reachable after an adopted raise exactly from where the ADR says.
//!
//! The node is prepared once for the module (dockerd is slow to start on two cores) the way a
//! predecessor leaves a machine: containers serving published ports, one of them on the
//! registry's port, a service on the node's public address, ssh, a loopback-only listener, and an
//! iptables firewall that admits only the served ports on the incoming and the forwarded paths.
//! Tests that use it take turns. Nothing touches the machine's own firewall or Docker; a missing
//! prerequisite fails a test, never skips it.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use lab::addr::*;
use lab::{Adoption, Docker, Lab, Machine, Probe, Process};
use serde_json::{json, Value};

const MESH: &str = env!("CARGO_BIN_EXE_mesh-host");
const NODE: &str = "lab-node";

/// The catalogue's registry port, which the predecessor's registry holds, and the one given.
const REGISTRY: u16 = 5000;
const REGISTRY_GIVEN: u16 = 5001;
/// The foundation's other ports, at the catalogue's defaults.
const STORE: u16 = 5432;
const BUS: u16 = 5672;
const BROKER_MANAGEMENT: u16 = 15672;
/// The predecessor's web container's published port.
const WEB: u16 = 8080;
/// A service the predecessor runs on the node itself, bound to the node's public address.
const SERVICE: u16 = 8081;
/// ssh's port: a listener on it stands in for sshd.
const SSH: u16 = 22;
/// A listener on loopback only, which no other machine can reach, so it is not "in use".
const LOOPBACK_ONLY: u16 = 6379;

/// Long enough for a real answer on a loaded two-core machine.
const ANSWER: Duration = Duration::from_secs(3);
/// How long a probe that must go unanswered waits; a lab veth answers in well under a millisecond.
const SILENCE: Duration = Duration::from_millis(1500);
/// How long a freshly started container may take before its port answers.
const SETTLE: Duration = Duration::from_secs(30);

/// The prepared node, shared by the tests of this module.
struct Bed {
    net: Adoption,
    docker: Docker,
    /// The pid of the predecessor's service on the node's public address.
    service_pid: u32,
    /// The lab bundle: the embedded bundle with busybox stand-ins for its images.
    bundle: PathBuf,
    /// Kept so the listeners run as long as the module does.
    _listeners: Mutex<Vec<Process>>,
}

fn bed() -> &'static Bed {
    static BED: OnceLock<Bed> = OnceLock::new();
    BED.get_or_init(prepare)
}

/// The tests that use the shared node take turns: each reads the machine whole, and one raises
/// the foundation on it.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    // A test that failed while holding the turn leaves nothing half-done that the next one
    // relies on, so its poison is not passed on.
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A container command that serves each port with busybox httpd and ends on SIGTERM (a bare
/// busybox as PID 1 ignores it, and every stop would wait out the runtime's ten seconds).
fn serve(ports: &[u16]) -> Vec<String> {
    let mut script = String::from("trap 'exit 0' TERM;");
    for p in ports {
        script.push_str(&format!(" httpd -f -p {p} -h /www &"));
    }
    script.push_str(" wait");
    vec!["/bin/sh".into(), "-c".into(), script]
}

/// The embedded bundle with every image replaced by the lab's busybox (no registry is reachable
/// here) serving its container ports. Ids, names, modules and every `$setting` reference are the
/// real bundle's, so the lab raises what a node raises.
fn lab_bundle() -> Value {
    let mut v: Value =
        serde_json::from_str(genesis::bundle::EMBEDDED).expect("the embedded bundle");
    let resources = v["resources"].as_array_mut().expect("bundle resources");
    for r in resources.iter_mut().filter(|r| r["type"] == "container") {
        let ports: Vec<u16> = r["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| {
                p["container_port"]
                    .as_u64()
                    .expect("a literal container port") as u16
            })
            .collect();
        r["image"] = json!(lab::BUSYBOX_IMAGE);
        r["command"] = json!(serve(&ports));
    }
    v
}

/// `busybox httpd` listening on `addr` (`IP:PORT`) inside `m`, once it listens.
fn httpd(m: &Machine, www: &Path, addr: &str, port: u16) -> Process {
    let mut p = m
        .spawn(&[
            "busybox",
            "httpd",
            "-f",
            "-p",
            addr,
            "-h",
            www.to_str().unwrap(),
        ])
        .unwrap_or_else(|e| panic!("busybox httpd on {addr} (busybox-static): {e}"));
    m.wait_listening(&mut p, port)
        .unwrap_or_else(|e| panic!("busybox httpd on {addr}: {e}"));
    p
}

fn run_ok(m: &Machine, argv: &[&str]) -> String {
    m.run_ok(argv)
        .unwrap_or_else(|e| panic!("in {}: {e}", m.name()))
        .stdout
}

fn prepare() -> Bed {
    let lab = Lab::new()
        .unwrap_or_else(|e| panic!("the lab needs root, iproute2 and nsenter; it never skips: {e}"))
        .until_exit();
    let net = Adoption::build(lab).expect("building the adoption topology");
    let node = &net.node;
    let docker = node
        .start_docker(&lab.dir().join("docker"))
        .unwrap_or_else(|e| {
            panic!("a Docker engine in the node's namespace (docker.io, busybox-static): {e}")
        });

    // The predecessor's containers: its registry on the catalogue's registry port, and a web
    // service.
    let registry_cmd = serve(&[REGISTRY]);
    let registry_cmd: Vec<&str> = registry_cmd.iter().map(String::as_str).collect();
    docker
        .run_container(
            "old-registry",
            &["-p", &format!("{REGISTRY}:{REGISTRY}")],
            &registry_cmd,
        )
        .expect("the predecessor's registry");
    let web_cmd = serve(&[80]);
    let web_cmd: Vec<&str> = web_cmd.iter().map(String::as_str).collect();
    docker
        .run_container("web", &["-p", &format!("{WEB}:80")], &web_cmd)
        .expect("the predecessor's web container");

    // The predecessor's listeners on the node itself.
    let www = lab.dir().join("www");
    std::fs::create_dir_all(&www).unwrap();
    std::fs::write(www.join("index.html"), "predecessor\n").unwrap();
    let service = httpd(node, &www, &format!("{NODE_PUBLIC_V4}:{SERVICE}"), SERVICE);
    let service_pid = service.pid();
    let ssh = node
        .listen_tcp(SSH)
        .expect("a listener standing in for sshd");
    let loopback = httpd(
        node,
        &www,
        &format!("127.0.0.1:{LOOPBACK_ONLY}"),
        LOOPBACK_ONLY,
    );

    // The predecessor's firewall, through iptables-nft beside Docker's own rules: incoming, only
    // ssh and its service; forwarded to containers, only the ports it serves.
    for rule in [
        "-A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
        "-A INPUT -i lo -j ACCEPT",
        "-A INPUT -p icmp -j ACCEPT",
        "-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT",
        "-A INPUT -p tcp -m tcp --dport 8081 -j ACCEPT",
        "-P INPUT DROP",
        "-F DOCKER-USER",
        "-A DOCKER-USER -m conntrack --ctstate RELATED,ESTABLISHED -j RETURN",
        "-A DOCKER-USER -i docker0 -j RETURN",
        "-A DOCKER-USER -p tcp -m conntrack --ctstate DNAT --ctorigdstport 5000 -j RETURN",
        "-A DOCKER-USER -p tcp -m conntrack --ctstate DNAT --ctorigdstport 8080 -j RETURN",
        "-A DOCKER-USER -j DROP",
    ] {
        let mut argv = vec!["iptables-nft"];
        argv.extend(rule.split(' '));
        run_ok(node, &argv);
    }

    let bundle = lab.dir().join("lab-bundle.json");
    std::fs::write(&bundle, serde_json::to_vec_pretty(&lab_bundle()).unwrap()).unwrap();

    let bed = Bed {
        net: net.clone(),
        docker,
        service_pid,
        bundle,
        _listeners: Mutex::new(vec![service, ssh, loopback]),
    };
    // The bed serves what the predecessor serves, and only that, before any test runs.
    for port in [REGISTRY, WEB, SERVICE] {
        assert_eq!(
            wait_reached(&net.outside, NODE_PUBLIC_V4.into(), port),
            Probe::Reached,
            "the predecessor serves port {port} from outside"
        );
    }
    expect(
        &net.outside,
        &[NODE_PUBLIC_V4.into()],
        LOOPBACK_ONLY,
        Probe::TimedOut,
        "the predecessor's firewall drops what it does not serve",
    );
    bed
}

/// Runs `mesh-host --root ROOT ARGS…` inside the node, pointed at the node's Docker engine (and
/// only it) the way an operator's shell would be.
fn mesh_in(m: &Machine, docker_host: &str, root: &Path, args: &[&str]) -> lab::Output {
    let mut argv = vec![MESH, "--root", root.to_str().unwrap()];
    argv.extend_from_slice(args);
    let mut cmd = m.command(&argv);
    cmd.env("DOCKER_HOST", docker_host)
        .env_remove("CONTAINER_HOST")
        .env_remove("DOCKER_CONTEXT");
    lab::run(&mut cmd).unwrap_or_else(|e| panic!("running mesh-host in {}: {e}", m.name()))
}

fn mesh(root: &Path, args: &[&str]) -> lab::Output {
    let b = bed();
    mesh_in(&b.net.node, b.docker.docker_host(), root, args)
}

fn shown(out: &lab::Output) -> String {
    format!(
        "exit {}\n--- stdout\n{}\n--- stderr\n{}",
        out.status, out.stdout, out.stderr
    )
}

fn json_of(out: &lab::Output) -> Value {
    if let Err(e) = serde_json::from_str::<Value>(&out.stdout) {
        panic!("mesh-host printed no JSON ({e}):\n{}", shown(out));
    }
    crate::util::contract(&out.stdout)
}

/// The lines a refused genesis named (`--json` prints them as `refused.problems`).
fn refused(out: &lab::Output) -> Vec<String> {
    assert_eq!(
        out.status.code(),
        Some(3),
        "genesis must refuse (exit 3):\n{}",
        shown(out)
    );
    json_of(out)["refused"]["problems"]
        .as_array()
        .unwrap_or_else(|| panic!("no refused list:\n{}", shown(out)))
        .iter()
        .map(|l| l.as_str().unwrap().to_string())
        .collect()
}

fn outcome(report: &Value, id: &str) -> String {
    report["entries"]
        .as_array()
        .expect("a report has entries")
        .iter()
        .find(|e| e["id"] == id)
        .unwrap_or_else(|| panic!("no entry for {id}: {report:#}"))["outcome"]
        .as_str()
        .unwrap()
        .to_string()
}

fn store_state(root: &Path) -> Value {
    let path = root.join("var/lib/mesh-host/state.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("the store {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

fn no_store(root: &Path) -> bool {
    !root.join("var/lib/mesh-host").exists()
}

/// The names of the running containers.
fn running(docker: &Docker) -> Vec<String> {
    let out = docker
        .docker(&["ps", "--format", "{{.Names}}"])
        .expect("docker ps");
    let mut names: Vec<String> = out.stdout.lines().map(str::to_string).collect();
    names.sort();
    names
}

/// A container's id and its published ports as `HOSTPORT->CONTAINERPORT/PROTO`.
fn container(docker: &Docker, name: &str) -> (String, Vec<String>) {
    let out = docker
        .docker(&["container", "inspect", name])
        .unwrap_or_else(|e| panic!("inspecting {name}: {e}"));
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    let c = &v[0];
    let mut ports = Vec::new();
    for (spec, bindings) in c["HostConfig"]["PortBindings"].as_object().unwrap() {
        for b in bindings.as_array().unwrap() {
            ports.push(format!("{}->{spec}", b["HostPort"].as_str().unwrap()));
        }
    }
    ports.sort();
    assert_eq!(c["State"]["Running"], true, "{name} runs: {c:#}");
    (c["Id"].as_str().unwrap().to_string(), ports)
}

/// Probes until the port answers or [`SETTLE`] has passed, and returns the last answer.
fn wait_reached(from: &Machine, addr: IpAddr, port: u16) -> Probe {
    let deadline = Instant::now() + SETTLE;
    loop {
        let got = from
            .probe_tcp(addr, port, ANSWER)
            .unwrap_or_else(|e| panic!("probe {} -> [{addr}]:{port}: {e}", from.name()));
        if got == Probe::Reached || Instant::now() >= deadline {
            return got;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Probes `port` on each address from `from` and insists on `want`.
fn expect(from: &Machine, addrs: &[IpAddr], port: u16, want: Probe, why: &str) {
    for addr in addrs {
        let got = if want == Probe::Reached {
            wait_reached(from, *addr, port)
        } else {
            from.probe_tcp(*addr, port, SILENCE)
                .unwrap_or_else(|e| panic!("probe {} -> [{addr}]:{port}: {e}", from.name()))
        };
        assert_eq!(
            got,
            want,
            "{why}: {} -> [{addr}]:{port} was {got}, expected {want}",
            from.name()
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The adopted raise, shared by the tests that look at the raised node.

/// What raising the node adopted left: the refusal with the catalogue's registry port, what the
/// machine looked like after it, and the raise on the port given.
struct Raised {
    root: tempfile::TempDir,
    held: lab::Output,
    running_after_refusal: Vec<String>,
    store_after_refusal: bool,
    raised: lab::Output,
}

fn raised() -> &'static Raised {
    static RAISED: OnceLock<Raised> = OnceLock::new();
    RAISED.get_or_init(|| {
        let b = bed();
        let root = tempfile::tempdir().expect("a root for the raised node");
        let bundle = b.bundle.to_str().unwrap();
        let base = [
            "genesis",
            "--adopted",
            "--node",
            NODE,
            "--private-range-v6",
            "fd77::/64",
            "--bundle",
            bundle,
            "--json",
        ];
        let held = mesh(root.path(), &base);
        let running_after_refusal = running(&b.docker);
        let store_after_refusal = !no_store(root.path());
        let given = format!("registry={REGISTRY_GIVEN}");
        let mut args = base.to_vec();
        args.extend(["--ports", &given]);
        let raised = mesh(root.path(), &args);
        Raised {
            root,
            held,
            running_after_refusal,
            store_after_refusal,
            raised,
        }
    })
}

/// The raise's report; the raise must have succeeded.
fn raised_ok() -> (&'static Raised, Value) {
    let r = raised();
    assert_eq!(
        r.raised.status.code(),
        Some(0),
        "the adopted raise with --ports registry={REGISTRY_GIVEN} failed:\n{}",
        shown(&r.raised)
    );
    let report = json_of(&r.raised);
    let failed: Vec<&Value> = report["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["outcome"] == "failed")
        .collect();
    assert!(failed.is_empty(), "{report:#}");
    (r, report)
}

// ---------------------------------------------------------------------------------------------

#[test]
fn converged_genesis_on_a_machine_in_use_refuses_naming_every_container_and_listener_but_ssh() {
    let b = bed();
    let _turn = serial();
    let root = tempfile::tempdir().unwrap();
    let before = running(&b.docker);

    // The inventory sees ssh's listener and the loopback one: not counting them is the check's
    // decision, not a blind spot.
    let inv = json_of(&mesh(root.path(), &["inventory", "--json"]));
    let ports: Vec<u64> = inv["listeners"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["port"].as_u64().unwrap())
        .collect();
    assert!(
        ports.contains(&u64::from(SSH)) && ports.contains(&u64::from(LOOPBACK_ONLY)),
        "{inv:#}"
    );

    let out = mesh(
        root.path(),
        &[
            "genesis",
            "--node",
            NODE,
            "--bundle",
            b.bundle.to_str().unwrap(),
            "--json",
        ],
    );
    let lines = refused(&out);
    let text = lines.join("\n");

    // Every running container, by name and image.
    assert!(before.contains(&"old-registry".to_string()) && before.contains(&"web".to_string()));
    for name in &before {
        // Only the predecessor's and (once raised) the foundation's stand-ins run here, all
        // from the lab's image.
        assert!(
            name.starts_with("mesh-") || name == "old-registry" || name == "web",
            "an unexpected container {name} runs in the node"
        );
        let line = format!(
            "in use: container {name} ({}) is running",
            lab::BUSYBOX_IMAGE
        );
        assert!(lines.contains(&line), "{line:?} not in:\n{text}");
    }
    // The service on the node's public address: proto, address, port, process and pid.
    let service = format!(
        "in use: tcp {NODE_PUBLIC_V4}:{SERVICE} is listened on by busybox (pid {})",
        b.service_pid
    );
    assert!(lines.contains(&service), "{service:?} not in:\n{text}");
    // Docker's proxy for a published port is a listener too, named with its process.
    assert!(
        text.contains(&format!(
            "in use: tcp 0.0.0.0:{WEB} is listened on by docker-proxy (pid "
        )),
        "{text}"
    );
    // ssh's listener is the way in, and a loopback listener serves nobody else: neither counts.
    assert!(
        !text.contains(&format!(":{SSH} is listened on")),
        "ssh counted:\n{text}"
    );
    assert!(
        !text.contains(&format!(":{LOOPBACK_ONLY} ")) && !text.contains("127.0.0.1"),
        "a loopback listener counted:\n{text}"
    );
    // The reason, and the way out, are said.
    assert!(text.contains("--adopted"), "{text}");
    assert!(
        out.stderr
            .contains("genesis was refused; nothing was changed"),
        "{}",
        shown(&out)
    );

    // Nothing changed: no store, no container started or stopped, the service still serves.
    assert!(no_store(root.path()), "a refused genesis made a store");
    assert_eq!(running(&b.docker), before);
    expect(
        &b.net.outside,
        &[NODE_PUBLIC_V4.into()],
        SERVICE,
        Probe::Reached,
        "the predecessor's service still serves",
    );
}

#[test]
fn adopted_genesis_refuses_a_held_registry_port_then_raises_on_the_port_given_which_stays() {
    let b = bed();
    let _turn = serial();
    let r = raised();

    // 1. With the catalogue's registry port, held by the predecessor's registry: refused, naming
    //    the container, and nothing raised. An adopted raise does not count use.
    let lines = refused(&r.held);
    let text = lines.join("\n");
    let held = format!(
        "port: the registry port tcp/{REGISTRY} is held by container old-registry ({}); give another with --ports registry=PORT",
        lab::BUSYBOX_IMAGE
    );
    assert!(lines.contains(&held), "{held:?} not in:\n{text}");
    assert_eq!(lines.len(), 1, "only the held port is a reason:\n{text}");
    assert!(!r.store_after_refusal, "a refused genesis made a store");
    assert!(
        r.running_after_refusal
            .iter()
            .all(|n| !n.starts_with("mesh-")),
        "a refused genesis started {:?}",
        r.running_after_refusal
    );

    // 2. With another port given: the foundation comes up, its registry on that port.
    let (_, report) = raised_ok();
    for id in ["store/container", "broker/container", "registry/container"] {
        assert_eq!(outcome(&report, id), "created", "{report:#}");
    }
    for id in ["registry/port", "broker/bus", "store/port"] {
        assert_eq!(outcome(&report, id), "created", "{report:#}");
    }
    let state = store_state(r.root.path());
    assert_eq!(state["mode"], "adopted");
    assert_eq!(state["source"], "bundle");
    assert_eq!(state["settings"]["ports"]["registry"], REGISTRY_GIVEN);
    let (registry_id, ports) = container(&b.docker, "mesh-registry");
    assert_eq!(ports, [format!("{REGISTRY_GIVEN}->{REGISTRY}/tcp")]);
    // Reached from another machine through Docker's DNAT and the opening converged into the
    // found firewall's forward chain, which otherwise drops what it does not serve.
    expect(
        &b.net.outside,
        &[NODE_PUBLIC_V4.into()],
        REGISTRY_GIVEN,
        Probe::Reached,
        "the foundation's registry on the port given",
    );
    // Nothing that serves changed: the predecessor's registry keeps its port.
    let (_, old) = container(&b.docker, "old-registry");
    assert_eq!(old, [format!("{REGISTRY}->{REGISTRY}/tcp")]);
    expect(
        &b.net.outside,
        &[NODE_PUBLIC_V4.into()],
        REGISTRY,
        Probe::Reached,
        "the predecessor's registry",
    );

    // Genesis runs once: raising the node again is refused, and changes nothing.
    let given = format!("registry={REGISTRY_GIVEN}");
    let twice = mesh(
        r.root.path(),
        &[
            "genesis",
            "--adopted",
            "--node",
            NODE,
            "--ports",
            &given,
            "--bundle",
            b.bundle.to_str().unwrap(),
            "--json",
        ],
    );
    let lines = refused(&twice);
    assert!(lines[0].contains("it runs once"), "{lines:?}");
    assert_eq!(
        container(&b.docker, "mesh-registry"),
        (registry_id.clone(), ports.clone())
    );

    // 3. The foundation applied again as modules (the stored declaration, its modules taken):
    //    everything stays where genesis put it.
    let mut decl = state["declaration"].clone();
    decl["taken"] = json!(["store", "broker", "registry"]);
    let file = r.root.path().join("foundation-as-modules.json");
    std::fs::write(&file, serde_json::to_vec_pretty(&decl).unwrap()).unwrap();
    let again = mesh(
        r.root.path(),
        &[
            "apply",
            file.to_str().unwrap(),
            "--source",
            "bundle",
            "--json",
        ],
    );
    assert_eq!(again.status.code(), Some(0), "{}", shown(&again));
    let report = json_of(&again);
    assert_eq!(
        outcome(&report, "registry/container"),
        "unchanged",
        "{report:#}"
    );
    assert_eq!(outcome(&report, "registry/port"), "unchanged", "{report:#}");
    assert_eq!(
        container(&b.docker, "mesh-registry"),
        (registry_id.clone(), ports.clone())
    );

    let rec = mesh(r.root.path(), &["reconcile", "--json"]);
    assert_eq!(rec.status.code(), Some(0), "{}", shown(&rec));
    assert_eq!(
        outcome(&json_of(&rec), "registry/container"),
        "unchanged",
        "{}",
        shown(&rec)
    );
    assert_eq!(
        container(&b.docker, "mesh-registry"),
        (registry_id.clone(), ports.clone())
    );

    // 4. A declaration with the catalogue's ports would move the registry back: refused, and the
    //    registry stays on the port given.
    let mut back = decl.clone();
    back["settings"]["ports"]["registry"] = json!(REGISTRY);
    for res in back["resources"].as_array_mut().unwrap() {
        if res["id"] == "registry/container" {
            res["ports"][0]["host_port"] = json!(REGISTRY);
        }
        if res["id"] == "registry/port" {
            res["port"] = json!(REGISTRY);
        }
    }
    let file = r.root.path().join("catalogue-ports.json");
    std::fs::write(&file, serde_json::to_vec_pretty(&back).unwrap()).unwrap();
    let moved = mesh(
        r.root.path(),
        &[
            "apply",
            file.to_str().unwrap(),
            "--source",
            "bundle",
            "--json",
        ],
    );
    assert_eq!(moved.status.code(), Some(3), "{}", shown(&moved));
    assert!(
        moved.stderr.contains("fixed at genesis"),
        "{}",
        shown(&moved)
    );
    assert_eq!(container(&b.docker, "mesh-registry"), (registry_id, ports));
    assert_eq!(
        store_state(r.root.path())["settings"]["ports"]["registry"],
        REGISTRY_GIVEN
    );
    expect(
        &b.net.outside,
        &[NODE_PUBLIC_V4.into()],
        REGISTRY_GIVEN,
        Probe::Reached,
        "the registry after a refused move",
    );
}

#[test]
fn after_adopted_genesis_the_store_is_reached_only_over_the_private_network_and_the_bus_from_anywhere(
) {
    let b = bed();
    let _turn = serial();
    raised_ok();
    let (outside, peer) = (&b.net.outside, &b.net.peer);
    let public: [IpAddr; 2] = [NODE_PUBLIC_V4.into(), NODE_PUBLIC_V6.into()];
    let private: [IpAddr; 2] = [NODE_PRIVATE_V4.into(), NODE_PRIVATE_V6.into()];

    // The store's stand-in serves: reached from the private network's namespace, over both
    // families (IPv4 through Docker's DNAT and the store's opening, IPv6 through docker-proxy).
    expect(
        peer,
        &private,
        STORE,
        Probe::Reached,
        "the store over the private network",
    );
    expect(
        peer,
        &private,
        BROKER_MANAGEMENT,
        Probe::Reached,
        "the broker's management over the private network",
    );
    // From outside it is dropped unanswered by the guard, on both families; so is the peer's own
    // public side, since the guard knows the private network by its interface, not by the machine.
    expect(
        outside,
        &public,
        STORE,
        Probe::TimedOut,
        "the store from outside",
    );
    expect(
        outside,
        &public,
        BROKER_MANAGEMENT,
        Probe::TimedOut,
        "the broker's management from outside",
    );
    expect(
        peer,
        &[NODE_PUBLIC_V4.into()],
        STORE,
        Probe::TimedOut,
        "the store over the public network, even from the peer",
    );
    // The bus is reached from a machine that has not enrolled (over IPv4 through the bus's
    // opening, which the found forward chain would otherwise drop).
    expect(
        outside,
        &public,
        BUS,
        Probe::Reached,
        "the bus from outside",
    );

    // The found firewall lets IPv6 in unfiltered, so there the guard alone refused the store.
    // Over IPv4 its forward chain refuses it as well; loosened to admit everything forwarded, as
    // a predecessor that filters only incoming traffic has it, the guard still refuses it alone.
    let node = &b.net.node;
    run_ok(
        node,
        &["iptables-nft", "-I", "DOCKER-USER", "1", "-j", "RETURN"],
    );
    expect(
        outside,
        &[NODE_PUBLIC_V4.into()],
        STORE,
        Probe::TimedOut,
        "the store from outside, the found forward chain admitting everything",
    );
    expect(
        outside,
        &[NODE_PUBLIC_V4.into()],
        BUS,
        Probe::Reached,
        "the bus, the found forward chain admitting everything",
    );
    run_ok(node, &["iptables-nft", "-D", "DOCKER-USER", "-j", "RETURN"]);

    // The guard is the mesh's own table, loaded by the adopted raise.
    let guard = run_ok(node, &["nft", "list", "table", "inet", "mesh_host"]);
    assert!(
        guard.contains(&format!("dport {STORE} drop")) && guard.contains("mesh0"),
        "{guard}"
    );
}

mod bare;
mod converged;
