//! The walk: a new connection, concrete in everything but its source, through every base chain
//! at every hook it crosses, rule by rule, with jumps, gotos, returns, verdict maps, sets and
//! the marks set on its way. A test of the source splits the sources; a test the evaluator
//! cannot decide forks the walk, and where the two branches end differently the answer for
//! those sources is doubtful, naming the rule and what it tests.

use super::addrs::{from_be, Addrs, Fam};
use super::ir::{is_dport, is_orig_dport, Act, Cond, Item, Load, MarkOp, Src, Test, XtFixed};
use super::model::{Base, Model, SetIr, TableIr};
use super::{Conn, Decider, Fate, Outcome, Path, Refusal};
use crate::netlink::Verdict;
use crate::netlink::{CmpOp, CtDirection, CtKey, FibResult, Hook, MetaKey, PayloadBase, Policy};
use std::net::IpAddr;

/// How deep the kernel lets jumps go (NFT_JUMP_STACK_SIZE).
const MAX_DEPTH: usize = 16;
/// How many undecided tests one walk may fork on before it answers doubtful outright.
const MAX_FORKS: usize = 10;

/// A value a load gives for this connection.
#[derive(Debug, Clone)]
enum Val {
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
struct Pkt {
    src: Addrs,
    mark: Option<u32>,
    ctmark: Option<u32>,
    /// The undecided tests taken on this way, and which branch.
    forks: Vec<(usize, bool)>,
    /// A jump on this way was taken because of the source: what refuses it further in is a ban.
    via_source: bool,
    /// The mark (the conntrack mark) was set by a rule that named the port: a later test of
    /// it is about the port (`tcp dport 9000 meta mark set 0x66` … `meta mark 0x66 drop`).
    mark_port: bool,
    ctmark_port: bool,
    trace: Vec<String>,
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
struct At<'a> {
    conn: &'a Conn,
    hook: Hook,
    translated: bool,
}

impl At<'_> {
    fn dport(&self) -> u16 {
        if self.translated {
            self.conn.to_port.unwrap_or(self.conn.port)
        } else {
            self.conn.port
        }
    }
}

pub(super) struct Walker<'m> {
    model: &'m Model,
    /// The undecided tests met, by fork id: the rule and what it tests.
    doubts: Vec<(Decider, String)>,
    trace: bool,
}

impl<'m> Walker<'m> {
    pub(super) fn new(model: &'m Model, trace: bool) -> Walker<'m> {
        Walker {
            model,
            doubts: Vec::new(),
            trace,
        }
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
        let mut parts = vec![self.start(sources)];
        let mut finals: Vec<(Pkt, Fate)> = Vec::new();
        for base in self.bases(conn) {
            let at = At {
                conn,
                hook: base.hook,
                translated: translated(conn, base),
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
        self.resolve(finals)
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
                    self.note(&mut q, &format!("{}: {}", by.place(), by.text));
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

    fn note(&self, p: &mut Pkt, line: &str) {
        if self.trace {
            p.trace.push(line.to_string());
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
        let mut skip_to = 0;
        for i in chain.candidates(at.dport()) {
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
                        rule.text,
                        run.end - i - 1
                    ),
                };
                let mut next_live = Vec::new();
                for mut q in live {
                    let yes = q.src.intersect(banned);
                    if !yes.is_empty() {
                        let mut b = q.clone();
                        b.src = yes.clone();
                        self.note(&mut b, &format!("{}: {} → drop", by.place(), by.text));
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
                text: rule.text.clone(),
            };
            let mut next_live = Vec::new();
            for p in live {
                for (mut q, end) in self.rule(table, &rule.items, at, p, &here) {
                    match end {
                        End::NoMatch => next_live.push(q),
                        End::Doubt(what) => out.push((q, Exit::Doubt(here(), what))),
                        End::Act(act, f) => {
                            if self.trace {
                                q.trace.push(format!(
                                    "{} {}: {} → {}",
                                    table.name,
                                    name,
                                    rule.text,
                                    act_word(&act)
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
            live = next_live;
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
                        Err(why) => out.push((r, Exit::Doubt(here(), why))),
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

    /// Runs a rule's steps over a packet: the parts that reach its verdict and those that do not.
    fn rule(
        &mut self,
        table: &TableIr,
        items: &[Item],
        at: &At<'_>,
        p: Pkt,
        here: &dyn Fn() -> Decider,
    ) -> Vec<(Pkt, End)> {
        let mut done = Vec::new();
        let mut cur = vec![(p, Flags::default())];
        for item in items {
            let mut next = Vec::new();
            for (mut q, f) in cur {
                match item {
                    Item::Cond(c) => match self.cond(table, c, at, &q) {
                        M::All(named) => next.push((
                            q,
                            Flags {
                                port: f.port || named,
                                ..f
                            },
                        )),
                        M::None => done.push((q, End::NoMatch)),
                        M::Some(yes, named) => {
                            let no = q.src.minus(&yes);
                            if !no.is_empty() {
                                let mut n = q.clone();
                                n.src = no;
                                done.push((n, End::NoMatch));
                            }
                            if !yes.is_empty() {
                                q.src = yes;
                                next.push((
                                    q,
                                    Flags {
                                        port: f.port || named,
                                        source: true,
                                    },
                                ));
                            }
                        }
                        M::SourceAll(named) => next.push((
                            q,
                            Flags {
                                port: f.port || named,
                                source: true,
                            },
                        )),
                        M::Unknown(why) => {
                            if q.forks.len() >= MAX_FORKS {
                                done.push((q, End::Doubt(why)));
                                continue;
                            }
                            let id = self.doubts.len();
                            let at = here();
                            if self.trace {
                                q.trace.push(format!(
                                    "{}: {} tests {why}, which cannot be told: followed both ways",
                                    at.place(),
                                    at.text
                                ));
                            }
                            self.doubts.push((at, why));
                            let mut n = q.clone();
                            n.forks.push((id, false));
                            if self.trace {
                                n.trace.push("  (taken as not matching)".into());
                            }
                            done.push((n, End::NoMatch));
                            q.forks.push((id, true));
                            if self.trace {
                                q.trace.push("  (taken as matching)".into());
                            }
                            next.push((q, f));
                        }
                    },
                    Item::Fixed(true, _) => next.push((q, f)),
                    Item::Fixed(false, _) => done.push((q, End::NoMatch)),
                    Item::Mark(op) => {
                        q.mark = self.mark_op(op, q.mark, q.ctmark, at, &q, false);
                        q.mark_port =
                            f.port || (matches!(op, MarkOp::RestoreFromCt { .. }) && q.ctmark_port);
                        next.push((q, f));
                    }
                    Item::CtMark(op) => {
                        q.ctmark = self.mark_op(op, q.ctmark, q.mark, at, &q, true);
                        q.ctmark_port =
                            f.port || (matches!(op, MarkOp::SaveToCt { .. }) && q.mark_port);
                        next.push((q, f));
                    }
                    Item::Act(a) => done.push((q, End::Act(a.clone(), f))),
                }
            }
            cur = next;
            if cur.is_empty() {
                break;
            }
        }
        done.extend(cur.into_iter().map(|(q, _)| (q, End::NoMatch)));
        done
    }

    fn mark_op(
        &self,
        op: &MarkOp,
        own: Option<u32>,
        other: Option<u32>,
        at: &At<'_>,
        q: &Pkt,
        ct: bool,
    ) -> Option<u32> {
        match op {
            MarkOp::Set(l) => match self.load(l, at, q) {
                Val::Bytes(b) if b.len() >= 4 => Some(u32::from_ne_bytes(b[..4].try_into().ok()?)),
                _ => None,
            },
            MarkOp::AndXor { keep, xor } => own.map(|m| (m & keep) ^ xor),
            MarkOp::SaveToCt { ctmask, nfmask } if ct => Some((own? & !ctmask) ^ (other? & nfmask)),
            MarkOp::RestoreFromCt { ctmask, nfmask } if !ct => {
                Some((own? & !nfmask) ^ (other? & ctmask))
            }
            _ => own,
        }
    }

    /// A load's value for this connection at this point of its way.
    fn load(&self, l: &Load, at: &At<'_>, q: &Pkt) -> Val {
        let c = at.conn;
        let v4 = c.fam == Fam::V4;
        let ne32 = |v: u32| Val::Bytes(v.to_ne_bytes().to_vec());
        let name = |n: &str| {
            let mut b = n.as_bytes().to_vec();
            b.resize(16, 0);
            Val::Bytes(b)
        };
        let forwarded = c.path == Path::Forwarded;
        let raw = match &l.src {
            Src::Imm(b) => Val::Bytes(b.clone()),
            Src::Meta(k) => match k {
                MetaKey::L4Proto => Val::Bytes(vec![c.proto]),
                MetaKey::NfProto => Val::Bytes(vec![if v4 { 2 } else { 10 }]),
                MetaKey::Protocol => Val::Bytes(
                    if v4 { 0x0800u16 } else { 0x86ddu16 }
                        .to_be_bytes()
                        .to_vec(),
                ),
                MetaKey::IifName => name(&c.iif),
                MetaKey::OifName => match (at.hook, &c.oif) {
                    (Hook::Forward | Hook::Postrouting, Some(o)) => name(o),
                    (Hook::Forward | Hook::Postrouting, None) => {
                        Val::Unknown("the interface it leaves by".into())
                    }
                    _ => name(""),
                },
                // An interface that does not exist here has an index no rule can name (the
                // kernel resolves `iif NAME` when the rule is added).
                MetaKey::Iif => ne32(c.iif_index.unwrap_or(u32::MAX)),
                MetaKey::Oif => match (at.hook, c.oif_index) {
                    (Hook::Forward | Hook::Postrouting, Some(i)) => ne32(i),
                    (Hook::Forward | Hook::Postrouting, None) => {
                        Val::Unknown("the index of the interface it leaves by".into())
                    }
                    _ => ne32(0),
                },
                MetaKey::Mark => match q.mark {
                    Some(m) => ne32(m),
                    None => Val::Unknown("a mark set on its way".into()),
                },
                // PACKET_HOST: a connection addressed to this machine's own link address.
                MetaKey::PktType => Val::Bytes(vec![0]),
                // ARPHRD_ETHER.
                MetaKey::IifType => Val::Bytes(1u16.to_ne_bytes().to_vec()),
                MetaKey::SecPath => Val::Bytes(vec![0]),
                MetaKey::Sdif => ne32(0),
                MetaKey::SdifName => name(""),
                other => Val::Unknown(format!("meta {}", other.nft_name())),
            },
            Src::Payload { base, offset, len } => {
                let (off, len) = (*offset as usize, *len as usize);
                match base {
                    PayloadBase::Network => {
                        let (s0, d0, proto_at) = if v4 { (12, 16, 9) } else { (8, 24, 6) };
                        let alen = c.fam.len();
                        if off >= s0 && off + len <= s0 + alen {
                            Val::Saddr {
                                off: off - s0,
                                len,
                                mask: None,
                            }
                        } else if off >= d0 && off + len <= d0 + alen {
                            match c.daddr {
                                Some(d) => {
                                    Val::Bytes(ip_bytes(d)[off - d0..off - d0 + len].to_vec())
                                }
                                None => Val::Unknown("the destination address".into()),
                            }
                        } else if off == proto_at && len == 1 {
                            Val::Bytes(vec![c.proto])
                        } else {
                            Val::Unknown(format!("network header bytes {off}..{}", off + len))
                        }
                    }
                    PayloadBase::Transport => match (off, len) {
                        (2, 2) => Val::Bytes(at.dport().to_be_bytes().to_vec()),
                        (13, 1) if c.proto == 6 => Val::Bytes(vec![0x02]),
                        (0, 2) => Val::Unknown("the source port".into()),
                        _ => Val::Unknown(format!("transport header bytes {off}..{}", off + len)),
                    },
                    _ => Val::Unknown(format!("{} header bytes", base.nft_name())),
                }
            }
            Src::Ct { key, dir } => {
                let orig = matches!(dir, None | Some(CtDirection::Original));
                match key {
                    CtKey::State => ne32(8),
                    CtKey::Status => ne32(if forwarded { 0x20 | 0x100 } else { 0 }),
                    CtKey::Mark => match q.ctmark {
                        Some(m) => ne32(m),
                        None => Val::Unknown("a conntrack mark set on its way".into()),
                    },
                    CtKey::Direction => Val::Bytes(vec![0]),
                    CtKey::L3Protocol => Val::Bytes(vec![if v4 { 2 } else { 10 }]),
                    CtKey::Protocol => Val::Bytes(vec![c.proto]),
                    CtKey::ProtoDst if orig && dir.is_some() => {
                        Val::Bytes(c.port.to_be_bytes().to_vec())
                    }
                    CtKey::Src | CtKey::SrcIp | CtKey::SrcIp6 if orig => Val::Saddr {
                        off: 0,
                        len: c.fam.len(),
                        mask: None,
                    },
                    CtKey::Zone => Val::Bytes(vec![0, 0]),
                    other => Val::Unknown(format!("ct {}", other.nft_name())),
                }
            }
            Src::Fib { result, flags } => {
                let saddr = flags & 1 != 0;
                let daddr = flags & 2 != 0;
                match result {
                    FibResult::AddrType if daddr && !saddr => {
                        // RTN_LOCAL for this machine's own address, RTN_UNICAST when routed on.
                        ne32(if forwarded { 1 } else { 2 })
                    }
                    FibResult::AddrType if saddr => ne32(1),
                    // A reverse-path check: a real source is routed back through the
                    // interface it came in by.
                    FibResult::Oif if saddr => ne32(c.iif_index.unwrap_or(2).max(2)),
                    FibResult::OifName if saddr => name(&c.iif),
                    FibResult::OifName if forwarded => match &c.oif {
                        Some(o) => name(o),
                        None => Val::Unknown("the interface it is routed to".into()),
                    },
                    _ => Val::Unknown(format!("fib {}", result.nft_name())),
                }
            }
            Src::XtCtState => ne32(8 | if forwarded { 128 } else { 0 }),
            Src::XtFixed(f) => Val::Bytes(vec![u8::from(fixed(f, c))]),
            Src::Unknown(w) => Val::Unknown(w.clone()),
        };
        apply_mask(raw, l)
    }

    fn cond(&self, table: &TableIr, c: &Cond, at: &At<'_>, q: &Pkt) -> M {
        let vals: Vec<Val> = c.key.iter().map(|l| self.load(l, at, q)).collect();
        let about_port = c.key.len() == 1 && (is_dport(&c.key[0]) || is_orig_dport(&c.key[0]));
        let positive = match &c.test {
            Test::Cmp { op, .. } => *op != CmpOp::Neq,
            Test::Range { neg, .. } | Test::InList { neg, .. } | Test::InSet { neg, .. } => !neg,
        };
        let about_mark = c.key.len() == 1
            && match &c.key[0].src {
                Src::Meta(MetaKey::Mark) => q.mark_port,
                Src::Ct {
                    key: CtKey::Mark, ..
                } => q.ctmark_port,
                _ => false,
            };
        let named = (about_port || about_mark) && positive;
        if let Some(Val::Unknown(why)) = vals.iter().find(|v| matches!(v, Val::Unknown(_))) {
            return M::Unknown(why.clone());
        }
        let fam = at.conn.fam;
        // One part, concrete or the source.
        if vals.len() == 1 {
            match &vals[0] {
                Val::Bytes(b) => {
                    let hit = match &c.test {
                        Test::Cmp { op, data } => cmp_bytes(b, *op, data),
                        Test::Range { neg, lo, hi } => in_range(b, lo, hi) != *neg,
                        Test::InList { neg, ranges } => {
                            ranges.iter().any(|(lo, hi)| in_range(b, lo, hi)) != *neg
                        }
                        Test::InSet { set, neg } => match table.sets.get(set) {
                            Some(s) => set_has(s, std::slice::from_ref(b)) != *neg,
                            None => return M::Unknown(format!("set {set} is not listed")),
                        },
                    };
                    return if hit { M::All(named) } else { M::None };
                }
                Val::Saddr { off, len, mask } => {
                    let addrs = match saddr_set(fam, *off, *len, mask.as_deref(), &c.test, table) {
                        Ok(a) => a,
                        Err(why) => return M::Unknown(why),
                    };
                    let yes = q.src.intersect(&addrs);
                    return if yes.is_empty() {
                        M::None
                    } else if yes == q.src {
                        M::SourceAll(named)
                    } else {
                        M::Some(yes, named)
                    };
                }
                Val::Unknown(_) => unreachable!("handled above"),
            }
        }
        // A concatenation: a set lookup over several parts.
        let Test::InSet { set, neg } = &c.test else {
            return M::Unknown("a comparison of a concatenation".into());
        };
        let Some(s) = table.sets.get(set) else {
            return M::Unknown(format!("set {set} is not listed"));
        };
        match concat_addrs(s, &vals, &c.key, fam) {
            Ok(None) => {
                let parts: Vec<Vec<u8>> = vals
                    .iter()
                    .map(|v| match v {
                        Val::Bytes(b) => b.clone(),
                        _ => Vec::new(),
                    })
                    .collect();
                if set_has(s, &parts) != *neg {
                    M::All(named)
                } else {
                    M::None
                }
            }
            Ok(Some(a)) => {
                let a = if *neg { a.complement() } else { a };
                let yes = q.src.intersect(&a);
                if yes.is_empty() {
                    M::None
                } else if yes == q.src {
                    M::SourceAll(named)
                } else {
                    M::Some(yes, named)
                }
            }
            Err(why) => M::Unknown(why),
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
                push(&mut out, src, fate, p.trace);
            }
        }
        out
    }
}

/// Whether the runtime's DNAT has changed the packet's port by the time `base` runs: after
/// prerouting's destination NAT at priority -100 (a nat chain at -100 is that NAT).
fn translated(conn: &Conn, base: &Base) -> bool {
    conn.path == Path::Forwarded
        && match base.hook {
            Hook::Ingress => false,
            Hook::Prerouting => base.priority > -100 || (base.priority == -100 && !base.nat),
            _ => true,
        }
}

fn push(out: &mut Vec<Outcome>, src: Addrs, fate: Fate, trace: Vec<String>) {
    if let Some(o) = out
        .iter_mut()
        .find(|o| o.fate == fate && o.sources.fam == src.fam)
    {
        o.sources = o.sources.union(&src);
        if o.trace.is_empty() {
            o.trace = trace;
        }
        return;
    }
    out.push(Outcome {
        sources: src,
        fate,
        trace,
    });
}

/// How a condition holds for a packet.
enum M {
    /// For every source; whether it named the port.
    All(bool),
    None,
    /// For these sources only.
    Some(Addrs, bool),
    /// For every source still on this way, by a test of the source (a ban that covers them).
    SourceAll(bool),
    Unknown(String),
}

fn fixed(f: &XtFixed, c: &Conn) -> bool {
    match f {
        XtFixed::AddrType {
            src,
            dst,
            inv_src,
            inv_dst,
        } => {
            // A real source is a unicast address; the destination is local, or routed on.
            let src_type = 2u16;
            let dst_type = if c.path == Path::Forwarded { 2 } else { 4 };
            let s = *src == 0 || ((src_type & src != 0) != *inv_src);
            let d = *dst == 0 || ((dst_type & dst != 0) != *inv_dst);
            s && d
        }
        XtFixed::RpFilter { invert } => !invert,
    }
}

fn apply_mask(v: Val, l: &Load) -> Val {
    let Some((mask, xor)) = &l.mask else {
        return match v {
            Val::Bytes(mut b) => {
                b.truncate(l.len as usize);
                Val::Bytes(b)
            }
            v => v,
        };
    };
    match v {
        Val::Bytes(b) => Val::Bytes(
            b.iter()
                .zip(mask.iter().chain(std::iter::repeat(&0)))
                .zip(xor.iter().chain(std::iter::repeat(&0)))
                .map(|((b, m), x)| (b & m) ^ x)
                .take(l.len as usize)
                .collect(),
        ),
        Val::Saddr {
            off,
            len,
            mask: None,
        } if xor.iter().all(|x| *x == 0) => Val::Saddr {
            off,
            len: len.min(mask.len()),
            mask: Some(mask.clone()),
        },
        Val::Saddr { .. } => Val::Unknown("a source address masked twice or with xor".into()),
        v => v,
    }
}

fn ip_bytes(a: IpAddr) -> Vec<u8> {
    match a {
        IpAddr::V4(v) => v.octets().to_vec(),
        IpAddr::V6(v) => v.octets().to_vec(),
    }
}

fn cmp_bytes(b: &[u8], op: CmpOp, data: &[u8]) -> bool {
    let n = data.len().min(b.len());
    let o = b[..n].cmp(&data[..n]);
    match op {
        CmpOp::Eq => o.is_eq(),
        CmpOp::Neq => o.is_ne(),
        CmpOp::Lt => o.is_lt(),
        CmpOp::Lte => o.is_le(),
        CmpOp::Gt => o.is_gt(),
        CmpOp::Gte => o.is_ge(),
    }
}

fn in_range(b: &[u8], lo: &[u8], hi: &[u8]) -> bool {
    let n = lo.len().min(b.len());
    b[..n] >= lo[..n] && b[..n] <= hi[..n.min(hi.len())]
}

/// Whether a set holds a key given as its parts (each padded to whole registers).
fn set_has(s: &SetIr, parts: &[Vec<u8>]) -> bool {
    let padded: Vec<Vec<u8>> = parts
        .iter()
        .map(|p| {
            let mut p = p.clone();
            if parts.len() > 1 {
                p.resize(p.len().div_ceil(4) * 4, 0);
            }
            p
        })
        .collect();
    let key: Vec<u8> = padded.concat();
    if let Some(exact) = &s.exact {
        if exact.contains_key(&key) {
            return true;
        }
        // A shorter key than stored (a set of ports read as two bytes): compare by prefix.
        if exact.keys().next().is_some_and(|k| k.len() == key.len()) {
            return false;
        }
    }
    s.elems.iter().any(|e| fields_in(e, &padded))
}

/// Whether each part lies in the element's range for its field.
fn fields_in(e: &super::model::SetElem, parts: &[Vec<u8>]) -> bool {
    let mut at = 0;
    for p in parts {
        let end = (at + p.len()).min(e.lo.len());
        let (lo, hi) = (
            &e.lo[at.min(end)..end],
            &e.hi[at.min(end)..end.min(e.hi.len())],
        );
        let n = lo.len();
        if n == 0 || p[..n.min(p.len())] < *lo || p[..n.min(p.len())] > *hi {
            return false;
        }
        at += p.len();
    }
    true
}

/// The sources a test of (part of) the source address holds for.
fn saddr_set(
    fam: Fam,
    off: usize,
    len: usize,
    mask: Option<&[u8]>,
    test: &Test,
    table: &TableIr,
) -> Result<Addrs, String> {
    if off != 0 {
        return Err("a test of the middle of the source address".into());
    }
    let alen = fam.len();
    // The prefix the load and its mask keep.
    let plen = match mask {
        None => len * 8,
        Some(m) => {
            let m = &m[..len.min(m.len())];
            let ones: u32 = m.iter().map(|b| b.count_ones()).sum();
            let is_prefix = m
                .iter()
                .flat_map(|b| (0..8).rev().map(move |i| (b >> i) & 1))
                .skip(ones as usize)
                .all(|bit| bit == 0);
            if !is_prefix {
                return Err("a source address under a mask that is no prefix".into());
            }
            ones as usize
        }
    };
    let widen = |lo: &[u8], hi_fill: u8| -> u128 {
        let mut b = lo[..lo.len().min(len)].to_vec();
        b.resize(alen, hi_fill);
        from_be(&b)
    };
    let prefix_range = |lo: &[u8], hi: &[u8]| Addrs::range(fam, widen(lo, 0), widen(hi, 0xff));
    let whole = plen == len * 8;
    match test {
        Test::Cmp { op, data } => {
            let base = widen(data, 0);
            let net = Addrs::cidr(fam, base, plen as u32);
            // A value with bits past the prefix matches nothing.
            let exact = Addrs::cidr(fam, base, (alen * 8) as u32);
            let fits = net.spans().first().map(|s| s.0) == exact.spans().first().map(|s| s.0);
            match op {
                CmpOp::Eq if fits => Ok(net),
                CmpOp::Eq => Ok(Addrs::none(fam)),
                CmpOp::Neq if fits => Ok(net.complement()),
                CmpOp::Neq => Ok(Addrs::all(fam)),
                _ if whole => {
                    let hi = widen(data, 0xff);
                    Ok(match op {
                        CmpOp::Lt => Addrs::range(fam, 0, base.saturating_sub(1)),
                        CmpOp::Lte => Addrs::range(fam, 0, hi),
                        CmpOp::Gt => Addrs::range(fam, hi.saturating_add(1), fam.max()),
                        _ => Addrs::range(fam, base, fam.max()),
                    })
                }
                _ => Err("an ordering of a masked source address".into()),
            }
        }
        Test::Range { neg, lo, hi } if whole => {
            let r = prefix_range(lo, hi);
            Ok(if *neg { r.complement() } else { r })
        }
        Test::InList { neg, ranges } if whole => {
            let r = ranges.iter().fold(Addrs::none(fam), |a, (lo, hi)| {
                a.union(&prefix_range(lo, hi))
            });
            Ok(if *neg { r.complement() } else { r })
        }
        Test::InSet { set, neg } if whole && len == alen => {
            let s = table
                .sets
                .get(set)
                .ok_or_else(|| format!("set {set} is not listed"))?;
            let r = s.addrs(fam);
            Ok(if *neg { r.complement() } else { r })
        }
        _ => Err("a source address tested in a way this host does not read".into()),
    }
}

/// For a concatenation with the whole source address in it: the sources of the elements whose
/// other parts match. `None` when no part is the source.
fn concat_addrs(s: &SetIr, vals: &[Val], keys: &[Load], fam: Fam) -> Result<Option<Addrs>, String> {
    let Some(at) = vals.iter().position(|v| matches!(v, Val::Saddr { .. })) else {
        return Ok(None);
    };
    if !matches!(vals[at], Val::Saddr { off: 0, len, mask: None } if len == fam.len()) {
        return Err("a part of the source address in a concatenation".into());
    }
    if vals
        .iter()
        .filter(|v| matches!(v, Val::Saddr { .. }))
        .count()
        > 1
    {
        return Err("the source address twice in a concatenation".into());
    }
    let mut acc = Addrs::none(fam);
    for e in &s.elems {
        let mut off = 0;
        let mut ok = true;
        let mut range = None;
        for (i, (v, l)) in vals.iter().zip(keys).enumerate() {
            let w = l.padded() as usize;
            let (lo, hi) = (
                e.lo.get(off..off + w).unwrap_or(&[]),
                e.hi.get(off..off + w).unwrap_or(&[]),
            );
            if i == at {
                range = Some((
                    from_be(&lo[..fam.len().min(lo.len())]),
                    from_be(&hi[..fam.len().min(hi.len())]),
                ));
            } else if let Val::Bytes(b) = v {
                let mut b = b.clone();
                b.resize(w, 0);
                if lo.is_empty() || b.as_slice() < lo || b.as_slice() > hi {
                    ok = false;
                }
            }
            off += w;
        }
        if ok {
            if let Some((lo, hi)) = range {
                acc = acc.union(&Addrs::range(fam, lo, hi));
            }
        }
    }
    Ok(Some(acc))
}

/// The parts of the sources a verdict map sends where: (sources, the verdict or none, whether
/// the key named the port, whether the source decided it).
#[allow(clippy::type_complexity)]
fn vmap_parts(
    s: &SetIr,
    vals: &[Val],
    keys: &[Load],
    q: &Pkt,
    fam: Fam,
) -> Vec<(Addrs, Result<Option<Verdict>, String>, bool, bool)> {
    if let Some(Val::Unknown(why)) = vals.iter().find(|v| matches!(v, Val::Unknown(_))) {
        return vec![(q.src.clone(), Err(why.clone()), false, false)];
    }
    let about_port = keys.len() == 1 && (is_dport(&keys[0]) || is_orig_dport(&keys[0]));
    if vals.iter().all(|v| matches!(v, Val::Bytes(_))) {
        let parts: Vec<Vec<u8>> = vals
            .iter()
            .map(|v| match v {
                Val::Bytes(b) => b.clone(),
                _ => Vec::new(),
            })
            .collect();
        let padded: Vec<Vec<u8>> = parts
            .iter()
            .map(|p| {
                let mut p = p.clone();
                if parts.len() > 1 {
                    p.resize(p.len().div_ceil(4) * 4, 0);
                }
                p
            })
            .collect();
        let hit = s.elems.iter().find(|e| fields_in(e, &padded));
        return vec![(
            q.src.clone(),
            Ok(hit.and_then(|e| e.verdict.clone())),
            about_port && hit.is_some(),
            false,
        )];
    }
    if vals.len() != 1 {
        return vec![(
            q.src.clone(),
            Err("a verdict map keyed on the source with other parts".into()),
            false,
            false,
        )];
    }
    // A map keyed on the source: each element's sources go its own way.
    let mut out = Vec::new();
    let mut rest = q.src.clone();
    for e in &s.elems {
        let a = Addrs::range(
            fam,
            from_be(&e.lo[..fam.len().min(e.lo.len())]),
            from_be(&e.hi[..fam.len().min(e.hi.len())]),
        );
        let part = rest.intersect(&a);
        if part.is_empty() {
            continue;
        }
        rest = rest.minus(&part);
        out.push((part, Ok(e.verdict.clone()), false, true));
    }
    if !rest.is_empty() {
        out.push((rest, Ok(None), false, false));
    }
    out
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

fn act_word(a: &Act) -> String {
    match a {
        Act::Accept => "accept".into(),
        Act::Drop => "drop".into(),
        Act::Jump(c) => format!("jump {c}"),
        Act::Goto(c) => format!("goto {c}"),
        Act::Return => "return".into(),
        Act::Continue => "continue".into(),
        Act::Vmap { set, .. } => format!("verdict map {set}"),
        Act::Nat => "nat (accepted)".into(),
        Act::Unknown(w) => w.clone(),
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
