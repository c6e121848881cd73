//! Converge and return, through the built binary on a lab node with a real Docker engine and a
//! found firewall of each kind loaded from its own configuration file (a drop policy, a served
//! port, a fail2ban-style ban the file does not hold): the preview refuses while a module holds
//! its found container and names what will close once it is taken; the flip loads the derived
//! filter and retires the found firewall with its file byte-identical; the return puts it back
//! as saved; a probe loop against the store's port from outside never connects through either.
//!
//! The boot units are handled through a stub `systemctl` first on PATH, standing in for systemd
//! as PID 1 (which cannot run here): it answers `show` as an enabled unit and logs every call.

use super::found::stub_systemctl;
use super::*;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// The banned source: a second address of the outside machine, in the ban the file never held.
const BANNED_V4: std::net::Ipv4Addr = std::net::Ipv4Addr::new(192, 0, 2, 66);
/// The container the service module declares and the predecessor runs, and one nobody declares.
const SERVICE_PORT: u16 = 8082;
const UNDECLARED_PUBLISHED: u16 = 8083;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Nftables,
    IptablesNft,
    IptablesLegacy,
}

impl Kind {
    fn variant(self) -> &'static str {
        match self {
            Kind::Nftables => "",
            Kind::IptablesNft => "nft",
            Kind::IptablesLegacy => "legacy",
        }
    }
}

/// The found firewall's configuration, written where its boot unit reads it, and loaded.
pub(super) fn load_found(node: &Machine, root: &Path, kind: Kind) -> Vec<(PathBuf, Vec<u8>)> {
    let write = |rel: &str, text: &str| {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        path
    };
    match kind {
        Kind::Nftables => {
            let conf = write("etc/nftables.conf", INET_INPUT_DROP);
            run_ok(node, &["nft", "-f", conf.to_str().unwrap()]);
            vec![(conf, INET_INPUT_DROP.as_bytes().to_vec())]
        }
        Kind::IptablesNft | Kind::IptablesLegacy => {
            let v4 = "*filter\n:INPUT DROP [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n\
                      :services - [0:0]\n\
                      -A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n\
                      -A INPUT -i lo -j ACCEPT\n\
                      -A INPUT -p tcp --dport 22 -j ACCEPT\n\
                      -A INPUT -j services\n\
                      -A services -p tcp --dport 8080 -j ACCEPT\nCOMMIT\n";
            let v6 = "*filter\n:INPUT DROP [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n\
                      -A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n\
                      -A INPUT -i lo -j ACCEPT\n\
                      -A INPUT -p ipv6-icmp -j ACCEPT\n\
                      -A INPUT -p tcp --dport 22 -j ACCEPT\n\
                      -A INPUT -p tcp --dport 8080 -j ACCEPT\nCOMMIT\n";
            let p4 = write("etc/iptables/rules.v4", v4);
            let p6 = write("etc/iptables/rules.v6", v6);
            for (program, path) in [("iptables", &p4), ("ip6tables", &p6)] {
                let restore = format!("{program}-{}-restore", kind.variant());
                run_ok(node, &[restore.as_str(), "-w", "5", path.to_str().unwrap()]);
            }
            vec![(p4, v4.as_bytes().to_vec()), (p6, v6.as_bytes().to_vec())]
        }
    }
}

/// fail2ban's ban of the banned source, added at run time (never in the found firewall's file).
fn ban(node: &Machine, kind: Kind) {
    match kind {
        Kind::Nftables => {
            let text = format!(
                "table inet f2b-table {{
	set addr-set {{ type ipv4_addr; elements = {{ {BANNED_V4} }} }}
	chain f2b-chain {{
		type filter hook input priority filter - 1; policy accept;
		ip saddr @addr-set reject
	}}
}}
"
            );
            let dir = tempfile::tempdir().unwrap();
            load_nft(node, dir.path(), "f2b.nft", &text);
        }
        Kind::IptablesNft | Kind::IptablesLegacy => {
            let program = format!("iptables-{}", kind.variant());
            let banned = BANNED_V4.to_string();
            for rule in [
                vec!["-N", "f2b-sshd"],
                vec!["-A", "f2b-sshd", "-s", &banned, "-j", "REJECT"],
                vec!["-A", "f2b-sshd", "-j", "RETURN"],
                vec!["-I", "INPUT", "1", "-p", "tcp", "-j", "f2b-sshd"],
            ] {
                let mut argv = vec![program.as_str(), "-w"];
                argv.extend(rule);
                run_ok(node, &argv);
            }
        }
    }
}

/// The found firewall as text, the mesh's marks and table left out.
pub(super) fn found_text(node: &Machine, kind: Kind) -> String {
    match kind {
        Kind::Nftables => without_marked(&View::NftTable("inet", "filter").read(node)),
        Kind::IptablesNft => without_marked(&format!(
            "{}{}",
            View::Save("iptables-nft-save").read(node),
            View::Save("ip6tables-nft-save").read(node)
        )),
        Kind::IptablesLegacy => without_marked(&format!(
            "{}{}",
            View::Save("iptables-legacy-save").read(node),
            View::Save("ip6tables-legacy-save").read(node)
        )),
    }
}

/// mesh-host on the node with the engine's address and the stub first on PATH.
fn act(host: &Host, stub: &Path, docker_host: &str, args: &[&str]) -> lab::Output {
    let root = host.root();
    let path = format!(
        "PATH={}:{}",
        stub.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let docker = format!("DOCKER_HOST={docker_host}");
    let mut argv = vec![
        "env",
        &path,
        &docker,
        MESH,
        "--root",
        root.to_str().unwrap(),
    ];
    argv.extend_from_slice(args);
    host.node.run(&argv).expect("running mesh-host")
}

fn json_of(out: &lab::Output, what: &str) -> Value {
    if let Err(e) = serde_json::from_str::<Value>(&out.stdout) {
        panic!(
            "{what} printed no JSON ({e}): status {}\n{}\n{}",
            out.status, out.stdout, out.stderr
        );
    }
    crate::util::contract(&out.stdout)
}

/// Probes the store's port on the node's public addresses from outside until stopped, counting
/// every connection that was answered.
struct ProbeLoop {
    stop: Arc<AtomicBool>,
    reached: Arc<AtomicUsize>,
    probes: Arc<AtomicUsize>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ProbeLoop {
    fn start(outside: &Machine) -> ProbeLoop {
        let (stop, reached, probes) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
        );
        let (s, r, p, m) = (
            stop.clone(),
            reached.clone(),
            probes.clone(),
            outside.clone(),
        );
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                for addr in node_public() {
                    if m.probe_tcp(addr, STORE, Duration::from_millis(150))
                        .is_ok_and(|got| got == Probe::Reached)
                    {
                        r.fetch_add(1, Ordering::Relaxed);
                    }
                    p.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        ProbeLoop {
            stop,
            reached,
            probes,
            thread: Some(thread),
        }
    }

    /// Stops the loop: (probes made, probes answered).
    fn finish(mut self) -> (usize, usize) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap();
        (
            self.probes.load(Ordering::Relaxed),
            self.reached.load(Ordering::Relaxed),
        )
    }
}

fn the_flip_and_the_return(kind: Kind) {
    let lab = new_lab();
    let net = adoption(&lab);
    let node = &net.node;
    let host = Host::new(node);
    // A bpffs where a node has one, so the guard is both layers: the flip removes the BPF layer
    // once the derived filter holds, the return loads it again.
    let _bpffs = super::guard_bpf::Bpffs::mount(&host);
    let root = host.root();
    let stub = host.dir.path().join("stub");
    std::fs::create_dir(&stub).unwrap();
    stub_systemctl(&stub);

    // The predecessor's machine: its firewall first (a reload from its file flushes the ruleset,
    // as at boot), then the runtime, its containers and the listeners.
    let configs = load_found(node, &root, kind);
    ban(node, kind);
    net.outside
        .add_address(lab::addr::PUBLIC_IF, BANNED_V4.into(), PUBLIC_V4_PREFIX)
        .expect("the banned address on the outside machine");
    let docker = node
        .start_docker(&lab.dir().join("docker"))
        .expect("a Docker engine in the node's namespace (docker.io, busybox-static)");
    let httpd = ["/bin/httpd", "-f", "-p", "80", "-h", "/"];
    docker
        .run_container("web", &["-p", &format!("{SERVICE_PORT}:80")], &httpd)
        .expect("the predecessor's service container");
    docker
        .run_container(
            "other",
            &["-p", &format!("{UNDECLARED_PUBLISHED}:80")],
            &httpd,
        )
        .expect("a container nobody declares");
    let _listeners: Vec<lab::Process> = [SSH, SERVED, OPENED, CLOSED, STORE]
        .iter()
        .map(|p| node.listen_tcp(*p).expect("a listener on the node"))
        .collect();
    std::fs::create_dir_all(root.join("etc/predecessor")).unwrap();
    std::fs::write(root.join("etc/app.conf"), "written by the predecessor\n").unwrap();
    std::fs::write(root.join("etc/predecessor/extra.conf"), "also theirs\n").unwrap();

    let mut decl = declaration(&[
        json!({"id": "app/web", "module": "app", "type": "container", "name": "web",
               "image": lab::BUSYBOX_IMAGE, "command": httpd,
               "ports": [{"host_port": SERVICE_PORT, "container_port": 80, "proto": "tcp"}]}),
        json!({"id": "app/conf", "module": "app", "type": "file", "path": "/etc/app.conf",
               "content": "written by the mesh\n"}),
        json!({"id": "app/http", "module": "app", "type": "opening", "port": SERVICE_PORT,
               "proto": "tcp", "from": "anywhere", "path": "forwarded"}),
        json!({"id": "api/port", "module": "api", "type": "opening", "port": OPENED,
               "proto": "tcp", "from": "anywhere", "path": "incoming"}),
        json!({"id": "files/extra", "module": "files", "type": "file",
               "path": "/etc/predecessor/extra.conf", "content": "the mesh's\n"}),
        json!({"id": "store/port", "module": "store", "type": "opening", "port": STORE,
               "proto": "tcp", "from": "private", "path": "incoming"}),
    ]);
    decl["node"] = json!("lab-node");
    let file = host.dir.path().join("declaration.json");
    std::fs::write(&file, serde_json::to_vec_pretty(&decl).unwrap()).unwrap();
    let out = act(
        &host,
        &stub,
        docker.docker_host(),
        &["apply", file.to_str().unwrap(), "--json"],
    );
    assert!(out.success(), "adopting: {}\n{}", out.stdout, out.stderr);
    let report = json_of(&out, "apply");
    assert_nothing_failed(&report);
    assert_eq!(outcome(&report, "app/web"), "held", "{report:#}");
    assert!(
        report["guard"]
            .as_str()
            .unwrap_or_default()
            .contains(super::guard_bpf::BOTH),
        "{report:#}"
    );

    // The found firewall as it stands adopted, and what serves.
    let v4: [IpAddr; 1] = [NODE_PUBLIC_V4.into()];
    expect(
        &net.outside,
        &node_public(),
        OPENED,
        Probe::Reached,
        "adopted: the opening",
    );
    expect(
        &net.outside,
        &node_public(),
        SERVED,
        Probe::Reached,
        "adopted: the served port",
    );
    expect(
        &net.outside,
        &v4,
        SERVICE_PORT,
        Probe::Reached,
        "adopted: the service",
    );
    expect(
        &net.outside,
        &node_public(),
        STORE,
        Probe::TimedOut,
        "adopted: the guard",
    );
    let found_before = found_text(node, kind);

    // The preview refuses while module app holds its found container.
    let out = act(
        &host,
        &stub,
        docker.docker_host(),
        &["converge", "--preview", "--json"],
    );
    assert_eq!(out.status.code(), Some(3), "{}\n{}", out.stdout, out.stderr);
    let preview = json_of(&out, "the preview");
    let refusals = preview["refusals"].to_string();
    assert!(
        refusals.contains("module app") && refusals.contains("web"),
        "{preview:#}"
    );
    // And so does the flip, changing nothing.
    let out = act(&host, &stub, docker.docker_host(), &["converge", "--json"]);
    assert_eq!(out.status.code(), Some(3), "{}\n{}", out.stdout, out.stderr);
    assert_eq!(
        found_text(node, kind),
        found_before,
        "a refused flip changed the found firewall"
    );

    // Module app taken: its container replaced by the host's own, its file by the declared one.
    let out = act(
        &host,
        &stub,
        docker.docker_host(),
        &["take", "app", "--json"],
    );
    assert!(out.success(), "take app: {}\n{}", out.stdout, out.stderr);
    assert_eq!(
        std::fs::read_to_string(root.join("etc/app.conf")).unwrap(),
        "written by the mesh\n"
    );
    expect(
        &net.outside,
        &v4,
        SERVICE_PORT,
        Probe::Reached,
        "taken: the service",
    );

    let out = act(
        &host,
        &stub,
        docker.docker_host(),
        &["converge", "--preview", "--json"],
    );
    // Changes pending, as every preview that would change something.
    assert_eq!(out.status.code(), Some(4), "{}\n{}", out.stdout, out.stderr);
    let preview = json_of(&out, "the preview");
    let reach = |list: &str, port: u16| -> Value {
        preview[list]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["port"] == port)
            .cloned()
            .unwrap_or_else(|| panic!("{list} has no port {port}: {preview:#}"))
    };
    assert_eq!(
        reach("published", SERVICE_PORT)["admitted_by"],
        "app/http",
        "{preview:#}"
    );
    assert_eq!(reach("published", SERVICE_PORT)["closes"], false);
    assert_eq!(
        reach("published", UNDECLARED_PUBLISHED)["closes"],
        true,
        "{preview:#}"
    );
    assert_eq!(reach("listening", OPENED)["admitted_by"], "api/port");
    assert_eq!(reach("listening", SERVED)["closes"], true, "{preview:#}");
    assert_eq!(reach("listening", SSH)["admitted_by"], "ssh", "{preview:#}");
    // Where each is reached from now is the evaluator's walk, checked by a probe; ssh, reached
    // from anywhere now, is admitted only from the private network after the flip: a narrowing
    // the preview says as one.
    let ssh_now = net
        .outside
        .probe_tcp(NODE_PUBLIC_V4.into(), SSH, ANSWER)
        .unwrap();
    let ssh = reach("listening", SSH);
    if ssh_now == Probe::Reached {
        // fail2ban's ban refuses its source at every tcp port, ssh's too.
        assert_eq!(
            ssh["now"],
            format!("anywhere except {BANNED_V4}/32"),
            "{preview:#}"
        );
        assert_eq!(
            ssh["change"],
            format!(
                "NARROWS: from anywhere except {BANNED_V4}/32 → from the private network (mesh0) only"
            ),
            "{preview:#}"
        );
    } else {
        assert_ne!(
            ssh["now"], "anywhere",
            "ssh is not reached now: {preview:#}"
        );
    }
    // The opened port is reached from anywhere but the banned source now, by a ban the flip
    // keeps or lifts as the table holding it goes or stays.
    assert_ne!(
        net.outside
            .probe_tcp_from(BANNED_V4.into(), NODE_PUBLIC_V4.into(), OPENED, SILENCE)
            .unwrap(),
        Probe::Reached,
        "adopted: the ban refuses its source"
    );
    let opened = reach("listening", OPENED);
    assert!(
        opened["now"]
            .as_str()
            .unwrap()
            .starts_with("anywhere except"),
        "{preview:#}"
    );
    assert!(
        opened["now"]
            .as_str()
            .unwrap()
            .contains(&BANNED_V4.to_string()),
        "{preview:#}"
    );
    // fail2ban's table is not what the found firewall's file loads: it stays through the flip
    // (probed below), so the preview lifts nothing.
    assert_eq!(preview["lifts"], json!([]), "{preview:#}");
    let take: Vec<&str> = preview["take"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["module"].as_str().unwrap())
        .collect();
    assert_eq!(take, ["api", "files", "store"], "{preview:#}");
    assert!(preview["take"]
        .to_string()
        .contains("/etc/predecessor/extra.conf"));
    assert!(
        !preview["found_firewall"].as_array().unwrap().is_empty(),
        "{preview:#}"
    );
    let human = act(
        &host,
        &stub,
        docker.docker_host(),
        &["converge", "--preview"],
    );
    assert!(human.stdout.contains("WILL CLOSE"), "{}", human.stdout);

    // The flip, probed all the while. The found firewall as it stands just before it (taking
    // the module made Docker write its rules for the new container).
    let found_before = found_text(node, kind);
    let probes = ProbeLoop::start(&net.outside);
    let out = act(&host, &stub, docker.docker_host(), &["converge", "--json"]);
    assert!(out.success(), "the flip: {}\n{}", out.stdout, out.stderr);
    let report = json_of(&out, "the flip");
    assert_nothing_failed(&report);
    let mesh = run_ok(node, &["nft", "list", "table", "inet", "mesh_host"]);
    assert!(
        mesh.contains("chain input") && mesh.contains("policy drop"),
        "{mesh}"
    );
    assert!(
        !mesh.contains("chain guard"),
        "the guard stays after the flip: {mesh}"
    );
    assert!(
        report["flip"]
            .as_str()
            .unwrap_or_default()
            .contains("the guard's netfilter BPF layer removed"),
        "{report:#}"
    );
    assert_eq!(super::guard_bpf::bpf(&host)["pinned"], false);
    // The status names what the kernel holds: the derived filter, no guard layer, no links.
    let status = host.status();
    let g = &status["guard"];
    assert_eq!(
        (&g["present"], &g["table"]),
        (&json!(false), &json!(true)),
        "{g:#}"
    );
    assert_eq!(g["bpf"]["held"], json!([]), "{g:#}");
    assert!(
        g["layers"]
            .as_str()
            .unwrap_or_default()
            .starts_with("guard: none; the derived filter"),
        "{g:#}"
    );
    let text = host.run(&["firewall", "status"]).stdout;
    assert!(
        text.contains(
            "guard           no guard: table inet mesh_host holds only the derived filter"
        ) && !text.contains("guard present")
            && !text.contains("present, plain table"),
        "{text}"
    );
    for (path, bytes) in &configs {
        assert_eq!(
            &std::fs::read(path).unwrap(),
            bytes,
            "{} changed",
            path.display()
        );
    }
    let log = std::fs::read_to_string(stub.join("log")).unwrap_or_default();
    assert!(
        log.contains("disable"),
        "the boot unit was not disabled: {log}"
    );
    assert!(!log.contains("stop"), "the boot unit was stopped: {log}");
    match kind {
        Kind::Nftables => {
            let tables = run_ok(node, &["nft", "list", "tables"]);
            assert!(!tables.contains("inet filter"), "{tables}");
            assert!(
                tables.contains("inet f2b-table"),
                "the ban went with the flip: {tables}"
            );
        }
        Kind::IptablesNft | Kind::IptablesLegacy => {
            let save = run_ok(node, &[&format!("iptables-{}-save", kind.variant())]);
            assert!(save.contains(":INPUT ACCEPT"), "{save}");
            assert!(!save.contains("--dport 8080"), "{save}");
            assert!(
                save.contains("f2b-sshd"),
                "the ban went with the flip: {save}"
            );
        }
    }
    expect(
        &net.outside,
        &node_public(),
        OPENED,
        Probe::Reached,
        "converged: the declared port",
    );
    expect(
        &net.outside,
        &node_public(),
        CLOSED,
        Probe::TimedOut,
        "converged: an undeclared port",
    );
    expect(
        &net.outside,
        &node_public(),
        SERVED,
        Probe::TimedOut,
        "converged: the served port nobody declared",
    );
    expect(
        &net.outside,
        &v4,
        SERVICE_PORT,
        Probe::Reached,
        "converged: the declared published port",
    );
    expect(
        &net.outside,
        &v4,
        UNDECLARED_PUBLISHED,
        Probe::TimedOut,
        "converged: the undeclared published port",
    );
    expect(
        &net.peer,
        &node_private(),
        STORE,
        Probe::Reached,
        "converged: the store over the private network",
    );
    let banned = net
        .outside
        .probe_tcp_from(BANNED_V4.into(), NODE_PUBLIC_V4.into(), OPENED, SILENCE)
        .unwrap();
    assert_ne!(
        banned,
        Probe::Reached,
        "converged: the ban still refuses its source"
    );
    // A reconcile of the converged node changes nothing.
    let out = act(&host, &stub, docker.docker_host(), &["reconcile", "--json"]);
    assert!(out.success(), "{}\n{}", out.stdout, out.stderr);

    // The return.
    let out = act(&host, &stub, docker.docker_host(), &["adopt", "--json"]);
    assert!(out.success(), "the return: {}\n{}", out.stdout, out.stderr);
    assert_nothing_failed(&json_of(&out, "the return"));
    let (made, reached) = probes.finish();
    assert!(made > 20, "the probe loop made only {made} probes");
    assert_eq!(
        reached, 0,
        "the store was reached {reached} times of {made} through the flip and the return"
    );
    let mesh = run_ok(node, &["nft", "list", "table", "inet", "mesh_host"]);
    assert!(mesh.contains("chain guard"), "{mesh}");
    let status = host.status();
    assert_eq!(
        status["guard"]["layers"],
        super::guard_bpf::BOTH,
        "the return did not load the bpf layer again"
    );
    // After the return: the guard's three chains and four attached links, from the kernel.
    assert_eq!(status["guard"]["present"], true, "{status:#}");
    assert_eq!(
        status["guard"]["chains"],
        json!(["guard", "guard_input", "guard_forward"])
    );
    assert_eq!(
        status["guard"]["bpf"]["held"].as_array().map(Vec::len),
        Some(4),
        "{status:#}"
    );
    assert!(
        !mesh.contains("chain input") && !mesh.contains("chain forward"),
        "{mesh}"
    );
    assert_eq!(
        found_text(node, kind),
        found_before,
        "the found firewall came back otherwise"
    );
    let log = std::fs::read_to_string(stub.join("log")).unwrap();
    assert!(
        log.contains("enable"),
        "the boot unit was not enabled again: {log}"
    );
    expect(
        &net.outside,
        &node_public(),
        SERVED,
        Probe::Reached,
        "returned: the served port",
    );
    expect(
        &net.outside,
        &node_public(),
        OPENED,
        Probe::Reached,
        "returned: the opening",
    );
    expect(
        &net.outside,
        &v4,
        SERVICE_PORT,
        Probe::Reached,
        "returned: Docker's published port",
    );
    expect(
        &net.outside,
        &node_public(),
        STORE,
        Probe::TimedOut,
        "returned: the guard",
    );
    let banned = net
        .outside
        .probe_tcp_from(BANNED_V4.into(), NODE_PUBLIC_V4.into(), OPENED, SILENCE)
        .unwrap();
    assert_ne!(
        banned,
        Probe::Reached,
        "returned: the ban still refuses its source"
    );
    for (path, bytes) in &configs {
        assert_eq!(
            &std::fs::read(path).unwrap(),
            bytes,
            "{} changed",
            path.display()
        );
    }
    // What was taken stays taken.
    assert_eq!(
        std::fs::read_to_string(root.join("etc/app.conf")).unwrap(),
        "written by the mesh\n"
    );
    docker.stop().expect("stopping the engine");
}

#[test]
fn flip_and_return_with_a_found_nftables_firewall() {
    the_flip_and_the_return(Kind::Nftables);
}

#[test]
fn flip_and_return_with_a_found_iptables_nft_firewall() {
    the_flip_and_the_return(Kind::IptablesNft);
}

#[test]
fn flip_and_return_with_a_found_iptables_legacy_firewall() {
    the_flip_and_the_return(Kind::IptablesLegacy);
}
