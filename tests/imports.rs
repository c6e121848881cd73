//! The core's layers, read from its source: no import loop between the folders of `src/` (each
//! top-level module, and each command under `src/commands/`, is one folder; a module may use its
//! own children), and no module outside `src/commands/` imports the commands. Test-only code
//! (`#[cfg(test)]` items and the files they declare) is left out: a test may reach up.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Which folder imports which, and through which files.
type Graph = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

/// The source with comments, string and character literals blanked (a `{` or `crate::` inside
/// them is no code), lengths and newlines kept.
fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    let blank = |out: &mut Vec<u8>, s: &[u8]| {
        out.extend(s.iter().map(|&c| if c == b'\n' { b'\n' } else { b' ' }))
    };
    while i < b.len() {
        let rest = &b[i..];
        if rest.starts_with(b"//") {
            let end = rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len());
            blank(&mut out, &rest[..end]);
            i += end;
        } else if rest.starts_with(b"/*") {
            let (mut depth, mut j) = (0usize, 0usize);
            while j < rest.len() {
                if rest[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if rest[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, &rest[..j]);
            i += j;
        } else if let Some(n) = raw_string(rest) {
            blank(&mut out, &rest[..n]);
            i += n;
        } else if rest[0] == b'"' {
            let mut j = 1;
            while j < rest.len() && rest[j] != b'"' {
                j += if rest[j] == b'\\' { 2 } else { 1 };
            }
            let n = (j + 1).min(rest.len());
            blank(&mut out, &rest[..n]);
            i += n;
        } else if rest[0] == b'\'' && rest.len() > 2 && (rest[1] == b'\\' || rest[2] == b'\'') {
            // A character literal ('{', '\n', '\''); a lifetime has no closing quote.
            let mut j = if rest[1] == b'\\' { 3 } else { 2 };
            while j < rest.len() && rest[j] != b'\'' {
                j += 1;
            }
            let n = (j + 1).min(rest.len());
            blank(&mut out, &rest[..n]);
            i += n;
        } else {
            out.push(rest[0]);
            i += 1;
        }
    }
    String::from_utf8(out).expect("blanking keeps UTF-8")
}

/// The length of a raw string literal (`r"…"`, `r#"…"#`, `br"…"`) at the start of `s`.
fn raw_string(s: &[u8]) -> Option<usize> {
    let at = if s.starts_with(b"br") {
        2
    } else if s.starts_with(b"r") {
        1
    } else {
        return None;
    };
    let hashes = s[at..].iter().take_while(|&&c| c == b'#').count();
    if s.get(at + hashes) != Some(&b'"') {
        return None;
    }
    let mut close = vec![b'"'];
    close.extend(std::iter::repeat_n(b'#', hashes));
    let body = at + hashes + 1;
    let end = s[body..]
        .windows(close.len())
        .position(|w| w == close.as_slice())?;
    Some(body + end + close.len())
}

/// The code with every `#[cfg(test)]` item taken out (to its `;` or its closing brace).
fn without_tests(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let item = &rest[at + "#[cfg(test)]".len()..];
        let mut depth = 0usize;
        let mut end = item.len();
        for (i, c) in item.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = i + 1;
                        break;
                    }
                }
                ';' if depth == 0 => {
                    end = i + 1;
                    break;
                }
                _ => {}
            }
        }
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

/// The modules a file declares as `mod NAME;` under `#[cfg(test)]`.
fn test_modules(code: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        rest = &rest[at + "#[cfg(test)]".len()..];
        let item = rest.trim_start();
        let item = item.strip_prefix("pub ").unwrap_or(item).trim_start();
        if let Some(decl) = item.strip_prefix("mod ") {
            let name: String = decl
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if decl[name.len()..].trim_start().starts_with(';') {
                names.push(name);
            }
        }
    }
    names
}

/// A module's path in the crate from its file under `src` (`apply/plan.rs` -> `apply::plan`).
fn module_path(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .with_extension("")
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

/// The folder a module belongs to: its top-level module, or `commands::NAME` under `commands`.
fn folder(path: &[String]) -> Option<String> {
    match path {
        [] => None,
        [top, name, ..] if top == "commands" => Some(format!("commands::{name}")),
        [top, ..] => Some(top.clone()),
    }
}

fn ident(s: &str) -> &str {
    let n = s
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..n]
}

/// The crate's modules a file's code names: `crate::a::…`, `crate::{a, b::…}` and `super::`
/// paths that climb to the crate's root, each as a module path of one or two names.
fn named_modules(code: &str, own: &[String]) -> BTreeSet<Vec<String>> {
    let mut found = BTreeSet::new();
    let push = |found: &mut BTreeSet<Vec<String>>, path: &str| {
        let first = ident(path.trim_start());
        if first.is_empty() || first == "self" {
            return;
        }
        let after = path.trim_start()[first.len()..].trim_start();
        let second = after.strip_prefix("::").map(|s| ident(s.trim_start()));
        let mut p = vec![first.to_string()];
        if let Some(s) = second.filter(|s| !s.is_empty()) {
            p.push(s.to_string());
        }
        found.insert(p);
    };
    for (at, _) in code.match_indices("crate::") {
        if at > 0 && code[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let rest = code[at + "crate::".len()..].trim_start();
        if let Some(group) = rest.strip_prefix('{') {
            // The top-level items of a group: split at commas outside nested braces.
            let mut depth = 0usize;
            let mut start = 0;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        push(&mut found, &group[start..i]);
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        push(&mut found, &group[start..i]);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
        } else {
            push(&mut found, rest);
        }
    }
    // `super::` from a file's own module: enough of them reach the crate's root.
    for (at, _) in code.match_indices("super::") {
        if at >= 7 && &code[at - 7..at] == "super::" {
            continue;
        }
        let mut rest = &code[at..];
        let mut ups = 0;
        while let Some(r) = rest.strip_prefix("super::") {
            ups += 1;
            rest = r.trim_start();
        }
        if ups >= own.len() {
            push(&mut found, rest);
        }
    }
    found
}

/// Every product file under `src` (test-only files left out), with its module path.
fn product_files(src: &Path) -> Vec<(PathBuf, Vec<String>, String)> {
    let mut files = Vec::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).expect("src is readable") {
            let p = e.expect("src entry").path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                files.push(p);
            }
        }
    }
    let mut test_only: BTreeSet<Vec<String>> = BTreeSet::new();
    let mut read = Vec::new();
    for p in files {
        let rel = p.strip_prefix(src).expect("under src").to_path_buf();
        let path = module_path(&rel);
        let code = code_only(&std::fs::read_to_string(&p).expect("source is readable"));
        let parent: Vec<String> = match rel.file_name().and_then(|f| f.to_str()) {
            Some("lib.rs" | "main.rs") => Vec::new(),
            _ => path.clone(),
        };
        for m in test_modules(&code) {
            let mut child = parent.clone();
            child.push(m);
            test_only.insert(child);
        }
        read.push((rel, path, code));
    }
    read.into_iter()
        .filter(|(_, path, _)| !(1..=path.len()).any(|n| test_only.contains(&path[..n])))
        .map(|(rel, path, code)| (rel, path, without_tests(&code)))
        .collect()
}

/// Which folder imports which.
fn graph(src: &Path) -> Graph {
    let mut g = Graph::new();
    let files = product_files(src);
    let folders: BTreeSet<String> = files.iter().filter_map(|(_, p, _)| folder(p)).collect();
    for (rel, path, code) in files {
        let Some(from) = folder(&path) else { continue };
        for named in named_modules(&code, &path) {
            let Some(mut to) = folder(&named) else {
                continue;
            };
            // `crate::commands::Exit`: an item the commands' own module holds.
            if to.starts_with("commands::") && !folders.contains(&to) {
                to = "commands".to_string();
            }
            if to == from || (to == "commands" && from.starts_with("commands::")) {
                continue;
            }
            g.entry(from.clone())
                .or_default()
                .entry(to)
                .or_default()
                .insert(rel.display().to_string());
        }
    }
    g
}

/// The loops (strongly connected folders, more than one) and every folder outside `commands`
/// that imports it, each said with the files that make the arrows.
fn problems(src: &Path) -> Vec<String> {
    let g = graph(src);
    let mut out = Vec::new();
    for (from, tos) in &g {
        if from.starts_with("commands") {
            continue;
        }
        for (to, files) in tos {
            if to.starts_with("commands") {
                out.push(format!(
                    "{from} imports {to} (the domain is below the commands): {files:?}"
                ));
            }
        }
    }
    for members in loops(&g) {
        let mut arrows = Vec::new();
        for a in &members {
            for (b, files) in g.get(a).into_iter().flatten() {
                if members.contains(b) {
                    arrows.push(format!("{a} -> {b} {files:?}"));
                }
            }
        }
        out.push(format!(
            "an import loop between {members:?}: {}",
            arrows.join("; ")
        ));
    }
    out
}

/// The strongly connected sets of more than one folder (Tarjan's algorithm).
fn loops(g: &Graph) -> Vec<BTreeSet<String>> {
    struct Walk<'a> {
        g: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        found: Vec<BTreeSet<String>>,
    }
    fn visit<'a>(w: &mut Walk<'a>, v: &'a str) {
        let n = w.index.len();
        w.index.insert(v, n);
        w.low.insert(v, n);
        w.stack.push(v);
        for to in w.g.get(v).into_iter().flat_map(|t| t.keys()) {
            let to = to.as_str();
            if !w.index.contains_key(to) {
                visit(w, to);
                let l = w.low[v].min(w.low[to]);
                w.low.insert(v, l);
            } else if w.stack.contains(&to) {
                let l = w.low[v].min(w.index[to]);
                w.low.insert(v, l);
            }
        }
        if w.low[v] == w.index[v] {
            let mut set = BTreeSet::new();
            while let Some(x) = w.stack.pop() {
                set.insert(x.to_string());
                if x == v {
                    break;
                }
            }
            if set.len() > 1 {
                w.found.push(set);
            }
        }
    }
    let mut w = Walk {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for v in g.keys() {
        if !w.index.contains_key(v.as_str()) {
            visit(&mut w, v);
        }
    }
    w.found
}

#[test]
fn no_import_loop_between_the_cores_folders_and_the_domain_is_below_the_commands() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let g = graph(&src);
    // The check reads real arrows: the commands import the domain.
    assert!(
        g.get("commands::cli")
            .is_some_and(|t| t.contains_key("apply")),
        "the reader found no arrow from commands::cli to apply: {g:?}"
    );
    let found = problems(&src);
    assert!(found.is_empty(), "{}", found.join("\n"));
}

/// A tree of files under a temporary `src`.
fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    for (path, text) in files {
        let p = d.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    d
}

#[test]
fn the_check_finds_a_loop_and_a_domain_module_importing_the_commands() {
    let d = tree(&[
        ("lib.rs", "pub mod a;\npub mod b;\npub mod commands;\n"),
        ("a.rs", "//! a\nuse crate::{b::X, commands::cli};\n"),
        ("b/mod.rs", "//! b\npub fn f() { super::a::g() }\n"),
        ("commands/mod.rs", "pub mod cli;\n"),
        ("commands/cli.rs", "pub fn run() {}\n"),
    ]);
    let found = problems(d.path());
    assert!(
        found
            .iter()
            .any(|p| p.starts_with("a imports commands::cli")),
        "{found:?}"
    );
    assert!(
        found
            .iter()
            .any(|p| p.starts_with("an import loop between {\"a\", \"b\"}")),
        "{found:?}"
    );
    assert_eq!(found.len(), 2, "{found:?}");
}

#[test]
fn own_children_tests_comments_and_strings_make_no_arrow() {
    let d = tree(&[
        ("lib.rs", "pub mod a;\npub mod b;\n"),
        (
            "a.rs",
            "//! a, which uses crate::b only in words\nmod inner;\n#[cfg(test)]\nmod tests;\n\
             pub fn f() { let _ = \"crate::b::X {\"; let _ = '{'; crate::a::inner::g() }\n\
             #[cfg(test)]\nmod more { use crate::b::Y; fn t() {} }\n",
        ),
        ("a/inner.rs", "pub fn g() { crate::a::f2() }\n"),
        ("a/tests.rs", "use crate::b::Z;\n"),
        ("b.rs", "use crate::a::f;\n"),
    ]);
    assert_eq!(problems(d.path()), Vec::<String>::new());
    let g = graph(d.path());
    assert!(g.get("b").is_some_and(|t| t.contains_key("a")), "{g:?}");
    assert!(!g.contains_key("a"), "{g:?}");
}
