//! Test helpers: a temporary node root and a wrapper that runs the built binary against it.

use serde_json::Value;
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A declaration for node `workstation` with the foundation's default ports and the private
/// network `mesh0` on 10.77.0.0/24, in `mode`, with the modules `taken` and these resources.
pub fn workstation(mode: &str, taken: &[&str], resources: Value) -> Value {
    serde_json::json!({
        "version": 1, "node": "workstation", "mode": mode, "taken": taken,
        "settings": {
            "ports": {"store": 5432, "bus": 5672, "broker_management": 15672, "registry": 5000, "hub": 51820},
            "private_network": {"interface": "mesh0", "range": "10.77.0.0/24"}
        },
        "resources": resources
    })
}

/// What one run of the binary left.
#[derive(Debug)]
pub struct Run {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// The one document a command printed with `--json`, checked against the published schema
/// (`docs/json/schema.json`, through `mesh_host::json_contract::check`): a document that breaks
/// the contract fails the test that read it, naming every problem.
pub fn contract(stdout: &str) -> Value {
    let v: Value = serde_json::from_str(stdout)
        .unwrap_or_else(|e| panic!("not one JSON document ({e}):\n{stdout}"));
    if let Err(problems) = mesh_host::json_contract::check(&v) {
        panic!("the document breaks the JSON contract: {problems:#?}\n{v:#}");
    }
    v
}

impl Run {
    /// The JSON the command printed, checked against the schema ([`contract`]).
    pub fn json(&self) -> Value {
        if let Err(e) = serde_json::from_str::<Value>(&self.stdout) {
            panic!("not JSON ({e}):\n{}\n{}", self.stdout, self.stderr);
        }
        contract(&self.stdout)
    }

    /// The outcome the report gives a resource.
    pub fn outcome(&self, id: &str) -> String {
        let report = self.json();
        let entry = report["entries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["id"] == id)
            .unwrap_or_else(|| panic!("no entry for {id} in {report:#}"));
        entry["outcome"].as_str().unwrap().to_string()
    }
}

/// A node: a temporary directory used as `--root`.
pub struct Node {
    pub dir: tempfile::TempDir,
    /// Whether each run's namespace carries the private network the tests declare (`mesh0` with
    /// 10.77.0.1/24), as a node of the mesh does; without it an adopted apply whose settings
    /// declare it says the private network failed, and exits 5.
    pub private_network: bool,
}

/// The private network's interface and address a node made by [`Node::with_private_network`]
/// carries.
pub const PRIVATE_IF: &str = "mesh0";

/// The variable with which a harness asks mesh-host for the machine's own service and package
/// managers and container runtime under a `--root` other than `/` (`system::HOST_TOOLS_VAR`).
pub const HOST_TOOLS: &str = "MESH_HOST_HOST_TOOLS";
pub const PRIVATE_ADDR: &str = "10.77.0.1/24";

impl Node {
    pub fn new() -> Node {
        Node {
            dir: tempfile::tempdir().expect("temporary root"),
            private_network: false,
        }
    }

    /// A node whose runs see the declared private network's interface up with its address.
    pub fn with_private_network() -> Node {
        Node {
            private_network: true,
            ..Node::new()
        }
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// The machine path under the root.
    pub fn path(&self, p: &str) -> PathBuf {
        self.root().join(p.trim_start_matches('/'))
    }

    pub fn write(&self, p: &str, content: &str) {
        let path = self.path(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }

    pub fn read(&self, p: &str) -> Option<String> {
        std::fs::read_to_string(self.path(p)).ok()
    }

    /// Runs `mesh-host --root ROOT ARGS…` with extra environment.
    pub fn run_env(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        // Each run gets a fresh network namespace of its own: an adopted node's apply loads the
        // guard into nf_tables, and a test never touches the machine's own firewall.
        let mut cmd = Command::new("unshare");
        cmd.args(["--net", "--"]);
        if self.private_network {
            // One end of a veth pair stands in for the mesh's WireGuard interface (this kernel
            // has no dummy links): the guard and the check of the private network read only its
            // name and address.
            cmd.args([
                "sh",
                "-ec",
                &format!(
                    "ip link add {PRIVATE_IF} type veth peer name {PRIVATE_IF}-peer; ip addr add \
                     {PRIVATE_ADDR} dev {PRIVATE_IF}; ip link set {PRIVATE_IF}-peer up; ip link \
                     set {PRIVATE_IF} up; exec \"$@\""
                ),
                "sh",
            ]);
        }
        cmd.arg(env!("CARGO_BIN_EXE_mesh-host"))
            .arg("--root")
            .arg(self.root())
            .args(args)
            .env_remove("MESH_HOST_FAILPOINT")
            // The tests' stubs (or this throw-away machine's own apt) stand in for the service
            // and package managers, which mesh-host refuses under a root other than `/` unless
            // asked for (tests/under_root.rs proves the refusal).
            .env(HOST_TOOLS, "1");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().expect("running mesh-host");
        Run {
            code: out.status.code(),
            signal: out.status.signal(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    pub fn run(&self, args: &[&str]) -> Run {
        self.run_env(args, &[])
    }

    /// Applies a declaration with `--json` and extra arguments.
    pub fn apply_env(&self, decl: &Value, args: &[&str], env: &[(&str, &str)]) -> Run {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), serde_json::to_vec(decl).unwrap()).unwrap();
        let mut all = vec!["apply", file.path().to_str().unwrap(), "--json"];
        all.extend_from_slice(args);
        self.run_env(&all, env)
    }

    pub fn apply(&self, decl: &Value) -> Run {
        let r = self.apply_env(decl, &[], &[]);
        assert_eq!(
            r.code,
            Some(0),
            "apply failed (signal {:?}):\n{}\n{}",
            r.signal,
            r.stdout,
            r.stderr
        );
        r
    }

    /// The store as the host reads it: the snapshot with its journal replayed (after a crash the
    /// last records are in the journal, not yet in `state.json`).
    pub fn state(&self) -> Value {
        let state = mesh_host::store::peek(self.root())
            .expect("store reads")
            .expect("store exists");
        serde_json::to_value(state).unwrap()
    }

    /// Everything under the root: each path with its kind, mode and content, the store's
    /// timestamps blanked, so two roots can be compared for "the same machine and store".
    pub fn snapshot(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        walk(self.root(), self.root(), &mut out);
        out
    }
}

/// A stored state without its records' stamps: a file's inode and times are this root's own
/// (and a stamp is kept only once its change time has settled), so two roots that hold the same
/// machine and store differ in them, as in the briefing's time.
pub fn without_stamps(state: &mut Value) {
    for list in ["owned", "held"] {
        if let Some(records) = state.get_mut(list).and_then(Value::as_array_mut) {
            for r in records {
                if let Some(r) = r.as_object_mut() {
                    r.remove("stamp");
                }
            }
        }
    }
    if let Some(r) = state
        .get_mut("pending")
        .and_then(|p| p.get_mut("record"))
        .and_then(Value::as_object_mut)
    {
        r.remove("stamp");
    }
}

fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        let rel = path.strip_prefix(root).unwrap().display().to_string();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        let mode = meta.permissions().mode() & 0o7777;
        if meta.is_dir() {
            out.insert(rel, format!("dir {mode:o}"));
            walk(root, &path, out);
        } else if rel.ends_with("state.json") {
            let mut v: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
            if let Some(b) = v.get_mut("briefing") {
                b["at"] = Value::Null;
            }
            // The checksum covers the briefing's time too.
            if let Some(c) = v.get_mut("checksum") {
                *c = Value::Null;
            }
            without_stamps(&mut v);
            out.insert(rel, format!("file {mode:o} {v:#}"));
        } else {
            out.insert(
                rel,
                format!(
                    "file {mode:o} {}",
                    String::from_utf8_lossy(&std::fs::read(&path).unwrap())
                ),
            );
        }
    }
}

/// The peak resident memory of a child run of the binary, in KiB: the `VmHWM` of its own address
/// space, read from /proc every 5 ms until it exits. (`wait4`'s `ru_maxrss` would not do: it
/// keeps the high-water mark of the address space the child had before its exec, a copy of this
/// test process, which is large while other tests run beside it.) VmHWM only grows, so a reading
/// misses at most what the host grew in its last 5 ms.
pub fn measured(node: &Node, args: &[&str]) -> (i32, String, i64) {
    use std::io::Read;
    // `unshare` execs the binary in the same process, so the pid read is the host's.
    let mut child = std::process::Command::new("unshare")
        .args(["--net", "--"])
        .arg(env!("CARGO_BIN_EXE_mesh-host"))
        .arg("--root")
        .arg(node.root())
        .args(args)
        .env_remove("MESH_HOST_FAILPOINT")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let status_file = format!("/proc/{}/status", child.id());
    let exe = std::fs::canonicalize(env!("CARGO_BIN_EXE_mesh-host")).unwrap();
    let proc_exe = format!("/proc/{}/exe", child.id());
    let sampler = std::thread::spawn(move || {
        let mut peak = 0i64;
        loop {
            // Only once `unshare` has become the host: before its exec the figures are unshare's.
            let host = std::fs::read_link(&proc_exe).is_ok_and(|e| e == exe);
            let status = std::fs::read_to_string(&status_file).unwrap_or_default();
            let hwm = status
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<i64>().ok());
            match hwm {
                Some(kib) if host => peak = peak.max(kib),
                Some(_) => {}
                // Exited: a zombie has no address space (and is not reaped before this returns).
                None => return peak,
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    });
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let peak = sampler.join().unwrap();
    let status = child.wait().unwrap();
    (status.code().expect("ended by a signal"), out, peak)
}
