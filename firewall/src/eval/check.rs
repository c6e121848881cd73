//! The check every write passes before it is sent: the ruleset as it will stand (the found one
//! with the planned rules in and out) is walked against the found one for every class of new
//! connection the write could change, and the only difference allowed is the opening's own
//! cells (its protocol, port, path, family, interface and sources) moving on from what refused
//! them by default. Anything else — a forwarded path opened, a banned source admitted, another
//! port changed, an operator's refusal lifted — is a [`Violation`]: the placement is wrong, and
//! the engine tries another place or writes nothing.
//!
//! A class is concrete in all but its sources, which are every address of its family at once:
//! the answer partitions them (each ban, set, CIDR and the rest), so one walk covers every
//! source region the ruleset distinguishes. The classes are: incoming on every interface of the
//! machine; forwarded from every interface to a host on every other interface's network (a
//! routed destination, a runtime's network); forwarded through the runtime's DNAT where a
//! published port leads; for each port a planned rule names, and a port no opening names.
//! Interfaces are taken as the kernel lists them, none left out by its name.

use super::addrs::{num, Addrs, Fam};
use super::ir::{IrRule, RuleText};
use super::model::Model;
use super::opening::{sources, Iface};
use super::{Answer, Branch, Conn, Decider, Fate, Outcome, Path};
use crate::netlink::RuleBody;
use crate::opening::{From, Opening, Path as OPath};
use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;

/// A port that no declared opening names, asked about beside the planned ones: a rule that
/// matched more than its own port would change it.
pub fn unnamed_port(named: &BTreeSet<(u8, u16)>) -> u16 {
    (1..=u16::MAX)
        .rev()
        .find(|p| !named.iter().any(|(_, q)| q == p))
        .unwrap_or(1)
}

/// Whether an interface is the machine's loopback: every address it has is a loopback address
/// (the kernel's `lo` has 127.0.0.1/8 and ::1/128), never judged by its name.
fn loopback(i: &Iface) -> bool {
    !i.addrs.is_empty() && i.addrs.iter().all(|(a, _)| a.is_loopback())
}

/// A host on `i`'s network of family `fam` other than the machine itself: where a forwarded
/// connection to that network goes. None when the interface has no such network (a /32).
fn host_on(i: &Iface, fam: Fam) -> Option<IpAddr> {
    let (a, len) = i.addrs.iter().copied().find(|(a, len)| {
        Fam::of(*a) == fam
            && !a.is_loopback()
            && !is_link_local(*a)
            && u32::from(*len) + 1 < fam.max().count_ones()
    })?;
    let net = Addrs::cidr(fam, num(a), u32::from(len));
    let base = net.spans().first()?.0;
    let pick = if base + 1 == num(a) {
        base + 2
    } else {
        base + 1
    };
    Some(super::addrs::addr(fam, pick))
}

fn is_link_local(a: IpAddr) -> bool {
    match a {
        IpAddr::V6(v) => v.segments()[0] & 0xffc0 == 0xfe80,
        IpAddr::V4(v) => v.is_link_local(),
    }
}

/// Whether the kernel forwards each family (`net.ipv4.ip_forward`,
/// `net.ipv6.conf.all.forwarding` under `proc`): where it does not, nothing is routed on, and
/// the routed classes are not asked about.
pub fn forwarding(proc: &std::path::Path) -> [bool; 2] {
    let on = |p: &str| std::fs::read_to_string(proc.join(p)).map_or(true, |v| v.trim() != "0");
    [
        on("sys/net/ipv4/ip_forward"),
        on("sys/net/ipv6/conf/all/forwarding"),
    ]
}

/// Every class of new connection to ask about for the (protocol, port) pairs `ports`, plus the
/// forwarded connections `dnat` that the runtime's DNAT makes (each opening's own forwarded ways);
/// routed classes only for the families the kernel forwards (`forwards`: v4, v6).
pub fn classes(
    ifaces: &[Iface],
    ports: &BTreeSet<(u8, u16)>,
    dnat: &[Conn],
    forwards: [bool; 2],
) -> Vec<Conn> {
    let mut out: Vec<Conn> = Vec::new();
    for fam in [Fam::V4, Fam::V6] {
        let routes = forwards[usize::from(fam == Fam::V6)];
        for &(proto, port) in ports {
            for iif in ifaces {
                let daddr = iif
                    .addrs
                    .iter()
                    .map(|(a, _)| *a)
                    .find(|a| Fam::of(*a) == fam && !is_link_local(*a));
                out.push(Conn {
                    fam,
                    proto,
                    port,
                    path: Path::Incoming,
                    to_port: None,
                    iif: iif.name.clone(),
                    iif_index: (iif.index != 0).then_some(iif.index),
                    oif: None,
                    oif_index: None,
                    daddr,
                    routed: false,
                });
                if loopback(iif) || !routes {
                    continue;
                }
                for oif in ifaces.iter().filter(|o| o.name != iif.name && !loopback(o)) {
                    let Some(daddr) = host_on(oif, fam) else {
                        continue;
                    };
                    out.push(Conn {
                        fam,
                        proto,
                        port,
                        path: Path::Forwarded,
                        to_port: None,
                        iif: iif.name.clone(),
                        iif_index: (iif.index != 0).then_some(iif.index),
                        oif: Some(oif.name.clone()),
                        oif_index: (oif.index != 0).then_some(oif.index),
                        daddr: Some(daddr),
                        routed: true,
                    });
                }
            }
        }
    }
    for c in dnat {
        if !out.contains(c) {
            out.push(c.clone());
        }
    }
    out
}

/// The found firewall's answer for each class, walked once and compared with every candidate.
/// Where an answer is doubtful, each branch of its undecided tests is kept too: a doubtful
/// answer that stays doubtful can still hide a branch that changed (a routed host refused behind
/// an undecided test, admitted after it).
pub struct Before {
    pub conns: Vec<Conn>,
    pub answers: Vec<Answer>,
    pub branches: Vec<Option<Vec<Branch>>>,
}

impl Before {
    pub fn of(model: &Model, conns: Vec<Conn>) -> Before {
        // Classes alike but for a port no rule reads walk alike ([`Model::named_ports`]): the
        // first one's walk answers for the rest (a write of N new openings asks about N ports
        // the ruleset before it never names).
        let named = model.named_ports(|_| true);
        let mut walked: HashMap<Conn, usize> = HashMap::new();
        let mut answers: Vec<Answer> = Vec::with_capacity(conns.len());
        let mut branches: Vec<Option<Vec<Branch>>> = Vec::with_capacity(conns.len());
        for c in &conns {
            let alike = named
                .as_ref()
                .filter(|n| c.to_port.is_none() && !n.contains(&c.port))
                .map(|_| Conn {
                    port: 0,
                    ..c.clone()
                });
            if let Some(&first) = alike.as_ref().and_then(|k| walked.get(k)) {
                answers.push(answers[first].clone());
                branches.push(branches[first].clone());
                continue;
            }
            let all = Addrs::all(c.fam);
            let answer = model.evaluate(c, &all);
            branches.push(doubtful(&answer).then(|| model.branches(c, &all)));
            answers.push(answer);
            if let Some(k) = alike {
                walked.insert(k, answers.len() - 1);
            }
        }
        Before {
            conns,
            answers,
            branches,
        }
    }

    /// The classes `keep` chooses, with their answers.
    pub fn only(&self, keep: impl Fn(&Conn) -> bool) -> Before {
        let mut out = Before {
            conns: Vec::new(),
            answers: Vec::new(),
            branches: Vec::new(),
        };
        for ((c, a), b) in self.conns.iter().zip(&self.answers).zip(&self.branches) {
            if keep(c) {
                out.conns.push(c.clone());
                out.answers.push(a.clone());
                out.branches.push(b.clone());
            }
        }
        out
    }
}

fn doubtful(a: &Answer) -> bool {
    a.parts
        .iter()
        .any(|p| matches!(p.fate, Fate::Doubtful { .. }))
}

/// Whether two branches can be the same way: every undecided test both took, taken alike.
fn same_way(a: &Branch, b: &Branch) -> bool {
    let agree = |x: &Branch, y: &Branch| {
        x.forks.iter().all(|(d, way)| {
            y.forks
                .iter()
                .filter(|(e, _)| same_rule(d, e))
                .all(|(_, w)| w == way)
        })
    };
    agree(a, b) && agree(b, a)
}

/// A part of an answer or a branch, as [`diff`] compares them: its sources, how they end, and
/// the limits met on the way.
trait Cell {
    fn cell(&self) -> (&Addrs, &Fate, &[Decider]);
}

impl Cell for Outcome {
    fn cell(&self) -> (&Addrs, &Fate, &[Decider]) {
        (&self.sources, &self.fate, &self.limits)
    }
}

impl Cell for Branch {
    fn cell(&self) -> (&Addrs, &Fate, &[Decider]) {
        (&self.sources, &self.fate, &self.limits)
    }
}

/// A cell the write would change that is not the opening's to change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub conn: Conn,
    pub sources: Addrs,
    pub before: Fate,
    pub after: Fate,
    /// A per-source limit the connections passed before and would skip after.
    pub skipped: Option<Decider>,
}

impl Violation {
    /// The rule the write would have had to bypass: a limit it would skip, or what decided
    /// before.
    pub fn bypassed(&self) -> Option<&Decider> {
        self.skipped.as_ref().or(self.before.by())
    }

    /// As a person reads it: `forwarded tcp 9000 (ipv4) arriving on wan0 for 192.168.1.2 on
    /// lan0, from anywhere: not admitted: … would become admitted`.
    pub fn describe(&self) -> String {
        let proto = match self.conn.proto {
            6 => "tcp",
            17 => "udp",
            _ => "?",
        };
        let way = match (&self.conn.path, &self.conn.oif, self.conn.daddr) {
            (Path::Incoming, _, _) => format!("incoming on {}", self.conn.iif),
            (Path::Forwarded, Some(o), Some(d)) => {
                format!("forwarded from {} to {d} on {o}", self.conn.iif)
            }
            (Path::Forwarded, _, _) => format!("forwarded from {}", self.conn.iif),
        };
        let from = if self.sources.is_all() {
            "anywhere".to_string()
        } else {
            self.sources.to_string()
        };
        let skip = match &self.skipped {
            Some(l) => format!(", past the limit {l}"),
            None => String::new(),
        };
        format!(
            "{proto} {} ({}) {way}, from {from}: {} would become {}{skip}",
            self.conn.port,
            self.conn.fam.name(),
            self.before.describe(),
            self.after.describe()
        )
    }
}

/// The same answer: the same kind, decided by the same rule (by its place and words: an
/// insertion moves indices, never a rule's handle or text).
pub fn same(a: &Fate, b: &Fate) -> bool {
    let rule =
        |x: &Decider, y: &Decider| x.table == y.table && x.chain == y.chain && x.text == y.text;
    match (a, b) {
        (Fate::Admitted, Fate::Admitted) => true,
        (Fate::Refused { by: x, why: w }, Fate::Refused { by: y, why: v }) => w == v && rule(x, y),
        (Fate::NotAdmitted { by: x }, Fate::NotAdmitted { by: y }) => rule(x, y),
        (Fate::Doubtful { by: x, what: w }, Fate::Doubtful { by: y, what: v }) => {
            w == v && rule(x, y)
        }
        _ => false,
    }
}

fn same_rule(x: &Decider, y: &Decider) -> bool {
    x.table == y.table && x.chain == y.chain && x.text == y.text
}

/// The first limit of `before` that `after` no longer passes.
fn skipped<'a>(before: &'a [Decider], after: &[Decider]) -> Option<&'a Decider> {
    before
        .iter()
        .find(|l| !after.iter().any(|m| same_rule(l, m)))
}

/// What a write may change of a class: the sources whose answer may move from `before`.
pub trait May {
    fn change(&self, conn: &Conn, before: &Fate) -> Addrs;
}

/// Every cell of `after` that differs from `before` and that `may` does not allow; where the
/// answer before was doubtful, every branch of its undecided tests as well, each against the
/// same way after.
pub fn diff(before: &Before, after: &Model, may: &(dyn May + Sync)) -> Vec<Violation> {
    let n = before.conns.len();
    if n < PARALLEL_FROM {
        return diff_range(before, after, may, 0..n);
    }
    // Each class is walked alone, so the halves go to two threads; their findings are joined in
    // the classes' order, as one thread would give them.
    let half = n / 2;
    let (second, mut out) = crate::pair::both(
        || diff_range(before, after, may, half..n),
        || diff_range(before, after, may, 0..half),
    );
    out.extend(second);
    out
}

/// How many classes make a check worth a second thread (a thread costs some tens of
/// microseconds; a class's walk a few).
pub const PARALLEL_FROM: usize = 512;

/// [`diff`] of the classes in `range`.
fn diff_range(
    before: &Before,
    after: &Model,
    may: &dyn May,
    range: std::ops::Range<usize>,
) -> Vec<Violation> {
    let mut out = Vec::new();
    for i in range {
        let (conn, was, ways) = (&before.conns[i], &before.answers[i], &before.branches[i]);
        let all = Addrs::all(conn.fam);
        let now = after.evaluate(conn, &all);
        for b in &was.parts {
            for a in &now.parts {
                cell(&mut out, conn, may, b, a);
            }
        }
        let Some(ways) = ways else { continue };
        for a in after.branches(conn, &all) {
            for b in ways.iter().filter(|b| same_way(&a, b)) {
                cell(&mut out, conn, may, b, &a);
            }
        }
    }
    out
}

/// One part before against one part after (sources, fate, limits met): a violation where they
/// share sources and differ in what `may` does not allow.
fn cell(out: &mut Vec<Violation>, conn: &Conn, may: &dyn May, before: &dyn Cell, after: &dyn Cell) {
    let ((bs, bf, bl), (as_, af, al)) = (before.cell(), after.cell());
    let skip = skipped(bl, al);
    if same(bf, af) && skip.is_none() && bl.len() == al.len() {
        return;
    }
    let both = bs.intersect(as_);
    if both.is_empty() {
        return;
    }
    // An opening's own connections may move on, but never past a limit they met.
    let bad = match skip {
        Some(_) => both,
        None => both.minus(&may.change(conn, bf)),
    };
    if bad.is_empty() {
        return;
    }
    let v = Violation {
        conn: conn.clone(),
        sources: bad,
        before: bf.clone(),
        after: af.clone(),
        skipped: skip.cloned(),
    };
    if !out.contains(&v) {
        out.push(v);
    }
}

/// The cells that are an opening's own: its protocol and port on its path (forwarded: only
/// through the runtime's DNAT), arriving where it admits from, from its sources. An operator's
/// refusal is never the opening's to change.
pub fn own(o: &Opening, conn: &Conn, before: &Fate) -> Addrs {
    let none = Addrs::none(conn.fam);
    if matches!(before, Fate::Refused { .. })
        || conn.proto != o.proto.number()
        || conn.port != o.port
    {
        return none;
    }
    let path_ok = match o.path {
        OPath::Incoming => conn.path == Path::Incoming,
        OPath::Forwarded => conn.path == Path::Forwarded && !conn.routed,
    };
    let iif_ok = match &o.from {
        From::Interface(i) => &conn.iif == i,
        _ => true,
    };
    if path_ok && iif_ok {
        sources(o, conn.fam)
    } else {
        none
    }
}

/// A planned nf_tables rule as the model reads it, before it is written.
pub fn planned_nft(body: &RuleBody) -> IrRule {
    IrRule {
        items: super::lower::from_nft(&body.exprs, &|_| None),
        handle: 0,
        text: RuleText::Nft(body.comment.clone()),
        marked: true,
    }
}

/// A planned iptables rule (`-A CHAIN` followed by `spec`, as a save prints it) as the model
/// reads it, in a table whose chains are `chains`.
pub fn planned_xt(chain: &str, spec: &str, fam: Fam, chains: &[String]) -> IrRule {
    IrRule {
        items: super::legacy::legacy_items(spec, fam, chains),
        handle: 0,
        text: RuleText::Saved(format!("-A {chain} {spec}")),
        marked: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::model::{Edit, EditWhat};
    use crate::eval::parse_save;

    fn iface(name: &str, index: u32, addrs: &[(&str, u8)]) -> Iface {
        Iface {
            name: name.into(),
            index,
            addrs: addrs
                .iter()
                .map(|(a, l)| (a.parse().unwrap(), *l))
                .collect(),
            way_in: name != "lo",
        }
    }

    fn ifaces() -> Vec<Iface> {
        vec![
            iface("lo", 1, &[("127.0.0.1", 8), ("::1", 128)]),
            iface("wan0", 2, &[("192.0.2.1", 24)]),
            iface("lan0", 3, &[("192.168.1.1", 24)]),
        ]
    }

    /// A router's shape: input and forward both end in one shared reject chain.
    const ROUTER: &str = "*filter\n:INPUT DROP [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\n\
        :handle_reject - [0:0]\n:BANS - [0:0]\n\
        -A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n\
        -A INPUT -s 192.0.2.40/32 -j BANS\n\
        -A INPUT -p tcp -m tcp --dport 22 -j ACCEPT\n\
        -A INPUT -j handle_reject\n\
        -A FORWARD -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n\
        -A FORWARD -i lan0 -j ACCEPT\n\
        -A FORWARD -j handle_reject\n\
        -A BANS -j handle_reject\n\
        -A handle_reject -p tcp -j REJECT --reject-with tcp-reset\n\
        -A handle_reject -j REJECT --reject-with icmp-port-unreachable\n\
        COMMIT\n";

    fn model() -> Model {
        let mut m = Model::default();
        m.add_legacy(Fam::V4, "filter", ROUTER);
        m
    }

    fn opening(port: u16) -> Opening {
        Opening {
            id: "web".into(),
            port,
            proto: crate::opening::Proto::Tcp,
            from: From::Anywhere,
            path: OPath::Incoming,
        }
    }

    struct Only<'a>(&'a Opening);
    impl May for Only<'_> {
        fn change(&self, conn: &Conn, before: &Fate) -> Addrs {
            own(self.0, conn, before)
        }
    }

    fn insert(chain: &str, before: Option<usize>, spec: &str, m: &Model) -> Edit {
        let t = m.table("iptables-legacy filter").unwrap();
        let names: Vec<String> = t.chains.keys().cloned().collect();
        Edit {
            table: "iptables-legacy filter".into(),
            chain: chain.into(),
            what: EditWhat::Insert {
                before,
                rules: vec![planned_xt(chain, spec, Fam::V4, &names)],
            },
        }
    }

    /// The answers before a write, where classes alike but for a port no rule reads share one
    /// walk, are each class's own walk: over the router (ports it never names answered
    /// together), and over it with a wide range that reads every port (nothing shared).
    #[test]
    fn shared_walks_answer_as_each_class_walked_alone() {
        let ranged = ROUTER.replace(
            "-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT\n",
            "-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT\n\
             -A INPUT -p tcp -m tcp --dport 9000:9100 -j DROP\n",
        );
        for text in [ROUTER, ranged.as_str()] {
            let mut m = Model::default();
            m.add_legacy(Fam::V4, "filter", text);
            let ports: BTreeSet<(u8, u16)> = [22, 80, 443, 9000, 9050, 9200]
                .iter()
                .map(|p| (6, *p))
                .collect();
            let conns = classes(&ifaces(), &ports, &[], [true, true]);
            let b = Before::of(&m, conns.clone());
            assert_eq!(b.conns, conns);
            let fates: BTreeSet<&str> = b
                .answers
                .iter()
                .flat_map(|a| a.parts.iter().map(|p| p.fate.word()))
                .collect();
            assert!(fates.len() > 1, "the classes differ in fate: {fates:?}");
            for ((c, a), br) in conns.iter().zip(&b.answers).zip(&b.branches) {
                let all = Addrs::all(c.fam);
                assert_eq!(*a, m.evaluate(c, &all), "{c:?}");
                assert_eq!(*br, doubtful(a).then(|| m.branches(c, &all)), "{c:?}");
            }
        }
    }

    /// Proves the check split over two threads finds what one thread finds, in the same order:
    /// a write that opens a shared chain to hundreds of ports, checked over more classes than
    /// [`PARALLEL_FROM`]. It fails if a half is lost, doubled or joined out of order.
    #[test]
    fn the_check_on_two_threads_finds_what_one_finds_in_order() {
        let m = model();
        let ports: BTreeSet<(u8, u16)> = (9000..9400).map(|p| (6, p)).collect();
        let b = Before::of(&m, classes(&ifaces(), &ports, &[], [true, true]));
        assert!(b.conns.len() >= PARALLEL_FROM, "{} classes", b.conns.len());
        let after = m.edited(&[insert(
            "handle_reject",
            Some(0),
            "-p tcp -m tcp --dport 9000:9399 -m comment --comment mesh-host:web#00000000 -j ACCEPT",
            &m,
        )]);
        let o = opening(9000);
        let split = diff(&b, &after, &Only(&o));
        let whole = diff_range(&b, &after, &Only(&o), 0..b.conns.len());
        assert!(
            split.len() > 1,
            "the write opens more than itself: {split:?}"
        );
        assert_eq!(
            split.iter().map(Violation::describe).collect::<Vec<_>>(),
            whole.iter().map(Violation::describe).collect::<Vec<_>>()
        );
        // Violations in the second half of the classes are found too.
        let half = &b.conns[b.conns.len() / 2..];
        assert!(split.iter().any(|v| half.contains(&v.conn)), "{split:?}");
    }

    /// The model after edits: inserts before a rule, at the end and past the end (the end) in
    /// the edits' order, a removal, the rest in place; by reference and by value alike.
    #[test]
    fn edits_land_where_they_say_in_their_order() {
        let m = model();
        let spec = |p: u16| format!("-p tcp -m tcp --dport {p} -j ACCEPT");
        let remove = Edit {
            table: "iptables-legacy filter".into(),
            chain: "INPUT".into(),
            what: EditWhat::Remove(1),
        };
        let edits = vec![
            insert("INPUT", None, &spec(9003), &m),
            insert("INPUT", Some(0), &spec(9001), &m),
            remove,
            insert("INPUT", Some(2), &spec(9002), &m),
            insert("INPUT", Some(0), &spec(9011), &m),
            insert("INPUT", Some(99), &spec(9004), &m),
        ];
        let texts = |m: &Model| -> Vec<String> {
            m.table("iptables-legacy filter").unwrap().chains["INPUT"]
                .rules
                .iter()
                .map(IrRule::text)
                .collect()
        };
        let want_ports = [
            "9001",
            "9011",
            "conntrack",
            "9002",
            "22",
            "handle_reject",
            "9003",
            "9004",
        ];
        for got in [texts(&m.edited(&edits)), texts(&m.edited_by(edits.clone()))] {
            assert_eq!(got.len(), want_ports.len(), "{got:#?}");
            for (g, w) in got.iter().zip(want_ports) {
                assert!(g.contains(w), "{w} expected, got {got:#?}");
            }
        }
    }

    fn check(chain: &str, before: Option<usize>, spec: &str) -> Vec<Violation> {
        let m = model();
        let o = opening(9000);
        let mut ports = BTreeSet::from([(6, 9000)]);
        ports.insert((6, unnamed_port(&ports)));
        let b = Before::of(&m, classes(&ifaces(), &ports, &[], [true, true]));
        let after = m.edited(&[insert(chain, before, spec, &m)]);
        diff(&b, &after, &Only(&o))
    }

    #[test]
    fn a_doubtful_answer_that_stays_doubtful_is_compared_branch_by_branch() {
        // An undecided test (`-m time`) ahead of the shared reject: every answer through it is
        // doubtful before and after, and only its branches tell the forwarded path was opened.
        let ruleset = ROUTER.replace(
            "-A handle_reject -p tcp",
            "-A handle_reject -m time --timestart 01:00 -j DROP\n-A handle_reject -p tcp",
        );
        let mut m = Model::default();
        m.add_legacy(Fam::V4, "filter", &ruleset);
        let o = opening(9000);
        let ports = BTreeSet::from([(6, 9000)]);
        let b = Before::of(&m, classes(&ifaces(), &ports, &[], [true, true]));
        let routed = b
            .conns
            .iter()
            .position(|c| c.routed && c.iif == "wan0")
            .unwrap();
        assert!(doubtful(&b.answers[routed]), "{:?}", b.answers[routed]);
        let spec =
            "-p tcp -m tcp --dport 9000 -m comment --comment mesh-host:web#00000000 -j ACCEPT";
        let after = m.edited(&[insert("handle_reject", Some(1), spec, &m)]);
        let now = after.evaluate(&b.conns[routed], &Addrs::all(Fam::V4));
        assert!(
            now.parts.iter().all(|p| b.answers[routed]
                .parts
                .iter()
                .any(|q| same(&p.fate, &q.fate))),
            "the answer alone reads unchanged: {now:?}"
        );
        let v = diff(&b, &after, &Only(&o));
        assert!(
            v.iter().any(|v| v.conn.routed && v.after == Fate::Admitted),
            "the forwarded branch opened: {v:?}"
        );
    }

    #[test]
    fn an_accept_in_a_chain_shared_with_forward_is_caught() {
        let v = check(
            "handle_reject",
            Some(0),
            "-p tcp -m tcp --dport 9000 -m comment --comment mesh-host:web#00000000 -j ACCEPT",
        );
        assert!(
            !v.is_empty(),
            "the shared chain's accept opened more than itself"
        );
        assert!(
            v.iter().any(|v| v.conn.path == Path::Forwarded),
            "a forwarded path opened: {v:?}"
        );
        assert!(
            v.iter().any(|v| v.conn.path == Path::Incoming
                && v.sources.contains("192.0.2.40".parse().unwrap())),
            "the banned source admitted: {v:?}"
        );
        let text = v[0].describe();
        assert!(text.contains("would become admitted"), "{text}");
    }

    #[test]
    fn the_same_accept_for_local_addresses_still_admits_the_ban() {
        // The qualifier keeps forwarding shut, but the ban goes through the same chain.
        let v = check(
            "handle_reject",
            Some(0),
            "-p tcp -m addrtype --dst-type LOCAL -m tcp --dport 9000 -m comment --comment mesh-host:web#00000000 -j ACCEPT",
        );
        assert!(v.iter().all(|v| v.conn.path == Path::Incoming), "{v:?}");
        assert!(
            v.iter()
                .any(|v| v.sources.contains("192.0.2.40".parse().unwrap())),
            "{v:?}"
        );
    }

    #[test]
    fn before_the_jump_of_the_input_chain_changes_only_its_own_cells() {
        let v = check(
            "INPUT",
            Some(3),
            "-p tcp -m tcp --dport 9000 -m comment --comment mesh-host:web#00000000 -j ACCEPT",
        );
        assert!(v.is_empty(), "{:#?}", v);
    }

    #[test]
    fn a_rule_without_its_port_changes_the_unnamed_port() {
        let v = check(
            "INPUT",
            Some(3),
            "-p tcp -m comment --comment mesh-host:web#00000000 -j ACCEPT",
        );
        assert!(v.iter().any(|v| v.conn.port != 9000), "{v:?}");
    }

    #[test]
    fn the_router_save_parses_into_its_chains() {
        let t = parse_save(ROUTER, "filter");
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].2.len(), 10);
    }
}
