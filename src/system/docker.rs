//! Docker, through its CLI: `docker` finds its engine by `DOCKER_HOST` (or its current context)
//! in the host's environment, which the host passes through untouched, so the lab can point the
//! host at an engine inside a network namespace exactly as an operator would.
//!
//! What is Docker's own, and relied on by the shared [`CliRuntime`]: `container inspect` of an
//! absent container exits 1 saying "No such container"; `rm -f` of one exits 0; `create` takes one
//! `--network`; `Config.Image` keeps the reference as typed.

use super::{CliRuntime, Flavour, RuntimeKind};
use run::Runner;

pub static DOCKER: Flavour = Flavour {
    kind: RuntimeKind::Docker,
    program: "docker",
};

/// The machine's Docker, driven through the `docker` on PATH.
pub fn new(runner: &dyn Runner) -> CliRuntime<'_> {
    CliRuntime::new(runner, &DOCKER)
}
