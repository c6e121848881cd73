//! nf_tables expressions lowered into the evaluator's items: a listed rule read by following its
//! registers (native expressions here, iptables-nft's x_tables matches and targets through
//! `xt`), so a test knows which field of the packet it is about.

use super::ir::*;
use crate::netlink::consts::{NFT_LOOKUP_F_INV, NFT_REG_VERDICT};
use crate::netlink::{CtKey, Expr, FibResult, ImmediateData, MetaKey, Verdict};
use std::collections::HashMap;

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
                if !l.then.is_empty() {
                    // After a swap or a shift: kept in order.
                    l.then.push(RegOp::MaskXor(mask.clone(), xor.clone()));
                    regs.insert(slot(*dreg), l);
                    continue;
                }
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
        // Statements that change no verdict: a counter or a timestamp kept, a line logged, a
        // copy of the packet sent elsewhere (the packet itself goes on).
        "log" | "counter" | "last" | "dup" => {}
        "notrack" => items.push(Item::NoTrack),
        // A payload or extension-header write (`tcp option maxseg size set …`) changes the
        // packet, not its way: the walk reads none of the bytes such a rule rewrites except
        // the ports and addresses, and a rewrite of those is not followed.
        "payload" if nla_be32(data, 5).is_some() => payload_write(data, items),
        "exthdr" if nla_be32(data, 7).is_some() => {}
        "reject" => items.push(Item::Act(Act::Drop)),
        "nat" | "masq" | "redir" => items.push(Item::Act(Act::Nat)),
        "tproxy" => items.push(Item::Act(Act::Unknown(
            "a tproxy statement (the connection is handed to another socket)".into(),
        ))),
        "synproxy" => items.push(Item::Act(Act::Unknown(
            "a synproxy statement (it answers the SYN itself)".into(),
        ))),
        "queue" | "fwd" => items.push(Item::Act(Act::Unknown(format!("{name} statement")))),
        // A new connection is not offloaded (the kernel offloads established flows only) and
        // the rule stops there.
        "flow_offload" => items.push(Item::Fixed(
            false,
            "flow offload (a new connection is not offloaded: the rule stops)",
        )),
        "limit" | "quota" | "connlimit" => items.push(stateful(name, data, None)),
        "dynset" => dynset(data, items),
        "objref" => objref(data, items),
        "byteorder" => byteorder(data, regs, last_unknown),
        "bitwise" => shift(data, regs, last_unknown),
        // `ipsec in …` on a connection that came through no IPsec state: the kernel stops
        // the rule (the evaluator's connection has no secpath).
        "xfrm" if nla_u8(data, 3) == Some(0) => items.push(Item::Fixed(
            false,
            "an IPsec state (a connection not through IPsec has none: the rule stops)",
        )),
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
        "meta" | "ct" => meta_or_ct(name, data, regs, items, last_unknown),
        "match" => items.extend(super::xt::match_items(e)),
        "target" => items.extend(super::xt::target_items(e)),
        // Loaders whose value this host does not read: whatever register they fill holds an
        // unknown named after them. Which register they fill differs by expression, so every
        // register is taken as unknown from here on: a later test of any of them is not
        // decided (it splits the answer and names the rule).
        "socket" | "rt" | "osf" | "xfrm" | "numgen" | "hash" | "exthdr" | "tunnel" | "inner"
        | "fib" | "payload" => {
            *last_unknown = format!("{name} expression");
            regs.clear();
        }
        // A verdict this codec cannot decode: the packet may go anywhere from here.
        "immediate" => items.push(Item::Act(Act::Unknown(
            "a verdict this host cannot decode".into(),
        ))),
        _ => {
            // A test (cmp, lookup) this codec cannot decode, or an expression it does not
            // know: a step that cannot be told, never a silent no-op.
            *last_unknown = format!("{name} expression");
            regs.clear();
            items.push(Item::Cond(unknown_cond(&format!(
                "a {name} expression this host does not read"
            ))));
        }
    }
}

fn nla_u8(data: &[u8], ty: u16) -> Option<u8> {
    crate::netlink::attr::Attrs::new(data)
        .find(|a| a.ty == ty)
        .and_then(|a| a.u8())
}

/// `limit`, `quota`, `connlimit` (at the top of a rule, or carried by a `dynset`): the plain
/// forms hold for one connection not flooding; the `over` forms (the flag NFT_*_F_INV) do not
/// and refuse past the rate or count, a limit met on the way.
fn stateful(name: &str, data: &[u8], set: Option<&str>) -> Item {
    let flags_at = if name == "limit" { 5 } else { 2 };
    let over = nla_be32(data, flags_at).unwrap_or(0) & 1 != 0;
    let what = match name {
        "limit" => "a rate limit",
        "quota" => "a quota",
        _ => "a connection count",
    };
    if !over {
        return Item::Fixed(true, what);
    }
    Item::Limit(match set {
        Some(s) => format!("{what} per element of set {s}, refused over it"),
        None => format!("{what}, refused over it"),
    })
}

/// A `dynset` (`add @s { ip saddr limit rate over 10/second }`, `update @s { … }`): the set
/// changes (a later lookup in it by this packet cannot be told), and each expression it
/// carries is read as at the top of a rule: a limit or count over its bound is a limit met.
fn dynset(data: &[u8], items: &mut Vec<Item>) {
    use crate::netlink::attr::Attrs;
    let set = Attrs::new(data)
        .find(|a| a.ty == 1)
        .map(|a| a.string())
        .unwrap_or_default();
    if nla_be32(data, 9).unwrap_or(0) & 1 != 0 {
        items.push(Item::Cond(unknown_cond(&format!(
            "an inverted update of set {set}"
        ))));
        return;
    }
    items.push(Item::SetAdd(set.clone()));
    let mut inner: Vec<Expr> = Vec::new();
    for a in Attrs::new(data) {
        match a.ty {
            7 => inner.push(Expr::decode(a.data)),
            10 => inner.extend(
                a.nested()
                    .filter(|e| e.ty == 1)
                    .map(|e| Expr::decode(e.data)),
            ),
            _ => {}
        }
    }
    for x in inner {
        match x {
            Expr::Counter { .. } => {}
            Expr::Raw { name, data } => match name.as_str() {
                "limit" | "quota" | "connlimit" => items.push(stateful(&name, &data, Some(&set))),
                "counter" | "last" => {}
                other => items.push(Item::Cond(unknown_cond(&format!(
                    "a {other} expression kept per element of set {set}"
                )))),
            },
            other => items.push(Item::Cond(unknown_cond(&format!(
                "a {} expression kept per element of set {set}",
                other.name()
            )))),
        }
    }
}

/// `objref` (`counter name c`, `quota name q`, `limit name l`, `ct helper set "ftp"`): an
/// object's bound (over or not) is not in the rule, so a named quota, limit or connection
/// count cannot be told; the others change no verdict.
fn objref(data: &[u8], items: &mut Vec<Item>) {
    use crate::netlink::attr::Attrs;
    let name = Attrs::new(data)
        .find(|a| a.ty == 2 || a.ty == 4)
        .map(|a| a.string())
        .unwrap_or_default();
    match nla_be32(data, 1) {
        // counter, ct helper, tunnel, ct timeout, secmark, ct expectation.
        Some(1 | 3 | 6 | 7 | 8 | 9) => {}
        Some(10) => items.push(Item::Act(Act::Unknown(format!(
            "synproxy object {name} (it answers the SYN itself)"
        )))),
        Some(2) => items.push(Item::Cond(unknown_cond(&format!("quota object {name}")))),
        Some(4) => items.push(Item::Cond(unknown_cond(&format!("limit object {name}")))),
        Some(5) => items.push(Item::Cond(unknown_cond(&format!(
            "connection-count object {name}"
        )))),
        _ => items.push(Item::Cond(unknown_cond(&format!(
            "stateful object map {name}"
        )))),
    }
}

/// A payload write to the bytes the walk reads (the ports, the addresses, the protocol):
/// what later rules see is not followed, so the rule cannot be told.
fn payload_write(data: &[u8], items: &mut Vec<Item>) {
    let base = nla_be32(data, 2).unwrap_or(u32::MAX);
    let off = nla_be32(data, 3).unwrap_or(0);
    let len = nla_be32(data, 4).unwrap_or(0);
    let overlaps = |lo: u32, hi: u32| off < hi && off + len > lo;
    let read = match base {
        // Network: the protocol and the addresses (v4 9, 12..20; v6 6, 8..40).
        1 => overlaps(6, 7) || overlaps(8, 40),
        // Transport: the ports and the tcp flags.
        2 => overlaps(0, 4) || overlaps(13, 14),
        _ => false,
    };
    if read {
        items.push(Item::Cond(unknown_cond(
            "a rewrite of the packet's ports or addresses",
        )));
    }
}

/// `byteorder reg D = hton(reg S, size, len)`: the load at S swapped in `size`-byte words
/// over `len` bytes (a no-op when `len < size`, as nft writes it for `meta l4proto` in a
/// concatenation). A swap spanning several loads is followed load by load.
fn byteorder(data: &[u8], regs: &mut HashMap<u32, Load>, last_unknown: &str) {
    let (Some(sreg), Some(dreg)) = (nla_be32(data, 1), nla_be32(data, 2)) else {
        regs.clear();
        return;
    };
    let len = nla_be32(data, 4).unwrap_or(0);
    let size = nla_be32(data, 5).unwrap_or(0);
    let mut at = slot(sreg);
    let mut to = slot(dreg);
    let mut left = len;
    let mut out = Vec::new();
    while left > 0 || out.is_empty() {
        let mut l = regs
            .get(&at)
            .cloned()
            .unwrap_or_else(|| Load::new(Src::Unknown(last_unknown.to_string()), 4));
        let w = l.padded().max(4);
        let part = left.min(w);
        if !matches!(size, 2 | 4 | 8) || (part >= size && w % size != 0) {
            l = Load::new(
                Src::Unknown("a byteorder this host cannot follow".into()),
                w,
            );
        } else if part >= size {
            l.then.push(RegOp::Swap { size, len: part });
        }
        out.push((to, l));
        at += w / 4;
        to += w / 4;
        left -= part;
    }
    for (slot, l) in out {
        regs.insert(slot, l);
    }
}

/// A `bitwise` this codec keeps raw: a shift (`ct mark >> 8`) is followed on the load;
/// anything else (the boolean operations between registers) is unknown.
fn shift(data: &[u8], regs: &mut HashMap<u32, Load>, last_unknown: &mut String) {
    let sreg = nla_be32(data, 1);
    let dreg = nla_be32(data, 2);
    let len = nla_be32(data, 3).unwrap_or(4);
    let op = nla_be32(data, 6);
    let by =
        nla_value(data, 7).and_then(|v| Some(u32::from_ne_bytes(v.get(..4)?.try_into().ok()?)));
    let (Some(sreg), Some(dreg)) = (sreg, dreg) else {
        regs.clear();
        return;
    };
    let l = match (op, by) {
        (Some(op @ (1 | 2)), Some(by)) if by < 32 => {
            let mut l = regs
                .get(&slot(sreg))
                .cloned()
                .unwrap_or_else(|| Load::new(Src::Unknown(last_unknown.clone()), 4));
            l.then.push(RegOp::Shift {
                left: op == 1,
                by,
                len,
            });
            l
        }
        _ => {
            *last_unknown = "a bitwise operation between registers".into();
            Load::new(Src::Unknown(last_unknown.clone()), len)
        }
    };
    regs.insert(slot(dreg), l);
}

/// `meta KEY set`, `ct KEY set`, or a load of a key this codec does not name.
fn meta_or_ct(
    name: &str,
    data: &[u8],
    regs: &mut HashMap<u32, Load>,
    items: &mut Vec<Item>,
    last_unknown: &mut String,
) {
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
