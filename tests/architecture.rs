//! The invariants docs/ARCHITECTURE.md states about the tree, read from the tree: file headers,
//! file and function sizes, which crates depend on the core, where raw `libc` and the firewall
//! crate are named, no `Result<_, String>` (the core's import graph is `imports.rs`'s).
//!
//! Where today's code breaks an invariant that another branch is fixing, the offenders are an
//! explicit list here, each with the issue it waits on: the check passes for them and fails for
//! anything new, and fails too when a listed offender no longer offends, so each list only
//! shrinks (remove the entry then).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The crates linked into the binary: the core and the libraries it is built from.
const PRODUCT: &[&str] = &["src", "firewall/src", "genesis/src", "link/src", "run/src"];

/// Every folder holding the workspace's Rust sources.
const ALL_RUST: &[&str] = &[
    "src", "firewall", "genesis", "link", "run", "lab", "fuzz", "tests", "examples", "bench",
];

/// A file the size check lets pass 800 lines, and why.
const LONG_FILES: &[(&str, &str)] = &[];

/// Files of the product that may call `libc::` for good: the run crate (process groups, poll)
/// and the codecs, for what `nix` lacks (netlink's socket options, `bpf(2)`, `statx`'s mount id, x_tables' `IPT_SO_GET_ENTRIES`).
const LIBC_ALLOWED: &[&str] = &[
    "run/src/",
    "firewall/src/netlink/msg.rs",
    "firewall/src/netlink/socket.rs",
    "firewall/src/netlink/monitor.rs",
    "firewall/src/netlink/ipset.rs",
    "firewall/src/xtables.rs",
    "firewall/src/bpf/mod.rs",
    "firewall/src/bpf/sys.rs",
    "src/beneath/mount.rs",
];

/// Files that still call `libc::` where `nix` would do.
const LIBC_WAITING: &[(&str, &str)] = &[];

/// Functions over 150 lines that are decoder tables: one arm per thing decoded, read as a table.
const LONG_DECODER_TABLES: &[(&str, &str)] = &[
    ("firewall/src/eval/legacy.rs", "legacy_items"),
    ("firewall/src/eval/xt.rs", "decode_match"),
    ("firewall/src/eval/lower.rs", "from_nft"),
];

/// Functions over 150 lines waiting to be split.
const LONG_FUNCTIONS: &[(&str, &str, &str)] = &[];

/// Files of the core outside `src/node_firewall/` that name the firewall crate.
const FIREWALL_NAMED: &[(&str, &str)] = &[];

/// Files of the product with a `Result<_, String>`.
const STRING_ERRORS: &[(&str, &str)] = &[];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The `.rs` files under `dirs` (paths relative to the workspace, `/`-separated), with their
/// text; build output and bolero's corpora are not walked.
fn rust_files(dirs: &[&str]) -> Vec<(String, String)> {
    fn walk(dir: &Path, rel: &str, out: &mut Vec<(String, String)>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().to_string();
            let rel = format!("{rel}/{name}");
            let ty = e.file_type().unwrap();
            if ty.is_dir() && !matches!(name.as_str(), "target" | "__fuzz__" | ".git") {
                walk(&e.path(), &rel, out);
            } else if ty.is_file() && name.ends_with(".rs") {
                let text = std::fs::read_to_string(e.path()).unwrap();
                out.push((rel, text));
            }
        }
    }
    let mut out = Vec::new();
    for d in dirs {
        walk(&root().join(d), d, &mut out);
    }
    assert!(out.len() > 20, "read the tree: {} files", out.len());
    out.sort();
    out
}

/// A file of tests rather than product: a `tests` folder, `tests.rs`, `*_tests.rs`, the fuzz
/// tests (`fuzz.rs`, `*_fuzz.rs`).
fn is_test_file(rel: &str) -> bool {
    let name = rel.rsplit('/').next().unwrap();
    rel.split('/').any(|c| c == "tests")
        || name == "tests.rs"
        || name.ends_with("_tests.rs")
        || name == "fuzz.rs"
        || name.ends_with("_fuzz.rs")
}

/// The product's non-test files.
fn product_files() -> Vec<(String, String)> {
    rust_files(PRODUCT)
        .into_iter()
        .filter(|(rel, _)| !is_test_file(rel))
        .collect()
}

/// The file's text without its `#[cfg(test)] mod tests { … }` (inline unit tests come last).
fn without_inline_tests(text: &str) -> &str {
    match text.find("#[cfg(test)]\nmod tests {") {
        Some(at) => &text[..at],
        None => text,
    }
}

/// The lines of code, without `//` comments (whole-line ones; enough for the names read here).
fn code_lines(text: &str) -> impl Iterator<Item = &str> {
    without_inline_tests(text)
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
}

/// `word::` as a path's first segment: not the end of a longer name (`node_firewall::`).
fn names_path(line: &str, word: &str) -> bool {
    let pat = format!("{word}::");
    line.match_indices(&pat).any(|(at, _)| {
        !line[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
    })
}

/// Fails naming what is new, and what a list still names that no longer offends.
fn judge(what: &str, found: &BTreeSet<String>, listed: &BTreeSet<String>) {
    let new: Vec<_> = found.difference(listed).collect();
    let stale: Vec<_> = listed.difference(found).collect();
    assert!(
        new.is_empty() && stale.is_empty(),
        "{what}:\n  new (fix them): {new:?}\n  listed but no longer offending (remove them from \
         the list in tests/architecture.rs): {stale:?}"
    );
    eprintln!("{what}: {} listed offenders remain", listed.len());
}

#[test]
fn every_rust_file_opens_with_a_doc_line() {
    let files = rust_files(ALL_RUST);
    let bare: Vec<&str> = files
        .iter()
        .filter(|(_, text)| !text.starts_with("//!"))
        .map(|(rel, _)| rel.as_str())
        .collect();
    assert!(
        bare.is_empty(),
        "files that do not open with `//!`: {bare:?}"
    );
    eprintln!("{} files, each opening with //!", files.len());
}

#[test]
fn no_product_file_passes_800_lines() {
    let found: BTreeSet<String> = rust_files(PRODUCT)
        .into_iter()
        .filter(|(_, text)| text.lines().count() > 800)
        .map(|(rel, _)| rel)
        .collect();
    let listed = LONG_FILES.iter().map(|(f, _)| f.to_string()).collect();
    judge("product files over 800 lines", &found, &listed);
}

/// The dependencies a manifest names, with the path of each path dependency.
fn path_dependencies(manifest: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut in_deps = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_deps = line.contains("dependencies");
            continue;
        }
        if !in_deps {
            continue;
        }
        let Some((name, rest)) = line.split_once('=') else {
            continue;
        };
        let path = rest
            .split_once("path")
            .and_then(|(_, p)| p.split('"').nth(1))
            .unwrap_or("")
            .to_string();
        out.push((name.trim().to_string(), path));
    }
    out
}

#[test]
fn library_crates_do_not_depend_on_the_core() {
    let core = root().canonicalize().unwrap();
    let mut read = 0;
    for krate in ["firewall", "genesis", "link", "run", "lab", "fuzz"] {
        let dir = root().join(krate);
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        let deps = path_dependencies(&manifest);
        read += deps.len();
        for (name, path) in deps {
            assert_ne!(name, "mesh-host", "{krate} depends on the core");
            if !path.is_empty() {
                let to = dir.join(&path).canonicalize().unwrap();
                assert_ne!(to, core, "{krate} depends on the core through {path}");
            }
        }
    }
    assert!(read > 10, "read the manifests' dependencies: {read}");
}

#[test]
fn raw_libc_only_where_the_map_names_it() {
    let found: BTreeSet<String> = product_files()
        .into_iter()
        .filter(|(rel, _)| !LIBC_ALLOWED.iter().any(|a| rel.starts_with(a)))
        .filter(|(_, text)| code_lines(text).any(|l| l.contains("libc::")))
        .map(|(rel, _)| rel)
        .collect();
    let listed = LIBC_WAITING.iter().map(|(f, _)| f.to_string()).collect();
    judge("raw libc:: outside run and the codecs", &found, &listed);
}

#[test]
fn the_core_names_the_firewall_crate_only_under_node_firewall() {
    let found: BTreeSet<String> = product_files()
        .into_iter()
        .filter(|(rel, _)| {
            rel.starts_with("src/")
                && !rel.starts_with("src/node_firewall/")
                && rel != "src/node_firewall.rs"
                && rel != "src/firewall_terms.rs"
        })
        .filter(|(_, text)| code_lines(text).any(|l| names_path(l, "firewall")))
        .map(|(rel, _)| rel)
        .collect();
    let listed = FIREWALL_NAMED.iter().map(|(f, _)| f.to_string()).collect();
    judge(
        "firewall:: named outside src/node_firewall/",
        &found,
        &listed,
    );
}

/// Whether `text` names a `Result` whose error type is `String`.
fn has_string_error(text: &str) -> bool {
    let code: String = code_lines(text).collect::<Vec<_>>().join("\n");
    code.match_indices("Result<").any(|(at, _)| {
        if code[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
        {
            return false;
        }
        // The generic arguments, split at the top level.
        let mut depth = 0;
        let mut args = vec![String::new()];
        for c in code[at + "Result<".len()..].chars() {
            match c {
                '<' | '(' | '[' => depth += 1,
                '>' | ')' | ']' if depth == 0 => break,
                '>' | ')' | ']' => depth -= 1,
                ',' if depth == 0 => {
                    args.push(String::new());
                    continue;
                }
                _ => {}
            }
            args.last_mut().unwrap().push(c);
        }
        args.len() == 2 && args[1].trim() == "String"
    })
}

#[test]
fn no_result_with_a_string_error_in_the_product() {
    assert!(has_string_error(
        "fn f() -> Result<Vec<(u8, String)>, String> {"
    ));
    assert!(!has_string_error("fn f() -> Result<String, Error> {"));
    assert!(!has_string_error("fn f() -> io::Result<String> {"));
    let found: BTreeSet<String> = product_files()
        .into_iter()
        .filter(|(_, text)| has_string_error(text))
        .map(|(rel, _)| rel)
        .collect();
    let listed = STRING_ERRORS.iter().map(|(f, _)| f.to_string()).collect();
    judge("Result<_, String> in the product", &found, &listed);
}

/// Each function's name and its length in lines, from `fn` to its closing brace: a brace
/// counter that skips strings, characters, raw strings and comments.
fn functions(text: &str) -> Vec<(String, usize)> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(off) = text[i..].find("fn ") {
        let at = i + off;
        i = at + 3;
        let starts_word = at == 0 || !(b[at - 1].is_ascii_alphanumeric() || b[at - 1] == b'_');
        if !starts_word {
            continue;
        }
        let name: String = text[at + 3..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            continue;
        }
        // Its body: the first `{` before a `;` at depth 0 (a declaration without one has none).
        let mut j = at;
        let mut depth = 0usize;
        let mut opened = None;
        while j < b.len() {
            match b[j] {
                b'/' if b.get(j + 1) == Some(&b'/') => {
                    while j < b.len() && b[j] != b'\n' {
                        j += 1;
                    }
                }
                b'/' if b.get(j + 1) == Some(&b'*') => {
                    j += 2;
                    while j + 1 < b.len() && !(b[j] == b'*' && b[j + 1] == b'/') {
                        j += 1;
                    }
                    j += 1;
                }
                b'r' if matches!(b.get(j + 1), Some(b'#' | b'"'))
                    && (j == 0 || !(b[j - 1].is_ascii_alphanumeric() || b[j - 1] == b'_')) =>
                {
                    let hashes = b[j + 1..].iter().take_while(|c| **c == b'#').count();
                    if b.get(j + 1 + hashes) == Some(&b'"') {
                        let end = format!("\"{}", "#".repeat(hashes));
                        j += 2 + hashes;
                        j += text[j..].find(&end).map_or(b.len(), |e| e + end.len()) - 1;
                    }
                }
                b'"' => {
                    j += 1;
                    while j < b.len() && b[j] != b'"' {
                        if b[j] == b'\\' {
                            j += 1;
                        }
                        j += 1;
                    }
                }
                b'\'' => {
                    // A character ('x', '\n', '\u{..}') rather than a lifetime.
                    if b.get(j + 1) == Some(&b'\\') {
                        j += text[j + 2..].find('\'').map_or(0, |e| e + 2);
                    } else if b.get(j + 2) == Some(&b'\'') {
                        j += 2;
                    }
                }
                b'{' => {
                    depth += 1;
                    opened.get_or_insert(j);
                }
                b'}' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 && opened.is_some() {
                        break;
                    }
                }
                b';' if opened.is_none() => break,
                _ => {}
            }
            j += 1;
        }
        if opened.is_some() {
            let lines = text[at..j.min(b.len())].matches('\n').count() + 1;
            out.push((name, lines));
        }
    }
    out
}

#[test]
fn no_product_function_passes_150_lines() {
    let sample = "fn a() {\n    let s = \"}\";\n    let c = '}';\n    // }\n}\nfn b();\nfn c() { r#\"}\"#; }\n";
    assert_eq!(
        functions(sample),
        [("a".to_string(), 5), ("c".to_string(), 1)]
    );
    let mut found = BTreeSet::new();
    let mut counted = 0;
    for (rel, text) in product_files() {
        for (name, lines) in functions(without_inline_tests(&text)) {
            counted += 1;
            let table = LONG_DECODER_TABLES.contains(&(rel.as_str(), name.as_str()));
            if lines > 150 && !table {
                found.insert(format!("{rel} {name}"));
            }
        }
    }
    assert!(counted > 1000, "read the functions: {counted}");
    let listed = LONG_FUNCTIONS
        .iter()
        .map(|(f, n, _)| format!("{f} {n}"))
        .collect();
    judge("product functions over 150 lines", &found, &listed);
}

// The core's folders importing one another without a loop, and the domain never importing the
// commands, are `tests/imports.rs`'s to check.

#[test]
fn children_start_only_through_the_run_crate() {
    let found: Vec<String> = product_files()
        .into_iter()
        .filter(|(rel, _)| !rel.starts_with("run/src/"))
        .filter(|(_, text)| {
            code_lines(text).any(|l| {
                l.contains("process::Command")
                    || (l.contains("Command::new(") && !l.contains("clap::"))
            })
        })
        .map(|(rel, _)| rel)
        .collect();
    assert!(
        found.is_empty(),
        "a child started outside the run crate: {found:?}"
    );
}
