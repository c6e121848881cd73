//! pacman: the package manager of the Arch build. `pacman -Q` says what is installed,
//! `pacman -S --needed` installs.
//!
//! pacman installs the repository's version of a package; it cannot pick another from a sync
//! database. A declared version is therefore checked, not chosen: the applier reads the version
//! back, and a repository offering a different one fails the resource rather than passing it.

use super::{argv, run, run_ok, Error, PackageManager};
use run::{describe, Runner};

pub struct Pacman<'r> {
    runner: &'r dyn Runner,
}

impl<'r> Pacman<'r> {
    pub fn new(runner: &'r dyn Runner) -> Self {
        Pacman { runner }
    }
}

/// The version from `pacman -Q NAME` (`NAME VERSION`).
pub fn parse_query(stdout: &str, name: &str) -> Option<String> {
    stdout.lines().find_map(|l| {
        let (n, v) = l.trim().split_once(' ')?;
        (n == name).then(|| v.trim().to_string())
    })
}

impl PackageManager for Pacman<'_> {
    fn name(&self) -> &'static str {
        "pacman"
    }

    fn installed(&self, name: &str) -> Result<Option<String>, Error> {
        let argv = argv(&["pacman", "-Q", name]);
        let out = run(self.runner, &argv, &[])?;
        if !out.success() {
            // "error: package 'x' was not found", exit 1.
            if String::from_utf8_lossy(&out.stderr).contains("was not found") {
                return Ok(None);
            }
            return Err(Error::Failed(describe(&argv, &out)));
        }
        Ok(parse_query(&String::from_utf8_lossy(&out.stdout), name))
    }

    fn install(&self, name: &str, _version: Option<&str>) -> Result<(), Error> {
        run_ok(
            self.runner,
            &argv(&["pacman", "-S", "--noconfirm", "--needed", name]),
            &[],
        )
        .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use run::{Output, RecordingRunner};

    #[test]
    fn installed_reads_pacman_q_and_not_found_is_none() {
        let runner = RecordingRunner::default();
        runner.answers.borrow_mut().extend([
            Output {
                code: Some(0),
                signal: None,
                stdout: b"nginx 1.26.1-1\n".to_vec(),
                stderr: vec![],
            },
            Output {
                code: Some(1),
                signal: None,
                stdout: vec![],
                stderr: b"error: package 'nginx' was not found\n".to_vec(),
            },
            Output {
                code: Some(1),
                signal: None,
                stdout: vec![],
                stderr: b"error: failed to init transaction (unable to lock database)\n".to_vec(),
            },
        ]);
        let p = Pacman::new(&runner);
        assert_eq!(p.installed("nginx").unwrap().as_deref(), Some("1.26.1-1"));
        assert_eq!(p.installed("nginx").unwrap(), None);
        assert!(
            p.installed("nginx").is_err(),
            "a locked database is not absence"
        );
        p.install("nginx", None).unwrap_err();
        assert_eq!(
            runner.calls.borrow()[3],
            ["pacman", "-S", "--noconfirm", "--needed", "nginx"]
        );
    }
}
