//! The host's side of the launcher (`packaging/launch`): the version this binary reports, and the
//! two files in the state directory the host writes when it completes a reconcile.
//!
//! The launcher counts start attempts in `attempts`, rolls back once to the version in
//! `known-good` after too many, and marks that in `rolled-back`. Only a host that got as far as a
//! reconcile that did not fail knows it works on this machine, so that is where `known-good` is
//! written and the count cleared — the same moment, for the same reason (seed 000, "The restart").

use std::io;
use std::path::Path;

/// The launcher's files: the version it reinstalls after too many failed starts, its count of
/// start attempts since the last completed reconcile, and the version it rolled back to (named
/// by the store, which checks every name in its directory).
pub use crate::store::{ATTEMPTS, KNOWN_GOOD, ROLLED_BACK};

/// This binary's version: compiled in, so it is the version *running*, never the one installed.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// `mesh-host version`'s line: the running version and the system this binary was built for.
pub fn version_line() -> String {
    format!("mesh-host {VERSION} ({})", crate::build::BUILD.system)
}

/// Reads a `version` line back: the version and the system, when the line is one.
pub fn parse_version_line(line: &str) -> Option<(&str, &str)> {
    let rest = line.trim().strip_prefix("mesh-host ")?;
    let (version, system) = rest.split_once(' ')?;
    let system = system.strip_prefix('(')?.strip_suffix(')')?;
    (!version.is_empty() && !system.is_empty()).then_some((version, system))
}

/// A reconcile completed without failing: this running version is known good, the attempt count
/// is cleared, and a rollback marker for another version is cleared too (a release after the one
/// rolled back to has proved itself). A marker naming this very version stays: the node rolled
/// back to it, and the declaration may still name the release that failed, so the next failure
/// of that release halts instead of flapping between the two.
pub fn reconciled(state_dir: &Path) -> io::Result<()> {
    reconciled_as(state_dir, VERSION)
}

fn reconciled_as(state_dir: &Path, version: &str) -> io::Result<()> {
    std::fs::create_dir_all(state_dir)?;
    let path = state_dir.join(KNOWN_GOOD);
    let line = format!("{version}\n");
    let marker = state_dir.join(ROLLED_BACK);
    let stale_marker = match std::fs::read_to_string(&marker) {
        Ok(to) => to.trim() != version,
        Err(e) if e.kind() == io::ErrorKind::NotFound => false,
        Err(e) => return Err(e),
    };
    // Already so (every reconcile after the first of this version): nothing is written, and a
    // reconcile that changed nothing fsyncs nothing.
    let known = std::fs::read(&path).is_ok_and(|b| b == line.as_bytes());
    if known && !stale_marker && !state_dir.join(ATTEMPTS).exists() {
        return Ok(());
    }
    let tmp = state_dir.join("known-good.tmp");
    crate::store::write_synced(&tmp, line.as_bytes())?;
    std::fs::rename(&tmp, &path)?;
    remove(&state_dir.join(ATTEMPTS))?;
    if stale_marker {
        remove(&marker)?;
    }
    crate::store::sync_dir(state_dir)
}

fn remove(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_line_names_the_running_version_and_the_build_and_reads_back() {
        let line = version_line();
        assert_eq!(
            parse_version_line(&line),
            Some((env!("CARGO_PKG_VERSION"), crate::build::BUILD.system))
        );
        assert_eq!(
            parse_version_line("mesh-host 0.2.0 (arch)\n"),
            Some(("0.2.0", "arch"))
        );
        for bad in [
            "",
            "mesh-host 0.2.0",
            "other 0.2.0 (debian)",
            "mesh-host  (x)",
        ] {
            assert_eq!(parse_version_line(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_completed_reconcile_records_known_good_and_clears_the_count() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join(ATTEMPTS), "2\n").unwrap();
        std::fs::write(d.join(KNOWN_GOOD), "0.0.9\n").unwrap();
        reconciled_as(d, "0.1.0").unwrap();
        assert_eq!(
            std::fs::read_to_string(d.join(KNOWN_GOOD)).unwrap(),
            "0.1.0\n"
        );
        assert!(!d.join(ATTEMPTS).exists());
        assert!(!d.join("known-good.tmp").exists());

        // Rolled back to 0.1.0: its own reconcile keeps the marker, a later release's clears it.
        std::fs::write(d.join(ROLLED_BACK), "0.1.0\n").unwrap();
        reconciled_as(d, "0.1.0").unwrap();
        assert!(d.join(ROLLED_BACK).exists());
        reconciled_as(d, "0.2.1").unwrap();
        assert!(!d.join(ROLLED_BACK).exists());
        assert_eq!(
            std::fs::read_to_string(d.join(KNOWN_GOOD)).unwrap(),
            "0.2.1\n"
        );

        // Already so: nothing is written (the file is the same one).
        use std::os::unix::fs::MetadataExt;
        let inode = || std::fs::metadata(d.join(KNOWN_GOOD)).unwrap().ino();
        let before = inode();
        reconciled_as(d, "0.2.1").unwrap();
        assert_eq!(inode(), before);
        // Known good already, but a count or another version's marker there: both cleared.
        std::fs::write(d.join(ATTEMPTS), "1\n").unwrap();
        std::fs::write(d.join(ROLLED_BACK), "0.1.0\n").unwrap();
        reconciled_as(d, "0.2.1").unwrap();
        assert!(!d.join(ATTEMPTS).exists());
        assert!(!d.join(ROLLED_BACK).exists());
    }
}
