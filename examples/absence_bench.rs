//! Times a node back after a long absence (`bench/run --only absence`), as whole processes: a
//! real RabbitMQ, the controller's stand-in and `mesh-host run` in a lab namespace reaching the
//! broker through a relay. The node applies a declaration of N files, its link is cut, the mesh
//! declares K newer versions each changing all N files, the link comes back; the row is the time
//! from the node's first heartbeat after reconnecting to the verified report of the newest (the
//! one it applies; the others are superseded). The baseline, in the same run, is the same binary's
//! `mesh-host apply` of that newest declaration over a root holding the first (the bare jump,
//! no link).
//!
//! `--n N` (files, default 5000), `--missed K` (default 12), `--runs R` (default 3). It finds the
//! binary at `$MESH_HOST` or beside its own directory (`target/release/mesh-host`). Prints
//! `ROW\tWHAT\tN\tMIN_MS\tMEDIAN_MS\tVS` lines for bench/run.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(600);

fn mesh_host() -> PathBuf {
    if let Some(p) = std::env::var_os("MESH_HOST") {
        return PathBuf::from(p);
    }
    let me = std::env::current_exe().expect("the example's own path");
    me.parent()
        .and_then(|examples| examples.parent())
        .map(|profile| profile.join("mesh-host"))
        .expect("the example lives in target/PROFILE/examples")
}

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name}: not a number: {v}"))
        })
        .unwrap_or(default)
}

fn decl(node: &str, n: u64, version: u64) -> Value {
    let resources: Vec<Value> = (0..n)
        .map(|i| {
            json!({"id": format!("f{i:05}"), "type": "file", "path": format!("/srv/absence/f{i:05}"),
                   "content": format!("version {version} of file {i}\n"), "mode": "0644"})
        })
        .collect();
    json!({"version": 1, "node": node, "mode": "converged", "taken": [], "resources": resources})
}

fn stats(mut ms: Vec<f64>) -> (f64, f64) {
    ms.sort_by(f64::total_cmp);
    let mid = ms.len() / 2;
    let median = if ms.len() % 2 == 1 {
        ms[mid]
    } else {
        (ms[mid - 1] + ms[mid]) / 2.0
    };
    (ms[0], median)
}

fn root_under(dir: &Path, name: &str) -> PathBuf {
    let r = dir.join(name);
    let _ = std::fs::remove_dir_all(&r);
    std::fs::create_dir_all(&r).expect("a node root");
    r
}

fn main() {
    let (n, missed, runs) = (arg("--n", 5000), arg("--missed", 12), arg("--runs", 3));
    let bin = mesh_host();
    let bin = bin.to_str().expect("a UTF-8 path");
    // On disk, not in memory: fsync must cost what it costs on a node.
    let work = tempfile::Builder::new()
        .prefix("mesh-absence.")
        .tempdir_in(std::env::var("BENCH_TMPDIR").unwrap_or_else(|_| "/var/tmp".into()))
        .expect("a work directory");
    // bench/run runs in a network namespace of its own, whose loopback starts down; the broker
    // listens there.
    let up = std::process::Command::new("ip")
        .args(["link", "set", "lo", "up"])
        .status()
        .expect("running ip link set lo up");
    assert!(up.success(), "ip link set lo up: {up}");
    let lab = lab::Lab::new().expect("lab");
    let machine = lab.machine("abs").expect("the node's namespace");
    let rabbit = lab::Rabbit::start().expect("a RabbitMQ broker with TLS");
    let to = rabbit.addr().parse().expect("the broker's address");
    let mut relay = lab::Relay::start(&machine, to).expect("a relay");
    let port = relay.port();
    let mut ctl = lab::Controller::connect_to(&rabbit, vec![relay.addr()]).expect("controller");
    let newest = 1 + missed;
    let first_file = work.path().join("first.json");
    let newest_file = work.path().join("newest.json");

    let (mut linked_ms, mut bare_ms) = (Vec::new(), Vec::new());
    for run in 0..runs {
        let node = format!("absence-{run}");
        std::fs::write(&first_file, decl(&node, n, 1).to_string()).unwrap();
        std::fs::write(&newest_file, decl(&node, n, newest).to_string()).unwrap();

        // The baseline: the bare jump, `mesh-host apply` of the newest over the first.
        let root = root_under(work.path(), "bare");
        let apply = |file: &Path| {
            let out = machine
                .run_timeout(
                    &[
                        bin,
                        "--root",
                        root.to_str().unwrap(),
                        "apply",
                        file.to_str().unwrap(),
                    ],
                    WAIT,
                )
                .expect("running mesh-host apply");
            assert!(out.success(), "apply failed: {}", out.stderr);
        };
        apply(&first_file);
        let t = Instant::now();
        apply(&newest_file);
        bare_ms.push(t.elapsed().as_secs_f64() * 1000.0);

        // Over the link: enrolled, linked, the first applied, then away while K are declared.
        let root = root_under(work.path(), "linked");
        let issued = ctl.issue(&node, Duration::from_secs(3600)).unwrap();
        let out = machine
            .run_timeout(
                &[
                    bin,
                    "--root",
                    root.to_str().unwrap(),
                    "enrol",
                    "--token",
                    &issued.text,
                ],
                Duration::from_secs(120),
            )
            .expect("running mesh-host enrol");
        assert!(out.success(), "enrol failed: {}", out.stderr);
        ctl.take_enrolments(Duration::from_secs(20)).unwrap();
        let mut host = machine
            .spawn_env(
                &[
                    bin,
                    "--root",
                    root.to_str().unwrap(),
                    "run",
                    "--heartbeat",
                    "1",
                    "--legacy-period",
                    "0",
                ],
                &[("RUST_LOG".into(), "info".into())],
            )
            .expect("starting mesh-host run");
        ctl.wait_for(&node, "heartbeat", WAIT, |_| true)
            .expect("linked");
        ctl.declare(&node, 1, Duration::from_secs(7200), decl(&node, n, 1))
            .unwrap();
        ctl.wait_for(&node, "report", WAIT, |p| p["version"] == 1)
            .unwrap_or_else(|| panic!("no report of version 1:\n{}", host.log()));
        relay.cut();
        std::thread::sleep(Duration::from_secs(2));
        for v in 2..=newest {
            ctl.declare(&node, v, Duration::from_secs(7200), decl(&node, n, v))
                .unwrap();
        }
        relay = lab::Relay::start_at(&machine, port, to).expect("the relay back");
        // From the first heartbeat after the reconnect to the newest's report.
        let back = ctl
            .wait_for(&node, "heartbeat", WAIT, |p| p["unlinked_s"].is_u64())
            .unwrap_or_else(|| panic!("no heartbeat after the reconnect:\n{}", host.log()));
        let report = ctl
            .wait_for(&node, "report", WAIT, |p| p["version"].as_u64() > Some(1))
            .unwrap_or_else(|| panic!("no report after the reconnect:\n{}", host.log()));
        assert_eq!(report.payload["version"], newest, "only the newest applied");
        assert_eq!(
            report.payload["superseded"].as_array().map(Vec::len),
            Some(missed as usize - 1)
        );
        linked_ms.push(report.at.duration_since(back.at).as_secs_f64() * 1000.0);
        host.terminate(Duration::from_secs(10));
        eprintln!(
            "absence_bench: run {run}: bare {:.1} ms, linked {:.1} ms",
            bare_ms[run as usize], linked_ms[run as usize]
        );
    }
    let bare = "apply of the newest declaration by hand, N files changed";
    let (min, med) = stats(bare_ms);
    println!("ROW\t{bare}\t{n}\t{min:.1}\t{med:.1}\t");
    let (min, med) = stats(linked_ms);
    println!(
        "ROW\tback after {missed} missed declarations: reconnect to the newest's report, N files changed\t{n}\t{min:.1}\t{med:.1}\t{bare}"
    );
}
