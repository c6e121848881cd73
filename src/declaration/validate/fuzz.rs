//! The declaration parser fuzzed coverage-guided (bolero): any bytes read as a declaration's
//! text never panic, never allocate past the harness's bound, and what is accepted writes out
//! and reads back as itself. The corpus is in `__fuzz__/` beside this file.

use super::parse;
use crate::declaration::Source;
use fuzz::Rng;
use serde_json::{json, Value};

/// A declaration of a few resources of every kind, valid or nearly.
fn declaration(rng: &mut Rng) -> Vec<u8> {
    let mut resources = Vec::new();
    for i in 0..rng.below(5) {
        let id = format!("m/r{i}");
        resources.push(match rng.below(5) {
            0 => json!({"id": id, "type": "file", "path": format!("/etc/{}", rng.word(6)),
                        "content": rng.word(12), "mode": "0644"}),
            1 => json!({"id": id, "type": "directory", "path": format!("/srv/{i}")}),
            2 => {
                json!({"id": id, "type": "action", "run": ["true"], "verify": ["test", "-e", "x"]})
            }
            3 => json!({"id": id, "type": "opening", "port": 1 + rng.below(65535),
                        "proto": *rng.pick(&["tcp", "udp"]), "from": "anywhere"}),
            _ => json!({"id": id, "type": "service", "name": format!("s{i}"), "state": "running"}),
        });
    }
    let doc: Value = json!({
        "version": 1, "node": "workstation", "mode": *rng.pick(&["adopted", "converged"]),
        "taken": [],
        "settings": {"ports": {"store": 5432, "bus": 5672, "broker_management": 15672,
                               "registry": 5000, "hub": 51820}},
        "resources": resources,
    });
    serde_json::to_vec_pretty(&doc).unwrap()
}

fn check_declaration(bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    for source in [Source::Bundle, Source::Local, Source::Link] {
        match parse(&text, source) {
            Ok(d) => {
                let again = serde_json::to_string(&d).unwrap();
                assert_eq!(parse(&again, source).ok(), Some(d), "{again}");
            }
            // Every refusal names at least one problem.
            Err(problems) => assert!(!problems.0.is_empty()),
        }
    }
}

#[test]
fn coverage_declaration_parse() {
    fuzz::coverage!("declaration", 1_000, declaration, check_declaration);
}
