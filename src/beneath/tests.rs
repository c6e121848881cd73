//! Unit tests of resolution beneath the root: links, `..` and special files refused.

use super::*;
use std::os::unix::fs::symlink;

fn root() -> (tempfile::TempDir, Root) {
    let d = tempfile::tempdir().unwrap();
    let r = Root::open(d.path()).unwrap();
    (d, r)
}

/// Proves a link in a folder of the path is refused, naming that folder, and nothing is written
/// where it points.
#[test]
fn a_symlink_component_is_refused_naming_it() {
    let (d, r) = root();
    let outside = tempfile::tempdir().unwrap();
    std::fs::create_dir(d.path().join("etc")).unwrap();
    symlink(outside.path(), d.path().join("etc/race")).unwrap();
    let e = r
        .write_file("/etc/race/f.conf", b"x", |_| Ok(()))
        .unwrap_err();
    assert!(
        matches!(&e, BeneathError::Symlink { component, .. } if component == "/etc/race"),
        "{e}"
    );
    assert!(
        e.to_string().contains("/etc/race is a symbolic link"),
        "{e}"
    );
    assert!(r.read_file("/etc/race/f.conf").is_err());
    assert!(r.mkdir_all("/etc/race/sub").is_err());
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    // The walk (the kernels without openat2) refuses it the same way.
    let parts = components("/etc/race/f.conf").unwrap();
    let e = r.walk("/etc/race/f.conf", &parts, 2).unwrap_err();
    assert!(matches!(e, BeneathError::Symlink { .. }), "{e}");
}

/// Proves a link at the file's own path is neither read nor replaced.
#[test]
fn a_symlink_at_the_path_itself_is_refused() {
    let (d, r) = root();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), "s").unwrap();
    symlink(outside.path().join("secret"), d.path().join("f")).unwrap();
    let e = r.read_file("/f").unwrap_err();
    assert!(matches!(e, BeneathError::Symlink { .. }), "{e}");
}

/// Proves `..`, `.` and empty components are refused before anything is opened.
#[test]
fn dot_dot_is_refused() {
    let (_d, r) = root();
    for p in ["/etc/../../x", "/./x", "//x", "etc/x", "/etc/.."] {
        let e = r.write_file(p, b"x", |_| Ok(())).unwrap_err();
        assert!(matches!(e, BeneathError::Unclean { .. }), "{p}: {e}");
    }
}

/// Proves a FIFO at a file's path is refused at once, without blocking on a writer.
#[test]
fn a_fifo_is_refused_without_blocking() {
    let (d, r) = root();
    nix::unistd::mkfifo(&d.path().join("passwd"), Mode::from_bits_truncate(0o644)).unwrap();
    let started = std::time::Instant::now();
    let e = r.read_file("/passwd").unwrap_err();
    assert!(started.elapsed() < std::time::Duration::from_secs(1));
    assert!(
        matches!(e, BeneathError::Special { kind: "a FIFO", .. }),
        "{e}"
    );
    assert!(
        e.to_string().contains("/passwd exists and is a FIFO"),
        "{e}"
    );
}

/// Proves a write lands in the directory under the root, and reads back streamed.
#[test]
fn writes_read_back_and_compare_by_length_then_bytes() {
    let (d, r) = root();
    r.write_file("/a/b/c.conf", b"hello", |_| Ok(())).unwrap();
    assert_eq!(
        std::fs::read(d.path().join("a/b/c.conf")).unwrap(),
        b"hello"
    );
    let f = r.read_file("/a/b/c.conf").unwrap().unwrap();
    assert!(f.holds(b"hello").unwrap());
    assert!(!f.holds(b"hellO").unwrap());
    assert!(!f.holds(b"hello!").unwrap());
    assert_eq!(f.digest().unwrap(), crate::store::digest(b"hello"));
    assert_eq!(r.remove_file("/a/b/c.conf").unwrap(), Removed::Removed);
    assert_eq!(r.remove_file("/a/b/c.conf").unwrap(), Removed::Absent);
    std::fs::write(d.path().join("a/b/x"), "x").unwrap();
    assert_eq!(r.remove_dir("/a/b").unwrap(), Removed::NotEmpty);
    assert!(r.read_file("/nope/x").unwrap().is_none());
}

/// The names in a directory.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Proves both ways of staging a write, unnamed (`O_TMPFILE`) and by a drawn name `O_EXCL` (the
/// fallback), link the file under a name of the host's own that is new each time, and leave
/// nothing when writing fails (`prepare` refusing, as a chown to a missing owner does).
#[test]
fn a_staged_write_takes_a_new_name_and_leaves_nothing_when_it_fails() {
    let (d, r) = root();
    std::fs::create_dir(d.path().join("etc")).unwrap();
    std::fs::write(d.path().join("etc/.f.mesh-host.tmp"), "an admin's").unwrap();
    let dir = r.mkdir_parts("/etc/f", &["etc", "f"], 1).unwrap();
    for unnamed in [true, false] {
        let a = staged(&dir, "/etc/f", b"one", &|_: &File| Ok(()), unnamed).unwrap();
        let b = staged(&dir, "/etc/f", b"two", &|_: &File| Ok(()), unnamed).unwrap();
        assert_ne!(a, b);
        for (n, content) in [(&a, "one"), (&b, "two")] {
            assert!(
                n.starts_with(".mesh-host.") && n.ends_with(".tmp") && n.len() == 31,
                "{n}"
            );
            assert_eq!(
                std::fs::read_to_string(d.path().join("etc").join(n)).unwrap(),
                content
            );
            std::fs::remove_file(d.path().join("etc").join(n)).unwrap();
        }
        let refused = |_: &File| Err(std::io::Error::other("no such owner"));
        let e = staged(&dir, "/etc/f", b"three", &refused, unnamed).unwrap_err();
        assert_eq!(e.to_string(), "writing /etc/f: no such owner");
        assert_eq!(names(&d.path().join("etc")), vec![".f.mesh-host.tmp"]);
    }
}
