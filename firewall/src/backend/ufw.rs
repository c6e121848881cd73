//! ufw: openings written with ufw's own commands, each rule carrying the mesh's mark as its
//! comment (`ufw allow … comment 'mesh-host:<id>#<fingerprint>'`); incoming with `ufw allow`,
//! forwarded with `ufw route allow` to where the container runtime's DNAT sends the published
//! port (ufw's route rules stand after the translation), so a forwarded opening waits for a
//! runtime to publish its port and follows its container to a new address. ufw keeps its rules
//! in its own files and orders them itself, so the engine hands it every opening at once. Rules
//! are compared by what they match ([`rule::key`]); none is added where ufw holds another rule
//! for the same traffic, because ufw would replace that rule with the mesh's. Only rules whose
//! comment is a full mark are ever deleted, each with `ufw delete` of the rule exactly as `ufw
//! show added` prints it.
//!
//! Retired with what ufw's unit runs to stop it (`ufw-init stop`: ufw's chains removed, the
//! built-in chains' policies back to accept, other programs' chains left), so `/etc/ufw` stays
//! byte for byte what it was (`ufw disable` would rewrite `ufw.conf`); the core disables
//! `ufw.service`. Restored with `ufw-init start`, which loads the same files.

use super::seam::{Converger, Cx, Detect, Kind, Retire, WholeDriver};
use crate::error::{Error, Result};
use crate::found::{Backend, Layer};
use crate::netlink::{Family, Hook, Ruleset};
use crate::opening::{Opening, Path};
use crate::outcome::{Converged, Presence, Scope, State};
use crate::published::{self, Target};
use crate::retire::{config_files, Retired, Saved};
use crate::rules;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path as FsPath;

mod rule;

use rule::{commands, key, split_quoted, Key};

pub struct Ufw;

/// ufw behind every seam.
pub const KIND: Kind = Kind {
    detect: &Ufw,
    converge: Converger::Whole(&Ufw),
    retire: &Ufw,
};

/// Where ufw's init script lives (Debian and Ubuntu; some systems keep it under /usr/lib).
const UFW_INIT: &[&str] = &["/lib/ufw/ufw-init", "/usr/lib/ufw/ufw-init"];

/// The rules ufw lists as added (`ufw show added`), each as the argv after `ufw` that deletes
/// it, with its mark when its comment is a full mark.
fn added(cx: &Cx<'_>) -> Result<Vec<(Vec<String>, Option<String>)>> {
    let out = crate::child::stdout(cx.exec, "ufw", &["show".into(), "added".into()], None)?;
    Ok(out
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

/// The rules one opening needs, by what they match.
struct Wanted<'a> {
    opening: &'a Opening,
    /// Where the runtime's DNAT sends a forwarded opening's port.
    to: Vec<Target>,
    argv: Vec<Vec<String>>,
    keys: BTreeSet<Key>,
}

impl Wanted<'_> {
    /// How the opening stands, given the rules ufw holds now: present when each of its rules
    /// is there with its mark; refused when another rule for the same traffic (the operator's,
    /// say) does something else with it; no rule needed when such rules already allow all of it.
    fn state(&self, now: &[(Vec<String>, Option<String>)], mark: &str) -> State {
        let o = self.opening;
        if o.path == Path::Forwarded && self.to.is_empty() {
            return State::Unwritable(format!(
                "no DNAT rule translates {} port {}: no container runtime publishes it yet, and ufw's route rules name the container it leads to (the next check writes it)",
                o.proto.as_str(),
                o.port
            ));
        }
        if self.argv.is_empty() {
            return State::NotNeeded(format!(
                "its sources have no address of the family of {}, where the runtime's DNAT sends it",
                self.to
                    .iter()
                    .map(Target::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        if self.keys.len() != self.argv.len() {
            return State::Missing;
        }
        let held = holds(now, mark);
        let mut ours = 0;
        let mut theirs = Vec::new();
        for k in &self.keys {
            if held.contains(k) {
                ours += 1;
                continue;
            }
            match other_rule(now, mark, k) {
                Some((argv, other)) if !other.allows() => {
                    return State::Refused(format!("ufw {}", argv.join(" ")))
                }
                Some((argv, _)) => theirs.push(format!("ufw {}", argv.join(" "))),
                None => return State::Missing,
            }
        }
        if ours == 0 {
            State::NotNeeded(format!("{} already admits it", theirs.join("; ")))
        } else {
            State::Present
        }
    }
}

/// What the rules marked `mark` match now.
fn holds(now: &[(Vec<String>, Option<String>)], mark: &str) -> BTreeSet<Key> {
    now.iter()
        .filter(|(_, m)| m.as_deref() == Some(mark))
        .filter_map(|(argv, _)| key(argv))
        .collect()
}

/// A rule ufw holds that matches the same traffic as `k` and is not the opening's own (marked
/// `mark`, or an older version's mark for the same id, which a writing convergence deletes).
fn other_rule<'n>(
    now: &'n [(Vec<String>, Option<String>)],
    mark: &str,
    k: &Key,
) -> Option<(&'n Vec<String>, Key)> {
    let id = rules::id_of(mark);
    now.iter()
        .filter(|(_, m)| m.as_deref().and_then(rules::id_of) != id || id.is_none())
        .find_map(|(argv, _)| key(argv).filter(|o| o.same_traffic(k)).map(|o| (argv, o)))
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
    let out = crate::child::stdout(cx.exec, "ufw", &["status".into()], None)?;
    Ok(out
        .lines()
        .next()
        .is_some_and(|l| l.trim() == "Status: active"))
}

impl Detect for Ufw {
    /// Tables holding ufw's `ufw-*` (or `ufw6-*`) chains.
    fn wrote(
        &self,
        ruleset: &Ruleset,
        family: Family,
        table: &str,
        _chain: &str,
    ) -> Option<String> {
        ruleset
            .chains
            .iter()
            .any(|c| {
                c.family == family
                    && c.table == table
                    && (c.name.starts_with("ufw-") || c.name.starts_with("ufw6-"))
            })
            .then(|| format!("ufw chains in table {family} {table}"))
    }

    fn wrote_legacy(&self, chains: &[&str]) -> bool {
        chains.iter().any(|c| c.starts_with("ufw"))
    }
}

impl WholeDriver for Ufw {
    fn converge(
        &self,
        layers: &[Layer],
        openings: &[Opening],
        scope: Scope,
        write: bool,
        cx: &mut Cx<'_>,
    ) -> Result<Converged> {
        if !cx.exec.exists("ufw") {
            return Err(Error::Unsupported {
                reason: "ufw's chains are loaded but the ufw command is not installed".into(),
            });
        }
        // A ufw that is not running (stopped with ufw-init: retired on the flip) refuses
        // nothing, and its files are left exactly as they are: the mesh's rules in them are in
        // force again when ufw starts.
        if !active(cx)? {
            return Ok(not_running(layers, openings));
        }
        let mut done = Converged::default();
        let wanted = wanted(layers, openings, cx);
        let mut now = added(cx)?;
        if write {
            remove_unwanted(&now, &wanted, openings, scope, cx, &mut done)?;
            // ufw is read again only after it was written: each `ufw show added` is a process.
            if !done.removed.is_empty() {
                now = added(cx)?;
            }
            add_missing(&now, &wanted, cx, &mut done)?;
            if !done.added.is_empty() {
                now = added(cx)?;
            }
        }
        done.stale = now
            .iter()
            .filter_map(|(_, m)| m.as_ref())
            .filter(|m| !wanted.contains_key(*m))
            .count();
        states(layers, openings, &wanted, &now, &mut done);
        Ok(done)
    }
}

/// Every opening crossing a layer of a ufw that is not running: no rule needed.
fn not_running(layers: &[Layer], openings: &[Opening]) -> Converged {
    let mut done = Converged::default();
    for l in layers {
        for o in openings.iter().filter(|o| l.crossed_by(o)) {
            done.states.entry(o.id.clone()).or_default().push(Presence {
                layer: l.id(),
                chain: None,
                state: State::NotNeeded(
                    "ufw is not running: its chains are empty and refuse nothing".into(),
                ),
            });
        }
    }
    done
}

/// Each needed opening's rules, by its mark (only openings whose path crosses a ufw layer that
/// can drop need one); a forwarded one's name the destinations the runtime's DNAT sends its port
/// to now, so a recreated container's new address replaces the old one.
fn wanted<'o>(
    layers: &[Layer],
    openings: &'o [Opening],
    cx: &Cx<'_>,
) -> BTreeMap<String, Wanted<'o>> {
    openings
        .iter()
        .filter(|o| layers.iter().any(|l| l.can_drop && l.crossed_by(o)))
        .map(|o| {
            let to = match o.path {
                Path::Incoming => Vec::new(),
                Path::Forwarded => published::targets(cx.ruleset, cx.legacy_saves, o.proto, o.port),
            };
            let argv = commands(o, &to);
            let keys = argv.iter().filter_map(|a| key(a)).collect();
            (
                rules::mark(o),
                Wanted {
                    opening: o,
                    to,
                    argv,
                    keys,
                },
            )
        })
        .collect()
}

/// Deletes marked rules of old versions, rules of a given opening it no longer needs (a
/// destination the runtime no longer sends its port to, a repeat), and (scope All) rules of
/// openings not given; unmarked rules are never touched.
fn remove_unwanted(
    now: &[(Vec<String>, Option<String>)],
    wanted: &BTreeMap<String, Wanted<'_>>,
    openings: &[Opening],
    scope: Scope,
    cx: &Cx<'_>,
    done: &mut Converged,
) -> Result<()> {
    let given: BTreeSet<&str> = openings.iter().map(|o| o.id.as_str()).collect();
    let mut kept: BTreeSet<(String, Key)> = BTreeSet::new();
    for (argv, mark) in now {
        let Some(mark) = mark else { continue };
        let remove = match wanted.get(mark) {
            Some(w) => match key(argv) {
                Some(k) if w.keys.contains(&k) => !kept.insert((mark.clone(), k)),
                _ => true,
            },
            None => scope == Scope::All || rules::id_of(mark).is_some_and(|id| given.contains(id)),
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
            crate::child::run_ok(cx.exec, "ufw", &args, None)?;
            done.removed.push((mark.clone(), "ufw".into()));
        }
    }
    Ok(())
}

/// Adds each wanted opening's rules that ufw does not hold. A rule someone else holds for the
/// same traffic is never rewritten: ufw would replace it with the mesh's (its action and
/// comment), so such a rule is left to decide (see [`Wanted::state`]).
fn add_missing(
    now: &[(Vec<String>, Option<String>)],
    wanted: &BTreeMap<String, Wanted<'_>>,
    cx: &Cx<'_>,
    done: &mut Converged,
) -> Result<()> {
    for (mark, w) in wanted {
        let held = holds(now, mark);
        let missing: Vec<&Vec<String>> = w
            .argv
            .iter()
            .filter(|a| match key(a) {
                Some(k) => !held.contains(&k) && other_rule(now, mark, &k).is_none(),
                None => true,
            })
            .collect();
        if missing.is_empty() {
            continue;
        }
        for argv in missing {
            crate::child::run_ok(cx.exec, "ufw", argv, None)?;
        }
        done.added.push((w.opening.id.clone(), "ufw".into()));
    }
    Ok(())
}

/// How each opening stands in each layer it crosses, given the rules ufw holds `now`.
fn states(
    layers: &[Layer],
    openings: &[Opening],
    wanted: &BTreeMap<String, Wanted<'_>>,
    now: &[(Vec<String>, Option<String>)],
    done: &mut Converged,
) {
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
            } else if let Some(w) = wanted.get(&mark) {
                w.state(now, &mark)
            } else {
                State::Missing
            };
            done.states.entry(o.id.clone()).or_default().push(Presence {
                layer: l.id(),
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
}

impl Retire for Ufw {
    fn survey(&self, root: &FsPath, cx: &mut Cx<'_>) -> Result<Option<Retired>> {
        if !cx.exec.exists("ufw") || !active(cx)? {
            return Ok(None);
        }
        let rules = added(cx)?.len();
        let mut config = Vec::new();
        config_files(&root.join("etc/ufw"), root, &mut config);
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
                text: crate::child::stdout(
                    cx.exec,
                    "ufw",
                    &["status".into(), "verbose".into()],
                    None,
                )?,
            }],
        }))
    }

    fn retire(&self, saved: &Retired, cx: &mut Cx<'_>) -> Result<Retired> {
        let init = ufw_init(cx)?;
        crate::child::run_ok(cx.exec, &init, &["stop".into()], None)?;
        Ok(saved.clone())
    }

    fn restore(&self, _saved: &Retired, cx: &mut Cx<'_>) -> Result<()> {
        let init = ufw_init(cx)?;
        crate::child::run_ok(cx.exec, &init, &["start".into()], None)?;
        if !active(cx)? {
            return Err(Error::Unsupported {
                reason: format!("ufw is not active after {init} start"),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::opening::{From, Proto};
    use run::RecordingRunner;

    fn opening(from: From, path: Path) -> Opening {
        Opening {
            id: "web".into(),
            port: 9000,
            proto: Proto::Tcp,
            from,
            path,
        }
    }

    /// `ufw show added` is read back into delete argv, a full mark recognised and an
    /// operator's comment that only looks like one left alone.
    #[test]
    fn reads_marks_from_show_added() {
        let exec = RecordingRunner::succeeding();
        exec.answers.borrow_mut().push_back(crate::child::answer("Added user rules (see 'ufw status' for running firewall):\nufw allow 22/tcp\nufw allow 9000/tcp comment 'mesh-host:web#0123abcd'\nufw allow 8000/tcp comment 'mesh-host: keep'\n"));
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

    fn answer(exec: &RecordingRunner, stdout: &str) {
        exec.answers
            .borrow_mut()
            .push_back(crate::child::answer(stdout));
    }

    /// A convergence removes only marked rules (an old version of a given opening), keeps an
    /// operator's rule whose comment merely looks like a mark and another opening's rule
    /// (scope `Given`, counted stale), adds the opening with ufw's command, and reads the result
    /// back before saying it is present.
    #[test]
    fn converges_removing_only_what_it_marked() {
        let o = opening(From::Anywhere, Path::Incoming);
        let mark = rules::mark(&o);
        let operator = "ufw allow 22/tcp\nufw allow 8000/tcp comment 'mesh-host: keep'\nufw allow 7000/tcp comment 'mesh-host:other#12345678'\n";
        let (done, calls) = converge(
            &o,
            layer(Hook::Input),
            "",
            &[
                "Status: active\n",
                &format!("{operator}ufw allow 9000/tcp comment 'mesh-host:web#00000000'\n"),
                "",
                operator,
                "",
                &format!("{operator}ufw allow 9000/tcp comment '{mark}'\n"),
            ],
        );
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
        assert_eq!(calls[4], commands(&o, &[])[0]);
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

    /// One of ufw's layers, on `hook`, that can drop.
    fn layer(hook: Hook) -> Layer {
        Layer {
            backend: Backend::Ufw,
            hook,
            family: crate::netlink::Family::Ipv4,
            table: "filter".into(),
            chain: if hook == Hook::Input {
                "INPUT"
            } else {
                "FORWARD"
            }
            .into(),
            priority: 0,
            policy: crate::netlink::Policy::Drop,
            rules: 3,
            can_drop: true,
            evidence: "ufw chains".into(),
            device: None,
            unwritable: None,
        }
    }

    /// Runs a writing convergence of `o` through `layer` with `nat` as iptables-legacy's saved
    /// nat table (where the runtime's DNAT is read from) and `answers` as ufw's outputs in
    /// turn, returning it and the argv run.
    fn converge(
        o: &Opening,
        layer: Layer,
        nat: &str,
        answers: &[&str],
    ) -> (Converged, Vec<Vec<String>>) {
        let exec = RecordingRunner {
            programs: vec!["ufw".into()],
            ..RecordingRunner::succeeding()
        };
        for a in answers {
            answer(&exec, a);
        }
        let ruleset = crate::netlink::Ruleset::default();
        let mut saves = BTreeMap::new();
        saves.insert(
            (crate::netlink::Family::Ipv4, "nat".to_string()),
            nat.to_string(),
        );
        let mut batch = crate::netlink::Batch::new();
        let mut cx = Cx {
            ruleset: &ruleset,
            legacy_saves: &saves,
            batch: &mut batch,
            exec: &exec,
        };
        let done = Ufw
            .converge(
                &[layer],
                std::slice::from_ref(o),
                Scope::Given,
                true,
                &mut cx,
            )
            .unwrap();
        let calls = crate::child::recorded(&exec)
            .into_iter()
            .map(|(_, a, _)| a)
            .collect();
        (done, calls)
    }

    /// A forwarded opening whose container was recreated with another address: the marked rule
    /// to the old address goes, a rule to the address the DNAT now names comes, and an
    /// operator's route rule to the old address stays.
    #[test]
    fn a_forwarded_opening_follows_the_dnat_to_its_new_destination() {
        let mut o = opening(From::Anywhere, Path::Forwarded);
        o.port = 8084;
        let mark = rules::mark(&o);
        let nat = "*nat\n-A DOCKER ! -i docker0 -p tcp -m tcp --dport 8084 -j DNAT --to-destination 172.17.0.3:80\nCOMMIT\n";
        let operator = "ufw route allow to 172.17.0.2 port 80 proto tcp\n";
        let old = format!("ufw route allow to 172.17.0.2 port 80 proto tcp comment '{mark}'\n");
        let new = format!("ufw route allow to 172.17.0.3 port 80 proto tcp comment '{mark}'\n");
        let (done, calls) = converge(
            &o,
            layer(Hook::Forward),
            nat,
            &[
                "Status: active\n",
                &format!("{operator}{old}"),
                "",
                operator,
                "",
                &format!("{operator}{new}"),
            ],
        );
        assert_eq!(
            calls[2],
            split_quoted(&format!(
                "route delete allow to 172.17.0.2 port 80 proto tcp comment '{mark}'"
            ))
        );
        assert_eq!(
            calls[4],
            split_quoted(&format!(
                "route allow proto tcp from any to 172.17.0.3 port 80 comment '{mark}'"
            ))
        );
        assert_eq!(calls.len(), 6, "{calls:?}");
        assert_eq!(done.states["web"][0].state, State::Present);
        assert_eq!(done.removed, [(mark.clone(), "ufw".to_string())]);

        // Converged again with nothing changed: nothing is written, and ufw's rules are read
        // once.
        let (done, calls) = converge(
            &o,
            layer(Hook::Forward),
            nat,
            &["Status: active\n", &format!("{operator}{new}")],
        );
        assert_eq!(calls.len(), 2, "only reads: {calls:?}");
        assert!(done.added.is_empty() && done.removed.is_empty());
        assert_eq!(done.states["web"][0].state, State::Present);
    }

    /// No DNAT translates the port yet: nothing is written, and the state says why.
    #[test]
    fn a_forwarded_opening_nothing_publishes_writes_nothing() {
        let mut o = opening(From::Anywhere, Path::Forwarded);
        o.port = 8084;
        let (done, calls) = converge(
            &o,
            layer(Hook::Forward),
            "*nat\nCOMMIT\n",
            &["Status: active\n", ""],
        );
        assert_eq!(calls.len(), 2, "only reads: {calls:?}");
        assert!(done.added.is_empty());
        match &done.states["web"][0].state {
            State::Unwritable(why) => {
                assert!(
                    why.contains("no DNAT rule translates tcp port 8084"),
                    "{why}"
                )
            }
            other => panic!("{other:?}"),
        }
    }

    /// ufw replaces a rule that differs from an added one only in action or comment: where the
    /// operator holds a rule for the same traffic nothing is written, and the state says whose
    /// rule decides (a deny refuses the opening, an allow already admits it).
    #[test]
    fn an_operators_rule_for_the_same_traffic_is_never_rewritten() {
        let mut o = opening(From::Anywhere, Path::Forwarded);
        o.port = 8084;
        let nat = "-A DOCKER -p tcp -m tcp --dport 8084 -j DNAT --to-destination 172.17.0.3:80\n";
        for (rule, refused) in [
            ("ufw route deny to 172.17.0.3 port 80 proto tcp\n", true),
            (
                "ufw route allow to 172.17.0.3 port 80 proto tcp comment 'mine'\n",
                false,
            ),
        ] {
            let (done, calls) =
                converge(&o, layer(Hook::Forward), nat, &["Status: active\n", rule]);
            assert_eq!(calls.len(), 2, "only reads: {calls:?}");
            match &done.states["web"][0].state {
                State::Refused(r) if refused => assert!(r.starts_with("ufw route deny"), "{r}"),
                State::NotNeeded(why) if !refused => {
                    assert!(why.contains("comment mine already admits it"), "{why}")
                }
                other => panic!("{rule}: {other:?}"),
            }
        }
    }
}
