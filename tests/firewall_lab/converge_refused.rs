//! Converge, adopt and take through the built binary on a lab node when they do not fit (no
//! stored declaration, a node already converged or adopted, a module not declared), and a flip
//! or a return killed half-way, finished by the next act: the found firewall as saved, probed
//! with real connections.

use super::converge::{found_text, load_found, Kind};
use super::*;

/// Each act refused with its reason in the wrong state, and nothing changed.
#[test]
fn converge_adopt_and_take_refuse_what_does_not_fit() {
    let lab = new_lab();
    let net = adoption(&lab);
    let host = Host::new(&net.node);
    // No stored declaration.
    for args in [
        &["converge"][..],
        &["converge", "--preview"],
        &["adopt"],
        &["take", "app"],
    ] {
        let out = host.run(args);
        assert_eq!(
            out.status.code(),
            Some(3),
            "{args:?}: {}\n{}",
            out.stdout,
            out.stderr
        );
        assert!(
            out.stderr.contains("nothing has been applied"),
            "{}",
            out.stderr
        );
        assert!(!host.root().join("var").exists(), "{args:?} made a store");
    }
    let mut api = opening("api/port", OPENED, "incoming");
    api["module"] = json!("api");
    host.apply(&declaration(&[api]));
    let out = host.run(&["take", "nope"]);
    assert_eq!(out.status.code(), Some(2), "{}", out.stderr);
    assert!(
        out.stderr.contains("\"nope\"") && out.stderr.contains("api"),
        "{}",
        out.stderr
    );
    let out = host.run(&["adopt"]);
    assert_eq!(out.status.code(), Some(3), "{}", out.stderr);
    assert!(out.stderr.contains("adopted already"), "{}", out.stderr);
    let out = host.run(&["take", "api"]);
    assert!(out.success(), "{}", out.stderr);
    let out = host.run(&["take", "api"]);
    assert_eq!(out.status.code(), Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("already taken"), "{}", out.stderr);
    let out = host.run(&["converge"]);
    assert!(out.success(), "{}\n{}", out.stdout, out.stderr);
    let converged = std::fs::read(host.root().join("var/lib/mesh-host/state.json")).unwrap();
    for (args, code, says) in [
        (&["converge"][..], 3, "converged already"),
        (&["converge", "--preview"][..], 3, "converged already"),
        (&["take", "api"][..], 3, "converged"),
    ] {
        let out = host.run(args);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {}", out.stderr);
        assert!(out.stderr.contains(says), "{args:?}: {}", out.stderr);
    }
    assert_eq!(
        std::fs::read(host.root().join("var/lib/mesh-host/state.json")).unwrap(),
        converged,
        "a refused act changed the store"
    );
}

/// A flip or a return killed at each of its boundaries leaves a store that says what to finish:
/// the store's port is refused from outside the whole time, the next `converge` (or `adopt`)
/// finishes from what was saved, and the found firewall comes back as it was.
#[test]
fn a_flip_or_a_return_killed_half_way_is_finished_by_the_next_act() {
    for point in ["flip:saved", "flip:loaded", "return:restored"] {
        let lab = new_lab();
        let net = adoption(&lab);
        let node = &net.node;
        let host = Host::new(node);
        let root = host.root();
        let _listeners: Vec<lab::Process> = [OPENED, STORE]
            .iter()
            .map(|p| node.listen_tcp(*p).expect("a listener on the node"))
            .collect();
        load_found(node, &root, Kind::Nftables);
        let mut api = opening("api/port", OPENED, "incoming");
        api["module"] = json!("api");
        host.apply(&declaration(&[api]));
        let before = found_text(node, Kind::Nftables);
        let with = |args: &[&str], failpoint: Option<&str>| {
            let root = host.root();
            let fp = format!("MESH_HOST_FAILPOINT={}", failpoint.unwrap_or(""));
            let mut argv = vec!["env", &fp, MESH, "--root", root.to_str().unwrap()];
            argv.extend_from_slice(args);
            node.run(&argv).expect("running mesh-host")
        };
        let state = || -> Value {
            serde_json::from_slice(
                &std::fs::read(root.join("var/lib/mesh-host/state.json")).unwrap(),
            )
            .unwrap()
        };
        let killed = |out: &lab::Output| {
            use std::os::unix::process::ExitStatusExt;
            assert_eq!(
                out.status.signal(),
                Some(9),
                "{point}: not killed: {}\n{}",
                out.stdout,
                out.stderr
            );
        };
        if point.starts_with("return") {
            let out = with(&["converge"], None);
            assert!(out.success(), "{point}: {}\n{}", out.stdout, out.stderr);
            let out = with(&["adopt"], Some(point));
            killed(&out);
            assert!(
                state()["flip"].is_object(),
                "{point}: the store forgot the flip"
            );
            expect(&net.outside, &node_public(), STORE, Probe::TimedOut, point);
            let out = with(&["adopt", "--json"], None);
            assert!(out.success(), "{point}: {}\n{}", out.stdout, out.stderr);
        } else {
            let out = with(&["converge"], Some(point));
            killed(&out);
            assert_eq!(state()["flip"]["stage"], "saved", "{point}");
            expect(&net.outside, &node_public(), STORE, Probe::TimedOut, point);
            let out = with(&["converge", "--json"], None);
            assert!(
                out.success(),
                "{point}: finishing: {}\n{}",
                out.stdout,
                out.stderr
            );
            assert_eq!(state()["flip"]["stage"], "done", "{point}");
            let tables = run_ok(node, &["nft", "list", "tables"]);
            assert!(!tables.contains("inet filter"), "{point}: {tables}");
            expect(&net.outside, &node_public(), OPENED, Probe::Reached, point);
            expect(&net.outside, &node_public(), STORE, Probe::TimedOut, point);
            let out = with(&["adopt", "--json"], None);
            assert!(out.success(), "{point}: {}\n{}", out.stdout, out.stderr);
        }
        assert!(
            state()["flip"].is_null(),
            "{point}: the store still says flipped"
        );
        assert_eq!(
            found_text(node, Kind::Nftables),
            before,
            "{point}: the found firewall"
        );
        let mesh = run_ok(node, &["nft", "list", "table", "inet", "mesh_host"]);
        assert!(
            mesh.contains("chain guard") && !mesh.contains("chain input"),
            "{point}: {mesh}"
        );
        expect(&net.outside, &node_public(), OPENED, Probe::Reached, point);
        expect(&net.outside, &node_public(), STORE, Probe::TimedOut, point);
    }
}
