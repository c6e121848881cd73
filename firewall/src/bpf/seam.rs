//! The loader's system calls that place the guard's links, behind one trait (as aya's `sys`
//! module puts its `bpf(2)` calls behind one entry a test can stand in for): the kernel's, and a
//! recording fake that keeps pins, links and the hooks' priorities as the kernel does, so that
//! reclaiming a pinned link, attaching a new one before the old is unpinned and the priority
//! swap are unit-tested without a kernel.

use super::sys::{self, LinkInfo};
use crate::error::{Errno, Error, Result};
use std::os::fd::OwnedFd;
use std::path::Path;

/// What placing the links asks of the kernel: pins, a link's facts, attaching and detaching.
pub trait LinkCalls {
    /// The object pinned at `path`; `None` when nothing is pinned there.
    fn obj_get(&self, path: &Path) -> Result<Option<OwnedFd>>;
    /// Pins `fd` at `path` (refused with EEXIST when something is pinned there).
    fn obj_pin(&self, fd: &OwnedFd, path: &Path) -> Result<()>;
    /// Removes the pin at `path`; nothing pinned there is no error.
    fn unpin(&self, path: &Path) -> Result<()>;
    /// What the kernel says of a link.
    fn link_info(&self, fd: &OwnedFd, what: &str) -> Result<LinkInfo>;
    /// Attaches `prog` at a netfilter hook and priority (EBUSY when another BPF hook holds it).
    fn link_create(
        &self,
        prog: &OwnedFd,
        pf: u32,
        hook: u32,
        priority: i32,
        flags: u32,
    ) -> Result<OwnedFd>;
    /// Detaches a link from its hook.
    fn link_detach(&self, fd: &OwnedFd, what: &str) -> Result<()>;
}

/// The kernel's calls: `bpf(2)` through [`sys`], a pin removed as a file of the bpffs.
pub struct Kernel;

impl LinkCalls for Kernel {
    fn obj_get(&self, path: &Path) -> Result<Option<OwnedFd>> {
        sys::obj_get(path)
    }

    fn obj_pin(&self, fd: &OwnedFd, path: &Path) -> Result<()> {
        sys::obj_pin(fd, path)
    }

    fn unpin(&self, path: &Path) -> Result<()> {
        unpin(path)
    }

    fn link_info(&self, fd: &OwnedFd, what: &str) -> Result<LinkInfo> {
        sys::link_info(fd, what)
    }

    fn link_create(
        &self,
        prog: &OwnedFd,
        pf: u32,
        hook: u32,
        priority: i32,
        flags: u32,
    ) -> Result<OwnedFd> {
        sys::link_create_netfilter(prog, pf, hook, priority, flags)
    }

    fn link_detach(&self, fd: &OwnedFd, what: &str) -> Result<()> {
        sys::link_detach(fd, what)
    }
}

/// Removes the pin at `path` (a file of the bpffs); nothing there is no error.
pub fn unpin(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::Bpf {
            op: "unpin",
            what: path.display().to_string(),
            errno: Errno(e.raw_os_error().unwrap_or(0)),
            log: None,
        }),
    }
}

/// A fake kernel for unit tests: objects are numbered, each handle a descriptor of `/dev/null`
/// standing for one; pins are paths to objects; an attached link holds its hook's priority, so
/// a second link there is refused with EBUSY as the kernel refuses it. Every call that changes
/// something is recorded in words, in order.
#[cfg(test)]
pub mod fake {
    use super::*;
    use std::cell::{Cell, RefCell};
    use std::collections::{BTreeMap, HashMap};
    use std::os::fd::{AsRawFd, RawFd};
    use std::path::PathBuf;

    #[derive(Default)]
    pub struct Recording {
        /// What was done: `create link N pf P hook H priority R`, `pin link N at NAME`,
        /// `unpin NAME`, `detach link N`.
        pub calls: RefCell<Vec<String>>,
        /// Each handle's object.
        handles: RefCell<HashMap<RawFd, u32>>,
        /// The links, by id.
        pub links: RefCell<BTreeMap<u32, LinkInfo>>,
        /// Which links are attached (holding their hook's priority).
        pub attached: RefCell<Vec<u32>>,
        /// The pins: a path's object.
        pub pins: RefCell<BTreeMap<PathBuf, u32>>,
        /// Hooks and priorities another program holds: (pf, hook, priority).
        pub foreign: RefCell<Vec<(u32, u32, i32)>>,
        next: Cell<u32>,
    }

    impl Recording {
        /// A handle on object `id`.
        pub fn handle(&self, id: u32) -> OwnedFd {
            let fd = OwnedFd::from(std::fs::File::open("/dev/null").expect("/dev/null opens"));
            self.handles.borrow_mut().insert(fd.as_raw_fd(), id);
            fd
        }

        fn id_of(&self, fd: &OwnedFd) -> u32 {
            self.handles.borrow()[&fd.as_raw_fd()]
        }

        fn new_id(&self) -> u32 {
            self.next.set(self.next.get().max(100) + 1);
            self.next.get()
        }

        /// A link of program `prog` attached at `pf`/`hook`/`priority` and pinned at `path`
        /// (when given): what an earlier host left.
        pub fn left(
            &self,
            prog: u32,
            pf: u32,
            hook: u32,
            priority: i32,
            path: Option<&Path>,
        ) -> u32 {
            let id = self.new_id();
            let mut info = LinkInfo::default();
            info.link_type = sys::LINK_TYPE_NETFILTER;
            info.id = id;
            info.prog_id = prog;
            info.pf = pf;
            info.hooknum = hook;
            info.priority = priority;
            info.flags = sys::F_NETFILTER_IP_DEFRAG;
            self.links.borrow_mut().insert(id, info);
            self.attached.borrow_mut().push(id);
            if let Some(p) = path {
                self.pins.borrow_mut().insert(p.to_path_buf(), id);
            }
            id
        }

        fn record(&self, what: String) {
            self.calls.borrow_mut().push(what);
        }

        fn name(path: &Path) -> String {
            path.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        }

        fn busy(&self, pf: u32, hook: u32, priority: i32) -> bool {
            let links = self.links.borrow();
            self.foreign.borrow().contains(&(pf, hook, priority))
                || self.attached.borrow().iter().any(|id| {
                    let l = &links[id];
                    (l.pf, l.hooknum, l.priority) == (pf, hook, priority)
                })
        }
    }

    fn refused(op: &'static str, what: String, errno: nix::errno::Errno) -> Error {
        Error::Bpf {
            op,
            what,
            errno: Errno(errno as i32),
            log: None,
        }
    }

    impl LinkCalls for Recording {
        fn obj_get(&self, path: &Path) -> Result<Option<OwnedFd>> {
            let id = self.pins.borrow().get(path).copied();
            Ok(id.map(|id| self.handle(id)))
        }

        fn obj_pin(&self, fd: &OwnedFd, path: &Path) -> Result<()> {
            let id = self.id_of(fd);
            if self.pins.borrow().contains_key(path) {
                return Err(refused(
                    "pin",
                    path.display().to_string(),
                    nix::errno::Errno::EEXIST,
                ));
            }
            self.pins.borrow_mut().insert(path.to_path_buf(), id);
            self.record(format!("pin link {id} at {}", Self::name(path)));
            Ok(())
        }

        fn unpin(&self, path: &Path) -> Result<()> {
            if self.pins.borrow_mut().remove(path).is_some() {
                self.record(format!("unpin {}", Self::name(path)));
            }
            Ok(())
        }

        fn link_info(&self, fd: &OwnedFd, what: &str) -> Result<LinkInfo> {
            let id = self.id_of(fd);
            self.links
                .borrow()
                .get(&id)
                .copied()
                .ok_or_else(|| refused("info", what.to_string(), nix::errno::Errno::EINVAL))
        }

        fn link_create(
            &self,
            prog: &OwnedFd,
            pf: u32,
            hook: u32,
            priority: i32,
            flags: u32,
        ) -> Result<OwnedFd> {
            if self.busy(pf, hook, priority) {
                return Err(refused(
                    "link create",
                    format!("netfilter link pf {pf} hook {hook} priority {priority}"),
                    nix::errno::Errno::EBUSY,
                ));
            }
            let prog = self.id_of(prog);
            let id = self.left(prog, pf, hook, priority, None);
            self.links
                .borrow_mut()
                .get_mut(&id)
                .expect("just made")
                .flags = flags;
            self.record(format!(
                "create link {id} pf {pf} hook {hook} priority {priority}"
            ));
            Ok(self.handle(id))
        }

        fn link_detach(&self, fd: &OwnedFd, _what: &str) -> Result<()> {
            let id = self.id_of(fd);
            self.attached.borrow_mut().retain(|l| *l != id);
            self.record(format!("detach link {id}"));
            Ok(())
        }
    }
}
