//! What the operator reads, through the built binary: refused input exits 2 naming what was
//! refused, counts agree with their nouns, a cause is said once, ports read as the operator wrote
//! them, and colour codes reach a terminal only.

use crate::util::Node;
use serde_json::{json, Value};
use std::process::Command;

fn decl(resources: Value) -> Value {
    json!({"version": 1, "node": "n1", "mode": "converged", "resources": resources})
}

fn with_ports(store: u16) -> Value {
    json!({
        "version": 1, "node": "n1", "mode": "converged",
        "settings": {"ports": {"store": store, "bus": 5672, "broker_management": 15672,
                               "registry": 5000, "hub": 51820}},
        "resources": []
    })
}

#[test]
fn a_declaration_that_is_not_utf8_is_refused_input_naming_the_file() {
    let node = Node::new();
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), b"{\"version\": 1, \"node\": \"n\xff1\"}").unwrap();
    let name = file.path().to_str().unwrap();
    let r = node.run(&["apply", name]);
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(
        r.stderr.contains(&format!(
            "error: declaration {name} is not UTF-8 text (invalid byte at offset 25)"
        )),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("nothing was changed"), "{}", r.stderr);
    assert!(
        !node.path("/var/lib/mesh-host").exists(),
        "a refused declaration does not make the store"
    );
}

#[test]
fn the_count_of_problems_agrees_with_its_noun() {
    let node = Node::new();
    let one = decl(
        json!([{"id": "a", "type": "file", "path": "/etc/a", "content": "x",
                            "colour": "red"}]),
    );
    let r = node.apply_env(&one, &[], &[]);
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(
        r.stderr
            .contains("the declaration was refused (1 problem); nothing was changed"),
        "{}",
        r.stderr
    );
    let two = decl(
        json!([{"id": "a", "type": "file", "path": "/etc/a", "content": "x",
                            "colour": "red", "size": 1}]),
    );
    let r = node.apply_env(&two, &[], &[]);
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(
        r.stderr
            .contains("the declaration was refused (2 problems); nothing was changed"),
        "{}",
        r.stderr
    );
}

#[test]
fn a_cause_is_said_once() {
    let node = Node::new();
    node.apply(&decl(json!([])));
    let state = node.path("/var/lib/mesh-host/state.json");
    std::fs::write(&state, "garbage").unwrap();
    let r = node.apply_env(&decl(json!([])), &[], &[]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    let cause = "expected value at line 1 column 1";
    assert_eq!(
        r.stderr.trim_end(),
        format!(
            "error: store {} is not readable as a mesh-host store: {cause}",
            state.display()
        )
    );

    // A declaration that is not there is bad input (exit 2), said once, with the refusal's line.
    let r = node.run(&["apply", "/nonexistent/declaration.json"]);
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert_eq!(
        r.stderr.trim_end(),
        "error: declaration /nonexistent/declaration.json does not exist\n\
         the declaration was refused; nothing was changed"
    );
}

#[test]
fn ports_are_named_as_the_operator_wrote_them() {
    let node = Node::new();
    node.apply(&with_ports(5432));
    let r = node.apply_env(&with_ports(6432), &[], &[]);
    assert_eq!(r.code, Some(3), "{}", r.stderr);
    assert!(
        r.stderr.contains(
            "fixed at genesis (store 5432, bus 5672, broker_management 15672, registry 5000, \
             hub 51820); a declaration with other ports (store 6432, bus 5672, \
             broker_management 15672, registry 5000, hub 51820) would move them back"
        ),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("FoundationPorts"), "{}", r.stderr);
}

#[test]
fn colour_codes_reach_a_terminal_only() {
    let node = Node::new();
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), decl(json!([])).to_string()).unwrap();
    let args = ["apply", file.path().to_str().unwrap()];
    // Logging at info level writes the apply's own line to standard error.
    let piped = node.run_env(&args, &[("RUST_LOG", "info")]);
    assert_eq!(piped.code, Some(0), "{}", piped.stderr);
    assert!(piped.stderr.contains("applying"), "{}", piped.stderr);
    assert!(!piped.stderr.contains('\u{1b}'), "{:?}", piped.stderr);

    // The same command on a terminal: `script` gives it a pseudo-terminal for both streams.
    let line = format!(
        "{} --root {} {} {}",
        env!("CARGO_BIN_EXE_mesh-host"),
        node.root().display(),
        args[0],
        args[1]
    );
    let out = Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .env("RUST_LOG", "info")
        .output()
        .expect("script (util-linux) runs");
    let seen = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{seen}");
    assert!(seen.contains("applying"), "{seen}");
    assert!(seen.contains('\u{1b}'), "no colour on a terminal: {seen:?}");
}

/// The log macros' invocations in `text`: each from its name to its closing parenthesis, string
/// literals read whole so a parenthesis inside one does not end it.
fn log_calls(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for name in [
        "trace!(", "debug!(", "info!(", "warn!(", "error!(", "event!(",
    ] {
        let mut from = 0;
        while let Some(at) = text[from..].find(name) {
            let start = from + at;
            from = start + name.len();
            // A macro's own name, not the tail of another identifier (`my_info!(`).
            let before = text[..start].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let bytes = text.as_bytes();
            let (mut depth, mut i, mut in_str) = (1, from, false);
            while i < bytes.len() && depth > 0 {
                match (bytes[i], in_str) {
                    (b'\\', true) => i += 1,
                    (b'"', _) => in_str = !in_str,
                    (b'(', false) => depth += 1,
                    (b')', false) => depth -= 1,
                    _ => {}
                }
                i += 1;
            }
            let line = text[..start].lines().count();
            out.push((line, text[start..i].to_string()));
        }
    }
    out
}

/// Whether a log call formats a value with Rust's `Debug`: `{:?}`, `{x:?}`, `{:#?}` in its
/// message, or a field recorded with the `?` sigil (`field = ?value`, `?value`).
fn debug_formatted(call: &str) -> bool {
    if call.contains(":?}") || call.contains(":#?}") {
        return true;
    }
    let chars: Vec<char> = call.chars().collect();
    chars.iter().enumerate().any(|(i, c)| {
        *c == '?'
            && chars
                .get(i + 1)
                .is_some_and(|n| n.is_alphabetic() || *n == '_')
            && chars[..i]
                .iter()
                .rev()
                .find(|p| !p.is_whitespace())
                .is_some_and(|p| matches!(p, ',' | '(' | '='))
    })
}

#[test]
fn the_debug_check_sees_what_it_must_and_nothing_else() {
    assert!(debug_formatted(r#"info!(failed = ?failed, "x")"#));
    assert!(debug_formatted(r#"warn!(?err, "x")"#));
    assert!(debug_formatted(r#"debug!("got {:?}", v)"#));
    assert!(debug_formatted(r#"debug!("got {v:?}")"#));
    assert!(!debug_formatted(
        r#"info!(failed = failed.as_deref(), n = f()?, "why? {x}")"#
    ));
    let calls = log_calls("tracing::info!(a = ?b, \"(\");\nmy_info!(x);\nwarn!(\"ok\")");
    assert_eq!(calls.len(), 2, "{calls:?}");
}

/// No log line shows Rust's `Debug` form (`Some(…)`, `None`, a struct dumped): every value a log
/// call records is rendered as a person reads it (an `Option` field is recorded only when set).
#[test]
fn no_log_call_formats_a_value_with_debug() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    let mut read = 0;
    for dir in ["src", "firewall/src", "genesis/src", "link/src", "run/src"] {
        let mut stack = vec![root.join(dir)];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
                let path = e.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.extension().is_some_and(|x| x == "rs") {
                    let text = std::fs::read_to_string(&path).unwrap();
                    read += 1;
                    for (line, call) in log_calls(&text) {
                        if debug_formatted(&call) {
                            found.push(format!("{}:{line}: {call}", path.display()));
                        }
                    }
                }
            }
        }
    }
    assert!(read > 100, "only {read} source files read");
    assert!(
        found.is_empty(),
        "log calls in Debug form:\n{}",
        found.join("\n")
    );
}
