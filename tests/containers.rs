//! Containers through the built binary against real engines inside a lab namespace: a Docker
//! engine and a Podman service, each started once for the whole test binary and reached by the
//! host through `DOCKER_HOST` / `CONTAINER_HOST`, as an operator's own tools reach them. Every
//! scenario runs against both; containers use the local busybox image (no registry is reachable).

use crate::util::{Node, Run};
use lab::{Lab, Machine, Probe};
use serde_json::{json, Value};
use std::net::{IpAddr, Ipv4Addr};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const IMAGE: &str = lab::BUSYBOX_IMAGE;

/// A container engine inside a lab machine, and how the host is pointed at it.
pub struct Engine {
    /// `docker` or `podman`: the runtime and its CLI.
    pub program: &'static str,
    /// `DOCKER_HOST` or `CONTAINER_HOST`.
    var: &'static str,
    endpoint: String,
    /// Where the engine runs and publishes its ports.
    pub machine: Machine,
}

impl Engine {
    /// The environment that points the host (and the engine's CLI) at this engine, and only it.
    pub fn env(&self) -> Vec<(&str, &str)> {
        let other = if self.var == "DOCKER_HOST" {
            "CONTAINER_HOST"
        } else {
            "DOCKER_HOST"
        };
        vec![(self.var, self.endpoint.as_str()), (other, "")]
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(self.program);
        for (k, v) in self.env() {
            cmd.env(k, v);
        }
        cmd.env_remove("DOCKER_CONTEXT").args(args);
        cmd
    }

    /// Runs the engine's CLI and returns its stdout; a failure panics with its stderr.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = self
            .command(args)
            .output()
            .expect("running the engine's CLI");
        assert!(
            out.status.success(),
            "{} {args:?}: {}\n{}",
            self.program,
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// The container's inspect object, or `None` when there is no such container.
    pub fn inspect(&self, name: &str) -> Option<Value> {
        let out = self
            .command(&["container", "inspect", name])
            .output()
            .expect("running the engine's CLI");
        if !out.status.success() {
            let e = String::from_utf8_lossy(&out.stderr).to_lowercase();
            assert!(e.contains("no such"), "inspect {name}: {e}");
            return None;
        }
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        Some(v[0].clone())
    }

    /// Runs a container the way a predecessor would: no labels, a port published, running.
    pub fn run_predecessor(&self, name: &str, port: u16) -> String {
        let publish = format!("{port}:80");
        let mut args = vec!["run", "-d", "--name", name, "-p", &publish, IMAGE];
        args.extend(SERVE);
        self.cli(&args)
    }

    /// Waits until a TCP connection to the port from inside the engine's machine is answered.
    pub fn reached(&self, port: u16) -> bool {
        let deadline = Instant::now() + Duration::from_secs(20);
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        loop {
            let p = self
                .machine
                .probe_tcp(lo, port, Duration::from_secs(2))
                .expect("probing from the engine's machine");
            if p == Probe::Reached {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// The container's command: a web server that ends on SIGTERM (a bare busybox as PID 1 ignores
/// it, and every stop would wait out the runtime's ten seconds).
const SERVE: [&str; 3] = [
    "/bin/sh",
    "-c",
    "trap 'exit 0' TERM; httpd -f -p 80 -h /www & wait",
];

fn the_lab() -> &'static Lab {
    static LAB: OnceLock<&'static Lab> = OnceLock::new();
    LAB.get_or_init(|| {
        Lab::new()
            .unwrap_or_else(|e| panic!("the lab needs root, iproute2 and nsenter: {e}"))
            .until_exit()
    })
}

/// The Docker engine, started once inside a lab machine.
pub fn docker() -> &'static Engine {
    static ENGINE: OnceLock<Result<Engine, String>> = OnceLock::new();
    ENGINE
        .get_or_init(|| {
            let lab = the_lab();
            let machine = lab.machine("docker").map_err(|e| e.to_string())?;
            let engine = machine
                .start_docker(&lab.dir().join("docker"))
                .map_err(|e| format!("starting dockerd in a lab namespace: {e}"))?;
            let endpoint = engine.docker_host().to_string();
            // The lab stops the engine (and removes its containers) when the process exits.
            std::mem::forget(engine);
            Ok(Engine {
                program: "docker",
                var: "DOCKER_HOST",
                endpoint,
                machine,
            })
        })
        .as_ref()
        .unwrap_or_else(|e| panic!("no Docker engine for the container tests: {e}"))
}

/// A Podman service (`podman system service`), started once inside a lab machine with its own
/// storage and configuration: runc and cgroupfs (no systemd here, and crun fails on this kernel's
/// rlimits), lowered default ulimits (no CAP_SYS_RESOURCE).
pub fn podman() -> &'static Engine {
    static ENGINE: OnceLock<Result<Engine, String>> = OnceLock::new();
    ENGINE
        .get_or_init(start_podman)
        .as_ref()
        .unwrap_or_else(|e| panic!("no Podman service for the container tests: {e}"))
}

fn start_podman() -> Result<Engine, String> {
    let lab = the_lab();
    if !mesh_host::system::on_path("podman") || !mesh_host::system::on_path("runc") {
        return Err("podman and runc must be installed (apt-get install podman runc)".into());
    }
    let machine = lab.machine("podman").map_err(|e| e.to_string())?;
    let dir = lab.dir().join("podman");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
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
    .map_err(|e| e.to_string())?;
    let storage = dir.join("storage.conf");
    std::fs::write(
        &storage,
        format!(
            "[storage]\ndriver = \"overlay\"\ngraphroot = \"{d}/root\"\nrunroot = \"{d}/run\"\n"
        ),
    )
    .map_err(|e| e.to_string())?;
    let endpoint = format!("unix://{d}/sock");
    let service = machine
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
        .map_err(|e| format!("starting podman system service: {e}"))?;
    let log = service.log_path().to_path_buf();
    // The lab kills the service at exit; its containers are removed first (see below).
    std::mem::forget(service);
    let engine = Engine {
        program: "podman",
        var: "CONTAINER_HOST",
        endpoint,
        machine,
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while !engine
        .command(&["version"])
        .output()
        .is_ok_and(|o| o.status.success())
    {
        if Instant::now() > deadline {
            return Err(format!(
                "podman system service did not answer within 60 s: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            ));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    import_busybox(&engine, &dir)?;
    PODMAN_AT_EXIT.get_or_init(|| engine.endpoint.clone());
    // SAFETY: registering a plain extern "C" function with no captured state. It runs before the
    // lab's own teardown (registered earlier), while the service still answers.
    unsafe { libc::atexit(remove_podman_containers) };
    Ok(engine)
}

static PODMAN_AT_EXIT: OnceLock<String> = OnceLock::new();

/// Removes every container of the lab's Podman service, so no container process outlives the
/// test binary once the lab deletes its namespaces and storage.
extern "C" fn remove_podman_containers() {
    if let Some(endpoint) = PODMAN_AT_EXIT.get() {
        let _ = Command::new("podman")
            .env("CONTAINER_HOST", endpoint)
            .args(["rm", "--all", "--force", "--time", "0"])
            .output();
    }
}

/// The busybox image in Podman's storage: busybox-static with links, imported from a tar stream.
fn import_busybox(engine: &Engine, dir: &std::path::Path) -> Result<(), String> {
    let root = dir.join("image");
    for sub in ["bin", "www", "tmp"] {
        std::fs::create_dir_all(root.join(sub)).map_err(|e| e.to_string())?;
    }
    std::fs::copy("/bin/busybox", root.join("bin/busybox"))
        .map_err(|e| format!("busybox-static is needed: {e}"))?;
    for applet in ["sh", "httpd", "sleep", "true"] {
        std::os::unix::fs::symlink("busybox", root.join("bin").join(applet))
            .map_err(|e| e.to_string())?;
    }
    std::fs::write(root.join("www/index.html"), "lab container\n").map_err(|e| e.to_string())?;
    let tar = dir.join("image.tar");
    let ok = Command::new("tar")
        .arg("-C")
        .arg(&root)
        .args(["-cf"])
        .arg(&tar)
        .arg(".")
        .status()
        .map_err(|e| e.to_string())?;
    if !ok.success() {
        return Err(format!("tar of the image failed: {ok}"));
    }
    let out = engine
        .command(&[
            "import",
            "--change",
            r#"CMD ["/bin/sh"]"#,
            tar.to_str().unwrap(),
            IMAGE,
        ])
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "podman import: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}

fn decl(mode: &str, taken: &[&str], resources: Value) -> Value {
    json!({"version": 1, "node": "n1", "mode": mode, "taken": taken, "resources": resources})
}

fn container(id: &str, name: &str, port: u16, env: &str) -> Value {
    json!({"id": id, "module": "web", "type": "container", "name": name, "image": IMAGE,
           "command": SERVE, "env": {"MODE": env},
           "ports": [{"host_port": port, "container_port": 80, "proto": "tcp"}],
           "restart": "unless-stopped"})
}

fn apply(node: &Node, e: &Engine, d: &Value) -> Run {
    let r = node.apply_env(d, &[], &e.env());
    assert_eq!(r.code, Some(0), "apply failed:\n{}\n{}", r.stdout, r.stderr);
    r
}

fn id_of(e: &Engine, name: &str) -> String {
    e.inspect(name)
        .unwrap_or_else(|| panic!("no container {name}"))["Id"]
        .as_str()
        .unwrap()
        .to_string()
}

fn running(e: &Engine, name: &str) -> bool {
    e.inspect(name).unwrap()["State"]["Running"] == true
}

/// Created, unchanged, replaced when it differs, removed when no longer declared.
fn lifecycle(e: &Engine, port: u16) {
    let node = Node::new();
    let name = format!("life-{}", e.program);
    let r = apply(
        &node,
        e,
        &decl(
            "converged",
            &[],
            json!([container("web/life", &name, port, "one")]),
        ),
    );
    assert_eq!(r.outcome("web/life"), "created");
    let c = e.inspect(&name).expect("created");
    assert_eq!(c["State"]["Running"], true);
    assert_eq!(c["Config"]["Labels"]["mesh-host.id"], "web/life");
    assert!(e.reached(port), "the published port {port} answers");
    let first = id_of(e, &name);

    let r = apply(
        &node,
        e,
        &decl(
            "converged",
            &[],
            json!([container("web/life", &name, port, "one")]),
        ),
    );
    assert_eq!(r.outcome("web/life"), "unchanged");
    assert_eq!(
        id_of(e, &name),
        first,
        "an unchanged container is not touched"
    );

    let r = apply(
        &node,
        e,
        &decl(
            "converged",
            &[],
            json!([container("web/life", &name, port, "two")]),
        ),
    );
    assert_eq!(r.outcome("web/life"), "changed");
    let second = e.inspect(&name).expect("replaced");
    assert_ne!(second["Id"], first.as_str(), "replaced");
    let env: Vec<&str> = second["Config"]["Env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(env.contains(&"MODE=two"), "{env:?}");
    assert!(e.reached(port));

    let r = apply(&node, e, &decl("converged", &[], json!([])));
    assert_eq!(r.outcome("web/life"), "removed");
    assert_eq!(e.inspect(&name), None);
    assert_eq!(node.state()["owned"], json!([]));
}

/// Found on an adopted node: held untouched; stopped while held: reported, never restarted;
/// undeclared: forgotten, never removed.
fn found_is_held(e: &Engine, port: u16) {
    let node = Node::new();
    let name = format!("held-{}", e.program);
    let found = e.run_predecessor(&name, port);
    assert!(e.reached(port));
    let d = decl(
        "adopted",
        &[],
        json!([container("web/held", &name, port + 1, "mesh")]),
    );
    let r = apply(&node, e, &d);
    assert_eq!(r.outcome("web/held"), "held");
    assert_eq!(id_of(e, &name), found, "held untouched");
    assert!(running(e, &name));
    assert!(e.reached(port), "what the predecessor serves still answers");
    assert_eq!(node.state()["held"][0]["id"], "web/held");
    assert_eq!(apply(&node, e, &d).outcome("web/held"), "held");

    e.cli(&["stop", &name]);
    let r = apply(&node, e, &d);
    assert_eq!(r.outcome("web/held"), "changed-by-something-else");
    assert!(
        r.stdout.contains("stopped by something else"),
        "{}",
        r.stdout
    );
    assert!(!running(e, &name), "a held container is never restarted");
    assert_eq!(id_of(e, &name), found);
    let briefing = node.run(&["briefing"]).stdout;
    assert!(
        briefing.contains("changed by something else while held"),
        "{briefing}"
    );

    // No longer declared: a held container is released, never removed.
    let r = apply(&node, e, &decl("adopted", &[], json!([])));
    assert_eq!(r.outcome("web/held"), "forgotten");
    assert_eq!(id_of(e, &name), found, "a held container is never removed");
    e.cli(&["rm", "-f", &name]);
}

/// Taking the module replaces the found container with the declared one, which is then the
/// host's and removed when no longer declared.
fn taken_is_replaced(e: &Engine, port: u16) {
    let node = Node::new();
    let name = format!("taken-{}", e.program);
    let found = e.run_predecessor(&name, port);
    let d = |taken: &[&str]| {
        decl(
            "adopted",
            taken,
            json!([container("web/taken", &name, port, "mesh")]),
        )
    };
    assert_eq!(apply(&node, e, &d(&[])).outcome("web/taken"), "held");
    assert_eq!(id_of(e, &name), found);

    let r = apply(&node, e, &d(&["web"]));
    assert_eq!(r.outcome("web/taken"), "changed");
    let c = e.inspect(&name).expect("the declared container");
    assert_ne!(c["Id"], found.as_str());
    assert_eq!(c["Config"]["Labels"]["mesh-host.id"], "web/taken");
    assert_eq!(c["State"]["Running"], true);
    assert!(e.reached(port), "the declared container serves on the port");
    assert_eq!(node.state()["held"], json!([]));
    assert_eq!(
        node.state()["owned"][0]["found"],
        Value::Null,
        "the host's own creation"
    );
    assert_eq!(
        apply(&node, e, &d(&["web"])).outcome("web/taken"),
        "unchanged"
    );

    let r = apply(&node, e, &decl("adopted", &["web"], json!([])));
    assert_eq!(r.outcome("web/taken"), "removed");
    assert_eq!(e.inspect(&name), None);
}

/// Killed right after creating the container and before recording it, the host recognises its
/// own container on the next start: owned and unchanged, never "found" and held.
fn crash_after_create(e: &Engine, port: u16) {
    let node = Node::new();
    let name = format!("crash-{}", e.program);
    let d = decl(
        "adopted",
        &[],
        json!([container("web/crash", &name, port, "one")]),
    );
    let mut env = e.env();
    env.push(("MESH_HOST_FAILPOINT", "after-change:web/crash"));
    let r = node.apply_env(&d, &[], &env);
    assert_eq!(r.signal, Some(9), "killed at the failpoint: {}", r.stderr);
    let made = id_of(e, &name);
    assert!(
        node.state()["pending"].is_object(),
        "the intent is in the store"
    );

    let r = apply(&node, e, &d);
    assert_eq!(r.outcome("web/crash"), "unchanged");
    assert_eq!(id_of(e, &name), made);
    let state = node.state();
    assert_eq!(state["held"], json!([]));
    assert_eq!(state["owned"][0]["id"], "web/crash");
    assert_eq!(state["pending"], Value::Null);
    apply(&node, e, &decl("adopted", &[], json!([])));
    assert_eq!(e.inspect(&name), None);
}

#[test]
fn docker_container_created_unchanged_replaced_removed() {
    lifecycle(docker(), 18101);
}

#[test]
fn docker_found_container_is_held_untouched_reported_when_stopped_and_never_removed() {
    found_is_held(docker(), 18111);
}

#[test]
fn docker_taking_the_module_replaces_the_found_container() {
    taken_is_replaced(docker(), 18121);
}

#[test]
fn docker_a_crash_after_create_is_recognised_as_the_hosts_own() {
    crash_after_create(docker(), 18131);
}

#[test]
fn podman_container_created_unchanged_replaced_removed() {
    lifecycle(podman(), 18201);
}

#[test]
fn podman_found_container_is_held_untouched_reported_when_stopped_and_never_removed() {
    found_is_held(podman(), 18211);
}

#[test]
fn podman_taking_the_module_replaces_the_found_container() {
    taken_is_replaced(podman(), 18221);
}

#[test]
fn podman_a_crash_after_create_is_recognised_as_the_hosts_own() {
    crash_after_create(podman(), 18231);
}

#[test]
fn profile_names_the_runtime_the_host_is_pointed_at_and_its_version() {
    for e in [docker(), podman()] {
        let node = Node::new();
        let r = node.run_env(&["profile", "--json"], &e.env());
        assert_eq!(r.code, Some(0), "{}", r.stderr);
        let p = r.json();
        let rt = &p["container_runtime"];
        assert_eq!(rt["name"], e.program, "{p:#}");
        assert_eq!(rt["endpoint"], e.endpoint.as_str());
        let server = e.cli(&["version", "--format", "{{.Server.Version}}"]);
        assert_eq!(rt["version"], server.as_str(), "{p:#}");
    }
}

#[test]
fn both_engines_name_their_bridges_over_their_sockets_as_their_clis_do() {
    use mesh_host::system::{engine_api, RuntimeKind};
    for (e, kind) in [
        (docker(), RuntimeKind::Docker),
        (podman(), RuntimeKind::Podman),
    ] {
        let net = "mh-api-net";
        let _ = e.command(&["network", "rm", net]).output();
        e.cli(&["network", "create", net]);
        let socket = std::path::PathBuf::from(e.endpoint.trim_start_matches("unix://"));
        let listed =
            engine_api::bridges(kind, &socket).unwrap_or_else(|err| panic!("{}: {err}", e.program));
        // What each CLI says the network's bridge is called.
        let format = match kind {
            RuntimeKind::Docker => "{{.Id}}",
            RuntimeKind::Podman => "{{.NetworkInterface}}",
        };
        let said = e.cli(&["network", "inspect", "--format", format, net]);
        let bridge = match kind {
            RuntimeKind::Docker => format!("br-{}", &said[..12]),
            RuntimeKind::Podman => said,
        };
        let default = match kind {
            RuntimeKind::Docker => "docker0",
            RuntimeKind::Podman => "podman0",
        };
        assert!(
            listed.contains(&bridge) && listed.contains(&default.to_string()),
            "{}: the API listed {listed:?}, the CLI names {bridge} and {default}",
            e.program
        );
        e.cli(&["network", "rm", net]);
        let listed = engine_api::bridges(kind, &socket).unwrap();
        assert!(!listed.contains(&bridge), "{}: {listed:?}", e.program);
    }
}
