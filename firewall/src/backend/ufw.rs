//! ufw: openings written with ufw's own commands, each rule carrying the mesh's mark as its
//! comment (`ufw allow … comment 'mesh-host:<id>#<fingerprint>'`); incoming with `ufw allow`,
//! forwarded with `ufw route allow`. ufw keeps its rules in its own files and orders them itself,
//! so the engine hands it every opening at once. Only rules whose comment is a full mark are ever
//! deleted, each with `ufw delete` of the rule exactly as `ufw show added` prints it.
//!
//! Retired with what ufw's unit runs to stop it (`ufw-init stop`: ufw's chains removed, the
//! built-in chains' policies back to accept, other programs' chains left), so `/etc/ufw` stays
//! byte for byte what it was (`ufw disable` would rewrite `ufw.conf`); the core disables
//! `ufw.service`. Restored with `ufw-init start`, which loads the same files.

use super::{Change, Cx, Driver, TableKey, TableView};
use crate::detect::{Backend, Layer};
use crate::engine::{Converged, Presence, Scope, State};
use crate::error::{Error, Result};
use crate::netlink::Hook;
use crate::opening::{From, Opening, Path};
use crate::retire::{Retired, Saved};
use crate::rules::{self, Site};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path as FsPath;

pub struct Ufw;

/// Where ufw's init script lives (Debian and Ubuntu; some systems keep it under /usr/lib).
const UFW_INIT: &[&str] = &["/lib/ufw/ufw-init", "/usr/lib/ufw/ufw-init"];

/// The argv (after `ufw`) of each rule an opening needs, every one ending in its mark.
fn commands(o: &Opening) -> Vec<Vec<String>> {
    let mark = rules::mark(o);
    let mut head: Vec<String> = match o.path {
        Path::Incoming => vec!["allow".into()],
        Path::Forwarded => vec!["route".into(), "allow".into()],
    };
    if let From::Interface(i) = &o.from {
        head.extend(["in".into(), "on".into(), i.clone()]);
    }
    let sources: Vec<String> = match &o.from {
        From::Networks(nets) => nets.iter().map(|n| n.to_string()).collect(),
        _ => vec!["any".into()],
    };
    sources
        .into_iter()
        .map(|src| {
            let mut argv = head.clone();
            argv.extend(
                [
                    "proto",
                    o.proto.as_str(),
                    "from",
                    &src,
                    "to",
                    "any",
                    "port",
                    &o.port.to_string(),
                    "comment",
                    &mark,
                ]
                .map(String::from),
            );
            argv
        })
        .collect()
}

/// The rules ufw lists as added (`ufw show added`), each as the argv after `ufw` that deletes
/// it, with its mark when its comment is a full mark.
fn added(cx: &Cx<'_>) -> Result<Vec<(Vec<String>, Option<String>)>> {
    let out = cx
        .exec
        .run_ok("ufw", &["show".into(), "added".into()], None)?;
    Ok(out
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("ufw "))
        .map(|l| {
            let argv = split_quoted(l);
            let mark = argv
                .iter()
                .position(|a| a == "comment")
                .and_then(|i| argv.get(i + 1))
                .filter(|c| rules::parse_mark(c).is_some())
                .cloned();
            (argv, mark)
        })
        .collect())
}

/// Splits a line as ufw prints it: words, with a comment in single quotes kept whole.
fn split_quoted(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    let mut any = false;
    for c in line.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                any = true;
            }
            ' ' if !quoted => {
                if any {
                    out.push(std::mem::take(&mut word));
                    any = false;
                }
            }
            c => {
                word.push(c);
                any = true;
            }
        }
    }
    if any {
        out.push(word);
    }
    out
}

fn ufw_init(cx: &Cx<'_>) -> Result<String> {
    UFW_INIT
        .iter()
        .find(|p| FsPath::new(p).is_file())
        .map(|p| p.to_string())
        .ok_or_else(|| {
            let _ = cx;
            Error::Unsupported {
                reason: format!("ufw's init script is not at {}", UFW_INIT.join(" or ")),
            }
        })
}

fn active(cx: &Cx<'_>) -> Result<bool> {
    let out = cx.exec.run_ok("ufw", &["status".into()], None)?;
    Ok(out
        .stdout
        .lines()
        .next()
        .is_some_and(|l| l.trim() == "Status: active"))
}

impl Driver for Ufw {
    fn read(&self, key: &TableKey, _cx: &mut Cx<'_>) -> Result<TableView> {
        Err(Error::Unsupported {
            reason: format!("{key} is ufw's: openings go through ufw's own commands"),
        })
    }

    fn write(&self, key: &TableKey, _: &TableView, _: &[Change], _: &mut Cx<'_>) -> Result<()> {
        Err(Error::Unsupported {
            reason: format!("{key} is ufw's: openings go through ufw's own commands"),
        })
    }

    fn rules_for(&self, o: &Opening, _site: Site) -> usize {
        commands(o).len()
    }

    fn whole(&self) -> bool {
        true
    }

    fn converge_whole(
        &self,
        layers: &[Layer],
        openings: &[Opening],
        scope: Scope,
        write: bool,
        cx: &mut Cx<'_>,
    ) -> Result<Converged> {
        let mut done = Converged::default();
        if !cx.exec.exists("ufw") {
            return Err(Error::Unsupported {
                reason: "ufw's chains are loaded but the ufw command is not installed".into(),
            });
        }
        // A ufw that is not running (stopped with ufw-init: retired on the flip) refuses
        // nothing, and its files are left exactly as they are: the mesh's rules in them are in
        // force again when ufw starts.
        if !active(cx)? {
            for l in layers {
                for o in openings.iter().filter(|o| l.crossed_by(o)) {
                    done.states.entry(o.id.clone()).or_default().push(Presence {
                        layer: l.describe(),
                        chain: None,
                        state: State::NotNeeded(
                            "ufw is not running: its chains are empty and refuse nothing".into(),
                        ),
                    });
                }
            }
            return Ok(done);
        }
        // Only openings whose path crosses a ufw layer that can drop need a rule.
        let needed: Vec<&Opening> = openings
            .iter()
            .filter(|o| layers.iter().any(|l| l.can_drop && l.crossed_by(o)))
            .collect();
        let wanted: BTreeMap<String, &Opening> =
            needed.iter().map(|o| (rules::mark(o), *o)).collect();
        let given: BTreeSet<&str> = openings.iter().map(|o| o.id.as_str()).collect();
        let mut now = added(cx)?;
        let count = |now: &[(Vec<String>, Option<String>)], mark: &str| {
            now.iter()
                .filter(|(_, m)| m.as_deref() == Some(mark))
                .count()
        };
        if write {
            // Marked rules of old versions, of miscounted openings, and (scope All) of openings
            // not given go; unmarked rules are never touched.
            for (argv, mark) in &now {
                let Some(mark) = mark else { continue };
                let remove = match wanted.get(mark) {
                    Some(o) => count(&now, mark) != commands(o).len(),
                    None => {
                        scope == Scope::All
                            || rules::id_of(mark).is_some_and(|id| given.contains(id))
                    }
                };
                if remove {
                    // `ufw delete RULE`, and for a routed rule `ufw route delete RULE`.
                    let args: Vec<String> = match argv.split_first() {
                        Some((first, rest)) if first == "route" => ["route", "delete"]
                            .iter()
                            .map(|s| s.to_string())
                            .chain(rest.iter().cloned())
                            .collect(),
                        _ => std::iter::once("delete".to_string())
                            .chain(argv.iter().cloned())
                            .collect(),
                    };
                    cx.exec.run_ok("ufw", &args, None)?;
                    done.removed.push((mark.clone(), "ufw".into()));
                }
            }
            now = added(cx)?;
            for (mark, o) in &wanted {
                let want = commands(o);
                if count(&now, mark) == want.len() {
                    continue;
                }
                for argv in want {
                    cx.exec.run_ok("ufw", &argv, None)?;
                }
                done.added.push((o.id.clone(), "ufw".into()));
            }
            now = added(cx)?;
        }
        done.stale = now
            .iter()
            .filter_map(|(_, m)| m.as_ref())
            .filter(|m| !wanted.contains_key(*m))
            .count();
        for l in layers {
            for o in openings.iter().filter(|o| l.crossed_by(o)) {
                let mark = rules::mark(o);
                let state = if !l.can_drop {
                    State::NotNeeded(format!("nothing in {} can drop", l.chain))
                } else if !matches!(l.hook, Hook::Input | Hook::Forward) {
                    State::Unwritable(format!(
                        "{} refuses at {} and ufw's rules stand only at input and forward",
                        l.describe(),
                        l.hook_name()
                    ))
                } else if count(&now, &mark) == commands(o).len() {
                    State::Present
                } else {
                    State::Missing
                };
                done.states.entry(o.id.clone()).or_default().push(Presence {
                    layer: l.describe(),
                    chain: Some(
                        match o.path {
                            Path::Incoming => "ufw-user-input",
                            Path::Forwarded => "ufw-user-forward",
                        }
                        .into(),
                    ),
                    state,
                });
            }
        }
        Ok(done)
    }

    fn survey(&self, root: &FsPath, cx: &mut Cx<'_>) -> Result<Option<Retired>> {
        if !cx.exec.exists("ufw") || !active(cx)? {
            return Ok(None);
        }
        let rules = added(cx)?.len();
        let mut config = Vec::new();
        collect_files(&root.join("etc/ufw"), root, &mut config);
        if root.join("etc/default/ufw").is_file() {
            config.push("/etc/default/ufw".into());
        }
        config.sort();
        Ok(Some(Retired {
            backend: Backend::Ufw,
            unit: Some("ufw.service".into()),
            daemon: false,
            config,
            saved: vec![Saved {
                what: format!("ufw: {rules} rules, stopped with ufw-init stop"),
                text: cx
                    .exec
                    .run_ok("ufw", &["status".into(), "verbose".into()], None)?
                    .stdout,
            }],
        }))
    }

    fn retire(&self, saved: &Retired, cx: &mut Cx<'_>) -> Result<Retired> {
        let init = ufw_init(cx)?;
        cx.exec.run_ok(&init, &["stop".into()], None)?;
        Ok(saved.clone())
    }

    fn restore(&self, _saved: &Retired, cx: &mut Cx<'_>) -> Result<()> {
        let init = ufw_init(cx)?;
        cx.exec.run_ok(&init, &["start".into()], None)?;
        if !active(cx)? {
            return Err(Error::Unsupported {
                reason: format!("ufw is not active after {init} start"),
            });
        }
        Ok(())
    }
}

/// The regular files under `dir`, as paths under the machine's root.
fn collect_files(dir: &FsPath, root: &FsPath, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        match e.file_type() {
            Ok(t) if t.is_dir() => collect_files(&p, root, out),
            Ok(t) if t.is_file() => {
                let rel = p.strip_prefix(root).unwrap_or(&p);
                out.push(format!("/{}", rel.display()));
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::RecordingExec;
    use crate::opening::{Network, Proto};

    fn opening(from: From, path: Path) -> Opening {
        Opening {
            id: "web".into(),
            port: 9000,
            proto: Proto::Tcp,
            from,
            path,
        }
    }

    /// ufw's own commands: `allow` incoming, `route allow` forwarded, `in on` for an
    /// interface, one per source network, each with the mark as its comment.
    #[test]
    fn commands_in_ufw_terms() {
        let o = opening(From::Anywhere, Path::Incoming);
        let mark = rules::mark(&o);
        assert_eq!(
            commands(&o),
            [[
                "allow", "proto", "tcp", "from", "any", "to", "any", "port", "9000", "comment",
                &mark
            ]
            .map(String::from)
            .to_vec()]
        );
        let f = opening(From::Interface("wg0".into()), Path::Forwarded);
        assert_eq!(&commands(&f)[0][..5], ["route", "allow", "in", "on", "wg0"]);
        let n = opening(
            From::Networks(vec![
                Network {
                    addr: "10.0.0.0".parse().unwrap(),
                    len: 8,
                },
                Network {
                    addr: "fd00::".parse().unwrap(),
                    len: 8,
                },
            ]),
            Path::Incoming,
        );
        let c = commands(&n);
        assert_eq!(c.len(), 2);
        assert_eq!(c[1][4], "fd00::/8");
    }

    /// `ufw show added` is read back into delete argv, a full mark recognised and an
    /// operator's comment that only looks like one left alone.
    #[test]
    fn reads_marks_from_show_added() {
        let exec = RecordingExec::default();
        exec.answers.borrow_mut().push_back(crate::exec::Output {
            code: Some(0),
            stdout: "Added user rules (see 'ufw status' for running firewall):\nufw allow 22/tcp\nufw allow 9000/tcp comment 'mesh-host:web#0123abcd'\nufw allow 8000/tcp comment 'mesh-host: keep'\n".into(),
            stderr: String::new(),
        });
        let ruleset = crate::netlink::Ruleset::default();
        let saves = BTreeMap::new();
        let mut batch = crate::netlink::Batch::new();
        let cx = Cx {
            ruleset: &ruleset,
            legacy_saves: &saves,
            batch: &mut batch,
            exec: &exec,
        };
        let got = added(&cx).unwrap();
        assert_eq!(got.len(), 3);
        assert_eq!(got[0].1, None);
        assert_eq!(
            got[1].0,
            ["allow", "9000/tcp", "comment", "mesh-host:web#0123abcd"]
        );
        assert_eq!(got[1].1.as_deref(), Some("mesh-host:web#0123abcd"));
        assert_eq!(got[2].1, None);
        assert_eq!(got[2].0.last().unwrap(), "mesh-host: keep");
    }

    fn answer(exec: &RecordingExec, stdout: &str) {
        exec.answers.borrow_mut().push_back(crate::exec::Output {
            code: Some(0),
            stdout: stdout.into(),
            stderr: String::new(),
        });
    }

    /// A convergence removes only marked rules (an old version of a given opening), keeps an
    /// operator's rule whose comment merely looks like a mark and another opening's rule
    /// (scope `Given`, counted stale), adds the opening with ufw's command, and reads the result
    /// back before saying it is present.
    #[test]
    fn converges_removing_only_what_it_marked() {
        let o = opening(From::Anywhere, Path::Incoming);
        let mark = rules::mark(&o);
        let exec = RecordingExec {
            programs: vec!["ufw".into()],
            ..RecordingExec::default()
        };
        answer(&exec, "Status: active\n");
        let operator = "ufw allow 22/tcp\nufw allow 8000/tcp comment 'mesh-host: keep'\nufw allow 7000/tcp comment 'mesh-host:other#12345678'\n";
        answer(
            &exec,
            &format!("{operator}ufw allow 9000/tcp comment 'mesh-host:web#00000000'\n"),
        );
        answer(&exec, "");
        answer(&exec, operator);
        answer(&exec, "");
        answer(
            &exec,
            &format!("{operator}ufw allow 9000/tcp comment '{mark}'\n"),
        );
        let layer = Layer {
            backend: Backend::Ufw,
            hook: Hook::Input,
            family: crate::netlink::Family::Ipv4,
            table: "filter".into(),
            chain: "INPUT".into(),
            priority: 0,
            policy: crate::netlink::Policy::Drop,
            rules: 3,
            can_drop: true,
            evidence: "ufw chains".into(),
            device: None,
            unwritable: None,
        };
        let ruleset = crate::netlink::Ruleset::default();
        let saves = BTreeMap::new();
        let mut batch = crate::netlink::Batch::new();
        let mut cx = Cx {
            ruleset: &ruleset,
            legacy_saves: &saves,
            batch: &mut batch,
            exec: &exec,
        };
        let done = Ufw
            .converge_whole(
                &[layer],
                std::slice::from_ref(&o),
                Scope::Given,
                true,
                &mut cx,
            )
            .unwrap();
        let calls: Vec<Vec<String>> = exec
            .calls
            .borrow()
            .iter()
            .map(|(_, a, _)| a.clone())
            .collect();
        assert_eq!(
            calls[2],
            [
                "delete",
                "allow",
                "9000/tcp",
                "comment",
                "mesh-host:web#00000000"
            ]
        );
        assert_eq!(calls[4], commands(&o)[0]);
        assert_eq!(calls.len(), 6, "{calls:?}");
        assert!(calls
            .iter()
            .all(|c| !c.iter().any(|a| a.contains("keep") || a.contains("other#"))));
        assert_eq!(
            done.stale, 1,
            "the other opening's rule, left for a whole declaration's sweep"
        );
        assert_eq!(done.states["web"][0].state, State::Present);
        assert_eq!(done.removed.len(), 1);
        assert_eq!(done.added, [("web".to_string(), "ufw".to_string())]);
    }
}
