//! A stand-in for `systemctl`, because systemd cannot run as PID 1 here: a POSIX shell script the
//! bed puts first on the PATH of the programs it runs in the node, keeping each unit's
//! enabled-or-disabled state in a file and logging every call, so a test reads what was asked of
//! the boot units and what state they are left in.
//!
//! What it does, and all it does: `show [-p PROPS] UNIT` prints `LoadState`, `ActiveState` and
//! `UnitFileState` (a unit it was never told of is `not-found`); `enable UNIT…` and `disable
//! UNIT…` change the state of units it knows; every other verb (`start`, `stop`, …) fails, so a
//! program that stops a unit where it must only disable it is caught.

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
        assert!(!call(&stub, &["enable", "other.service"]).0);
        assert!(call(&stub, &["show", "other.service"])
            .1
            .contains("LoadState=not-found"));
        assert_eq!(stub.calls().len(), 7);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
