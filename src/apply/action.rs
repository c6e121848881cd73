//! The action applier: run a command unless its own verification says the work is done.
//!
//! The host never learns what an action means; `verify` exiting 0 is the whole of its knowledge,
//! and it is asked again after `run`, so a command that "succeeded" without doing its work fails.

use super::{Cx, Done, Outcome, ResourceError};
use crate::declaration::{ActionSpec, Shape};
use crate::store::{self, Owned};
use run::{describe, Runner};
use std::path::Path;

/// Runs `argv` of an action under `root`, its output kept only as an excerpt: an action's output
/// is only shown, never parsed, so a command that prints gigabytes costs the host no more memory
/// than one that prints a line.
fn call(runner: &dyn Runner, root: &Path, argv: &[String]) -> std::io::Result<run::Output> {
    let shown = root.display().to_string();
    let env = [("MESH_HOST_ROOT", shown.as_str())];
    runner.call(&run::Call::new(argv).cwd(root).env(&env).excerpt())
}

/// What the action applier reads before it decides: its own `verify`, run once (the action's
/// read of whether its work is done; it changes nothing by the action's contract).
pub(super) struct Reading {
    pub verified: bool,
}

/// Runs `spec.verify` under `root`.
pub(super) fn read(
    runner: &dyn Runner,
    root: &Path,
    spec: &ActionSpec,
) -> std::io::Result<Reading> {
    Ok(Reading {
        verified: call(runner, root, &spec.verify)?.success(),
    })
}

/// What the action applier does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Decision {
    /// `verify` passes: nothing to run.
    Done,
    /// `verify` fails: `run`, then `verify` again.
    Run,
}

/// The action applier's decision: pure, from what `verify` said.
pub(super) fn decide(r: &Reading) -> Decision {
    if r.verified {
        Decision::Done
    } else {
        Decision::Run
    }
}

impl Decision {
    /// The outcome the act reports for this decision.
    pub fn outcome(self) -> Outcome {
        match self {
            Decision::Done => Outcome::Unchanged,
            Decision::Run => Outcome::Changed,
        }
    }

    /// The preview's line for this decision: what the act would do.
    pub fn preview(self, spec: &ActionSpec) -> String {
        match self {
            Decision::Done => "verify passes; nothing to run".into(),
            Decision::Run => format!("verify fails; {:?} would run", spec.run),
        }
    }
}

/// Why an action's command could not be run, as the act reports it.
fn not_run(argv: &[String]) -> impl FnOnce(std::io::Error) -> ResourceError + '_ {
    move |e| match e.kind() {
        // The message names the command and its deadline already.
        std::io::ErrorKind::TimedOut => ResourceError::Child(e.to_string()),
        _ => ResourceError::Child(format!("starting {:?}: {e}", argv[0])),
    }
}

pub(super) fn apply(cx: &mut Cx<'_>, spec: &ActionSpec) -> Result<Done, ResourceError> {
    let r = read(cx.runner, cx.root, spec).map_err(not_run(&spec.verify))?;
    execute(cx, spec, decide(&r))
}

/// Carries out a [`Decision`]: runs the action and verifies again, or records it as done.
pub(super) fn execute(
    cx: &mut Cx<'_>,
    spec: &ActionSpec,
    decision: Decision,
) -> Result<Done, ResourceError> {
    let rec = Owned {
        parents: Vec::new(),
        id: spec.id.clone(),
        module: spec.module.clone(),
        shape: Shape::Action,
        key: spec.id.clone(),
        digest: Some(store::digest(
            format!("{:?}{:?}", spec.run, spec.verify).as_bytes(),
        )),
        found: false,
        stamp: None,
    };
    if decision == Decision::Done {
        let was = cx.store.state.owned(&spec.id).cloned();
        cx.refresh_owned(rec, was.as_ref())?;
        return Ok(Done::new(
            Outcome::Unchanged,
            "verify passes; nothing to run",
        ));
    }
    let out = call(cx.runner, cx.root, &spec.run).map_err(not_run(&spec.run))?;
    if !out.success() {
        return Err(ResourceError::NotAsDeclared(format!(
            "run {}",
            describe(&spec.run, &out)
        )));
    }
    cx.changed(&spec.id);
    let check = call(cx.runner, cx.root, &spec.verify).map_err(not_run(&spec.verify))?;
    if !check.success() {
        return Err(ResourceError::NotAsDeclared(format!(
            "ran {:?}, but verify {}",
            spec.run[0],
            describe(&spec.verify, &check)
        )));
    }
    cx.record_owned(rec)?;
    Ok(Done::new(
        Outcome::Changed,
        format!("ran {:?}; verify now passes", spec.run[0]),
    ))
}

#[cfg(test)]
mod tests {
    use crate::apply::{apply, Host, Outcome};
    use crate::declaration::{validate_value, Source};
    use run::SystemRunner;
    use serde_json::json;

    /// Whether another holder could take the store's lock now, without waiting.
    fn lock_is_free(root: &std::path::Path) -> bool {
        let f = std::fs::File::open(root.join("var/lib/mesh-host/lock")).expect("lock file");
        // Let go of again when the lock is dropped, at the end of this call.
        nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock).is_ok()
    }

    #[test]
    fn an_action_past_its_deadline_fails_and_lets_go_of_the_store() {
        let root = tempfile::tempdir().unwrap();
        // The fake firewall: the sweep every apply makes must not touch this namespace's.
        let fake = crate::node_firewall::fake::Recording::default();
        let open = move |_: &std::path::Path,
                         _: &crate::declaration::Declaration|
              -> Box<dyn crate::node_firewall::NodeFirewall> {
            Box::new(fake.clone())
        };
        let host = Host {
            root: root.path(),
            runner: &SystemRunner,
            firewall: &open,
            confirm: false,
        };
        let decl = |verify: &str| {
            let v = json!({
                "version": 1, "node": "n1", "mode": "converged",
                "settings": {
                    "ports": {"store": 5432, "bus": 5672, "broker_management": 15672,
                              "registry": 5000, "hub": 51820},
                    "deadlines": {"action_s": 1}
                },
                "resources": [{"id": "db/migrate", "type": "action",
                               "run": ["true"], "verify": ["sh", "-c", verify]}]
            });
            validate_value(&v, Source::Local).unwrap_or_else(|p| panic!("refused:\n{p}"))
        };
        // A resident host applies again in the same process: the lock must be free once an
        // apply returns, even one whose child was killed.
        let report = apply(&host, &decl("sleep 30 & sleep 30"), Source::Local).unwrap();
        let failed = report.failed().expect("the action fails");
        assert_eq!(failed.outcome, Outcome::Failed);
        assert_eq!(
            failed.detail,
            "sh -c \"sleep 30 & sleep 30\" did not finish within 1 s and was killed"
        );
        assert!(
            lock_is_free(root.path()),
            "the apply still holds the store's lock"
        );

        let report = apply(&host, &decl("true"), Source::Local).unwrap();
        assert!(report.failed().is_none(), "{}", report.render());
        assert_eq!(report.entries[0].outcome, Outcome::Unchanged);
    }
}
