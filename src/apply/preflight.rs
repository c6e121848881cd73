//! The checks of the machine an apply makes before its first resource, so that what the host
//! would refuse part-way is refused while nothing has changed: every declared file and
//! directory walked component by component under the root, without following anything and,
//! under a root other than the machine's `/`, without crossing a mount (see `beneath`).
//!
//! This is the up-front refusal; the appliers still open every path beneath the root without
//! following links, which is what holds against a link swapped in after this walk.

use crate::beneath::Mount;
use crate::declaration::{validate::Problem, Declaration, Problems, Resource};
use std::collections::HashSet;
use std::fs::FileType;
use std::io::ErrorKind;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

/// What a found thing is, in the words of a refusal.
fn kind(t: FileType) -> &'static str {
    if t.is_symlink() {
        "a symbolic link"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_file() {
        "a regular file"
    } else {
        "neither a file nor a directory"
    }
}

/// Why the machine under `root` refuses `declared` (a normalised absolute path that validation
/// accepted), if it does: a symbolic link at any component, the last one included, whether it
/// leaves the root or not (the host follows nothing the declaration did not name); a component
/// on the way that is not a directory; and at the path itself something other than what is
/// declared — a regular file for a file (never a FIFO, a device or a socket, which reading would
/// hang on or consume), a directory for a directory. A component that does not exist ends the
/// walk: the apply creates the rest. Under a root other than `/` (`mount` is then the root's
/// own), a component on another mount — a bind mount inside the root pointing elsewhere, a file
/// mounted over the declared one — is refused, naming the component and the mount.
///
/// `walked` holds the directories on the way that an earlier path of the same check found
/// sound (a directory, no link, the root's mount): each is asked once per check, not once per
/// path beneath it (10,000 files in one folder asked `/srv` 10,000 times, twice each).
fn refusal(
    root: &Path,
    declared: &str,
    want_dir: bool,
    mount: Option<&Mount>,
    walked: &mut HashSet<PathBuf>,
) -> Option<String> {
    let parts: Vec<&str> = declared.split('/').filter(|c| !c.is_empty()).collect();
    let mut at = root.to_path_buf();
    for (n, part) in parts.iter().enumerate() {
        at.push(part);
        let last = n + 1 == parts.len();
        if !last && walked.contains(&at) {
            continue;
        }
        let shown = format!("/{}", parts[..=n].join("/"));
        let meta = match std::fs::symlink_metadata(&at) {
            Ok(m) => m,
            Err(e) if e.kind() == ErrorKind::NotFound => return None,
            Err(e) => return Some(format!("{declared}: reading {shown} under the root: {e}")),
        };
        let t = meta.file_type();
        if t.is_symlink() {
            let target = std::fs::read_link(&at)
                .map(|t| format!(" (to {})", t.display()))
                .unwrap_or_default();
            return Some(format!(
                "{declared}: {shown} is a symbolic link{target}; the host follows no link the \
                 declaration did not name, so it will not write through it"
            ));
        }
        if let Some(root_mount) = mount {
            match crate::beneath::mount_of_path(&at) {
                Ok(m) if !root_mount.same(&m) => {
                    return Some(format!(
                        "{declared}: {shown} is on another mount than the root ({}); under a \
                         root other than / the host reads and writes nothing across a mount",
                        m.describe()
                    ))
                }
                Ok(_) => {}
                // Gone since the lstat above (a rename under the walk): as a component that
                // does not exist, the apply's own resolution beneath the root decides.
                Err(nix::errno::Errno::ENOENT) => return None,
                Err(e) => return Some(format!("{declared}: reading {shown} under the root: {e}")),
            }
        }
        if !last && !t.is_dir() {
            return Some(format!(
                "{declared}: {shown} is {}, not a directory, so nothing can be beneath it",
                kind(t)
            ));
        }
        if !last {
            walked.insert(at.clone());
        }
        if last && want_dir && !t.is_dir() {
            return Some(format!(
                "{declared} is {} where a directory is declared; the host will not replace it",
                kind(t)
            ));
        }
        if last && !want_dir && !t.is_file() {
            return Some(format!(
                "{declared} is {} where a regular file is declared; the host will not read or \
                 replace it",
                kind(t)
            ));
        }
    }
    None
}

/// Every declared file and directory the machine under `root` refuses, each at its JSON path,
/// all at once; `Ok` when the apply may begin.
pub fn check(root: &Path, decl: &Declaration) -> Result<(), Problems> {
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let mount = (!crate::beneath::is_machine_root(&root))
        .then(|| crate::beneath::mount_of_path(&root).ok())
        .flatten();
    let mut walked = HashSet::new();
    let mut problems: Vec<Problem> = Vec::new();
    for (i, r) in decl.resources.iter().enumerate() {
        let (path, want_dir) = match r {
            Resource::File(f) => (f.path.as_str(), false),
            Resource::Directory(d) => (d.path.as_str(), true),
            _ => continue,
        };
        if let Some(message) = refusal(&root, path, want_dir, mount.as_ref(), &mut walked) {
            problems.push(Problem {
                path: format!("resources[{i}].path"),
                message,
            });
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(Problems(problems))
    }
}

/// The declared services, packages and containers, refused together under a root other than `/`
/// unless a test harness asked for the machine's own tools (see `system::confine`): their
/// managers and the container runtime know nothing of the root and would act on this machine.
pub fn system_tools(decl: &Declaration) -> Option<String> {
    let (mut managers, mut runtime) = (false, false);
    let named: Vec<String> = decl
        .resources
        .iter()
        .filter_map(|r| match r {
            Resource::Service(s) => {
                managers = true;
                Some(format!("{} (service {})", s.id, s.name))
            }
            Resource::Package(p) => {
                managers = true;
                Some(format!("{} (package {})", p.id, p.name))
            }
            Resource::Container(c) => {
                runtime = true;
                Some(format!("{} (container {})", c.id, c.name))
            }
            _ => None,
        })
        .collect();
    let what = match (managers, runtime) {
        (false, false) => return None,
        (true, false) => "service and package managers",
        (false, true) => "container runtime",
        (true, true) => "service and package managers and the container runtime",
    };
    let why = crate::system::confined(what)?;
    Some(format!("{}: {why}", named.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::system::fake::declaration;

    /// Proves that the walk names, at once and each at its JSON path, a link out of the root, a
    /// link inside it (a merged `/usr`), a FIFO where a file is declared, a file on the way, and
    /// the wrong kind at a file's and a directory's path, while a fine path and one not there
    /// yet pass.
    #[test]
    fn every_link_special_file_and_wrong_kind_is_named_at_once() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(r.join("etc/ok")).unwrap();
        std::fs::create_dir_all(r.join("usr/bin")).unwrap();
        std::os::unix::fs::symlink(outside.path(), r.join("etc/race")).unwrap();
        std::os::unix::fs::symlink("usr/bin", r.join("bin")).unwrap();
        nix::unistd::mkfifo(&r.join("etc/fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        std::fs::write(r.join("etc/plain"), "x").unwrap();
        let d = declaration(
            "converged",
            &[],
            serde_json::json!([
                {"id": "a", "type": "file", "path": "/etc/ok/a.conf", "content": "x"},
                {"id": "b", "type": "file", "path": "/etc/race/f.conf", "content": "x"},
                {"id": "c", "type": "file", "path": "/bin/tool", "content": "x"},
                {"id": "d", "type": "file", "path": "/etc/fifo", "content": "x"},
                {"id": "e", "type": "file", "path": "/etc/plain/under", "content": "x"},
                {"id": "f", "type": "directory", "path": "/etc/plain"},
                {"id": "g", "type": "file", "path": "/etc/ok", "content": "x"},
                {"id": "h", "type": "directory", "path": "/srv/new/deep"}
            ]),
        );
        let p: Vec<String> = check(r, &d)
            .unwrap_err()
            .0
            .iter()
            .map(|p| p.to_string())
            .collect();
        assert_eq!(p.len(), 6, "{p:#?}");
        assert!(
            p[0].starts_with(
                "resources[1].path: /etc/race/f.conf: /etc/race is a symbolic link (to "
            ),
            "{p:#?}"
        );
        assert!(
            p[1].starts_with("resources[2].path: /bin/tool: /bin is a symbolic link (to usr/bin)"),
            "{p:#?}"
        );
        assert!(
            p[2].starts_with(
                "resources[3].path: /etc/fifo is a FIFO where a regular file is declared"
            ),
            "{p:#?}"
        );
        assert!(p[3].starts_with("resources[4].path: /etc/plain/under: /etc/plain is a regular file, not a directory"), "{p:#?}");
        assert!(
            p[4].starts_with(
                "resources[5].path: /etc/plain is a regular file where a directory is declared"
            ),
            "{p:#?}"
        );
        assert!(
            p[5].starts_with(
                "resources[6].path: /etc/ok is a directory where a regular file is declared"
            ),
            "{p:#?}"
        );
        // A link to a file is refused at the path itself too.
        std::fs::remove_file(r.join("etc/fifo")).unwrap();
        std::os::unix::fs::symlink(r.join("etc/plain"), r.join("etc/fifo")).unwrap();
        let d = declaration(
            "converged",
            &[],
            serde_json::json!([
                {"id": "d", "type": "file", "path": "/etc/fifo", "content": "x"}
            ]),
        );
        let p = check(r, &d).unwrap_err().to_string();
        assert!(p.contains("/etc/fifo is a symbolic link"), "{p}");
    }
}
