//! Podman, through its Docker-compatible CLI: with `CONTAINER_HOST` set in the host's environment
//! `podman` talks to that Podman service (the remote client), otherwise it runs containers itself
//! with the machine's own `containers.conf`.
//!
//! What is Podman's own, and absorbed by the shared [`CliRuntime`]: `container inspect` of an
//! absent container exits 125 saying "no such container"; `Config.Image` holds a qualified
//! reference (`localhost/x:1`), compared through [`super::normalize_image`]; the environment it
//! reports carries variables of its own (`container=podman`, `HOSTNAME`, `TERM`, `PATH`), so the
//! host compares the variables it declared and nothing else. On a machine without systemd and
//! without CAP_SYS_RESOURCE, Podman needs `runtime = "runc"`, `cgroup_manager = "cgroupfs"` and
//! lowered `default_ulimits` in its `containers.conf`; that is the machine's configuration, not
//! the host's, so the host passes no such flags.

use super::{CliRuntime, Flavour, RuntimeKind};
use run::Runner;

pub static PODMAN: Flavour = Flavour {
    kind: RuntimeKind::Podman,
    program: "podman",
};

/// The machine's Podman, driven through the `podman` on PATH.
pub fn new(runner: &dyn Runner) -> CliRuntime<'_> {
    CliRuntime::new(runner, &PODMAN)
}
