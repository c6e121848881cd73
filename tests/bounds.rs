//! Bounded in what it reads and keeps, against the built binary: a child printing a gigabyte, a
//! declaration that is not a regular file or is too large, and temporary files that never take
//! another's name or outlive an error.

use crate::util::{measured, Node};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const GIB: u64 = 1 << 30;
/// The most the host may hold resident while it reads a gigabyte: 50 MiB.
const BOUND_KIB: i64 = 50 * 1024;

fn decl(resources: Value) -> Value {
    json!({"version": 1, "node": "workstation", "mode": "converged", "taken": [],
           "settings": {"ports": {"store": 5432, "bus": 5672, "broker_management": 15672,
                                  "registry": 5000, "hub": 51820}},
           "resources": resources})
}

fn store_bytes(node: &Node) -> u64 {
    ["state.json", "state.journal"]
        .iter()
        .map(|f| {
            std::fs::metadata(node.path(&format!("/var/lib/mesh-host/{f}"))).map_or(0, |m| m.len())
        })
        .sum()
}

/// A failing action whose verify prints 1 GiB on `stream` and then one line on stderr.
fn failing_verify(node: &Node, stream: &str) -> (i32, String, i64, Duration) {
    let verify = format!(
        "head -c {GIB} /dev/zero {stream}; echo 'verify: the migration is not done' >&2; exit 1"
    );
    let d = decl(
        json!([{"id": "db/migrate", "type": "action", "run": ["true"],
                         "verify": ["sh", "-c", verify]}]),
    );
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), serde_json::to_vec(&d).unwrap()).unwrap();
    let started = Instant::now();
    let (code, out, rss) = measured(node, &["apply", file.path().to_str().unwrap(), "--json"]);
    (code, out, rss, started.elapsed())
}

/// Proves a child's output is kept bounded however much it prints: an action whose verify
/// fails after 1 GiB on stderr (it drove the host to the OOM killer), and one after 1 GiB on
/// stdout (1.05 GB RSS), each fail with the verify's last line in the report, a peak RSS under
/// 50 MiB and a store under 1 MiB (201 MB after 16 MiB of stderr before).
#[test]
fn a_verify_printing_a_gibibyte_costs_bounded_memory_and_store() {
    for stream in [">&2", ""] {
        let node = Node::new();
        let (code, out, rss, took) = failing_verify(&node, stream);
        assert_eq!(code, 1, "{out}");
        let report: Value = serde_json::from_str(&out).expect("the report is JSON");
        let entry = &report["entries"][0];
        let detail = entry["detail"].as_str().unwrap_or_default();
        assert_eq!(entry["outcome"], "failed", "{out}");
        assert!(
            detail.ends_with("verify: the migration is not done"),
            "{detail}"
        );
        assert!(detail.len() < 2048, "a detail of {} bytes", detail.len());
        let store = store_bytes(&node);
        eprintln!(
            "verify printing 1 GiB (twice) on {}: exit {code} in {took:?}, peak RSS {rss} KiB, \
             store {store} bytes",
            if stream.is_empty() {
                "stdout"
            } else {
                "stderr"
            }
        );
        assert!(
            (1024..BOUND_KIB).contains(&rss),
            "peak RSS {rss} KiB: read at all, and under {BOUND_KIB} KiB"
        );
        assert!(store > 0 && store < 1 << 20, "store of {store} bytes");
    }
}
