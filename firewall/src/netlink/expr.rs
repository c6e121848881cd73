//! nf_tables expressions: a known enum for what mesh-host writes and reads back, and a raw variant
//! that keeps anything else (other tools' expressions, unknown keys or attributes) by name and
//! bytes, so decoding never fails a listing.

use super::attr::{self, Attr, Attrs};
use super::consts::*;
pub use super::keys::{CmpOp, CtDirection, CtKey, FibResult, MetaKey, PayloadBase};
use super::types::Verdict;

/// The data of an `immediate` expression.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ImmediateData {
    Verdict(Verdict),
    Value(Vec<u8>),
}

/// One expression of a rule.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Expr {
    /// `meta load KEY => reg DREG`.
    Meta { key: MetaKey, dreg: u32 },
    /// `cmp OP reg SREG DATA`.
    Cmp { sreg: u32, op: CmpOp, data: Vec<u8> },
    /// `payload load LEN @ BASE + OFFSET => reg DREG`.
    Payload {
        base: PayloadBase,
        offset: u32,
        len: u32,
        dreg: u32,
    },
    /// `bitwise reg DREG = (reg SREG & MASK) ^ XOR` over LEN bytes.
    Bitwise {
        sreg: u32,
        dreg: u32,
        len: u32,
        mask: Vec<u8>,
        xor: Vec<u8>,
    },
    /// `ct load KEY => reg DREG [, dir DIRECTION]`.
    Ct {
        key: CtKey,
        dreg: u32,
        direction: Option<CtDirection>,
    },
    /// `immediate reg DREG DATA`; register 0 holds verdicts.
    Immediate { dreg: u32, data: ImmediateData },
    /// `counter`, with the kernel's current counts when listed.
    Counter { bytes: u64, packets: u64 },
    /// `lookup reg SREG set NAME [dreg DREG]`, inverted for `!=` lookups.
    Lookup {
        set: String,
        sreg: u32,
        dreg: Option<u32>,
        set_id: Option<u32>,
        flags: u32,
    },
    /// `fib FLAGS RESULT => reg DREG`: a route lookup, e.g. `fib daddr oifname` (the interface
    /// the packet's destination routes out through) or `fib daddr type`. `flags` are the
    /// NFTA_FIB_F_* bits, kept whole so any combination reads back as written.
    Fib {
        result: FibResult,
        flags: u32,
        dreg: u32,
    },
    /// Any other expression, or a known one with something this crate does not model:
    /// kept by name with the bytes of its NFTA_EXPR_DATA, and written back verbatim.
    Raw { name: String, data: Vec<u8> },
}

impl Expr {
    /// The kernel's name for the expression type.
    pub fn name(&self) -> &str {
        match self {
            Expr::Meta { .. } => "meta",
            Expr::Cmp { .. } => "cmp",
            Expr::Payload { .. } => "payload",
            Expr::Bitwise { .. } => "bitwise",
            Expr::Ct { .. } => "ct",
            Expr::Immediate { .. } => "immediate",
            Expr::Counter { .. } => "counter",
            Expr::Lookup { .. } => "lookup",
            Expr::Fib { .. } => "fib",
            Expr::Raw { name, .. } => name,
        }
    }

    /// A verdict expression, as nft writes `accept`, `drop`, `return`, `jump x`.
    pub fn verdict(v: Verdict) -> Expr {
        Expr::Immediate {
            dreg: NFT_REG_VERDICT,
            data: ImmediateData::Verdict(v),
        }
    }

    /// The verdict, if this is a verdict expression.
    pub fn as_verdict(&self) -> Option<&Verdict> {
        match self {
            Expr::Immediate {
                dreg: NFT_REG_VERDICT,
                data: ImmediateData::Verdict(v),
            } => Some(v),
            _ => None,
        }
    }

    /// For iptables-nft's `match` and `target` expressions: the xtables extension's name
    /// (`conntrack`, `multiport`, `comment`, `DNAT`, `MASQUERADE`, ...).
    pub fn xt_name(&self) -> Option<String> {
        match self {
            Expr::Raw { name, data } if name == "match" || name == "target" => Attrs::new(data)
                .find(|a| a.ty == NFTA_XT_NAME)
                .map(|a| a.string()),
            _ => None,
        }
    }

    /// An x_tables match or target's revision and info bytes (its kernel struct), as iptables-nft
    /// wrote them.
    pub fn xt_info(&self) -> Option<(u32, Vec<u8>)> {
        let Expr::Raw { name, data } = self else {
            return None;
        };
        if name != "match" && name != "target" {
            return None;
        }
        let rev = Attrs::new(data)
            .find(|a| a.ty == NFTA_XT_REV)
            .and_then(|a| a.be32())
            .unwrap_or(0);
        let info = Attrs::new(data).find(|a| a.ty == NFTA_XT_INFO)?;
        Some((rev, info.data.to_vec()))
    }

    /// The text of an iptables `-m comment --comment` kept as an xt `comment` match.
    pub fn xt_comment(&self) -> Option<String> {
        if self.xt_name().as_deref() != Some("comment") {
            return None;
        }
        let Expr::Raw { data, .. } = self else {
            return None;
        };
        Attrs::new(data)
            .find(|a| a.ty == NFTA_XT_INFO)
            .map(|a| a.string())
    }

    /// Appends this expression as an NFTA_LIST_ELEM to a rule's expression list.
    pub fn encode(&self, buf: &mut Vec<u8>) {
        let elem = attr::nest_start(buf, NFTA_LIST_ELEM);
        attr::put_str(buf, NFTA_EXPR_NAME, self.name());
        let data = attr::nest_start(buf, NFTA_EXPR_DATA);
        match self {
            Expr::Meta { key, dreg } => {
                attr::put_be32(buf, NFTA_META_KEY, key.to_raw());
                attr::put_be32(buf, NFTA_META_DREG, *dreg);
            }
            Expr::Cmp { sreg, op, data } => {
                attr::put_be32(buf, NFTA_CMP_SREG, *sreg);
                attr::put_be32(buf, NFTA_CMP_OP, op.to_raw());
                put_value(buf, NFTA_CMP_DATA, data);
            }
            Expr::Payload {
                base,
                offset,
                len,
                dreg,
            } => {
                attr::put_be32(buf, NFTA_PAYLOAD_DREG, *dreg);
                attr::put_be32(buf, NFTA_PAYLOAD_BASE, base.to_raw());
                attr::put_be32(buf, NFTA_PAYLOAD_OFFSET, *offset);
                attr::put_be32(buf, NFTA_PAYLOAD_LEN, *len);
            }
            Expr::Bitwise {
                sreg,
                dreg,
                len,
                mask,
                xor,
            } => {
                attr::put_be32(buf, NFTA_BITWISE_SREG, *sreg);
                attr::put_be32(buf, NFTA_BITWISE_DREG, *dreg);
                attr::put_be32(buf, NFTA_BITWISE_LEN, *len);
                put_value(buf, NFTA_BITWISE_MASK, mask);
                put_value(buf, NFTA_BITWISE_XOR, xor);
            }
            Expr::Ct {
                key,
                dreg,
                direction,
            } => {
                attr::put_be32(buf, NFTA_CT_KEY, key.to_raw());
                attr::put_be32(buf, NFTA_CT_DREG, *dreg);
                if let Some(d) = direction {
                    attr::put_u8(buf, NFTA_CT_DIRECTION, d.to_raw());
                }
            }
            Expr::Immediate { dreg, data } => {
                attr::put_be32(buf, NFTA_IMMEDIATE_DREG, *dreg);
                let nest = attr::nest_start(buf, NFTA_IMMEDIATE_DATA);
                match data {
                    ImmediateData::Value(v) => attr::put(buf, NFTA_DATA_VALUE, v),
                    ImmediateData::Verdict(v) => {
                        let vn = attr::nest_start(buf, NFTA_DATA_VERDICT);
                        attr::put_be32(buf, NFTA_VERDICT_CODE, v.code() as u32);
                        if let Some(chain) = v.chain() {
                            attr::put_str(buf, NFTA_VERDICT_CHAIN, chain);
                        }
                        attr::nest_end(buf, vn);
                    }
                }
                attr::nest_end(buf, nest);
            }
            Expr::Counter { bytes, packets } => {
                attr::put_be64(buf, NFTA_COUNTER_BYTES, *bytes);
                attr::put_be64(buf, NFTA_COUNTER_PACKETS, *packets);
            }
            Expr::Lookup {
                set,
                sreg,
                dreg,
                set_id,
                flags,
            } => {
                attr::put_str(buf, NFTA_LOOKUP_SET, set);
                attr::put_be32(buf, NFTA_LOOKUP_SREG, *sreg);
                if let Some(d) = dreg {
                    attr::put_be32(buf, NFTA_LOOKUP_DREG, *d);
                }
                if let Some(id) = set_id {
                    attr::put_be32(buf, NFTA_LOOKUP_SET_ID, *id);
                }
                if *flags != 0 {
                    attr::put_be32(buf, NFTA_LOOKUP_FLAGS, *flags);
                }
            }
            Expr::Fib {
                result,
                flags,
                dreg,
            } => {
                attr::put_be32(buf, NFTA_FIB_DREG, *dreg);
                attr::put_be32(buf, NFTA_FIB_RESULT, result.to_raw());
                attr::put_be32(buf, NFTA_FIB_FLAGS, *flags);
            }
            Expr::Raw { data, .. } => buf.extend_from_slice(data),
        }
        attr::nest_end(buf, data);
        // Raw bytes may end off the 4-byte boundary: the element is padded so the next one
        // starts aligned (the data keeps its own length, so it reads back as it was).
        attr::pad(buf);
        attr::nest_end(buf, elem);
    }

    /// Decodes one NFTA_LIST_ELEM; anything not fully understood comes back as [`Expr::Raw`].
    pub fn decode(elem: &[u8]) -> Expr {
        let mut name = None;
        let mut data: &[u8] = &[];
        for a in Attrs::new(elem) {
            match a.ty {
                NFTA_EXPR_NAME => name = Some(a.string()),
                NFTA_EXPR_DATA => data = a.data,
                _ => {}
            }
        }
        let name = name.unwrap_or_default();
        let known = if Attrs::all_well_formed(data) {
            match name.as_str() {
                "meta" => decode_meta(data),
                "cmp" => decode_cmp(data),
                "payload" => decode_payload(data),
                "bitwise" => decode_bitwise(data),
                "ct" => decode_ct(data),
                "immediate" => decode_immediate(data),
                "counter" => decode_counter(data),
                "lookup" => decode_lookup(data),
                "fib" => decode_fib(data),
                _ => None,
            }
        } else {
            None
        };
        known.unwrap_or_else(|| Expr::Raw {
            name,
            data: data.to_vec(),
        })
    }
}

/// Writes an NFTA_DATA_VALUE nested in the given attribute.
fn put_value(buf: &mut Vec<u8>, ty: u16, value: &[u8]) {
    let nest = attr::nest_start(buf, ty);
    attr::put(buf, NFTA_DATA_VALUE, value);
    attr::nest_end(buf, nest);
}

/// Reads an NFTA_DATA_VALUE out of a nested data attribute.
fn value(a: &Attr<'_>) -> Option<Vec<u8>> {
    let mut out = None;
    for inner in a.nested() {
        match inner.ty {
            NFTA_DATA_VALUE => out = Some(inner.data.to_vec()),
            _ => return None,
        }
    }
    out
}

fn decode_meta(data: &[u8]) -> Option<Expr> {
    let (mut key, mut dreg) = (None, None);
    for a in Attrs::new(data) {
        match a.ty {
            NFTA_META_KEY => key = Some(MetaKey::from_raw(a.be32()?)?),
            NFTA_META_DREG => dreg = Some(a.be32()?),
            // A meta set (NFTA_META_SREG) or anything newer stays raw.
            _ => return None,
        }
    }
    Some(Expr::Meta {
        key: key?,
        dreg: dreg?,
    })
}

fn decode_cmp(data: &[u8]) -> Option<Expr> {
    let (mut sreg, mut op, mut value_) = (None, None, None);
    for a in Attrs::new(data) {
        match a.ty {
            NFTA_CMP_SREG => sreg = Some(a.be32()?),
            NFTA_CMP_OP => op = Some(CmpOp::from_raw(a.be32()?)?),
            NFTA_CMP_DATA => value_ = Some(value(&a)?),
            _ => return None,
        }
    }
    Some(Expr::Cmp {
        sreg: sreg?,
        op: op?,
        data: value_?,
    })
}

fn decode_payload(data: &[u8]) -> Option<Expr> {
    let (mut base, mut offset, mut len, mut dreg) = (None, None, None, None);
    for a in Attrs::new(data) {
        match a.ty {
            NFTA_PAYLOAD_DREG => dreg = Some(a.be32()?),
            NFTA_PAYLOAD_BASE => base = Some(PayloadBase::from_raw(a.be32()?)?),
            NFTA_PAYLOAD_OFFSET => offset = Some(a.be32()?),
            NFTA_PAYLOAD_LEN => len = Some(a.be32()?),
            // Payload writes (sreg, checksum attributes) stay raw.
            _ => return None,
        }
    }
    Some(Expr::Payload {
        base: base?,
        offset: offset?,
        len: len?,
        dreg: dreg?,
    })
}

fn decode_bitwise(data: &[u8]) -> Option<Expr> {
    let (mut sreg, mut dreg, mut len, mut mask, mut xor) = (None, None, None, None, None);
    for a in Attrs::new(data) {
        match a.ty {
            NFTA_BITWISE_SREG => sreg = Some(a.be32()?),
            NFTA_BITWISE_DREG => dreg = Some(a.be32()?),
            NFTA_BITWISE_LEN => len = Some(a.be32()?),
            NFTA_BITWISE_MASK => mask = Some(value(&a)?),
            NFTA_BITWISE_XOR => xor = Some(value(&a)?),
            // Only mask-and-xor is modelled; shifts and newer operations stay raw.
            NFTA_BITWISE_OP if a.be32()? == NFT_BITWISE_MASK_XOR => {}
            _ => return None,
        }
    }
    Some(Expr::Bitwise {
        sreg: sreg?,
        dreg: dreg?,
        len: len?,
        mask: mask?,
        xor: xor?,
    })
}

fn decode_ct(data: &[u8]) -> Option<Expr> {
    let (mut key, mut dreg, mut direction) = (None, None, None);
    for a in Attrs::new(data) {
        match a.ty {
            NFTA_CT_KEY => key = Some(CtKey::from_raw(a.be32()?)?),
            NFTA_CT_DREG => dreg = Some(a.be32()?),
            NFTA_CT_DIRECTION => direction = Some(CtDirection::from_raw(a.u8()?)?),
            // A ct set (NFTA_CT_SREG) or anything newer stays raw.
            _ => return None,
        }
    }
    Some(Expr::Ct {
        key: key?,
        dreg: dreg?,
        direction,
    })
}

fn decode_immediate(data: &[u8]) -> Option<Expr> {
    let (mut dreg, mut imm) = (None, None);
    for a in Attrs::new(data) {
        match a.ty {
            NFTA_IMMEDIATE_DREG => dreg = Some(a.be32()?),
            NFTA_IMMEDIATE_DATA => {
                for inner in a.nested() {
                    match inner.ty {
                        NFTA_DATA_VALUE => imm = Some(ImmediateData::Value(inner.data.to_vec())),
                        NFTA_DATA_VERDICT => {
                            let (mut code, mut chain) = (None, None);
                            for v in inner.nested() {
                                match v.ty {
                                    NFTA_VERDICT_CODE => code = Some(v.be32()? as i32),
                                    NFTA_VERDICT_CHAIN => chain = Some(v.string()),
                                    _ => return None,
                                }
                            }
                            imm = Some(ImmediateData::Verdict(Verdict::from_parts(code?, chain)));
                        }
                        _ => return None,
                    }
                }
            }
            _ => return None,
        }
    }
    Some(Expr::Immediate {
        dreg: dreg?,
        data: imm?,
    })
}

fn decode_counter(data: &[u8]) -> Option<Expr> {
    let (mut bytes, mut packets) = (0, 0);
    for a in Attrs::new(data) {
        match a.ty {
            NFTA_COUNTER_BYTES => bytes = a.be64()?,
            NFTA_COUNTER_PACKETS => packets = a.be64()?,
            NFTA_COUNTER_PAD => {}
            _ => return None,
        }
    }
    Some(Expr::Counter { bytes, packets })
}

fn decode_lookup(data: &[u8]) -> Option<Expr> {
    let (mut set, mut sreg, mut dreg, mut set_id, mut flags) = (None, None, None, None, 0);
    for a in Attrs::new(data) {
        match a.ty {
            NFTA_LOOKUP_SET => set = Some(a.string()),
            NFTA_LOOKUP_SREG => sreg = Some(a.be32()?),
            NFTA_LOOKUP_DREG => dreg = Some(a.be32()?),
            NFTA_LOOKUP_SET_ID => set_id = Some(a.be32()?),
            NFTA_LOOKUP_FLAGS => flags = a.be32()?,
            _ => return None,
        }
    }
    Some(Expr::Lookup {
        set: set?,
        sreg: sreg?,
        dreg,
        set_id,
        flags,
    })
}

fn decode_fib(data: &[u8]) -> Option<Expr> {
    let (mut result, mut flags, mut dreg) = (None, None, None);
    for a in Attrs::new(data) {
        match a.ty {
            NFTA_FIB_DREG => dreg = Some(a.be32()?),
            // A result beyond the known ones keeps the expression raw.
            NFTA_FIB_RESULT => result = Some(FibResult::from_raw(a.be32()?)?),
            NFTA_FIB_FLAGS => flags = Some(a.be32()?),
            _ => return None,
        }
    }
    Some(Expr::Fib {
        result: result?,
        flags: flags?,
        dreg: dreg?,
    })
}

/// Encodes a whole expression list as the payload of NFTA_RULE_EXPRESSIONS.
pub fn encode_list(exprs: &[Expr], buf: &mut Vec<u8>) {
    let nest = attr::nest_start(buf, NFTA_RULE_EXPRESSIONS);
    for e in exprs {
        e.encode(buf);
    }
    attr::nest_end(buf, nest);
}

/// Decodes the payload of NFTA_RULE_EXPRESSIONS; never fails.
pub fn decode_list(data: &[u8]) -> Vec<Expr> {
    Attrs::new(data)
        .filter(|a| a.ty == NFTA_LIST_ELEM)
        .map(|a| Expr::decode(a.data))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(e: &Expr) -> Expr {
        let mut buf = Vec::new();
        e.encode(&mut buf);
        let outer: Vec<_> = Attrs::new(&buf).collect();
        assert_eq!(outer.len(), 1);
        assert_eq!(outer[0].ty, NFTA_LIST_ELEM);
        Expr::decode(outer[0].data)
    }

    #[test]
    fn every_known_expression_round_trips() {
        let exprs = [
            Expr::Meta {
                key: MetaKey::IifName,
                dreg: 1,
            },
            Expr::Cmp {
                sreg: 1,
                op: CmpOp::Neq,
                data: b"br-".to_vec(),
            },
            Expr::Payload {
                base: PayloadBase::Transport,
                offset: 2,
                len: 2,
                dreg: 1,
            },
            Expr::Bitwise {
                sreg: 1,
                dreg: 1,
                len: 4,
                mask: vec![255, 0, 0, 0],
                xor: vec![0; 4],
            },
            Expr::Ct {
                key: CtKey::ProtoDst,
                dreg: 1,
                direction: Some(CtDirection::Original),
            },
            Expr::verdict(Verdict::Jump("x".into())),
            Expr::verdict(Verdict::Drop),
            Expr::Counter {
                bytes: 1,
                packets: 2,
            },
            Expr::Lookup {
                set: "s4".into(),
                sreg: 1,
                dreg: None,
                set_id: None,
                flags: 1,
            },
            Expr::Fib {
                result: FibResult::OifName,
                flags: NFTA_FIB_F_DADDR,
                dreg: 1,
            },
            Expr::Fib {
                result: FibResult::AddrType,
                flags: NFTA_FIB_F_DADDR,
                dreg: 1,
            },
            Expr::Raw {
                name: "fib".into(),
                data: vec![8, 0, 1, 0, 0, 0, 0, 1],
            },
        ];
        for e in &exprs {
            assert_eq!(&round_trip(e), e);
        }
    }

    #[test]
    fn ct_direction_is_one_byte_padded_to_four() {
        let mut buf = Vec::new();
        Expr::Ct {
            key: CtKey::ProtoDst,
            dreg: 1,
            direction: Some(CtDirection::Original),
        }
        .encode(&mut buf);
        // elem(4) + name "ct\0"(8) + data nest(4) + key(8) + dreg(8) + direction(8).
        assert_eq!(buf.len(), 40);
        let dir = &buf[32..40];
        assert_eq!(dir, [5, 0, NFTA_CT_DIRECTION as u8, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn cmp_data_is_nested_in_a_data_value() {
        let mut buf = Vec::new();
        Expr::Cmp {
            sreg: 1,
            op: CmpOp::Eq,
            data: vec![6],
        }
        .encode(&mut buf);
        let elem: Vec<_> = Attrs::new(&buf).collect();
        let data = elem[0]
            .nested()
            .find(|a| a.ty == NFTA_EXPR_DATA)
            .expect("data");
        let cmp_data = data
            .nested()
            .find(|a| a.ty == NFTA_CMP_DATA)
            .expect("cmp data");
        let v: Vec<_> = cmp_data.nested().collect();
        assert_eq!(v[0].ty, NFTA_DATA_VALUE);
        assert_eq!(v[0].data, [6]);
    }

    #[test]
    fn unknown_values_and_attributes_become_raw() {
        // A meta key beyond the known ones.
        let mut data = Vec::new();
        attr::put_be32(&mut data, NFTA_META_KEY, 999);
        attr::put_be32(&mut data, NFTA_META_DREG, 1);
        let mut elem = Vec::new();
        attr::put_str(&mut elem, NFTA_EXPR_NAME, "meta");
        attr::put(&mut elem, NFTA_EXPR_DATA, &data);
        assert_eq!(
            Expr::decode(&elem),
            Expr::Raw {
                name: "meta".into(),
                data: data.clone()
            }
        );

        // A meta set (sreg instead of dreg).
        let mut data = Vec::new();
        attr::put_be32(&mut data, NFTA_META_KEY, 3);
        attr::put_be32(&mut data, 3, 1);
        let mut elem = Vec::new();
        attr::put_str(&mut elem, NFTA_EXPR_NAME, "meta");
        attr::put(&mut elem, NFTA_EXPR_DATA, &data);
        assert!(matches!(Expr::decode(&elem), Expr::Raw { .. }));

        // A ct direction of the wrong width, as a broken writer might send.
        let mut data = Vec::new();
        attr::put_be32(&mut data, NFTA_CT_KEY, 12);
        attr::put_be32(&mut data, NFTA_CT_DREG, 1);
        attr::put_be32(&mut data, NFTA_CT_DIRECTION, 0);
        let mut elem = Vec::new();
        attr::put_str(&mut elem, NFTA_EXPR_NAME, "ct");
        attr::put(&mut elem, NFTA_EXPR_DATA, &data);
        assert!(matches!(Expr::decode(&elem), Expr::Raw { .. }));

        // A fib result beyond the known ones.
        let mut data = Vec::new();
        attr::put_be32(&mut data, NFTA_FIB_DREG, 1);
        attr::put_be32(&mut data, NFTA_FIB_RESULT, 99);
        attr::put_be32(&mut data, NFTA_FIB_FLAGS, NFTA_FIB_F_DADDR);
        let mut elem = Vec::new();
        attr::put_str(&mut elem, NFTA_EXPR_NAME, "fib");
        attr::put(&mut elem, NFTA_EXPR_DATA, &data);
        assert!(matches!(Expr::decode(&elem), Expr::Raw { .. }));

        // Garbage bytes.
        let mut elem = Vec::new();
        attr::put_str(&mut elem, NFTA_EXPR_NAME, "cmp");
        attr::put(&mut elem, NFTA_EXPR_DATA, &[1, 2, 3]);
        assert!(matches!(Expr::decode(&elem), Expr::Raw { .. }));
    }

    #[test]
    fn lists_decode_element_by_element() {
        let exprs = vec![
            Expr::Counter {
                bytes: 0,
                packets: 0,
            },
            Expr::verdict(Verdict::Accept),
        ];
        let mut buf = Vec::new();
        encode_list(&exprs, &mut buf);
        let outer: Vec<_> = Attrs::new(&buf).collect();
        assert_eq!(outer[0].ty, NFTA_RULE_EXPRESSIONS);
        assert_eq!(decode_list(outer[0].data), exprs);
    }
}
