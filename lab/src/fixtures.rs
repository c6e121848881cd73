//! The found rulesets the firewall engine must read, wherever this checkout finds them.

use std::path::{Path, PathBuf};

/// The folder of found-ruleset fixtures: `$MESH_FIXTURES`, else the shared folder beside this
/// checkout (`../shared/fixtures`, as CI lays it out), else the copy kept in the repository
/// (`tests/fixtures/found`). The shared folder comes first, so new fixtures there are read.
pub fn fixtures_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("MESH_FIXTURES") {
        return PathBuf::from(dir);
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the lab crate sits in the workspace");
    [
        workspace.join("../shared/fixtures"),
        workspace.join("tests/fixtures/found"),
    ]
    .into_iter()
    .find(|d| d.is_dir())
    .unwrap_or_else(|| workspace.join("tests/fixtures/found"))
}

/// One fixture's path; panics, naming where it looked, if it is not there.
pub fn fixture(name: &str) -> PathBuf {
    let p = fixtures_dir().join(name);
    assert!(
        p.exists(),
        "fixture {} is missing (set MESH_FIXTURES to the fixtures folder)",
        p.display()
    );
    p
}
