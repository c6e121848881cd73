//! A node back after a long absence: while its link is cut it misses many declarations, each
//! changing the same 5,000 files; on reconnecting it applies only the newest (one jump of 5,000
//! files changed at once) and reports the others as superseded, never applying them.

use super::{bed, enrolled, linked};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// Files in the jump.
const FILES: usize = 5_000;
/// Declarations sent while the node is away (versions 2 to 1 + MISSED).
const MISSED: u64 = 12;
const WAIT: Duration = Duration::from_secs(240);

fn decl(node: &str, version: u64) -> Value {
    let resources: Vec<Value> = (0..FILES)
        .map(|i| {
            json!({"id": format!("f{i:05}"), "type": "file", "path": format!("/srv/absence/f{i:05}"),
                   "content": format!("version {version} of file {i}\n"), "mode": "0644"})
        })
        .collect();
    json!({"version": 1, "node": node, "mode": "converged", "taken": [], "resources": resources})
}

#[test]
fn a_node_back_after_missing_many_declarations_applies_only_the_newest() {
    let bed = bed();
    let to = bed.rabbit.addr().parse().unwrap();
    let relay = lab::Relay::start(&bed.node, to).unwrap();
    let port = relay.port();
    let mut ctl = lab::Controller::connect_to(&bed.rabbit, vec![relay.addr()]).unwrap();
    let node = "run-absence";
    let (_d, r) = enrolled(bed, &mut ctl, node);
    let host = bed.resident(&r);
    linked(&mut ctl, node, Duration::from_secs(60));
    ctl.declare(node, 1, Duration::from_secs(3600), decl(node, 1))
        .unwrap();
    ctl.wait_for(node, "report", WAIT, |p| p["version"] == 1)
        .unwrap_or_else(|| panic!("no report of version 1:\n{}", host.log()));
    assert_eq!(
        std::fs::read_to_string(r.join("srv/absence/f04999")).unwrap(),
        "version 1 of file 4999\n"
    );

    // The network goes away; the mesh goes on declaring.
    relay.cut();
    assert!(
        host.wait_log("unlinked", 1, Duration::from_secs(30)),
        "{}",
        host.log()
    );
    let newest = 1 + MISSED;
    for v in 2..=newest {
        ctl.declare(node, v, Duration::from_secs(3600), decl(node, v))
            .unwrap();
    }
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        std::fs::read_to_string(r.join("srv/absence/f00000")).unwrap(),
        "version 1 of file 0\n",
        "nothing arrives while the link is cut"
    );

    // It comes back: one report, of the newest, naming the others superseded.
    let back = lab::Relay::start_at(&bed.node, port, to).unwrap();
    let started = Instant::now();
    let report = ctl
        .wait_for(node, "report", WAIT, |p| p["version"].as_u64() > Some(1))
        .unwrap_or_else(|| panic!("no report after reconnecting:\n{}", host.log()))
        .payload;
    let took = started.elapsed();
    assert_eq!(report["version"], newest, "{}", report["superseded"]);
    let superseded: Vec<u64> = (2..newest).collect();
    assert_eq!(report["superseded"], json!(superseded));
    let entries = report["report"]["entries"].as_array().unwrap();
    assert_eq!(entries.len(), FILES);
    assert!(
        entries.iter().all(|e| e["outcome"] == "changed"),
        "every file changed at once"
    );
    for i in [0, 2_500, 4_999] {
        assert_eq!(
            std::fs::read_to_string(r.join(format!("srv/absence/f{i:05}"))).unwrap(),
            format!("version {newest} of file {i}\n")
        );
    }
    // The older versions were never applied: the log names one apply from the link after the
    // reconnect, and no other report follows.
    assert_eq!(
        host.log()
            .matches("applied a declaration from the link")
            .count(),
        2,
        "{}",
        host.log()
    );
    assert!(
        ctl.wait_for(node, "report", Duration::from_secs(3), |_| true)
            .is_none(),
        "a superseded declaration was reported"
    );
    eprintln!(
        "back after {MISSED} missed declarations: the jump of {FILES} files reported in {took:?}"
    );
    drop(back);
    drop(host);
}
