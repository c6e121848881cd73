//! apk: the package manager of the Alpine build. `apk list --installed NAME` says what is
//! installed, `apk add NAME[=VERSION]` installs.

use super::{argv, run_ok, Error, PackageManager};
use run::Runner;

pub struct Apk<'r> {
    runner: &'r dyn Runner,
}

impl<'r> Apk<'r> {
    pub fn new(runner: &'r dyn Runner) -> Self {
        Apk { runner }
    }
}

/// The installed version from `apk list --installed NAME` lines such as
/// `nginx-1.26.1-r0 x86_64 {nginx} (BSD-2-Clause) [installed]`. The first word is `NAME-VERSION`
/// and an apk version starts with a digit, which tells `nginx-1.2` from `nginx-doc-1.2`.
pub fn parse_list(stdout: &str, name: &str) -> Option<String> {
    stdout.lines().find_map(|l| {
        if !l.contains("[installed]") {
            return None;
        }
        let first = l.split_whitespace().next()?;
        let version = first.strip_prefix(name)?.strip_prefix('-')?;
        version
            .starts_with(|c: char| c.is_ascii_digit())
            .then(|| version.to_string())
    })
}

impl PackageManager for Apk<'_> {
    fn name(&self) -> &'static str {
        "apk"
    }

    fn installed(&self, name: &str) -> Result<Option<String>, Error> {
        let out = run_ok(
            self.runner,
            &argv(&["apk", "list", "--installed", name]),
            &[],
        )?;
        Ok(parse_list(&String::from_utf8_lossy(&out.stdout), name))
    }

    fn install(&self, name: &str, version: Option<&str>) -> Result<(), Error> {
        let target = match version {
            Some(v) => format!("{name}={v}"),
            None => name.to_string(),
        };
        run_ok(
            self.runner,
            &argv(&["apk", "add", "--no-progress", &target]),
            &[],
        )
        .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_follows_the_exact_name() {
        let out = "nginx-doc-1.26.1-r0 x86_64 {nginx} (BSD-2-Clause) [installed]\n\
                   nginx-1.26.1-r0 x86_64 {nginx} (BSD-2-Clause) [installed]\n";
        assert_eq!(parse_list(out, "nginx").as_deref(), Some("1.26.1-r0"));
        assert_eq!(parse_list(out, "nginx-doc").as_deref(), Some("1.26.1-r0"));
        assert_eq!(
            parse_list("nginx-1.26.1-r0 x86_64 {nginx} (BSD-2-Clause)\n", "nginx"),
            None,
            "listed but not installed"
        );
        assert_eq!(parse_list("", "nginx"), None);
    }
}
