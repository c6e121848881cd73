//! Where a published port leads: the destinations the container runtime's DNAT rules translate a
//! port to, read from the ruleset (iptables-nft's x_tables `DNAT` target, nft's own `dnat to`)
//! and from iptables-legacy's saved tables. A forwarded opening is a port on the node; firewalld
//! under `StrictForwardPorts` and ufw's `route` rules speak of the container behind it, so their
//! drivers ask here which container that is.
//!
//! Only a translation to one address (and one port, or the port unchanged) is a destination: a
//! range is load-balancing this crate does not follow. firewalld's own table is not read: the
//! forward ports in it (the mesh's among them) follow a runtime's rules, they are not one.

use crate::netlink::consts::NFT_REG_VERDICT;
use crate::netlink::{Expr, Family, ImmediateData, Ruleset};
use crate::opening::Proto;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// One destination a published port is translated to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Target {
    pub addr: IpAddr,
    pub port: u16,
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.addr {
            IpAddr::V4(a) => write!(f, "{a}:{}", self.port),
            IpAddr::V6(a) => write!(f, "[{a}]:{}", self.port),
        }
    }
}

/// The table whose rules are firewalld's own, never a runtime's.
pub(crate) const FIREWALLD_TABLE: &str = "firewalld";

/// `NF_NAT_RANGE_MAP_IPS` and `NF_NAT_RANGE_PROTO_SPECIFIED` of a DNAT target's range.
const MAP_IPS: u32 = 1;
const PROTO_SPECIFIED: u32 = 2;

/// The destinations `proto` port `port` is translated to, both families, sorted and without
/// repeats. `legacy_saves` are iptables-legacy's `*-save` texts by family and table.
pub fn targets(
    ruleset: &Ruleset,
    legacy_saves: &BTreeMap<(Family, String), String>,
    proto: Proto,
    port: u16,
) -> Vec<Target> {
    let l4 = proto.number();
    let mut out: Vec<Target> = Vec::new();
    for rule in &ruleset.rules {
        if rule.table == FIREWALLD_TABLE {
            continue;
        }
        let Some(to) = dnat_of(rule.family, &rule.exprs) else {
            continue;
        };
        if crate::eval::nft_rule_is_for(&rule.exprs, l4, port) {
            out.push(Target {
                addr: to.0,
                port: to.1.unwrap_or(port),
            });
        }
    }
    for ((family, table), text) in legacy_saves {
        if table != "nat" {
            continue;
        }
        for (_, _, rules) in crate::eval::parse_save(text, "nat") {
            out.extend(
                rules
                    .iter()
                    .filter_map(|(_, spec)| legacy_dnat(*family, spec, proto, port)),
            );
        }
    }
    out.sort();
    out.dedup();
    out
}

/// The address and port (None: unchanged) a rule's DNAT translates to, if it has one.
fn dnat_of(family: Family, exprs: &[Expr]) -> Option<(IpAddr, Option<u16>)> {
    for e in exprs {
        if e.xt_name().as_deref() == Some("DNAT") {
            let (rev, info) = e.xt_info()?;
            return xt_dnat(family, rev, &info);
        }
        if let Expr::Raw { name, data } = e {
            if name == "nat" {
                return nft_dnat(exprs, data);
            }
        }
    }
    None
}

/// An x_tables DNAT target's one destination: revision 0 is `nf_nat_ipv4_multi_range_compat`
/// (IPv4 only), 1 and 2 are `nf_nat_range` and `nf_nat_range2` (an address of 16 bytes).
fn xt_dnat(family: Family, rev: u32, info: &[u8]) -> Option<(IpAddr, Option<u16>)> {
    let u32_at = |at: usize| Some(u32::from_ne_bytes(info.get(at..at + 4)?.try_into().ok()?));
    let be16_at = |at: usize| Some(u16::from_be_bytes(info.get(at..at + 2)?.try_into().ok()?));
    let (flags, min, max, pmin, pmax) = match rev {
        0 => {
            if u32_at(0)? != 1 {
                return None;
            }
            let min: [u8; 4] = info.get(8..12)?.try_into().ok()?;
            let max: [u8; 4] = info.get(12..16)?.try_into().ok()?;
            (
                u32_at(4)?,
                IpAddr::V4(Ipv4Addr::from(min)),
                IpAddr::V4(Ipv4Addr::from(max)),
                be16_at(16)?,
                be16_at(18)?,
            )
        }
        1 | 2 => {
            let (min, max) = match family {
                Family::Ipv4 => {
                    let min: [u8; 4] = info.get(4..8)?.try_into().ok()?;
                    let max: [u8; 4] = info.get(20..24)?.try_into().ok()?;
                    (IpAddr::from(min), IpAddr::from(max))
                }
                Family::Ipv6 => {
                    let min: [u8; 16] = info.get(4..20)?.try_into().ok()?;
                    let max: [u8; 16] = info.get(20..36)?.try_into().ok()?;
                    (
                        IpAddr::V6(Ipv6Addr::from(min)),
                        IpAddr::V6(Ipv6Addr::from(max)),
                    )
                }
                _ => return None,
            };
            (u32_at(0)?, min, max, be16_at(36)?, be16_at(38)?)
        }
        _ => return None,
    };
    if flags & MAP_IPS == 0 || min != max {
        return None;
    }
    if flags & PROTO_SPECIFIED == 0 {
        return Some((min, None));
    }
    (pmin == pmax).then_some((min, Some(pmin)))
}

/// nft's own `dnat to ADDR[:PORT]`: a `nat` expression of type DNAT whose registers were loaded
/// by immediates earlier in the rule.
fn nft_dnat(exprs: &[Expr], data: &[u8]) -> Option<(IpAddr, Option<u16>)> {
    use crate::netlink::attr::Attrs;
    const TYPE: u16 = 1;
    const FAMILY: u16 = 2;
    const ADDR_MIN: u16 = 3;
    const ADDR_MAX: u16 = 4;
    const PROTO_MIN: u16 = 5;
    const PROTO_MAX: u16 = 6;
    const NFT_NAT_DNAT: u32 = 1;
    let attr = |ty: u16| Attrs::new(data).find(|a| a.ty == ty).and_then(|a| a.be32());
    if attr(TYPE)? != NFT_NAT_DNAT {
        return None;
    }
    let reg = |r: u32| -> Option<&[u8]> {
        exprs.iter().rev().find_map(|e| match e {
            Expr::Immediate {
                dreg,
                data: ImmediateData::Value(v),
            } if *dreg == r && r != NFT_REG_VERDICT => Some(v.as_slice()),
            _ => None,
        })
    };
    let amin = attr(ADDR_MIN)?;
    if attr(ADDR_MAX).is_some_and(|m| m != amin) {
        return None;
    }
    let bytes = reg(amin)?;
    let addr = match attr(FAMILY)? {
        2 => IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(bytes.get(..4)?).ok()?)),
        10 => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(bytes.get(..16)?).ok()?)),
        _ => return None,
    };
    let port = match attr(PROTO_MIN) {
        None => None,
        Some(pmin) => {
            if attr(PROTO_MAX).is_some_and(|m| m != pmin) {
                return None;
            }
            let b = reg(pmin)?;
            Some(u16::from_be_bytes(b.get(..2)?.try_into().ok()?))
        }
    };
    Some((addr, port))
}

/// One iptables-legacy saved rule's DNAT for `proto` port `port` (`-p tcp … --dport PORT … -j
/// DNAT --to-destination ADDR[:PORT]`, IPv6 addresses in brackets when a port follows): the
/// match as the evaluator reads it, the destination from the target's option.
fn legacy_dnat(family: Family, spec: &str, proto: Proto, port: u16) -> Option<Target> {
    let fam = if family == Family::Ipv6 {
        crate::eval::Fam::V6
    } else {
        crate::eval::Fam::V4
    };
    let words = crate::rules::split_spec(spec)?;
    let after = |flag: &str| {
        words
            .iter()
            .position(|w| w == flag)
            .and_then(|i| words.get(i + 1))
            .map(String::as_str)
    };
    if after("-j") != Some("DNAT")
        || !crate::eval::saved_rule_is_for(spec, fam, proto.number(), port)
    {
        return None;
    }
    let to = after("--to-destination")?;
    let (addr, to_port) = match family {
        Family::Ipv6 => match to.strip_prefix('[') {
            Some(rest) => {
                let (a, p) = rest.split_once("]:")?;
                (a.parse::<Ipv6Addr>().ok()?.into(), Some(p))
            }
            None => (to.parse::<Ipv6Addr>().ok()?.into(), None),
        },
        _ => match to.split_once(':') {
            Some((a, p)) => (a.parse::<Ipv4Addr>().ok()?.into(), Some(p)),
            None => (to.parse::<Ipv4Addr>().ok()?.into(), None),
        },
    };
    let port = match to_port {
        // A port range is load-balancing, not one destination.
        Some(p) => p.parse::<u16>().ok()?,
        None => port,
    };
    Some(Target { addr, port })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::attr;
    use crate::netlink::consts::{NFTA_XT_INFO, NFTA_XT_NAME, NFTA_XT_REV};
    use crate::netlink::{CmpOp, MetaKey, PayloadBase, Rule};

    /// `meta l4proto tcp th dport PORT`, as iptables-nft writes `-p tcp --dport PORT`.
    fn match_port(proto: u8, port: u16) -> Vec<Expr> {
        vec![
            Expr::Meta {
                key: MetaKey::L4Proto,
                dreg: 1,
            },
            Expr::Cmp {
                sreg: 1,
                op: CmpOp::Eq,
                data: vec![proto],
            },
            Expr::Payload {
                base: PayloadBase::Transport,
                offset: 2,
                len: 2,
                dreg: 1,
            },
            Expr::Cmp {
                sreg: 1,
                op: CmpOp::Eq,
                data: port.to_be_bytes().to_vec(),
            },
        ]
    }

    fn xt_target(name: &str, rev: u32, info: &[u8]) -> Expr {
        let mut data = Vec::new();
        attr::put_str(&mut data, NFTA_XT_NAME, name);
        attr::put_be32(&mut data, NFTA_XT_REV, rev);
        attr::put(&mut data, NFTA_XT_INFO, info);
        Expr::Raw {
            name: "target".into(),
            data,
        }
    }

    /// `struct nf_nat_range2` for one address and one port.
    fn range2(addr: &[u8], port: u16) -> Vec<u8> {
        let mut info = vec![0u8; 44];
        info[..4].copy_from_slice(&(MAP_IPS | PROTO_SPECIFIED).to_ne_bytes());
        info[4..4 + addr.len()].copy_from_slice(addr);
        info[20..20 + addr.len()].copy_from_slice(addr);
        info[36..38].copy_from_slice(&port.to_be_bytes());
        info[38..40].copy_from_slice(&port.to_be_bytes());
        info
    }

    fn rule(family: Family, table: &str, exprs: Vec<Expr>) -> Rule {
        Rule {
            family,
            table: table.into(),
            chain: "DOCKER".into(),
            handle: 1,
            position: None,
            exprs,
            userdata: None,
            comment: None,
        }
    }

    fn ruleset(rules: Vec<Rule>) -> Ruleset {
        Ruleset {
            generation: 1,
            rules,
            ..Ruleset::default()
        }
    }

    #[test]
    fn iptables_nft_dnat_targets_in_both_families() {
        let v6: Ipv6Addr = "fd00:d0c::2".parse().unwrap();
        let mut v4rule = match_port(6, 8085);
        v4rule.push(xt_target("DNAT", 2, &range2(&[172, 17, 0, 2], 80)));
        let mut v6rule = match_port(6, 8085);
        v6rule.push(xt_target("DNAT", 2, &range2(&v6.octets(), 80)));
        let mut other = match_port(6, 9000);
        other.push(xt_target("DNAT", 2, &range2(&[172, 17, 0, 3], 80)));
        let mut udp = match_port(17, 8085);
        udp.push(xt_target("DNAT", 2, &range2(&[172, 17, 0, 4], 53)));
        let rs = ruleset(vec![
            rule(Family::Ipv4, "nat", v4rule.clone()),
            rule(Family::Ipv6, "nat", v6rule),
            rule(Family::Ipv4, "nat", other),
            rule(Family::Ipv4, "nat", udp),
            // firewalld's own forward port for the same port is not a runtime's.
            rule(Family::Inet, "firewalld", v4rule),
        ]);
        let got = targets(&rs, &BTreeMap::new(), Proto::Tcp, 8085);
        assert_eq!(
            got,
            vec![
                Target {
                    addr: "172.17.0.2".parse().unwrap(),
                    port: 80
                },
                Target {
                    addr: v6.into(),
                    port: 80
                },
            ]
        );
        assert_eq!(got[1].to_string(), "[fd00:d0c::2]:80");
        assert_eq!(
            targets(&rs, &BTreeMap::new(), Proto::Udp, 8085),
            vec![Target {
                addr: "172.17.0.4".parse().unwrap(),
                port: 53
            }]
        );
        assert!(targets(&rs, &BTreeMap::new(), Proto::Tcp, 8086).is_empty());
    }

    #[test]
    fn a_range_or_a_port_left_unchanged() {
        let mut range = range2(&[10, 0, 0, 2], 80);
        range[20..24].copy_from_slice(&[10, 0, 0, 9]);
        assert_eq!(xt_dnat(Family::Ipv4, 2, &range), None, "an address range");
        let mut same = range2(&[10, 0, 0, 2], 0);
        same[..4].copy_from_slice(&MAP_IPS.to_ne_bytes());
        assert_eq!(
            xt_dnat(Family::Ipv4, 1, &same[..40]),
            Some(("10.0.0.2".parse().unwrap(), None))
        );
        // Revision 0, IPv4 only: rangesize 1, flags, min, max, ports.
        let mut r0 = vec![0u8; 20];
        r0[..4].copy_from_slice(&1u32.to_ne_bytes());
        r0[4..8].copy_from_slice(&(MAP_IPS | PROTO_SPECIFIED).to_ne_bytes());
        r0[8..12].copy_from_slice(&[10, 0, 0, 5]);
        r0[12..16].copy_from_slice(&[10, 0, 0, 5]);
        r0[16..18].copy_from_slice(&443u16.to_be_bytes());
        r0[18..20].copy_from_slice(&443u16.to_be_bytes());
        assert_eq!(
            xt_dnat(Family::Ipv4, 0, &r0),
            Some(("10.0.0.5".parse().unwrap(), Some(443)))
        );
        assert_eq!(xt_dnat(Family::Ipv4, 2, &[0u8; 7]), None, "short info");
    }

    #[test]
    fn nft_dnat_to_an_address_and_port() {
        let mut data = Vec::new();
        attr::put_be32(&mut data, 1, 1); // type dnat
        attr::put_be32(&mut data, 2, 2); // family ipv4
        attr::put_be32(&mut data, 3, 1); // address in reg 1
        attr::put_be32(&mut data, 5, 2); // port in reg 2
        let mut exprs = match_port(6, 443);
        exprs.push(Expr::Immediate {
            dreg: 1,
            data: ImmediateData::Value(vec![10, 99, 0, 2]),
        });
        exprs.push(Expr::Immediate {
            dreg: 2,
            data: ImmediateData::Value(80u16.to_be_bytes().to_vec()),
        });
        exprs.push(Expr::Raw {
            name: "nat".into(),
            data,
        });
        let rs = ruleset(vec![rule(Family::Ipv4, "nat", exprs)]);
        assert_eq!(
            targets(&rs, &BTreeMap::new(), Proto::Tcp, 443),
            vec![Target {
                addr: "10.99.0.2".parse().unwrap(),
                port: 80
            }]
        );
    }

    #[test]
    fn iptables_legacy_saves() {
        let mut saves = BTreeMap::new();
        saves.insert(
            (Family::Ipv4, "nat".to_string()),
            "*nat\n-A DOCKER ! -i docker0 -p tcp -m tcp --dport 8085 -j DNAT --to-destination 172.17.0.2:80\n-A DOCKER -p tcp -m tcp ! --dport 8085 -j DNAT --to-destination 172.17.0.9:80\nCOMMIT\n".to_string(),
        );
        saves.insert(
            (Family::Ipv6, "nat".to_string()),
            "-A DOCKER -p tcp -m tcp --dport 8085 -j DNAT --to-destination [fd00::2]:80\n-A DOCKER -p tcp -m tcp --dport 8085 -j DNAT --to-destination fd00::3\n".to_string(),
        );
        saves.insert(
            (Family::Ipv4, "filter".to_string()),
            "-A X -p tcp --dport 8085 -j DNAT --to-destination 1.2.3.4:1\n".to_string(),
        );
        let got = targets(&ruleset(vec![]), &saves, Proto::Tcp, 8085);
        let want: Vec<Target> = [("172.17.0.2", 80), ("fd00::2", 80), ("fd00::3", 8085)]
            .iter()
            .map(|(a, p)| Target {
                addr: a.parse().unwrap(),
                port: *p,
            })
            .collect();
        assert_eq!(got, want);
    }
}
