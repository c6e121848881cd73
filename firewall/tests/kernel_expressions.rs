//! Every row of docs/EXPRESSIONS.md that this kernel and nft 1.0.6 can load: one namespace, the
//! rows loaded at once (nft rows each on a port of their own or in a table of their own, the
//! x_tables rows through iptables-nft and iptables-legacy), listed once over netlink, and each
//! row's verdict asserted from the evaluator. The rows the kernel here cannot load (`last`,
//! `queue`, `flow_offload`, `inner`, `tunnel`) are hand-built in the crate's tests; `-m set`
//! loads with an ipset made by the `ipset` tool in the same namespace.

mod common;

use common::{in_fresh_netns, nft_load};
use firewall::eval::{Addrs, Answer, Conn, Fam, Fate, Model, Path, Placement, Refusal, Snapshot};
use firewall::netlink::Family;
use firewall::NfSocket;
use std::net::IpAddr;
use std::process::Command;

const RULES: &str = include_str!("fixtures/expressions.nft");
const XT: &str = include_str!("fixtures/expressions-xt.sh");

/// The listing cut to some tables: each row is judged by its own chains alone.
fn model_of(snap: &Snapshot, tables: &[(Family, &str)]) -> Model {
    let mut s = snap.clone();
    let keep = |f: Family, t: &str| tables.iter().any(|(ff, tt)| *ff == f && *tt == t);
    s.ruleset.tables.retain(|t| keep(t.family, &t.name));
    s.ruleset.chains.retain(|c| keep(c.family, &c.table));
    s.ruleset.rules.retain(|r| keep(r.family, &r.table));
    s.ruleset.sets.retain(|x| keep(x.family, &x.table));
    Model::new(&s)
}

fn conn(port: u16) -> Conn {
    let mut c = Conn::incoming(Fam::V4, 6, port, "eth0");
    c.iif_index = Some(2);
    c
}

fn forwarded(port: u16, oif: &str) -> Conn {
    let mut c = conn(port);
    c.path = Path::Forwarded;
    c.to_port = Some(port);
    c.oif = Some(oif.into());
    c.oif_index = Some(3);
    c
}

fn answer(m: &Model, c: &Conn) -> Answer {
    m.evaluate(c, &Addrs::all(Fam::V4))
}

fn fate_from(m: &Model, c: &Conn, from: &str) -> Fate {
    answer(m, c)
        .fate_of(from.parse::<IpAddr>().unwrap())
        .unwrap()
        .clone()
}

const ANY: &str = "192.0.2.1";

/// Collects the rows that do not hold, so one run names all of them.
struct Rows(Vec<String>);

impl Rows {
    fn word(&mut self, row: &str, m: &Model, c: &Conn, want: &str) {
        let f = fate_from(m, c, ANY);
        if f.word() != want {
            self.0
                .push(format!("{row}: port {} wants {want}, got {f:?}", c.port));
        }
    }
}

fn run(cmd: &str, args: &[&str], env: &[(&str, &str)]) -> String {
    let out = Command::new(cmd)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn every_expression_row_reads_as_the_table_says() {
    in_fresh_netns();
    // eth0 for the ingress chain's device and the flowtable-free forward rows.
    run(
        "ip",
        &[
            "link", "add", "eth0", "type", "veth", "peer", "name", "eth1",
        ],
        &[],
    );
    nft_load(RULES);
    run("sh", &["-c", XT], &[("IPT", "iptables-nft")]);
    run("sh", &["-c", XT], &[("IPT", "iptables-legacy")]);
    let mut s = NfSocket::open().unwrap();
    let snap = Snapshot::read(&mut s).unwrap();
    let save = run("iptables-legacy-save", &["-t", "filter"], &[]);
    let mut rows = Rows(Vec::new());

    basic_rows(&snap, &mut rows);
    limit_rows(&snap, &mut rows);
    hook_rows(&snap, &mut rows);
    let nft_xt = model_of(&snap, &[(Family::Ipv4, "filter")]);
    let mut legacy = Model::default();
    legacy.add_legacy(Fam::V4, "filter", &save);
    for (name, m) in [("iptables-nft", &nft_xt), ("iptables-legacy", &legacy)] {
        xt_rows(name, m, &mut rows);
    }
    assert!(
        rows.0.is_empty(),
        "rows that do not hold:\n{}",
        rows.0.join("\n")
    );
}

/// `inet e_basic`: one port per row, policy drop.
fn basic_rows(snap: &Snapshot, rows: &mut Rows) {
    let m = model_of(snap, &[(Family::Inet, "e_basic")]);
    // lookup: the set's source is refused as a ban, the rest admitted by cmp + immediate.
    match fate_from(&m, &conn(9000), "10.9.0.1") {
        Fate::Refused {
            why: Refusal::Ban, ..
        } => {}
        f => rows
            .0
            .push(format!("lookup: the set's source wants a ban, got {f:?}")),
    }
    for (row, port, want) in [
        ("cmp + immediate", 9000, "admitted"),
        ("cmp: a port no rule names", 9999, "not-admitted"),
        ("byteorder: hton of the mark in a range", 9001, "admitted"),
        (
            "byteorder: no-op swap of l4proto in a concatenation",
            9055,
            "admitted",
        ),
        ("bitwise: a shift of the mark", 9002, "admitted"),
        ("counter, log", 9003, "admitted"),
        ("limit rate (plain)", 9005, "admitted"),
        ("quota (plain)", 9006, "admitted"),
        ("connlimit (plain)", 9007, "admitted"),
        ("objref: a counter", 9008, "admitted"),
        ("objref: a ct helper", 9009, "admitted"),
        ("cmp: a range as gte/lte", 9011, "admitted"),
        ("range: a negated range", 9036, "admitted"),
        ("payload, exthdr writes", 9013, "admitted"),
        ("xfrm: ipsec in (no IPsec)", 9014, "admitted"),
        ("meta set priority", 9016, "admitted"),
        ("reject", 9017, "refused"),
        ("dynset without expressions", 9018, "admitted"),
        ("dynset then a lookup of the same set", 9019, "doubtful"),
        ("objref: a named limit", 9020, "doubtful"),
        ("objref: a named quota", 9021, "doubtful"),
        ("rt", 9022, "doubtful"),
        ("socket", 9023, "doubtful"),
        ("osf", 9024, "doubtful"),
        ("numgen", 9025, "doubtful"),
        ("hash", 9026, "doubtful"),
        ("synproxy", 9027, "doubtful"),
        ("exthdr: a tcp option tested", 9029, "doubtful"),
        ("fib saddr . iif oif missing", 9030, "admitted"),
        ("payload: a rewrite of the port", 9031, "doubtful"),
        ("ct: state new, tracked", 9033, "admitted"),
        ("ct: state untracked, tracked", 9034, "not-admitted"),
        ("ct mark arithmetic", 9035, "admitted"),
    ] {
        rows.word(row, &m, &conn(port), want);
    }
    // reject names the port.
    if !matches!(
        fate_from(&m, &conn(9017), ANY),
        Fate::Refused {
            why: Refusal::Port,
            ..
        }
    ) {
        rows.0.push("reject: wants a refusal of the port".into());
    }
    // A dynset that only adds to a set is no limit.
    if answer(&m, &conn(9018))
        .parts
        .iter()
        .any(|o| !o.limits.is_empty())
    {
        rows.0
            .push("dynset without expressions: no limit wanted".into());
    }
    // notrack ahead of conntrack: `ct state new` no longer holds, `untracked` does.
    let m = model_of(
        snap,
        &[(Family::Inet, "e_notrack"), (Family::Inet, "e_basic")],
    );
    rows.word(
        "notrack, then ct state new",
        &m,
        &conn(9033),
        "not-admitted",
    );
    rows.word(
        "notrack, then ct state untracked",
        &m,
        &conn(9034),
        "admitted",
    );
    // dup in an ip table.
    let m = model_of(snap, &[(Family::Ipv4, "e_dup")]);
    rows.word("dup", &m, &conn(9015), "admitted");
    rows.word("dup: another port", &m, &conn(9999), "not-admitted");
}

/// `inet e_limits`: the flood limits of a production replica, ahead of `tcp dport 22 accept`.
fn limit_rows(snap: &Snapshot, rows: &mut Rows) {
    let m = model_of(snap, &[(Family::Inet, "e_limits")]);
    for port in [22, 9000] {
        let a = answer(&m, &conn(port));
        let o = &a.parts[0];
        if a.parts.len() != 1 || o.limits.len() != 6 {
            rows.0.push(format!(
                "limits: port {port} wants one part with the six limits met, got {a:?}"
            ));
            continue;
        }
        let texts: Vec<&str> = o.limits.iter().map(|l| l.text.as_str()).collect();
        let indexes: Vec<Option<usize>> = o.limits.iter().map(|l| l.index).collect();
        if indexes != [0, 1, 2, 3, 4, 5].map(Some) {
            rows.0
                .push(format!("limits: met in order, got {indexes:?} {texts:?}"));
        }
        let want = if port == 22 {
            "admitted"
        } else {
            "not-admitted"
        };
        if o.fate.word() != want {
            rows.0.push(format!(
                "limits: port {port} wants {want}, got {:?}",
                o.fate
            ));
        }
        // The refusal is the policy, not the first limit read as `ct state new drop`.
        if let Fate::NotAdmitted { by } = &o.fate {
            if by.handle.is_some() {
                rows.0.push(format!("limits: a limit decided: {by}"));
            }
        }
    }
    // The opening goes at the end of the chain, behind every limit.
    let p = m.place("inet e_limits", "c", &conn(9000), &Addrs::all(Fam::V4));
    if !matches!(&p, Some(Placement::At { chain, index: None, .. }) if chain == "c") {
        rows.0
            .push(format!("limits: placement wants the end of c, got {p:?}"));
    }
    // A chain entered twice: the refusal at index 0 of `sub` is met after the limit at index 1,
    // so the opening goes behind the limit (index 2), not ahead of it.
    let m = model_of(snap, &[(Family::Inet, "e_twice")]);
    let p = m.place("inet e_twice", "c", &conn(9000), &Addrs::all(Fam::V4));
    if !matches!(&p, Some(Placement::At { chain, index: Some(2), .. }) if chain == "sub") {
        rows.0
            .push(format!("limits: placement wants sub index 2, got {p:?}"));
    }
}

/// Rows at other hooks: the rpfilter chain at prerouting, NAT, netdev ingress.
fn hook_rows(snap: &Snapshot, rows: &mut Rows) {
    let m = model_of(snap, &[(Family::Inet, "e_rpfilter")]);
    rows.word(
        "fib saddr . mark . iif oif exists",
        &m,
        &conn(9000),
        "admitted",
    );
    let m = model_of(snap, &[(Family::Inet, "e_nat")]);
    rows.word(
        "nat: dnat ends its chain accepted",
        &m,
        &conn(9000),
        "admitted",
    );
    rows.word("redir ends its chain accepted", &m, &conn(9001), "admitted");
    rows.word("tproxy", &m, &conn(9002), "doubtful");
    rows.word("nat chain: drop", &m, &conn(9999), "not-admitted");
    rows.word(
        "masq ends its chain accepted",
        &m,
        &forwarded(9000, "eth1"),
        "admitted",
    );
    rows.word(
        "masq: another interface",
        &m,
        &forwarded(9000, "eth9"),
        "not-admitted",
    );
    // NixOS's firewall module as it renders: rpfilter by `fib … exists`, `ct state vmap`, the
    // temporary ports through `meta l4proto . th dport @temp-ports` (a byteorder).
    let m = model_of(snap, &[(Family::Inet, "e_nixos")]);
    rows.word("nixos: ssh", &m, &conn(22), "admitted");
    rows.word("nixos: a port not opened", &m, &conn(9000), "not-admitted");
    let p = m.place("inet e_nixos", "input", &conn(9000), &Addrs::all(Fam::V4));
    if !matches!(&p, Some(Placement::At { chain, index: None, .. }) if chain == "input") {
        rows.0.push(format!(
            "nixos: placement wants the end of input, got {p:?}"
        ));
    }
    let m = model_of(snap, &[(Family::Netdev, "e_fwd")]);
    rows.word("fwd", &m, &conn(9000), "doubtful");
    rows.word("fwd: another port", &m, &conn(9001), "admitted");
}

/// `ip filter` as iptables-nft or iptables-legacy left it (policy drop).
fn xt_rows(tool: &str, m: &Model, rows: &mut Rows) {
    for (row, port, want, limited) in [
        ("hashlimit --hashlimit-above", 9100, "admitted", true),
        ("connlimit --connlimit-above", 9101, "admitted", true),
        ("recent --set, --update --hitcount", 9102, "admitted", true),
        ("recent --rcheck", 9103, "doubtful", false),
        ("addrtype --dst-type LOCAL", 9104, "admitted", false),
        ("physdev", 9105, "doubtful", false),
        ("socket", 9106, "doubtful", false),
        ("limit --limit", 9107, "admitted", false),
        ("connlimit --connlimit-upto", 9108, "admitted", false),
        ("hashlimit --hashlimit-upto", 9109, "admitted", false),
        (
            "set --match-set (an ipset's members)",
            9110,
            "doubtful",
            false,
        ),
    ] {
        let row = format!("{tool} {row}");
        rows.word(&row, m, &conn(port), want);
        let a = answer(m, &conn(port));
        let met = a.parts.iter().any(|o| !o.limits.is_empty());
        if met != limited {
            rows.0
                .push(format!("{row}: a limit met wanted {limited}, got {a:?}"));
        }
    }
}

/// The decided rows as a firewall over loopback, behind the flood limits and the rpfilter chain
/// of the issue's rulesets: the kernel's answer to a real SYN is the evaluator's, and an opening
/// written where `place` says stays behind the limits and is admitted.
const PROBE: &str = r#"table inet probe {
  set tp { type inet_proto . inet_service; flags interval; elements = { tcp . 9050-9060 } }
  set rate_limit { type ipv4_addr; flags dynamic; timeout 1m; }
  set connection_limit { type ipv4_addr; flags dynamic; }
  set seen { type ipv4_addr; flags dynamic; }
  chain rpfilter {
    type filter hook prerouting priority mangle + 10; policy drop;
    fib saddr . mark . iif oif exists accept
  }
  chain c {
    type filter hook input priority 0; policy drop;
    ct state established,related accept
    ct state new add @rate_limit { ip saddr limit rate over 1000/second } drop
    ct state new add @connection_limit { ip saddr ct count over 200 } drop
    limit rate over 1000/second drop
    meta mark set 0x00000015
    meta mark 0x10-0x20 tcp dport 9001 accept
    meta l4proto . th dport @tp accept
    meta mark set 0x0000ff00
    meta mark set meta mark >> 8
    meta mark 0xff tcp dport 9002 accept
    tcp dport 9005 limit rate 5/second accept
    tcp dport 9014 ipsec in reqid 1 drop
    tcp dport 9014 accept
    tcp dport 9018 add @seen { ip saddr } accept
    tcp dport 9030 fib saddr . iif oif missing drop
    tcp dport 9030 accept
    tcp dport 9031 reject with tcp reset
  }
}
"#;

fn kernel_admits(port: u16) -> bool {
    let to = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    std::net::TcpStream::connect_timeout(&to, std::time::Duration::from_millis(400)).is_ok()
}

#[test]
fn decided_rows_agree_with_a_real_connection_and_an_opening_stays_behind_the_limits() {
    in_fresh_netns();
    run("ip", &["link", "set", "lo", "up"], &[]);
    nft_load(PROBE);
    let ports = [9001, 9055, 9061, 9002, 9005, 9014, 9018, 9030, 9031, 9042];
    let _listeners: Vec<std::net::TcpListener> = ports
        .iter()
        .map(|p| std::net::TcpListener::bind(("127.0.0.1", *p)).unwrap())
        .collect();
    let read = || {
        let mut s = NfSocket::open().unwrap();
        Model::new(&Snapshot::read(&mut s).unwrap())
    };
    let lo = |port: u16| {
        let mut c = Conn::incoming(Fam::V4, 6, port, "lo");
        c.iif_index = Some(1);
        c.daddr = Some("127.0.0.1".parse().unwrap());
        c
    };
    let m = read();
    let mut wrong = Vec::new();
    for port in ports {
        let model = fate_from(&m, &lo(port), "127.0.0.1");
        let kernel = kernel_admits(port);
        if (model == Fate::Admitted) != kernel {
            wrong.push(format!(
                "port {port}: kernel admits {kernel}, model says {model:?}"
            ));
        }
        // Every connection passed the three limits on its way in.
        let a = answer(&m, &lo(port));
        let part = a
            .parts
            .iter()
            .find(|o| o.sources.contains("127.0.0.1".parse().unwrap()))
            .unwrap();
        if part.limits.len() != 3 {
            wrong.push(format!(
                "port {port}: three limits met wanted, got {part:?}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // 9042 is not admitted; its opening goes at the end of `c`, behind the limits.
    let p = m.place("inet probe", "c", &lo(9042), &Addrs::all(Fam::V4));
    assert!(
        matches!(&p, Some(Placement::At { chain, index: None, .. }) if chain == "c"),
        "{p:?}"
    );
    nft_load("add rule inet probe c tcp dport 9042 accept\n");
    assert!(kernel_admits(9042), "the written opening admits");
    let m = read();
    let a = answer(&m, &lo(9042));
    assert_eq!(a.parts[0].fate, Fate::Admitted, "{a:?}");
    assert_eq!(
        a.parts[0].limits.len(),
        3,
        "the opening skips no limit: {a:?}"
    );
}
