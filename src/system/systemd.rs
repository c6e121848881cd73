//! systemd, through `systemctl`: the service manager of the Debian and Arch builds.
//!
//! Its `LoadState` is why the host is built per system rather than over a common interface: it
//! tells *not installed* (`not-found`) apart from *stopped*, so a declared service that does not
//! exist fails instead of being reported as stopped-and-fine. OpenRC has no equivalent, and an
//! interface spanning both would have to drop it.

use super::{argv, run_ok, Error, ServiceManager, ServiceStatus, Unparsed};
use run::Runner;
use std::collections::BTreeMap;

pub struct Systemd<'r> {
    runner: &'r dyn Runner,
}

impl<'r> Systemd<'r> {
    pub fn new(runner: &'r dyn Runner) -> Self {
        Systemd { runner }
    }

    fn systemctl(&self, verb: &str, name: &str) -> Result<(), Error> {
        run_ok(self.runner, &argv(&["systemctl", verb, name]), &[]).map(|_| ())
    }
}

/// Reads `systemctl show -p LoadState,ActiveState,UnitFileState` (`Key=Value` lines).
pub fn parse_show(stdout: &str) -> Result<ServiceStatus, Unparsed> {
    let props: BTreeMap<&str, &str> = stdout
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim(), v.trim()))
        .collect();
    let get = |k: &str| {
        props
            .get(k)
            .copied()
            .ok_or_else(|| Unparsed(format!("no {k} in {stdout:?}")))
    };
    let load = get("LoadState")?;
    let active = get("ActiveState")?;
    // A unit that is not found has no unit file, and older systemd omits the property then.
    let file = props.get("UnitFileState").copied().unwrap_or("");
    Ok(ServiceStatus {
        installed: load != "not-found",
        running: matches!(active, "active" | "reloading"),
        enabled: matches!(file, "enabled" | "enabled-runtime"),
        detail: format!("LoadState={load} ActiveState={active} UnitFileState={file}"),
    })
}

impl ServiceManager for Systemd<'_> {
    fn name(&self) -> &'static str {
        "systemd"
    }

    fn status(&self, name: &str) -> Result<ServiceStatus, Error> {
        let argv = argv(&[
            "systemctl",
            "show",
            "-p",
            "LoadState,ActiveState,UnitFileState",
            name,
        ]);
        let out = run_ok(self.runner, &argv, &[])?;
        parse_show(&String::from_utf8_lossy(&out.stdout)).map_err(|detail| Error::Unreadable {
            program: "systemctl".into(),
            detail: detail.0,
        })
    }

    fn start(&self, name: &str) -> Result<(), Error> {
        self.systemctl("start", name)
    }

    fn stop(&self, name: &str) -> Result<(), Error> {
        self.systemctl("stop", name)
    }

    fn enable(&self, name: &str) -> Result<(), Error> {
        self.systemctl("enable", name)
    }

    fn disable(&self, name: &str) -> Result<(), Error> {
        self.systemctl("disable", name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use run::{Output, RecordingRunner};

    #[test]
    fn not_found_is_not_installed_never_stopped() {
        let s = parse_show("LoadState=not-found\nActiveState=inactive\nUnitFileState=\n").unwrap();
        assert!(!s.installed);
        assert!(!s.running);
        let s =
            parse_show("LoadState=loaded\nActiveState=inactive\nUnitFileState=disabled\n").unwrap();
        assert!(s.installed && !s.running && !s.enabled);
        let s =
            parse_show("ActiveState=active\nLoadState=loaded\nUnitFileState=enabled\n").unwrap();
        assert!(s.installed && s.running && s.enabled);
        // A unit without an [Install] section is not enabled, whatever enable said.
        let s = parse_show("LoadState=loaded\nActiveState=active\nUnitFileState=static\n").unwrap();
        assert!(!s.enabled);
        assert!(parse_show("System has not been booted with systemd").is_err());
    }

    #[test]
    fn status_asks_for_exactly_the_three_properties() {
        let runner = RecordingRunner::default();
        runner.answers.borrow_mut().push_back(Output {
            code: Some(0),
            signal: None,
            stdout: b"LoadState=masked\nActiveState=inactive\nUnitFileState=masked\n".to_vec(),
            stderr: vec![],
        });
        let s = Systemd::new(&runner).status("nginx.service").unwrap();
        assert!(s.installed && !s.running && !s.enabled);
        assert_eq!(
            runner.calls.borrow()[0],
            [
                "systemctl",
                "show",
                "-p",
                "LoadState,ActiveState,UnitFileState",
                "nginx.service"
            ]
        );
    }

    #[test]
    fn a_systemctl_that_cannot_talk_to_systemd_is_an_error_naming_it() {
        let runner = RecordingRunner::default();
        runner.answers.borrow_mut().push_back(Output {
            code: Some(1),
            signal: None,
            stdout: vec![],
            stderr:
                b"System has not been booted with systemd as init system (PID 1). Can't operate.\n"
                    .to_vec(),
        });
        let e = Systemd::new(&runner)
            .status("nginx")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("systemctl") && e.contains("not been booted"),
            "{e}"
        );
    }
}
