//! The product crates' code never reads an outcome back from its words: no `.contains(` /
//! `.starts_with(` / `.ends_with(` / `.strip_prefix(` on a value named like an outcome, a report,
//! an error's text or a layer (or on a string literal of an outcome's words), and no
//! `Result<_, String>`. Each finding is named by file and line.

use std::path::{Path, PathBuf};

/// The product crates' sources (never their tests).
const CRATES: [&str; 5] = ["src", "firewall/src", "genesis/src", "link/src", "run/src"];

/// The methods that test or cut a string's text.
const TESTS: [&str; 5] = [
    ".contains(",
    ".starts_with(",
    ".ends_with(",
    ".strip_prefix(",
    ".strip_suffix(",
];

/// Names a value holding an outcome's, a report's, an error's or a layer's words goes by.
const OUTCOME_NAMES: [&str; 15] = [
    "outcome",
    "report",
    "guard",
    "flip",
    "filter",
    "layer",
    "detail",
    "said",
    "why",
    "reason",
    "message",
    "describe()",
    "to_string()",
    "summary",
    "what",
];

/// Words only an outcome says: a literal of them tested against a string is an outcome read back.
const OUTCOME_WORDS: [&str; 6] = [
    "failed",
    "written",
    "unchanged",
    "refused",
    "not admitted",
    "in force",
];

#[test]
fn no_product_code_reads_an_outcome_from_its_words() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    for c in CRATES {
        for file in rust_files(&root.join(c)) {
            let text = std::fs::read_to_string(&file).unwrap();
            let rel = file.strip_prefix(root).unwrap().display().to_string();
            found.extend(check(&rel, &text));
        }
    }
    assert!(
        found.is_empty(),
        "outcomes read from their words, or errors as strings, in the product crates:\n{}",
        found.join("\n")
    );
}

/// Each finding in one file's product code (its inline `#[cfg(test)]` module left out), as
/// `FILE:LINE: what`.
fn check(file: &str, text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    // Braces still open of an inline test module being skipped, once its `{` is met.
    let mut skipping: Option<i64> = None;
    let mut in_test = false;
    for (i, line) in lines.iter().enumerate() {
        let t = line.trim_start();
        if t.starts_with("#[cfg(test)]") && test_module_follows(&lines[i + 1..]) {
            in_test = true;
            continue;
        }
        if in_test {
            let opens = line.matches('{').count() as i64;
            let closes = line.matches('}').count() as i64;
            let depth = skipping.unwrap_or(0) + opens - closes;
            if skipping.is_some() || opens > 0 {
                skipping = Some(depth);
            }
            if skipping.is_some_and(|d| d <= 0) {
                (in_test, skipping) = (false, None);
            }
            continue;
        }
        if t.starts_with("//") {
            continue;
        }
        // Text no type stands for (a foreign library's error, the standard library's panic
        // message) is read so only with the reason on the line or the line before.
        let excused = |l: &str| l.contains("// words read: ");
        if excused(line) || i > 0 && excused(lines[i - 1]) {
            continue;
        }
        if let Some(e) = string_error(line) {
            out.push(format!("{file}:{}: Result<_, String> ({e})", i + 1));
        }
        for m in TESTS {
            for (at, _) in line.match_indices(m) {
                let recv = receiver(&line[..at]);
                let arg = &line[at + m.len()..];
                let by_name = OUTCOME_NAMES.iter().any(|n| named(&recv, n));
                let by_words = literal(arg).is_some_and(|l| {
                    let l = l.to_lowercase();
                    OUTCOME_WORDS.iter().any(|w| l.contains(w))
                });
                if by_name || by_words {
                    out.push(format!(
                        "{file}:{}: {recv}{m}…) reads an outcome from its words",
                        i + 1
                    ));
                }
            }
        }
    }
    out
}

/// Whether an inline test module (`mod NAME {`) follows a `#[cfg(test)]`, not a declaration of
/// one in its own file (`mod tests;`, which the walk leaves out by name) or a test-only item.
fn test_module_follows(rest: &[&str]) -> bool {
    rest.iter()
        .map(|l| l.trim())
        .find(|l| !l.is_empty() && !l.starts_with("#[") && !l.starts_with("//"))
        .is_some_and(|l| {
            (l.starts_with("mod ") || l.starts_with("pub(crate) mod ")) && l.ends_with('{')
        })
}

/// The expression a method is called on, as written just before its `.`: an identifier path
/// with its calls and `?` (`report.guard`, `e.to_string()`, `write(fw, spec)?`).
fn receiver(before: &str) -> String {
    let b: Vec<char> = before.chars().collect();
    let mut i = b.len();
    let mut depth = 0;
    while i > 0 {
        let c = b[i - 1];
        match c {
            ')' | ']' => depth += 1,
            '(' | '[' if depth > 0 => depth -= 1,
            _ if depth > 0 => {}
            c if c.is_alphanumeric() || c == '_' || c == '.' || c == '?' || c == ':' => {}
            _ => break,
        }
        i -= 1;
    }
    b[i..].iter().collect()
}

/// Whether the receiver's last part is `name` (a field, a variable, or a call such as
/// `describe()`), ignoring a call's arguments and a trailing `?`.
fn named(recv: &str, name: &str) -> bool {
    let r = recv.trim_end_matches('?');
    let last = r.rsplit(['.', ':']).find(|s| !s.is_empty()).unwrap_or("");
    if let Some(call) = name.strip_suffix("()") {
        return last.starts_with(&format!("{call}("));
    }
    let ident: String = last
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    // A call of a function named like one (`write(..)?`) is not the value itself; a field or
    // variable of exactly that name, or ending in it (`guard_line`, `e_text`), is.
    !last.contains('(') && (ident == name || ident.ends_with(&format!("_{name}")))
}

/// The string literal a call's argument list opens with, if it does.
fn literal(arg: &str) -> Option<&str> {
    let a = arg
        .trim_start()
        .strip_prefix('&')
        .unwrap_or(arg.trim_start());
    let rest = a.strip_prefix('"')?;
    rest.find('"').map(|end| &rest[..end])
}

/// The error type of a `Result<T, String>` on this line, when it is `String`.
fn string_error(line: &str) -> Option<String> {
    for (at, _) in line.match_indices("Result<") {
        let args = &line[at + "Result<".len()..];
        let mut depth = 0;
        let mut last_comma = None;
        for (j, c) in args.char_indices() {
            match c {
                '<' | '(' | '[' => depth += 1,
                '>' | ')' | ']' if depth == 0 => {
                    if let Some(k) = last_comma {
                        let e = args[k + 1..j].trim();
                        if e == "String" {
                            return Some(args[..j].trim().to_string());
                        }
                    }
                    break;
                }
                '>' | ')' | ']' => depth -= 1,
                ',' if depth == 0 => last_comma = Some(j),
                _ => {}
            }
        }
    }
    None
}

/// The `.rs` files under `dir` that are not tests: files named `tests.rs`, `*_tests.rs` or
/// `fuzz.rs`, and folders named `tests`, hold only tests.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().to_string();
            if p.is_dir() {
                if name != "tests" {
                    stack.push(p);
                }
            } else if name.ends_with(".rs")
                && name != "tests.rs"
                && !name.ends_with("_tests.rs")
                && !name.ends_with("fuzz.rs")
            {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn the_check_catches_what_it_is_for_and_not_string_work() {
    let planted = r#"
fn recheck() {
    done.guard_written = guard::write(fw, spec)?.contains("; written)");
    let failed = g.starts_with("failed");
    if p.layer.contains(&format!(" {c} ")) {}
    let t = s.what.strip_prefix("table ");
    // words read: planted, so not flagged
    let x = r.why.contains("x");
    let bad = e.to_string().contains("EPERM");
}
pub fn load_for(state: &State) -> Result<Load, String> {}
fn f() -> std::result::Result<Vec<Option<u8>>, String> {}
"#;
    let found = check("planted.rs", planted);
    let lines: Vec<&str> = found
        .iter()
        .map(|f| f.split(": ").next().unwrap())
        .collect();
    assert_eq!(
        lines,
        [
            "planted.rs:3",
            "planted.rs:4",
            "planted.rs:5",
            "planted.rs:6",
            "planted.rs:9",
            "planted.rs:11",
            "planted.rs:12"
        ],
        "{found:#?}"
    );
    let legitimate = r#"
fn parse(path: &Path, name: &str) -> Result<BTreeMap<(Family, String), String>> {
    if name.starts_with("br-") || path.ends_with("x") {}
    let v: Vec<Result<u8, Error>> = vec![];
    let ok = line.trim().starts_with('#');
}
#[cfg(test)]
mod tests {
    fn t() -> Result<(), String> {
        assert!(report.guard.contains("failed"));
    }
}
"#;
    assert_eq!(check("legitimate.rs", legitimate), Vec::<String>::new());
    // What follows an inline test module is product code again.
    let after = format!("{legitimate}fn late() -> Result<(), String> {{}}\n");
    assert_eq!(
        check("after.rs", &after),
        ["after.rs:13: Result<_, String> ((), String)"]
    );
}
