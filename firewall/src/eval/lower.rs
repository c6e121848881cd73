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
