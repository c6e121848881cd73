//! A converged genesis on a clean lab machine of its own (Docker in its namespace, nothing else
//! serving but an ssh stand-in the operator is connected to): the preview names what would close,
//! the derived filter is in force before the first container answers (a probe loop from outside
//! against the bus's published port), an undeclared listener is refused and a declared opening
//! admitted afterwards, ssh is still reached from where the operator reached it, and a reconcile
//! keeps the filter.

use super::*;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};

/// An echo server on ssh's port, both families, one thread per connection: stands in for sshd
/// and keeps the operator's session open as long as the test holds it (busybox httpd would close
/// an idle connection).
const ECHO: &str = "import socket, threading
s = socket.socket(socket.AF_INET6)
s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('::', 22))
s.listen(16)
def serve(c):
    while True:
        d = c.recv(1024)
        if not d:
            return
        c.sendall(d)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
";

/// A line sent over the operator's session and echoed back.
fn echoed(session: &mut TcpStream) -> bool {
    session.set_read_timeout(Some(ANSWER)).unwrap();
    let mut got = [0u8; 5];
    session.write_all(b"ping\n").is_ok()
        && session.read_exact(&mut got).is_ok()
        && &got == b"ping\n"
}

#[test]
fn converged_genesis_loads_the_filter_before_the_first_container_listens_and_keeps_ssh() {
    let lab = Lab::new().unwrap_or_else(|e| {
        panic!("the lab needs root, iproute2 and nsenter; it never skips: {e}")
    });
    let net = Adoption::build(&lab).expect("building the adoption topology");
    let (node, outside, peer) = (&net.node, &net.outside, &net.peer);
    let docker = node
        .start_docker(&lab.dir().join("docker"))
        .unwrap_or_else(|e| {
            panic!("a Docker engine in the node's namespace (docker.io, busybox-static): {e}")
        });
    let bundle = lab.dir().join("lab-bundle.json");
    std::fs::write(&bundle, serde_json::to_vec_pretty(&lab_bundle()).unwrap()).unwrap();
    let root = tempfile::tempdir().unwrap();
    let mesh = |args: &[&str]| mesh_in(node, docker.docker_host(), root.path(), args);
    let genesis = [
        "genesis",
        "--node",
        NODE,
        "--bundle",
        bundle.to_str().unwrap(),
        "--json",
    ];

    // ssh's stand-in, and the operator's session to it from the peer's public address.
    let mut sshd = node
        .spawn(&["python3", "-c", ECHO])
        .expect("python3 standing in for sshd");
    node.wait_listening(&mut sshd, SSH)
        .expect("the ssh stand-in listens");
    let mut session = peer
        .in_namespace(|| TcpStream::connect(SocketAddr::new(NODE_PUBLIC_V4.into(), SSH)))
        .unwrap()
        .expect("the operator's session from the peer");
    assert!(echoed(&mut session), "the operator's session answers");

    // The preview, with a service listening that the filter would close: genesis would refuse
    // (the machine is in use) and names it closed, ssh narrowed to the private network and the
    // operator's address. Nothing changes.
    let www = lab.dir().join("www");
    std::fs::create_dir_all(&www).unwrap();
    let service = httpd(node, &www, &format!("{NODE_PUBLIC_V4}:{SERVICE}"), SERVICE);
    let mut args = genesis.to_vec();
    args.push("--preview");
    let out = mesh(&args);
    assert_eq!(out.status.code(), Some(3), "{}", shown(&out));
    let preview = json_of(&out);
    let filter = &preview["filter"];
    assert_eq!(
        filter["ssh_from"],
        json!([PEER_PUBLIC_V4.to_string()]),
        "{preview:#}"
    );
    let fate = |port: u16| -> (String, String) {
        let l = filter["listeners"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| {
                l["listener"]
                    .as_str()
                    .unwrap()
                    .contains(&format!(":{port} "))
            })
            .unwrap_or_else(|| panic!("no listener on {port}: {preview:#}"));
        (
            l["fate"].as_str().unwrap().into(),
            l["why"].as_str().unwrap().into(),
        )
    };
    assert_eq!(fate(SERVICE).0, "closed", "{preview:#}");
    let (ssh_fate, ssh_why) = fate(SSH);
    assert_eq!(ssh_fate, "narrowed", "{preview:#}");
    assert!(
        ssh_why.contains("over mesh0") && ssh_why.contains(&PEER_PUBLIC_V4.to_string()),
        "{ssh_why}"
    );
    assert!(no_store(root.path()), "the preview made a store");
    drop(service);

    // The raise, watched from outside: a probe loop against the bus's published port, and the
    // derived filter's chain looked for in a loop. Every answer must come after the filter was
    // seen in force.
    let stop = AtomicBool::new(false);
    let (raised, filter_seen, answers) = std::thread::scope(|s| {
        let watcher = s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                let listed = node
                    .run(&["nft", "list", "chain", "inet", "mesh_host", "input"])
                    .expect("nft in the node");
                if listed.status.success() {
                    return Some(Instant::now());
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            None
        });
        let prober = s.spawn(|| {
            let mut answered = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let began = Instant::now();
                let got = outside
                    .probe_tcp(NODE_PUBLIC_V4.into(), BUS, Duration::from_millis(300))
                    .expect("probing the bus from outside");
                if got == Probe::Reached {
                    answered.push(began);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            answered
        });
        let raised = mesh(&genesis);
        // The bus answers once its container runs: keep probing until it has, or a while.
        let deadline = Instant::now() + SETTLE;
        while Instant::now() < deadline && !prober.is_finished() {
            if outside
                .probe_tcp(NODE_PUBLIC_V4.into(), BUS, ANSWER)
                .map(|p| p == Probe::Reached)
                .unwrap_or(false)
            {
                std::thread::sleep(Duration::from_millis(200));
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        stop.store(true, Ordering::Relaxed);
        (raised, watcher.join().unwrap(), prober.join().unwrap())
    });
    assert_eq!(raised.status.code(), Some(0), "{}", shown(&raised));
    let report = json_of(&raised);
    let failed: Vec<&Value> = report["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["outcome"] == "failed")
        .collect();
    assert!(failed.is_empty(), "{report:#}");
    let filter_seen = filter_seen.expect("the derived filter was never seen in force");
    let first = *answers
        .first()
        .unwrap_or_else(|| panic!("the bus never answered the probe loop: {report:#}"));
    assert!(
        filter_seen < first,
        "the bus answered a probe begun {:?} before the derived filter was seen in force",
        filter_seen - first
    );

    // The store says the node is filtered: a flip done, nothing retired, ssh kept from the
    // operator's address.
    let state = store_state(root.path());
    assert_eq!(state["mode"], "converged");
    assert_eq!(state["flip"]["stage"], "done", "{state:#}");
    assert_eq!(
        state["flip"]["ssh_from"],
        json!([PEER_PUBLIC_V4.to_string()])
    );

    // Afterwards: an undeclared listener is refused (dropped unanswered), the declared bus
    // opening admitted, and the foundation's store only over the private network.
    let late = httpd(node, &www, &format!("{NODE_PUBLIC_V4}:{SERVICE}"), SERVICE);
    let check_after = |when: &str| {
        expect(
            outside,
            &[NODE_PUBLIC_V4.into()],
            SERVICE,
            Probe::TimedOut,
            &format!("an undeclared listener from outside {when}"),
        );
        expect(
            outside,
            &[NODE_PUBLIC_V4.into()],
            BUS,
            Probe::Reached,
            &format!("the declared bus opening from outside {when}"),
        );
        expect(
            outside,
            &[NODE_PUBLIC_V4.into()],
            STORE,
            Probe::TimedOut,
            &format!("the store from outside {when}"),
        );
        // ssh: from the operator's address and over the private network, never from outside.
        expect(
            peer,
            &[NODE_PUBLIC_V4.into(), NODE_PRIVATE_V4.into()],
            SSH,
            Probe::Reached,
            &format!("ssh from the operator's peer {when}"),
        );
        expect(
            outside,
            &[NODE_PUBLIC_V4.into(), NODE_PUBLIC_V6.into()],
            SSH,
            Probe::TimedOut,
            &format!("ssh from outside {when}"),
        );
    };
    check_after("after genesis");
    assert!(
        echoed(&mut session),
        "the operator's session was cut by genesis"
    );

    // A later apply of the converged declaration keeps the filter: removed by hand, a
    // reconcile loads it again.
    run_ok(node, &["nft", "delete", "table", "inet", "mesh_host"]);
    expect(
        outside,
        &[NODE_PUBLIC_V4.into()],
        SERVICE,
        Probe::Reached,
        "the undeclared listener with the filter removed by hand",
    );
    let again = mesh(&["reconcile", "--json"]);
    assert_eq!(again.status.code(), Some(0), "{}", shown(&again));
    check_after("after a reconcile");
    assert!(
        echoed(&mut session),
        "the operator's session after a reconcile"
    );
    drop(late);
    drop(sshd);
    drop(docker);
}
