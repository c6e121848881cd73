//! A hung ufw through the built binary: a stub `ufw` first on the host's PATH that, while
//! `$STUB/hang` exists, starts a `sleep` holding its stdout and exits at once (what a daemonising
//! helper or a hung hook does). The opening fails at the node's declared `firewall_s`, naming the
//! command and the deadline; the binary exits in bounded time with the `sleep` killed; and the
//! next apply, the stub handing over to the real ufw (with the default deadline), converges the
//! opening: the store's lock was let go. Without the deadline over the output the first apply would wait for the `sleep`.

use super::found::not_reached;
use super::ufw::ufw_with;
use super::*;
use crate::deadlines::alive;
use std::os::unix::fs::PermissionsExt;
use std::time::Instant;

#[test]
fn a_ufw_whose_grandchild_holds_its_output_fails_at_the_deadline_and_the_next_apply_runs() {
    let lab = new_lab();
    let net = adoption(&lab);
    let node = &net.node;
    let _listeners: Vec<_> = [SSH, SERVED, OPENED]
        .iter()
        .map(|p| node.listen_tcp(*p).expect("listener on the node"))
        .collect();
    let public = node_public();
    let ufw = ufw_with(
        &lab,
        node,
        &[
            &["allow", "22/tcp"],
            &["allow", "8080/tcp"],
            &["--force", "enable"],
        ],
    );
    not_reached(&net.peer, &public, OPENED, "not yet opened");

    let real = run_ok(node, &["sh", "-c", "command -v ufw"]);
    let stub = lab.dir().join("stub");
    std::fs::create_dir_all(&stub).unwrap();
    let program = stub.join("ufw");
    std::fs::write(
        &program,
        format!(
            "#!/bin/sh\n\
             if [ -f {stub}/hang ]; then\n  \
               sleep 1000 &\n  \
               echo $! >> {stub}/pids\n  \
               exit 0\n\
             fi\n\
             exec {real} \"$@\"\n",
            stub = stub.display(),
            real = real.trim()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "PATH={}:{}",
        stub.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let host = Host::wrapped(node, ufw.enter(&["env", &path]));
    let mut decl = declaration(&[opening("web/api", OPENED, "incoming")]);
    decl["settings"]["deadlines"] = json!({"firewall_s": 2});
    let file = host.dir.path().join("declaration.json");
    std::fs::write(&file, serde_json::to_vec_pretty(&decl).unwrap()).unwrap();

    std::fs::write(stub.join("hang"), "").unwrap();
    let started = Instant::now();
    let out = host.run(&["apply", file.to_str().unwrap(), "--json"]);
    let took = started.elapsed();
    assert_eq!(out.status.code(), Some(1), "{}\n{}", out.stdout, out.stderr);
    assert!(
        took < Duration::from_secs(60),
        "the apply took {took:?}: something waited for the sleep"
    );
    let report: Value = crate::util::contract(&out.stdout);
    assert_eq!(outcome(&report, "web/api"), "failed", "{report:#}");
    let entry = report["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["id"] == "web/api")
        .unwrap();
    let detail = entry["detail"].as_str().unwrap();
    assert!(
        detail.contains("ufw [")
            && detail.contains(
                "did not finish within 2 s and was killed (it had exited with status 0, but a \
                 process it started still held its output)"
            ),
        "{detail}"
    );
    let pids = std::fs::read_to_string(stub.join("pids")).unwrap();
    assert!(!pids.trim().is_empty());
    // A killed process dies when next scheduled: a moment on a loaded machine, where one that
    // was not killed lives on for its whole `sleep 1000`.
    let until = Instant::now() + Duration::from_secs(2);
    while pids.lines().any(alive) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    for pid in pids.lines() {
        assert!(!alive(pid), "the sleep {pid} outlived the deadline");
    }
    not_reached(
        &net.peer,
        &public,
        OPENED,
        "a failed opening admits nothing",
    );

    // The stub hands over to the real ufw: the next apply takes the lock and opens the port. It
    // has the default deadline: the real ufw, a Python program, can take more than 2 s to add a
    // rule on a loaded two-core machine.
    std::fs::remove_file(stub.join("hang")).unwrap();
    decl["settings"]
        .as_object_mut()
        .unwrap()
        .remove("deadlines");
    std::fs::write(&file, serde_json::to_vec_pretty(&decl).unwrap()).unwrap();
    let file = file.to_str().unwrap();
    let report = host.json(&["apply", file, "--json"]);
    assert_nothing_failed(&report);
    expect(
        &net.peer,
        &public,
        OPENED,
        Probe::Reached,
        "opened once ufw answers",
    );
    expect(&net.peer, &public, SERVED, Probe::Reached, "served, after");
}
