//! The found firewall as the evaluator walks it: every table's chains as steps, indexed by the
//! destination port a rule is about, its sets as sorted ranges (with the address sets a ban
//! holds computed once), and the base chains at each hook in the order the kernel runs them.

use super::addrs::{from_be, Addrs, Fam};
use super::ir::{self, IrRule};
use super::legacy;
use super::lower;
use crate::netlink::consts::{NFT_SET_ELEM_INTERVAL_END, NFT_SET_INTERVAL};
use crate::netlink::{ChainType, Elem, ElemData, Family, Hook, NfSocket, Policy, Ruleset, Verdict};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

mod edit;
pub use edit::{Edit, EditWhat};

/// What the evaluator reads: the nf_tables ruleset with every set's elements, listed within one
/// generation, and the iptables-legacy tables from their saves.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub ruleset: Ruleset,
    pub elements: HashMap<(Family, String, String), Vec<Elem>>,
    /// `iptables-legacy-save -t TABLE` and `ip6tables-legacy-save` output: family, table, text.
    pub legacy: Vec<(Fam, String, String)>,
    /// The namespace's ipsets with their members and kernel indices, which x_tables' `set`
    /// match tests; `None` when they could not be read (each such match is then undecided).
    pub ipsets: Option<Vec<crate::netlink::Ipset>>,
}

impl Snapshot {
    /// Lists the ruleset and every set's elements over `sock`, again if what was listed changed
    /// in between (the generation moved and, where the socket watches the ruleset's events, a
    /// table it read was touched), so the elements belong to the rules listed.
    pub fn read(sock: &mut NfSocket) -> crate::Result<Snapshot> {
        let mut last = None;
        for _ in 0..4 {
            let ruleset = sock.ruleset(None)?;
            let mut elements = HashMap::new();
            for s in &ruleset.sets {
                let elems = sock.set_elements(s.family, &s.table, &s.name)?;
                elements.insert((s.family, s.table.clone(), s.name.clone()), elems);
            }
            let done =
                sock.generation()? == ruleset.generation || sock.still_as(&ruleset)?.is_some();
            last = Some(Snapshot {
                ruleset,
                elements,
                legacy: Vec::new(),
                ipsets: None,
            });
            if done {
                break;
            }
        }
        Ok(last.unwrap_or_default())
    }
}

/// A set's element as inclusive ranges, one per field of its key.
#[derive(Debug, Clone)]
pub struct SetElem {
    pub lo: Vec<u8>,
    pub hi: Vec<u8>,
    pub verdict: Option<Verdict>,
}

#[derive(Debug, Default)]
pub struct SetIr {
    pub elems: Vec<SetElem>,
    /// For sets of single values: the element by its key.
    pub exact: Option<HashMap<Vec<u8>, usize>>,
    /// The addresses of a set of single addresses or address ranges, computed on first use.
    pub addrs: Mutex<HashMap<Fam, Addrs>>,
}

impl SetIr {
    fn new(flags: u32, elems: &[Elem]) -> SetIr {
        let mut out = Vec::new();
        let ranged = elems.iter().any(|e| e.key_end.is_some());
        if flags & NFT_SET_INTERVAL != 0 && !ranged {
            // An interval set lists the start of each interval and, flagged, one past its end.
            let mut sorted: Vec<&Elem> = elems.iter().collect();
            sorted.sort_by(|a, b| {
                a.key.cmp(&b.key).then(
                    (b.flags & NFT_SET_ELEM_INTERVAL_END)
                        .cmp(&(a.flags & NFT_SET_ELEM_INTERVAL_END)),
                )
            });
            let mut open: Option<&Elem> = None;
            for e in sorted {
                let end = e.flags & NFT_SET_ELEM_INTERVAL_END != 0;
                match (open, end) {
                    (Some(s), true) => {
                        if let Some(hi) = minus_one(&e.key) {
                            if s.key <= hi {
                                out.push(elem(s, s.key.clone(), hi));
                            }
                        }
                        open = None;
                    }
                    (Some(s), false) => {
                        // Two starts in a row: the first ran to the next.
                        if let Some(hi) = minus_one(&e.key) {
                            out.push(elem(s, s.key.clone(), hi));
                        }
                        open = Some(e);
                    }
                    (None, false) => open = Some(e),
                    (None, true) => {}
                }
            }
            if let Some(s) = open {
                out.push(elem(s, s.key.clone(), vec![0xff; s.key.len()]));
            }
        } else {
            for e in elems {
                let hi = e.key_end.clone().unwrap_or_else(|| e.key.clone());
                out.push(elem(e, e.key.clone(), hi));
            }
        }
        let exact = (!ranged && flags & NFT_SET_INTERVAL == 0).then(|| {
            out.iter()
                .enumerate()
                .map(|(i, e)| (e.lo.clone(), i))
                .collect()
        });
        SetIr {
            elems: out,
            exact,
            addrs: Mutex::new(HashMap::new()),
        }
    }

    /// The addresses the set holds when its key is one address of `fam`.
    pub fn addrs(&self, fam: Fam) -> Addrs {
        if let Some(a) = lock(&self.addrs).get(&fam) {
            return a.clone();
        }
        let spans: Vec<(u128, u128)> = self
            .elems
            .iter()
            .map(|e| {
                (
                    from_be(e.lo.get(..fam.len()).unwrap_or(&e.lo)),
                    from_be(e.hi.get(..fam.len()).unwrap_or(&e.hi)),
                )
            })
            .collect();
        let acc = Addrs::from_spans(fam, spans);
        lock(&self.addrs).insert(fam, acc.clone());
        acc
    }
}

fn elem(e: &Elem, lo: Vec<u8>, hi: Vec<u8>) -> SetElem {
    SetElem {
        lo,
        hi,
        verdict: match &e.data {
            Some(ElemData::Verdict(v)) => Some(v.clone()),
            _ => None,
        },
    }
}

/// The key one less, as a big-endian number (an interval's last value before its end key).
fn minus_one(key: &[u8]) -> Option<Vec<u8>> {
    let mut k = key.to_vec();
    for b in k.iter_mut().rev() {
        if *b > 0 {
            *b -= 1;
            return Some(k);
        }
        *b = 0xff;
    }
    None
}

/// A run of consecutive rules that each refuse one source or set of sources and nothing else
/// (a blocklist written as rules: `ip saddr 198.18.0.1 drop`, `-s 10.0.0.0/8 -j DROP`), walked
/// as one step: the addresses each family's rules refuse, with the first rule of the run.
#[derive(Debug, Clone)]
pub struct BanRun {
    /// One past the run's last rule.
    pub end: usize,
    pub v4: Addrs,
    pub v6: Addrs,
}

/// A chain's rules, with the index of those about one destination port.
#[derive(Debug, Clone, Default)]
pub struct ChainIr {
    pub rules: Vec<IrRule>,
    /// Rules about no one port: the walk reads them for every connection.
    pub generic: Vec<usize>,
    pub by_port: HashMap<u16, Vec<usize>>,
    /// Runs of ban rules, by the index of their first rule.
    pub runs: HashMap<usize, BanRun>,
}

/// Runs shorter than this are walked rule by rule.
const MIN_RUN: usize = 8;

/// The sources a rule refuses when that is all it does: (family, addresses).
fn ban_of(
    r: &IrRule,
    family: Option<Family>,
    sets: &HashMap<String, SetIr>,
) -> Option<(Fam, Addrs)> {
    use super::ir::{Act, Item, Src, Test};
    use crate::netlink::{CmpOp, MetaKey, PayloadBase};
    if r.marked {
        return None;
    }
    let mut fam = match family {
        Some(Family::Ipv4) => Some(Fam::V4),
        Some(Family::Ipv6) => Some(Fam::V6),
        _ => None,
    };
    let mut addrs = None;
    let mut dropped = false;
    for it in &r.items {
        match it {
            Item::Cond(c) if c.key.len() == 1 => {
                let l = &c.key[0];
                match (&l.src, &c.test) {
                    (
                        Src::Meta(MetaKey::NfProto),
                        Test::Cmp {
                            op: CmpOp::Eq,
                            data,
                        },
                    ) => {
                        fam = match data.first() {
                            Some(2) => Some(Fam::V4),
                            Some(10) => Some(Fam::V6),
                            _ => return None,
                        }
                    }
                    (
                        Src::Payload {
                            base: PayloadBase::Network,
                            offset,
                            len,
                        },
                        test,
                    ) if addrs.is_none() => {
                        let f = fam?;
                        let start = if f == Fam::V4 { 12 } else { 8 };
                        if *offset != start || *len as usize > f.len() || !l.then.is_empty() {
                            return None;
                        }
                        let plen = match &l.mask {
                            None => *len * 8,
                            Some((m, x)) if x.iter().all(|b| *b == 0) => {
                                let ones: u32 = m.iter().map(|b| b.count_ones()).sum();
                                let prefix = m
                                    .iter()
                                    .flat_map(|b| (0..8).rev().map(move |i| (b >> i) & 1))
                                    .skip(ones as usize)
                                    .all(|bit| bit == 0);
                                if !prefix {
                                    return None;
                                }
                                ones
                            }
                            Some(_) => return None,
                        };
                        addrs = Some(match test {
                            Test::Cmp {
                                op: CmpOp::Eq,
                                data,
                            } => {
                                let mut b = data.clone();
                                b.resize(f.len(), 0);
                                Addrs::cidr(f, from_be(&b), plen)
                            }
                            Test::InSet { set, neg: false }
                                if *len as usize == f.len() && l.mask.is_none() =>
                            {
                                sets.get(set)?.addrs(f)
                            }
                            _ => return None,
                        });
                    }
                    _ => return None,
                }
            }
            Item::Act(Act::Drop) => dropped = true,
            _ => return None,
        }
    }
    match (fam, addrs, dropped) {
        (Some(f), Some(a), true) => Some((f, a)),
        _ => None,
    }
}

impl ChainIr {
    /// Finds the runs of ban rules, once every rule is in.
    fn index_runs(&mut self, family: Option<Family>, sets: &HashMap<String, SetIr>) {
        let mut i = 0;
        while i < self.rules.len() {
            let mut j = i;
            let mut v4 = Addrs::none(Fam::V4);
            let mut v6 = Addrs::none(Fam::V6);
            let mut pending: Vec<(Fam, Addrs)> = Vec::new();
            while j < self.rules.len() {
                let Some(b) = ban_of(&self.rules[j], family, sets) else {
                    break;
                };
                pending.push(b);
                if pending.len() >= 256 {
                    fold(&mut v4, &mut v6, pending.drain(..));
                }
                j += 1;
            }
            if j - i >= MIN_RUN {
                fold(&mut v4, &mut v6, pending.drain(..));
                self.runs.insert(i, BanRun { end: j, v4, v6 });
                i = j;
            } else {
                i += 1;
            }
        }
        // A run is walked as one step: only its first rule stays in the generic list.
        if !self.runs.is_empty() {
            let mut inside: Vec<(usize, usize)> =
                self.runs.iter().map(|(s, r)| (*s, r.end)).collect();
            inside.sort_unstable();
            self.generic.retain(|i| {
                let k = inside.partition_point(|(s, _)| s < i);
                k == 0 || *i >= inside[k - 1].1
            });
        }
    }
}

/// Unions addresses into the two families' sets, a batch at a time.
fn fold(v4: &mut Addrs, v6: &mut Addrs, items: impl Iterator<Item = (Fam, Addrs)>) {
    let (mut a4, mut a6): (Vec<Addrs>, Vec<Addrs>) = (Vec::new(), Vec::new());
    for (f, a) in items {
        match f {
            Fam::V4 => a4.push(a),
            Fam::V6 => a6.push(a),
        }
    }
    for (acc, list) in [(v4, a4), (v6, a6)] {
        let mut spans: Vec<(u128, u128)> = acc.spans().to_vec();
        for a in &list {
            spans.extend_from_slice(a.spans());
        }
        *acc = Addrs::from_spans(acc.fam, spans);
    }
}

impl ChainIr {
    fn push(&mut self, r: IrRule) {
        let i = self.rules.len();
        match r.port_keys() {
            Some(ports) => {
                for p in ports {
                    self.by_port.entry(p).or_default().push(i);
                }
            }
            None => self.generic.push(i),
        }
        self.rules.push(r);
    }

    /// The rules a connection to `port` can match, in order; every rule when the port is not
    /// known (after a DNAT whose destination is not known).
    pub fn candidates_for(&self, port: Option<u16>) -> impl Iterator<Item = usize> + '_ {
        let (known, every) = match port {
            Some(p) => (Some(self.candidates(p)), None),
            None => (None, Some(0..self.rules.len())),
        };
        known
            .into_iter()
            .flatten()
            .chain(every.into_iter().flatten())
    }

    /// The rules a connection to `port` can match, in order (a run of bans stands as its first
    /// rule), without allocating.
    pub fn candidates(&self, port: u16) -> impl Iterator<Item = usize> + '_ {
        let own: &[usize] = self.by_port.get(&port).map(Vec::as_slice).unwrap_or(&[]);
        let (mut i, mut j) = (0, 0);
        std::iter::from_fn(move || {
            let g = self.generic.get(i).copied();
            let o = own.get(j).copied();
            match (g, o) {
                (Some(a), Some(b)) if a == b => {
                    i += 1;
                    j += 1;
                    Some(a)
                }
                (Some(a), Some(b)) if a < b => {
                    i += 1;
                    Some(a)
                }
                (_, Some(b)) => {
                    j += 1;
                    Some(b)
                }
                (Some(a), None) => {
                    i += 1;
                    Some(a)
                }
                (None, None) => None,
            }
        })
    }
}

/// One table: nf_tables' or a legacy x_tables table.
#[derive(Debug, Clone, Default)]
pub struct TableIr {
    pub family: Option<Family>,
    /// How the operator names it: `inet filter`, `ip filter (iptables-legacy)`.
    pub name: String,
    /// The table's own name.
    pub table: String,
    /// Shared with edited copies until an edit rebuilds one.
    pub chains: HashMap<String, Arc<ChainIr>>,
    /// Shared between a model and its edited copies (a write changes rules, never elements).
    pub sets: Arc<HashMap<String, SetIr>>,
}

/// A base chain: where the walk of a hook starts in a table.
#[derive(Debug, Clone)]
pub struct Base {
    pub table: usize,
    pub chain: String,
    pub hook: Hook,
    pub priority: i32,
    pub policy: Policy,
    pub device: Option<String>,
    pub nat: bool,
    /// The families of connection it sees.
    pub fams: Vec<Fam>,
}

/// The whole found firewall, ready to be walked for any number of connections.
#[derive(Debug, Clone, Default)]
pub struct Model {
    pub tables: Vec<TableIr>,
    pub bases: Vec<Base>,
    /// The ipsets as read once for the model, shared with its edited copies.
    pub ipsets: Arc<Option<Vec<super::ipsets::IpsetIr>>>,
}

/// A memo's lock. A memo holds only what its set gives anyway, so one left by a thread that
/// panicked holding it is still good.
pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Whether a rule carries the mesh's mark (its comment, or an x_tables comment match).
fn marked(r: &crate::netlink::Rule) -> bool {
    crate::rules::listed_mark(r).is_some()
}

/// One table of a save: its name, its chains with their policies (`None` for user chains,
/// which the save prints as `-`), and its rules in order as (chain, spec).
pub type SavedTable = (String, Vec<(String, Option<String>)>, Vec<(String, String)>);

/// Parses `iptables-save` output of one or more tables (`*table` … `COMMIT`), or a rules file in
/// that form (its lines trimmed): the one reader of a save in the crate (detection, the iptables
/// driver's view and its retiring, published ports and the model all read through it). Lines
/// before a `*table` header count as `default_table`'s.
pub fn parse_save(text: &str, default_table: &str) -> Vec<SavedTable> {
    let mut out: Vec<SavedTable> = Vec::new();
    for line in text.lines().map(str::trim) {
        if let Some(t) = line.strip_prefix('*') {
            out.push((t.trim().to_string(), Vec::new(), Vec::new()));
            continue;
        }
        if out.is_empty() && (line.starts_with(':') || line.starts_with("-A ")) {
            out.push((default_table.to_string(), Vec::new(), Vec::new()));
        }
        let Some(t) = out.last_mut() else { continue };
        if let Some(rest) = line.strip_prefix(':') {
            let mut parts = rest.split_whitespace();
            if let Some(chain) = parts.next() {
                let policy = parts.next().filter(|p| *p != "-").map(str::to_string);
                t.1.push((chain.to_string(), policy));
            }
        } else if let Some(rest) = line.strip_prefix("-A ") {
            let (chain, spec) = rest.split_once(' ').unwrap_or((rest, ""));
            t.2.push((chain.to_string(), spec.to_string()));
        }
    }
    out
}

impl Model {
    /// Builds the model of a snapshot. The mesh's own tables (the guard) are part of it: what
    /// decides a connection is everything in the kernel.
    pub fn new(snap: &Snapshot) -> Model {
        let mut m = Model::default();
        let rs = &snap.ruleset;
        let mut index: HashMap<(Family, &str), usize> = HashMap::new();
        for t in &rs.tables {
            index.insert((t.family, t.name.as_str()), m.tables.len());
            m.tables.push(TableIr {
                family: Some(t.family),
                name: format!("{} {}", t.family, t.name),
                table: t.name.clone(),
                ..TableIr::default()
            });
        }
        for s in &rs.sets {
            if let Some(&ti) = index.get(&(s.family, s.table.as_str())) {
                let elems = snap
                    .elements
                    .get(&(s.family, s.table.clone(), s.name.clone()))
                    .map(Vec::as_slice)
                    .unwrap_or(&[]);
                Arc::get_mut(&mut m.tables[ti].sets)
                    .expect("a table's sets are its own while the model is built")
                    .insert(s.name.clone(), SetIr::new(s.flags, elems));
            }
        }
        for c in &rs.chains {
            let Some(&ti) = index.get(&(c.family, c.table.as_str())) else {
                continue;
            };
            m.tables[ti].chains.entry(c.name.clone()).or_default();
            if let Some(h) = &c.hook {
                let fams = match c.family {
                    Family::Ipv4 => vec![Fam::V4],
                    Family::Ipv6 => vec![Fam::V6],
                    Family::Inet | Family::Netdev => vec![Fam::V4, Fam::V6],
                    _ => vec![],
                };
                m.bases.push(Base {
                    table: ti,
                    chain: c.name.clone(),
                    hook: h.hook,
                    priority: h.priority,
                    policy: c.policy.unwrap_or(Policy::Accept),
                    device: h.device.clone(),
                    nat: c.chain_type == Some(ChainType::Nat),
                    fams,
                });
            }
        }
        for r in &rs.rules {
            let Some(&ti) = index.get(&(r.family, r.table.as_str())) else {
                continue;
            };
            let key_len = |set: &str| {
                rs.sets
                    .iter()
                    .find(|s| s.family == r.family && s.table == r.table && s.name == set)
                    .map(|s| s.key_len)
            };
            let items = lower::from_nft(&r.exprs, &key_len);
            let text = ir::RuleText::Nft(r.comment.clone());
            Arc::make_mut(m.tables[ti].chains.entry(r.chain.clone()).or_default()).push(IrRule {
                items,
                handle: r.handle,
                text,
                marked: marked(r),
            });
        }
        for (fam, table, save) in &snap.legacy {
            m.add_legacy(*fam, table, save);
        }
        m.ipsets = Arc::new(snap.ipsets.as_ref().map(|sets| {
            sets.iter()
                .cloned()
                .map(super::ipsets::IpsetIr::new)
                .collect()
        }));
        m.index_runs();
        m
    }

    fn index_runs(&mut self) {
        for t in &mut self.tables {
            let family = t.family;
            let sets = &t.sets;
            for c in t.chains.values_mut() {
                if c.runs.is_empty() {
                    Arc::make_mut(c).index_runs(family, sets);
                }
            }
        }
    }

    /// Adds the tables of one `iptables-legacy-save` of family `fam`.
    pub fn add_legacy(&mut self, fam: Fam, table: &str, save: &str) {
        let tool = match fam {
            Fam::V4 => "iptables-legacy",
            Fam::V6 => "ip6tables-legacy",
        };
        for (table, chains, rules) in parse_save(save, table) {
            let ti = self.tables.len();
            let mut t = TableIr {
                family: None,
                name: format!("{tool} {table}"),
                table: table.clone(),
                ..TableIr::default()
            };
            let names: Vec<String> = chains.iter().map(|(n, _)| n.clone()).collect();
            for (name, policy) in &chains {
                t.chains.entry(name.clone()).or_default();
                if let Some((hook, priority)) = legacy_hook(&table, name) {
                    self.bases.push(Base {
                        table: ti,
                        chain: name.clone(),
                        hook,
                        priority,
                        policy: if policy.as_deref() == Some("DROP") {
                            Policy::Drop
                        } else {
                            Policy::Accept
                        },
                        device: None,
                        nat: table == "nat",
                        fams: vec![fam],
                    });
                }
            }
            for (n, (chain, spec)) in rules.iter().enumerate() {
                let items = legacy::legacy_items(spec, fam, &names);
                let marked = crate::rules::spec_mark(spec).is_some();
                Arc::make_mut(t.chains.entry(chain.clone()).or_default()).push(IrRule {
                    items,
                    handle: n as u64 + 1,
                    text: ir::RuleText::Saved(format!("-A {chain} {spec}")),
                    marked,
                });
            }
            let sets = HashMap::new();
            let family = Some(match fam {
                Fam::V4 => Family::Ipv4,
                Fam::V6 => Family::Ipv6,
            });
            for c in t.chains.values_mut() {
                Arc::make_mut(c).index_runs(family, &sets);
            }
            self.tables.push(t);
        }
    }
}

impl Model {
    /// The destination ports the rules other than the mesh's are about, when of those only the
    /// rules the port index holds read the port: then a walk that skips the mesh's rules, of a
    /// connection to any port outside the set whose port is known, walks exactly as one to any
    /// other port outside it (its candidates are the generic rules alone, and none of them reads
    /// the port), so one walk answers for all of them. `None` when some such rule read for
    /// every port tests it (a range, a negation, a set lookup) or any reads conntrack's ports
    /// or an ipset: then every port is walked for itself.
    pub fn unmarked_named_ports(&self) -> Option<HashSet<u16>> {
        self.named_ports(|r| !r.marked)
    }

    /// The destination ports any rule is about, the mesh's too, when only the rules the port
    /// index holds read the port: then a connection to a port outside the set walks exactly as
    /// one to any other port outside it, so one walk answers for all of them (the check's
    /// answers before a write). `None` as for [`Model::unmarked_named_ports`].
    pub fn named_ports(&self, of: impl Fn(&IrRule) -> bool) -> Option<HashSet<u16>> {
        let mut named = HashSet::new();
        for t in &self.tables {
            for c in t.chains.values() {
                for r in c.rules.iter().filter(|r| of(r)) {
                    if r.reads_port_anyhow() {
                        return None;
                    }
                    if r.reads_port() {
                        named.extend(r.port_keys()?);
                    }
                }
            }
        }
        Some(named)
    }

    /// The table the model names `name`.
    pub fn table(&self, name: &str) -> Option<&TableIr> {
        self.tables.iter().find(|t| t.name == name)
    }

    /// The rules of table `table` that lead to chain `chain`: a jump or goto to it, or a verdict
    /// map with an element that does, as (chain, index), chains in name order.
    pub fn callers(&self, table: &str, chain: &str) -> Vec<(String, usize)> {
        let Some(t) = self.table(table) else {
            return Vec::new();
        };
        let to = |v: &Verdict| matches!(v, Verdict::Jump(c) | Verdict::Goto(c) if c == chain);
        let mut names: Vec<&String> = t.chains.keys().collect();
        names.sort();
        let mut out = Vec::new();
        for name in names {
            for (j, r) in t.chains[name].rules.iter().enumerate() {
                let leads = r.items.iter().any(|it| match it {
                    ir::Item::Act(ir::Act::Jump(c) | ir::Act::Goto(c)) => c == chain,
                    ir::Item::Act(ir::Act::Vmap { set, .. }) => t.sets.get(set).is_some_and(|s| {
                        s.elems.iter().any(|e| e.verdict.as_ref().is_some_and(to))
                    }),
                    _ => false,
                });
                if leads {
                    out.push((name.clone(), j));
                }
            }
        }
        out
    }
}

/// Where a legacy table's built-in chain hooks in, with the priority x_tables registers it at.
fn legacy_hook(table: &str, chain: &str) -> Option<(Hook, i32)> {
    let hook = match chain {
        "PREROUTING" => Hook::Prerouting,
        "INPUT" => Hook::Input,
        "FORWARD" => Hook::Forward,
        "POSTROUTING" => Hook::Postrouting,
        _ => return None,
    };
    let priority = match (table, &hook) {
        ("raw", _) => -300,
        ("mangle", _) => -150,
        ("nat", Hook::Prerouting) => -100,
        ("nat", Hook::Postrouting) => 100,
        ("nat", _) => return None,
        ("filter", _) => 0,
        ("security", _) => 50,
        _ => return None,
    };
    Some((hook, priority))
}
