//! The resident host (`mesh-host run`) in a lab node, as its init would run it: it puts every
//! opening and the guard back after the found firewall is reloaded with no command run, finishes
//! the apply under way on SIGTERM and exits 0, reconciles at once on SIGHUP and after a local
//! `mesh-host apply`, listens on no socket, and keeps the guard when the store cannot be written.

use super::*;
use std::io::Read;
use std::process::{Child, Stdio};
use std::time::Instant;

/// A resident host running in the node, its log in a file.
pub(super) struct Resident {
    child: Child,
    log: PathBuf,
}

impl Resident {
    pub(super) fn start(host: &Host, extra: &[&str]) -> Resident {
        let root = host.root();
        let log = host.dir.path().join("resident.log");
        let mut argv: Vec<&str> = host.wrap.iter().map(String::as_str).collect();
        argv.extend([MESH, "--root", root.to_str().unwrap(), "run"]);
        argv.extend_from_slice(extra);
        let mut cmd = host.node.command(&argv);
        cmd.env("RUST_LOG", "mesh_host=debug")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        let child = cmd.spawn().expect("mesh-host run starts");
        let r = Resident { child, log };
        r.wait_log("reconciled", 1, Duration::from_secs(30));
        r
    }

    pub(super) fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// The log so far, any terminal colour codes left out.
    pub(super) fn log(&self) -> String {
        let mut s = String::new();
        std::fs::File::open(&self.log)
            .unwrap()
            .read_to_string(&mut s)
            .unwrap();
        let mut out = String::with_capacity(s.len());
        let mut chars = s.chars();
        while let Some(c) = chars.next() {
            if c == '\u{1b}' {
                for d in chars.by_ref() {
                    if d.is_ascii_alphabetic() {
                        break;
                    }
                }
            } else {
                out.push(c);
            }
        }
        out
    }

    /// Waits until `needle` has appeared `count` times in the log.
    pub(super) fn wait_log(&self, needle: &str, count: usize, limit: Duration) {
        let started = Instant::now();
        while self.log().matches(needle).count() < count {
            assert!(
                started.elapsed() < limit,
                "{needle:?} did not appear {count} times in {limit:?}:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub(super) fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on the child this test started.
        assert_eq!(unsafe { libc::kill(self.pid(), sig) }, 0);
    }

    /// Waits for it to exit, within `limit`; returns its exit code.
    pub(super) fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            assert!(started.elapsed() < limit, "still running:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Resident {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `check` until it holds, within `limit`; returns how long it took.
fn within(limit: Duration, what: &str, mut check: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    while !check() {
        assert!(started.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
    started.elapsed()
}

fn guard_present(node: &Machine) -> bool {
    node.run(&["nft", "list", "chain", "inet", "mesh_host", "guard"])
        .is_ok_and(|o| o.success() && o.stdout.contains("mesh-host:guard/store"))
}

fn opening_present(host: &Host, id: &str) -> bool {
    let status = host.status();
    let states = presence(&status, id);
    !states.is_empty() && states.iter().all(|s| s.ends_with("=present"))
}

#[test]
fn after_the_found_firewall_reloads_from_its_file_every_opening_and_the_guard_are_back_unasked() {
    let lab = new_lab();
    let net = adoption(&lab);
    let node = &net.node;
    let _listeners: Vec<_> = [SSH, SERVED, OPENED, STORE]
        .iter()
        .map(|p| node.listen_tcp(*p).expect("listener"))
        .collect();
    let file = load_nft(node, lab.dir(), "nftables.conf", INET_INPUT_DROP);
    let host = Host::new(node);
    host.apply(&declaration(&[opening("web/api", OPENED, "incoming")]));
    let mut resident = Resident::start(&host, &[]);
    let public = node_public();
    expect(&net.outside, &public, OPENED, Probe::Reached, "opened");

    // Debian's reload: `nft -f /etc/nftables.conf`, which starts with `flush ruleset`.
    run_ok(node, &["nft", "-f", file.to_str().unwrap()]);
    let back = within(Duration::from_secs(3), "the opening back", || {
        opening_present(&host, "web/api")
    });
    assert!(guard_present(node), "the guard back too");
    expect(
        &net.outside,
        &public,
        OPENED,
        Probe::Reached,
        "opened again, no command run",
    );
    expect(
        &net.outside,
        &public,
        STORE,
        Probe::TimedOut,
        "the store refused again",
    );
    resident.wait_log("put back", 1, Duration::from_secs(3));
    eprintln!("opening back within {back:?} of the reload (including this test's polling)");

    // Another program flushing the whole ruleset: the guard is put back at once.
    run_ok(node, &["nft", "flush", "ruleset"]);
    within(
        Duration::from_secs(3),
        "the guard back after a flush",
        || guard_present(node),
    );
    expect(
        &net.outside,
        &public,
        STORE,
        Probe::TimedOut,
        "the store after the flush",
    );

    // The host listens on no socket: nothing of its pid in any listening socket.
    let listening = run_ok(node, &["ss", "-lnptuxw"]);
    let me = format!("pid={},", resident.pid());
    assert!(
        !listening.lines().any(|l| l.contains(&me)),
        "mesh-host run listens:\n{listening}"
    );
    resident.signal(libc::SIGTERM);
    assert_eq!(resident.wait_exit(Duration::from_secs(10)), Some(0));
}

/// A declaration whose one action takes two seconds to run, and the file it leaves.
fn slow_action(host: &Host) -> (Value, PathBuf) {
    let done = host.root().join("done");
    let decl = json!({
        "version": 1, "node": "lab-node", "mode": "adopted", "taken": [],
        "resources": [{
            "id": "slow/work", "type": "action",
            "run": ["sh", "-c", "sleep 2 && touch \"$MESH_HOST_ROOT/done\""],
            "verify": ["test", "-e", done.to_str().unwrap()]
        }]
    });
    (decl, done)
}

#[test]
fn sigterm_during_an_apply_finishes_it_then_exits_zero() {
    let lab = new_lab();
    let net = adoption(&lab);
    let host = Host::new(&net.node);
    let (decl, done) = slow_action(&host);
    host.apply(&decl);
    assert!(done.exists());
    // Drift: the start reconcile must run the action again, for two seconds.
    std::fs::remove_file(&done).unwrap();
    let root = host.root();
    let log = host.dir.path().join("resident.log");
    let mut child = host
        .node
        .command(&[MESH, "--root", root.to_str().unwrap(), "run"])
        .env("RUST_LOG", "mesh_host=info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    let sent = Instant::now();
    // SAFETY: kill(2) on the child this test started.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let status = child.wait().unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(status.code(), Some(0), "{text}");
    assert!(done.exists(), "the apply under way finished:\n{text}");
    assert!(
        sent.elapsed() > Duration::from_millis(800),
        "it waited for the action"
    );
    let reconciled = text.find("reconciled").expect("reconciled");
    let stopping = text.find("stopping: asked to").expect("stopping");
    assert!(reconciled < stopping, "{text}");
    // While it waited, it said what for.
    let waiting = text
        .find("stopping: waiting for the reconcile under way to end")
        .expect("the wait said");
    assert!(waiting < reconciled, "{text}");
}

#[test]
fn sighup_reconciles_at_once_and_a_local_apply_rouses_the_resident_host() {
    let lab = new_lab();
    let net = adoption(&lab);
    let host = Host::new(&net.node);
    let file = |content: &str| {
        json!({
            "version": 1, "node": "lab-node", "mode": "adopted", "taken": [],
            "resources": [{"id": "web/conf", "type": "file", "path": "/etc/web.conf", "content": content}]
        })
    };
    host.apply(&file("one\n"));
    let managed = host.root().join("etc/web.conf");
    let resident = Resident::start(&host, &["--period", "600"]);
    std::fs::remove_file(&managed).unwrap();
    resident.signal(libc::SIGHUP);
    within(Duration::from_secs(5), "the file back after SIGHUP", || {
        managed.exists()
    });
    resident.wait_log("trigger=\"rouse\"", 1, Duration::from_secs(5));
    // Two rouses at once are one reconcile.
    let before = resident.log().matches("reconciled").count();
    resident.signal(libc::SIGHUP);
    resident.signal(libc::SIGHUP);
    resident.wait_log("reconciled", before + 1, Duration::from_secs(5));
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(resident.log().matches("reconciled").count(), before + 1);
    // A person's apply of a new declaration: the resident host is told and reconciles it.
    host.apply(&file("two\n"));
    resident.wait_log("trigger=\"new declaration\"", 1, Duration::from_secs(5));
}

#[test]
fn a_store_that_cannot_be_written_still_leaves_the_guard_in_place() {
    let lab = new_lab();
    let net = adoption(&lab);
    let node = &net.node;
    let _store = node.listen_tcp(STORE).expect("the store's listener");
    let host = Host::new(node);
    let decl = declaration(&[]);
    host.apply(&decl);
    assert!(guard_present(node));
    // A full disk: the whole root on a tiny tmpfs, filled to the last byte. The root, not the
    // store's folder alone: under a root other than `/` a store on a mount of its own is refused
    // before anything (a mount inside the root is a way out of it), and this is a full disk.
    let root = host.root();
    let dir = root.join("var/lib/mesh-host");
    let saved = host.dir.path().join("root-copy");
    run_ok(
        node,
        &["cp", "-a", root.to_str().unwrap(), saved.to_str().unwrap()],
    );
    let _mount = Tmpfs::mount(&root, "1m");
    run_ok(
        node,
        &[
            "cp",
            "-a",
            &format!("{}/.", saved.display()),
            root.to_str().unwrap(),
        ],
    );
    let filler = root.join("filler");
    let _ = std::process::Command::new("dd")
        .args(["if=/dev/zero", "bs=4k", "count=1000"])
        .arg(format!("of={}", filler.display()))
        .output();
    run_ok(node, &["nft", "delete", "table", "inet", "mesh_host"]);
    assert!(!guard_present(node));
    let file = host.dir.path().join("d.json");
    let mut changed = decl.clone();
    changed["resources"] =
        json!([{"id": "web/conf", "type": "file", "path": "/etc/web.conf", "content": "x\n"}]);
    std::fs::write(&file, serde_json::to_vec(&changed).unwrap()).unwrap();
    let out = host.run(&["apply", file.to_str().unwrap()]);
    assert_ne!(out.status.code(), Some(0), "{}\n{}", out.stdout, out.stderr);
    assert!(
        guard_present(node),
        "the guard came first:\n{}\n{}",
        out.stdout,
        out.stderr
    );
    expect(
        &net.outside,
        &node_public(),
        STORE,
        Probe::TimedOut,
        "the store, disk full",
    );
    // A corrupt store likewise.
    drop(_mount);
    std::fs::write(dir.join("state.json"), b"{ not json").unwrap();
    run_ok(node, &["nft", "delete", "table", "inet", "mesh_host"]);
    let out = host.run(&["apply", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}\n{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("guard"), "{}", out.stderr);
    assert!(guard_present(node), "the guard came first:\n{}", out.stderr);
}

/// A tmpfs mounted over a folder for the length of a test.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Tmpfs {
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        Tmpfs(dir.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).output();
    }
}

fn filter_present(node: &Machine) -> bool {
    node.run(&["nft", "list", "chain", "inet", "mesh_host", "input"])
        .is_ok_and(|o| o.success() && o.stdout.contains("policy drop"))
}

/// On a converged node the derived filter is the firewall: another program flushing the ruleset
/// gets it back within milliseconds, with no command run, and the closed port stays closed.
#[test]
fn on_a_converged_node_the_derived_filter_is_back_after_a_flush_unasked() {
    let lab = new_lab();
    let net = adoption(&lab);
    let node = &net.node;
    let _listeners: Vec<_> = [OPENED, CLOSED, STORE]
        .iter()
        .map(|p| node.listen_tcp(*p).expect("listener"))
        .collect();
    let host = Host::new(node);
    let mut api = opening("api/port", OPENED, "incoming");
    api["module"] = json!("api");
    host.apply(&declaration(&[api]));
    let out = host.run(&["converge", "--json"]);
    assert!(out.success(), "the flip: {}\n{}", out.stdout, out.stderr);
    let mut resident = Resident::start(&host, &[]);
    let public = node_public();
    expect(
        &net.outside,
        &public,
        OPENED,
        Probe::Reached,
        "converged: opened",
    );
    expect(
        &net.outside,
        &public,
        CLOSED,
        Probe::TimedOut,
        "converged: closed",
    );

    run_ok(node, &["nft", "flush", "ruleset"]);
    let back = within(
        Duration::from_secs(3),
        "the filter back after a flush",
        || filter_present(node),
    );
    resident.wait_log(
        "the derived filter was gone; put back",
        1,
        Duration::from_secs(3),
    );
    expect(
        &net.outside,
        &public,
        CLOSED,
        Probe::TimedOut,
        "closed again, no command run",
    );
    expect(
        &net.outside,
        &public,
        STORE,
        Probe::TimedOut,
        "the store closed again",
    );
    expect(
        &net.outside,
        &public,
        OPENED,
        Probe::Reached,
        "the opening admitted again",
    );
    assert!(!guard_present(node), "a converged node has no guard");
    eprintln!("filter back within {back:?} of the flush (including this test's polling)");
    resident.signal(libc::SIGTERM);
    assert_eq!(resident.wait_exit(Duration::from_secs(10)), Some(0));
}

/// With the resident host running, as under its unit, `converge` and `adopt` run by a person
/// leave exactly their own firewall: the resident host hears their changes while the store says
/// something new, puts nothing of its stale memo back, and reconciles the new declaration.
#[test]
fn converge_and_adopt_with_the_resident_host_running_leave_the_right_firewall() {
    let lab = new_lab();
    let net = adoption(&lab);
    let node = &net.node;
    let _listeners: Vec<_> = [OPENED, STORE]
        .iter()
        .map(|p| node.listen_tcp(*p).expect("listener"))
        .collect();
    let host = Host::new(node);
    let conf = host.root().join("etc/nftables.conf");
    std::fs::create_dir_all(conf.parent().unwrap()).unwrap();
    std::fs::write(&conf, INET_INPUT_DROP).unwrap();
    run_ok(node, &["nft", "-f", conf.to_str().unwrap()]);
    let mut api = opening("api/port", OPENED, "incoming");
    api["module"] = json!("api");
    host.apply(&declaration(&[api]));
    let mut resident = Resident::start(&host, &[]);
    for round in 0..3 {
        let out = host.run(&["converge"]);
        assert!(
            out.success(),
            "round {round}: {}\n{}",
            out.stdout,
            out.stderr
        );
        resident.wait_log(
            "trigger=\"new declaration\"",
            2 * round + 1,
            Duration::from_secs(10),
        );
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            filter_present(node),
            "round {round}: no filter after converge:\n{}",
            resident.log()
        );
        assert!(
            !guard_present(node),
            "round {round}: the guard came back after converge:\n{}",
            resident.log()
        );
        let out = host.run(&["adopt"]);
        assert!(
            out.success(),
            "round {round}: {}\n{}",
            out.stdout,
            out.stderr
        );
        resident.wait_log(
            "trigger=\"new declaration\"",
            2 * round + 2,
            Duration::from_secs(10),
        );
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            !filter_present(node),
            "round {round}: the filter stayed after adopt:\n{}",
            resident.log()
        );
        assert!(guard_present(node), "round {round}: no guard after adopt");
        expect(
            &net.outside,
            &node_public(),
            OPENED,
            Probe::Reached,
            "adopted: the opening",
        );
    }
    resident.signal(libc::SIGTERM);
    assert_eq!(resident.wait_exit(Duration::from_secs(10)), Some(0));
}
