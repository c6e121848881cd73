//! The action applier: run a command unless its own verification says the work is done.
//!
//! The host never learns what an action means; `verify` exiting 0 is the whole of its knowledge,
//! and it is asked again after `run`, so a command that "succeeded" without doing its work fails.

use super::{Cx, Done, Outcome};
use crate::declaration::{ActionSpec, Shape};
use crate::runner::describe;
use crate::store::{self, Owned};

pub(super) fn apply(cx: &mut Cx<'_>, spec: &ActionSpec) -> Result<Done, String> {
    let root = cx.root.display().to_string();
    let env = [("MESH_HOST_ROOT", root.as_str())];
    let run = |cx: &Cx<'_>, argv: &[String]| {
        cx.runner
            .run(argv, cx.root, &env)
            .map_err(|e| match e.kind() {
                // The message names the command and its deadline already.
                std::io::ErrorKind::TimedOut => e.to_string(),
                _ => format!("starting {:?}: {e}", argv[0]),
            })
    };
    let rec = Owned {
        id: spec.id.clone(),
        module: spec.module.clone(),
        shape: Shape::Action,
        key: spec.id.clone(),
        digest: Some(store::digest(
            format!("{:?}{:?}", spec.run, spec.verify).as_bytes(),
        )),
        found: false,
    };
    if run(cx, &spec.verify)?.success() {
        if cx.store.state.owned(&spec.id) != Some(&rec) {
            cx.record_owned(rec)?;
        }
        return Ok(Done::new(
            Outcome::Unchanged,
            "verify passes; nothing to run",
        ));
    }
    let out = run(cx, &spec.run)?;
    if !out.success() {
        return Err(format!("run {}", describe(&spec.run, &out)));
    }
    cx.changed(&spec.id);
    let check = run(cx, &spec.verify)?;
    if !check.success() {
        return Err(format!(
            "ran {:?}, but verify {}",
            spec.run[0],
            describe(&spec.verify, &check)
        ));
    }
    cx.record_owned(rec)?;
    Ok(Done::new(
        Outcome::Changed,
        format!("ran {:?}; verify now passes", spec.run[0]),
    ))
}
