//! The profile: what this machine can do — its system, architecture, init, the service and
//! package managers of this build and whether they are there, the container runtime and its
//! version. A node reports it upward when it enrols; it is the controller's input for deciding
//! what the machine should run, not a diagnostic.

use super::RuntimeKind;
use crate::build::BUILD;
use run::Runner;
use serde::Serialize;
use std::fmt::Write as _;
use std::path::Path;

/// The machine's system, from `/etc/os-release` (or `/usr/lib/os-release`) under the root.
#[derive(Serialize, Debug, Clone, Default, PartialEq, Eq)]
pub struct OsRelease {
    pub id: Option<String>,
    pub version_id: Option<String>,
    pub pretty_name: Option<String>,
}

/// A service or package manager of this build, and whether the machine has it.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct Manager {
    pub name: &'static str,
    /// The program the host drives.
    pub program: &'static str,
    /// Whether that program is on PATH.
    pub present: bool,
    /// For a service manager: whether it runs this machine (systemd as init, OpenRC booted);
    /// `null` for a package manager.
    pub running: Option<bool>,
}

/// The container runtime found, and what its engine says of itself.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct Runtime {
    pub name: RuntimeKind,
    /// The engine's version; `None` when it did not answer (see `error`).
    pub version: Option<String>,
    /// `DOCKER_HOST` or `CONTAINER_HOST` as the host's environment sets it.
    pub endpoint: Option<String>,
    pub error: Option<String>,
}

/// Which nf_tables table flags the kernel supports.
#[derive(Serialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableFlags {
    /// `owner`: a table only its creating process may change, gone when that process exits.
    pub owner: bool,
    /// `persist` (Linux 6.9 and later): an owned table that outlives its owner.
    pub persist: bool,
}

#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    pub system: OsRelease,
    /// The system this binary was built for (`debian`, `arch`, `alpine`, `none`).
    pub build: &'static str,
    pub architecture: String,
    pub kernel: String,
    /// PID 1's command name.
    pub init: Option<String>,
    pub service_manager: Option<Manager>,
    pub package_manager: Option<Manager>,
    pub container_runtime: Option<Runtime>,
    /// The kind of the firewall found on the machine, as the firewall engine detects it; `null`
    /// when it was not read, which reads as "not known", never as "none".
    pub found_firewall: Option<String>,
    /// The kernel's support for the nf_tables table flags `owner` and `persist`, probed by the
    /// firewall engine in a namespace of its own; `null` when it could not be probed, which reads
    /// as "not known", never as "unsupported".
    pub nftables_table_flags: Option<TableFlags>,
}

/// Reads `KEY=value` lines of an os-release file, unquoting values.
pub fn parse_os_release(text: &str) -> OsRelease {
    let mut out = OsRelease::default();
    for line in text.lines() {
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        let v = v.trim();
        let v = v
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .or_else(|| v.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
            .unwrap_or(v)
            .to_string();
        match k.trim() {
            "ID" => out.id = Some(v),
            "VERSION_ID" => out.version_id = Some(v),
            "PRETTY_NAME" => out.pretty_name = Some(v),
            _ => {}
        }
    }
    out
}

fn uname() -> (String, String) {
    match nix::sys::utsname::uname() {
        Ok(u) => (
            u.machine().to_string_lossy().into_owned(),
            u.release().to_string_lossy().into_owned(),
        ),
        Err(_) => (std::env::consts::ARCH.into(), String::new()),
    }
}

impl Profile {
    /// Gathers the profile. Files of the system (os-release) are read under `root`; the kernel,
    /// PID 1 and the programs on PATH are the running machine's.
    pub fn gather(root: &Path, runner: &dyn Runner) -> Profile {
        let system = ["etc/os-release", "usr/lib/os-release"]
            .iter()
            .find_map(|p| std::fs::read_to_string(root.join(p)).ok())
            .map(|t| parse_os_release(&t))
            .unwrap_or_default();
        let (architecture, kernel) = uname();
        let init = std::fs::read_to_string("/proc/1/comm")
            .ok()
            .map(|s| s.trim().to_string());
        let service_manager = BUILD.service_manager.map(|(name, program)| Manager {
            name,
            program,
            present: super::on_path(program),
            running: Some(match name {
                // sd_booted(3): systemd runs this machine when this directory exists.
                "systemd" => Path::new("/run/systemd/system").is_dir(),
                _ => Path::new("/run/openrc").is_dir(),
            }),
        });
        let package_manager = BUILD.package_manager.map(|(name, program)| Manager {
            name,
            program,
            present: super::on_path(program),
            running: None,
        });
        let container_runtime = super::detect_runtime(|k| std::env::var(k).ok(), super::on_path)
            .map(|kind| {
                let rt: Box<dyn super::ContainerRuntime> = match kind {
                    RuntimeKind::Docker => Box::new(super::docker::new(runner)),
                    RuntimeKind::Podman => Box::new(super::podman::new(runner)),
                };
                let (version, error) = match rt.version() {
                    Ok(v) => (Some(v), None),
                    Err(e) => (None, Some(e.to_string())),
                };
                Runtime {
                    name: kind,
                    version,
                    endpoint: std::env::var(kind.host_var())
                        .ok()
                        .filter(|v| !v.is_empty()),
                    error,
                }
            });
        Profile {
            system,
            build: BUILD.system,
            architecture,
            kernel,
            init,
            service_manager,
            package_manager,
            container_runtime,
            found_firewall: None,
            nftables_table_flags: None,
        }
    }

    /// The profile as a person reads it.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let mut line = |k: &str, v: String| {
            let _ = writeln!(out, "{k:<18} {v}");
        };
        let s = &self.system;
        line(
            "system",
            match (&s.pretty_name, &s.id) {
                (Some(p), _) => p.clone(),
                (None, Some(id)) => format!("{id} {}", s.version_id.as_deref().unwrap_or("")),
                (None, None) => "unknown (no os-release)".into(),
            },
        );
        line("build", self.build.to_string());
        line("architecture", self.architecture.clone());
        line("kernel", self.kernel.clone());
        line(
            "init",
            self.init.clone().unwrap_or_else(|| "unknown".into()),
        );
        let manager = |m: &Option<Manager>, what: &str| match m {
            None => format!("none: this build has no {what}"),
            Some(m) => {
                let mut t = format!(
                    "{} ({} {})",
                    m.name,
                    m.program,
                    if m.present { "on PATH" } else { "not on PATH" }
                );
                if m.running == Some(false) {
                    let _ = write!(t, "; {} does not run this machine", m.name);
                }
                t
            }
        };
        line(
            "service manager",
            manager(&self.service_manager, "service manager"),
        );
        line(
            "package manager",
            manager(&self.package_manager, "package manager"),
        );
        line(
            "container runtime",
            match &self.container_runtime {
                None => "none (neither docker nor podman is on PATH)".into(),
                Some(r) => {
                    let at = r
                        .endpoint
                        .as_deref()
                        .map(|e| format!(" at {e}"))
                        .unwrap_or_default();
                    match (&r.version, &r.error) {
                        (Some(v), _) => format!("{} {v}{at}", r.name.as_str()),
                        (None, e) => format!(
                            "{}{at}, not answering: {}",
                            r.name.as_str(),
                            e.as_deref().unwrap_or("no version")
                        ),
                    }
                }
            },
        );
        line(
            "found firewall",
            self.found_firewall
                .clone()
                .unwrap_or_else(|| "not known".into()),
        );
        line(
            "nf_tables flags",
            match self.nftables_table_flags {
                Some(f) => format!("owner {}, persist {}", f.owner, f.persist),
                None => "not known".into(),
            },
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_release_values_are_unquoted() {
        let r = parse_os_release(
            "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nNAME=\"Debian GNU/Linux\"\n\
             VERSION_ID=\"12\"\nID=debian\n# a comment\n",
        );
        assert_eq!(r.id.as_deref(), Some("debian"));
        assert_eq!(r.version_id.as_deref(), Some("12"));
        assert_eq!(
            r.pretty_name.as_deref(),
            Some("Debian GNU/Linux 12 (bookworm)")
        );
        assert_eq!(
            parse_os_release("ID='alpine'\n").id.as_deref(),
            Some("alpine")
        );
    }

    #[test]
    fn unknown_firewall_facts_are_null_not_false() {
        let runner = run::RecordingRunner::default();
        let dir = tempfile::tempdir().unwrap();
        let p = Profile {
            container_runtime: None,
            ..Profile::gather(dir.path(), &runner)
        };
        let v = serde_json::to_value(&p).unwrap();
        assert_eq!(v["nftables_table_flags"], serde_json::Value::Null);
        assert_eq!(v["found_firewall"], serde_json::Value::Null);
        assert_eq!(
            v["system"]["id"],
            serde_json::Value::Null,
            "no os-release under the root"
        );
        assert!(p.render().contains("not known"));
    }
}
