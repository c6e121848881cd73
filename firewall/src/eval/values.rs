//! The values a walk reads: what each load gives for the connection at its point of the way
//! (concrete bytes, the symbolic source address, or something not known), and how a condition
//! holds on them: comparisons, ranges, lists, sets with their intervals and concatenations, and
//! verdict maps, splitting the sources where a test is about them.

use super::addrs::{from_be, Addrs, Fam};
use super::ir::{is_dport, is_orig_dport, Cond, Load, RegOp, Src, Test, XtFixed};
use super::model::{SetIr, TableIr};
use super::walk::{At, Pkt, Val, Walker, M};
use super::{Conn, Path};
use crate::netlink::consts::NFTA_FIB_F_PRESENT;
use crate::netlink::{CmpOp, CtDirection, CtKey, FibResult, Hook, MetaKey, PayloadBase, Verdict};
use std::net::IpAddr;

impl Walker<'_> {
    /// A load's value for this connection at this point of its way.
    pub(super) fn load(&self, l: &Load, at: &At<'_>, q: &Pkt) -> Val {
        let c = at.conn;
        let raw = match &l.src {
            Src::Imm(b) => Val::Bytes(b.clone()),
            Src::Meta(k) => meta(k, at, q),
            Src::Payload { base, offset, len } => {
                payload(l, base, *offset as usize, *len as usize, at)
            }
            // No conntrack entry: the state reads untracked, any other key stops the rule.
            Src::Ct {
                key: CtKey::State, ..
            } if q.untracked => ne32(64),
            Src::Ct { .. } if q.untracked => {
                Val::Unknown("conntrack data of an untracked connection".into())
            }
            Src::Ct { key, dir } => ct(key, dir, c, q),
            Src::Fib { result, flags } => fib(result, *flags, c),
            // x_tables' untracked bits: xt_state's (64) and xt_conntrack's (256).
            Src::XtCtState if q.untracked => ne32(64 | 256),
            Src::XtCtState => ne32(8 | if dnat(c) { 128 } else { 0 }),
            Src::XtFixed(f) => Val::Bytes(vec![u8::from(fixed(f, c))]),
            Src::Unknown(w) => Val::Unknown(w.clone()),
        };
        apply_mask(raw, l)
    }

    pub(super) fn cond(&self, table: &TableIr, c: &Cond, at: &At<'_>, q: &Pkt) -> M {
        if let Test::Ipset {
            set,
            dims,
            src,
            neg,
        } = &c.test
        {
            return self.ipset_cond(set, *dims, *src, *neg, at, q);
        }
        let vals: Vec<Val> = c.key.iter().map(|l| self.load(l, at, q)).collect();
        let about_port = c.key.len() == 1 && (is_dport(&c.key[0]) || is_orig_dport(&c.key[0]));
        let positive = match &c.test {
            Test::Cmp { op, .. } => *op != CmpOp::Neq,
            Test::Range { neg, .. }
            | Test::InList { neg, .. }
            | Test::InSet { neg, .. }
            | Test::Ipset { neg, .. } => !neg,
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
        if let Test::InSet { set, .. } = &c.test {
            if q.changed.contains(set) {
                return M::Unknown(format!("set {set}, which a rule on this way updates"));
            }
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
                        Test::Ipset { .. } => unreachable!("read above"),
                    };
                    return if hit { M::All(named) } else { M::None };
                }
                Val::Saddr { off, len, mask } => {
                    let addrs = match saddr_set(fam, *off, *len, mask.as_deref(), &c.test, table) {
                        Ok(a) => a,
                        Err(why) => return M::Unknown(why.to_string()),
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
            Err(why) => M::Unknown(why.to_string()),
        }
    }
}

/// A 32-bit value in the machine's byte order, as meta and ct keys give it.
fn ne32(v: u32) -> Val {
    Val::Bytes(v.to_ne_bytes().to_vec())
}

/// An interface's name as `iifname` reads it: 16 bytes, zero-padded.
fn iface_name(n: &str) -> Val {
    let mut b = n.as_bytes().to_vec();
    b.resize(16, 0);
    Val::Bytes(b)
}

/// Whether the connection is translated by the runtime's DNAT (a routed packet is forwarded as
/// sent).
fn dnat(c: &Conn) -> bool {
    c.path == Path::Forwarded && !c.routed
}

/// A meta key's value for the connection at this point of its way.
fn meta(k: &MetaKey, at: &At<'_>, q: &Pkt) -> Val {
    let c = at.conn;
    let v4 = c.fam == Fam::V4;
    match k {
        MetaKey::L4Proto => Val::Bytes(vec![c.proto]),
        MetaKey::NfProto => Val::Bytes(vec![if v4 { 2 } else { 10 }]),
        MetaKey::Protocol => Val::Bytes(
            if v4 { 0x0800u16 } else { 0x86ddu16 }
                .to_be_bytes()
                .to_vec(),
        ),
        MetaKey::IifName => iface_name(&c.iif),
        MetaKey::OifName => match (at.hook, &c.oif) {
            (Hook::Forward | Hook::Postrouting, Some(o)) => iface_name(o),
            (Hook::Forward | Hook::Postrouting, None) => {
                Val::Unknown("the interface it leaves by".into())
            }
            _ => iface_name(""),
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
        MetaKey::SdifName => iface_name(""),
        other => Val::Unknown(format!("meta {}", other.nft_name())),
    }
}

/// A payload load's value: the network header's addresses and protocol, the transport
/// header's destination port and SYN flag; any other bytes not known.
fn payload(l: &Load, base: &PayloadBase, off: usize, len: usize, at: &At<'_>) -> Val {
    let c = at.conn;
    let v4 = c.fam == Fam::V4;
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
                    Some(d) => Val::Bytes(ip_bytes(d)[off - d0..off - d0 + len].to_vec()),
                    None => Val::Unknown("the destination address".into()),
                }
            } else if off == proto_at && len == 1 {
                Val::Bytes(vec![c.proto])
            } else if v4 && off == 6 && len <= 2 && frag_bits_only(l) {
                // `ip frag-off & 0x1fff`, `& 0x2000` (more fragments): the first
                // packet of a connection, whole, is no fragment; only the
                // don't-fragment bit is the sender's choice.
                Val::Bytes(vec![0; len])
            } else {
                Val::Unknown(format!("network header bytes {off}..{}", off + len))
            }
        }
        PayloadBase::Transport => match (off, len) {
            (2, 2) => match at.dport() {
                Some(p) => Val::Bytes(p.to_be_bytes().to_vec()),
                None => Val::Unknown("the port the runtime's DNAT sends it to".into()),
            },
            (13, 1) if c.proto == 6 => Val::Bytes(vec![0x02]),
            (0, 2) => Val::Unknown("the source port".into()),
            _ => Val::Unknown(format!("transport header bytes {off}..{}", off + len)),
        },
        _ => Val::Unknown(format!("{} header bytes", base.nft_name())),
    }
}

/// A conntrack key's value for a tracked connection (new, translated by the runtime's DNAT
/// when forwarded to it).
fn ct(key: &CtKey, dir: &Option<CtDirection>, c: &Conn, q: &Pkt) -> Val {
    let v4 = c.fam == Fam::V4;
    let dnat = dnat(c);
    let orig = matches!(dir, None | Some(CtDirection::Original));
    match key {
        CtKey::State => ne32(8),
        CtKey::Status => ne32(if dnat { 0x20 | 0x100 } else { 0 }),
        CtKey::Mark => match q.ctmark {
            Some(m) => ne32(m),
            None => Val::Unknown("a conntrack mark set on its way".into()),
        },
        CtKey::Direction => Val::Bytes(vec![0]),
        CtKey::L3Protocol => Val::Bytes(vec![if v4 { 2 } else { 10 }]),
        CtKey::Protocol => Val::Bytes(vec![c.proto]),
        CtKey::ProtoDst if orig && dir.is_some() => Val::Bytes(c.port.to_be_bytes().to_vec()),
        CtKey::Src | CtKey::SrcIp | CtKey::SrcIp6 if orig => Val::Saddr {
            off: 0,
            len: c.fam.len(),
            mask: None,
        },
        CtKey::Zone => Val::Bytes(vec![0, 0]),
        other => Val::Unknown(format!("ct {}", other.nft_name())),
    }
}

/// A fib lookup's value: whether a route exists, this machine's address type, the
/// reverse-path check a real source passes, the interface a forwarded connection leaves by.
fn fib(result: &FibResult, flags: u32, c: &Conn) -> Val {
    let forwarded = c.path == Path::Forwarded;
    if flags & NFTA_FIB_F_PRESENT != 0 {
        // `fib … exists` / `missing`: one byte, whether the lookup found a route.
        let saddr = flags & 1 != 0;
        match result {
            // The reverse-path check a real source passes (the evaluator's assumption).
            FibResult::Oif | FibResult::OifName if saddr => Val::Bytes(vec![1, 0, 0, 0]),
            FibResult::Oif | FibResult::OifName if forwarded && c.oif.is_some() => {
                Val::Bytes(vec![1, 0, 0, 0])
            }
            _ => Val::Unknown(format!("fib {} exists", result.nft_name())),
        }
    } else {
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
            FibResult::OifName if saddr => iface_name(&c.iif),
            FibResult::OifName if forwarded => match &c.oif {
                Some(o) => iface_name(o),
                None => Val::Unknown("the interface it is routed to".into()),
            },
            _ => Val::Unknown(format!("fib {}", result.nft_name())),
        }
    }
}

/// Whether a load of the IPv4 header's flags and fragment offset (bytes 6..8) is masked to
/// bits a whole first packet has clear: the reserved bit, more-fragments and the offset, never
/// the don't-fragment bit (0x4000), which depends on the sender.
fn frag_bits_only(l: &Load) -> bool {
    match &l.mask {
        Some((mask, xor)) => {
            mask.first().is_some_and(|m| m & 0x40 == 0) && xor.iter().all(|x| *x == 0)
        }
        None => false,
    }
}

pub(super) fn fixed(f: &XtFixed, c: &Conn) -> bool {
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

pub(super) fn apply_mask(v: Val, l: &Load) -> Val {
    let v = first_mask(v, l);
    if l.then.is_empty() {
        return v;
    }
    match v {
        Val::Bytes(b) => Val::Bytes(apply_then(b, &l.then, l.len as usize)),
        Val::Saddr { .. } => {
            Val::Unknown("the source address byte-swapped, shifted or masked again".into())
        }
        v => v,
    }
}

/// The operations after a load's first mask (`byteorder`, shifts, further masks) on its bytes,
/// each padded with zeros to the bytes it works on, as the kernel's zeroed registers are.
pub(super) fn apply_then(mut b: Vec<u8>, ops: &[RegOp], len: usize) -> Vec<u8> {
    for op in ops {
        match op {
            RegOp::Swap { size, len } => {
                let (size, len) = (*size as usize, *len as usize);
                if b.len() < len {
                    b.resize(len, 0);
                }
                if cfg!(target_endian = "little") {
                    for w in b[..len - len % size].chunks_mut(size) {
                        w.reverse();
                    }
                }
            }
            RegOp::MaskXor(m, x) => {
                if b.len() < m.len() {
                    b.resize(m.len(), 0);
                }
                for (i, v) in b.iter_mut().enumerate() {
                    *v = (*v & m.get(i).copied().unwrap_or(0)) ^ x.get(i).copied().unwrap_or(0);
                }
            }
            RegOp::Shift { left, by, len } => {
                let words = (*len as usize).div_ceil(4).max(1);
                b.resize(b.len().max(words * 4), 0);
                let mut w: Vec<u32> = b[..words * 4]
                    .chunks(4)
                    .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
                    .collect();
                let by = *by;
                let mut carry = 0u32;
                if *left {
                    for x in w.iter_mut().rev() {
                        let next = if by == 0 { 0 } else { *x >> (32 - by) };
                        *x = (*x << by) | carry;
                        carry = next;
                    }
                } else {
                    for x in w.iter_mut() {
                        let next = if by == 0 { 0 } else { *x << (32 - by) };
                        *x = carry | (*x >> by);
                        carry = next;
                    }
                }
                for (i, x) in w.iter().enumerate() {
                    b[i * 4..i * 4 + 4].copy_from_slice(&x.to_ne_bytes());
                }
            }
        }
    }
    b.resize(len, 0);
    b
}

fn first_mask(v: Val, l: &Load) -> Val {
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

pub(super) fn ip_bytes(a: IpAddr) -> Vec<u8> {
    match a {
        IpAddr::V4(v) => v.octets().to_vec(),
        IpAddr::V6(v) => v.octets().to_vec(),
    }
}

pub(super) fn cmp_bytes(b: &[u8], op: CmpOp, data: &[u8]) -> bool {
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

pub(super) fn in_range(b: &[u8], lo: &[u8], hi: &[u8]) -> bool {
    let n = lo.len().min(b.len());
    b[..n] >= lo[..n] && b[..n] <= hi[..n.min(hi.len())]
}

/// A key's parts as a set stores them: a concatenation's each padded to whole registers.
fn padded(parts: &[Vec<u8>]) -> Vec<Vec<u8>> {
    parts
        .iter()
        .map(|p| {
            let mut p = p.clone();
            if parts.len() > 1 {
                p.resize(p.len().div_ceil(4) * 4, 0);
            }
            p
        })
        .collect()
}

/// Whether a set holds a key given as its parts (each padded to whole registers).
pub(super) fn set_has(s: &SetIr, parts: &[Vec<u8>]) -> bool {
    let padded = padded(parts);
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
pub(super) fn fields_in(e: &super::model::SetElem, parts: &[Vec<u8>]) -> bool {
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

/// What the evaluator cannot read of a test of the source address or of a set's key: the
/// reason a verdict is doubtful, put in words here only.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Unread {
    #[error("a test of the middle of the source address")]
    SourceMiddle,
    #[error("a source address under a mask that is no prefix")]
    MaskNotPrefix,
    #[error("an ordering of a masked source address")]
    MaskedOrdering,
    #[error("set {0} is not listed")]
    SetNotListed(String),
    #[error("a source address tested in a way this host does not read")]
    SourceTest,
    #[error("a part of the source address in a concatenation")]
    SourcePart,
    #[error("the source address twice in a concatenation")]
    SourceTwice,
    #[error("a verdict map keyed on the source with other parts")]
    SourceWithParts,
    /// A value the key is made of that the evaluator could not load, as it said it.
    #[error("{0}")]
    Value(String),
    #[error("ipset {name} of type {typename}")]
    IpsetType { name: String, typename: String },
}

/// The sources a test of (part of) the source address holds for.
pub(super) fn saddr_set(
    fam: Fam,
    off: usize,
    len: usize,
    mask: Option<&[u8]>,
    test: &Test,
    table: &TableIr,
) -> Result<Addrs, Unread> {
    if off != 0 {
        return Err(Unread::SourceMiddle);
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
                return Err(Unread::MaskNotPrefix);
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
                _ => Err(Unread::MaskedOrdering),
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
                .ok_or_else(|| Unread::SetNotListed(set.to_string()))?;
            let r = s.addrs(fam);
            Ok(if *neg { r.complement() } else { r })
        }
        _ => Err(Unread::SourceTest),
    }
}

/// For a concatenation with the whole source address in it: the sources of the elements whose
/// other parts match. `None` when no part is the source.
pub(super) fn concat_addrs(
    s: &SetIr,
    vals: &[Val],
    keys: &[Load],
    fam: Fam,
) -> Result<Option<Addrs>, Unread> {
    let Some(at) = vals.iter().position(|v| matches!(v, Val::Saddr { .. })) else {
        return Ok(None);
    };
    if !matches!(vals[at], Val::Saddr { off: 0, len, mask: None } if len == fam.len()) {
        return Err(Unread::SourcePart);
    }
    if vals
        .iter()
        .filter(|v| matches!(v, Val::Saddr { .. }))
        .count()
        > 1
    {
        return Err(Unread::SourceTwice);
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
pub(super) fn vmap_parts(
    s: &SetIr,
    vals: &[Val],
    keys: &[Load],
    q: &Pkt,
    fam: Fam,
) -> Vec<(Addrs, Result<Option<Verdict>, Unread>, bool, bool)> {
    if let Some(Val::Unknown(why)) = vals.iter().find(|v| matches!(v, Val::Unknown(_))) {
        return vec![(q.src.clone(), Err(Unread::Value(why.clone())), false, false)];
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
        let hit = s.elems.iter().find(|e| fields_in(e, &padded(&parts)));
        return vec![(
            q.src.clone(),
            Ok(hit.and_then(|e| e.verdict.clone())),
            about_port && hit.is_some(),
            false,
        )];
    }
    if vals.len() != 1 {
        return vec![(q.src.clone(), Err(Unread::SourceWithParts), false, false)];
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
