//! The walk: a new connection, concrete in everything but its source, through every base chain
//! at every hook it crosses, rule by rule, with jumps, gotos, returns, verdict maps, sets and
//! the marks set on its way. A test of the source splits the sources; a test the evaluator
//! cannot decide forks the walk, and where the two branches end differently the answer for
//! those sources is doubtful, naming the rule and what it tests.

use super::addrs::{Addrs, Fam};
use super::ir::{Act, Item, MarkOp};
use super::model::{Base, Model, TableIr};
use super::values::vmap_parts;

mod rule;
use super::{Branch, Conn, Decider, Fate, Outcome, Path, Refusal};
use crate::netlink::Verdict;
use crate::netlink::{Hook, Policy};

/// How deep the kernel lets jumps go (NFT_JUMP_STACK_SIZE).
const MAX_DEPTH: usize = 16;
/// How many undecided tests one walk may fork on before it answers doubtful outright.
const MAX_FORKS: usize = 10;

/// A value a load gives for this connection.
#[derive(Debug, Clone)]
pub(super) enum Val {
    Bytes(Vec<u8>),
    /// Bytes `off..off + len` of the source address, masked.
    Saddr {
        off: usize,
        len: usize,
        mask: Option<Vec<u8>>,
    },
    Unknown(String),
}

/// The connection's packet as it goes: the sources still on this way and what was set on it.
#[derive(Debug, Clone)]
pub(super) struct Pkt {
    pub(super) src: Addrs,
    pub(super) mark: Option<u32>,
    pub(super) ctmark: Option<u32>,
    /// The undecided tests taken on this way, and which branch.
    pub(super) forks: Vec<(usize, bool)>,
    /// A jump on this way was taken because of the source: what refuses it further in is a ban.
    pub(super) via_source: bool,
    /// The mark (the conntrack mark) was set by a rule that named the port: a later test of
    /// it is about the port (`tcp dport 9000 meta mark set 0x66` … `meta mark 0x66 drop`).
    pub(super) mark_port: bool,
    pub(super) ctmark_port: bool,
    pub(super) trace: Vec<String>,
    /// The limits met on the way (rules that refuse past a rate or a count), in order.
    pub(super) limits: Vec<Decider>,
    /// The sets a `dynset` on the way added to or updated: a later lookup in one of them by
    /// this packet cannot be told from its listed elements.
    pub(super) changed: Vec<String>,
    /// A `notrack` ahead of conntrack took the connection out of tracking.
    pub(super) untracked: bool,
}

/// How a rule ends for a packet.
enum End {
    NoMatch,
    Act(Act, Flags),
    Doubt(String),
}

#[derive(Debug, Clone, Copy, Default)]
struct Flags {
    /// A test named the connection's port positively (equal, in a range, a set or a map).
    port: bool,
    /// A test of the source decided the match.
    source: bool,
}

/// How a chain ends for a packet.
enum Exit {
    Accept,
    Drop(Decider, Flags),
    /// Off the end or `return`: the caller goes on (a base chain's policy decides).
    Fall,
    Doubt(Decider, String),
}

/// Where the walk is: the connection, the base chain's hook and whether DNAT has happened.
pub(super) struct At<'a> {
    pub(super) conn: &'a Conn,
    pub(super) hook: Hook,
    pub(super) translated: bool,
    /// The base chain's priority: a `notrack` works only ahead of conntrack (-200).
    pub(super) priority: i32,
}

impl At<'_> {
    /// The destination port the packet carries here: the published port until the runtime's
    /// DNAT, the port it translates to after; `None` after a DNAT whose destination is not known
    /// (a forwarded opening that nothing publishes yet), where a test of it is undecided.
    pub(super) fn dport(&self) -> Option<u16> {
        if self.translated {
            self.conn.to_port
        } else {
            Some(self.conn.port)
        }
    }
}

pub(super) struct Walker<'m> {
    pub(super) model: &'m Model,
    /// The undecided tests met, by fork id: the rule and what it tests.
    doubts: Vec<(Decider, String)>,
    trace: bool,
    /// Each branch of an undecided test kept with its own end beside the doubtful part, for
    /// placement: where one branch is refused by default, the opening's rule goes ahead of that
    /// refusal, whatever the other branch does.
    branches: bool,
}

impl<'m> Walker<'m> {
    pub(super) fn new(model: &'m Model, trace: bool) -> Walker<'m> {
        Walker {
            model,
            doubts: Vec::new(),
            trace,
            branches: false,
        }
    }

    /// The same walker, answering each branch of an undecided test as well (see `branches`).
    pub(super) fn with_branches(mut self) -> Walker<'m> {
        self.branches = true;
        self
    }

    /// The base chains the connection crosses, in the kernel's order.
    fn bases(&self, conn: &Conn) -> Vec<&'m Base> {
        let hooks: &[Hook] = match conn.path {
            Path::Incoming => &[Hook::Ingress, Hook::Prerouting, Hook::Input],
            Path::Forwarded => &[
                Hook::Ingress,
                Hook::Prerouting,
                Hook::Forward,
                Hook::Postrouting,
            ],
        };
        let mut out: Vec<(usize, &Base)> = Vec::new();
        for b in &self.model.bases {
            let Some(h) = hooks.iter().position(|h| *h == b.hook) else {
                continue;
            };
            if !b.fams.contains(&conn.fam) {
                continue;
            }
            if b.hook == Hook::Ingress && b.device.as_deref().is_some_and(|d| d != conn.iif) {
                continue;
            }
            out.push((h, b));
        }
        out.sort_by_key(|(h, b)| (*h, b.priority));
        out.into_iter().map(|(_, b)| b).collect()
    }

    /// The whole path: every base chain in order, each one's accept ending only itself.
    pub(super) fn run(&mut self, conn: &Conn, sources: &Addrs) -> Vec<Outcome> {
        let finals = self.finals(conn, sources);
        self.resolve(finals)
    }

    /// Every way of the whole path apart, each with the undecided tests it took and which way:
    /// the check compares a doubtful answer branch by branch.
    pub(super) fn branches(&mut self, conn: &Conn, sources: &Addrs) -> Vec<Branch> {
        let finals = self.finals(conn, sources);
        finals
            .into_iter()
            .map(|(p, fate)| Branch {
                sources: p.src,
                fate,
                limits: p.limits,
                forks: p
                    .forks
                    .iter()
                    .map(|(id, way)| (self.doubts[*id].0.clone(), *way))
                    .collect(),
            })
            .collect()
    }

    fn finals(&mut self, conn: &Conn, sources: &Addrs) -> Vec<(Pkt, Fate)> {
        let mut parts = vec![self.start(sources)];
        let mut finals: Vec<(Pkt, Fate)> = Vec::new();
        for base in self.bases(conn) {
            let at = At {
                conn,
                hook: base.hook,
                translated: translated(conn, base),
                priority: base.priority,
            };
            let mut next = Vec::new();
            for mut p in parts {
                if self.trace {
                    let t = &self.model.tables[base.table];
                    p.trace.push(format!(
                        "hook {}: {} {} (priority {}, policy {})",
                        hook_word(&base.hook),
                        t.name,
                        base.chain,
                        base.priority,
                        policy_word(base.policy)
                    ));
                }
                self.base_chain(base, &at, p, &mut next, &mut finals);
            }
            parts = next;
            if parts.is_empty() {
                break;
            }
        }
        for p in parts {
            finals.push((p, Fate::Admitted));
        }
        finals
    }

    /// One base chain alone, for placement: how its walk ends for each part of the sources.
    pub(super) fn run_base(
        &mut self,
        base: &Base,
        conn: &Conn,
        sources: &Addrs,
        skip_marked: bool,
    ) -> Vec<Outcome> {
        let at = At {
            conn,
            hook: base.hook,
            translated: translated(conn, base),
            priority: base.priority,
        };
        // The packet as it arrives here: through the base chains before this one, where what
        // a catch-all would refuse goes on (the opening's rule admits it there) and what the
        // operator refuses stops; marks set on the way are kept.
        let mut parts = vec![self.start(sources)];
        for before in self.bases(conn) {
            if std::ptr::eq(before, base) {
                break;
            }
            let at = At {
                conn,
                hook: before.hook,
                translated: translated(conn, before),
                priority: before.priority,
            };
            let table = &self.model.tables[before.table];
            let mut next = Vec::new();
            for p in parts {
                for (mut q, e) in self.chain(table, &before.chain, &at, p, 0, skip_marked) {
                    q.via_source = false;
                    match e {
                        Exit::Drop(_, f) if f.source || f.port => {}
                        _ => next.push(q),
                    }
                }
            }
            parts = next;
        }
        let mut next = Vec::new();
        let mut finals = Vec::new();
        let table = &self.model.tables[base.table];
        for p in parts {
            let exits = self.chain(table, &base.chain, &at, p, 0, skip_marked);
            self.settle(base, exits, &mut next, &mut finals);
        }
        for p in next {
            finals.push((p, Fate::Admitted));
        }
        self.resolve(finals)
    }

    fn start(&self, sources: &Addrs) -> Pkt {
        Pkt {
            src: sources.clone(),
            mark: Some(0),
            ctmark: Some(0),
            forks: Vec::new(),
            via_source: false,
            mark_port: false,
            ctmark_port: false,
            trace: Vec::new(),
            limits: Vec::new(),
            changed: Vec::new(),
            untracked: false,
        }
    }

    fn base_chain(
        &mut self,
        base: &Base,
        at: &At<'_>,
        p: Pkt,
        next: &mut Vec<Pkt>,
        finals: &mut Vec<(Pkt, Fate)>,
    ) {
        let table = &self.model.tables[base.table];
        let exits = self.chain(table, &base.chain, at, p, 0, false);
        self.settle(base, exits, next, finals);
    }

    fn settle(
        &mut self,
        base: &Base,
        exits: Vec<(Pkt, Exit)>,
        next: &mut Vec<Pkt>,
        finals: &mut Vec<(Pkt, Fate)>,
    ) {
        let table = &self.model.tables[base.table];
        for (mut q, e) in exits {
            q.via_source = false;
            match e {
                Exit::Accept => next.push(q),
                Exit::Fall if base.policy == Policy::Accept => next.push(q),
                Exit::Fall => {
                    let by = Decider {
                        table: table.name.clone(),
                        chain: base.chain.clone(),
                        handle: None,
                        index: None,
                        text: format!("policy {}", policy_word(base.policy)),
                    };
                    if self.trace {
                        q.trace.push(format!("{}: {}", by.place(), by.text));
                    }
                    finals.push((q, Fate::NotAdmitted { by }));
                }
                Exit::Drop(by, f) => {
                    let fate = if f.source {
                        Fate::Refused {
                            by,
                            why: Refusal::Ban,
                        }
                    } else if f.port {
                        Fate::Refused {
                            by,
                            why: Refusal::Port,
                        }
                    } else {
                        Fate::NotAdmitted { by }
                    };
                    finals.push((q, fate));
                }
                Exit::Doubt(by, what) => finals.push((q, Fate::Doubtful { by, what })),
            }
        }
    }

    fn chain(
        &mut self,
        table: &'m TableIr,
        name: &str,
        at: &At<'_>,
        p: Pkt,
        depth: usize,
        skip_marked: bool,
    ) -> Vec<(Pkt, Exit)> {
        let mut out = Vec::new();
        let Some(chain) = table.chains.get(name) else {
            let by = Decider {
                table: table.name.clone(),
                chain: name.to_string(),
                handle: None,
                index: None,
                text: "a chain that is not listed".into(),
            };
            out.push((
                p,
                Exit::Doubt(by, format!("chain {name} could not be read")),
            ));
            return out;
        };
        let mut live = vec![p];
        let mut spare = Vec::new();
        let mut skip_to = 0;
        for i in chain.candidates_for(at.dport()) {
            if i < skip_to {
                continue;
            }
            let rule = &chain.rules[i];
            if let Some(run) = chain.runs.get(&i) {
                // A blocklist written as rules: one step for all of them.
                skip_to = run.end;
                let banned = match at.conn.fam {
                    Fam::V4 => &run.v4,
                    Fam::V6 => &run.v6,
                };
                let by = Decider {
                    table: table.name.clone(),
                    chain: name.to_string(),
                    handle: Some(rule.handle),
                    index: Some(i),
                    text: format!(
                        "{} and the {} ban rules after it",
                        rule.text(),
                        run.end - i - 1
                    ),
                };
                let mut next_live = Vec::new();
                for mut q in live {
                    let yes = q.src.intersect(banned);
                    if !yes.is_empty() {
                        let mut b = q.clone();
                        b.src = yes.clone();
                        if self.trace {
                            b.trace.push(format!("{}: {} → drop", by.place(), by.text));
                        }
                        out.push((
                            b,
                            Exit::Drop(
                                by.clone(),
                                Flags {
                                    port: false,
                                    source: true,
                                },
                            ),
                        ));
                        q.src = q.src.minus(&yes);
                    }
                    if !q.src.is_empty() {
                        next_live.push(q);
                    }
                }
                live = next_live;
                if live.is_empty() {
                    break;
                }
                continue;
            }
            if skip_marked && rule.marked {
                continue;
            }
            let here = || Decider {
                table: table.name.clone(),
                chain: name.to_string(),
                handle: Some(rule.handle),
                index: Some(i),
                text: rule.text(),
            };
            let mut next_live = std::mem::take(&mut spare);
            for p in live.drain(..) {
                let forked = p.forks.len();
                for (mut q, end) in self.rule(table, &rule.items, at, p, &here) {
                    match end {
                        End::NoMatch => next_live.push(q),
                        End::Doubt(what) => out.push((q, Exit::Doubt(here(), what))),
                        End::Act(act, mut f) => {
                            // A refusal behind a test that could not be decided (`-m set`, a
                            // `recent` list) refuses particular connections, not all: the
                            // operator's word, which no opening is written ahead of.
                            if q.forks[forked..].iter().any(|(_, taken)| *taken) {
                                f.source = true;
                            }
                            if self.trace {
                                q.trace.push(format!(
                                    "{} {}: {} → {}",
                                    table.name,
                                    name,
                                    rule.text(),
                                    super::ir::act_text(&act)
                                ));
                            }
                            self.act(
                                table,
                                act,
                                f,
                                at,
                                q,
                                depth,
                                skip_marked,
                                &here,
                                &mut next_live,
                                &mut out,
                            )
                        }
                    }
                }
            }
            spare = std::mem::replace(&mut live, next_live);
            if live.is_empty() {
                break;
            }
        }
        out.extend(live.into_iter().map(|p| (p, Exit::Fall)));
        out
    }

    #[allow(clippy::too_many_arguments)]
    fn act(
        &mut self,
        table: &'m TableIr,
        act: Act,
        f: Flags,
        at: &At<'_>,
        mut q: Pkt,
        depth: usize,
        skip_marked: bool,
        here: &dyn Fn() -> Decider,
        next_live: &mut Vec<Pkt>,
        out: &mut Vec<(Pkt, Exit)>,
    ) {
        match act {
            Act::Accept | Act::Nat => out.push((q, Exit::Accept)),
            Act::Drop => out.push((
                q.clone(),
                Exit::Drop(
                    here(),
                    Flags {
                        port: f.port,
                        source: f.source || q.via_source,
                    },
                ),
            )),
            Act::Continue => next_live.push(q),
            Act::Return => out.push((q, Exit::Fall)),
            Act::Jump(c) | Act::Goto(c) if depth >= MAX_DEPTH => out.push((
                q,
                Exit::Doubt(here(), format!("jumps deeper than {MAX_DEPTH} to {c}")),
            )),
            Act::Jump(c) => {
                let saved = q.via_source;
                q.via_source |= f.source;
                for (mut r, e) in self.chain(table, &c, at, q, depth + 1, skip_marked) {
                    match e {
                        Exit::Fall => {
                            r.via_source = saved;
                            next_live.push(r);
                        }
                        e => out.push((r, e)),
                    }
                }
            }
            Act::Goto(c) => {
                q.via_source |= f.source;
                out.extend(self.chain(table, &c, at, q, depth + 1, skip_marked));
            }
            Act::Vmap { key, set } => {
                let Some(s) = table.sets.get(&set) else {
                    out.push((
                        q,
                        Exit::Doubt(here(), format!("verdict map {set} is not listed")),
                    ));
                    return;
                };
                let vals: Vec<Val> = key.iter().map(|l| self.load(l, at, &q)).collect();
                for (part, verdict, named, by_src) in vmap_parts(s, &vals, &key, &q, at.conn.fam) {
                    let mut r = q.clone();
                    r.src = part;
                    let f2 = Flags {
                        port: f.port || named,
                        source: f.source || by_src,
                    };
                    match verdict {
                        Err(why) => out.push((r, Exit::Doubt(here(), why.to_string()))),
                        Ok(None) => next_live.push(r),
                        Ok(Some(v)) => {
                            let act = verdict_act(&v);
                            self.act(
                                table,
                                act,
                                f2,
                                at,
                                r,
                                depth,
                                skip_marked,
                                here,
                                next_live,
                                out,
                            )
                        }
                    }
                }
            }
            Act::Unknown(what) => out.push((q, Exit::Doubt(here(), what))),
        }
    }

    /// Where forks disagree the answer is doubtful; elsewhere it is what every branch said.
    fn resolve(&self, finals: Vec<(Pkt, Fate)>) -> Vec<Outcome> {
        let mut doubtful: Vec<(Addrs, usize)> = Vec::new();
        for (i, (a, fa)) in finals.iter().enumerate() {
            for (b, fb) in finals.iter().skip(i + 1) {
                if a.src.fam != b.src.fam || fa.same(fb) {
                    continue;
                }
                let both = a.src.intersect(&b.src);
                if both.is_empty() {
                    continue;
                }
                let fork = a
                    .forks
                    .iter()
                    .find(|f| !b.forks.contains(f))
                    .or(a.forks.first())
                    .map(|f| f.0);
                if let Some(id) = fork {
                    doubtful.push((both, id));
                }
            }
        }
        let mut out: Vec<Outcome> = Vec::new();
        let mut taken: Option<Addrs> = None;
        if self.branches {
            for (d, id) in doubtful {
                let (by, what) = self.doubts[id].clone();
                push(&mut out, d, Fate::Doubtful { by, what }, Vec::new());
            }
            for (p, fate) in finals {
                push_limited(&mut out, p.src, fate, p.trace, p.limits);
            }
            return out;
        }
        for (d, id) in doubtful {
            let d = match &taken {
                Some(t) => d.minus(t),
                None => d,
            };
            if d.is_empty() {
                continue;
            }
            taken = Some(match taken {
                Some(t) => t.union(&d),
                None => d.clone(),
            });
            let (by, what) = self.doubts[id].clone();
            push(&mut out, d, Fate::Doubtful { by, what }, Vec::new());
        }
        for (p, fate) in finals {
            let src = match &taken {
                Some(t) => p.src.minus(t),
                None => p.src,
            };
            if !src.is_empty() {
                push_limited(&mut out, src, fate, p.trace, p.limits);
            }
        }
        out
    }
}

/// Whether the runtime's DNAT has changed the packet's port by the time `base` runs: after
/// prerouting's destination NAT at priority -100 (a nat chain at -100 is that NAT).
fn translated(conn: &Conn, base: &Base) -> bool {
    conn.path == Path::Forwarded
        && !conn.routed
        && match base.hook {
            Hook::Ingress => false,
            Hook::Prerouting => base.priority > -100 || (base.priority == -100 && !base.nat),
            _ => true,
        }
}

/// Adds a part, merged with one of the same fate (and, when traced, the same way: `explain`
/// names for each part the rules that decided it, never another part's).
fn push(out: &mut Vec<Outcome>, src: Addrs, fate: Fate, trace: Vec<String>) {
    push_limited(out, src, fate, trace, Vec::new())
}

/// Adds a part, merged with one of the same fate, the same limits met on the way and, when
/// traced, the same way.
fn push_limited(
    out: &mut Vec<Outcome>,
    src: Addrs,
    fate: Fate,
    trace: Vec<String>,
    limits: Vec<Decider>,
) {
    if let Some(o) = out.iter_mut().find(|o| {
        o.fate == fate && o.sources.fam == src.fam && o.limits == limits && o.trace == trace
    }) {
        o.sources = o.sources.union(&src);
        return;
    }
    out.push(Outcome {
        sources: src,
        fate,
        trace,
        limits,
    });
}

/// How a condition holds for a packet.
pub(super) enum M {
    /// For every source; whether it named the port.
    All(bool),
    None,
    /// For these sources only.
    Some(Addrs, bool),
    /// For every source still on this way, by a test of the source (a ban that covers them).
    SourceAll(bool),
    Unknown(String),
}

fn verdict_act(v: &Verdict) -> Act {
    match v {
        Verdict::Accept => Act::Accept,
        Verdict::Drop => Act::Drop,
        Verdict::Jump(c) => Act::Jump(c.clone()),
        Verdict::Goto(c) => Act::Goto(c.clone()),
        Verdict::Return => Act::Return,
        Verdict::Continue | Verdict::Break => Act::Continue,
        other => Act::Unknown(format!("verdict code {}", other.code())),
    }
}

fn hook_word(h: &Hook) -> String {
    match h {
        Hook::Ingress => "ingress".into(),
        Hook::Prerouting => "prerouting".into(),
        Hook::Input => "input".into(),
        Hook::Forward => "forward".into(),
        Hook::Postrouting => "postrouting".into(),
        other => format!("{other:?}").to_lowercase(),
    }
}

fn policy_word(p: Policy) -> &'static str {
    match p {
        Policy::Drop => "drop",
        Policy::Accept => "accept",
        Policy::Other(_) => "of an unknown kind",
    }
}
