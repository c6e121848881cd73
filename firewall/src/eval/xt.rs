//! x_tables for the evaluator: the matches and targets iptables-nft keeps as x_tables
//! extensions inside nf_tables rules, their kernel structs decoded into the evaluator's steps
//! (`legacy.rs` reads iptables-legacy's saves into the same steps).

use super::ir::{Act, Cond, IpsetRef, Item, Load, MarkOp, Src, Test, XtFixed};
use crate::netlink::{CmpOp, CtDirection, CtKey, Expr, MetaKey, PayloadBase};

pub(super) fn dport() -> Load {
    Load::new(
        Src::Payload {
            base: PayloadBase::Transport,
            offset: 2,
            len: 2,
        },
        2,
    )
}

pub(super) fn sport() -> Load {
    Load::new(
        Src::Payload {
            base: PayloadBase::Transport,
            offset: 0,
            len: 2,
        },
        2,
    )
}

pub(super) fn tcp_flags(mask: u8) -> Load {
    Load {
        src: Src::Payload {
            base: PayloadBase::Transport,
            offset: 13,
            len: 1,
        },
        len: 1,
        mask: Some((vec![mask], vec![0])),
        then: Vec::new(),
    }
}

pub(super) fn l4proto() -> Load {
    Load::new(Src::Meta(MetaKey::L4Proto), 1)
}

pub(super) fn orig_dport() -> Load {
    Load::new(
        Src::Ct {
            key: CtKey::ProtoDst,
            dir: Some(CtDirection::Original),
        },
        2,
    )
}

pub(super) fn masked(src: Src, mask: u32) -> Load {
    Load {
        src,
        len: 4,
        mask: Some((mask.to_ne_bytes().to_vec(), vec![0; 4])),
        then: Vec::new(),
    }
}

pub(super) fn cmp(key: Load, neg: bool, data: Vec<u8>) -> Item {
    Item::Cond(Cond {
        key: vec![key],
        test: Test::Cmp {
            op: if neg { CmpOp::Neq } else { CmpOp::Eq },
            data,
        },
    })
}

/// `(key & mask) != 0`, or `== 0` when inverted: how x_tables tests state and status bits.
pub(super) fn any_bit(src: Src, mask: u32, inv: bool) -> Item {
    cmp(masked(src, mask), !inv, vec![0; 4])
}

fn port_range(key: Load, lo: u16, hi: u16, neg: bool) -> Option<Item> {
    if lo == 0 && hi == u16::MAX && !neg {
        return None;
    }
    Some(Item::Cond(Cond {
        key: vec![key],
        test: Test::Range {
            neg,
            lo: lo.to_be_bytes().to_vec(),
            hi: hi.to_be_bytes().to_vec(),
        },
    }))
}

pub(super) fn unknown(what: String) -> Item {
    Item::Cond(super::ir::unknown_cond(&what))
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// The steps of an x_tables match inside an nf_tables rule.
pub fn match_items(e: &Expr) -> Vec<Item> {
    let name = e.xt_name().unwrap_or_default();
    let Some((rev, info)) = e.xt_info() else {
        return vec![unknown(format!("x_tables match {name}"))];
    };
    decode_match(&name, rev, &info)
        .unwrap_or_else(|| vec![unknown(format!("x_tables match {name}"))])
}

pub(super) fn decode_match(name: &str, rev: u32, b: &[u8]) -> Option<Vec<Item>> {
    let mut out = Vec::new();
    match name {
        "comment" | "nfacct" => {}
        // struct xt_rateinfo: no inversion, it holds for a connection not flooding.
        "limit" => out.push(Item::Fixed(true, "a rate limit")),
        // struct xt_hashlimit_info / _mtinfo1: name[16], then the config, whose mode
        // (XT_HASHLIMIT_INVERT, 0x10, for --hashlimit-above) comes first; _mtinfo2/3:
        // name[255], the config at 256 with two u64 rates ahead of the mode.
        "hashlimit" => out.push(if u32_at(b, if rev >= 2 { 272 } else { 16 })? & 0x10 != 0 {
            Item::Limit("a per-source rate limit (hashlimit), refused over it".into())
        } else {
            Item::Fixed(true, "a rate limit")
        }),
        // struct xt_connlimit_info: a 16-byte mask, limit, flags (bit 0: --connlimit-upto).
        "connlimit" => out.push(if u32_at(b, 20)? & 1 != 0 {
            Item::Fixed(true, "a connection count")
        } else {
            Item::Limit("a per-source connection count (connlimit), refused over it".into())
        }),
        // struct xt_recent_mtinfo: seconds, hit_count, check_set, invert, name[200].
        "recent" => out.push(recent(
            *b.get(8)?,
            u32_at(b, 4)?,
            *b.get(9)? != 0,
            &String::from_utf8_lossy(
                &b.get(10..210)?
                    .iter()
                    .copied()
                    .take_while(|c| *c != 0)
                    .collect::<Vec<u8>>(),
            ),
        )),
        // struct xt_tcp: spts[2], dpts[2], option, flg_mask, flg_cmp, invflags.
        "tcp" | "udp" => {
            let (s0, s1, d0, d1) = (u16_at(b, 0)?, u16_at(b, 2)?, u16_at(b, 4)?, u16_at(b, 6)?);
            let inv = if name == "tcp" {
                *b.get(11)?
            } else {
                *b.get(8)?
            };
            out.extend(port_range(sport(), s0, s1, inv & 1 != 0));
            out.extend(port_range(dport(), d0, d1, inv & 2 != 0));
            if name == "tcp" {
                let (mask, want) = (*b.get(9)?, *b.get(10)?);
                if mask != 0 {
                    out.push(cmp(tcp_flags(mask), inv & 4 != 0, vec![want]));
                }
                if *b.get(8)? != 0 {
                    out.push(unknown("a tcp option".into()));
                }
            }
        }
        // struct xt_multiport(_v1): flags, count, ports[15], (pflags[15], invert).
        "multiport" => {
            let (flags, count) = (*b.first()?, *b.get(1)? as usize);
            let ports: Vec<u16> = (0..count.min(15))
                .filter_map(|i| u16_at(b, 2 + 2 * i))
                .collect();
            let (pflags, invert) = if rev >= 1 {
                (b.get(32..47)?.to_vec(), *b.get(47)? != 0)
            } else {
                (vec![0; 15], false)
            };
            // A port whose flag is set opens a range that the next port closes.
            let mut fixed = Vec::new();
            let mut j = 0;
            while j < ports.len() {
                if pflags[j] != 0 && j + 1 < ports.len() {
                    fixed.push((
                        ports[j].to_be_bytes().to_vec(),
                        ports[j + 1].to_be_bytes().to_vec(),
                    ));
                    j += 2;
                } else {
                    fixed.push((
                        ports[j].to_be_bytes().to_vec(),
                        ports[j].to_be_bytes().to_vec(),
                    ));
                    j += 1;
                }
            }
            let key = match flags {
                0 => sport(),
                1 => dport(),
                _ => return Some(vec![unknown("multiport on either port".into())]),
            };
            out.push(Item::Cond(Cond {
                key: vec![key],
                test: Test::InList {
                    neg: invert,
                    ranges: fixed,
                },
            }));
        }
        // struct xt_state_info { statemask }.
        "state" => out.push(any_bit(Src::XtCtState, u32_at(b, 0)?, false)),
        // struct xt_conntrack_mtinfo1/2/3: eight addresses (128 bytes), expires (2 × u32), l4proto
        // and four ports (u16 at 136..146), then the flags, inversions, state and status masks;
        // revision 3 then the four ports' upper ends (154..162).
        "conntrack" => {
            let (flags, inv, states, status) = match rev {
                1 => (
                    u32::from(*b.get(146)?),
                    u32::from(*b.get(147)?),
                    u32::from(*b.get(148)?),
                    u32::from(*b.get(149)?),
                ),
                2 | 3 => (
                    u32::from(u16_at(b, 146)?),
                    u32::from(u16_at(b, 148)?),
                    u32::from(u16_at(b, 150)?),
                    u32::from(u16_at(b, 152)?),
                ),
                _ => return None,
            };
            const STATE: u32 = 1;
            const PROTO: u32 = 2;
            const STATUS: u32 = 64;
            const ORIGDST_PORT: u32 = 512;
            let known = STATE | PROTO | STATUS | ORIGDST_PORT;
            if flags & STATE != 0 {
                out.push(any_bit(Src::XtCtState, states, inv & STATE != 0));
            }
            if flags & PROTO != 0 {
                let p = u16_at(b, 136)? as u8;
                out.push(cmp(l4proto(), inv & PROTO != 0, vec![p]));
            }
            if flags & STATUS != 0 {
                out.push(any_bit(
                    Src::Ct {
                        key: CtKey::Status,
                        dir: None,
                    },
                    status,
                    inv & STATUS != 0,
                ));
            }
            if flags & ORIGDST_PORT != 0 {
                let neg = inv & ORIGDST_PORT != 0;
                if rev == 3 {
                    // Revision 3 matches a range, both ends in host order (the kernel's
                    // `port_match` against `ntohs` of the tuple): origdst_port at 140 and
                    // origdst_port_high at 156, after the masks.
                    let (lo, hi) = (u16_at(b, 140)?, u16_at(b, 156)?);
                    out.extend(port_range(orig_dport(), lo, hi, neg));
                } else {
                    // Revisions 1 and 2 compare the port as it is on the wire.
                    out.push(cmp(orig_dport(), neg, b.get(140..142)?.to_vec()));
                }
            }
            if flags & !known != 0 {
                out.push(unknown("a conntrack address or expiry".into()));
            }
        }
        // struct xt_mark_mtinfo1 / xt_connmark_mtinfo1: mark, mask, invert.
        "mark" | "connmark" => {
            let (mark, mask, inv) = (u32_at(b, 0)?, u32_at(b, 4)?, *b.get(8)? != 0);
            let src = if name == "mark" {
                Src::Meta(MetaKey::Mark)
            } else {
                Src::Ct {
                    key: CtKey::Mark,
                    dir: None,
                }
            };
            out.push(cmp(masked(src, mask), inv, mark.to_ne_bytes().to_vec()));
        }
        // struct xt_pkttype_info { int pkttype; int invert; }.
        "pkttype" => {
            let (t, inv) = (u32_at(b, 0)?, u32_at(b, 4)? != 0);
            out.push(cmp(
                Load::new(Src::Meta(MetaKey::PktType), 1),
                inv,
                vec![t as u8],
            ));
        }
        // struct xt_addrtype_info_v1 { u16 source, dest; u32 flags }.
        "addrtype" if rev == 1 => {
            let (src, dst, flags) = (u16_at(b, 0)?, u16_at(b, 2)?, u32_at(b, 4)?);
            out.push(fixed(XtFixed::AddrType {
                src,
                dst,
                inv_src: flags & 1 != 0,
                inv_dst: flags & 2 != 0,
            }));
        }
        // struct xt_set_info { ip_set_id_t index; u8 dim; u8 flags } first in every revision
        // from 1; revision 3 then two counter tests (struct ip_set_counter_match0 { u8 op;
        // u64 value }, op at 8 and 24), revision 4 the same with the value first (op at 16
        // and 32). A counter test or --return-nomatch is not read.
        "set" if rev >= 1 => {
            let (index, dims, flags) = (u16_at(b, 0)?, *b.get(2)?, *b.get(3)?);
            let counters = match rev {
                1 | 2 => false,
                3 => *b.get(8)? != 0 || *b.get(24)? != 0,
                4 => *b.get(16)? != 0 || *b.get(32)? != 0,
                _ => return None,
            };
            out.push(if counters || flags & 0x80 != 0 {
                unknown(format!(
                    "the counters or --return-nomatch of ipset {}",
                    IpsetRef::Index(index)
                ))
            } else {
                ipset(IpsetRef::Index(index), dims, flags)
            });
        }
        // IPv6 extension headers: a new connection's first packet carries none.
        "rt" | "frag" | "hbh" | "dst" | "mh" => out.push(Item::Fixed(
            false,
            "an IPv6 extension header (a new connection's SYN carries none)",
        )),
        // struct xt_rpfilter_info { u8 flags } (XT_RPFILTER_INVERT is 0x08).
        "rpfilter" => out.push(fixed(XtFixed::RpFilter {
            invert: *b.first()? & 0x08 != 0,
        })),
        _ => return None,
    }
    Some(out)
}

/// `-m recent`: `--set` always holds (it records the source); `--rcheck`/`--update` with a
/// hit count refuse a source past it, a limit met; without one they test whether the source is
/// on a list the kernel keeps (not in the listing), which cannot be told; so is `--remove`.
/// `check_set` is XT_RECENT_CHECK 1, SET 2, UPDATE 4, REMOVE 8.
pub(super) fn recent(check_set: u8, hit_count: u32, invert: bool, name: &str) -> Item {
    if check_set & 2 != 0 {
        return Item::Fixed(!invert, "recent --set (it records the source)");
    }
    if check_set & 5 != 0 && hit_count > 0 {
        return if invert {
            Item::Fixed(true, "recent ! --hitcount (a source not flooding)")
        } else {
            Item::Limit(format!(
                "a per-source hit count (recent list {name}), refused past it"
            ))
        };
    }
    unknown(format!("whether the source is on recent list {name}"))
}

/// A `set` match of ipset `set` over `dims` dimensions, with the kernel's flags (bit 0 the
/// inversion, bit `i + 1` dimension `i` from the source).
pub(super) fn ipset(set: IpsetRef, dims: u8, flags: u8) -> Item {
    Item::Cond(Cond {
        key: Vec::new(),
        test: Test::Ipset {
            set,
            dims,
            src: flags & 0x7e,
            neg: flags & 1 != 0,
        },
    })
}

pub(super) fn fixed(f: XtFixed) -> Item {
    cmp(Load::new(Src::XtFixed(f), 1), false, vec![1])
}

/// x_tables targets that never end a packet's way through a chain, read after MARK and
/// CONNMARK, which the evaluator follows for what they set.
pub(super) const GOING_ON: &[&str] = &[
    "LOG",
    "NFLOG",
    "ULOG",
    "MARK",
    "CONNMARK",
    "TCPMSS",
    "NOTRACK",
    "CT",
    "CLASSIFY",
    "DSCP",
    "TOS",
    "TTL",
    "HL",
    "SECMARK",
    "CONNSECMARK",
    "AUDIT",
    "TRACE",
    "CHECKSUM",
    "TEE",
    "IDLETIMER",
    "LED",
    "SET",
    "comment",
];

pub(super) const NAT: &[&str] = &["DNAT", "SNAT", "MASQUERADE", "REDIRECT", "NETMAP"];

/// The steps of an x_tables target inside an nf_tables rule.
pub fn target_items(e: &Expr) -> Vec<Item> {
    let name = e.xt_name().unwrap_or_default();
    let info = e.xt_info();
    match name.as_str() {
        "REJECT" => vec![Item::Act(Act::Drop)],
        n if NAT.contains(&n) => vec![Item::Act(Act::Nat)],
        // struct xt_mark_tginfo2 { mark, mask }: mark = (mark & ~mask) ^ value.
        "MARK" => match info
            .as_ref()
            .and_then(|(_, b)| Some((u32_at(b, 0)?, u32_at(b, 4)?)))
        {
            Some((mark, mask)) => vec![Item::Mark(MarkOp::AndXor {
                keep: !mask,
                xor: mark,
            })],
            None => vec![Item::Mark(MarkOp::Set(Load::new(
                Src::Unknown("a MARK target".into()),
                4,
            )))],
        },
        // struct xt_connmark_tginfo1/2 { ctmark, ctmask, nfmask; u8 mode; … }.
        "CONNMARK" => {
            let parts = info.as_ref().and_then(|(_, b)| {
                Some((u32_at(b, 0)?, u32_at(b, 4)?, u32_at(b, 8)?, *b.get(12)?))
            });
            match parts {
                Some((ctmark, ctmask, _, 0)) => vec![Item::CtMark(MarkOp::AndXor {
                    keep: !ctmask,
                    xor: ctmark,
                })],
                Some((_, ctmask, nfmask, 1)) => {
                    vec![Item::CtMark(MarkOp::SaveToCt { ctmask, nfmask })]
                }
                Some((_, ctmask, nfmask, 2)) => {
                    vec![Item::Mark(MarkOp::RestoreFromCt { ctmask, nfmask })]
                }
                _ => vec![Item::CtMark(MarkOp::Set(Load::new(
                    Src::Unknown("a CONNMARK target".into()),
                    4,
                )))],
            }
        }
        n if GOING_ON.contains(&n) => vec![],
        other => vec![Item::Act(Act::Unknown(format!("target {other}")))],
    }
}
