//! Genesis on a lab machine of its own with no container engine: a private range overlapping a
//! predecessor's tunnel, and every held foundation port named at once.

use super::*;

/// A lab machine of its own, with no container engine: genesis run there, with a bundle of the
/// foundation's resources that need none.
struct Bare {
    lab: Lab,
    node: Machine,
    bundle: PathBuf,
    docker_host: String,
}

impl Bare {
    fn new() -> Bare {
        let lab = Lab::new().unwrap_or_else(|e| {
            panic!("the lab needs root, iproute2 and nsenter; it never skips: {e}")
        });
        let node = lab.machine("node").expect("a machine");
        // A bundle without containers, so a raise that passes the checks needs no engine.
        let mut bundle = lab_bundle();
        bundle["resources"]
            .as_array_mut()
            .unwrap()
            .retain(|r| r["type"] != "container");
        let path = lab.dir().join("bundle.json");
        std::fs::write(&path, serde_json::to_vec(&bundle).unwrap()).unwrap();
        // No engine answers at this socket: the machine runs no containers, and the machine's
        // own Docker, if it has one, is never read.
        let docker_host = format!("unix://{}/no-engine.sock", lab.dir().display());
        Bare {
            lab,
            node,
            bundle: path,
            docker_host,
        }
    }

    fn genesis(&self, root: &Path, extra: &[&str]) -> lab::Output {
        let mut args = vec![
            "genesis",
            "--adopted",
            "--node",
            NODE,
            "--bundle",
            self.bundle.to_str().unwrap(),
            "--json",
        ];
        args.extend_from_slice(extra);
        mesh_in(&self.node, &self.docker_host, root, &args)
    }
}

/// A raise on this bare machine went to its end, and its briefing says `failed`: the machine has
/// no private interface (mesh0) and no engine publishes the forwarded openings' ports, so the raise
/// exits 5, never 0 (issue 31, point 4); nothing in it failed.
fn raised_as_briefed(out: &lab::Output) {
    assert_eq!(out.status.code(), Some(5), "{}", shown(out));
    let report = json_of(out);
    assert_eq!(report["outcome"], "failed", "{report:#}");
    assert_eq!(report["private_network"]["mark"], "failed", "{report:#}");
    assert!(
        report["entries"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["outcome"] != "failed"),
        "{report:#}"
    );
}

#[test]
fn a_private_range_overlapping_a_predecessors_tunnel_is_refused_naming_the_interface() {
    let bare = Bare::new();
    let node = &bare.node;
    // The predecessor's tunnel: a tun device such as wireguard-go makes (this kernel has no
    // WireGuard module), with the predecessor's range, which holds the mesh's default one.
    run_ok(
        node,
        &["ip", "tuntap", "add", "dev", "wg-old", "mode", "tun"],
    );
    node.add_address("wg-old", "10.77.0.1".parse().unwrap(), 16)
        .unwrap();
    node.link_up("wg-old").unwrap();

    // The default range, and a range given inside the tunnel's: refused naming the interface
    // and the range it overlaps, once (its address and its route are the same network).
    for (range, text) in [
        (None, "10.77.0.0/24"),
        (Some("10.77.9.0/24"), "10.77.9.0/24"),
    ] {
        let root = tempfile::tempdir().unwrap();
        let extra: Vec<&str> = range
            .map(|r| vec!["--private-range", r])
            .unwrap_or_default();
        let out = bare.genesis(root.path(), &extra);
        let lines = refused(&out);
        let want = format!(
            "private range: {text} overlaps 10.77.0.0/16 on interface wg-old; give another with --private-range"
        );
        assert_eq!(lines, [want], "{}", shown(&out));
        assert!(no_store(root.path()), "a refused genesis made a store");
    }

    // A range clear of it passes the check, and the node is raised.
    let root = tempfile::tempdir().unwrap();
    let out = bare.genesis(root.path(), &["--private-range", "10.78.0.0/24"]);
    raised_as_briefed(&out);
    let state = store_state(root.path());
    assert_eq!(
        state["settings"]["private_network"]["range"],
        "10.78.0.0/24"
    );
}

#[test]
fn every_held_foundation_port_is_named_at_once_with_its_process_and_pid() {
    let bare = Bare::new();
    let node = &bare.node;
    let www = bare.lab.dir().join("www");
    std::fs::create_dir_all(&www).unwrap();
    // The bus's port held by a service on loopback only (it still holds the port), and the
    // hub's by a UDP socket of this test's own process, bound inside the machine (busybox has no
    // UDP server to stand in). A child forked by another test shares the socket for an instant,
    // but the holder named is the socket's first owner by pid, which is this process.
    let bus = httpd(node, &www, &format!("127.0.0.1:{BUS}"), BUS);
    let hub = node
        .listen_udp(51820)
        .expect("a UDP socket on the hub's port");
    let me = std::fs::read_to_string("/proc/self/comm").unwrap();
    let root = tempfile::tempdir().unwrap();

    let out = bare.genesis(root.path(), &[]);
    let lines = refused(&out);
    assert_eq!(
        lines,
        [
            format!(
                "port: the bus port tcp/{BUS} is held by busybox (pid {}); give another with --ports bus=PORT",
                bus.pid()
            ),
            format!(
                "port: the hub port udp/51820 is held by {} (pid {}); give another with --ports hub=PORT",
                me.trim(),
                std::process::id()
            ),
        ],
        "{}",
        shown(&out)
    );
    assert!(no_store(root.path()), "a refused genesis made a store");

    // Given other ports, the node is raised, and they are its settings.
    let out = bare.genesis(root.path(), &["--ports", "bus=5673,hub=51821"]);
    raised_as_briefed(&out);
    let ports = &store_state(root.path())["settings"]["ports"];
    assert_eq!(
        (ports["bus"].as_u64(), ports["hub"].as_u64()),
        (Some(5673), Some(51821))
    );
    drop(hub);
}
