//! The package applier: a declared package installed, at a declared version when one is given,
//! through this build's package manager.
//!
//! The installed version is read back after every install, so an install that "succeeded"
//! without installing (a virtual name, a held package, a repository without that version) is a
//! failure. A package is never uninstalled: uninstalling, say, the container runtime because a
//! declaration changed would stop everything that runs on it, so an undeclared package is
//! forgotten. On an adopted node a package found installed with no record is held until its
//! module is taken, and a held package upgraded or removed by something else is reported.
//!
//! The host's own package, `mesh-host`, is the upgrade path (seed 000, "The restart"): installing
//! it leaves the running process untouched, so after the package manager installs it the new
//! binary is run once, as `mesh-host version`, with a deadline. A binary that does not run here
//! (another architecture, a C library this machine lacks, another system's build) fails the
//! resource and says why, before anything is recorded; one that runs is recorded, the apply
//! finishes and reports, and the resident host then exits 0 for the launcher to start the new
//! binary ([`Report::restarts_host`](super::Report::restarts_host)). The host's own package is
//! never held: the installation put it there, not a predecessor.

use super::adopt::{self, Found, Kept, Records};
use super::{Cx, Done, Outcome, ResourceError};
use crate::build::BUILD;
use crate::declaration::validate::OWN_PACKAGE;
use crate::declaration::{Declaration, PackageSpec, Shape};
use crate::store::{self, Owned, State};
use crate::system::{self, PackageManager};
use nix::errno::Errno;
use run::Runner;
use std::path::Path;
use std::time::Duration;

/// Where every package of the host installs its binary (`packaging/`), under the root.
pub const INSTALLED_BINARY: &str = "usr/bin/mesh-host";

/// How long the new binary has to answer `version`: it prints one line and exits.
const VERSION_DEADLINE: Duration = Duration::from_secs(10);

pub(super) fn fingerprint(version: &str) -> String {
    format!("package {version}")
}

/// The record's digest: the declared version, or none when any version will do.
fn wanted_digest(version: Option<&str>) -> Option<String> {
    version.map(|v| store::digest(fingerprint(v).as_bytes()))
}

pub(super) fn installed(
    pm: &dyn PackageManager,
    name: &str,
) -> Result<Option<String>, ResourceError> {
    pm.installed(name).map_err(ResourceError::system(format!(
        "reading package {name} through {}",
        pm.name()
    )))
}

pub(super) fn apply(cx: &mut Cx<'_>, spec: &PackageSpec) -> Result<Done, ResourceError> {
    let pm = system::package_manager(cx.runner).map_err(ResourceError::Unavailable)?;
    apply_with(cx, pm.as_ref(), spec)
}

/// What the package applier reads before it decides: the version installed now and the store's
/// records of the name.
pub(super) struct Reading {
    pub installed: Option<String>,
    pub records: Records,
}

/// Reads what [`decide`] needs of `spec` through `pm` and the store's `state`; changes nothing.
pub(super) fn read(
    pm: &dyn PackageManager,
    state: &State,
    decl: &Declaration,
    spec: &PackageSpec,
) -> Result<Reading, ResourceError> {
    let name = spec.name.as_str();
    let keep = name != OWN_PACKAGE && adopt::keeps_found(decl, spec.module.as_deref());
    Ok(Reading {
        installed: installed(pm, name)?,
        records: Records::of(state, Shape::Package, &spec.id, name, keep),
    })
}

/// What the package applier does, decided from its [`Reading`] alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Decision {
    /// Owned and installed at a version that fits: its record written again only if it changed.
    Unchanged { version: String, rec: Owned },
    /// The host's own package, owned and at the declared version, but not recorded at it: its
    /// binary is run once, as after an install, before it is recorded.
    CheckHost { version: String, rec: Owned },
    /// Owned and installed at another version: the declared one installed.
    Upgrade { was: String, found: bool },
    /// Owned and not installed: installed again.
    Reinstall { found: bool },
    /// No record and nothing installed: installed.
    Install,
    /// Found installed at a version that fits, with no record: taken over as it is.
    TakeOver { version: String },
    /// Found installed at another version, with no record: the declared one installed.
    Replace { was: String },
    /// Found or held on an adopted node: kept as it is (`now`, the version installed).
    Keep { kept: Kept, now: Option<String> },
}

/// The package applier's decision: pure, from what was read and what is declared.
pub(super) fn decide(r: &Reading, spec: &PackageSpec) -> Decision {
    let want = spec.version.as_deref();
    let fits = |v: &str| want.is_none_or(|w| w == v);
    match (&r.records.owned, &r.installed) {
        (Some(rec), Some(v)) if fits(v) => {
            // The declared version of the host is installed but was never recorded: an earlier
            // apply installed it and found that its binary does not run, or something else
            // installed it. It is checked like a fresh install.
            if spec.name == OWN_PACKAGE && wanted_digest(want) != rec.digest {
                Decision::CheckHost {
                    version: v.clone(),
                    rec: rec.clone(),
                }
            } else {
                Decision::Unchanged {
                    version: v.clone(),
                    rec: rec.clone(),
                }
            }
        }
        (Some(rec), Some(v)) => Decision::Upgrade {
            was: v.clone(),
            found: rec.found,
        },
        (Some(rec), None) => Decision::Reinstall { found: rec.found },
        (None, now) => {
            if let Some(kept) = r.records.kept(now.as_deref().map(fingerprint).as_deref()) {
                return Decision::Keep {
                    kept,
                    now: now.clone(),
                };
            }
            match now {
                None => Decision::Install,
                Some(v) if fits(v) => Decision::TakeOver { version: v.clone() },
                Some(v) => Decision::Replace { was: v.clone() },
            }
        }
    }
}

impl Decision {
    /// The outcome the act reports for this decision.
    pub fn outcome(&self) -> Outcome {
        match self {
            Decision::Unchanged { .. } | Decision::TakeOver { .. } => Outcome::Unchanged,
            Decision::CheckHost { .. } | Decision::Upgrade { .. } | Decision::Replace { .. } => {
                Outcome::Changed
            }
            Decision::Reinstall { .. } | Decision::Install => Outcome::Created,
            Decision::Keep { kept, .. } => kept.outcome(),
        }
    }

    /// The preview's line for this decision: what the act would do.
    pub fn preview(&self, spec: &PackageSpec) -> String {
        let wanted = spec.version.as_deref().unwrap_or("its candidate version");
        match self {
            Decision::Unchanged { version, .. } => format!("{version} is installed, as declared"),
            Decision::CheckHost { version, .. } => format!(
                "{version} is installed, as declared; its binary would be run once before it is \
                 recorded"
            ),
            Decision::Upgrade { was, .. } => format!("is {was}; {wanted} would be installed"),
            Decision::Reinstall { .. } => format!("missing; {wanted} would be installed again"),
            Decision::Install => format!("{wanted} would be installed"),
            Decision::TakeOver { version } => {
                format!("found {version} installed, as declared; would be taken over")
            }
            Decision::Replace { was } => {
                format!("found {was} installed; {wanted} would be installed")
            }
            Decision::Keep { kept, now } => match (kept, now) {
                (Kept::Held, Some(v)) => format!("found {v} installed; would be kept as it is"),
                (_, Some(v)) => {
                    format!("held package changed by something else (now {v}); not reverted")
                }
                (_, None) => "held package was removed by something else; not reinstalled".into(),
            },
        }
    }
}

pub(super) fn apply_with(
    cx: &mut Cx<'_>,
    pm: &dyn PackageManager,
    spec: &PackageSpec,
) -> Result<Done, ResourceError> {
    let r = read(pm, &cx.store.state, cx.decl, spec)?;
    execute(cx, pm, spec, decide(&r, spec))
}

/// Carries out a [`Decision`]: installs and reads back, records, or keeps.
pub(super) fn execute(
    cx: &mut Cx<'_>,
    pm: &dyn PackageManager,
    spec: &PackageSpec,
    decision: Decision,
) -> Result<Done, ResourceError> {
    let id = spec.id.as_str();
    let name = spec.name.as_str();
    let record = |found: bool| Owned {
        parents: Vec::new(),
        id: id.to_string(),
        module: spec.module.clone(),
        shape: Shape::Package,
        key: name.to_string(),
        digest: wanted_digest(spec.version.as_deref()),
        found,
        stamp: None,
    };
    match decision {
        Decision::Unchanged { version, rec } => {
            cx.refresh_owned(record(rec.found), Some(&rec))?;
            Ok(Done::new(
                Outcome::Unchanged,
                format!("{version} is installed, as declared"),
            ))
        }
        Decision::CheckHost { version, rec } => {
            let runs = check_new_host(cx.root, cx.runner)?;
            cx.record_owned(record(rec.found))?;
            Ok(Done::new(
                Outcome::Changed,
                format!("{version} is installed, as declared; {}", restarts(&runs)),
            ))
        }
        Decision::Upgrade { was, found } => {
            let got = install(cx, pm, spec, record(found))?;
            Ok(Done::new(
                Outcome::Changed,
                format!("was {was}; {got} installed"),
            ))
        }
        Decision::Reinstall { found } => {
            let got = install(cx, pm, spec, record(found))?;
            Ok(Done::new(
                Outcome::Created,
                format!("was missing; {got} installed again"),
            ))
        }
        Decision::Install => {
            let got = install(cx, pm, spec, record(false))?;
            Ok(Done::new(Outcome::Created, format!("{got} installed")))
        }
        Decision::TakeOver { version } => {
            if name == OWN_PACKAGE {
                check_new_host(cx.root, cx.runner)?;
            }
            cx.record_owned(record(true))?;
            Ok(Done::new(
                Outcome::Unchanged,
                format!("found {version} installed, as declared; taken over"),
            ))
        }
        Decision::Replace { was } => {
            let got = install(cx, pm, spec, record(true))?;
            Ok(Done::new(
                Outcome::Changed,
                format!("found {was} installed; {got} installed"),
            ))
        }
        Decision::Keep { kept, now } => {
            let found = Found {
                id,
                module: spec.module.as_deref(),
                shape: Shape::Package,
                key: name,
                now: now.as_deref().map(fingerprint),
                stamp: None,
            };
            adopt::settle(cx, &found, &kept)?;
            Ok(kept.done(|k| match (k, &now) {
                (Kept::Changed { was }, Some(v)) => format!(
                    "held package was at {} and is at {v} now, changed by something else; \
                     not reverted",
                    was.strip_prefix("package ").unwrap_or("?")
                ),
                (Kept::Held, Some(v)) => format!("found {v} installed; kept as it is"),
                (_, _) => "held package was removed by something else; not reinstalled".into(),
            }))
        }
    }
}

/// Installs, reads the version back and records; returns the version now installed.
fn install(
    cx: &mut Cx<'_>,
    pm: &dyn PackageManager,
    spec: &PackageSpec,
    record: Owned,
) -> Result<String, ResourceError> {
    let name = spec.name.as_str();
    let want = spec.version.as_deref();
    cx.intend(&record)?;
    pm.install(name, want)
        .map_err(ResourceError::system(format!(
            "installing package {name} through {}",
            pm.name()
        )))?;
    cx.changed(&spec.id);
    match installed(pm, name)? {
        None => Err(ResourceError::NotAsDeclared(format!(
            "package {name}: {} said it installed it, but it is not installed",
            pm.name()
        ))),
        Some(v) if want.is_some_and(|w| w != v) => Err(ResourceError::NotAsDeclared(format!(
            "package {name}: {v} is installed, not the declared {}",
            want.unwrap_or_default()
        ))),
        Some(v) if name == OWN_PACKAGE => {
            let runs = check_new_host(cx.root, cx.runner)?;
            cx.record_owned(record)?;
            Ok(format!("{v}; {}", restarts(&runs)))
        }
        Some(v) => {
            cx.record_owned(record)?;
            Ok(v)
        }
    }
}

fn restarts(runs: &str) -> String {
    format!("its binary runs ({runs}), and the host starts it once this apply has finished")
}

/// Runs the newly installed host's `version` once, with a deadline: its line when it runs and was
/// built for this system, else why not, in words an operator can act on.
fn check_new_host(root: &Path, runner: &dyn Runner) -> Result<String, ResourceError> {
    let bin = root.join(INSTALLED_BINARY);
    let shown = Path::new("/").join(INSTALLED_BINARY);
    let fail = |why: String| {
        Err(ResourceError::NewHost {
            package: OWN_PACKAGE,
            binary: shown.display().to_string(),
            why,
        })
    };
    if !bin.is_file() {
        return fail("the package installed no file there".into());
    }
    let argv = vec![bin.display().to_string(), "version".to_string()];
    let out = match runner.run_within(&argv, Path::new("/"), &[], VERSION_DEADLINE) {
        Ok(out) => out,
        Err(e) => return fail(spawn_failure(&e)),
    };
    if !out.success() {
        return fail(run::describe(&argv, &out));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().next().unwrap_or("").trim().to_string();
    match crate::launch::parse_version_line(&line) {
        Some((_, system)) if system == BUILD.system => Ok(line),
        Some((_, system)) => fail(format!(
            "it is built for system {system}, and this machine's host is built for {}",
            BUILD.system
        )),
        None => fail(format!(
            "`version` printed {line:?}, not a mesh-host version line"
        )),
    }
}

/// Why the kernel would not start a binary, as the operator should read it.
fn spawn_failure(e: &std::io::Error) -> String {
    match e.raw_os_error().map(Errno::from_raw) {
        Some(Errno::ENOEXEC) => {
            "exec format error: it is not a program for this machine (another architecture?)".into()
        }
        // The file is there (checked first), so "not found" is the program loader it names.
        Some(Errno::ENOENT) => "the program loader or C library it needs is not on this machine \
                               (a dynamically linked build?)"
            .into(),
        Some(Errno::EACCES) => "it is not executable".into(),
        _ if e.kind() == std::io::ErrorKind::TimedOut => format!(
            "`version` did not answer within {}s",
            VERSION_DEADLINE.as_secs()
        ),
        _ => e.to_string(),
    }
}

/// A package is never uninstalled; an undeclared one is forgotten and stays installed.
pub(super) fn remove(_cx: &mut Cx<'_>, _rec: &Owned) -> Result<Done, ResourceError> {
    Ok(Done::new(
        Outcome::Forgotten,
        "packages are never uninstalled; left installed",
    ))
}

/// Whether an intent left by a host that died mid-apply was carried out: the package is installed
/// (at the version the record names, when it names one).
///
/// An intent for the host's own package is never taken as carried out: that record is written
/// only after the new binary ran, so the next apply installs-or-finds it and runs it again.
pub(super) fn settled(runner: &dyn Runner, rec: &Owned) -> bool {
    if rec.key == OWN_PACKAGE {
        return false;
    }
    let Ok(pm) = system::package_manager(runner) else {
        return false;
    };
    match pm.installed(&rec.key) {
        Ok(Some(v)) => rec.digest.is_none() || rec.digest == wanted_digest(Some(&v)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::declaration::{Declaration, Resource};
    use crate::system::fake::{declaration, Bed, FakePackages};
    use serde_json::{json, Value};

    fn pkg(version: Option<&str>) -> Value {
        let mut v = json!({"id": "app/sl", "module": "app", "type": "package", "name": "sl"});
        if let Some(version) = version {
            v["version"] = json!(version);
        }
        v
    }

    fn apply(
        bed: &mut Bed,
        pm: &dyn PackageManager,
        d: &Declaration,
    ) -> Result<Done, ResourceError> {
        let Resource::Package(p) = &d.resources[0] else {
            panic!("not a package")
        };
        apply_with(&mut bed.cx(d), pm, p)
    }

    fn outcome(r: Result<Done, impl std::fmt::Display>) -> (Outcome, String) {
        let d = r.unwrap_or_else(|e| panic!("failed: {e}"));
        (d.outcome, d.detail)
    }

    fn repo() -> FakePackages {
        let pm = FakePackages::default();
        pm.offer("sl", &["5.02-1", "5.02-1+b1"]);
        pm
    }

    #[test]
    fn installed_and_read_back_then_unchanged_then_pinned_then_forgotten() {
        let (mut bed, pm) = (Bed::new(), repo());
        let d = declaration("converged", &[], json!([pkg(None)]));
        assert_eq!(
            outcome(apply(&mut bed, &pm, &d)),
            (Outcome::Created, "5.02-1+b1 installed".into())
        );
        assert_eq!(outcome(apply(&mut bed, &pm, &d)).0, Outcome::Unchanged);
        assert_eq!(*pm.calls.borrow(), ["install sl"]);

        let pinned = declaration("converged", &[], json!([pkg(Some("5.02-1"))]));
        assert_eq!(
            outcome(apply(&mut bed, &pm, &pinned)),
            (Outcome::Changed, "was 5.02-1+b1; 5.02-1 installed".into())
        );
        let absent = declaration("converged", &[], json!([pkg(Some("9.9"))]));
        let e = apply(&mut bed, &pm, &absent)
            .err()
            .expect("no such version")
            .to_string();
        assert!(
            e.contains("installing package sl") && e.contains("9.9"),
            "{e}"
        );

        let rec = bed.store.state.owned("app/sl").cloned().unwrap();
        let empty = declaration("converged", &[], json!([]));
        let (o, _) = outcome(remove(&mut bed.cx(&empty), &rec));
        assert_eq!(o, Outcome::Forgotten);
        assert!(
            pm.installed.borrow().contains_key("sl"),
            "never uninstalled"
        );
    }

    #[test]
    fn an_install_that_installs_nothing_is_a_failure() {
        let (mut bed, pm) = (Bed::new(), repo());
        pm.inert.set(true);
        let d = declaration("converged", &[], json!([pkg(None)]));
        let e = apply(&mut bed, &pm, &d).err().expect("fails");
        assert!(matches!(e, ResourceError::NotAsDeclared(_)), "{e:?}");
        let e = e.to_string();
        assert_eq!(
            e,
            "package sl: fake said it installed it, but it is not installed"
        );
        assert!(bed.store.state.owned("app/sl").is_none());
    }

    #[test]
    fn found_on_an_adopted_node_is_held_and_an_upgrade_by_something_else_is_reported() {
        let (mut bed, pm) = (Bed::new(), repo());
        pm.installed
            .borrow_mut()
            .insert("sl".into(), "5.02-1".into());
        let d = declaration("adopted", &[], json!([pkg(Some("5.02-1+b1"))]));
        assert_eq!(
            outcome(apply(&mut bed, &pm, &d)),
            (
                Outcome::Held,
                "found 5.02-1 installed; kept as it is".into()
            )
        );
        assert!(
            pm.calls.borrow().is_empty(),
            "a held package is not upgraded"
        );

        pm.installed
            .borrow_mut()
            .insert("sl".into(), "5.02-1+b1".into());
        let (o, detail) = outcome(apply(&mut bed, &pm, &d));
        assert_eq!(o, Outcome::ChangedBySomethingElse);
        assert!(
            detail.contains("was at 5.02-1 and is at 5.02-1+b1"),
            "{detail}"
        );

        pm.installed.borrow_mut().remove("sl");
        let (o, _) = outcome(apply(&mut bed, &pm, &d));
        assert_eq!(o, Outcome::ChangedBySomethingElse);
        assert!(pm.calls.borrow().is_empty(), "not reinstalled while held");
    }

    /// Stands in for pacman: `$STUB/installed/NAME` holds an installed package's version,
    /// `$STUB/repo/NAME` the version the sync database offers (the only one `-S` can install).
    const PACMAN: &str = r#"#!/bin/bash
set -eu
echo "pacman $*" >> "$STUB/calls"
name=${@: -1}
case "$1" in
  -Q) if [ -f "$STUB/installed/$name" ]; then echo "$name $(cat "$STUB/installed/$name")"; exit 0; fi
      echo "error: package '$name' was not found" >&2; exit 1 ;;
  -S) [ -f "$STUB/repo/$name" ] || { echo "error: target not found: $name" >&2; exit 1; }
      mkdir -p "$STUB/installed"; cp "$STUB/repo/$name" "$STUB/installed/$name" ;;
esac
"#;

    /// Stands in for apk: `$STUB/installed/NAME` holds an installed version, `$STUB/repo/NAME`
    /// the versions offered, one a line; `add NAME=VERSION` installs that one if offered.
    const APK: &str = r#"#!/bin/bash
set -eu
echo "apk $*" >> "$STUB/calls"
target=${@: -1}
case "$1" in
  list) if [ -f "$STUB/installed/$target" ]; then
          echo "$target-$(cat "$STUB/installed/$target") x86_64 {$target} (MIT) [installed]"
        fi ;;
  add) name=${target%%=*}; want=""; [ "$name" != "$target" ] && want=${target#*=}
       [ -f "$STUB/repo/$name" ] || { echo "ERROR: unable to select packages: $name" >&2; exit 1; }
       pick=$(tail -n1 "$STUB/repo/$name")
       if [ -n "$want" ]; then
         grep -qx "$want" "$STUB/repo/$name" || { echo "ERROR: unable to select packages: $target" >&2; exit 1; }
         pick=$want
       fi
       mkdir -p "$STUB/installed"; echo "$pick" > "$STUB/installed/$name" ;;
esac
"#;

    #[test]
    fn pacman_through_a_stub_installs_the_repositorys_version_and_checks_a_declared_one() {
        use crate::system::fake::StubRunner;
        use crate::system::pacman::Pacman;
        let stub = StubRunner::new();
        stub.program("pacman", PACMAN);
        stub.file("repo/sl", "5.02-3\n");
        let pm = Pacman::new(&stub);
        let mut bed = Bed::new();
        let d = declaration("converged", &[], json!([pkg(None)]));
        assert_eq!(
            outcome(apply(&mut bed, &pm, &d)),
            (Outcome::Created, "5.02-3 installed".into())
        );
        assert_eq!(
            stub.calls(),
            [
                "pacman -Q sl",
                "pacman -S --noconfirm --needed sl",
                "pacman -Q sl"
            ]
        );
        assert_eq!(outcome(apply(&mut bed, &pm, &d)).0, Outcome::Unchanged);

        // pacman cannot choose a version: the repository's is installed and the declared one is
        // then found missing, so the resource fails instead of passing.
        let mut other = Bed::new();
        std::fs::remove_file(stub.dir.path().join("installed/sl")).unwrap();
        let pinned = declaration("converged", &[], json!([pkg(Some("5.01-1"))]));
        let e = apply(&mut other, &pm, &pinned)
            .err()
            .expect("fails")
            .to_string();
        assert_eq!(
            e,
            "package sl: 5.02-3 is installed, not the declared 5.01-1"
        );
        assert!(other.store.state.owned("app/sl").is_none());
    }

    #[test]
    fn apk_through_a_stub_installs_a_pinned_version_and_reads_it_back() {
        use crate::system::apk::Apk;
        use crate::system::fake::StubRunner;
        let stub = StubRunner::new();
        stub.program("apk", APK);
        stub.file("repo/sl", "5.02-r0\n5.02-r1\n");
        let pm = Apk::new(&stub);
        let mut bed = Bed::new();
        let d = declaration("converged", &[], json!([pkg(Some("5.02-r0"))]));
        assert_eq!(
            outcome(apply(&mut bed, &pm, &d)),
            (Outcome::Created, "5.02-r0 installed".into())
        );
        assert_eq!(
            stub.calls(),
            [
                "apk list --installed sl",
                "apk add --no-progress sl=5.02-r0",
                "apk list --installed sl"
            ]
        );
        let newest = declaration("converged", &[], json!([pkg(Some("5.02-r1"))]));
        assert_eq!(
            outcome(apply(&mut bed, &pm, &newest)),
            (Outcome::Changed, "was 5.02-r0; 5.02-r1 installed".into())
        );
        let absent = declaration("converged", &[], json!([pkg(Some("9-r0"))]));
        let e = apply(&mut bed, &pm, &absent)
            .err()
            .expect("fails")
            .to_string();
        assert!(e.contains("unable to select packages: sl=9-r0"), "{e}");
    }

    #[test]
    fn found_on_a_converged_node_is_taken_over_when_it_fits() {
        let (mut bed, pm) = (Bed::new(), repo());
        pm.installed
            .borrow_mut()
            .insert("sl".into(), "5.02-1".into());
        let d = declaration("converged", &[], json!([pkg(None)]));
        assert_eq!(outcome(apply(&mut bed, &pm, &d)).0, Outcome::Unchanged);
        assert!(bed.store.state.owned("app/sl").unwrap().found);
        assert!(pm.calls.borrow().is_empty());
    }

    fn host_pkg(version: &str) -> Value {
        json!({"id": "host", "type": "package", "name": "mesh-host", "version": version})
    }

    /// The fake "installs" the new host's binary too, so the check finds a file to run; what
    /// running it answers is the recording runner's.
    fn new_host_on_disk(bed: &Bed) {
        let bin = bed.dir.path().join(INSTALLED_BINARY);
        std::fs::create_dir_all(bin.parent().unwrap()).unwrap();
        std::fs::write(bin, "a new host").unwrap();
    }

    fn answers(bed: &Bed, code: i32, stdout: &str) {
        bed.runner.answers.borrow_mut().push_back(run::Output {
            code: Some(code),
            signal: None,
            stdout: stdout.as_bytes().to_vec(),
            stderr: vec![],
        });
    }

    #[test]
    fn the_hosts_own_package_is_recorded_only_once_its_new_binary_runs() {
        let (mut bed, pm) = (Bed::new(), FakePackages::default());
        pm.offer("mesh-host", &["0.1.0", "0.2.0"]);
        pm.installed
            .borrow_mut()
            .insert("mesh-host".into(), "0.1.0".into());
        new_host_on_disk(&bed);
        answers(&bed, 0, &format!("mesh-host 0.2.0 ({})\n", BUILD.system));
        // Adopted, module not taken: the host's own package is still not held, it is upgraded.
        let d = declaration("adopted", &[], json!([host_pkg("0.2.0")]));
        let (o, detail) = outcome(apply(&mut bed, &pm, &d));
        assert_eq!(o, Outcome::Changed);
        assert!(
            detail.starts_with("found 0.1.0 installed; 0.2.0; its binary runs (mesh-host 0.2.0"),
            "{detail}"
        );
        let bin = bed.dir.path().join(INSTALLED_BINARY);
        assert_eq!(
            *bed.runner.calls.borrow(),
            [vec![bin.display().to_string(), "version".to_string()]]
        );
        assert!(bed.store.state.owned("host").is_some());

        let mut report = crate::apply::Report::new(&d, crate::declaration::Source::Local);
        report.push(
            "host",
            Shape::Package,
            "mesh-host".into(),
            Ok::<_, ResourceError>(Done::new(o, detail)),
        );
        assert!(report.restarts_host());
        // Applied again, nothing changes and nothing restarts.
        let (o, _) = outcome(apply(&mut bed, &pm, &d));
        assert_eq!(o, Outcome::Unchanged);
        let mut again = crate::apply::Report::new(&d, crate::declaration::Source::Local);
        again.push(
            "host",
            Shape::Package,
            "mesh-host".into(),
            Ok::<_, ResourceError>(Done::new(o, "")),
        );
        assert!(!again.restarts_host());
    }

    #[test]
    fn a_new_host_that_does_not_run_fails_the_resource_and_records_nothing() {
        let other = if BUILD.system == "arch" {
            "alpine"
        } else {
            "arch"
        };
        for (on_disk, code, stdout, why) in [
            (
                false,
                0,
                String::new(),
                "the package installed no file there".to_string(),
            ),
            (true, 1, String::new(), "exited with status 1".to_string()),
            (
                true,
                0,
                format!("mesh-host 0.2.0 ({other})\n"),
                format!("it is built for system {other}"),
            ),
            (
                true,
                0,
                "hello\n".into(),
                "not a mesh-host version line".into(),
            ),
        ] {
            let (mut bed, pm) = (Bed::new(), FakePackages::default());
            pm.offer("mesh-host", &["0.2.0"]);
            if on_disk {
                new_host_on_disk(&bed);
            }
            answers(&bed, code, &stdout);
            let d = declaration("converged", &[], json!([host_pkg("0.2.0")]));
            let e = apply(&mut bed, &pm, &d).err().expect("fails");
            assert!(matches!(e, ResourceError::NewHost { .. }), "{e:?}");
            let e = e.to_string();
            assert!(
                e.starts_with(
                    "package mesh-host: the new binary /usr/bin/mesh-host does not run here"
                ) && e.contains(&why)
                    && e.ends_with("the running host stays as it is and does not restart"),
                "{e}"
            );
            assert!(bed.store.state.owned("host").is_none(), "{why}");
        }
    }

    #[test]
    fn why_a_binary_does_not_start_is_said_in_an_operators_words() {
        use std::io::{Error, ErrorKind};
        let enoexec = spawn_failure(&Error::from_raw_os_error(Errno::ENOEXEC as i32));
        assert!(enoexec.contains("exec format error"), "{enoexec}");
        let enoent = spawn_failure(&Error::from_raw_os_error(Errno::ENOENT as i32));
        assert!(enoent.contains("C library"), "{enoent}");
        let late = spawn_failure(&Error::new(ErrorKind::TimedOut, "x"));
        assert!(late.contains("did not answer within 10s"), "{late}");
    }
}
