//! Batches conditional on the ruleset generation: a batch computed from a listing that went stale
//! is refused whole with ERESTART, and the engine computes its convergence again rather than
//! delete, by a handle a reload gave to someone else's rule, a rule that is not its own.

mod common;

use common::{in_fresh_netns, nft, nft_load};
use firewall::netlink::*;
use firewall::{Error, Firewall, Scope};
use std::cell::Cell;

const OPERATOR: &str = "table inet filter {\n\
    chain input {\n\
        type filter hook input priority 0; policy drop;\n\
        tcp dport 8080 accept comment \"operator\"\n\
    }\n\
}\n";

const MARKED: &str = "table inet filter {\n\
    chain input {\n\
        type filter hook input priority 0; policy drop;\n\
        tcp dport 9000 accept comment \"mesh-host:old/api#0011aabb\"\n\
    }\n\
}\n";

/// The handle of the only rule of `inet filter input`.
fn only_handle(s: &mut NfSocket) -> (u32, u64) {
    let rs = s.ruleset(None).unwrap();
    let rules: Vec<_> = rs.rules_of(Family::Inet, "filter", "input").collect();
    assert_eq!(rules.len(), 1, "{rules:?}");
    (rs.generation, rules[0].handle)
}

#[test]
fn a_batch_from_a_stale_generation_is_refused_with_erestart_and_applies_nothing() {
    in_fresh_netns();
    nft_load(MARKED);
    let mut s = NfSocket::open().unwrap();
    let (stale, handle) = only_handle(&mut s);
    // A reload: handles restart, and the operator's rule now has the handle the marked one had.
    nft(&["flush", "ruleset"]);
    nft_load(OPERATOR);
    let (now, operators) = only_handle(&mut s);
    assert_eq!(
        operators, handle,
        "the reload gave the handle to the operator's rule"
    );
    assert_ne!(now, stale);

    let mut b = Batch::new();
    b.del_rule(Family::Inet, "filter", "input", handle).unwrap();
    b.add_rule(
        Family::Inet,
        "filter",
        "input",
        &RuleBody::new().tcp_dport(1).accept(),
        Position::Append,
    )
    .unwrap();
    b.set_generation(stale);
    match s.send(&b) {
        Err(Error::Refused { errno, .. }) => assert_eq!(errno.0, libc::ERESTART, "{errno}"),
        other => panic!("a stale batch must be refused with ERESTART, got {other:?}"),
    }
    let listed = nft(&["list", "ruleset"]);
    assert!(
        listed.contains("tcp dport 8080 accept comment \"operator\""),
        "{listed}"
    );
    assert!(!listed.contains("dport 1 "), "{listed}");

    // The same batch at the current generation goes in.
    b.set_generation(now);
    s.send(&b).unwrap();
    let listed = nft(&["list", "ruleset"]);
    assert!(!listed.contains("8080"), "{listed}");
}

/// Answers `iptables-legacy-save` with an empty filter table and, once armed, reloads the
/// nf_tables ruleset the first time it is asked: the engine asks while it computes a convergence,
/// after its listing and before its batch, which is exactly when a reload must not fool it.
struct ReloadingRunner {
    armed: Cell<bool>,
    asked: Cell<u32>,
}

impl run::Runner for ReloadingRunner {
    fn call(&self, call: &run::Call<'_>) -> std::io::Result<run::Output> {
        assert_eq!(call.argv[0], "iptables-legacy-save");
        self.asked.set(self.asked.get() + 1);
        if self.armed.replace(false) {
            nft(&["flush", "ruleset"]);
            nft_load(OPERATOR);
        }
        Ok(run::Output {
            code: Some(0),
            stdout: b"*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n"
                .to_vec(),
            ..run::Output::default()
        })
    }

    fn exists(&self, program: &str) -> bool {
        program == "iptables-legacy-save"
    }
}

#[test]
fn a_reload_between_listing_and_commit_never_costs_the_operator_a_rule() {
    in_fresh_netns();
    nft_load(MARKED);
    // A /proc of the test's own saying that the legacy filter table exists.
    let proc = std::env::temp_dir().join(format!("fw-generation-{}", std::process::id()));
    std::fs::create_dir_all(proc.join("net")).unwrap();
    std::fs::write(proc.join("net/ip_tables_names"), "filter\n").unwrap();
    let exec = ReloadingRunner {
        armed: Cell::new(false),
        asked: Cell::new(0),
    };
    let mut fw = Firewall::open_at(&exec, &proc).unwrap();
    exec.armed.set(true);
    // No opening is declared: the marked rule is to go. Its handle, listed before the reload,
    // names the operator's rule after it.
    let done = fw.converge(&[], Scope::All).unwrap();
    assert!(
        !exec.armed.get(),
        "the reload happened during the convergence"
    );
    assert!(exec.asked.get() >= 2, "the convergence was computed again");
    assert!(done.removed.is_empty(), "{done:?}");
    let listed = nft(&["list", "ruleset"]);
    assert!(
        listed.contains("tcp dport 8080 accept comment \"operator\""),
        "the operator's rule was deleted by a stale handle:\n{listed}"
    );
    std::fs::remove_dir_all(&proc).unwrap();
}

/// The system's programs, each run counted by name.
struct CountingRunner {
    runs: std::cell::RefCell<Vec<String>>,
}

impl run::Runner for CountingRunner {
    fn call(&self, call: &run::Call<'_>) -> std::io::Result<run::Output> {
        self.runs.borrow_mut().push(call.argv[0].clone());
        run::SystemRunner.call(call)
    }
}

#[test]
fn legacy_verdicts_read_the_plan_s_model_while_the_saves_say_the_same_and_afresh_once_not() {
    in_fresh_netns();
    common::ip(&[
        "link", "add", "eth0", "type", "veth", "peer", "name", "eth0p",
    ]);
    common::ip(&["addr", "add", "203.0.113.1/24", "dev", "eth0"]);
    common::ip(&["link", "set", "eth0", "up"]);
    common::ip(&["link", "set", "eth0p", "up"]);
    for args in [
        &["-w", "-P", "INPUT", "DROP"][..],
        &[
            "-w", "-A", "INPUT", "-p", "tcp", "--dport", "22", "-j", "ACCEPT",
        ],
    ] {
        common::run_ok("iptables-legacy", args);
    }
    let os = [firewall::Opening {
        id: "web/api".into(),
        port: 9000,
        proto: firewall::Proto::Tcp,
        from: firewall::opening::From::Anywhere,
        path: firewall::Path::Incoming,
    }];
    // This thread's /proc: its namespace's legacy tables.
    let proc = std::path::PathBuf::from("/proc/thread-self");
    let exec = CountingRunner {
        runs: Default::default(),
    };
    let mut fw = Firewall::open_at(&exec, &proc).unwrap();
    let fresh = |exec: &CountingRunner| {
        Firewall::open_at(exec, &proc)
            .unwrap()
            .verdicts(&os)
            .unwrap()
    };
    // The first apply writes: its verdicts are read afresh (the saves differ from the plan's).
    let done = fw.converge(&os, Scope::Given).unwrap();
    assert_eq!(done.added.len(), 1, "{done:?}");
    let listings = fw.listings();
    let written = fw.verdicts(&os).unwrap();
    assert_eq!(
        fw.listings(),
        listings + 1,
        "read afresh after a legacy write"
    );
    assert_eq!(written, fresh(&exec));
    assert_eq!(written["web/api"].summary().state, "present", "{written:?}");

    // Nothing to write: the saves are read again and say the same, so the plan's model answers.
    let done = fw.converge(&os, Scope::Given).unwrap();
    assert!(done.added.is_empty(), "{done:?}");
    let (listings, runs) = (fw.listings(), exec.runs.borrow().len());
    let kept = fw.verdicts(&os).unwrap();
    assert_eq!(fw.listings(), listings, "the plan's model read, no listing");
    assert_eq!(
        exec.runs.borrow()[runs..],
        ["iptables-legacy-save".to_string()],
        "one save read again, the fingerprint"
    );
    assert_eq!(kept, written);

    // Another program refuses the port between the plan and the verdicts: read afresh, and said.
    fw.converge(&os, Scope::Given).unwrap();
    common::run_ok(
        "iptables-legacy",
        &[
            "-w", "-I", "INPUT", "-p", "tcp", "--dport", "9000", "-j", "DROP",
        ],
    );
    let listings = fw.listings();
    let changed = fw.verdicts(&os).unwrap();
    assert_eq!(
        fw.listings(),
        listings + 1,
        "read afresh once the save differs"
    );
    assert_eq!(changed, fresh(&exec));
    assert_ne!(changed["web/api"].summary().state, "present", "{changed:?}");
}

/// No legacy iptables here: nothing is ever run.
struct Nothing;

impl run::Runner for Nothing {
    fn call(&self, call: &run::Call<'_>) -> std::io::Result<run::Output> {
        panic!("nothing is to be run here, {:?} was asked for", call.argv);
    }

    fn exists(&self, _: &str) -> bool {
        false
    }
}

/// Proves that the verdicts of an apply of many openings, read from the checked model on a second
/// thread while the kernel committed the batch, are the verdicts of the ruleset listed afresh
/// after it: 300 openings through a found input chain with a refusal of one of their ports. It
/// fails if they were not read ahead (the count), or differ in any opening from a fresh reading.
#[test]
fn the_verdicts_read_during_the_commit_are_those_of_the_ruleset_listed_after_it() {
    in_fresh_netns();
    nft_load(
        "table inet filter {\n\
             chain input {\n\
                 type filter hook input priority 0; policy drop;\n\
                 tcp dport 10100 drop comment \"operator\"\n\
                 tcp dport 22 accept\n\
             }\n\
         }\n",
    );
    let os: Vec<firewall::Opening> = (0..300u16)
        .map(|i| firewall::Opening {
            id: format!("bench/o{i:03}"),
            port: 10000 + i,
            proto: firewall::Proto::Tcp,
            from: firewall::opening::From::Anywhere,
            path: firewall::Path::Incoming,
        })
        .collect();
    let proc = std::env::temp_dir().join(format!("fw-ahead-{}", std::process::id()));
    std::fs::create_dir_all(proc.join("net")).unwrap();
    let exec = Nothing;
    let mut fw = Firewall::open_at(&exec, &proc).unwrap();
    let done = fw.converge(&os, Scope::Given).unwrap();
    // The refused port's opening gets no rule: the operator's refusal stays first.
    assert_eq!(done.added.len(), 299, "{:?}", done.added.len());
    let listings = fw.listings();
    let ahead = fw.verdicts(&os).unwrap();
    assert_eq!(fw.verdicts_read_ahead(), 1, "read during the commit");
    assert_eq!(fw.listings(), listings, "and not listed after it");
    let fresh = Firewall::open_at(&exec, &proc)
        .unwrap()
        .verdicts(&os)
        .unwrap();
    assert_eq!(ahead, fresh);
    // The operator's refusal of 10100 stands: that opening is not admitted, the others are.
    let states: Vec<&str> = os.iter().map(|o| ahead[&o.id].summary().state).collect();
    assert_eq!(
        states.iter().filter(|s| **s == "present").count(),
        299,
        "{states:?}"
    );
    assert_ne!(ahead["bench/o100"].summary().state, "present");
    std::fs::remove_dir_all(&proc).unwrap();
}
