//! A preview's unified diff of a file's content, from what is there to what is declared:
//! bounded in what it reads, in the lines it compares and in the lines it prints, and said in one
//! line instead for content that is not text or is past the bounds.

/// The most bytes of either side read for a diff; a larger file is said in one line.
pub const MAX_BYTES: u64 = 256 * 1024;

/// The most lines of either side compared after the common head and tail are set aside (the
/// comparison's table grows with their product).
pub const MAX_LINES: usize = 2_000;

/// The most lines of diff printed; the rest are counted in a last line.
pub const MAX_SHOWN: usize = 200;

/// Lines of context around each change, as `diff -u` gives.
const CONTEXT: usize = 3;

/// The diff of `now` against `declared` for `path`, as lines (`--- path (now)`, `+++ path
/// (declared)`, hunks), or one line saying why it is not shown.
pub fn unified(path: &str, now: &[u8], declared: &[u8]) -> Vec<String> {
    let (Some(a), Some(b)) = (text(now), text(declared)) else {
        return vec![format!(
            "binary content differs ({} bytes now, {} declared); not shown",
            now.len(),
            declared.len()
        )];
    };
    let a: Vec<&str> = a.split_inclusive('\n').collect();
    let b: Vec<&str> = b.split_inclusive('\n').collect();
    let head = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let tail = a[head..]
        .iter()
        .rev()
        .zip(b[head..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let (mid_a, mid_b) = (&a[head..a.len() - tail], &b[head..b.len() - tail]);
    if mid_a.len() > MAX_LINES || mid_b.len() > MAX_LINES {
        return vec![format!(
            "content differs in more than {MAX_LINES} lines ({} lines now, {} declared); not shown",
            a.len(),
            b.len()
        )];
    }
    // Each line of both sides as kept (' '), removed ('-') or added ('+').
    let mut ops: Vec<(char, &str)> = a[..head].iter().map(|l| (' ', *l)).collect();
    ops.extend(lcs_ops(mid_a, mid_b));
    ops.extend(a[a.len() - tail..].iter().map(|l| (' ', *l)));
    let mut out = vec![
        format!("--- {path} (now)"),
        format!("+++ {path} (declared)"),
    ];
    out.extend(hunks(&ops));
    if out.len() > MAX_SHOWN + 2 {
        let cut = out.len() - (MAX_SHOWN + 2);
        out.truncate(MAX_SHOWN + 2);
        out.push(format!("… {cut} more lines of the diff not shown"));
    }
    out
}

/// The content as text: UTF-8 without NUL bytes.
fn text(bytes: &[u8]) -> Option<&str> {
    if bytes.contains(&0) {
        return None;
    }
    std::str::from_utf8(bytes).ok()
}

/// The lines of `a` and `b` as kept, removed and added, by their longest common subsequence.
fn lcs_ops<'a>(a: &[&'a str], b: &[&'a str]) -> Vec<(char, &'a str)> {
    let (n, m) = (a.len(), b.len());
    // len[i][j]: the longest common subsequence of a[i..] and b[j..].
    let mut len = vec![0u16; (n + 1) * (m + 1)];
    let at = |i: usize, j: usize| i * (m + 1) + j;
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            len[at(i, j)] = if a[i] == b[j] {
                len[at(i + 1, j + 1)] + 1
            } else {
                len[at(i + 1, j)].max(len[at(i, j + 1)])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut ops = Vec::with_capacity(n + m);
    while i < n || j < m {
        if i < n && j < m && a[i] == b[j] {
            ops.push((' ', a[i]));
            (i, j) = (i + 1, j + 1);
        } else if i < n && (j == m || len[at(i + 1, j)] >= len[at(i, j + 1)]) {
            // What goes before what comes, as `diff -u` orders them.
            ops.push(('-', a[i]));
            i += 1;
        } else {
            ops.push(('+', b[j]));
            j += 1;
        }
    }
    ops
}

/// The changed lines with their context, grouped in `@@ -l,s +l,s @@` hunks.
fn hunks(ops: &[(char, &str)]) -> Vec<String> {
    let changed: Vec<usize> = (0..ops.len()).filter(|&k| ops[k].0 != ' ').collect();
    let mut out = Vec::new();
    let mut k = 0;
    while k < changed.len() {
        let start = changed[k].saturating_sub(CONTEXT);
        let mut end = (changed[k] + CONTEXT + 1).min(ops.len());
        while k + 1 < changed.len() && changed[k + 1] <= end + CONTEXT {
            k += 1;
            end = (changed[k] + CONTEXT + 1).min(ops.len());
        }
        k += 1;
        // Line numbers: the count of each side's lines before the hunk, then in it.
        let before = |side: char| ops[..start].iter().filter(|o| o.0 != side).count();
        let within = |side: char| ops[start..end].iter().filter(|o| o.0 != side).count();
        let (a0, an) = (before('+'), within('+'));
        let (b0, bn) = (before('-'), within('-'));
        out.push(format!(
            "@@ -{},{an} +{},{bn} @@",
            if an == 0 { a0 } else { a0 + 1 },
            if bn == 0 { b0 } else { b0 + 1 }
        ));
        for (op, line) in &ops[start..end] {
            match line.strip_suffix('\n') {
                Some(l) => out.push(format!("{op}{l}")),
                None => {
                    out.push(format!("{op}{line}"));
                    out.push("\\ No newline at end of file".into());
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_line_is_shown_with_its_context_as_diff_u_shows_it() {
        let now = "a\nb\nc\nd\ne\nf\ng\nh\n";
        let declared = "a\nb\nc\nd\nE\nf\ng\nh\n";
        assert_eq!(
            unified("/etc/x", now.as_bytes(), declared.as_bytes()),
            [
                "--- /etc/x (now)",
                "+++ /etc/x (declared)",
                "@@ -2,7 +2,7 @@",
                " b",
                " c",
                " d",
                "-e",
                "+E",
                " f",
                " g",
                " h",
            ]
        );
    }

    #[test]
    fn an_empty_file_made_whole_and_a_missing_last_newline_are_said() {
        assert_eq!(
            unified("/f", b"", b"one\ntwo"),
            [
                "--- /f (now)",
                "+++ /f (declared)",
                "@@ -0,0 +1,2 @@",
                "+one",
                "+two",
                "\\ No newline at end of file",
            ]
        );
    }

    #[test]
    fn binary_content_is_said_in_one_line() {
        assert_eq!(
            unified("/f", b"\0\x01", b"text\n"),
            ["binary content differs (2 bytes now, 5 declared); not shown"]
        );
    }

    #[test]
    fn a_long_diff_is_cut_and_the_cut_counted() {
        let now: String = (0..500).map(|i| format!("line {i}\n")).collect();
        let declared: String = (0..500).map(|i| format!("LINE {i}\n")).collect();
        let d = unified("/f", now.as_bytes(), declared.as_bytes());
        assert_eq!(d.len(), MAX_SHOWN + 3);
        // 2 header lines, 1 hunk line, 1,000 changed lines: 1,003, of which 202 are shown.
        assert_eq!(d.last().unwrap(), "… 801 more lines of the diff not shown");
    }

    #[test]
    fn two_distant_changes_are_two_hunks() {
        let now: String = (0..20).map(|i| format!("{i}\n")).collect();
        let declared: String = (0..20)
            .map(|i| match i {
                2 => "two\n".to_string(),
                17 => "seventeen\n".to_string(),
                i => format!("{i}\n"),
            })
            .collect();
        let d = unified("/f", now.as_bytes(), declared.as_bytes());
        let hunks: Vec<&String> = d.iter().filter(|l| l.starts_with("@@")).collect();
        assert_eq!(hunks, ["@@ -1,6 +1,6 @@", "@@ -15,6 +15,6 @@"]);
    }
}
