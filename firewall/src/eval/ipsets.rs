//! x_tables' `set` match for the walk: the ipset named (by name in a legacy save, by the
//! kernel's index in iptables-nft) read from the kernel with its members, and tested against
//! the connection's dimensions — the source address symbolically, the destination address and
//! port as the connection has them. Types whose dimensions are not all addresses and ports
//! (`list:set`, `hash:mac`, `hash:net,iface`, marks) and members that exclude (`nomatch`) stay
//! undecided, named.

use super::addrs::{num, Addrs, Fam};
use super::ir::IpsetRef;
use super::walk::{At, Pkt, Walker, M};
use crate::netlink::{Ipset, Member};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;

/// An ipset as the model keeps it: as read, with the sources of a one-dimension address set
/// computed on first use.
#[derive(Debug)]
pub struct IpsetIr {
    pub set: Ipset,
    addrs: Mutex<HashMap<Fam, Addrs>>,
}

impl IpsetIr {
    pub fn new(set: Ipset) -> IpsetIr {
        IpsetIr {
            set,
            addrs: Mutex::new(HashMap::new()),
        }
    }
}

/// What a dimension of a type holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dim {
    Addr,
    Port,
}

/// The dimensions of a type this host reads (`hash:ip,port` → address, port), or why not.
fn dims_of(s: &Ipset) -> Result<Vec<Dim>, super::values::Unread> {
    let (method, dims) = s.typename.split_once(':').unwrap_or((&s.typename, ""));
    let read = matches!(method, "hash" | "bitmap");
    let dims: Option<Vec<Dim>> = dims
        .split(',')
        .map(|d| match d {
            "ip" | "net" => Some(Dim::Addr),
            "port" => Some(Dim::Port),
            _ => None,
        })
        .collect();
    match dims {
        Some(d) if read && !d.is_empty() => Ok(d),
        _ => Err(super::values::Unread::IpsetType {
            name: s.name.clone(),
            typename: s.typename.clone(),
        }),
    }
}

/// A member's addresses in the `nth` address dimension (0: `ip`/`cidr`, 1: `ip2`/`cidr2`),
/// when it is of family `fam`.
fn member_addrs(s: &Ipset, m: &Member, nth: usize, fam: Fam) -> Option<Addrs> {
    let (ip, to, cidr) = if nth == 0 {
        (m.ip?, m.ip_to, m.cidr.or(s.netmask))
    } else {
        (m.ip2?, None, m.cidr2)
    };
    if Fam::of(ip) != fam {
        return None;
    }
    Some(match to {
        Some(to) if Fam::of(to) == fam => Addrs::range(fam, num(ip), num(to)),
        _ => Addrs::cidr(
            fam,
            num(ip),
            cidr.map_or(fam.len() as u32 * 8, u32::from)
                .min(fam.len() as u32 * 8),
        ),
    })
}

fn port_holds(m: &Member, proto: u8, port: u16) -> bool {
    let (Some(lo), hi) = (m.port, m.port_to) else {
        return false;
    };
    m.proto.is_none_or(|p| p == proto) && lo <= port && port <= hi.unwrap_or(lo)
}

impl Walker<'_> {
    /// `-m set [!] --match-set SET DIRS` for this connection at this point of its way.
    pub(super) fn ipset_cond(
        &self,
        set: &IpsetRef,
        dims: u8,
        src: u8,
        neg: bool,
        at: &At<'_>,
        q: &Pkt,
    ) -> M {
        let Some(sets) = self.model.ipsets.as_ref() else {
            return M::Unknown(format!("the members of ipset {set}, which were not read"));
        };
        let found = sets.iter().find(|s| match set {
            IpsetRef::Name(n) => &s.set.name == n,
            IpsetRef::Index(i) => s.set.index == Some(*i),
        });
        let Some(ir) = found else {
            return M::Unknown(format!("ipset {set}, not in the kernel"));
        };
        let s = &ir.set;
        let c = at.conn;
        let kinds = match dims_of(s) {
            Ok(k) => k,
            Err(why) => return M::Unknown(why.to_string()),
        };
        let no_member = if neg { M::All(false) } else { M::None };
        // The kernel tests nothing for a match of fewer dimensions than the set has, or of
        // another family (ip_set_test): no member.
        let fam_raw = if c.fam == Fam::V4 { 2 } else { 10 };
        if usize::from(dims) < kinds.len() || !(s.family == fam_raw || s.family == 0) {
            return no_member;
        }
        if let Some(why) = &s.partial {
            return M::Unknown(format!("ipset {}, read in part ({why})", s.name));
        }
        if s.members.iter().any(|m| m.nomatch) {
            return M::Unknown(format!("ipset {}, which has nomatch members", s.name));
        }
        if s.members.iter().any(|m| m.unread.is_some()) {
            return M::Unknown(format!(
                "ipset {}, a member this host does not read",
                s.name
            ));
        }
        // Each dimension from the connection: the source address stays symbolic.
        let mut source_dim = None;
        let mut addr_n = 0;
        let mut concrete: Vec<(usize, Dim, Option<IpAddr>)> = Vec::new();
        for (i, k) in kinds.iter().enumerate() {
            let from_src = src & (2 << i) != 0;
            match (k, from_src) {
                (Dim::Addr, true) if source_dim.is_none() => source_dim = Some(addr_n),
                (Dim::Addr, true) => {
                    return M::Unknown(format!("the source address twice in ipset {}", s.name))
                }
                (Dim::Addr, false) => match c.daddr {
                    Some(d) => concrete.push((addr_n, Dim::Addr, Some(d))),
                    None => return M::Unknown("the destination address".into()),
                },
                (Dim::Port, true) => {
                    return M::Unknown(format!("the source port, which ipset {} tests", s.name))
                }
                (Dim::Port, false) => concrete.push((0, Dim::Port, None)),
            }
            if *k == Dim::Addr {
                addr_n += 1;
            }
        }
        let port = match at.dport() {
            Some(p) => p,
            None if concrete.iter().any(|(_, k, _)| *k == Dim::Port) => {
                return M::Unknown("the port the runtime's DNAT sends it to".into())
            }
            None => 0,
        };
        let holds = |m: &Member| {
            concrete.iter().all(|(n, k, d)| match (k, d) {
                (Dim::Addr, Some(d)) => {
                    member_addrs(s, m, *n, c.fam).is_some_and(|a| a.contains(*d))
                }
                (Dim::Port, _) => port_holds(m, c.proto, port),
                _ => false,
            })
        };
        let Some(nth) = source_dim else {
            let hit = s.members.iter().any(holds);
            return if hit != neg { M::All(false) } else { M::None };
        };
        let sources = |fam: Fam| {
            let spans = s
                .members
                .iter()
                .filter(|m| holds(m))
                .filter_map(|m| member_addrs(s, m, nth, fam))
                .flat_map(|a| a.spans().to_vec())
                .collect();
            Addrs::from_spans(fam, spans)
        };
        // One dimension, the source: the same addresses for every connection of the family.
        let mut addrs = if concrete.is_empty() {
            super::model::lock(&ir.addrs)
                .entry(c.fam)
                .or_insert_with(|| sources(c.fam))
                .clone()
        } else {
            sources(c.fam)
        };
        if neg {
            addrs = addrs.complement();
        }
        let yes = q.src.intersect(&addrs);
        if yes.is_empty() {
            M::None
        } else if yes == q.src {
            M::SourceAll(false)
        } else {
            M::Some(yes, false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::ir::{Item, Test};
    use super::super::{Conn, Fate, Model, Refusal};
    use super::*;
    use std::sync::Arc;

    fn member(ip: &str, cidr: Option<u8>) -> Member {
        Member {
            ip: Some(ip.parse().unwrap()),
            cidr,
            ..Member::default()
        }
    }

    fn set(name: &str, typename: &str, family: u8, index: u16, members: Vec<Member>) -> Ipset {
        Ipset {
            name: name.into(),
            typename: typename.into(),
            family,
            index: Some(index),
            members,
            ..Ipset::default()
        }
    }

    fn model(save: &str, sets: Option<Vec<Ipset>>) -> Model {
        let mut m = Model::default();
        m.add_legacy(Fam::V4, "filter", save);
        m.ipsets = Arc::new(sets.map(|s| s.into_iter().map(IpsetIr::new).collect()));
        m
    }

    fn rules(lines: &str) -> String {
        format!("*filter\n:INPUT DROP [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\n{lines}COMMIT\n")
    }

    fn fate(m: &Model, port: u16, from: &str) -> Fate {
        let mut c = Conn::incoming(Fam::V4, 6, port, "eth0");
        c.iif_index = Some(2);
        let a = m.evaluate(&c, &Addrs::all(Fam::V4));
        a.fate_of(from.parse().unwrap()).unwrap().clone()
    }

    const BANS: &str =
        "-A INPUT -m set --match-set bans src -j DROP\n-A INPUT -p tcp --dport 22 -j ACCEPT\n";

    #[test]
    fn a_member_of_a_ban_set_is_refused_as_a_ban_and_another_source_admitted() {
        let bans = set("bans", "hash:ip", 2, 0, vec![member("192.0.2.7", None)]);
        let m = model(&rules(BANS), Some(vec![bans]));
        assert!(
            matches!(
                fate(&m, 22, "192.0.2.7"),
                Fate::Refused {
                    why: Refusal::Ban,
                    ..
                }
            ),
            "{:?}",
            fate(&m, 22, "192.0.2.7")
        );
        assert_eq!(fate(&m, 22, "192.0.2.8"), Fate::Admitted);
    }

    #[test]
    fn an_inverted_match_of_a_net_set_admits_only_its_networks() {
        let allow = set("allow", "hash:net", 2, 0, vec![member("10.0.0.0", Some(8))]);
        let m = model(
            &rules("-A INPUT -m set ! --match-set allow src -j DROP\n-A INPUT -p tcp --dport 22 -j ACCEPT\n"),
            Some(vec![allow]),
        );
        assert_eq!(fate(&m, 22, "10.1.2.3"), Fate::Admitted);
        assert!(matches!(fate(&m, 22, "192.0.2.1"), Fate::Refused { .. }));
    }

    #[test]
    fn sets_not_read_a_list_set_and_nomatch_members_stay_undecided_and_named() {
        let m = model(&rules(BANS), None);
        match fate(&m, 22, "192.0.2.7") {
            Fate::Doubtful { what, .. } => assert!(what.contains("bans"), "{what}"),
            f => panic!("{f:?}"),
        }
        let list = set("bans", "list:set", 0, 0, vec![]);
        match fate(&model(&rules(BANS), Some(vec![list])), 22, "192.0.2.7") {
            Fate::Doubtful { what, .. } => assert!(what.contains("list:set"), "{what}"),
            f => panic!("{f:?}"),
        }
        let mut net = member("192.0.2.0", Some(28));
        net.nomatch = true;
        let nets = set(
            "bans",
            "hash:net",
            2,
            0,
            vec![member("192.0.2.0", Some(24)), net],
        );
        assert!(matches!(
            fate(&model(&rules(BANS), Some(vec![nets])), 22, "192.0.2.7"),
            Fate::Doubtful { .. }
        ));
    }

    #[test]
    fn an_address_and_port_set_is_decided_by_the_connections_port() {
        let mut m1 = member("192.0.2.7", None);
        m1.port = Some(22);
        m1.proto = Some(6);
        let ports = set("svc", "hash:ip,port", 2, 0, vec![m1]);
        let m = model(
            &rules("-A INPUT -m set --match-set svc src,dst -j DROP\n-A INPUT -p tcp -j ACCEPT\n"),
            Some(vec![ports]),
        );
        assert!(matches!(fate(&m, 22, "192.0.2.7"), Fate::Refused { .. }));
        assert_eq!(fate(&m, 22, "192.0.2.8"), Fate::Admitted);
        assert_eq!(fate(&m, 80, "192.0.2.7"), Fate::Admitted);
        // Matched by its source port the set cannot be told.
        let m2 = model(
            &rules("-A INPUT -m set --match-set svc src,src -j DROP\n-A INPUT -p tcp -j ACCEPT\n"),
            m.ipsets
                .as_ref()
                .as_ref()
                .map(|v| v.iter().map(|s| s.set.clone()).collect()),
        );
        assert!(matches!(fate(&m2, 22, "192.0.2.7"), Fate::Doubtful { .. }));
    }

    #[test]
    fn a_set_of_another_family_or_fewer_dimensions_holds_no_member() {
        let v6 = set("bans", "hash:ip", 10, 0, vec![member("2001:db8::7", None)]);
        assert_eq!(
            fate(&model(&rules(BANS), Some(vec![v6])), 22, "192.0.2.7"),
            Fate::Admitted
        );
        let pairs = set(
            "bans",
            "hash:net,net",
            2,
            0,
            vec![member("192.0.2.0", Some(24))],
        );
        assert_eq!(
            fate(&model(&rules(BANS), Some(vec![pairs])), 22, "192.0.2.7"),
            Fate::Admitted
        );
    }

    #[test]
    fn iptables_nft_names_the_set_by_its_kernel_index() {
        // struct xt_set_info_match_v4: index 3, one dimension, from the source; no counters.
        let mut info = vec![0u8; 48];
        info[0..2].copy_from_slice(&3u16.to_ne_bytes());
        info[2] = 1;
        info[3] = 0x02;
        let items = super::super::xt::decode_match("set", 4, &info).unwrap();
        let Item::Cond(c) = &items[0] else {
            panic!("{items:?}")
        };
        assert_eq!(
            c.test,
            Test::Ipset {
                set: IpsetRef::Index(3),
                dims: 1,
                src: 2,
                neg: false
            }
        );
        // A packet counter test is not read.
        info[16] = 1;
        let items = super::super::xt::decode_match("set", 4, &info).unwrap();
        assert_eq!(
            super::super::ir::render(&items),
            "the counters or --return-nomatch of ipset with kernel index 3 0x00000000"
        );
        // Through the model, the index finds the set the kernel listed under it.
        let listed = set(
            "pve-fw-bl",
            "hash:net",
            2,
            3,
            vec![member("198.51.100.0", Some(24))],
        );
        let mut m = model(
            &rules("-A INPUT -m set --match-set named-in-save src -j DROP\n-A INPUT -p tcp -j ACCEPT\n"),
            Some(vec![listed]),
        );
        let by_index = super::super::xt::decode_match("set", 1, &info[..4]).unwrap();
        assert_eq!(
            super::super::ir::render(&by_index),
            "-m set --match-set #3 src"
        );
        let chain = m.tables[0].chains.get_mut("INPUT").unwrap();
        let rule = &mut Arc::make_mut(chain).rules[0];
        rule.items.splice(0..1, by_index);
        assert!(matches!(fate(&m, 22, "198.51.100.9"), Fate::Refused { .. }));
        assert_eq!(fate(&m, 22, "192.0.2.1"), Fate::Admitted);
    }
}
