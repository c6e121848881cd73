//! apt and dpkg: the package manager of the Debian build. `dpkg-query` says what is installed,
//! `apt-get install` installs.

use super::{argv, run, run_ok, Error, PackageManager};
use run::{describe, Runner};

pub struct Apt<'r> {
    runner: &'r dyn Runner,
}

impl<'r> Apt<'r> {
    pub fn new(runner: &'r dyn Runner) -> Self {
        Apt { runner }
    }
}

/// The installed version from `dpkg-query -W -f '${db:Status-Abbrev}\t${Version}\n'`: the status's
/// second letter is `i` only for an installed package (`rc`, config files left, is not).
pub fn parse_query(stdout: &str) -> Option<String> {
    stdout.lines().find_map(|l| {
        let (status, version) = l.split_once('\t')?;
        (status.as_bytes().get(1) == Some(&b'i') && !version.is_empty())
            .then(|| version.trim().to_string())
    })
}

/// `apt-get install` for one package, non-interactive, keeping a machine's changed configuration
/// files (`--force-confold`) and waiting for a busy package database rather than failing at once.
pub fn install_argv(name: &str, version: Option<&str>) -> Vec<String> {
    let target = match version {
        Some(v) => format!("{name}={v}"),
        None => name.to_string(),
    };
    argv(&[
        "apt-get",
        "install",
        "-y",
        "-q",
        "-o",
        "DPkg::Lock::Timeout=120",
        "-o",
        "Dpkg::Options::=--force-confdef",
        "-o",
        "Dpkg::Options::=--force-confold",
        // A declared version older than the installed one is still the declared version.
        "--allow-downgrades",
        // Never remove a package to make room: a conflicting package on the machine is one the
        // host did not install, and removing it could stop what serves. apt refuses instead.
        "--no-remove",
        &target,
    ])
}

impl PackageManager for Apt<'_> {
    fn name(&self) -> &'static str {
        "apt"
    }

    fn installed(&self, name: &str) -> Result<Option<String>, Error> {
        let argv = argv(&[
            "dpkg-query",
            "-W",
            "-f",
            "${db:Status-Abbrev}\t${Version}\n",
            name,
        ]);
        let out = run(self.runner, &argv, &[])?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.success() {
            // dpkg-query exits 1 for a package it has never heard of.
            if stderr.contains("no packages found matching") {
                return Ok(None);
            }
            return Err(Error::Failed(describe(&argv, &out)));
        }
        Ok(parse_query(&String::from_utf8_lossy(&out.stdout)))
    }

    fn install(&self, name: &str, version: Option<&str>) -> Result<(), Error> {
        run_ok(
            self.runner,
            &install_argv(name, version),
            &[("DEBIAN_FRONTEND", "noninteractive")],
        )
        .map(|_| ())
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn an_install_never_removes_another_package() {
        let argv = super::install_argv("busybox", None);
        assert!(argv.iter().any(|a| a == "--no-remove"), "{argv:?}");
        assert_eq!(argv.last().map(String::as_str), Some("busybox"));
    }

    use super::*;
    use run::{Output, RecordingRunner};

    #[test]
    fn only_an_installed_status_has_a_version() {
        assert_eq!(parse_query("ii \t5.1-2\n").as_deref(), Some("5.1-2"));
        assert_eq!(parse_query("hi \t1:2.0\n").as_deref(), Some("1:2.0"));
        assert_eq!(parse_query("rc \t5.1-2\n"), None);
        assert_eq!(parse_query("un \t\n"), None);
        // Multi-arch: the installed architecture's line counts.
        assert_eq!(
            parse_query("un \t\nii \t2.36-9\n").as_deref(),
            Some("2.36-9")
        );
    }

    #[test]
    fn a_package_dpkg_never_heard_of_is_not_installed() {
        let runner = RecordingRunner::default();
        runner.answers.borrow_mut().push_back(Output {
            code: Some(1),
            signal: None,
            stdout: vec![],
            stderr: b"dpkg-query: no packages found matching sl\n".to_vec(),
        });
        assert_eq!(Apt::new(&runner).installed("sl").unwrap(), None);
    }

    #[test]
    fn install_pins_the_declared_version() {
        let a = install_argv("sl", Some("5.02-1+b1"));
        assert_eq!(a.first().map(String::as_str), Some("apt-get"));
        assert_eq!(a.last().map(String::as_str), Some("sl=5.02-1+b1"));
        assert_eq!(
            install_argv("sl", None).last().map(String::as_str),
            Some("sl")
        );
    }
}
