//! What a child past its deadline leaves behind: every process descended from it, found through
//! the process table's parent links (`/proc/*/stat`) and, where the child itself has ended, by the
//! mark its environment carries, stopped until none is left to find, then killed. A grandchild
//! that called `setsid` or `setpgid` has left the child's process group, so the group's kill
//! would not reach it; this does.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// The environment variable every child is started with, holding the call's own mark
/// (`<host pid>.<call number>`): what a process the child started still carries once the child
/// has ended and it was handed to init (its parent link to the child is gone then).
pub const MARK: &str = "MESH_HOST_CALL";

/// The most processes one call's leftovers are looked for among, and the most rounds of looking:
/// bounds on a fork bomb's cost, not figures a real child reaches.
const MOST_PROCESSES: usize = 4096;
const MOST_ROUNDS: usize = 64;

/// How many characters of a killed process's command line a report keeps.
const COMMAND_CHARS: usize = 120;

/// One process killed because its call was past its deadline, having left the call's process
/// group (so the group's kill would not have reached it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftBehind {
    pub pid: i32,
    /// Its command line, arguments joined by spaces, cut to [`COMMAND_CHARS`].
    pub command: String,
}

impl fmt::Display for LeftBehind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pid {} ({})", self.pid, self.command)
    }
}

/// "killed 1 process left behind: pid 812 (sleep 1000)", or nothing when none was.
pub fn said(left: &[LeftBehind]) -> Option<String> {
    if left.is_empty() {
        return None;
    }
    let n = left.len();
    let names: Vec<String> = left.iter().map(ToString::to_string).collect();
    Some(format!(
        "killed {n} process{} left behind: {}",
        if n == 1 { "" } else { "es" },
        names.join(", ")
    ))
}

/// One row of the process table: a process's parent and process group.
struct Row {
    ppid: i32,
    pgid: i32,
}

/// The process table as `/proc` gives it now: pid to parent and group. A process that ends while
/// it is read is left out.
fn table() -> BTreeMap<i32, Row> {
    let mut rows = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return rows;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // The command name is in parentheses and may hold anything: read after the last ')'.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // state, ppid, pgrp: a zombie has ended already.
        if fields.first() == Some(&"Z") {
            continue;
        }
        let (Some(ppid), Some(pgid)) = (
            fields.get(1).and_then(|f| f.parse().ok()),
            fields.get(2).and_then(|f| f.parse().ok()),
        ) else {
            continue;
        };
        rows.insert(pid, Row { ppid, pgid });
        if rows.len() >= MOST_PROCESSES * 16 {
            break;
        }
    }
    rows
}

/// Whether the process's environment holds `MARK=mark` (its environment as it was given at its
/// last exec; one that cannot be read holds nothing here).
fn marked(pid: i32, mark: &str) -> bool {
    use std::io::Read;
    let Ok(f) = std::fs::File::open(format!("/proc/{pid}/environ")) else {
        return false;
    };
    // An environment is bounded by the kernel's argument limits; read no more than 1 MiB of it.
    let mut env = Vec::new();
    if f.take(1 << 20).read_to_end(&mut env).is_err() {
        return false;
    }
    let want = format!("{MARK}={mark}");
    env.split(|b| *b == 0).any(|v| v == want.as_bytes())
}

/// The command line of a process, for a report.
fn command(pid: i32) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let text: String = raw
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect::<Vec<_>>()
        .join(" ");
    let text = if text.is_empty() {
        std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .map(|c| format!("[{}]", c.trim()))
            .unwrap_or_else(|_| "?".to_string())
    } else {
        text
    };
    match text.char_indices().nth(COMMAND_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

/// Kills everything the child `pid` (not yet reaped) left running: its descendants by parent
/// link, and, when `orphans` (the child has ended, so what it started was handed to init),
/// every process carrying `mark`. Each found process is stopped first, so none forks again, and
/// the table is read again until a reading finds nothing new (at most [`MOST_ROUNDS`] readings,
/// [`MOST_PROCESSES`] processes); then all are killed. Returns those that had left the child's
/// process group, which the group's kill would not have reached. The host's own process is never
/// among them: it is no descendant of its child and carries no call's mark.
pub(crate) fn kill_all(pid: i32, mark: &str, orphans: bool) -> Vec<LeftBehind> {
    let me = std::process::id() as i32;
    let mut found: BTreeSet<i32> = BTreeSet::new();
    let mut escaped: Vec<LeftBehind> = Vec::new();
    for _ in 0..MOST_ROUNDS {
        let rows = table();
        let mut tree: BTreeSet<i32> = BTreeSet::from([pid]);
        // Parent links, followed until nothing is added (the table is a forest).
        loop {
            let before = tree.len();
            for (p, row) in &rows {
                if tree.contains(&row.ppid) {
                    tree.insert(*p);
                }
            }
            if tree.len() == before {
                break;
            }
        }
        if orphans {
            for p in rows.keys() {
                if !tree.contains(p) && !found.contains(p) && marked(*p, mark) {
                    tree.insert(*p);
                }
            }
        }
        tree.remove(&pid);
        tree.remove(&me);
        let new: Vec<i32> = tree.difference(&found).copied().collect();
        if new.is_empty() || found.len() >= MOST_PROCESSES {
            break;
        }
        for p in new {
            // SAFETY: kill(2) has no memory effects. `p` was read from the table just now as a
            // descendant of (or marked by) this call's child; only in the moment since could it
            // have ended, been reaped and its pid taken again.
            unsafe {
                libc::kill(p, libc::SIGSTOP);
            }
            if rows.get(&p).is_some_and(|r| r.pgid != pid) {
                escaped.push(LeftBehind {
                    pid: p,
                    command: command(p),
                });
            }
            found.insert(p);
        }
    }
    for p in &found {
        // SAFETY: as above; SIGKILL ends a stopped process too.
        unsafe {
            libc::kill(*p, libc::SIGKILL);
        }
    }
    escaped
}
