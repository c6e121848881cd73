//! The machine's own systems, each behind one small seam: its container runtime, its service
//! manager and its package manager, and the backends this build speaks.
//!
//! The host is built per operating system: `systemd` and `apt` are the Debian host's
//! implementation, not abstractions the mesh grows. A machine has its package manager and init
//! *because* of the system it is, so one cargo feature per system (`debian`, `arch`, `alpine`)
//! selects both, and a build carries no other. The container runtime is the exception: Docker and
//! Podman run on every system, so it is detected at run time (see [`container_runtime`]).
//!
//! Every child process goes through the [`Runner`] seam with an argv array. Each trait's verbs say
//! whether they are idempotent; none of them is trusted on its exit status alone — the appliers
//! read back what they changed.

pub mod bridges;
mod cli_runtime;
pub mod docker;
pub mod engine_api;
pub mod engine_json;
pub mod podman;
pub mod profile;

#[cfg(any(feature = "debian", feature = "arch", test))]
pub mod systemd;

#[cfg(any(feature = "alpine", test))]
pub mod openrc;

#[cfg(any(feature = "debian", test))]
pub mod apt;

#[cfg(any(feature = "arch", test))]
pub mod pacman;

#[cfg(any(feature = "alpine", test))]
pub mod apk;

#[cfg(test)]
pub mod fake;

pub use bridges::runtime_bridges;
pub use cli_runtime::{
    listed_names, normalize_image, parse_inspect, sort_ports, CliRuntime, Flavour,
};

use crate::build::BUILD;
use crate::declaration::{PublishedPort, Shape};
use run::{describe, Output, Runner};
use std::collections::BTreeMap;
use std::path::Path;

/// Why a system command did not give the host what it needed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The program could not be started at all (not on PATH, not executable).
    #[error("starting {program}: {source}")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
    /// The program ran and failed: its arguments, status and the tail of its stderr.
    #[error("{0}")]
    Failed(String),
    /// The program's answer could not be read.
    #[error("{program} gave an answer the host cannot read: {detail}")]
    Unreadable { program: String, detail: String },
    /// This build or this machine has no system of the kind asked for (a build for a system
    /// without a service manager, no container runtime on PATH).
    #[error("{0}")]
    Unavailable(String),
}

/// Why a program's answer does not read as the host expects (what was missing or malformed):
/// the detail an [`Error::Unreadable`] gives beside the program's name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unparsed(pub String);

/// Runs `argv` through the runner in `/` (system commands act on the machine, never on `--root`).
pub(crate) fn run(
    runner: &dyn Runner,
    argv: &[String],
    env: &[(&str, &str)],
) -> Result<Output, Error> {
    runner
        .run(argv, Path::new("/"), env)
        .map_err(|source| match source.kind() {
            // The message names the command and its deadline already.
            std::io::ErrorKind::TimedOut => Error::Failed(source.to_string()),
            _ => Error::Spawn {
                program: argv.first().cloned().unwrap_or_default(),
                source,
            },
        })
}

/// Runs `argv` and fails unless it exits 0.
pub(crate) fn run_ok(
    runner: &dyn Runner,
    argv: &[String],
    env: &[(&str, &str)],
) -> Result<Output, Error> {
    let out = run(runner, argv, env)?;
    if out.success() {
        Ok(out)
    } else {
        Err(Error::Failed(describe(argv, &out)))
    }
}

/// An argv array from string slices.
pub(crate) fn argv(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| s.to_string()).collect()
}

// ---------------------------------------------------------------------------------------------
// Containers

/// Which container runtime a machine has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RuntimeKind {
    Docker,
    Podman,
}

impl RuntimeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RuntimeKind::Docker => "docker",
            RuntimeKind::Podman => "podman",
        }
    }

    /// The environment variable the runtime's own CLI reads to find its engine.
    pub fn host_var(self) -> &'static str {
        match self {
            RuntimeKind::Docker => "DOCKER_HOST",
            RuntimeKind::Podman => "CONTAINER_HOST",
        }
    }
}

/// A container as the runtime reports it when inspected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Container {
    pub id: String,
    pub name: String,
    /// The image reference it was created from, as the runtime records it.
    pub image: String,
    /// The id of the image it runs.
    pub image_id: String,
    pub command: Vec<String>,
    pub env: BTreeMap<String, String>,
    /// Its published ports, sorted.
    pub ports: Vec<PublishedPort>,
    /// The restart policy's name (`no`, `always`, …; empty when the runtime leaves it unset).
    pub restart: String,
    /// The networks it is attached to, sorted.
    pub networks: Vec<String>,
    pub labels: BTreeMap<String, String>,
    pub running: bool,
    /// The runtime's word for its state (`running`, `exited`, `created`, …).
    pub status: String,
    pub exit_code: i64,
}

/// A container the host asks a runtime to create and start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewContainer {
    pub name: String,
    pub image: String,
    pub command: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub ports: Vec<PublishedPort>,
    pub restart: Option<String>,
    pub networks: Vec<String>,
    pub labels: BTreeMap<String, String>,
}

/// The machine's container runtime.
pub trait ContainerRuntime {
    fn kind(&self) -> RuntimeKind;

    /// The engine's version (the server's, when the runtime has one).
    fn version(&self) -> Result<String, Error>;

    /// The container with this name, read back by inspecting it; `None` when there is none.
    fn inspect(&self, name: &str) -> Result<Option<Container>, Error>;

    /// Creates the container, attaches it to its networks and starts it. Not idempotent: a
    /// container with that name must not exist.
    fn run(&self, new: &NewContainer) -> Result<(), Error>;

    /// Starts an existing container; idempotent.
    fn start(&self, name: &str) -> Result<(), Error>;

    /// Stops a container gracefully (its stop signal, then the runtime's stop timeout) and removes
    /// it; idempotent (an absent one is not an error).
    fn remove(&self, name: &str) -> Result<(), Error>;

    /// The interface names of the runtime's bridge networks, whose traffic is the machine's own
    /// (the guard lets it through): `docker0`, `br-<id>`, a custom `com.docker.network.bridge.name`,
    /// Podman's `network_interface`.
    fn bridges(&self) -> Result<Vec<String>, Error>;
}

/// Which runtime to drive, from the environment and the programs on PATH, the way an operator's
/// own shell would pick: `CONTAINER_HOST` is Podman's variable and `DOCKER_HOST` Docker's, so a set
/// one names its runtime; otherwise Docker if its CLI is installed, then Podman.
pub fn detect_runtime(
    var: impl Fn(&str) -> Option<String>,
    on_path: impl Fn(&str) -> bool,
) -> Option<RuntimeKind> {
    let set = |name: &str| var(name).is_some_and(|v| !v.is_empty());
    if set("CONTAINER_HOST") && on_path("podman") {
        return Some(RuntimeKind::Podman);
    }
    if set("DOCKER_HOST") && on_path("docker") {
        return Some(RuntimeKind::Docker);
    }
    [RuntimeKind::Docker, RuntimeKind::Podman]
        .into_iter()
        .find(|k| on_path(k.as_str()))
}

/// Whether an executable with this name is on PATH.
pub fn on_path(program: &str) -> bool {
    find_on_path(program).is_some()
}

/// The first executable with this name on PATH.
pub fn find_on_path(program: &str) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// The runtime on this machine, detected now; the CLI it drives reads `DOCKER_HOST` or
/// `CONTAINER_HOST` from the host's own environment, which the runner passes through.
pub fn container_runtime<'r>(
    runner: &'r dyn Runner,
) -> Result<Box<dyn ContainerRuntime + 'r>, Error> {
    if let Some(why) = BUILD.refusal(Shape::Container) {
        return Err(Error::Unavailable(why));
    }
    if let Some(why) = confined("container runtime") {
        return Err(Error::Unavailable(why));
    }
    match detect_runtime(|k| std::env::var(k).ok(), on_path) {
        Some(RuntimeKind::Docker) => Ok(Box::new(docker::new(runner))),
        Some(RuntimeKind::Podman) => Ok(Box::new(podman::new(runner))),
        None => Err(Error::Unavailable(
            "no container runtime on this machine: neither docker nor podman is on PATH".into(),
        )),
    }
}

// ---------------------------------------------------------------------------------------------
// Services

/// How a service stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceStatus {
    /// False when the service manager does not know the name: *not installed*, which is never
    /// success, whatever state was asked for.
    pub installed: bool,
    pub running: bool,
    /// Started at boot.
    pub enabled: bool,
    /// The manager's own words, for messages (e.g. `LoadState=loaded ActiveState=failed …`).
    pub detail: String,
}

/// The machine's service manager. Every verb is idempotent.
pub trait ServiceManager {
    /// Its name (`systemd`, `openrc`).
    fn name(&self) -> &'static str;
    fn status(&self, name: &str) -> Result<ServiceStatus, Error>;
    fn start(&self, name: &str) -> Result<(), Error>;
    fn stop(&self, name: &str) -> Result<(), Error>;
    fn enable(&self, name: &str) -> Result<(), Error>;
    fn disable(&self, name: &str) -> Result<(), Error>;
}

// ---------------------------------------------------------------------------------------------
// Packages

/// The machine's package manager.
pub trait PackageManager {
    /// Its name (`apt`, `pacman`, `apk`).
    fn name(&self) -> &'static str;
    /// The installed version of a package; `None` when it is not installed.
    fn installed(&self, name: &str) -> Result<Option<String>, Error>;
    /// Installs a package, at `version` when given; idempotent. Its exit status is no proof:
    /// callers read the installed version back.
    fn install(&self, name: &str, version: Option<&str>) -> Result<(), Error>;
}

// ---------------------------------------------------------------------------------------------
// Under a root other than `/`

/// The environment variable with which a test harness asks, under a `--root` other than `/`,
/// for the machine's own service and package managers and container runtime (`1`): the lab's
/// tests set it, with stub `systemctl`, `dpkg-query`, `apt-get` or a private engine standing in
/// for them.
pub const HOST_TOOLS_VAR: &str = "MESH_HOST_HOST_TOOLS";

/// The `--root` under which the service and package managers are refused, once set.
static CONFINED: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

/// Says, once per process, which root the host works under. A root other than the machine's `/`
/// is a copy of a machine (an image being built, a test's throw-away root), but `systemctl`,
/// `dpkg` and the container engines know nothing of it: they would start, enable, disable,
/// install and run containers on this machine itself. Under such a root, without [`HOST_TOOLS_VAR`]`=1`, they are refused from then on.
pub fn confine(root: &Path) {
    if !crate::beneath::is_machine_root(root) && std::env::var(HOST_TOOLS_VAR).as_deref() != Ok("1")
    {
        let _ = CONFINED.set(root.to_path_buf());
    }
}

/// Why the service manager (`what` = `"service manager"`) or the package manager may not be
/// used: the root is not `/` and no harness asked for the machine's own tools.
pub fn confined(what: &str) -> Option<String> {
    CONFINED.get().map(|root| {
        format!(
            "under --root {} the {what} would act on this machine itself, not on the root; the \
             host refuses it there ({HOST_TOOLS_VAR}=1 is for test harnesses whose stubs stand \
             in for it)",
            root.display()
        )
    })
}

/// This build's service manager; refused under a root other than `/` (see [`confine`]).
pub fn service_manager<'r>(runner: &'r dyn Runner) -> Result<Box<dyn ServiceManager + 'r>, Error> {
    if let Some(why) = confined("service manager") {
        return Err(Error::Unavailable(why));
    }
    build_service_manager(runner).ok_or_else(|| {
        Error::Unavailable(
            BUILD
                .refusal(Shape::Service)
                .unwrap_or_else(|| "no service manager in this build".into()),
        )
    })
}

/// This build's package manager; refused under a root other than `/` (see [`confine`]).
pub fn package_manager<'r>(runner: &'r dyn Runner) -> Result<Box<dyn PackageManager + 'r>, Error> {
    if let Some(why) = confined("package manager") {
        return Err(Error::Unavailable(why));
    }
    build_package_manager(runner).ok_or_else(|| {
        Error::Unavailable(
            BUILD
                .refusal(Shape::Package)
                .unwrap_or_else(|| "no package manager in this build".into()),
        )
    })
}

#[cfg(any(feature = "debian", feature = "arch"))]
fn build_service_manager<'r>(runner: &'r dyn Runner) -> Option<Box<dyn ServiceManager + 'r>> {
    Some(Box::new(systemd::Systemd::new(runner)))
}

#[cfg(all(feature = "alpine", not(any(feature = "debian", feature = "arch"))))]
fn build_service_manager<'r>(runner: &'r dyn Runner) -> Option<Box<dyn ServiceManager + 'r>> {
    Some(Box::new(openrc::OpenRc::new(runner)))
}

#[cfg(not(any(feature = "debian", feature = "arch", feature = "alpine")))]
fn build_service_manager<'r>(_runner: &'r dyn Runner) -> Option<Box<dyn ServiceManager + 'r>> {
    None
}

#[cfg(feature = "debian")]
fn build_package_manager<'r>(runner: &'r dyn Runner) -> Option<Box<dyn PackageManager + 'r>> {
    Some(Box::new(apt::Apt::new(runner)))
}

#[cfg(all(feature = "arch", not(feature = "debian")))]
fn build_package_manager<'r>(runner: &'r dyn Runner) -> Option<Box<dyn PackageManager + 'r>> {
    Some(Box::new(pacman::Pacman::new(runner)))
}

#[cfg(all(feature = "alpine", not(any(feature = "debian", feature = "arch"))))]
fn build_package_manager<'r>(runner: &'r dyn Runner) -> Option<Box<dyn PackageManager + 'r>> {
    Some(Box::new(apk::Apk::new(runner)))
}

#[cfg(not(any(feature = "debian", feature = "arch", feature = "alpine")))]
fn build_package_manager<'r>(_runner: &'r dyn Runner) -> Option<Box<dyn PackageManager + 'r>> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::Build;

    #[test]
    fn a_set_host_variable_names_its_runtime_and_otherwise_docker_comes_first() {
        let both = |p: &str| p == "docker" || p == "podman";
        let vars = |set: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                set.iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(detect_runtime(vars(&[]), both), Some(RuntimeKind::Docker));
        assert_eq!(
            detect_runtime(vars(&[("CONTAINER_HOST", "unix:///p.sock")]), both),
            Some(RuntimeKind::Podman)
        );
        assert_eq!(
            detect_runtime(vars(&[("DOCKER_HOST", "unix:///d.sock")]), both),
            Some(RuntimeKind::Docker)
        );
        // A variable for a runtime that is not installed names nothing.
        assert_eq!(
            detect_runtime(vars(&[("CONTAINER_HOST", "unix:///p.sock")]), |p| p
                == "docker"),
            Some(RuntimeKind::Docker)
        );
        assert_eq!(
            detect_runtime(vars(&[]), |p| p == "podman"),
            Some(RuntimeKind::Podman)
        );
        assert_eq!(detect_runtime(vars(&[]), |_| false), None);
        // An empty variable is unset, as the runtimes' own CLIs treat it.
        assert_eq!(
            detect_runtime(vars(&[("CONTAINER_HOST", "")]), both),
            Some(RuntimeKind::Docker)
        );
    }

    #[test]
    fn a_build_without_a_manager_refuses_its_shape_with_the_reason() {
        let partial = Build {
            system: "none",
            service_manager: None,
            package_manager: None,
            containers: false,
        };
        let why = partial.refusal(Shape::Service).unwrap();
        assert!(why.contains("no service manager"), "{why}");
        assert!(partial.refusal(Shape::Package).unwrap().contains("package"));
        assert!(partial
            .refusal(Shape::Container)
            .unwrap()
            .contains("container runtime"));
        // The portable floor: what makes a partial host a real thing rather than a broken one.
        for shape in [Shape::File, Shape::Directory, Shape::Action] {
            assert_eq!(partial.refusal(shape), None, "{shape}");
        }
        // The build under test implements every shape it is asked about here.
        #[cfg(feature = "debian")]
        for shape in Shape::ALL {
            assert_eq!(BUILD.refusal(shape), None, "{shape}");
        }
    }
}
