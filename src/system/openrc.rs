//! OpenRC, through `rc-service` and `rc-update`: the service manager of the Alpine build.
//!
//! OpenRC has no load state: *not installed* is asked on its own (`rc-service --exists`), before
//! anything else, so a missing init script fails instead of reading as a stopped service. Running
//! is `rc-service NAME status` exiting 0; enabled is being in a runlevel (`rc-update show`).

use super::{argv, run, run_ok, Error, ServiceManager, ServiceStatus};
use run::Runner;

pub struct OpenRc<'r> {
    runner: &'r dyn Runner,
}

impl<'r> OpenRc<'r> {
    pub fn new(runner: &'r dyn Runner) -> Self {
        OpenRc { runner }
    }

    /// The runlevels a service is in, from `rc-update show`.
    fn runlevels(&self, name: &str) -> Result<Vec<String>, Error> {
        let name = service_name(name);
        let out = run_ok(self.runner, &argv(&["rc-update", "show"]), &[])?;
        Ok(parse_runlevels(&String::from_utf8_lossy(&out.stdout), name))
    }
}

/// The OpenRC service a name means: a systemd unit's name (`nftables.service`, what the found
/// firewall's boot unit is called in the firewall crate) is the OpenRC service of the same name.
fn service_name(name: &str) -> &str {
    name.strip_suffix(".service").unwrap_or(name)
}

/// The runlevels `rc-update show` lists for a service (`   sshd | boot default` lines).
pub fn parse_runlevels(stdout: &str, name: &str) -> Vec<String> {
    stdout
        .lines()
        .filter_map(|l| l.split_once('|'))
        .find(|(n, _)| n.trim() == name)
        .map(|(_, levels)| levels.split_whitespace().map(String::from).collect())
        .unwrap_or_default()
}

impl ServiceManager for OpenRc<'_> {
    fn name(&self) -> &'static str {
        "openrc"
    }

    fn status(&self, name: &str) -> Result<ServiceStatus, Error> {
        let name = service_name(name);
        let exists = run(self.runner, &argv(&["rc-service", "--exists", name]), &[])?;
        if !exists.success() {
            return Ok(ServiceStatus {
                installed: false,
                running: false,
                enabled: false,
                detail: format!("rc-service --exists {name} says there is no such service"),
            });
        }
        let status = run(self.runner, &argv(&["rc-service", name, "status"]), &[])?;
        let levels = self.runlevels(name)?;
        let said = String::from_utf8_lossy(&status.stdout).trim().to_string();
        Ok(ServiceStatus {
            installed: true,
            running: status.success(),
            enabled: !levels.is_empty(),
            detail: format!(
                "status {:?} (exit {}); runlevels: {}",
                said,
                status.code.map_or("signal".into(), |c| c.to_string()),
                if levels.is_empty() {
                    "none".into()
                } else {
                    levels.join(" ")
                }
            ),
        })
    }

    fn start(&self, name: &str) -> Result<(), Error> {
        let name = service_name(name);
        run_ok(self.runner, &argv(&["rc-service", name, "start"]), &[]).map(|_| ())
    }

    fn stop(&self, name: &str) -> Result<(), Error> {
        let name = service_name(name);
        run_ok(self.runner, &argv(&["rc-service", name, "stop"]), &[]).map(|_| ())
    }

    fn enable(&self, name: &str) -> Result<(), Error> {
        let name = service_name(name);
        run_ok(
            self.runner,
            &argv(&["rc-update", "add", name, "default"]),
            &[],
        )
        .map(|_| ())
    }

    /// Removes the service from every runlevel it is in, so it starts at no boot.
    fn disable(&self, name: &str) -> Result<(), Error> {
        let name = service_name(name);
        for level in self.runlevels(name)? {
            run_ok(self.runner, &argv(&["rc-update", "del", name, &level]), &[])?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use run::{Output, RecordingRunner};

    fn out(code: i32, stdout: &str) -> Output {
        Output {
            code: Some(code),
            signal: None,
            stdout: stdout.as_bytes().to_vec(),
            stderr: vec![],
        }
    }

    const SHOW: &str = "             chronyd |      default\n                sshd | boot default\n";

    #[test]
    fn a_missing_init_script_is_not_installed_and_nothing_else_is_asked() {
        let runner = RecordingRunner::default();
        runner.answers.borrow_mut().push_back(out(1, ""));
        let s = OpenRc::new(&runner).status("nginx").unwrap();
        assert!(!s.installed);
        assert_eq!(runner.calls.borrow().len(), 1);
        assert_eq!(
            runner.calls.borrow()[0],
            ["rc-service", "--exists", "nginx"]
        );
    }

    #[test]
    fn running_is_status_exiting_zero_and_enabled_is_being_in_a_runlevel() {
        let runner = RecordingRunner::default();
        runner.answers.borrow_mut().extend([
            out(0, ""),
            out(3, " * status: stopped\n"),
            out(0, SHOW),
        ]);
        let s = OpenRc::new(&runner).status("sshd").unwrap();
        assert!(s.installed && !s.running && s.enabled, "{s:?}");
        assert!(s.detail.contains("boot default"), "{}", s.detail);
        assert_eq!(parse_runlevels(SHOW, "chronyd"), ["default"]);
        assert!(parse_runlevels(SHOW, "ssh").is_empty());
    }

    #[test]
    fn disable_removes_the_service_from_every_runlevel() {
        let runner = RecordingRunner::default();
        runner
            .answers
            .borrow_mut()
            .extend([out(0, SHOW), out(0, ""), out(0, "")]);
        OpenRc::new(&runner).disable("sshd").unwrap();
        let calls = runner.calls.borrow();
        assert_eq!(calls[1], ["rc-update", "del", "sshd", "boot"]);
        assert_eq!(calls[2], ["rc-update", "del", "sshd", "default"]);
    }

    /// The found firewall's boot unit comes as `nftables.service`; on Alpine it is the OpenRC
    /// service `nftables`.
    #[test]
    fn a_systemd_unit_name_is_the_openrc_service_of_that_name() {
        let runner = RecordingRunner::default();
        runner.answers.borrow_mut().extend([out(0, ""), out(0, "")]);
        OpenRc::new(&runner).enable("nftables.service").unwrap();
        assert_eq!(
            runner.calls.borrow()[0],
            ["rc-update", "add", "nftables", "default"]
        );
    }
}
