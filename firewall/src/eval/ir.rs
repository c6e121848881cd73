//! The evaluator's rules: what a rule loads, tests, changes and decides, in the order the kernel
//! runs it, read from nf_tables expressions (native rules and iptables-nft's x_tables matches)
//! by following the registers, so a test knows which field of the packet it is about.

use crate::netlink::consts::{NFT_LOOKUP_F_INV, NFT_REG_VERDICT};
use crate::netlink::{CmpOp, CtDirection, CtKey, Expr, FibResult, ImmediateData, MetaKey};
use crate::netlink::{PayloadBase, Verdict};
use std::collections::HashMap;

/// Where a register's value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Src {
    Meta(MetaKey),
    Payload {
        base: PayloadBase,
        offset: u32,
        len: u32,
    },
    Ct {
        key: CtKey,
        dir: Option<CtDirection>,
    },
    Fib {
        result: FibResult,
        flags: u32,
    },
    /// A constant (`immediate`).
    Imm(Vec<u8>),
    /// x_tables' view of the connection's state: `1 << (ctinfo + 1)`, with DNAT and SNAT bits.
    XtCtState,
    /// A condition x_tables decides that the evaluator computes from the connection:
    /// `addrtype`, `rpfilter`.
    XtFixed(XtFixed),
    /// Something the evaluator does not read (a socket, a route, a hash, an extension header).
    Unknown(String),
}

/// x_tables matches decided from the connection's path alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum XtFixed {
    /// `-m addrtype`: the masks of address types (0 = any) and their inversions.
    AddrType {
        src: u16,
        dst: u16,
        inv_src: bool,
        inv_dst: bool,
    },
    /// `-m rpfilter [--invert]`: the reverse path is valid for a real source.
    RpFilter { invert: bool },
}

/// A value loaded into registers, maybe masked (`bitwise`: `(v & mask) ^ xor`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Load {
    pub src: Src,
    pub len: u32,
    pub mask: Option<(Vec<u8>, Vec<u8>)>,
}

impl Load {
    pub fn new(src: Src, len: u32) -> Load {
        Load {
            src,
            len,
            mask: None,
        }
    }

    /// The bytes the load takes in a concatenation (each part padded to whole registers).
    pub fn padded(&self) -> u32 {
        self.len.div_ceil(4) * 4
    }
}

/// What a condition checks of its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Test {
    Cmp {
        op: CmpOp,
        data: Vec<u8>,
    },
    /// `range` and x_tables port ranges: `lo ≤ key ≤ hi` (memcmp order), or not.
    Range {
        neg: bool,
        lo: Vec<u8>,
        hi: Vec<u8>,
    },
    /// A list of ranges written in the rule itself (x_tables `multiport`, iptables-save's).
    InList {
        neg: bool,
        ranges: Vec<(Vec<u8>, Vec<u8>)>,
    },
    /// A lookup in a set of the rule's table, by name.
    InSet {
        set: String,
        neg: bool,
    },
}

/// One condition: a key (one load, or several for a concatenation) and its test.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cond {
    pub key: Vec<Load>,
    pub test: Test,
}

/// How a mark changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MarkOp {
    /// `meta mark set V` / `ct mark set V`: the value of a load (a constant, the other mark, …).
    Set(Load),
    /// `new = (old & keep) ^ xor`, as x_tables' MARK and CONNMARK --set-xmark write it.
    AndXor { keep: u32, xor: u32 },
    /// CONNMARK --save-mark: `ct = (ct & !ctmask) ^ (mark & nfmask)`.
    SaveToCt { ctmask: u32, nfmask: u32 },
    /// CONNMARK --restore-mark: `mark = (mark & !nfmask) ^ (ct & ctmask)`.
    RestoreFromCt { ctmask: u32, nfmask: u32 },
}

/// What a rule decides when the packet reaches its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Act {
    Accept,
    /// `drop`, `reject`, `-j DROP`, `-j REJECT`.
    Drop,
    Jump(String),
    Goto(String),
    Return,
    /// No verdict: the packet goes on to the next rule.
    Continue,
    /// `… vmap @set` / `vmap { … }`: the verdict an element of the map gives for the key.
    Vmap {
        key: Vec<Load>,
        set: String,
    },
    /// A NAT statement (`dnat`, `masquerade`, `-j DNAT`): the packet leaves this base chain
    /// accepted.
    Nat,
    /// A verdict the evaluator cannot follow (queue, an unknown target): the packet may go.
    Unknown(String),
}

/// One step of a rule, in the kernel's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    Cond(Cond),
    /// A match that holds or not whatever the connection (`limit`, `quota`, `ct count`,
    /// x_tables' connlimit): for one new connection from a source not flooding, its answer.
    Fixed(bool, &'static str),
    Mark(MarkOp),
    CtMark(MarkOp),
    Act(Act),
}

/// A rule of a chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IrRule {
    pub items: Vec<Item>,
    /// The nf_tables handle, or the line's position in a save for legacy tables.
    pub handle: u64,
    /// How it is shown: a legacy rule's spec as saved; for nf_tables, its comment (the rule is
    /// put in words from its steps only when it decides something).
    pub text: RuleText,
    /// Carries the mesh's mark.
    pub marked: bool,
}

/// How a rule is shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleText {
    /// As iptables-save printed it.
    Saved(String),
    /// An nf_tables rule, with its comment.
    Nft(Option<String>),
}

impl IrRule {
    /// The rule as a person reads it: `handle 7: meta l4proto 6 th dport 22 accept comment "…"`.
    pub fn text(&self) -> String {
        match &self.text {
            RuleText::Saved(s) => s.clone(),
            RuleText::Nft(None) => format!("handle {}: {}", self.handle, render(&self.items)),
            RuleText::Nft(Some(c)) => format!(
                "handle {}: {} comment \"{c}\"",
                self.handle,
                render(&self.items)
            ),
        }
    }

    /// The destination ports the rule is about when its first port test is a plain equality
    /// or a short literal set: the index the walk uses to skip rules that cannot match.
    pub fn port_keys(&self) -> Option<Vec<u16>> {
        for it in &self.items {
            let Item::Cond(c) = it else { continue };
            if c.key.len() != 1 || !is_dport(&c.key[0]) {
                continue;
            }
            return match &c.test {
                Test::Cmp {
                    op: CmpOp::Eq,
                    data,
                } if data.len() == 2 => Some(vec![u16::from_be_bytes([data[0], data[1]])]),
                // `--dport 9000` reads as the range 9000:9000.
                Test::Range { neg: false, lo, hi } => {
                    let (lo, hi) = (be16(lo)?, be16(hi)?);
                    (hi >= lo && hi - lo <= 64).then(|| (lo..=hi).collect())
                }
                Test::InList { neg: false, ranges } if ranges.len() <= 16 => {
                    let mut ports = Vec::new();
                    for (lo, hi) in ranges {
                        let (lo, hi) = (be16(lo)?, be16(hi)?);
                        // A reversed range (8200:8100) holds no port; it is no list of them.
                        if hi < lo || hi - lo > 64 {
                            return None;
                        }
                        ports.extend(lo..=hi);
                    }
                    Some(ports)
                }
                _ => None,
            };
        }
        None
    }
}

fn be16(b: &[u8]) -> Option<u16> {
    Some(u16::from_be_bytes(b.get(..2)?.try_into().ok()?))
}

/// Whether a load is the packet's destination port.
pub fn is_dport(l: &Load) -> bool {
    l.mask.is_none()
        && matches!(
            l.src,
            Src::Payload {
                base: PayloadBase::Transport,
                offset: 2,
                len: 2
            }
        )
}

/// Whether a load is the connection's original destination port.
pub fn is_orig_dport(l: &Load) -> bool {
    l.mask.is_none()
        && matches!(
            l.src,
            Src::Ct {
                key: CtKey::ProtoDst,
                dir: Some(CtDirection::Original)
            }
        )
}

/// The 32-bit register slot a register number names (NFT_REG_1..4 are 16 bytes wide and
/// overlay the 32-bit ones).
fn slot(reg: u32) -> u32 {
    if reg <= 4 {
        reg * 4
    } else {
        reg - 8 + 4
    }
}

/// The set names and key lengths of a rule's table, for lookups spanning several registers.
pub type KeyLens<'a> = &'a dyn Fn(&str) -> Option<u32>;

/// Reads a listed nf_tables rule into steps by following its registers.
pub fn from_nft(exprs: &[Expr], key_len: KeyLens<'_>) -> Vec<Item> {
    let mut regs: HashMap<u32, Load> = HashMap::new();
    let mut items = Vec::new();
    let mut last_unknown = String::from("an expression this host does not read");
    let load_at = |regs: &HashMap<u32, Load>, reg: u32, why: &str| -> Load {
        regs.get(&slot(reg))
            .cloned()
            .unwrap_or_else(|| Load::new(Src::Unknown(why.to_string()), 4))
    };
    let concat = |regs: &HashMap<u32, Load>, reg: u32, len: Option<u32>, why: &str| {
        let first = load_at(regs, reg, why);
        let Some(total) = len else {
            return vec![first];
        };
        let mut out = Vec::new();
        let mut at = slot(reg);
        let mut got = 0;
        while got < total {
            let l = regs
                .get(&at)
                .cloned()
                .unwrap_or_else(|| Load::new(Src::Unknown(why.to_string()), 4));
            got += l.padded().max(4);
            at += l.padded().max(4) / 4;
            out.push(l);
        }
        if out.len() == 1 {
            // A single key is compared over its own length.
            out[0].len = out[0].len.min(total.max(1));
        }
        out
    };
    for e in exprs {
        match e {
            Expr::Meta { key, dreg } => {
                let len = match key {
                    MetaKey::IifName
                    | MetaKey::OifName
                    | MetaKey::BriIifName
                    | MetaKey::BriOifName
                    | MetaKey::SdifName => 16,
                    MetaKey::L4Proto | MetaKey::PktType | MetaKey::NfProto => 1,
                    MetaKey::Protocol | MetaKey::IifType | MetaKey::OifType => 2,
                    _ => 4,
                };
                regs.insert(slot(*dreg), Load::new(Src::Meta(*key), len));
            }
            Expr::Payload {
                base,
                offset,
                len,
                dreg,
            } => {
                regs.insert(
                    slot(*dreg),
                    Load::new(
                        Src::Payload {
                            base: *base,
                            offset: *offset,
                            len: *len,
                        },
                        *len,
                    ),
                );
            }
            Expr::Ct {
                key,
                dreg,
                direction,
            } => {
                let len = match key {
                    CtKey::L3Protocol | CtKey::Protocol => 1,
                    CtKey::ProtoSrc | CtKey::ProtoDst => 2,
                    CtKey::Src | CtKey::Dst | CtKey::SrcIp6 | CtKey::DstIp6 => 16,
                    CtKey::Labels => 16,
                    CtKey::Pkts | CtKey::Bytes | CtKey::AvgPkt => 8,
                    _ => 4,
                };
                let len = match key {
                    CtKey::SrcIp | CtKey::DstIp => 4,
                    _ => len,
                };
                regs.insert(
                    slot(*dreg),
                    Load::new(
                        Src::Ct {
                            key: *key,
                            dir: *direction,
                        },
                        len,
                    ),
                );
            }
            Expr::Fib {
                result,
                flags,
                dreg,
            } => {
                let len = if *result == FibResult::OifName { 16 } else { 4 };
                regs.insert(
                    slot(*dreg),
                    Load::new(
                        Src::Fib {
                            result: *result,
                            flags: *flags,
                        },
                        len,
                    ),
                );
            }
            Expr::Bitwise {
                sreg,
                dreg,
                len,
                mask,
                xor,
            } => {
                let mut l = load_at(&regs, *sreg, &last_unknown);
                l.len = *len;
                l.mask = match l.mask.take() {
                    // Two masks in a row: (v & m1 ^ x1) & m2 ^ x2 — kept only when the first
                    // has no xor, the usual shape.
                    Some((m1, x1)) if x1.iter().all(|b| *b == 0) => Some((
                        m1.iter().zip(mask).map(|(a, b)| a & b).collect(),
                        xor.clone(),
                    )),
                    Some(_) => {
                        l.src = Src::Unknown("two bitwise operations in a row".into());
                        None
                    }
                    None => Some((mask.clone(), xor.clone())),
                };
                regs.insert(slot(*dreg), l);
            }
            Expr::Cmp { sreg, op, data } => {
                let mut l = load_at(&regs, *sreg, &last_unknown);
                l.len = data.len() as u32;
                items.push(Item::Cond(Cond {
                    key: vec![l],
                    test: Test::Cmp {
                        op: *op,
                        data: data.clone(),
                    },
                }));
            }
            Expr::Lookup {
                set,
                sreg,
                dreg,
                flags,
                ..
            } => {
                let key = concat(&regs, *sreg, key_len(set), &last_unknown);
                if *dreg == Some(NFT_REG_VERDICT) {
                    items.push(Item::Act(Act::Vmap {
                        key,
                        set: set.clone(),
                    }));
                } else if let Some(d) = dreg {
                    // A map to a value: the value is something this host does not follow.
                    regs.insert(
                        slot(*d),
                        Load::new(Src::Unknown(format!("a value looked up in map {set}")), 4),
                    );
                } else {
                    items.push(Item::Cond(Cond {
                        key,
                        test: Test::InSet {
                            set: set.clone(),
                            neg: flags & NFT_LOOKUP_F_INV != 0,
                        },
                    }));
                }
            }
            Expr::Immediate { dreg, data } => match data {
                ImmediateData::Verdict(v) => items.push(Item::Act(match v {
                    Verdict::Accept => Act::Accept,
                    Verdict::Drop => Act::Drop,
                    Verdict::Jump(c) => Act::Jump(c.clone()),
                    Verdict::Goto(c) => Act::Goto(c.clone()),
                    Verdict::Return => Act::Return,
                    Verdict::Continue => Act::Continue,
                    Verdict::Break => Act::Continue,
                    other => Act::Unknown(format!("verdict code {}", other.code())),
                })),
                ImmediateData::Value(v) if *dreg != NFT_REG_VERDICT => {
                    regs.insert(slot(*dreg), Load::new(Src::Imm(v.clone()), v.len() as u32));
                }
                ImmediateData::Value(_) => {}
            },
            Expr::Counter { .. } => {}
            Expr::Raw { name, data } => {
                raw(name, data, e, &mut regs, &mut items, &mut last_unknown);
            }
        }
    }
    items
}

/// An nla's u32 in network order, by type.
fn nla_be32(data: &[u8], ty: u16) -> Option<u32> {
    crate::netlink::attr::Attrs::new(data)
        .find(|a| a.ty == ty)
        .and_then(|a| a.be32())
}

/// An nla's nested NFTA_DATA_VALUE, by type.
fn nla_value(data: &[u8], ty: u16) -> Option<Vec<u8>> {
    let a = crate::netlink::attr::Attrs::new(data).find(|a| a.ty == ty)?;
    a.nested().find(|d| d.ty == 1).map(|d| d.data.to_vec())
}

fn raw(
    name: &str,
    data: &[u8],
    e: &Expr,
    regs: &mut HashMap<u32, Load>,
    items: &mut Vec<Item>,
    last_unknown: &mut String,
) {
    match name {
        "log" | "counter" | "notrack" | "dynset" | "last" | "objref" | "synproxy" | "dup" => {}
        // A payload or extension-header write (`tcp option maxseg size set …`) changes the
        // packet, not its way.
        "payload" if nla_be32(data, 5).is_some() => {}
        "exthdr" if nla_be32(data, 7).is_some() => {}
        "reject" => items.push(Item::Act(Act::Drop)),
        "nat" | "masq" | "redir" | "tproxy" => items.push(Item::Act(Act::Nat)),
        "queue" | "fwd" => items.push(Item::Act(Act::Unknown(format!("{name} statement")))),
        // `limit rate over`, `quota over`, `ct count over` (their inverted forms) do not hold
        // for one new connection; the plain forms do.
        "limit" => {
            let inv = nla_be32(data, 5).unwrap_or(0) & 1 != 0;
            items.push(Item::Fixed(!inv, "a rate limit"));
        }
        "quota" => {
            let inv = nla_be32(data, 2).unwrap_or(0) & 1 != 0;
            items.push(Item::Fixed(!inv, "a quota"));
        }
        "connlimit" => {
            let inv = nla_be32(data, 2).unwrap_or(0) & 1 != 0;
            items.push(Item::Fixed(!inv, "a connection count"));
        }
        "range" => {
            let sreg = nla_be32(data, 1).unwrap_or(0);
            let neg = nla_be32(data, 2).unwrap_or(0) == 1;
            match (nla_value(data, 3), nla_value(data, 4)) {
                (Some(lo), Some(hi)) => {
                    let mut l = regs
                        .get(&slot(sreg))
                        .cloned()
                        .unwrap_or_else(|| Load::new(Src::Unknown(last_unknown.clone()), 4));
                    l.len = lo.len() as u32;
                    items.push(Item::Cond(Cond {
                        key: vec![l],
                        test: Test::Range { neg, lo, hi },
                    }));
                }
                _ => items.push(Item::Cond(unknown_cond("a range"))),
            }
        }
        // `meta mark set`, `ct mark set`: a meta or ct expression with a source register.
        "meta" | "ct" => {
            let key = nla_be32(data, 2);
            let sreg = if name == "meta" {
                nla_be32(data, 3)
            } else {
                nla_be32(data, 4)
            };
            match (key, sreg) {
                (Some(k), Some(r)) => {
                    let value = regs
                        .get(&slot(r))
                        .cloned()
                        .unwrap_or_else(|| Load::new(Src::Unknown(last_unknown.clone()), 4));
                    if name == "meta" && k == MetaKey::Mark.to_raw() {
                        items.push(Item::Mark(MarkOp::Set(value)));
                    } else if name == "ct" && k == CtKey::Mark.to_raw() {
                        items.push(Item::CtMark(MarkOp::Set(value)));
                    }
                    // Other keys set (priority, nftrace, a helper, a zone) change no verdict.
                }
                _ => {
                    // A load of a key this codec does not name: its register holds the unknown.
                    *last_unknown = format!("{name} key {}", key.unwrap_or(0));
                    if let Some(d) = nla_be32(data, 1) {
                        regs.insert(slot(d), Load::new(Src::Unknown(last_unknown.clone()), 16));
                    }
                }
            }
        }
        "match" => items.extend(super::xt::match_items(e)),
        "target" => items.extend(super::xt::target_items(e)),
        _ => {
            // Loaders this host does not read (socket, rt, osf, xfrm, numgen, hash, exthdr …):
            // whatever register they fill holds an unknown named after them.
            // Which register they fill differs by expression, so every register is taken as
            // unknown from here on: a later test of any of them is not decided.
            *last_unknown = format!("{name} expression");
            regs.clear();
        }
    }
}

/// A condition on something the evaluator does not read.
pub fn unknown_cond(what: &str) -> Cond {
    Cond {
        key: vec![Load::new(Src::Unknown(what.to_string()), 4)],
        test: Test::Cmp {
            op: CmpOp::Eq,
            data: vec![0; 4],
        },
    }
}

/// A rule's steps in words close to nft's, for the operator reading why: `meta l4proto == 6
/// th dport == 9000 accept`.
pub fn render(items: &[Item]) -> String {
    let mut out: Vec<String> = Vec::new();
    for it in items {
        match it {
            Item::Cond(c) => {
                let key: Vec<String> = c.key.iter().map(load_name).collect();
                let key = key.join(" . ");
                let value = |d: &[u8]| value_text(&c.key, d);
                out.push(match &c.test {
                    Test::Cmp { op, data } => {
                        let op = match op {
                            CmpOp::Eq => "",
                            other => other.nft_name(),
                        };
                        if op.is_empty() {
                            format!("{key} {}", value(data))
                        } else {
                            format!("{key} {op} {}", value(data))
                        }
                    }
                    Test::Range { neg, lo, hi } => format!(
                        "{key} {}{}-{}",
                        if *neg { "!= " } else { "" },
                        value(lo),
                        value(hi)
                    ),
                    Test::InList { neg, ranges } => format!(
                        "{key} {}{{ {} }}",
                        if *neg { "!= " } else { "" },
                        ranges
                            .iter()
                            .map(|(lo, hi)| if lo == hi {
                                value(lo)
                            } else {
                                format!("{}-{}", value(lo), value(hi))
                            })
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    Test::InSet { set, neg } => {
                        format!("{key} {}@{set}", if *neg { "!= " } else { "" })
                    }
                });
            }
            Item::Fixed(_, what) => out.push(format!("({what})")),
            Item::Mark(_) => out.push("meta mark set …".into()),
            Item::CtMark(_) => out.push("ct mark set …".into()),
            Item::Act(a) => out.push(act_text(a)),
        }
    }
    out.join(" ")
}

/// A verdict in words: `accept`, `jump wan`, `tcp dport vmap @ports`.
pub fn act_text(a: &Act) -> String {
    match a {
        Act::Accept => "accept".into(),
        Act::Drop => "drop".into(),
        Act::Jump(c) => format!("jump {c}"),
        Act::Goto(c) => format!("goto {c}"),
        Act::Return => "return".into(),
        Act::Continue => "continue".into(),
        Act::Vmap { key, set } => format!(
            "{} vmap @{set}",
            key.iter().map(load_name).collect::<Vec<_>>().join(" . ")
        ),
        Act::Nat => "nat".into(),
        Act::Unknown(w) => w.clone(),
    }
}

fn load_name(l: &Load) -> String {
    let base = match &l.src {
        Src::Meta(k) => format!("meta {}", k.nft_name()),
        Src::Payload {
            base: PayloadBase::Transport,
            offset: 2,
            len: 2,
        } => "th dport".into(),
        Src::Payload {
            base: PayloadBase::Transport,
            offset: 0,
            len: 2,
        } => "th sport".into(),
        Src::Payload {
            base: PayloadBase::Transport,
            offset: 13,
            len: 1,
        } => "tcp flags".into(),
        Src::Payload {
            base: PayloadBase::Network,
            offset,
            len,
        } => match (offset, len) {
            (12, 4) => "ip saddr".into(),
            (16, 4) => "ip daddr".into(),
            (8, 16) => "ip6 saddr".into(),
            (24, 16) => "ip6 daddr".into(),
            (12, _) => format!("ip saddr (first {len} bytes)"),
            (8, _) => format!("ip6 saddr (first {len} bytes)"),
            _ => format!("network header @{offset},{len}"),
        },
        Src::Payload { base, offset, len } => format!("{} @{offset},{len}", base.nft_name()),
        Src::Ct { key, dir } => match dir {
            Some(CtDirection::Original) => format!("ct original {}", key.nft_name()),
            Some(CtDirection::Reply) => format!("ct reply {}", key.nft_name()),
            None => format!("ct {}", key.nft_name()),
        },
        Src::Fib { result, .. } => format!("fib {}", result.nft_name()),
        Src::Imm(_) => "a constant".into(),
        Src::XtCtState => "conntrack state".into(),
        Src::XtFixed(XtFixed::AddrType { .. }) => "addrtype".into(),
        Src::XtFixed(XtFixed::RpFilter { .. }) => "rpfilter".into(),
        Src::Unknown(w) => w.clone(),
    };
    match &l.mask {
        Some((m, _)) => format!("{base} & 0x{}", hex(m)),
        None => base,
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn value_text(keys: &[Load], d: &[u8]) -> String {
    let only = keys.first().filter(|_| keys.len() == 1);
    match only.map(|l| &l.src) {
        Some(Src::Payload {
            base: PayloadBase::Transport,
            len: 2,
            ..
        })
        | Some(Src::Ct {
            key: CtKey::ProtoDst | CtKey::ProtoSrc,
            ..
        }) if d.len() == 2 => u16::from_be_bytes([d[0], d[1]]).to_string(),
        Some(Src::Meta(
            MetaKey::IifName | MetaKey::OifName | MetaKey::BriIifName | MetaKey::BriOifName,
        )) => {
            let name: Vec<u8> = d.iter().copied().take_while(|b| *b != 0).collect();
            let exact = d.contains(&0);
            format!(
                "\"{}{}\"",
                String::from_utf8_lossy(&name),
                if exact { "" } else { "*" }
            )
        }
        Some(Src::Payload {
            base: PayloadBase::Network,
            ..
        }) if d.len() == 4 || d.len() == 16 => match d.len() {
            4 => std::net::Ipv4Addr::from(<[u8; 4]>::try_from(d).unwrap_or_default()).to_string(),
            _ => std::net::Ipv6Addr::from(<[u8; 16]>::try_from(d).unwrap_or_default()).to_string(),
        },
        Some(Src::Meta(MetaKey::L4Proto)) | Some(Src::Meta(MetaKey::PktType)) if d.len() == 1 => {
            d[0].to_string()
        }
        _ => format!("0x{}", hex(d)),
    }
}
