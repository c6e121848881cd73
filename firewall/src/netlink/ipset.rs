//! ipset over its own netlink protocol (NETLINK_NETFILTER, subsystem `NFNL_SUBSYS_IPSET`): every
//! set of the namespace with its type, family and members (`IPSET_CMD_LIST`), and the kernel's
//! index of each (`IPSET_CMD_GET_BYNAME`; `IPSET_CMD_GET_BYINDEX` the other way), which is all
//! iptables-nft's `-m set` keeps of the set it names. Constants are those of the kernel's
//! `include/uapi/linux/netfilter/ipset/ip_set.h`.

use super::attr::{self, Attr, Attrs};
use super::consts::{NFGENMSG_LEN, NLMSG_ERROR, NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST};
use super::msg::{self, NlMsg};
use super::socket::{NfSocket, Wait, ANSWER_TIMEOUT};
use crate::error::{Errno, Error, Result};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub const NFNL_SUBSYS_IPSET: u16 = 6;
/// The protocol this reader speaks; the kernel answers protocol 6 and 7 alike.
pub const IPSET_PROTOCOL: u8 = 7;

pub const IPSET_CMD_LIST: u8 = 7;
pub const IPSET_CMD_GET_BYNAME: u8 = 14;
pub const IPSET_CMD_GET_BYINDEX: u8 = 15;

const ATTR_PROTOCOL: u16 = 1;
const ATTR_SETNAME: u16 = 2;
const ATTR_TYPENAME: u16 = 3;
const ATTR_REVISION: u16 = 4;
const ATTR_FAMILY: u16 = 5;
const ATTR_DATA: u16 = 7;
const ATTR_ADT: u16 = 8;
const ATTR_INDEX: u16 = 11;

// Inside IPSET_ATTR_DATA.
const ATTR_IP: u16 = 1;
const ATTR_IP_TO: u16 = 2;
const ATTR_CIDR: u16 = 3;
const ATTR_PORT: u16 = 4;
const ATTR_PORT_TO: u16 = 5;
const ATTR_TIMEOUT: u16 = 6;
const ATTR_PROTO: u16 = 7;
const ATTR_CADT_FLAGS: u16 = 8;
const ATTR_NETMASK: u16 = 20;
const ATTR_IP2: u16 = 20;
const ATTR_CIDR2: u16 = 21;
const ATTR_IFACE: u16 = 23;
const ATTR_NAME: u16 = 18;
/// Extensions that never change whether an element matches.
const ATTR_BYTES: u16 = 24;
const ATTR_PACKETS: u16 = 25;
const ATTR_COMMENT: u16 = 26;
const ATTR_SKBMARK: u16 = 27;
const ATTR_SKBPRIO: u16 = 28;
const ATTR_SKBQUEUE: u16 = 29;
const ATTR_PAD: u16 = 30;
const ATTR_CADT_LINENO: u16 = 9;

const ATTR_IPADDR_IPV4: u16 = 1;
const ATTR_IPADDR_IPV6: u16 = 2;

/// IPSET_FLAG_NOMATCH: an element that excludes what it covers from a wider one.
const FLAG_NOMATCH: u32 = 1 << 2;
/// IPSET_FLAG_PHYSDEV: a `hash:net,iface` element about the bridge port.
const FLAG_PHYSDEV: u32 = 1 << 1;

/// Members and sets past these are not kept: the set is then marked too large to read.
pub const MAX_MEMBERS: usize = 1 << 20;
const MAX_SETS: usize = 65_535;

/// One ipset as the kernel lists it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ipset {
    pub name: String,
    /// `hash:ip`, `hash:net,port`, `list:set`, …
    pub typename: String,
    pub revision: u8,
    /// NFPROTO_IPV4 (2), NFPROTO_IPV6 (10), or 0 for the types of no family.
    pub family: u8,
    /// The kernel's index of the set, which x_tables' `set` match carries.
    pub index: Option<u16>,
    /// `hash:ip`'s `netmask`: each member stands for its whole prefix.
    pub netmask: Option<u8>,
    pub members: Vec<Member>,
    /// Why the members as read are not the whole set (too many, or a malformed part).
    pub partial: Option<String>,
}

/// One element, by its dimensions as the kernel lists them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Member {
    pub ip: Option<IpAddr>,
    pub ip_to: Option<IpAddr>,
    pub cidr: Option<u8>,
    pub port: Option<u16>,
    pub port_to: Option<u16>,
    pub proto: Option<u8>,
    pub ip2: Option<IpAddr>,
    pub cidr2: Option<u8>,
    pub iface: Option<String>,
    /// A `list:set` member: the set it names.
    pub name: Option<String>,
    pub nomatch: bool,
    /// An attribute this reader does not model (a MAC, a mark, a physdev port): the element
    /// cannot be decided.
    pub unread: Option<u16>,
}

/// The address of an `IPSET_ATTR_IP`-like nest.
fn ip_of(a: &Attr<'_>) -> Option<IpAddr> {
    let inner = a.nested().next()?;
    match inner.ty {
        ATTR_IPADDR_IPV4 => {
            let b: [u8; 4] = inner.data.try_into().ok()?;
            Some(IpAddr::V4(Ipv4Addr::from(b)))
        }
        ATTR_IPADDR_IPV6 => {
            let b: [u8; 16] = inner.data.try_into().ok()?;
            Some(IpAddr::V6(Ipv6Addr::from(b)))
        }
        _ => None,
    }
}

fn be16(a: &Attr<'_>) -> Option<u16> {
    Some(u16::from_be_bytes(a.data.try_into().ok()?))
}

/// One element's `IPSET_ATTR_DATA` nest.
pub fn decode_member(data: &[u8]) -> Member {
    let mut m = Member::default();
    let mut attrs = Attrs::new(data);
    for a in attrs.by_ref() {
        match a.ty {
            ATTR_IP => m.ip = ip_of(&a),
            ATTR_IP_TO => m.ip_to = ip_of(&a),
            ATTR_CIDR => m.cidr = a.u8(),
            ATTR_PORT => m.port = be16(&a),
            ATTR_PORT_TO => m.port_to = be16(&a),
            ATTR_PROTO => m.proto = a.u8(),
            ATTR_IP2 => m.ip2 = ip_of(&a),
            ATTR_CIDR2 => m.cidr2 = a.u8(),
            ATTR_IFACE => m.iface = Some(a.string()),
            ATTR_NAME => m.name = Some(a.string()),
            ATTR_CADT_FLAGS => {
                let f = a.be32().unwrap_or(0);
                m.nomatch |= f & FLAG_NOMATCH != 0;
                if f & FLAG_PHYSDEV != 0 {
                    m.unread = Some(ATTR_CADT_FLAGS);
                }
            }
            ATTR_TIMEOUT | ATTR_BYTES | ATTR_PACKETS | ATTR_COMMENT | ATTR_SKBMARK
            | ATTR_SKBPRIO | ATTR_SKBQUEUE | ATTR_PAD | ATTR_CADT_LINENO => {}
            other => m.unread = Some(other),
        }
    }
    if attrs.malformed() {
        m.unread = Some(0);
    }
    m
}

/// One message of an `IPSET_CMD_LIST` dump: the set it is about (a large set comes in several
/// messages, each naming it) with the header and members it carries.
pub fn decode_list(m: &NlMsg<'_>) -> Option<Ipset> {
    let mut s = Ipset::default();
    let mut named = false;
    for a in m.attrs() {
        match a.ty {
            ATTR_SETNAME => {
                s.name = a.string();
                named = true;
            }
            ATTR_TYPENAME => s.typename = a.string(),
            ATTR_REVISION => s.revision = a.u8().unwrap_or(0),
            ATTR_FAMILY => s.family = a.u8().unwrap_or(0),
            ATTR_DATA => {
                for h in a.nested() {
                    if h.ty == ATTR_NETMASK {
                        s.netmask = h.u8();
                    }
                }
            }
            ATTR_ADT => {
                let mut elems = a.nested();
                for e in elems.by_ref() {
                    if e.ty != ATTR_DATA {
                        continue;
                    }
                    if s.members.len() >= MAX_MEMBERS {
                        s.partial = Some(format!("more than {MAX_MEMBERS} members"));
                        break;
                    }
                    s.members.push(decode_member(e.data));
                }
                if elems.malformed() {
                    s.partial = Some("a malformed list of members".into());
                }
            }
            _ => {}
        }
    }
    named.then_some(s)
}

/// The `(index, name)` of a GET_BYNAME or GET_BYINDEX answer.
pub fn decode_get(m: &NlMsg<'_>) -> (Option<u16>, Option<String>) {
    let (mut index, mut name) = (None, None);
    for a in m.attrs() {
        match a.ty {
            ATTR_INDEX => index = be16(&a),
            ATTR_SETNAME => name = Some(a.string()),
            _ => {}
        }
    }
    (index, name)
}

/// A request of subsystem ipset carrying the protocol attribute, which every command needs.
fn request(cmd: u8, flags: u16, seq: u32, body: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut req = Vec::with_capacity(64);
    let start = msg::begin(
        &mut req,
        (NFNL_SUBSYS_IPSET << 8) | u16::from(cmd),
        NLM_F_REQUEST | flags,
        seq,
        // NFPROTO_IPV4, as the ipset tool sends; the listing covers every family.
        2,
        0,
    );
    attr::put_u8(&mut req, ATTR_PROTOCOL, IPSET_PROTOCOL);
    body(&mut req);
    msg::end(&mut req, start);
    req
}

fn is_ipset(m: &NlMsg<'_>, cmd: u8) -> bool {
    m.ty == (NFNL_SUBSYS_IPSET << 8) | u16::from(cmd) && m.payload.len() >= NFGENMSG_LEN
}

impl NfSocket {
    /// Every ipset of the socket's namespace with its members and its kernel index. Members
    /// with a timeout are read as they stand: one added later is a later reading.
    pub fn ipsets(&mut self) -> Result<Vec<Ipset>> {
        let what = "ipsets";
        let seq = self.take_seq(1);
        let req = request(IPSET_CMD_LIST, NLM_F_DUMP, seq, |_| {});
        self.nl_mut().send(&req)?;
        let mut out: Vec<Ipset> = Vec::new();
        // A listing the kernel flags as interrupted is read as it came: sets change by their own
        // commands, and the next reading sees what changed.
        self.read_dump(seq, what, "ipset listing", |m| {
            if !is_ipset(m, IPSET_CMD_LIST) {
                return Ok(());
            }
            if let Some(part) = decode_list(m) {
                merge(&mut out, part);
                if out.len() > MAX_SETS {
                    return Err(Error::Malformed {
                        what: what.into(),
                        reason: format!("more than {MAX_SETS} sets"),
                    });
                }
            }
            Ok(())
        })?;
        for s in &mut out {
            s.index = self
                .ipset_get(IPSET_CMD_GET_BYNAME, |b| {
                    attr::put_str(b, ATTR_SETNAME, &s.name)
                })?
                .0;
        }
        Ok(out)
    }

    /// The name of the set the kernel holds at `index`, or `None` when there is none.
    pub fn ipset_name(&mut self, index: u16) -> Result<Option<String>> {
        Ok(self
            .ipset_get(IPSET_CMD_GET_BYINDEX, |b| {
                attr::put(b, ATTR_INDEX, &index.to_be_bytes())
            })?
            .1)
    }

    /// One GET_BYNAME / GET_BYINDEX exchange: the answer's index and name; none for ENOENT.
    fn ipset_get(
        &mut self,
        cmd: u8,
        body: impl FnOnce(&mut Vec<u8>),
    ) -> Result<(Option<u16>, Option<String>)> {
        let seq = self.take_seq(1);
        let req = request(cmd, NLM_F_ACK, seq, body);
        self.nl_mut().send(&req)?;
        let mut got = (None, None);
        loop {
            let data = self
                .nl_mut()
                .recv(Wait::For(ANSWER_TIMEOUT))?
                .ok_or(Error::Timeout {
                    what: "ipset index",
                    millis: ANSWER_TIMEOUT.as_millis(),
                })?;
            let msgs = msg::split(data).map_err(|reason| Error::Malformed {
                what: "ipset index".into(),
                reason: reason.to_string(),
            })?;
            for m in msgs.iter().filter(|m| m.seq == seq) {
                if m.ty == NLMSG_ERROR {
                    let ack = msg::parse_ack(m).map_err(|reason| Error::Malformed {
                        what: "ipset index".into(),
                        reason: reason.to_string(),
                    })?;
                    return match ack.errno {
                        0 => Ok(got),
                        libc::ENOENT => Ok((None, None)),
                        e => Err(Error::ListRefused {
                            what: "ipset index".into(),
                            errno: Errno(e),
                            detail: ack.message,
                        }),
                    };
                }
                if is_ipset(m, cmd) {
                    got = decode_get(m);
                }
            }
        }
    }
}

/// Adds one message's part of a set to what was read of it before.
fn merge(out: &mut Vec<Ipset>, part: Ipset) {
    match out.iter_mut().find(|s| s.name == part.name) {
        Some(s) => {
            if s.typename.is_empty() {
                s.typename = part.typename;
                s.family = part.family;
                s.revision = part.revision;
            }
            s.netmask = s.netmask.or(part.netmask);
            s.partial = s.partial.take().or(part.partial);
            let room = MAX_MEMBERS.saturating_sub(s.members.len());
            if part.members.len() > room {
                s.partial = Some(format!("more than {MAX_MEMBERS} members"));
            }
            s.members.extend(part.members.into_iter().take(room));
        }
        None => out.push(part),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An `IPSET_ATTR_IP` nest of `ip`.
    pub(crate) fn put_ip(buf: &mut Vec<u8>, ty: u16, ip: IpAddr) {
        let n = attr::nest_start(buf, ty);
        match ip {
            IpAddr::V4(v) => attr::put(buf, ATTR_IPADDR_IPV4 | 0x4000, &v.octets()),
            IpAddr::V6(v) => attr::put(buf, ATTR_IPADDR_IPV6 | 0x4000, &v.octets()),
        }
        attr::nest_end(buf, n);
    }

    /// A LIST answer as the kernel writes one: the set's header and its members.
    pub(crate) fn list_message(
        name: &str,
        typename: &str,
        family: u8,
        members: &[Member],
    ) -> Vec<u8> {
        let mut b = Vec::new();
        let start = msg::begin(&mut b, (NFNL_SUBSYS_IPSET << 8) | 7, 2, 9, family, 0);
        attr::put_u8(&mut b, ATTR_PROTOCOL, 7);
        attr::put_str(&mut b, ATTR_SETNAME, name);
        attr::put_str(&mut b, ATTR_TYPENAME, typename);
        attr::put_u8(&mut b, ATTR_REVISION, 1);
        attr::put_u8(&mut b, ATTR_FAMILY, family);
        let d = attr::nest_start(&mut b, ATTR_DATA);
        attr::put_be32(&mut b, 18, 1024);
        attr::nest_end(&mut b, d);
        let adt = attr::nest_start(&mut b, ATTR_ADT);
        for m in members {
            let e = attr::nest_start(&mut b, ATTR_DATA);
            if let Some(ip) = m.ip {
                put_ip(&mut b, ATTR_IP, ip);
            }
            if let Some(c) = m.cidr {
                attr::put_u8(&mut b, ATTR_CIDR, c);
            }
            if let Some(p) = m.port {
                attr::put(&mut b, ATTR_PORT | 0x4000, &p.to_be_bytes());
            }
            if let Some(p) = m.proto {
                attr::put_u8(&mut b, ATTR_PROTO, p);
            }
            attr::put_be32(&mut b, ATTR_TIMEOUT | 0x4000, 600);
            if m.nomatch {
                attr::put_be32(&mut b, ATTR_CADT_FLAGS | 0x4000, FLAG_NOMATCH);
            }
            if let Some(n) = &m.name {
                attr::put_str(&mut b, ATTR_NAME, n);
            }
            attr::nest_end(&mut b, e);
        }
        attr::nest_end(&mut b, adt);
        msg::end(&mut b, start);
        b
    }

    fn one(data: &[u8]) -> Ipset {
        let msgs = msg::split(data).unwrap();
        decode_list(&msgs[0]).unwrap()
    }

    #[test]
    fn a_listing_reads_the_sets_header_and_members() {
        let members = vec![
            Member {
                ip: Some("198.51.100.7".parse().unwrap()),
                ..Member::default()
            },
            Member {
                ip: Some("203.0.113.0".parse().unwrap()),
                cidr: Some(24),
                nomatch: true,
                ..Member::default()
            },
            Member {
                ip: Some("2001:db8::1".parse().unwrap()),
                port: Some(22),
                proto: Some(6),
                ..Member::default()
            },
        ];
        let s = one(&list_message("pve-fw-blacklist", "hash:net", 2, &members));
        assert_eq!(s.name, "pve-fw-blacklist");
        assert_eq!(s.typename, "hash:net");
        assert_eq!(s.family, 2);
        assert_eq!(
            s.members, members,
            "the timeout is read past, the rest kept"
        );
        assert_eq!(s.partial, None);
    }

    #[test]
    fn a_set_over_several_messages_is_one_set() {
        let m = |ip: &str| Member {
            ip: Some(ip.parse().unwrap()),
            ..Member::default()
        };
        let mut out = Vec::new();
        merge(
            &mut out,
            one(&list_message("f2b", "hash:ip", 2, &[m("192.0.2.1")])),
        );
        let mut tail = one(&list_message("f2b", "", 0, &[m("192.0.2.2")]));
        tail.typename.clear();
        merge(&mut out, tail);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].typename, "hash:ip");
        assert_eq!(out[0].members, vec![m("192.0.2.1"), m("192.0.2.2")]);
    }

    #[test]
    fn an_unknown_dimension_and_a_broken_member_are_marked_unread() {
        let mut d = Vec::new();
        attr::put(&mut d, 17, &[0, 1, 2, 3, 4, 5]); // IPSET_ATTR_ETHER
        assert_eq!(decode_member(&d).unread, Some(17));
        let mut d = Vec::new();
        put_ip(&mut d, ATTR_IP, "192.0.2.9".parse().unwrap());
        d.extend_from_slice(&[9, 0, 3]);
        let m = decode_member(&d);
        assert_eq!(m.ip, Some("192.0.2.9".parse().unwrap()));
        assert_eq!(m.unread, Some(0));
    }

    #[test]
    fn an_index_answer_reads_its_index_and_name() {
        let mut b = Vec::new();
        let start = msg::begin(&mut b, (NFNL_SUBSYS_IPSET << 8) | 14, 0, 3, 2, 0);
        attr::put_u8(&mut b, ATTR_PROTOCOL, 7);
        attr::put_str(&mut b, ATTR_SETNAME, "bans");
        attr::put(&mut b, ATTR_INDEX | 0x4000, &3u16.to_be_bytes());
        msg::end(&mut b, start);
        let msgs = msg::split(&b).unwrap();
        assert!(is_ipset(&msgs[0], IPSET_CMD_GET_BYNAME));
        assert_eq!(decode_get(&msgs[0]), (Some(3), Some("bans".into())));
    }

    #[test]
    fn a_request_carries_the_protocol_first() {
        let r = request(IPSET_CMD_LIST, NLM_F_DUMP, 5, |_| {});
        let msgs = msg::split(&r).unwrap();
        assert_eq!(msgs[0].ty, (6 << 8) | 7);
        let first = msgs[0].attrs().next().unwrap();
        assert_eq!((first.ty, first.u8()), (ATTR_PROTOCOL, Some(7)));
    }
}
