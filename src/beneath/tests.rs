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

/// Runs `checks` in a forked child with a mount namespace of its own (private, so nothing it
/// mounts reaches the machine), after `mounts` (source, target) are bind-mounted there; returns
/// what the child wrote as its findings, failing the test when it did not end with `ok`.
fn in_mount_namespace(mounts: &[(&Path, &Path)], checks: impl FnOnce() -> Result<(), String>) {
    use nix::libc;
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let report = tempfile::NamedTempFile::new().unwrap();
    let cstr = |p: &Path| CString::new(p.as_os_str().as_bytes()).unwrap();
    let mounts: Vec<(CString, CString)> = mounts.iter().map(|(s, t)| (cstr(s), cstr(t))).collect();
    let report_path = report.path().to_path_buf();
    // SAFETY: the child only mounts, runs the checks and writes one file, then `_exit`s; the
    // parent waits for it.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork: {}", Errno::last());
    match child {
        0 => {
            let outcome = (|| -> Result<(), String> {
                // SAFETY: plain system calls on valid C strings.
                unsafe {
                    if libc::unshare(libc::CLONE_NEWNS) != 0 {
                        return Err(format!("unshare: {}", Errno::last()));
                    }
                    let none = std::ptr::null();
                    if libc::mount(
                        none,
                        c"/".as_ptr(),
                        none,
                        libc::MS_REC | libc::MS_PRIVATE,
                        std::ptr::null(),
                    ) != 0
                    {
                        return Err(format!("making / private: {}", Errno::last()));
                    }
                    for (s, t) in &mounts {
                        if libc::mount(
                            s.as_ptr(),
                            t.as_ptr(),
                            none,
                            libc::MS_BIND,
                            std::ptr::null(),
                        ) != 0
                        {
                            return Err(format!("bind mount {s:?} on {t:?}: {}", Errno::last()));
                        }
                    }
                }
                checks()
            })();
            let text = match &outcome {
                Ok(()) => "ok".to_string(),
                Err(e) => e.clone(),
            };
            let _ = std::fs::write(&report_path, text);
            // SAFETY: ends the forked child without running the parent's destructors.
            unsafe { libc::_exit(i32::from(outcome.is_err())) }
        }
        _ => {
            let mut status = 0;
            // SAFETY: waits for the child just forked.
            let waited = unsafe { libc::waitpid(child, &mut status, 0) };
            assert_eq!(waited, child, "waitpid: {}", Errno::last());
            let said = std::fs::read_to_string(report.path()).unwrap_or_default();
            assert_eq!(said, "ok", "the child in its mount namespace: {status:?}");
        }
    }
}

/// The bytes of every file under `dir`, by relative path: what must not change.
fn tree(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let meta = std::fs::symlink_metadata(&p).unwrap();
            if meta.is_dir() {
                stack.push(p.clone());
                out.push((p.strip_prefix(dir).unwrap().to_path_buf(), b"/".to_vec()));
            } else {
                out.push((
                    p.strip_prefix(dir).unwrap().to_path_buf(),
                    std::fs::read(&p).unwrap(),
                ));
            }
        }
    }
    out.sort();
    out
}

/// Proves that under a root other than `/` nothing is resolved across a mount: a directory
/// bind-mounted inside the root from outside it is refused by `openat2` (`RESOLVE_NO_XDEV`) and
/// by the walk alike, for a read, a write, a mkdir and the directory itself, and a file
/// bind-mounted over a declared one is refused for reading and writing; each names the component
/// and the mount, and the outside directory is left byte for byte as it was. The machine's own
/// `/` crosses its mounts (`/proc` is one).
#[test]
fn a_mount_inside_a_root_other_than_slash_is_never_crossed() {
    let (d, _) = root();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("conf"), "outside\n").unwrap();
    std::fs::create_dir_all(d.path().join("etc/app")).unwrap();
    std::fs::write(d.path().join("etc/f"), "the root's\n").unwrap();
    let before = tree(outside.path());
    let (app, f) = (d.path().join("etc/app"), d.path().join("etc/f"));
    let conf = outside.path().join("conf");
    in_mount_namespace(&[(outside.path(), &app), (&conf, &f)], || {
        let r = Root::open(d.path()).map_err(|e| e.to_string())?;
        let mount = |what: &str, e: Result<(), BeneathError>, component: &str| match e {
            Err(BeneathError::Mount {
                component: c,
                mount,
                ..
            }) if c == component && mount.starts_with("mount ") => Ok(()),
            other => Err(format!(
                "{what}: not refused as a mount crossing: {other:?}"
            )),
        };
        mount("dir", r.dir("/etc/app").map(drop), "/etc/app")?;
        mount("read", r.read_file("/etc/app/conf").map(drop), "/etc/app")?;
        mount(
            "write",
            r.write_file("/etc/app/new", b"x", |_| Ok(())),
            "/etc/app",
        )?;
        mount("mkdir", r.mkdir_all("/etc/app/sub").map(drop), "/etc/app")?;
        let parts = ["etc", "app", "conf"];
        mount(
            "walk",
            r.walk("/etc/app/conf", &parts, 2).map(drop),
            "/etc/app",
        )?;
        mount("read over", r.read_file("/etc/f").map(drop), "/etc/f")?;
        mount(
            "write over",
            r.write_file("/etc/f", b"x", |_| Ok(())),
            "/etc/f",
        )?;
        // The message names the path, the component and where the mount is.
        let said = r.dir("/etc/app").unwrap_err().to_string();
        if !said.contains("/etc/app: /etc/app is on another mount than the root (mount ")
            || !said.contains(&format!("at {}", app.display()))
        {
            return Err(format!("the refusal does not name the mount: {said}"));
        }
        // A rename over a mount point that a root not confined would try fails, and leaves no
        // temporary file (the write's own cleanup, below the refusal).
        let free = Root {
            xdev: None,
            ..Root::open(d.path()).map_err(|e| e.to_string())?
        };
        match free.write_file("/etc/f", b"x", |_| Ok(())) {
            Err(BeneathError::Io {
                doing: "renaming into",
                ..
            }) => {}
            other => return Err(format!("a rename over a mount point: {other:?}")),
        }
        if names(&d.path().join("etc")) != ["app", "f"] {
            return Err(format!("left behind: {:?}", names(&d.path().join("etc"))));
        }
        // The machine's own root crosses its mounts.
        let slash = Root::open(Path::new("/")).map_err(|e| e.to_string())?;
        if slash.confined() || !matches!(slash.dir("/proc"), Ok(Some(_))) {
            return Err("the machine's / refused a mount of its own".into());
        }
        Ok(())
    });
    assert_eq!(
        tree(outside.path()),
        before,
        "the outside directory changed"
    );
    assert_eq!(
        std::fs::read_to_string(d.path().join("etc/f")).unwrap(),
        "the root's\n"
    );
    assert!(std::fs::read_dir(d.path().join("etc/app"))
        .unwrap()
        .next()
        .is_none());
}

/// Proves the coarse clock a file's change time is judged against is read: the real time, to
/// within the coarse clock's tick (a failed read would be zero, and no change time settled).
#[test]
fn the_coarse_clock_reads_the_real_time() {
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    let [sec, nsec] = coarse_now();
    let after = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    assert!((0..1_000_000_000).contains(&nsec), "nanoseconds {nsec}");
    let coarse = std::time::Duration::new(sec as u64, nsec as u32);
    // The coarse clock lags the fine one by at most a tick (a few milliseconds; one second here).
    assert!(
        coarse + std::time::Duration::from_secs(1) >= before && coarse <= after,
        "coarse {coarse:?}, fine {before:?}..{after:?}"
    );
}
