//! A container runtime driven through its own CLI: `docker` or `podman`, whose commands and
//! `inspect` JSON are compatible enough to share one implementation.
//!
//! The CLI rather than the engine's HTTP API: it needs no client library, it finds its engine the
//! way the operator's own commands do (`DOCKER_HOST`, `CONTAINER_HOST`, contexts), and what the
//! host runs can be typed by hand to check it. Every value reaches it as its own argv element, and
//! every answer is read as JSON.

use super::engine_json;
use super::{
    argv, run, run_ok, Container, ContainerRuntime, Error, NewContainer, RuntimeKind, Unparsed,
};
use crate::declaration::{Proto, PublishedPort};
use run::{describe, Runner};

/// What differs between the runtimes the host speaks through this CLI.
#[derive(Debug)]
pub struct Flavour {
    pub kind: RuntimeKind,
    /// The program run (`docker`, `podman`).
    pub program: &'static str,
}

/// A runtime's CLI, run through the host's [`Runner`].
pub struct CliRuntime<'r> {
    runner: &'r dyn Runner,
    flavour: &'static Flavour,
}

impl<'r> CliRuntime<'r> {
    pub fn new(runner: &'r dyn Runner, flavour: &'static Flavour) -> Self {
        CliRuntime { runner, flavour }
    }

    fn argv(&self, args: &[&str]) -> Vec<String> {
        let mut v = vec![self.flavour.program.to_string()];
        v.extend(args.iter().map(|s| s.to_string()));
        v
    }
}

impl ContainerRuntime for CliRuntime<'_> {
    fn kind(&self) -> RuntimeKind {
        self.flavour.kind
    }

    fn version(&self) -> Result<String, Error> {
        let argv = self.argv(&["version", "--format", "{{json .}}"]);
        let out = run_ok(self.runner, &argv, &[])?;
        parse_version(&out.stdout).map_err(|detail| Error::Unreadable {
            program: self.flavour.program.into(),
            detail: detail.0,
        })
    }

    fn bridges(&self) -> Result<Vec<String>, Error> {
        let out = run_ok(
            self.runner,
            &self.argv(&["network", "ls", "--format", "{{.Name}}"]),
            &[],
        )?;
        let names = listed_names(&out.stdout);
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let mut args = vec!["network", "inspect"];
        args.extend(names.iter().map(String::as_str));
        let out = run_ok(self.runner, &self.argv(&args), &[])?;
        parse_bridges(&out.stdout).map_err(|detail| Error::Unreadable {
            program: self.flavour.program.into(),
            detail: format!("inspecting networks: {detail}"),
        })
    }

    fn inspect(&self, name: &str) -> Result<Option<Container>, Error> {
        let argv = self.argv(&["container", "inspect", name]);
        let out = run(self.runner, &argv, &[])?;
        if !out.success() {
            // Both runtimes say "no such container" (Docker capitalised, Podman not) and exit
            // non-zero; anything else — an engine that does not answer — is a failure, never
            // "absent".
            let stderr = String::from_utf8_lossy(&out.stderr).to_lowercase();
            if stderr.contains("no such container") || stderr.contains("no such object") {
                return Ok(None);
            }
            return Err(Error::Failed(describe(&argv, &out)));
        }
        let c = parse_inspect(&out.stdout).map_err(|detail| Error::Unreadable {
            program: self.flavour.program.into(),
            detail: format!("inspecting container {name}: {detail}"),
        })?;
        // Both runtimes also answer to the start of a container's id: `inspect db` finds a
        // container whose id begins with "db" when none is named so. That is not the container
        // at this name, and must never be held, replaced or removed as if it were.
        Ok((c.name == name).then_some(c))
    }

    fn run(&self, new: &NewContainer) -> Result<(), Error> {
        run_ok(self.runner, &create_argv(self.flavour.program, new), &[])?;
        // `create` attaches one network; the others are connected before the first start, so the
        // container never runs without them.
        for net in new.networks.iter().skip(1) {
            let argv = self.argv(&["network", "connect", net, &new.name]);
            run_ok(self.runner, &argv, &[])?;
        }
        self.start(&new.name)
    }

    fn start(&self, name: &str) -> Result<(), Error> {
        run_ok(self.runner, &self.argv(&["start", name]), &[]).map(|_| ())
    }

    fn remove(&self, name: &str) -> Result<(), Error> {
        // Stopped first, so what runs in it gets its stop signal and the container's stop timeout
        // rather than the SIGKILL of `rm -f`. A stop that fails (the container is absent, or
        // already stopped in a way the runtime refuses) is left to `rm -f`, whose answer counts:
        // it exits 0 for an absent container in both runtimes.
        let _ = run(self.runner, &self.argv(&["stop", name]), &[]);
        run_ok(self.runner, &self.argv(&["rm", "-f", name]), &[]).map(|_| ())
    }
}

/// The argv that creates a container (not started): `PROGRAM create --name NAME … IMAGE CMD…`.
pub fn create_argv(program: &str, new: &NewContainer) -> Vec<String> {
    let mut v = argv(&[program, "create", "--name", &new.name]);
    for (k, val) in &new.labels {
        v.push("--label".into());
        v.push(format!("{k}={val}"));
    }
    if let Some(r) = &new.restart {
        v.push("--restart".into());
        v.push(r.clone());
    }
    if let Some(net) = new.networks.first() {
        v.push("--network".into());
        v.push(net.clone());
    }
    for (k, val) in &new.env {
        v.push("--env".into());
        v.push(format!("{k}={val}"));
    }
    for p in &new.ports {
        v.push("--publish".into());
        v.push(publish_arg(p));
    }
    // The image is the first positional argument; everything after it is the container's
    // command, never read as options by the CLI. Validation refused images starting with '-'.
    v.push(new.image.clone());
    v.extend(new.command.iter().cloned());
    v
}

/// `[ADDR:]HOST:CONTAINER/PROTO`, with an IPv6 address in brackets.
fn publish_arg(p: &PublishedPort) -> String {
    let tail = format!("{}:{}/{}", p.host_port, p.container_port, p.proto.as_str());
    match p.host_address.as_deref() {
        None => tail,
        Some(a) if a.contains(':') => format!("[{a}]:{tail}"),
        Some(a) => format!("{a}:{tail}"),
    }
}

/// An image reference in the form both runtimes can be compared in: Podman records
/// `localhost/x:1` and `docker.io/library/x:latest` where Docker keeps what was typed.
pub fn normalize_image(image: &str) -> String {
    let mut s = image;
    for prefix in ["docker.io/library/", "docker.io/", "localhost/"] {
        if let Some(rest) = s.strip_prefix(prefix) {
            s = rest;
            break;
        }
    }
    let last = s.rsplit('/').next().unwrap_or(s);
    if s.contains('@') || last.contains(':') {
        s.to_string()
    } else {
        format!("{s}:latest")
    }
}

/// The names a CLI's listing prints one a line (`ps --format {{.Names}}`, `network ls --format
/// {{.Name}}`), blank lines left out.
pub fn listed_names(stdout: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(stdout)
        .lines()
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .collect()
}

/// The engine's version from `version --format '{{json .}}'`: the server's, else the client's
/// (Podman without a service has only a client).
fn parse_version(stdout: &[u8]) -> Result<String, Unparsed> {
    let v: engine_json::Version =
        serde_json::from_slice(stdout).map_err(|e| Unparsed(format!("version JSON: {e}")))?;
    let engine = || {
        v.server
            .components
            .iter()
            .find(|c| c.name == "Engine")?
            .version
            .clone()
    };
    v.server
        .version
        .clone()
        .or_else(engine)
        .or(v.client.version)
        .ok_or_else(|| Unparsed("no Server.Version or Client.Version".into()))
}

/// One container from `container inspect NAME` (a JSON array of one object).
pub fn parse_inspect(stdout: &[u8]) -> Result<Container, Unparsed> {
    let mut all: Vec<engine_json::Inspected> = serde_json::from_slice(stdout).map_err(|e| {
        if e.is_data() && !stdout.trim_ascii_start().starts_with(b"[") {
            Unparsed("not a JSON array".into())
        } else {
            Unparsed(format!("not JSON: {e}"))
        }
    })?;
    if all.len() != 1 {
        return Err(Unparsed(format!("{} containers, expected one", all.len())));
    }
    let c = all.remove(0);
    if c.id.is_empty() {
        return Err(Unparsed("no Id".into()));
    }
    let env = c
        .config
        .env
        .into_iter()
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => (kv, String::new()),
        })
        .collect();
    let mut ports = Vec::new();
    for (spec, list) in &c.host_config.port_bindings {
        let (cport, proto) = spec.split_once('/').unwrap_or((spec.as_str(), "tcp"));
        let proto = match proto {
            "tcp" => Proto::Tcp,
            "udp" => Proto::Udp,
            other => return Err(Unparsed(format!("port {spec}: protocol {other:?}"))),
        };
        let container_port = cport
            .parse()
            .map_err(|_| Unparsed(format!("port {spec}: not a port number")))?;
        for b in list.iter().flatten() {
            let host_port = b
                .host_port
                .parse()
                .map_err(|_| Unparsed(format!("port {spec}: host port {:?}", b.host_port)))?;
            ports.push(PublishedPort {
                host_address: (!b.host_ip.is_empty()).then(|| b.host_ip.clone()),
                host_port,
                container_port,
                proto,
            });
        }
    }
    sort_ports(&mut ports);
    // A BTreeMap's keys: sorted already.
    let networks: Vec<String> = c.network_settings.networks.into_keys().collect();
    // Docker keeps the reference as typed in Config.Image; Podman keeps a qualified one there and
    // in ImageName.
    let image = if c.config.image.is_empty() {
        c.image_name
    } else {
        c.config.image
    };
    Ok(Container {
        id: c.id,
        name: c.name.trim_start_matches('/').to_string(),
        image,
        image_id: c.image,
        command: c.config.cmd,
        env,
        ports,
        restart: c.host_config.restart_policy.name,
        networks,
        labels: c.config.labels,
        running: c.state.running,
        status: c.state.status,
        exit_code: c.state.exit_code,
    })
}

/// Ports in one order, so two lists compare equal when they publish the same.
pub fn sort_ports(ports: &mut [PublishedPort]) {
    ports.sort_by(|a, b| {
        (a.proto, a.container_port, a.host_port, &a.host_address).cmp(&(
            b.proto,
            b.container_port,
            b.host_port,
            &b.host_address,
        ))
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use run::{Output, RecordingRunner};

    /// `docker container inspect web` from Docker 20.10, trimmed to what the host reads.
    const DOCKER_INSPECT: &str = r#"[{
        "Id": "1f6750fae6792ec69a7015df32b9da092a603da2b325411dac0071465d012d38",
        "Name": "/web",
        "Image": "sha256:82020d1a6ba2432944650a98296061d84dd1b9969cd1004bf3f1d5c4c808a45b",
        "State": {"Status": "running", "Running": true, "ExitCode": 0},
        "Config": {"Env": ["FOO=bar", "X=a b"], "Cmd": ["/bin/httpd", "-f", "-p", "80"],
                   "Image": "lab/busybox:1", "Labels": {"mesh-host.id": "web/c"}},
        "HostConfig": {"PortBindings": {"80/tcp": [{"HostIp": "", "HostPort": "18080"}],
                                        "81/tcp": [{"HostIp": "127.0.0.1", "HostPort": "18081"}],
                                        "82/udp": [{"HostIp": "::1", "HostPort": "18082"}]},
                       "RestartPolicy": {"Name": "unless-stopped", "MaximumRetryCount": 0}},
        "NetworkSettings": {"Networks": {"bridge": {}}}
    }]"#;

    /// `podman container inspect web` from Podman 4.3 (through its service), trimmed.
    const PODMAN_INSPECT: &str = r#"[{
        "Id": "cc4702e2bb22c96e65a875e4619aa1584bd979e3e62c4bd4cfa95d752368f7a8",
        "Name": "web",
        "Image": "e27e789141f59eb3fbb5327205e128a81567de8628271dcb9fa29100fbc2e36a",
        "ImageName": "localhost/lab/busybox:1",
        "State": {"Status": "exited", "Running": false, "ExitCode": 137},
        "Config": {"Env": ["X=a b", "PATH=/usr/bin", "TERM=xterm", "container=podman", "FOO=bar",
                           "HOSTNAME=cc4702e2bb22"],
                   "Cmd": ["/bin/httpd", "-f", "-p", "80"], "Image": "localhost/lab/busybox:1",
                   "Labels": {"mesh-host.id": "web/c"}},
        "HostConfig": {"PortBindings": {"80/tcp": [{"HostIp": "", "HostPort": "18080"}]},
                       "RestartPolicy": {"Name": "", "MaximumRetryCount": 0}},
        "NetworkSettings": {"Networks": {"podman": {}}}
    }]"#;

    #[test]
    fn docker_inspect_is_read() {
        let c = parse_inspect(DOCKER_INSPECT.as_bytes()).unwrap();
        assert_eq!(c.name, "web");
        assert_eq!(c.image, "lab/busybox:1");
        assert!(c.image_id.starts_with("sha256:"));
        assert_eq!(c.command, ["/bin/httpd", "-f", "-p", "80"]);
        assert_eq!(c.env["X"], "a b");
        assert_eq!(c.labels["mesh-host.id"], "web/c");
        assert_eq!(c.restart, "unless-stopped");
        assert_eq!(c.networks, ["bridge"]);
        assert!(c.running);
        let ports: Vec<String> = c.ports.iter().map(publish_arg).collect();
        assert_eq!(
            ports,
            [
                "18080:80/tcp",
                "127.0.0.1:18081:81/tcp",
                "[::1]:18082:82/udp"
            ]
        );
    }

    #[test]
    fn podman_inspect_is_read() {
        let c = parse_inspect(PODMAN_INSPECT.as_bytes()).unwrap();
        assert_eq!(c.name, "web");
        assert_eq!(normalize_image(&c.image), normalize_image("lab/busybox:1"));
        assert!(!c.running);
        assert_eq!(c.status, "exited");
        assert_eq!(c.exit_code, 137);
        assert_eq!(c.env["container"], "podman");
        assert_eq!(c.networks, ["podman"]);
    }

    #[test]
    fn image_references_compare_across_runtimes() {
        assert_eq!(normalize_image("busybox"), "busybox:latest");
        assert_eq!(
            normalize_image("docker.io/library/busybox"),
            "busybox:latest"
        );
        assert_eq!(normalize_image("localhost/lab/busybox:1"), "lab/busybox:1");
        assert_eq!(
            normalize_image("registry:5000/app/web"),
            "registry:5000/app/web:latest"
        );
        assert_eq!(normalize_image("x@sha256:abc"), "x@sha256:abc");
        assert_ne!(normalize_image("busybox:1"), normalize_image("busybox:2"));
    }

    #[test]
    fn create_is_one_argv_with_the_image_before_the_command() {
        let new = NewContainer {
            name: "web".into(),
            image: "lab/busybox:1".into(),
            command: vec!["/bin/sh".into(), "-c".into(), "echo $HOME; rm -rf /".into()],
            env: [("A".to_string(), "x y; z".to_string())].into(),
            ports: vec![PublishedPort {
                host_address: Some("fd00::1".into()),
                host_port: 8080,
                container_port: 80,
                proto: Proto::Tcp,
            }],
            restart: Some("always".into()),
            networks: vec!["front".into(), "back".into()],
            labels: [("mesh-host.id".to_string(), "web/c".to_string())].into(),
        };
        assert_eq!(
            create_argv("docker", &new),
            [
                "docker",
                "create",
                "--name",
                "web",
                "--label",
                "mesh-host.id=web/c",
                "--restart",
                "always",
                "--network",
                "front",
                "--env",
                "A=x y; z",
                "--publish",
                "[fd00::1]:8080:80/tcp",
                "lab/busybox:1",
                "/bin/sh",
                "-c",
                "echo $HOME; rm -rf /"
            ]
        );
        let runner = RecordingRunner::answering(&[0, 0, 0]);
        let rt = CliRuntime::new(&runner, &crate::system::podman::PODMAN);
        rt.run(&new).unwrap();
        let calls = runner.calls.borrow();
        assert_eq!(calls[0][..2], ["podman", "create"]);
        assert_eq!(calls[1], ["podman", "network", "connect", "back", "web"]);
        assert_eq!(calls[2], ["podman", "start", "web"]);
    }

    #[test]
    fn an_absent_container_is_none_and_an_engine_that_does_not_answer_is_an_error() {
        let answer = |code, stderr: &str| Output {
            code: Some(code),
            signal: None,
            stdout: b"[]".to_vec(),
            stderr: stderr.as_bytes().to_vec(),
        };
        let runner = RecordingRunner::default();
        runner.answers.borrow_mut().extend([
            answer(1, "Error response from daemon: No such container: web"),
            answer(125, "Error: inspecting object: no such container \"web\""),
            answer(
                1,
                "Cannot connect to the Docker daemon at unix:///x. Is the docker daemon running?",
            ),
        ]);
        let rt = CliRuntime::new(&runner, &crate::system::docker::DOCKER);
        assert_eq!(rt.inspect("web").unwrap(), None);
        assert_eq!(rt.inspect("web").unwrap(), None);
        let e = rt.inspect("web").unwrap_err().to_string();
        assert!(e.contains("Cannot connect"), "{e}");
        assert!(
            e.contains("docker container inspect web exited with status 1"),
            "{e}"
        );
    }

    #[test]
    fn a_container_found_by_id_prefix_is_not_the_one_at_that_name() {
        let runner = RecordingRunner::default();
        let victim = br#"[{"Id": "e8db792d46880000", "Name": "/victim", "Config": {"Image": "x", "Cmd": [], "Env": [], "Labels": {}},
            "Image": "sha256:1", "State": {"Running": true, "Status": "running", "ExitCode": 0},
            "HostConfig": {"PortBindings": {}, "RestartPolicy": {"Name": "no"}}, "NetworkSettings": {"Networks": {}}}]"#;
        runner.answers.borrow_mut().push_back(Output {
            code: Some(0),
            signal: None,
            stdout: victim.to_vec(),
            stderr: vec![],
        });
        let rt = CliRuntime::new(&runner, &crate::system::docker::DOCKER);
        assert_eq!(rt.inspect("e8db79").unwrap(), None);
    }

    #[test]
    fn the_version_is_the_servers() {
        let docker = br#"{"Client":{"Version":"28.2.2"},"Server":{"Platform":{"Name":""},
            "Components":[{"Name":"Engine","Version":"20.10.24+dfsg1"}],"Version":"20.10.24+dfsg1"}}"#;
        assert_eq!(parse_version(docker).unwrap(), "20.10.24+dfsg1");
        let podman_local = br#"{"Client":{"APIVersion":"4.3.1","Version":"4.3.1"}}"#;
        assert_eq!(parse_version(podman_local).unwrap(), "4.3.1");
    }
}

/// The bridge interfaces named by `network inspect` JSON, Docker's or Podman's.
pub(crate) fn parse_bridges(json: &[u8]) -> Result<Vec<String>, Unparsed> {
    let networks: Vec<engine_json::Network> = serde_json::from_slice(json).map_err(|e| {
        if e.is_data() && !json.trim_ascii_start().starts_with(b"[") {
            Unparsed("not an array".into())
        } else {
            Unparsed(e.to_string())
        }
    })?;
    let mut out = Vec::new();
    for n in networks {
        // Podman names the interface itself; for a macvlan or ipvlan network that is the parent
        // uplink (the machine's own outside interface), never a bridge of the runtime's.
        if let Some(i) = n.network_interface {
            if n.podman_driver == "bridge" {
                out.push(i);
            }
            continue;
        }
        if n.docker_driver != "bridge" {
            continue;
        }
        if let Some(i) = n.options.get("com.docker.network.bridge.name") {
            out.push(i.clone());
        } else if !n.id.is_empty() {
            // Docker's default for a user network: br- and the first 12 characters of its id.
            out.push(format!("br-{}", &n.id[..n.id.len().min(12)]));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod bridge_tests {
    use crate::system::engine_json::recorded;

    #[test]
    fn bridges_are_read_from_both_runtimes() {
        let docker = br#"[{"Name":"bridge","Id":"aaa","Driver":"bridge","Options":{"com.docker.network.bridge.name":"docker0"}},
                          {"Name":"mynet","Id":"0123456789abcdef","Driver":"bridge","Options":{}},
                          {"Name":"host","Id":"h","Driver":"host","Options":{}},
                          {"Name":"lan","Id":"l","Driver":"bridge","Options":{"com.docker.network.bridge.name":"lanbr"}}]"#;
        assert_eq!(
            super::parse_bridges(docker).unwrap(),
            vec!["docker0", "br-0123456789ab", "lanbr"]
        );
        let podman = br#"[{"name":"podman","driver":"bridge","network_interface":"podman0"}]"#;
        assert_eq!(super::parse_bridges(podman).unwrap(), vec!["podman0"]);
        assert!(super::parse_bridges(b"{}").is_err());
    }

    /// Recorded answers (Docker 20.10, Podman 4.3 with netavark): the default bridge and a user
    /// network's, from the API's lists and from the CLI's `network inspect` alike; Docker's
    /// `host` network is no bridge.
    #[test]
    fn recorded_networks_name_their_bridges() {
        for f in ["docker-networks.json", "docker-network-inspect.json"] {
            let mut got = super::parse_bridges(&recorded(f)).unwrap();
            got.sort();
            assert_eq!(got.len(), 2, "{f}: {got:?}");
            assert!(got.contains(&"docker0".to_string()), "{f}: {got:?}");
            assert!(
                got.iter().any(|b| b.starts_with("br-") && b.len() == 15),
                "{f}: {got:?}"
            );
        }
        for f in ["podman-networks.json", "podman-network-inspect.json"] {
            let mut got = super::parse_bridges(&recorded(f)).unwrap();
            got.sort();
            assert_eq!(got, ["podman0", "podman1"], "{f}");
        }
    }

    /// Recorded `container inspect` of the same container in both engines (80/tcp on every
    /// address, 81/tcp on 127.0.0.1, 82/udp; a label, an environment variable, a restart
    /// policy) and both engines' `version`.
    #[test]
    fn recorded_inspects_and_versions_are_read() {
        use super::{parse_inspect, parse_version, publish_arg};
        for (engine, base, network) in [("docker", 18080, "bridge"), ("podman", 28080, "podman")] {
            let c = parse_inspect(&recorded(&format!("{engine}-inspect.json"))).unwrap();
            assert_eq!(c.name, "web", "{engine}");
            assert!(c.running, "{engine}");
            assert_eq!(c.status, "running", "{engine}");
            assert_eq!(c.command, ["/bin/httpd", "-f", "-p", "80"], "{engine}");
            assert_eq!(c.env["FOO"], "bar", "{engine}");
            assert_eq!(c.labels["mesh-host.id"], "web/c", "{engine}");
            assert_eq!(c.restart, "unless-stopped", "{engine}");
            assert_eq!(c.networks, [network], "{engine}");
            assert_eq!(
                super::normalize_image(&c.image),
                "lab/busybox:1",
                "{engine}"
            );
            let ports: Vec<String> = c.ports.iter().map(publish_arg).collect();
            assert_eq!(
                ports,
                [
                    format!("{base}:80/tcp"),
                    format!("127.0.0.1:{}:81/tcp", base + 1),
                    format!("{}:82/udp", base + 2),
                ],
                "{engine}"
            );
        }
        assert_eq!(
            parse_version(&recorded("docker-version.json")).unwrap(),
            "20.10.24+dfsg1"
        );
        assert_eq!(
            parse_version(&recorded("podman-version.json")).unwrap(),
            "4.3.1"
        );
    }

    #[test]
    fn podman_macvlan_and_ipvlan_parents_are_not_bridges() {
        // Podman names the parent uplink as a macvlan or ipvlan network's interface: were it
        // taken for a bridge, the guard would let the outside through.
        let podman = br#"[{"name":"podman","driver":"bridge","network_interface":"podman0"},
                          {"name":"lan","driver":"macvlan","network_interface":"eth0"},
                          {"name":"lan6","driver":"ipvlan","network_interface":"eth1"},
                          {"name":"odd","network_interface":"eth2"}]"#;
        assert_eq!(super::parse_bridges(podman).unwrap(), vec!["podman0"]);
    }
}
