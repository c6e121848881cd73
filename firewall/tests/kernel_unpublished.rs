//! A forwarded opening whose port no container runtime publishes yet, converged against a real
//! nf_tables forward chain in a fresh namespace: the evaluator places it (no other reader of the
//! rules is left), behind the operator's ban, and its write passes the check; a refusal of a port
//! it may be translated to is said as a doubt, naming that rule; and the next convergences leave
//! the rule where it stands instead of moving it each time.

mod common;

use common::{in_fresh_netns, ip, nft, nft_load};
use firewall::opening::From;
use firewall::{Firewall, Opening, Path, Proto, Scope, State};

struct NoLegacy;

impl run::Runner for NoLegacy {
    fn call(&self, call: &run::Call<'_>) -> std::io::Result<run::Output> {
        panic!(
            "nothing is to be run in this test, {:?} was asked for",
            call.argv
        );
    }

    fn exists(&self, _: &str) -> bool {
        false
    }
}

/// A /proc of the test's own: no legacy tables, forwarding on in both families (so the check
/// asks about routed connections too).
fn proc_dir() -> std::path::PathBuf {
    let proc = std::env::temp_dir().join(format!("fw-unpublished-{}", std::process::id()));
    std::fs::create_dir_all(proc.join("net")).unwrap();
    std::fs::create_dir_all(proc.join("sys/net/ipv4")).unwrap();
    std::fs::create_dir_all(proc.join("sys/net/ipv6/conf/all")).unwrap();
    std::fs::write(proc.join("sys/net/ipv4/ip_forward"), "1\n").unwrap();
    std::fs::write(proc.join("sys/net/ipv6/conf/all/forwarding"), "1\n").unwrap();
    proc
}

/// The forward chain's rules as nft lists them, one per line, without handles.
fn forward_rules() -> Vec<String> {
    nft(&["list", "chain", "inet", "filter", "forward"])
        .lines()
        .map(str::trim)
        .filter(|l| {
            !l.is_empty()
                && !["table ", "chain ", "type ", "}"]
                    .iter()
                    .any(|p| l.starts_with(p))
        })
        .map(str::to_string)
        .collect()
}

#[test]
fn an_unpublished_forwarded_opening_is_placed_by_the_model_behind_the_ban_and_stays_there() {
    in_fresh_netns();
    // An outside interface and a LAN behind the node (veths: this kernel has no dummy links;
    // the bare peers have no address, so nothing arrives on them).
    for (name, peer, addr) in [
        ("eth0", "eth0p", "192.0.2.10/24"),
        ("lan0", "lan0p", "10.99.0.1/24"),
    ] {
        ip(&["link", "add", name, "type", "veth", "peer", "name", peer]);
        ip(&["addr", "add", addr, "dev", name]);
        ip(&["link", "set", name, "up"]);
        ip(&["link", "set", peer, "up"]);
    }
    nft_load(
        "table inet filter {
  chain forward {
    type filter hook forward priority 0; policy drop;
    ct state established,related accept
    ip saddr 203.0.113.0/24 drop
  }
}
",
    );
    let o = Opening {
        id: "web/fwd".into(),
        port: 8082,
        proto: Proto::Tcp,
        from: From::Anywhere,
        path: Path::Forwarded,
    };
    let mark = firewall::rules::mark(&o);
    let proc = proc_dir();
    let exec = NoLegacy;
    let mut fw = Firewall::open_at(&exec, &proc).unwrap();

    let done = fw.converge(std::slice::from_ref(&o), Scope::All).unwrap();
    assert_eq!(done.added.len(), 1, "{done:?}");
    let rules = forward_rules();
    let at = rules
        .iter()
        .position(|r| r.contains(&mark))
        .unwrap_or_else(|| panic!("no rule of {mark} in the forward chain: {rules:#?}"));
    let ban = rules
        .iter()
        .position(|r| r.starts_with("ip saddr 203.0.113.0/24 drop"))
        .expect("the ban is listed");
    assert!(
        ban < at,
        "the opening's rule went ahead of the ban: {rules:#?}"
    );
    assert!(
        rules[at].contains("ct status dnat") && rules[at].contains("ct original proto-dst 8082"),
        "{}",
        rules[at]
    );
    let states = &done.states["web/fwd"];
    assert!(
        states.iter().any(|p| p.state == State::Present),
        "{states:?}"
    );

    // Again: it stands where the model would put it, and nothing is moved.
    let again = fw.converge(std::slice::from_ref(&o), Scope::All).unwrap();
    assert!(
        again.added.is_empty() && again.removed.is_empty(),
        "{again:?}"
    );
    assert_eq!(forward_rules(), rules);

    // The operator refuses port 80 after the rule: a port the DNAT may send it to. The layer says
    // so as a doubt naming that rule, and the rule is still not moved.
    nft_load("add rule inet filter forward tcp dport 80 drop\n");
    let before = forward_rules();
    for _ in 0..2 {
        let now = fw.converge(std::slice::from_ref(&o), Scope::All).unwrap();
        assert!(now.added.is_empty() && now.removed.is_empty(), "{now:?}");
        let doubt = now.states["web/fwd"]
            .iter()
            .find_map(|p| match &p.state {
                State::Doubtful(rule) => Some(rule.clone()),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no layer says doubtful: {:?}", now.states));
        assert!(
            doubt.starts_with("inet filter forward: ") && doubt.contains("dport 80"),
            "{doubt}"
        );
        assert!(
            doubt.contains("the port the runtime's DNAT sends it to"),
            "{doubt}"
        );
        assert_eq!(forward_rules(), before);
    }
    std::fs::remove_dir_all(&proc).unwrap();
}
