//! A stand-in for `systemctl`, because systemd cannot run as PID 1 here: a POSIX shell script the
//! bed puts first on the PATH of the programs it runs in the node, keeping each unit's
//! enabled-or-disabled state in a file and logging every call, so a test reads what was asked of
//! the boot units and what state they are left in.
//!
//! What it does, and all it does: `show [-p PROPS] UNIT` prints `LoadState`, `ActiveState` and
//! `UnitFileState` (a unit it was never told of is `not-found`); `enable UNIT…` and `disable
//! UNIT…` change the state of units it knows; `start UNIT` of a unit it was given a start command
//! for ([`StubSystemctl::set_start`]: a daemon the lab runs, as the unit's `ExecStart` would) runs
//! that command detached, its output in `start/UNIT.log`; every other verb (`stop`, `start` of
//! any other unit, …) fails, so a program that stops a unit where it must only disable it is
//! caught.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The stand-in in its directory.
#[derive(Debug, Clone)]
pub struct StubSystemctl {
    dir: PathBuf,
}

impl StubSystemctl {
    /// Writes the stand-in into `dir` (made if missing) with no unit known.
    pub fn install(dir: &Path) -> Result<StubSystemctl> {
        let units = dir.join("units");
        std::fs::create_dir_all(&units).map_err(|e| Error::io(&units, e))?;
        let shown = dir.display().to_string();
        if shown.contains('\'') {
            return Err(Error::InvalidName {
                what: "directory",
                name: shown,
                reason: "must not hold a single quote (it is quoted in a script)",
            });
        }
        let script = format!(
            r#"#!/bin/sh
# The lab's stand-in for systemctl (systemd cannot run as PID 1 here).
dir='{shown}'
echo "$*" >> "$dir/log"
verb=$1
shift
case $verb in
  show)
    unit=
    for a in "$@"; do unit=$a; done
    state=$(cat "$dir/units/$unit" 2>/dev/null)
    if [ -z "$state" ]; then
      printf 'LoadState=not-found\nActiveState=inactive\nUnitFileState=\n'
    else
      printf 'LoadState=loaded\nActiveState=active\nUnitFileState=%s\n' "$state"
    fi
    ;;
  enable | disable)
    for unit in "$@"; do
      if [ ! -e "$dir/units/$unit" ]; then
        echo "Unit file $unit does not exist." >&2
        exit 1
      fi
      echo "${{verb}}d" > "$dir/units/$unit"
    done
    ;;
  start)
    unit=$1
    if [ $# -ne 1 ] || [ ! -f "$dir/start/$unit" ]; then
      echo "the lab's systemctl stand-in does not start $*" >&2
      exit 1
    fi
    # The unit's command, one argument a line, run detached as systemd runs a service.
    set --
    while IFS= read -r a; do set -- "$@" "$a"; done < "$dir/start/$unit"
    setsid "$@" > "$dir/start/$unit.log" 2>&1 < /dev/null &
    ;;
  *)
    echo "the lab's systemctl stand-in does not do $verb" >&2
    exit 1
    ;;
esac
"#
        );
        let path = dir.join("systemctl");
        std::fs::write(&path, script).map_err(|e| Error::io(&path, e))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| Error::io(&path, e))?;
        Ok(StubSystemctl {
            dir: dir.to_owned(),
        })
    }

    /// The directory to put first on PATH.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Makes a unit known, enabled or disabled.
    pub fn set(&self, unit: &str, enabled: bool) -> Result<()> {
        let path = self.dir.join("units").join(unit);
        let state = if enabled { "enabled\n" } else { "disabled\n" };
        std::fs::write(&path, state).map_err(|e| Error::io(&path, e))
    }

    /// Gives a known unit the command `systemctl start UNIT` runs (detached), as its
    /// `ExecStart` would; one argument a line, so none may hold a newline.
    pub fn set_start(&self, unit: &str, argv: &[String]) -> Result<()> {
        if let Some(bad) = argv.iter().find(|a| a.contains('\n')) {
            return Err(Error::InvalidName {
                what: "unit command argument",
                name: bad.clone(),
                reason: "must not hold a newline (the stand-in reads one argument a line)",
            });
        }
        let dir = self.dir.join("start");
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        let path = dir.join(unit);
        let text: String = argv.iter().map(|a| format!("{a}\n")).collect();
        std::fs::write(&path, text).map_err(|e| Error::io(&path, e))
    }

    /// Whether a unit is enabled; `None` for a unit it was never told of.
    pub fn enabled(&self, unit: &str) -> Option<bool> {
        let state = std::fs::read_to_string(self.dir.join("units").join(unit)).ok()?;
        Some(state.trim() == "enabled")
    }

    /// Every call made, one line each (its arguments).
    pub fn calls(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.join("log"))
            .map(|t| t.lines().map(str::to_owned).collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn call(stub: &StubSystemctl, args: &[&str]) -> (bool, String) {
        let out = Command::new(stub.dir().join("systemctl"))
            .args(args)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    }

    #[test]
    fn the_stand_in_keeps_each_units_state_and_refuses_to_stop() {
        let dir = std::env::temp_dir().join(format!("lab-systemctl-{}", std::process::id()));
        let stub = StubSystemctl::install(&dir).unwrap();
        stub.set("nftables.service", true).unwrap();
        let show = [
            "show",
            "-p",
            "LoadState,ActiveState,UnitFileState",
            "nftables.service",
        ];
        assert!(call(&stub, &show).1.contains("UnitFileState=enabled"));
        assert!(call(&stub, &["disable", "nftables.service"]).0);
        assert_eq!(stub.enabled("nftables.service"), Some(false));
        assert!(call(&stub, &show).1.contains("UnitFileState=disabled"));
        assert!(call(&stub, &["enable", "nftables.service"]).0);
        assert_eq!(stub.enabled("nftables.service"), Some(true));
        assert!(!call(&stub, &["stop", "nftables.service"]).0);
        assert!(!call(&stub, &["start", "nftables.service"]).0);
        stub.set_start(
            "nftables.service",
            &["touch".into(), dir.join("started").display().to_string()],
        )
        .unwrap();
        assert!(call(&stub, &["start", "nftables.service"]).0);
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !dir.join("started").exists() && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(dir.join("started").exists(), "the unit's command ran");
        assert!(!call(&stub, &["enable", "other.service"]).0);
        assert!(call(&stub, &["show", "other.service"])
            .1
            .contains("LoadState=not-found"));
        assert_eq!(stub.calls().len(), 9);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
