//! A small rule builder for exactly the matches mesh-host writes, and the nftnl user-data TLV
//! that carries a rule's comment.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::ops::BitOr;

use super::consts::*;
use super::expr::{CmpOp, CtDirection, CtKey, Expr, FibResult, MetaKey, PayloadBase};
use super::types::{Family, Verdict};

/// The longest comment whose TLV still fits the kernel's 256-byte user-data limit.
pub const MAX_COMMENT_LEN: usize = 253;

/// Conntrack states as the `ct state` bitmask (host-endian in the register).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CtState(pub u32);

impl CtState {
    pub const INVALID: CtState = CtState(1);
    pub const ESTABLISHED: CtState = CtState(2);
    pub const RELATED: CtState = CtState(4);
    pub const NEW: CtState = CtState(8);
    pub const UNTRACKED: CtState = CtState(64);
}

impl BitOr for CtState {
    type Output = CtState;
    fn bitor(self, rhs: CtState) -> CtState {
        CtState(self.0 | rhs.0)
    }
}

/// A layer-4 protocol for `meta l4proto`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum L4Proto {
    Tcp,
    Udp,
    Other(u8),
}

impl L4Proto {
    pub fn number(self) -> u8 {
        match self {
            L4Proto::Tcp => 6,
            L4Proto::Udp => 17,
            L4Proto::Other(n) => n,
        }
    }
}

/// The body of a rule to write: its expressions and its comment.
///
/// Builder methods never fail; an invalid argument (an interface name too long, a comment too
/// long) is remembered and reported when the rule is added to a batch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuleBody {
    pub exprs: Vec<Expr>,
    pub comment: Option<String>,
    pub(crate) invalid: Option<(&'static str, String, &'static str)>,
}

impl RuleBody {
    pub fn new() -> RuleBody {
        RuleBody::default()
    }

    /// A body from expressions already at hand, e.g. a listed rule being written again.
    pub fn from_exprs(exprs: Vec<Expr>, comment: Option<String>) -> RuleBody {
        let body = RuleBody {
            exprs,
            comment: None,
            invalid: None,
        };
        match comment {
            Some(c) => body.comment(&c),
            None => body,
        }
    }

    /// Appends any expression as is.
    pub fn expr(mut self, e: Expr) -> RuleBody {
        self.exprs.push(e);
        self
    }

    fn meta(self, key: MetaKey) -> RuleBody {
        self.expr(Expr::Meta {
            key,
            dreg: NFT_REG_1,
        })
    }

    fn cmp(self, op: CmpOp, data: Vec<u8>) -> RuleBody {
        self.expr(Expr::Cmp {
            sreg: NFT_REG_1,
            op,
            data,
        })
    }

    /// The register contents an interface-name pattern compares against: a trailing `*` makes
    /// it a prefix (`br-*` is the three bytes `br-` without a NUL), an exact name is the whole
    /// 16-byte register, NUL padded; `None` for a name that cannot be one.
    fn ifname_data(pattern: &str) -> Option<Vec<u8>> {
        let (bytes, prefix) = match pattern.strip_suffix('*') {
            Some(p) => (p.as_bytes(), true),
            None => (pattern.as_bytes(), false),
        };
        if bytes.len() >= IFNAMSIZ || bytes.contains(&0) || (bytes.is_empty() && !prefix) {
            return None;
        }
        let mut d = bytes.to_vec();
        if !prefix {
            d.resize(IFNAMSIZ, 0);
        }
        Some(d)
    }

    fn invalid_interface(mut self, pattern: &str) -> RuleBody {
        self.invalid.get_or_insert((
            "interface",
            pattern.to_string(),
            "must be 1 to 15 bytes without NUL",
        ));
        self
    }

    /// `iifname "NAME"` or `iifname != "NAME"`; a trailing `*` makes it a prefix match, as in nft
    /// (`br-*` compares the three bytes `br-` without a NUL).
    pub fn iifname(self, op: CmpOp, pattern: &str) -> RuleBody {
        match Self::ifname_data(pattern) {
            Some(data) => self.meta(MetaKey::IifName).cmp(op, data),
            None => self.invalid_interface(pattern),
        }
    }

    /// `fib daddr oifname "NAME"` or `fib daddr oifname != "NAME"`: the interface the packet's
    /// destination address routes out through, by the machine's routing table. A trailing `*`
    /// makes it a prefix match, as for `iifname`.
    pub fn fib_daddr_oifname(self, op: CmpOp, pattern: &str) -> RuleBody {
        match Self::ifname_data(pattern) {
            Some(data) => self
                .expr(Expr::Fib {
                    result: FibResult::OifName,
                    flags: NFTA_FIB_F_DADDR,
                    dreg: NFT_REG_1,
                })
                .cmp(op, data),
            None => self.invalid_interface(pattern),
        }
    }

    /// `fib daddr type local`: the packet's destination is one of the machine's own addresses
    /// (any interface's), as the routing table's local table says. What the machine merely
    /// routes to another machine does not match. The address type is an `enum rtn_type` value
    /// compared as a host-endian u32, as nft writes it.
    pub fn fib_daddr_type_local(self) -> RuleBody {
        self.expr(Expr::Fib {
            result: FibResult::AddrType,
            flags: NFTA_FIB_F_DADDR,
            dreg: NFT_REG_1,
        })
        .cmp(CmpOp::Eq, RTN_LOCAL.to_ne_bytes().to_vec())
    }

    /// `iifname "NAME"`.
    pub fn iifname_eq(self, pattern: &str) -> RuleBody {
        self.iifname(CmpOp::Eq, pattern)
    }

    /// `iifname != "NAME"`.
    pub fn iifname_ne(self, pattern: &str) -> RuleBody {
        self.iifname(CmpOp::Neq, pattern)
    }

    /// `meta l4proto PROTO`.
    pub fn l4proto(self, proto: L4Proto) -> RuleBody {
        self.meta(MetaKey::L4Proto)
            .cmp(CmpOp::Eq, vec![proto.number()])
    }

    /// `meta nfproto ipv4|ipv6` (for an inet table).
    pub fn nfproto(self, family: Family) -> RuleBody {
        self.meta(MetaKey::NfProto)
            .cmp(CmpOp::Eq, vec![family.to_raw()])
    }

    /// `th dport PORT`: the transport header's destination port, whatever the protocol.
    pub fn th_dport(self, port: u16) -> RuleBody {
        self.expr(Expr::Payload {
            base: PayloadBase::Transport,
            offset: 2,
            len: 2,
            dreg: NFT_REG_1,
        })
        .cmp(CmpOp::Eq, port.to_be_bytes().to_vec())
    }

    /// `icmp type N` / `icmpv6 type N` after the caller's `meta l4proto`: the transport
    /// header's first byte.
    pub fn icmp_type(self, kind: u8) -> RuleBody {
        self.expr(Expr::Payload {
            base: PayloadBase::Transport,
            offset: 0,
            len: 1,
            dreg: NFT_REG_1,
        })
        .cmp(CmpOp::Eq, vec![kind])
    }

    /// `tcp dport PORT` (nft's own encoding: `meta l4proto tcp` then `th dport`).
    pub fn tcp_dport(self, port: u16) -> RuleBody {
        self.l4proto(L4Proto::Tcp).th_dport(port)
    }

    /// `udp dport PORT`.
    pub fn udp_dport(self, port: u16) -> RuleBody {
        self.l4proto(L4Proto::Udp).th_dport(port)
    }

    /// The address's first `prefix_len` bits compared with `op` as nft writes it: a prefix on a
    /// byte boundary loads only its bytes, any other loads the address and masks it.
    fn network_prefix_nft(self, op: CmpOp, offset: u32, addr: &[u8], prefix_len: u8) -> RuleBody {
        let bits = (prefix_len as usize).min(addr.len() * 8);
        if bits % 8 != 0 {
            return self.network_prefix_op(op, offset, addr, prefix_len);
        }
        self.expr(Expr::Payload {
            base: PayloadBase::Network,
            offset,
            len: (bits / 8) as u32,
            dreg: NFT_REG_1,
        })
        .cmp(op, addr[..bits / 8].to_vec())
    }

    fn network_prefix(self, offset: u32, addr: &[u8], prefix_len: u8) -> RuleBody {
        self.network_prefix_op(CmpOp::Eq, offset, addr, prefix_len)
    }

    fn network_prefix_op(self, op: CmpOp, offset: u32, addr: &[u8], prefix_len: u8) -> RuleBody {
        let len = addr.len();
        let bits = (prefix_len as usize).min(len * 8);
        let mask: Vec<u8> = (0..len)
            .map(|i| {
                let take = bits.saturating_sub(i * 8).min(8);
                if take == 0 {
                    0
                } else {
                    0xffu8 << (8 - take)
                }
            })
            .collect();
        let masked: Vec<u8> = addr.iter().zip(&mask).map(|(a, m)| a & m).collect();
        let mut me = self.expr(Expr::Payload {
            base: PayloadBase::Network,
            offset,
            len: len as u32,
            dreg: NFT_REG_1,
        });
        if bits < len * 8 {
            me = me.expr(Expr::Bitwise {
                sreg: NFT_REG_1,
                dreg: NFT_REG_1,
                len: len as u32,
                mask,
                xor: vec![0; len],
            });
        }
        me.cmp(op, masked)
    }

    /// `ip saddr != ADDR/LEN` or `ip6 saddr != ADDR/LEN` by the address's family, with its
    /// `meta nfproto` dependency: a packet of that family whose source is outside the network,
    /// encoded as nft encodes it. A `/0` network has no outside: the caller leaves it out.
    pub fn saddr_outside(self, addr: std::net::IpAddr, prefix_len: u8) -> RuleBody {
        match addr {
            std::net::IpAddr::V4(a) => self.nfproto(Family::Ipv4).network_prefix_nft(
                CmpOp::Neq,
                12,
                &a.octets(),
                prefix_len,
            ),
            std::net::IpAddr::V6(a) => self.nfproto(Family::Ipv6).network_prefix_nft(
                CmpOp::Neq,
                8,
                &a.octets(),
                prefix_len,
            ),
        }
    }

    /// `oifname "NAME"` or `oifname != "NAME"`: the interface a forwarded packet leaves by.
    pub fn oifname(self, op: CmpOp, pattern: &str) -> RuleBody {
        match Self::ifname_data(pattern) {
            Some(data) => self.meta(MetaKey::OifName).cmp(op, data),
            None => self.invalid_interface(pattern),
        }
    }

    /// `ip saddr ADDR/LEN`, with the `meta nfproto ipv4` dependency an inet table needs.
    pub fn ip_saddr(self, addr: Ipv4Addr, prefix_len: u8) -> RuleBody {
        self.nfproto(Family::Ipv4)
            .network_prefix(12, &addr.octets(), prefix_len)
    }

    /// `ip daddr ADDR/LEN`.
    pub fn ip_daddr(self, addr: Ipv4Addr, prefix_len: u8) -> RuleBody {
        self.nfproto(Family::Ipv4)
            .network_prefix(16, &addr.octets(), prefix_len)
    }

    /// `ip6 saddr ADDR/LEN`, with the `meta nfproto ipv6` dependency.
    pub fn ip6_saddr(self, addr: Ipv6Addr, prefix_len: u8) -> RuleBody {
        self.nfproto(Family::Ipv6)
            .network_prefix(8, &addr.octets(), prefix_len)
    }

    /// `ip6 daddr ADDR/LEN`.
    pub fn ip6_daddr(self, addr: Ipv6Addr, prefix_len: u8) -> RuleBody {
        self.nfproto(Family::Ipv6)
            .network_prefix(24, &addr.octets(), prefix_len)
    }

    /// `ip saddr ADDR/LEN` or `ip6 saddr ADDR/LEN` in a table of the address's own family (`ip`
    /// or `ip6`), as nft writes it there: without the `meta nfproto` dependency, which the
    /// family makes (and which nft 1.0.6 cannot list in such a table: `nft list ruleset` aborts
    /// on its `payload_expr_complete` assertion).
    pub fn saddr_in_own_family(self, addr: std::net::IpAddr, prefix_len: u8) -> RuleBody {
        match addr {
            std::net::IpAddr::V4(a) => self.network_prefix(12, &a.octets(), prefix_len),
            std::net::IpAddr::V6(a) => self.network_prefix(8, &a.octets(), prefix_len),
        }
    }

    /// `ip saddr` or `ip6 saddr` in a netdev chain, where `meta nfproto` is the netdev family
    /// itself: the address's family is told by the ethertype (`meta protocol ip|ip6`).
    pub fn saddr_by_ethertype(self, addr: std::net::IpAddr, prefix_len: u8) -> RuleBody {
        let (ethertype, offset, octets): (u16, u32, Vec<u8>) = match addr {
            std::net::IpAddr::V4(a) => (0x0800, 12, a.octets().to_vec()),
            std::net::IpAddr::V6(a) => (0x86dd, 8, a.octets().to_vec()),
        };
        self.meta(MetaKey::Protocol)
            .cmp(CmpOp::Eq, ethertype.to_be_bytes().to_vec())
            .network_prefix(offset, &octets, prefix_len)
    }

    /// `ct state S1,S2`: any of the given states.
    pub fn ct_state(self, states: CtState) -> RuleBody {
        self.expr(Expr::Ct {
            key: CtKey::State,
            dreg: NFT_REG_1,
            direction: None,
        })
        .expr(Expr::Bitwise {
            sreg: NFT_REG_1,
            dreg: NFT_REG_1,
            len: 4,
            mask: states.0.to_ne_bytes().to_vec(),
            xor: vec![0; 4],
        })
        .cmp(CmpOp::Neq, vec![0; 4])
    }

    /// `ct status dnat`: the connection's destination was translated (IPS_DST_NAT), as
    /// iptables' `--ctstate DNAT` matches. The status bits are in host byte order, like
    /// `ct state`'s.
    pub fn ct_status_dnat(self) -> RuleBody {
        self.expr(Expr::Ct {
            key: CtKey::Status,
            dreg: NFT_REG_1,
            direction: None,
        })
        .expr(Expr::Bitwise {
            sreg: NFT_REG_1,
            dreg: NFT_REG_1,
            len: 4,
            mask: IPS_DST_NAT.to_ne_bytes().to_vec(),
            xor: vec![0; 4],
        })
        .cmp(CmpOp::Neq, vec![0; 4])
    }

    /// `meta l4proto PROTO ct original proto-dst PORT`: the port a connection was first sent
    /// to, before any DNAT (how a published container port is matched in the forward path).
    /// The protocol comes first because a port means nothing without it: nft prints a bare
    /// `ct original proto-dst` as `0x1f90 [invalid type]`.
    pub fn ct_original_proto_dst(self, proto: L4Proto, port: u16) -> RuleBody {
        self.l4proto(proto).ct_original_proto_dst_only(port)
    }

    /// `ct original proto-dst PORT` without the protocol dependency.
    pub fn ct_original_proto_dst_only(self, port: u16) -> RuleBody {
        self.expr(Expr::Ct {
            key: CtKey::ProtoDst,
            dreg: NFT_REG_1,
            direction: Some(CtDirection::Original),
        })
        .cmp(CmpOp::Eq, port.to_be_bytes().to_vec())
    }

    /// `counter`.
    pub fn counter(self) -> RuleBody {
        self.expr(Expr::Counter {
            bytes: 0,
            packets: 0,
        })
    }

    /// Ends the rule with a verdict.
    pub fn verdict(self, v: Verdict) -> RuleBody {
        self.expr(Expr::verdict(v))
    }

    pub fn accept(self) -> RuleBody {
        self.verdict(Verdict::Accept)
    }

    pub fn drop(self) -> RuleBody {
        self.verdict(Verdict::Drop)
    }

    /// `return` (named so because `return` is a keyword).
    pub fn ret(self) -> RuleBody {
        self.verdict(Verdict::Return)
    }

    pub fn jump(self, chain: &str) -> RuleBody {
        self.verdict(Verdict::Jump(chain.to_string()))
    }

    /// `comment "TEXT"`, stored as the rule's user data.
    pub fn comment(mut self, text: &str) -> RuleBody {
        if text.len() > MAX_COMMENT_LEN || text.contains('\0') {
            self.invalid.get_or_insert((
                "comment",
                text.to_string(),
                "must be at most 253 bytes without NUL",
            ));
        }
        self.comment = Some(text.to_string());
        self
    }
}

/// Encodes a comment as nftnl user data: `[type 0, len, bytes…, NUL]`, len counting the NUL.
pub fn encode_comment_udata(comment: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(comment.len() + 3);
    out.push(NFTNL_UDATA_RULE_COMMENT);
    out.push((comment.len() + 1) as u8);
    out.extend_from_slice(comment.as_bytes());
    out.push(0);
    out
}

/// Finds the comment (TLV type 0) in nftnl user data; other TLVs and broken tails are ignored.
pub fn decode_comment_udata(mut udata: &[u8]) -> Option<String> {
    while udata.len() >= 2 {
        let (ty, len) = (udata[0], udata[1] as usize);
        let value = udata.get(2..2 + len)?;
        if ty == NFTNL_UDATA_RULE_COMMENT {
            let end = value.iter().position(|&b| b == 0).unwrap_or(value.len());
            return Some(String::from_utf8_lossy(&value[..end]).into_owned());
        }
        udata = &udata[2 + len..];
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::expr::ImmediateData;

    #[test]
    fn comment_tlv_counts_the_nul() {
        let u = encode_comment_udata("mesh: guard store");
        assert_eq!(u[0], 0);
        assert_eq!(u[1], 18);
        assert_eq!(&u[2..19], b"mesh: guard store");
        assert_eq!(u[19], 0);
        assert_eq!(u.len(), 20);
        assert_eq!(
            decode_comment_udata(&u).as_deref(),
            Some("mesh: guard store")
        );
    }

    #[test]
    fn comment_is_found_after_other_tlvs_and_broken_data_is_ignored() {
        let mut u = vec![1, 4, 0, 0, 0, 1];
        u.extend(encode_comment_udata("x"));
        assert_eq!(decode_comment_udata(&u).as_deref(), Some("x"));
        assert_eq!(decode_comment_udata(&[0, 10, b'a']), None);
        assert_eq!(decode_comment_udata(&[]), None);
    }

    #[test]
    fn iifname_exact_is_padded_and_prefix_is_not() {
        let r = RuleBody::new().iifname_ne("lo").iifname_eq("br-*");
        let mut lo = b"lo".to_vec();
        lo.resize(16, 0);
        assert_eq!(
            r.exprs[1],
            Expr::Cmp {
                sreg: 1,
                op: CmpOp::Neq,
                data: lo
            }
        );
        assert_eq!(
            r.exprs[3],
            Expr::Cmp {
                sreg: 1,
                op: CmpOp::Eq,
                data: b"br-".to_vec()
            }
        );
        assert!(r.invalid.is_none());
        assert!(RuleBody::new()
            .iifname_eq("a-very-long-interface")
            .invalid
            .is_some());
    }

    #[test]
    fn fib_daddr_oifname_is_padded_like_iifname() {
        let r = RuleBody::new()
            .fib_daddr_oifname(CmpOp::Eq, "docker0")
            .fib_daddr_oifname(CmpOp::Eq, "br-*");
        let fib = Expr::Fib {
            result: FibResult::OifName,
            flags: NFTA_FIB_F_DADDR,
            dreg: 1,
        };
        let mut docker0 = b"docker0".to_vec();
        docker0.resize(16, 0);
        assert_eq!(
            r.exprs,
            [
                fib.clone(),
                Expr::Cmp {
                    sreg: 1,
                    op: CmpOp::Eq,
                    data: docker0
                },
                fib,
                Expr::Cmp {
                    sreg: 1,
                    op: CmpOp::Eq,
                    data: b"br-".to_vec()
                },
            ]
        );
        assert!(RuleBody::new()
            .fib_daddr_oifname(CmpOp::Eq, "a-very-long-interface")
            .invalid
            .is_some());
    }

    #[test]
    fn fib_daddr_type_local_compares_rtn_local_in_host_order() {
        let r = RuleBody::new().fib_daddr_type_local();
        assert_eq!(
            r.exprs,
            [
                Expr::Fib {
                    result: FibResult::AddrType,
                    flags: NFTA_FIB_F_DADDR,
                    dreg: 1,
                },
                Expr::Cmp {
                    sreg: 1,
                    op: CmpOp::Eq,
                    data: 2u32.to_ne_bytes().to_vec()
                },
            ]
        );
    }

    #[test]
    fn prefixes_mask_and_compare_the_masked_address() {
        let r = RuleBody::new().ip_saddr(Ipv4Addr::new(10, 1, 3, 7), 23);
        assert_eq!(
            r.exprs[2],
            Expr::Payload {
                base: PayloadBase::Network,
                offset: 12,
                len: 4,
                dreg: 1
            }
        );
        assert_eq!(
            r.exprs[3],
            Expr::Bitwise {
                sreg: 1,
                dreg: 1,
                len: 4,
                mask: vec![255, 255, 254, 0],
                xor: vec![0; 4]
            }
        );
        assert_eq!(
            r.exprs[4],
            Expr::Cmp {
                sreg: 1,
                op: CmpOp::Eq,
                data: vec![10, 1, 2, 0]
            }
        );
        // A full-length prefix needs no mask.
        let r = RuleBody::new().ip6_saddr("fd00::1".parse().unwrap(), 128);
        assert_eq!(r.exprs.len(), 4);
    }

    #[test]
    fn tcp_dport_has_the_l4proto_dependency() {
        let r = RuleBody::new().tcp_dport(5432).drop();
        assert_eq!(
            r.exprs[1],
            Expr::Cmp {
                sreg: 1,
                op: CmpOp::Eq,
                data: vec![6]
            }
        );
        assert_eq!(
            r.exprs[3],
            Expr::Cmp {
                sreg: 1,
                op: CmpOp::Eq,
                data: vec![0x15, 0x38]
            }
        );
        assert_eq!(
            r.exprs[4],
            Expr::Immediate {
                dreg: 0,
                data: ImmediateData::Verdict(Verdict::Drop)
            }
        );
    }

    #[test]
    fn ct_state_masks_in_host_order() {
        let r = RuleBody::new().ct_state(CtState::ESTABLISHED | CtState::RELATED);
        match &r.exprs[1] {
            Expr::Bitwise { mask, .. } => assert_eq!(mask, &6u32.to_ne_bytes().to_vec()),
            other => panic!("expected bitwise, got {other:?}"),
        }
    }

    #[test]
    fn over_long_comments_are_remembered_as_invalid() {
        assert!(RuleBody::new().comment(&"x".repeat(254)).invalid.is_some());
        assert!(RuleBody::new().comment(&"x".repeat(253)).invalid.is_none());
    }
}
