//! Times genesis's preflight on a lab machine in use the way ADR 0100 measured the control-node —
//! 60 running containers (each publishing a port) and 100 listeners of its own — beside
//! `ss -ltnp` plus `docker ps` on the same machine. Run as root:
//!
//! ```text
//! cargo build --release --bin mesh-host --example preflight_bench
//! target/release/examples/preflight_bench
//! ```
//!
//! It finds the binary beside its own directory (`target/release/mesh-host`), or at `$MESH_HOST`.
//! The machine is a lab namespace with a real Docker engine in it; nothing touches the machine's
//! own namespace. Two figures are timed: `mesh-host inventory --json`, the preflight's read, and
//! `mesh-host genesis --adopted`, which reads the same and runs every check, and here stops at
//! them (exit 3) because one of the containers holds the registry's port. Every command, the
//! baseline included, runs through the same `nsenter --net`, so that cost is on both sides.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use lab::{Lab, Machine, Process};

const CONTAINERS: u16 = 60;
const LISTENERS: u16 = 100;
const RUNS: usize = 7;
/// The first container publishes the registry's port, as the control-node's predecessor does.
const REGISTRY: u16 = 5000;

fn mesh_host() -> PathBuf {
    if let Some(p) = std::env::var_os("MESH_HOST") {
        return PathBuf::from(p);
    }
    let me = std::env::current_exe().expect("the example's own path");
    let beside = me
        .parent()
        .and_then(|examples| examples.parent())
        .map(|profile| profile.join("mesh-host"))
        .expect("the example lives in target/PROFILE/examples");
    assert!(
        beside.exists(),
        "{} is missing: build it with `cargo build --release --bin mesh-host`, or set MESH_HOST",
        beside.display()
    );
    beside
}

/// Runs `cmd` to completion and returns how long it took; `ok` says which exit codes are right.
fn timed(mut cmd: Command, ok: &[i32]) -> (Duration, String) {
    let start = Instant::now();
    let out = cmd.output().expect("starting a timed command");
    let took = start.elapsed();
    let code = out.status.code().unwrap_or(-1);
    assert!(
        ok.contains(&code),
        "{cmd:?} exited {code}:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (took, String::from_utf8_lossy(&out.stdout).into_owned())
}

fn in_node(node: &Machine, docker_host: &str, argv: &[&str]) -> Command {
    let mut cmd = node.command(argv);
    cmd.env("DOCKER_HOST", docker_host)
        .env_remove("CONTAINER_HOST")
        .env_remove("DOCKER_CONTEXT");
    cmd
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Minimum and median of a set of timings, in milliseconds.
fn summary(mut t: Vec<Duration>) -> (f64, f64) {
    t.sort();
    (ms(t[0]), ms(t[t.len() / 2]))
}

fn main() {
    let mesh = mesh_host();
    let lab = Lab::new().expect("the lab needs root, iproute2 and nsenter");
    let node = lab.machine("node").expect("a lab machine");
    let docker = node
        .start_docker(&lab.dir().join("docker"))
        .expect("a Docker engine in the machine (docker.io, busybox-static)");
    let host = docker.docker_host().to_string();

    eprintln!("starting {CONTAINERS} containers and {LISTENERS} listeners…");
    let started = Instant::now();
    for i in 0..CONTAINERS {
        let port = if i == 0 { REGISTRY } else { 20000 + i };
        docker
            .run_container(
                &format!("predecessor-{i:02}"),
                &["-p", &format!("{port}:80")],
                &["/bin/httpd", "-f", "-p", "80", "-h", "/www"],
            )
            .expect("a predecessor container");
    }
    let www = lab.dir().join("www");
    std::fs::create_dir_all(&www).unwrap();
    let listeners: Vec<Process> = (0..LISTENERS)
        .map(|i| {
            let port = 30000 + i;
            let mut p = node
                .spawn(&[
                    "busybox",
                    "httpd",
                    "-f",
                    "-p",
                    &port.to_string(),
                    "-h",
                    www.to_str().unwrap(),
                ])
                .expect("busybox httpd (busybox-static)");
            node.wait_listening(&mut p, port).expect("a listener");
            p
        })
        .collect();
    eprintln!("bed ready in {:.0} s", started.elapsed().as_secs_f64());

    // The preflight sees the whole bed.
    let (_, inv) = timed(
        in_node(
            &node,
            &host,
            &[mesh.to_str().unwrap(), "inventory", "--json"],
        ),
        &[0],
    );
    let inv: serde_json::Value = serde_json::from_str(&inv).expect("inventory JSON");
    let containers = inv["containers"].as_array().unwrap().len();
    let sockets = inv["listeners"].as_array().unwrap().len();
    assert_eq!(containers, usize::from(CONTAINERS), "containers counted");
    assert!(
        sockets >= usize::from(LISTENERS),
        "listeners counted: {sockets}"
    );
    let (_, ss) = timed(in_node(&node, &host, &["ss", "-ltnpH"]), &[0]);
    eprintln!(
        "inventory: {containers} containers, {sockets} listening sockets (ss -ltn: {} TCP)",
        ss.lines().count()
    );

    let root = tempfile::tempdir().unwrap();
    let genesis = [
        mesh.to_str().unwrap(),
        "--root",
        root.path().to_str().unwrap(),
        "genesis",
        "--adopted",
        "--node",
        "bench",
    ];
    let names: Vec<String> = (0..CONTAINERS)
        .map(|i| format!("predecessor-{i:02}"))
        .collect();
    let mut inspect = vec!["docker", "container", "inspect"];
    inspect.extend(names.iter().map(String::as_str));
    let (mut inventory, mut preflight, mut baseline) = (Vec::new(), Vec::new(), Vec::new());
    let mut runtime = Vec::new();
    for _ in 0..RUNS {
        inventory.push(
            timed(
                in_node(
                    &node,
                    &host,
                    &[mesh.to_str().unwrap(), "inventory", "--json"],
                ),
                &[0],
            )
            .0,
        );
        let (took, _) = timed(in_node(&node, &host, &genesis), &[3]);
        preflight.push(took);
        let (a, _) = timed(in_node(&node, &host, &["ss", "-ltnp"]), &[0]);
        let (b, _) = timed(in_node(&node, &host, &["docker", "ps"]), &[0]);
        baseline.push(a + b);
        // What the preflight asks the runtime: the listing, then one inspect naming them all.
        let (c, _) = timed(
            in_node(&node, &host, &["docker", "ps", "--format", "{{.Names}}"]),
            &[0],
        );
        let (d, _) = timed(in_node(&node, &host, &inspect), &[0]);
        runtime.push(c + d);
    }
    assert!(
        !root.path().join("var/lib/mesh-host").exists(),
        "the refused genesis made a store"
    );

    println!(
        "preflight on {CONTAINERS} running containers, {sockets} listening sockets ({LISTENERS} listener processes + Docker's proxies), {RUNS} runs"
    );
    println!("{:<46} {:>8} {:>10}", "", "min ms", "median ms");
    let runtime_row = format!("  docker ps + docker container inspect ({CONTAINERS})");
    for (what, t) in [
        ("mesh-host inventory --json", inventory),
        ("mesh-host genesis --adopted (refused, exit 3)", preflight),
        ("ss -ltnp + docker ps", baseline),
        (runtime_row.as_str(), runtime),
    ] {
        let (min, median) = summary(t);
        println!("{what:<46} {min:>8.0} {median:>10.0}");
        // The same, for bench/run's table: what, N, min, median, the row it is compared with.
        let vs = if what.starts_with("mesh-host") {
            "ss -ltnp + docker ps"
        } else {
            ""
        };
        println!(
            "ROW\t{}\t{CONTAINERS}\t{min:.1}\t{median:.1}\t{vs}",
            what.trim()
        );
    }
    drop(listeners);
}
