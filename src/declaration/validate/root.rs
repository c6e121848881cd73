//! Validation that needs to know the root a declaration is applied under: the whole machine
//! path within the kernel's PATH_MAX, and the running binary, wherever it is, never declared.

use super::{Problem, Problems, PATH_MAX};
use crate::declaration::{Declaration, Resource};
use std::path::Path;

/// Every problem of `decl`'s paths once they are put under `root` (the `--root` an apply is
/// given, `/` in production), each at its JSON path, like the rest of validation: a machine
/// path longer than the kernel takes, and the binary running now (`current_exe`) as the
/// machine reaches it under the root. Reads the file system only to resolve `root` itself and
/// the running binary.
pub fn under_root(decl: &Declaration, root: &Path) -> Result<(), Problems> {
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let exe = std::env::current_exe()
        .ok()
        .and_then(|e| e.canonicalize().ok());
    let mut problems = Vec::new();
    for (i, r) in decl.resources.iter().enumerate() {
        let declared = match r {
            Resource::File(f) => &f.path,
            Resource::Directory(d) => &d.path,
            _ => continue,
        };
        let machine = root.join(declared.trim_start_matches('/'));
        let at = format!("resources[{i}].path");
        let len = machine.as_os_str().len();
        if len >= PATH_MAX {
            problems.push(Problem {
                path: at.clone(),
                message: format!(
                    "is {len} bytes long under the root {}; a machine path is at most {} bytes \
                     (the kernel's PATH_MAX of {PATH_MAX} with its terminating NUL)",
                    root.display(),
                    PATH_MAX - 1
                ),
            });
        }
        if exe.as_deref() == Some(machine.as_path()) {
            problems.push(Problem {
                path: at,
                message: format!(
                    "{declared} is this host's own running binary ({} under the root {}); no \
                     declaration may name it",
                    machine.display(),
                    root.display()
                ),
            });
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(Problems(problems))
    }
}
