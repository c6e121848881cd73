//! Test-only helpers: every kernel test moves its own thread into a fresh network namespace first,
//! and runs `nft` (the oracle) from that thread so it sees the same namespace.
#![allow(dead_code)]

pub mod raw;

use firewall::netlink::{BaseChain, Batch, Family, Hook, Position, RuleBody};
use std::io::Write;
use std::process::{Command, Stdio};

/// Adds a guard-shaped chain to table `inet meshguard` (which the batch or the kernel already
/// has): prerouting at -150, one refusal of the store's port from anywhere but loopback.
pub fn add_guard_chain(b: &mut Batch) {
    b.add_chain(
        Family::Inet,
        "meshguard",
        "pre",
        Some(&BaseChain::filter(Hook::Prerouting, -150)),
    )
    .unwrap();
    b.add_rule(
        Family::Inet,
        "meshguard",
        "pre",
        &RuleBody::new()
            .iifname_ne("lo")
            .tcp_dport(5432)
            .drop()
            .comment("mesh: guard store"),
        Position::Append,
    )
    .unwrap();
}

/// Moves the calling test thread into a new, empty network namespace. Panics (never skips) when
/// that is impossible, so no test ever touches the machine's own firewall.
pub fn in_fresh_netns() {
    // SAFETY: gettid and getpid have no preconditions.
    let (tid, pid) = unsafe { (libc::gettid(), libc::getpid()) };
    assert_ne!(
        tid, pid,
        "kernel tests must run on a libtest worker thread, not the main thread, \
         so the namespace change stays with this one test"
    );
    let before = std::fs::read_link("/proc/thread-self/ns/net")
        .expect("cannot read /proc/thread-self/ns/net");
    // SAFETY: unshare(CLONE_NEWNET) only changes this thread's network namespace.
    let rc = unsafe { libc::unshare(libc::CLONE_NEWNET) };
    if rc != 0 {
        panic!(
            "unshare(CLONE_NEWNET) failed: {}; these tests need root and must never run in the \
             machine's own network namespace",
            std::io::Error::last_os_error()
        );
    }
    let after = std::fs::read_link("/proc/thread-self/ns/net")
        .expect("cannot read /proc/thread-self/ns/net");
    let init = std::fs::read_link("/proc/1/ns/net").ok();
    assert_ne!(before, after, "the thread did not change network namespace");
    assert_ne!(
        Some(after),
        init,
        "the thread is still in the init namespace"
    );
}

/// Runs nft with arguments in this thread's namespace and returns stdout; panics on failure.
pub fn nft(args: &[&str]) -> String {
    let out = Command::new("nft")
        .args(args)
        .output()
        .expect("nft must be installed for the oracle tests (apt-get install nftables)");
    assert!(
        out.status.success(),
        "nft {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs nft with arguments and returns (success, stdout, stderr) without judging.
pub fn nft_try(args: &[&str]) -> (bool, String, String) {
    let out = Command::new("nft")
        .args(args)
        .output()
        .expect("nft must be installed for the oracle tests");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Loads a ruleset with `nft -f -`.
pub fn nft_load(script: &str) {
    let mut child = Command::new("nft")
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("nft must be installed for the oracle tests");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "nft -f failed: {}\n{script}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `program ARGS` in this thread's namespace; panics with its stderr if it fails.
pub fn run_ok(program: &str, args: &[&str]) {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `ip ARGS` in this thread's namespace ([`run_ok`]).
pub fn ip(args: &[&str]) {
    run_ok("ip", args);
}

/// Runs a shell script (e.g. iptables calls) in this thread's namespace.
pub fn sh(script_path: &str) {
    let out = Command::new("sh")
        .arg(script_path)
        .output()
        .expect("sh must exist");
    assert!(
        out.status.success(),
        "sh {script_path} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// How many rules nft sees, counted in its JSON output (one `"rule":` object per rule).
pub fn nft_rule_count() -> usize {
    nft(&["-j", "list", "ruleset"]).matches("\"rule\":").count()
}

/// Lines of the kernel log where this thread's messages had an attribute of invalid length
/// (the kernel names the sending task's comm, which libtest sets from the test's name), or None
/// if the log is unreadable.
pub fn dmesg_invalid_length_lines() -> Option<Vec<String>> {
    let comm = std::fs::read_to_string("/proc/thread-self/comm").ok()?;
    let comm = format!("'{}'", comm.trim_end());
    let out = Command::new("dmesg").output().ok()?;
    if !out.status.success() {
        return None;
    }
    Some(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.contains("invalid length") && l.contains(&comm))
            .map(str::to_string)
            .collect(),
    )
}
