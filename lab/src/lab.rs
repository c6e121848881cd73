//! The lab itself: a set of named network namespaces with a unique prefix, the switches joining
//! them, and the teardown that removes all of it, on drop, at process exit, or after a crash.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::time::Duration;

use crate::docker;
use crate::error::{Error, Result};
use crate::exec::{self, lock, Registry};
use crate::machine::Machine;
use crate::netns;

/// Every lab's scratch directory lives below this one, named by the lab's prefix.
pub const LAB_ROOT: &str = "/tmp/mesh-lab";

/// The first word of every prefix, so [`Lab::sweep_stale`] can tell lab namespaces from others.
pub const PREFIX_STEM: &str = "mh";

/// Labs created in this process, numbered so two labs of one test binary never share a prefix.
static NEXT_LAB: AtomicU32 = AtomicU32::new(0);

/// `ip netns add` makes /run/netns a shared mount on first use; two concurrent first uses can stack
/// that mount twice, so namespace creation is serialised within the process.
static NETNS_ADD: Mutex<()> = Mutex::new(());

/// State shared by a lab and every handle made from it.
#[derive(Debug)]
pub(crate) struct Shared {
    pub prefix: String,
    pub dir: PathBuf,
    pub registry: Arc<Registry>,
    namespaces: Mutex<Vec<String>>,
    engines: Mutex<Vec<docker::EngineRecord>>,
    next_log: AtomicU32,
}

impl Shared {
    pub fn log_path(&self, machine: &str, program: &str) -> PathBuf {
        let n = self.next_log.fetch_add(1, Ordering::Relaxed);
        let program = program.rsplit('/').next().unwrap_or(program);
        self.dir.join(format!("{machine}-{n}-{program}.log"))
    }

    pub fn add_engine(&self, record: docker::EngineRecord) {
        lock(&self.engines).push(record);
    }

    pub fn remove_engine(&self, dir: &Path) {
        lock(&self.engines).retain(|e| e.dir != dir);
    }
}

/// A set of "machines" (network namespaces) for one test or one test binary.
///
/// Namespaces are named `mh-<pid>-<n>-<machine>`, so parallel tests and concurrent test binaries
/// never collide. Dropping the lab (also while a test panics) stops the Docker engines it started,
/// kills the processes it spawned and every process left inside its namespaces, deletes the
/// namespaces (and with them their veths and bridges) and removes its scratch directory. Nothing in
/// the host's own namespace is ever changed: veths are created directly inside lab namespaces.
///
/// A lab that is never dropped (kept by [`Lab::until_exit`], or parked in a static) is torn down
/// when the process exits. Handles ([`Machine`], [`Switch`], [`crate::Docker`]) stay valid only
/// while the lab lives.
#[derive(Debug)]
pub struct Lab {
    shared: Arc<Shared>,
}

impl Lab {
    /// Creates an empty lab after checking that it runs as root and that `ip` and `nsenter` exist.
    /// An error here must fail the test: a lab never skips silently.
    pub fn new() -> Result<Lab> {
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        if uid != 0 {
            return Err(Error::NotRoot { uid });
        }
        exec::require("ip", "iproute2")?;
        exec::require("nsenter", "util-linux")?;
        let prefix = format!(
            "{PREFIX_STEM}-{}-{}",
            std::process::id(),
            NEXT_LAB.fetch_add(1, Ordering::Relaxed)
        );
        let dir = Path::new(LAB_ROOT).join(&prefix);
        let www = dir.join("www");
        fs::create_dir_all(&www).map_err(|e| Error::io(&www, e))?;
        let index = www.join("index.html");
        fs::write(&index, "lab\n").map_err(|e| Error::io(&index, e))?;
        let shared = Arc::new(Shared {
            prefix,
            dir,
            registry: Arc::default(),
            namespaces: Mutex::default(),
            engines: Mutex::default(),
            next_log: AtomicU32::new(0),
        });
        // Every lab is also torn down at process exit, so one parked in a static is not leaked.
        static HOOK: Once = Once::new();
        HOOK.call_once(|| {
            // SAFETY: registering a plain extern "C" function with no captured state.
            unsafe { libc::atexit(teardown_at_exit) };
        });
        lock(&LIVE).push(shared.clone());
        Ok(Lab { shared })
    }

    /// The prefix of every namespace this lab makes, e.g. `mh-4242-0`.
    pub fn prefix(&self) -> &str {
        &self.shared.prefix
    }

    /// The lab's scratch directory (`/tmp/mesh-lab/<prefix>`), removed with the lab; a good home
    /// for a Docker engine's directory or files a test lays out.
    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// The full names of the namespaces this lab has made and not yet removed.
    pub fn namespaces(&self) -> Vec<String> {
        lock(&self.shared.namespaces).clone()
    }

    /// Makes a machine: a fresh network namespace `<prefix>-<name>` with `lo` up and reverse-path
    /// filtering off (the host's setting would otherwise leak in and decide spoofing tests).
    ///
    /// `name` is 1 to 15 characters of `a-z`, `0-9` and `-` (it also names the switch port).
    pub fn machine(&self, name: &str) -> Result<Machine> {
        validate_name("machine", name, 15)?;
        let netns = format!("{}-{name}", self.shared.prefix);
        {
            let _serial = lock(&NETNS_ADD);
            // Recorded first, so even a half-made namespace is removed by the teardown.
            lock(&self.shared.namespaces).push(netns.clone());
            exec::run_ok(std::process::Command::new("ip").args(["netns", "add", &netns]))?;
        }
        let machine = Machine::new(name.to_owned(), netns, self.shared.clone());
        machine.link_up("lo")?;
        for scope in ["all", "default"] {
            machine.set_sysctl(&format!("net/ipv4/conf/{scope}/rp_filter"), "0")?;
        }
        Ok(machine)
    }

    /// Joins two machines with a veth pair, `a_if` in `a` and `b_if` in `b`, both brought up. The
    /// pair is created inside `a` with its peer placed straight into `b`, never in the host.
    pub fn veth(&self, a: &Machine, a_if: &str, b: &Machine, b_if: &str) -> Result<()> {
        validate_name("interface", a_if, 15)?;
        validate_name("interface", b_if, 15)?;
        a.run_ok(&[
            "ip",
            "link",
            "add",
            a_if,
            "type",
            "veth",
            "peer",
            "name",
            b_if,
            "netns",
            b.netns(),
        ])?;
        a.link_up(a_if)?;
        b.link_up(b_if)?;
        Ok(())
    }

    /// Makes a switch: a machine named `name` holding a bridge `br0` that machines attach to.
    pub fn switch(&self, name: &str) -> Result<Switch> {
        let machine = self.machine(name)?;
        machine.run_ok(&["ip", "link", "add", "br0", "type", "bridge"])?;
        machine.link_up("br0")?;
        Ok(Switch { machine })
    }

    /// Keeps the lab for the rest of the process (e.g. a Docker engine shared by every test of a
    /// binary through a `OnceLock`), tearing it down when the process exits normally (including a
    /// failed test run); a killed or aborted process leaves it to [`Lab::sweep_stale`].
    pub fn until_exit(self) -> &'static Lab {
        // Never dropped; the exit hook every lab is registered with tears it down.
        Box::leak(Box::new(self))
    }

    /// Removes what crashed lab runs left: every namespace and scratch directory whose name starts
    /// with `prefix` and follows the lab's `mh-<pid>-<n>` pattern, provided process `<pid>` no
    /// longer runs (so calling it while other test binaries use their labs is safe). Docker engines
    /// under those directories are stopped, their containers and processes killed, their mounts
    /// detached. Names of other shapes are left alone and reported as skipped.
    pub fn sweep_stale(prefix: &str) -> Result<SweepReport> {
        let mut report = SweepReport::default();
        for name in netns::list_netns() {
            if !name.starts_with(prefix) {
                continue;
            }
            match owner_pid(&name) {
                Some(pid) if !netns::alive(pid) => {
                    report.killed.extend(netns::kill_and_wait(
                        &netns::pids_in_netns(&netns::netns_path(&name)),
                        Duration::from_secs(5),
                    ));
                    delete_netns(&name)?;
                    report.removed_namespaces.push(name);
                }
                _ => report.skipped.push(name),
            }
        }
        if let Ok(entries) = fs::read_dir(LAB_ROOT) {
            for entry in entries.filter_map(|e| e.ok()) {
                let name = entry.file_name().to_string_lossy().into_owned();
                if !name.starts_with(prefix) {
                    continue;
                }
                match owner_pid(&name) {
                    Some(pid) if !netns::alive(pid) => {
                        let dir = entry.path();
                        let (killed, problems) = docker::sweep_dir(&dir);
                        report.killed.extend(killed);
                        if let Some(e) = problems.into_iter().next() {
                            return Err(e);
                        }
                        fs::remove_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
                        report.removed_dirs.push(dir);
                    }
                    _ => report.skipped.push(name),
                }
            }
        }
        Ok(report)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for problem in teardown(&self.shared) {
            eprintln!("lab {}: teardown: {problem}", self.shared.prefix);
        }
        lock(&LIVE).retain(|live| !Arc::ptr_eq(live, &self.shared));
    }
}

/// What [`Lab::sweep_stale`] removed and what it left because its owner still runs.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SweepReport {
    pub removed_namespaces: Vec<String>,
    pub removed_dirs: Vec<PathBuf>,
    pub killed: Vec<i32>,
    pub skipped: Vec<String>,
}

/// A machine holding a bridge `br0`; every attached machine gets a veth whose other end is a port
/// of that bridge named after the machine.
#[derive(Debug, Clone)]
pub struct Switch {
    machine: Machine,
}

impl Switch {
    /// The namespace holding the bridge.
    pub fn machine(&self) -> &Machine {
        &self.machine
    }

    /// Plugs `machine` into the bridge through its interface `ifname` (brought up, no address).
    pub fn attach(&self, machine: &Machine, ifname: &str) -> Result<()> {
        validate_name("interface", ifname, 15)?;
        let port = machine.name();
        self.machine.run_ok(&[
            "ip",
            "link",
            "add",
            port,
            "type",
            "veth",
            "peer",
            "name",
            ifname,
            "netns",
            machine.netns(),
        ])?;
        self.machine
            .run_ok(&["ip", "link", "set", port, "master", "br0"])?;
        self.machine.link_up(port)?;
        machine.link_up(ifname)?;
        Ok(())
    }
}

/// Labs not yet dropped, torn down at process exit: those kept by [`Lab::until_exit`] and any
/// parked in a static, which Rust never drops.
static LIVE: Mutex<Vec<Arc<Shared>>> = Mutex::new(Vec::new());

extern "C" fn teardown_at_exit() {
    let labs = std::mem::take(&mut *lock(&LIVE));
    for shared in labs {
        for problem in teardown(&shared) {
            eprintln!("lab {}: teardown at exit: {problem}", shared.prefix);
        }
    }
}

/// Removes everything a lab made; returns the problems met instead of stopping at the first, so
/// one stuck piece never leaves the rest behind.
fn teardown(shared: &Shared) -> Vec<Error> {
    let mut problems = Vec::new();
    let engines = std::mem::take(&mut *lock(&shared.engines));
    for engine in engines {
        problems.extend(docker::stop_engine(&engine));
    }
    shared.registry.kill_all();
    let namespaces = std::mem::take(&mut *lock(&shared.namespaces));
    // Each namespace is held open before its name goes, so processes that entered it just as it
    // was deleted can still be found afterwards by its identity, and that identity cannot pass
    // meanwhile to a namespace someone else makes (the hold keeps the namespace, and so its
    // inode number, alive until they are killed).
    let held: Vec<netns::Held> = namespaces
        .iter()
        .filter_map(|name| netns::hold(&netns::netns_path(name)))
        .collect();
    for name in namespaces.iter().rev() {
        let path = netns::netns_path(name);
        netns::kill_and_wait(&netns::pids_in_netns(&path), Duration::from_secs(5));
        if path.exists() {
            if let Err(e) = delete_netns(name) {
                problems.push(e);
            }
        }
    }
    for ns in &held {
        netns::kill_and_wait(&netns::pids_in(ns.identity), Duration::from_secs(5));
    }
    drop(held);
    problems.extend(netns::unmount_under(&shared.dir));
    if shared.dir.exists() {
        if let Err(e) = fs::remove_dir_all(&shared.dir) {
            problems.push(Error::io(&shared.dir, e));
        }
    }
    problems
}

fn delete_netns(name: &str) -> Result<()> {
    exec::run_ok(std::process::Command::new("ip").args(["netns", "delete", name]))?;
    Ok(())
}

/// The pid in a name of the form `mh-<pid>-<n>[-rest]`.
fn owner_pid(name: &str) -> Option<i32> {
    let mut parts = name.split('-');
    if parts.next()? != PREFIX_STEM {
        return None;
    }
    let pid = parts.next()?.parse().ok()?;
    parts.next()?.parse::<u32>().ok()?;
    Some(pid)
}

pub(crate) fn validate_name(what: &'static str, name: &str, max: usize) -> Result<()> {
    let invalid = |reason| {
        Err(Error::InvalidName {
            what,
            name: name.to_owned(),
            reason,
        })
    };
    if name.is_empty() || name.len() > max {
        return invalid("must be 1 to 15 characters");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
    {
        return invalid("only a-z, 0-9, '-' and '_' are allowed");
    }
    if name.starts_with('-') {
        return invalid("must not start with '-'");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_pid_reads_only_the_lab_pattern() {
        assert_eq!(owner_pid("mh-4242-0-node"), Some(4242));
        assert_eq!(owner_pid("mh-4242-7"), Some(4242));
        assert_eq!(owner_pid("mh-node"), None);
        assert_eq!(owner_pid("other-1-2-node"), None);
        assert_eq!(owner_pid("mh-12-x-node"), None);
    }

    #[test]
    fn names_are_checked() {
        assert!(validate_name("machine", "node", 15).is_ok());
        assert!(validate_name("interface", "mesh0", 15).is_ok());
        assert!(validate_name("interface", "much-too-long-name", 15).is_err());
        assert!(validate_name("interface", "eth0;reboot", 15).is_err());
        assert!(validate_name("interface", "-x", 15).is_err());
        assert!(validate_name("interface", "", 15).is_err());
    }
}
