//! x_tables for the evaluator: the matches and targets iptables-nft keeps as x_tables
//! extensions inside nf_tables rules (their kernel structs decoded), and iptables-legacy's
//! rules read from `iptables-legacy-save`, both turned into the evaluator's steps.

use super::addrs::Fam;
use super::ir::{Act, Cond, Item, Load, MarkOp, Src, Test, XtFixed};
use crate::netlink::{CmpOp, CtDirection, CtKey, Expr, MetaKey, PayloadBase};

fn dport() -> Load {
    Load::new(
        Src::Payload {
            base: PayloadBase::Transport,
            offset: 2,
            len: 2,
        },
        2,
    )
}

fn sport() -> Load {
    Load::new(
        Src::Payload {
            base: PayloadBase::Transport,
            offset: 0,
            len: 2,
        },
        2,
    )
}

fn tcp_flags(mask: u8) -> Load {
    Load {
        src: Src::Payload {
            base: PayloadBase::Transport,
            offset: 13,
            len: 1,
        },
        len: 1,
        mask: Some((vec![mask], vec![0])),
    }
}

fn l4proto() -> Load {
    Load::new(Src::Meta(MetaKey::L4Proto), 1)
}

fn orig_dport() -> Load {
    Load::new(
        Src::Ct {
            key: CtKey::ProtoDst,
            dir: Some(CtDirection::Original),
        },
        2,
    )
}

fn masked(src: Src, mask: u32) -> Load {
    Load {
        src,
        len: 4,
        mask: Some((mask.to_ne_bytes().to_vec(), vec![0; 4])),
    }
}

fn cmp(key: Load, neg: bool, data: Vec<u8>) -> Item {
    Item::Cond(Cond {
        key: vec![key],
        test: Test::Cmp {
            op: if neg { CmpOp::Neq } else { CmpOp::Eq },
            data,
        },
    })
}

/// `(key & mask) != 0`, or `== 0` when inverted: how x_tables tests state and status bits.
fn any_bit(src: Src, mask: u32, inv: bool) -> Item {
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

fn unknown(what: String) -> Item {
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

fn decode_match(name: &str, rev: u32, b: &[u8]) -> Option<Vec<Item>> {
    let mut out = Vec::new();
    match name {
        "comment" | "nfacct" => {}
        "limit" | "hashlimit" => out.push(Item::Fixed(true, "a rate limit")),
        // struct xt_connlimit_info: a 16-byte mask, limit, flags (bit 0: --connlimit-upto).
        "connlimit" => out.push(Item::Fixed(u32_at(b, 20)? & 1 != 0, "a connection count")),
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
        // and four ports (u16 at 136..146), then the flags, inversions, state and status masks.
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
                let p = b.get(140..142)?.to_vec();
                out.push(cmp(orig_dport(), inv & ORIGDST_PORT != 0, p));
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

fn fixed(f: XtFixed) -> Item {
    cmp(Load::new(Src::XtFixed(f), 1), false, vec![1])
}

/// x_tables targets that never end a packet's way through a chain.
const GOING_ON: &[&str] = &[
    "LOG",
    "NFLOG",
    "ULOG",
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

const NAT: &[&str] = &["DNAT", "SNAT", "MASQUERADE", "REDIRECT", "NETMAP"];

/// The steps of an x_tables target inside an nf_tables rule.
pub fn target_items(e: &Expr) -> Vec<Item> {
    let name = e.xt_name().unwrap_or_default();
    let info = e.xt_info();
    match name.as_str() {
        "REJECT" => vec![Item::Act(Act::Drop)],
        n if NAT.contains(&n) => vec![Item::Act(Act::Nat)],
        n if GOING_ON.contains(&n) => vec![],
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
        other => vec![Item::Act(Act::Unknown(format!("target {other}")))],
    }
}

// ---------------------------------------------------------------------------------------------
// iptables-legacy, from its save.

fn addr_load(fam: Fam, src: bool) -> Src {
    let offset = match (fam, src) {
        (Fam::V4, true) => 12,
        (Fam::V4, false) => 16,
        (Fam::V6, true) => 8,
        (Fam::V6, false) => 24,
    };
    Src::Payload {
        base: PayloadBase::Network,
        offset,
        len: fam.len() as u32,
    }
}

/// `ADDR[/PREFIX|/MASK]` as a condition on the source or destination address.
fn addr_cond(fam: Fam, src: bool, text: &str, neg: bool) -> Option<Item> {
    let (a, m) = text.split_once('/').unwrap_or((text, ""));
    let ip: std::net::IpAddr = a.parse().ok()?;
    let bits = fam.len() * 8;
    let mask: Vec<u8> = if m.is_empty() {
        vec![0xff; fam.len()]
    } else if let Ok(p) = m.parse::<usize>() {
        let p = p.min(bits);
        (0..fam.len())
            .map(|i| {
                let have = p.saturating_sub(i * 8).min(8);
                (0xffu16 << (8 - have)) as u8
            })
            .collect()
    } else {
        let mip: std::net::IpAddr = m.parse().ok()?;
        match mip {
            std::net::IpAddr::V4(v) => v.octets().to_vec(),
            std::net::IpAddr::V6(v) => v.octets().to_vec(),
        }
    };
    let bytes = match ip {
        std::net::IpAddr::V4(v) => v.octets().to_vec(),
        std::net::IpAddr::V6(v) => v.octets().to_vec(),
    };
    if bytes.len() != fam.len() {
        return None;
    }
    let data: Vec<u8> = bytes.iter().zip(&mask).map(|(b, m)| b & m).collect();
    let full = mask.iter().all(|b| *b == 0xff);
    Some(cmp(
        Load {
            src: addr_load(fam, src),
            len: fam.len() as u32,
            mask: (!full).then(|| (mask, vec![0; fam.len()])),
        },
        neg,
        data,
    ))
}

fn iface_cond(out: bool, name: &str, neg: bool) -> Item {
    let key = if out {
        MetaKey::OifName
    } else {
        MetaKey::IifName
    };
    let data = match name.strip_suffix('+') {
        Some(prefix) => prefix.as_bytes().to_vec(),
        None => {
            let mut d = name.as_bytes().to_vec();
            d.push(0);
            d
        }
    };
    if data.is_empty() {
        // `-i +` matches every interface.
        return Item::Fixed(!neg, "any interface");
    }
    cmp(Load::new(Src::Meta(key), data.len() as u32), neg, data)
}

fn port_text(t: &str) -> Option<(u16, u16)> {
    match t.split_once(':') {
        Some((a, b)) => Some((
            if a.is_empty() { 0 } else { a.parse().ok()? },
            if b.is_empty() {
                u16::MAX
            } else {
                b.parse().ok()?
            },
        )),
        None => {
            let p = t.parse().ok().or_else(|| service_port(t))?;
            Some((p, p))
        }
    }
}

/// The few service names iptables-save may print for a port.
fn service_port(name: &str) -> Option<u16> {
    Some(match name {
        "ssh" => 22,
        "http" => 80,
        "https" => 443,
        "domain" => 53,
        "smtp" => 25,
        _ => return None,
    })
}

fn tcp_flag_bits(list: &str) -> Option<u8> {
    let mut v = 0u8;
    for f in list.split(',') {
        v |= match f {
            "FIN" => 0x01,
            "SYN" => 0x02,
            "RST" => 0x04,
            "PSH" => 0x08,
            "ACK" => 0x10,
            "URG" => 0x20,
            "ALL" => 0x3f,
            "NONE" => 0,
            _ => return None,
        };
    }
    Some(v)
}

fn ct_state_bits(list: &str, module: &str) -> Option<u32> {
    let mut v = 0;
    for s in list.split(',') {
        v |= match s {
            "INVALID" => 1,
            "ESTABLISHED" => 2,
            "RELATED" => 4,
            "NEW" => 8,
            "SNAT" if module == "conntrack" => 64,
            "DNAT" if module == "conntrack" => 128,
            "UNTRACKED" if module == "conntrack" => 256,
            "UNTRACKED" => 64,
            _ => return None,
        };
    }
    Some(v)
}

fn addr_type_bits(list: &str) -> Option<u16> {
    let mut v = 0;
    for t in list.split(',') {
        v |= match t {
            "UNSPEC" => 1,
            "UNICAST" => 2,
            "LOCAL" => 4,
            "BROADCAST" => 8,
            "ANYCAST" => 16,
            "MULTICAST" => 32,
            "BLACKHOLE" => 64,
            "UNREACHABLE" => 128,
            "PROHIBIT" => 256,
            "THROW" => 512,
            "NAT" => 1024,
            "XRESOLVE" => 2048,
            _ => return None,
        };
    }
    Some(v)
}

fn mark_text(t: &str) -> Option<(u32, u32)> {
    let num = |s: &str| {
        s.strip_prefix("0x")
            .map(|h| u32::from_str_radix(h, 16).ok())
            .unwrap_or_else(|| s.parse().ok())
    };
    match t.split_once('/') {
        Some((v, m)) => Some((num(v)?, num(m)?)),
        None => Some((num(t)?, u32::MAX)),
    }
}

/// Reads one `iptables-save` rule spec (what follows `-A CHAIN`) of family `fam` into steps.
/// `chains` are the table's user chains, so `-j NAME` is known for a jump.
pub fn legacy_items(spec: &str, fam: Fam, chains: &[String]) -> Vec<Item> {
    let Some(words) = crate::rules::split_spec(spec) else {
        return vec![unknown(format!("a rule this host cannot split: {spec}"))];
    };
    let mut out = Vec::new();
    let mut i = 0;
    let mut neg = false;
    let mut module = String::new();
    let arg = |i: usize| words.get(i + 1).map(String::as_str).unwrap_or("");
    while i < words.len() {
        let w = words[i].as_str();
        let mut took = 2;
        let mut item: Option<Item> = None;
        match w {
            "!" => {
                neg = true;
                i += 1;
                continue;
            }
            "-p" | "--protocol" => {
                let p = match arg(i) {
                    "tcp" | "6" => Some(6),
                    "udp" | "17" => Some(17),
                    "icmp" | "1" => Some(1),
                    "ipv6-icmp" | "icmpv6" | "58" => Some(58),
                    "sctp" | "132" => Some(132),
                    "all" | "0" => None,
                    other => {
                        item = Some(unknown(format!("protocol {other}")));
                        None
                    }
                };
                if let Some(p) = p {
                    item = Some(cmp(l4proto(), neg, vec![p]));
                }
            }
            "-s" | "--source" | "--src" | "-d" | "--destination" | "--dst" => {
                let src = matches!(w, "-s" | "--source" | "--src");
                item = Some(
                    addr_cond(fam, src, arg(i), neg)
                        .unwrap_or_else(|| unknown(format!("address {}", arg(i)))),
                );
            }
            "-i" | "--in-interface" | "-o" | "--out-interface" => {
                item = Some(iface_cond(
                    w.starts_with("-o") || w == "--out-interface",
                    arg(i),
                    neg,
                ));
            }
            "-m" | "--match" => {
                module = arg(i).to_string();
                item = match module.as_str() {
                    "limit" | "hashlimit" => Some(Item::Fixed(true, "a rate limit")),
                    "frag" | "hbh" | "dst" | "rt" | "mh" => Some(Item::Fixed(
                        false,
                        "an IPv6 extension header (a new connection's SYN carries none)",
                    )),
                    "set" | "recent" | "string" | "u32" | "bpf" | "time" | "statistic"
                    | "length" | "ttl" | "hl" | "dscp" | "tos" | "ecn" | "physdev" | "socket"
                    | "owner" | "policy" | "quota" | "helper" | "realm" | "cgroup" | "cluster"
                    | "devgroup" | "cpu" | "tcpmss" | "osf" | "ipvs" | "connbytes" | "dccp"
                    | "sctp" | "ah" | "esp" | "ipv6header" | "eui64" | "geoip" | "condition"
                    | "account" => Some(unknown(format!("the {module} match"))),
                    _ => None,
                };
            }
            "--dport" | "--destination-port" | "--sport" | "--source-port" => {
                let key = if w.contains('d') && !w.starts_with("--s") {
                    dport()
                } else {
                    sport()
                };
                item = Some(match port_text(arg(i)) {
                    Some((lo, hi)) => Item::Cond(Cond {
                        key: vec![key],
                        test: Test::Range {
                            neg,
                            lo: lo.to_be_bytes().to_vec(),
                            hi: hi.to_be_bytes().to_vec(),
                        },
                    }),
                    None => unknown(format!("port {}", arg(i))),
                });
            }
            "--dports" | "--destination-ports" | "--sports" | "--source-ports" | "--ports" => {
                let key = match w {
                    "--dports" | "--destination-ports" => Some(dport()),
                    "--sports" | "--source-ports" => Some(sport()),
                    _ => None,
                };
                let ranges: Option<Vec<(Vec<u8>, Vec<u8>)>> = arg(i)
                    .split(',')
                    .map(|p| {
                        port_text(p)
                            .map(|(lo, hi)| (lo.to_be_bytes().to_vec(), hi.to_be_bytes().to_vec()))
                    })
                    .collect();
                item = Some(match (key, ranges) {
                    (Some(key), Some(ranges)) => Item::Cond(Cond {
                        key: vec![key],
                        test: Test::InList { neg, ranges },
                    }),
                    _ => unknown(format!("ports {}", arg(i))),
                });
            }
            "--syn" => {
                took = 1;
                item = Some(cmp(tcp_flags(0x17), neg, vec![0x02]));
            }
            "--tcp-flags" => {
                took = 3;
                let (m, c) = (tcp_flag_bits(arg(i)), tcp_flag_bits(arg(i + 1)));
                item = Some(match (m, c) {
                    (Some(m), Some(c)) => cmp(tcp_flags(m), neg, vec![c]),
                    _ => unknown("tcp flags".into()),
                });
            }
            "--ctstate" | "--state" => {
                item = Some(match ct_state_bits(arg(i), &module) {
                    Some(bits) => any_bit(Src::XtCtState, bits, neg),
                    None => unknown(format!("state {}", arg(i))),
                });
            }
            "--ctstatus" => {
                let mut bits = 0u32;
                let mut ok = true;
                for s in arg(i).split(',') {
                    bits |= match s {
                        "NONE" => 0,
                        "EXPECTED" => 1,
                        "SEEN_REPLY" => 2,
                        "ASSURED" => 4,
                        "CONFIRMED" => 8,
                        _ => {
                            ok = false;
                            0
                        }
                    };
                }
                item = Some(if ok {
                    any_bit(
                        Src::Ct {
                            key: CtKey::Status,
                            dir: None,
                        },
                        bits,
                        neg,
                    )
                } else {
                    unknown(format!("status {}", arg(i)))
                });
            }
            "--ctorigdstport" => {
                item = Some(match arg(i).parse::<u16>() {
                    Ok(p) => cmp(orig_dport(), neg, p.to_be_bytes().to_vec()),
                    Err(_) => unknown(format!("original port {}", arg(i))),
                });
            }
            "--ctproto" => {
                item = Some(match arg(i) {
                    "tcp" | "6" => cmp(l4proto(), neg, vec![6]),
                    "udp" | "17" => cmp(l4proto(), neg, vec![17]),
                    other => unknown(format!("conntrack protocol {other}")),
                });
            }
            "--mark" if module == "mark" || module == "connmark" => {
                let src = if module == "mark" {
                    Src::Meta(MetaKey::Mark)
                } else {
                    Src::Ct {
                        key: CtKey::Mark,
                        dir: None,
                    }
                };
                item = Some(match mark_text(arg(i)) {
                    Some((v, m)) => cmp(masked(src, m), neg, (v & m).to_ne_bytes().to_vec()),
                    None => unknown(format!("mark {}", arg(i))),
                });
            }
            "--pkt-type" => {
                let t = match arg(i) {
                    "host" | "unicast" => Some(0u8),
                    "broadcast" => Some(1),
                    "multicast" => Some(2),
                    "otherhost" => Some(3),
                    _ => None,
                };
                item = Some(match t {
                    Some(t) => cmp(Load::new(Src::Meta(MetaKey::PktType), 1), neg, vec![t]),
                    None => unknown(format!("packet type {}", arg(i))),
                });
            }
            "--src-type" | "--dst-type" => {
                item = Some(match addr_type_bits(arg(i)) {
                    Some(bits) => fixed(if w == "--src-type" {
                        XtFixed::AddrType {
                            src: bits,
                            dst: 0,
                            inv_src: neg,
                            inv_dst: false,
                        }
                    } else {
                        XtFixed::AddrType {
                            src: 0,
                            dst: bits,
                            inv_src: false,
                            inv_dst: neg,
                        }
                    }),
                    None => unknown(format!("address type {}", arg(i))),
                });
            }
            "--limit-iface-in" | "--limit-iface-out" | "--loose" | "--validmark"
            | "--accept-local" => took = 1,
            "--invert" if module == "rpfilter" => {
                took = 1;
                item = Some(fixed(XtFixed::RpFilter { invert: true }));
            }
            "--src-range" | "--dst-range" => {
                let src = w == "--src-range";
                item = Some(match arg(i).split_once('-') {
                    Some((a, b)) => {
                        match (a.parse::<std::net::IpAddr>(), b.parse::<std::net::IpAddr>()) {
                            (Ok(a), Ok(b)) => Item::Cond(Cond {
                                key: vec![Load::new(addr_load(fam, src), fam.len() as u32)],
                                test: Test::Range {
                                    neg,
                                    lo: ip_bytes(a),
                                    hi: ip_bytes(b),
                                },
                            }),
                            _ => unknown(format!("address range {}", arg(i))),
                        }
                    }
                    None => unknown(format!("address range {}", arg(i))),
                });
            }
            "--comment"
            | "--limit"
            | "--limit-burst"
            | "--log-prefix"
            | "--log-level"
            | "--hashlimit"
            | "--hashlimit-upto"
            | "--hashlimit-burst"
            | "--hashlimit-mode"
            | "--hashlimit-name"
            | "--hashlimit-htable-expire"
            | "--hashlimit-srcmask" => {}
            "--hashlimit-above" => item = Some(Item::Fixed(false, "a rate limit")),
            "-c" | "--set-counters" => took = 3,
            "-j" | "--jump" | "-g" | "--goto" => {
                out.extend(legacy_target(
                    arg(i),
                    matches!(w, "-g" | "--goto"),
                    &words[i + 2..],
                    chains,
                ));
                break;
            }
            _ => {
                // An option of a module this host does not read: the module's one unknown.
                took = if words.get(i + 1).is_some_and(|n| !n.starts_with('-')) {
                    2
                } else {
                    1
                };
                if module == "rpfilter" {
                    item = None;
                } else if !matches!(
                    module.as_str(),
                    "comment"
                        | "limit"
                        | "hashlimit"
                        | "tcp"
                        | "udp"
                        | "multiport"
                        | "state"
                        | "conntrack"
                        | "mark"
                        | "connmark"
                        | "pkttype"
                        | "addrtype"
                        | "iprange"
                        | "rpfilter"
                        | "icmp"
                        | "icmp6"
                        | "frag"
                        | "hbh"
                        | "dst"
                        | "rt"
                        | "mh"
                ) || (w.starts_with("--")
                    && !matches!(module.as_str(), "frag" | "hbh" | "dst" | "rt" | "mh"))
                {
                    item = Some(unknown(format!("{} {}", w, arg(i))));
                }
            }
        }
        if module == "rpfilter" && w == "-m" {
            // `-m rpfilter` without --invert holds for a real source; --invert replaces it.
            let inverted = words[i + 2..]
                .iter()
                .take_while(|x| *x != "-m" && *x != "-j")
                .any(|x| x == "--invert");
            if !inverted {
                out.push(fixed(XtFixed::RpFilter { invert: false }));
            }
        }
        out.extend(item);
        neg = false;
        i += took;
    }
    out
}

fn ip_bytes(a: std::net::IpAddr) -> Vec<u8> {
    match a {
        std::net::IpAddr::V4(v) => v.octets().to_vec(),
        std::net::IpAddr::V6(v) => v.octets().to_vec(),
    }
}

fn legacy_target(target: &str, goto: bool, opts: &[String], chains: &[String]) -> Vec<Item> {
    let opt = |name: &str| {
        opts.iter()
            .position(|o| o == name)
            .and_then(|i| opts.get(i + 1))
            .map(String::as_str)
    };
    match target {
        "ACCEPT" => vec![Item::Act(Act::Accept)],
        "DROP" | "REJECT" => vec![Item::Act(Act::Drop)],
        "RETURN" => vec![Item::Act(Act::Return)],
        t if chains.iter().any(|c| c == t) => vec![Item::Act(if goto {
            Act::Goto(t.to_string())
        } else {
            Act::Jump(t.to_string())
        })],
        t if NAT.contains(&t) => vec![Item::Act(Act::Nat)],
        t if GOING_ON.contains(&t) => vec![],
        "MARK" => {
            let op = if let Some((v, m)) = opt("--set-xmark").and_then(mark_text) {
                MarkOp::AndXor { keep: !m, xor: v }
            } else if let Some((v, m)) = opt("--set-mark").and_then(mark_text) {
                MarkOp::AndXor {
                    keep: !m,
                    xor: v & m,
                }
            } else {
                MarkOp::Set(Load::new(Src::Unknown("a MARK target".into()), 4))
            };
            vec![Item::Mark(op)]
        }
        "CONNMARK" => {
            let mask = opt("--mask").and_then(mark_text).map(|(v, _)| v);
            if let Some((v, m)) = opt("--set-xmark").or(opt("--set-mark")).and_then(mark_text) {
                vec![Item::CtMark(MarkOp::AndXor {
                    keep: !m,
                    xor: v & m,
                })]
            } else if opts.iter().any(|o| o == "--save-mark") {
                let m = mask.unwrap_or(u32::MAX);
                vec![Item::CtMark(MarkOp::SaveToCt {
                    ctmask: opt("--ctmask").and_then(mark_text).map_or(m, |x| x.0),
                    nfmask: opt("--nfmask").and_then(mark_text).map_or(m, |x| x.0),
                })]
            } else if opts.iter().any(|o| o == "--restore-mark") {
                let m = mask.unwrap_or(u32::MAX);
                vec![Item::Mark(MarkOp::RestoreFromCt {
                    ctmask: opt("--ctmask").and_then(mark_text).map_or(m, |x| x.0),
                    nfmask: opt("--nfmask").and_then(mark_text).map_or(m, |x| x.0),
                })]
            } else {
                vec![Item::CtMark(MarkOp::Set(Load::new(
                    Src::Unknown("a CONNMARK target".into()),
                    4,
                )))]
            }
        }
        other => vec![Item::Act(Act::Unknown(format!("target {other}")))],
    }
}
