//! iptables-legacy's rules for the evaluator, read from `iptables-legacy-save`: each spec's
//! options turned into the same steps as iptables-nft's x_tables matches and targets.

use super::addrs::Fam;
use super::ir::{Act, Cond, IpsetRef, Item, Load, MarkOp, Src, Test, XtFixed};
use super::xt::{
    any_bit, cmp, dport, fixed, l4proto, masked, orig_dport, sport, tcp_flags, unknown, GOING_ON,
    NAT,
};
use crate::netlink::{CtKey, MetaKey, PayloadBase};

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
            then: Vec::new(),
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
                    "recent" => Some(legacy_recent(words.get(i + 2..).unwrap_or(&[]))),
                    "connlimit" => None,
                    "frag" | "hbh" | "dst" | "rt" | "mh" => Some(Item::Fixed(
                        false,
                        "an IPv6 extension header (a new connection's SYN carries none)",
                    )),
                    "string" | "u32" | "bpf" | "time" | "statistic" | "length" | "ttl" | "hl"
                    | "dscp" | "tos" | "ecn" | "physdev" | "socket" | "owner" | "policy"
                    | "quota" | "helper" | "realm" | "cgroup" | "cluster" | "devgroup" | "cpu"
                    | "tcpmss" | "osf" | "ipvs" | "connbytes" | "dccp" | "sctp" | "ah" | "esp"
                    | "ipv6header" | "eui64" | "geoip" | "condition" | "account" => {
                        Some(unknown(format!("the {module} match")))
                    }
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
            "--hashlimit-above" => {
                item = Some(Item::Limit(
                    "a per-source rate limit (hashlimit), refused over it".into(),
                ))
            }
            "--connlimit-above" | "--connlimit-upto" if module == "connlimit" => {
                // `! --connlimit-above N` is `--connlimit-upto N`.
                item = Some(if (w == "--connlimit-above") != neg {
                    Item::Limit("a per-source connection count (connlimit), refused over it".into())
                } else {
                    Item::Fixed(true, "a connection count")
                });
            }
            "--connlimit-mask" if module == "connlimit" => {}
            // `-m set [!] --match-set NAME src,dst`: the set by its name, the dimensions in order.
            "--match-set" if module == "set" => {
                took = 3;
                let dirs: Vec<&str> = arg(i + 1).split(',').collect();
                let ok = dirs.len() <= 6 && dirs.iter().all(|d| *d == "src" || *d == "dst");
                item = Some(if ok {
                    let src = dirs
                        .iter()
                        .enumerate()
                        .filter(|(_, d)| **d == "src")
                        .fold(0u8, |f, (n, _)| f | (2 << n));
                    super::xt::ipset(
                        IpsetRef::Name(arg(i).to_string()),
                        dirs.len() as u8,
                        src | u8::from(neg),
                    )
                } else {
                    unknown(format!("ipset {} by {}", arg(i), arg(i + 1)))
                });
            }
            // Counters are updated, not tested, unless a --packets/--bytes test follows (an
            // option read as unknown below).
            "--update-counters" | "--update-subcounters" if module == "set" => took = 1,
            "--connlimit-saddr" | "--connlimit-daddr" if module == "connlimit" => took = 1,
            "--set" | "--rcheck" | "--update" | "--remove" | "--rsource" | "--rdest" | "--reap"
            | "--rttl"
                if module == "recent" =>
            {
                took = 1
            }
            "--seconds" | "--hitcount" | "--name" | "--mask" if module == "recent" => {}
            "-c" | "--set-counters" => took = 3,
            "-j" | "--jump" | "-g" | "--goto" => {
                out.extend(legacy_target(
                    arg(i),
                    matches!(w, "-g" | "--goto"),
                    // A `-j` that ends the spec has no target and no options.
                    words.get(i + 2..).unwrap_or(&[]),
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
                        | "connlimit"
                        | "recent"
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
            let inverted = words
                .get(i + 2..)
                .unwrap_or(&[])
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

/// `-m recent` as saved: its options up to the next match or the target.
fn legacy_recent(opts: &[String]) -> Item {
    let mut check_set = 0u8;
    let mut hit_count = 0u32;
    let mut invert = false;
    let mut name = "DEFAULT".to_string();
    let mut neg = false;
    let mut j = 0;
    while j < opts.len() && !matches!(opts[j].as_str(), "-m" | "--match" | "-j" | "-g") {
        let next = opts.get(j + 1).map(String::as_str).unwrap_or("");
        match opts[j].as_str() {
            "!" => {
                neg = true;
                j += 1;
                continue;
            }
            "--rcheck" => check_set |= 1,
            "--set" => check_set |= 2,
            "--update" => check_set |= 4,
            "--remove" => check_set |= 8,
            "--hitcount" => hit_count = next.parse().unwrap_or(0),
            "--name" => name = next.to_string(),
            _ => {}
        }
        if matches!(
            opts[j].as_str(),
            "--rcheck" | "--set" | "--update" | "--remove"
        ) {
            invert |= neg;
        }
        neg = false;
        j += 1;
    }
    super::xt::recent(check_set, hit_count, invert, &name)
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
        t if GOING_ON.contains(&t) => vec![],
        other => vec![Item::Act(Act::Unknown(format!("target {other}")))],
    }
}
