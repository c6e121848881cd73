//! A root other than `/` is never a way out of it, against the built binary: a bind mount inside
//! the root pointing outside, a symlinked store or `originals/`, and the machine's own service
//! and package managers are each refused before anything changes, naming why, with the directory
//! outside and the root left byte for byte as they were. Mounts are made in a mount namespace of
//! the run's own (`unshare --mount --propagation private`), so none reaches the machine.

use crate::util::{Node, Run, HOST_TOOLS};
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};

fn decl(resources: Value) -> Value {
    json!({"version": 1, "node": "n1", "mode": "converged", "taken": [], "resources": resources})
}

/// Every entry under `dir` with what it holds: a file's bytes, a link's target, a directory as
/// such. What a refused run must leave exactly as it was.
fn tree(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let t = std::fs::symlink_metadata(&p).unwrap().file_type();
            let what = if t.is_symlink() {
                format!("-> {}", std::fs::read_link(&p).unwrap().display())
            } else if t.is_dir() {
                stack.push(p.clone());
                "dir".to_string()
            } else {
                String::from_utf8_lossy(&std::fs::read(&p).unwrap()).into_owned()
            };
            out.push((p.strip_prefix(dir).unwrap().to_path_buf(), what));
        }
    }
    out.sort();
    out
}

/// `mesh-host --root ROOT apply DECL --json` in a fresh mount and network namespace, after each
/// `(source, target)` is bind-mounted there, with `env` and without the harness's request for
/// the machine's own tools.
fn apply_bound(node: &Node, binds: &[(&Path, &Path)], d: &Value, env: &[(&str, &str)]) -> Run {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), serde_json::to_vec(d).unwrap()).unwrap();
    let script = r#"set -e; while [ "$1" != -- ]; do mount --bind "$1" "$2"; shift 2; done; shift; exec "$@""#;
    let mut cmd = std::process::Command::new("unshare");
    cmd.args([
        "--mount",
        "--propagation",
        "private",
        "--net",
        "--",
        "sh",
        "-c",
        script,
        "sh",
    ]);
    for (s, t) in binds {
        cmd.arg(s).arg(t);
    }
    cmd.arg("--")
        .arg(env!("CARGO_BIN_EXE_mesh-host"))
        .arg("--root")
        .arg(node.root())
        .args(["apply", file.path().to_str().unwrap(), "--json"])
        .env_remove("MESH_HOST_FAILPOINT")
        .env_remove(HOST_TOOLS);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("running mesh-host");
    Run {
        code: out.status.code(),
        signal: out.status.signal(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `mesh-host --root ROOT apply DECL --preview --json` with `env` and without the harness's
/// request for the machine's own tools.
fn preview(node: &Node, d: &Value, env: &[(&str, &str)]) -> std::process::Output {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), serde_json::to_vec(d).unwrap()).unwrap();
    std::process::Command::new(env!("CARGO_BIN_EXE_mesh-host"))
        .arg("--root")
        .arg(node.root())
        .args([
            "apply",
            file.path().to_str().unwrap(),
            "--preview",
            "--json",
        ])
        .env_remove(HOST_TOOLS)
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

/// Applies `d` under the node's root with `env` (no harness request for the host's tools) and
/// proves it refused before anything (exit 3), naming `named` and that `what` would act on this
/// machine itself.
fn refused_naming(node: &Node, d: &Value, env: &[(&str, &str)], named: &str, what: &str) {
    let r = apply_bound(node, &[], d, env);
    assert_eq!(r.code, Some(3), "{}\n{}", r.stdout, r.stderr);
    let said = problems(&r);
    assert!(
        said.contains(&format!(
            "{named}: under --root {} the {what} would act on this machine itself, not on the \
             root",
            node.root().display()
        )),
        "{said}"
    );
}

/// The problems of a refusal printed with `--json`, joined.
fn problems(r: &Run) -> String {
    let v: Value = serde_json::from_str(&r.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}):\n{}\n{}", r.stdout, r.stderr));
    assert_eq!(v["refused"]["exit_code"], 3, "{}", r.stdout);
    v["refused"]["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Proves a directory bind-mounted inside the root from outside it is refused before anything is
/// written (exit 3, naming the path, the component and the mount): neither the found file's
/// original is copied from outside nor a declared file written there, and a file bind-mounted
/// over a declared one is refused the same way. Both directories are unchanged byte for byte.
#[test]
fn a_bind_mount_inside_the_root_is_refused_and_nothing_crosses_it() {
    let node = Node::new();
    node.write("/etc/other.conf", "the root's\n");
    std::fs::create_dir_all(node.path("/etc/app")).unwrap();
    node.write("/etc/single.conf", "the root's single\n");
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("app.conf"), "found outside\n").unwrap();
    std::fs::write(outside.path().join("single"), "a file outside\n").unwrap();
    let (root_before, outside_before) = (tree(node.root()), tree(outside.path()));
    let d = decl(json!([
        {"id": "app/conf", "type": "file", "path": "/etc/app/app.conf", "content": "declared\n"},
        {"id": "app/new", "type": "file", "path": "/etc/app/new.conf", "content": "declared\n"},
        {"id": "app/single", "type": "file", "path": "/etc/single.conf", "content": "declared\n"}
    ]));
    let app = node.path("/etc/app");
    let single = node.path("/etc/single.conf");
    let one = outside.path().join("single");
    let r = apply_bound(&node, &[(outside.path(), &app), (&one, &single)], &d, &[]);
    assert_eq!(r.code, Some(3), "{}\n{}", r.stdout, r.stderr);
    let said = problems(&r);
    for p in ["/etc/app/app.conf", "/etc/app/new.conf"] {
        assert!(
            said.contains(&format!(
                "{p}: /etc/app is on another mount than the root (mount "
            )) && said.contains(&format!("at {}", app.display())),
            "{said}"
        );
    }
    assert!(
        said.contains(
            "/etc/single.conf: /etc/single.conf is on another mount than the root (mount "
        ),
        "{said}"
    );
    assert!(
        said.contains("under a root other than / the host reads and writes nothing across"),
        "{said}"
    );
    assert_eq!(tree(outside.path()), outside_before, "written outside");
    assert_eq!(tree(node.root()), root_before, "the root changed");
}

/// Proves a symlinked `var/lib/mesh-host` (the store put outside the root) is refused before
/// anything changes, naming the link; nothing is written where it points, and the root holds
/// nothing new (the declared file is not written either).
#[test]
fn a_symlinked_store_is_refused_and_nothing_is_written_outside() {
    let node = Node::new();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("keep"), "outside\n").unwrap();
    std::fs::create_dir_all(node.path("/var/lib")).unwrap();
    std::os::unix::fs::symlink(outside.path(), node.path("/var/lib/mesh-host")).unwrap();
    node.write("/etc/app.conf", "found\n");
    let (root_before, outside_before) = (tree(node.root()), tree(outside.path()));
    let d = decl(json!([
        {"id": "app/conf", "type": "file", "path": "/etc/app.conf", "content": "declared\n"}
    ]));
    let r = apply_bound(&node, &[], &d, &[]);
    assert_eq!(r.code, Some(3), "{}\n{}", r.stdout, r.stderr);
    let said = problems(&r);
    assert!(
        said.contains(&format!(
            "store {}: /var/lib/mesh-host: /var/lib/mesh-host is a symbolic link",
            node.path("/var/lib/mesh-host").display()
        )),
        "{said}"
    );
    assert_eq!(tree(outside.path()), outside_before, "written outside");
    assert_eq!(tree(node.root()), root_before, "the root changed");
}

/// Proves a symlinked `originals/` in a real store is refused the same way before a found file
/// is taken over (its original would have been copied where the link points), and that a bind
/// mount over the store's directory is refused as a mount crossing.
#[test]
fn a_symlinked_or_mounted_store_inside_is_refused() {
    let node = Node::new();
    let outside = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(node.path("/var/lib/mesh-host")).unwrap();
    std::os::unix::fs::symlink(outside.path(), node.path("/var/lib/mesh-host/originals")).unwrap();
    node.write("/etc/app.conf", "found\n");
    let (root_before, outside_before) = (tree(node.root()), tree(outside.path()));
    let d = decl(json!([
        {"id": "app/conf", "type": "file", "path": "/etc/app.conf", "content": "declared\n"}
    ]));
    let r = apply_bound(&node, &[], &d, &[]);
    assert_eq!(r.code, Some(3), "{}\n{}", r.stdout, r.stderr);
    let said = problems(&r);
    assert!(
        said.contains("/var/lib/mesh-host/originals is a symbolic link"),
        "{said}"
    );
    assert_eq!(tree(outside.path()), outside_before, "written outside");
    assert_eq!(tree(node.root()), root_before, "the root changed");

    // The store's directory itself a bind mount of a directory outside.
    std::fs::remove_file(node.path("/var/lib/mesh-host/originals")).unwrap();
    let root_before = tree(node.root());
    let store = node.path("/var/lib/mesh-host");
    let r = apply_bound(&node, &[(outside.path(), &store)], &d, &[]);
    assert_eq!(r.code, Some(3), "{}\n{}", r.stdout, r.stderr);
    let said = problems(&r);
    assert!(
        said.contains("/var/lib/mesh-host is on another mount than the root (mount "),
        "{said}"
    );
    assert_eq!(tree(outside.path()), outside_before, "written outside");
    assert_eq!(tree(node.root()), root_before, "the root changed");
}

/// Proves the store's files are opened by name in the directory checked when the store was
/// opened, never by path: an action run part-way through the act (after the check) moves the
/// store's directory away and puts a link to a directory outside the root in its place, or puts
/// a link to outside at `originals/` and at the snapshot's temporary name: the found file taken
/// over after it has its original saved in the store's own directory (or, with `originals/` a
/// link, fails, named), the snapshot is written there, and nothing is written outside.
#[test]
fn links_swapped_into_the_store_during_an_act_are_never_followed() {
    for swap in ["directory", "files"] {
        let node = Node::new();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("keep"), "outside\n").unwrap();
        node.write("/etc/app.conf", "found\n");
        // A first apply makes the store (and its originals/ directory) as the host makes it.
        let first = decl(json!([
            {"id": "app/seed", "type": "file", "path": "/etc/seed.conf", "content": "seed\n"}
        ]));
        let r = apply_bound(&node, &[], &first, &[]);
        assert_eq!(r.code, Some(0), "{}\n{}", r.stdout, r.stderr);
        let store = node.path("/var/lib/mesh-host");
        std::fs::create_dir_all(store.join("originals")).unwrap();
        let out = outside.path().display().to_string();
        let plant = match swap {
            // The whole directory moved away and a link to outside put in its place.
            "directory" => format!("mv {s} {s}.moved && ln -s {out} {s}", s = store.display()),
            // Links at originals/ and at the snapshot's temporary name.
            _ => format!(
                "rm -rf {s}/originals && ln -s {out} {s}/originals && \
                 ln -s {out}/tmp {s}/state.json.tmp",
                s = store.display()
            ),
        };
        let marker = node.path("/swapped").display().to_string();
        let plant = format!("{plant} && touch {marker}");
        let outside_before = tree(outside.path());
        let d = decl(json!([
            {"id": "app/seed", "type": "file", "path": "/etc/seed.conf", "content": "seed\n"},
            {"id": "ops/swap", "type": "action", "run": ["sh", "-c", plant],
             "verify": ["test", "-e", marker]},
            {"id": "app/conf", "type": "file", "path": "/etc/app.conf", "content": "declared\n"}
        ]));
        let r = apply_bound(&node, &[], &d, &[]);
        assert_eq!(
            tree(outside.path()),
            outside_before,
            "{swap}: written outside:\n{}\n{}",
            r.stdout,
            r.stderr
        );
        let kept = match swap {
            "directory" => node.path("/var/lib/mesh-host.moved"),
            _ => store.clone(),
        };
        let state: Value =
            serde_json::from_str(&std::fs::read_to_string(kept.join("state.json")).unwrap())
                .or_else(|_| {
                    // A sealed snapshot opens with its checksum line.
                    let text = std::fs::read_to_string(kept.join("state.json")).unwrap();
                    serde_json::from_str(text.split_once('\n').unwrap().1)
                })
                .unwrap();
        let ids: Vec<&str> = state["owned"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|o| o["id"].as_str())
            .collect();
        match swap {
            "directory" => {
                assert!(ids.contains(&"app/conf"), "{swap}: {ids:?}\n{}", r.stdout);
                // The original was saved in the store's own (moved) directory.
                let originals: Vec<_> = std::fs::read_dir(kept.join("originals"))
                    .unwrap()
                    .flatten()
                    .map(|e| std::fs::read_to_string(e.path()).unwrap())
                    .collect();
                assert_eq!(originals, ["found\n"], "{swap}");
                assert_eq!(r.code, Some(0), "{swap}: {}\n{}", r.stdout, r.stderr);
            }
            _ => {
                // originals/ is a link now: the original cannot be saved through it, so the
                // takeover fails, named, and nothing lands where the link points.
                assert_eq!(r.code, Some(1), "{swap}: {}\n{}", r.stdout, r.stderr);
                assert_eq!(r.outcome("app/conf"), "failed", "{}", r.stdout);
                assert!(
                    r.stdout.contains(&format!(
                        "originals directory {}: a symbolic link, not followed",
                        store.join("originals").display()
                    )),
                    "{}",
                    r.stdout
                );
                assert!(!ids.contains(&"app/conf"), "{swap}: {ids:?}");
                assert!(
                    std::fs::symlink_metadata(store.join("state.json"))
                        .unwrap()
                        .is_file(),
                    "{swap}: the snapshot is a file of the store's own"
                );
            }
        }
    }
}

/// Stands in for `systemctl`, `dpkg-query`, `dpkg`, `apt-get` and `apt`: records every call in
/// `$STUB/calls` and answers as a machine with nothing would.
const RECORDER: &str = r#"#!/bin/sh
echo "$(basename "$0") $*" >> "$STUB/calls"
case "$(basename "$0")" in
  systemctl) printf 'LoadState=not-found\nActiveState=inactive\nUnitFileState=\n' ;;
  dpkg-query) echo "dpkg-query: no packages found matching $*" >&2; exit 1 ;;
esac
exit 0
"#;

/// Proves declared services and packages under a throw-away root never reach the machine's own
/// service and package managers: with recording stubs first on PATH, the apply and its preview
/// are refused with exit 3 naming each resource and why, no stub is called and the root is
/// unchanged. The same stubs are called once the harness asks for the machine's tools, so the
/// record would have shown a call.
#[test]
fn services_and_packages_under_a_root_never_touch_the_machine() {
    let node = Node::new();
    let stub = tempfile::tempdir().unwrap();
    let bin = stub.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for prog in ["systemctl", "dpkg-query", "dpkg", "apt-get", "apt"] {
        let p = bin.join(prog);
        std::fs::write(&p, RECORDER).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let path = format!("{}:/usr/sbin:/usr/bin:/sbin:/bin", bin.display());
    let home = stub.path().display().to_string();
    let env = [("PATH", path.as_str()), ("STUB", home.as_str())];
    let d = decl(json!([
        {"id": "web/nginx", "module": "web", "type": "service", "name": "nginx.service",
         "state": "running", "enabled": true},
        {"id": "fun/sl", "module": "fun", "type": "package", "name": "sl"}
    ]));
    let root_before = tree(node.root());
    let calls = || std::fs::read_to_string(stub.path().join("calls")).unwrap_or_default();
    refused_naming(
        &node,
        &d,
        &env,
        "web/nginx (service nginx.service), fun/sl (package sl)",
        "service and package managers",
    );
    assert_eq!(calls(), "", "the machine's tools were called");
    assert_eq!(tree(node.root()), root_before, "the root changed");

    // The preview is refused alike, and calls nothing either.
    let out = preview(&node, &d, &env);
    assert_eq!(out.status.code(), Some(3), "{:?}", out);
    assert_eq!(calls(), "", "the preview called the machine's tools");
    assert_eq!(tree(node.root()), root_before, "the root changed");

    // Asked for explicitly, as the lab asks, the same stubs are what the host calls.
    let r = apply_bound(&node, &[], &d, &[env[0], env[1], (HOST_TOOLS, "1")]);
    assert_ne!(r.code, Some(3), "{}\n{}", r.stdout, r.stderr);
    // (The stub knows no unit, so the service fails and the act stops there.)
    let called = calls();
    assert!(called.starts_with("systemctl show "), "{called}");
}

/// Proves containers under a root other than `/` are refused before anything, like services and
/// packages (exit 3, each named): the `docker` and `podman` on PATH (recording stubs) are never
/// called, and neither engine's socket (a listener of the test's, named by `DOCKER_HOST` and
/// `CONTAINER_HOST`) is connected to; the preview alike. Asked for explicitly, the runtime is
/// what the host drives.
#[test]
fn containers_under_a_root_never_touch_the_machines_engine() {
    let node = Node::new();
    let stub = tempfile::tempdir().unwrap();
    let bin = stub.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for prog in ["docker", "podman"] {
        let p = bin.join(prog);
        std::fs::write(&p, RECORDER).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let sockets: Vec<std::os::unix::net::UnixListener> = ["docker.sock", "podman.sock"]
        .iter()
        .map(|s| {
            let l = std::os::unix::net::UnixListener::bind(stub.path().join(s)).unwrap();
            l.set_nonblocking(true).unwrap();
            l
        })
        .collect();
    let asked = || sockets.iter().filter(|l| l.accept().is_ok()).count();
    let path = format!("{}:/usr/sbin:/usr/bin:/sbin:/bin", bin.display());
    let home = stub.path().display().to_string();
    let docker_host = format!("unix://{}/docker.sock", stub.path().display());
    let container_host = format!("unix://{}/podman.sock", stub.path().display());
    let env = [
        ("PATH", path.as_str()),
        ("STUB", home.as_str()),
        ("DOCKER_HOST", docker_host.as_str()),
        ("CONTAINER_HOST", container_host.as_str()),
    ];
    let d = decl(json!([
        {"id": "web/app", "module": "web", "type": "container", "name": "root-web",
         "image": "lab/busybox:1", "command": ["/bin/httpd", "-f", "-p", "80"]},
        {"id": "db/cache", "module": "db", "type": "container", "name": "root-cache",
         "image": "lab/busybox:1", "command": ["/bin/sleep", "1000"]}
    ]));
    let root_before = tree(node.root());
    let calls = || std::fs::read_to_string(stub.path().join("calls")).unwrap_or_default();
    refused_naming(
        &node,
        &d,
        &env,
        "web/app (container root-web), db/cache (container root-cache)",
        "container runtime",
    );
    assert_eq!(calls(), "", "the machine's container tools were called");
    assert_eq!(asked(), 0, "an engine's socket was asked");
    assert_eq!(tree(node.root()), root_before, "the root changed");

    // The preview is refused alike, and asks nothing either.
    let out = preview(&node, &d, &env);
    assert_eq!(out.status.code(), Some(3), "{:?}", out);
    assert_eq!(
        calls(),
        "",
        "the preview called the machine's container tools"
    );
    assert_eq!(asked(), 0, "the preview asked an engine's socket");
    assert_eq!(tree(node.root()), root_before, "the root changed");

    // Asked for explicitly, as the lab asks, the runtime is what the host drives: its socket
    // (which answers nothing here) or its CLI (the stub) is reached.
    let r = apply_bound(
        &node,
        &[],
        &d,
        &[env[0], env[1], env[2], env[3], (HOST_TOOLS, "1")],
    );
    assert_ne!(r.code, Some(3), "{}\n{}", r.stdout, r.stderr);
    assert!(
        !calls().is_empty() || asked() > 0,
        "the runtime was not reached with the host's tools asked for:\n{}\n{}",
        r.stdout,
        r.stderr
    );
}

/// Proves the resident host, which claims the store without a declaration (its run lock and pid
/// file live there), refuses a symlinked store too: `run` fails at once (exit 1) naming the link,
/// and nothing is written where it points.
#[test]
fn the_resident_host_refuses_a_symlinked_store() {
    let node = Node::new();
    let outside = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(node.path("/var/lib")).unwrap();
    std::os::unix::fs::symlink(outside.path(), node.path("/var/lib/mesh-host")).unwrap();
    let (root_before, outside_before) = (tree(node.root()), tree(outside.path()));
    let args = ["run"];
    // A resident host that was not refused would run until stopped: `timeout` bounds it.
    let out = std::process::Command::new("timeout")
        .args(["30", "unshare", "--net", "--"])
        .arg(env!("CARGO_BIN_EXE_mesh-host"))
        .arg("--root")
        .arg(node.root())
        .args(args)
        .env_remove(HOST_TOOLS)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
    assert!(
        stderr.contains("/var/lib/mesh-host: /var/lib/mesh-host is a symbolic link"),
        "{args:?}: {stderr}"
    );
    assert_eq!(
        tree(outside.path()),
        outside_before,
        "{args:?} wrote outside"
    );
    assert_eq!(tree(node.root()), root_before, "{args:?} changed the root");
}
