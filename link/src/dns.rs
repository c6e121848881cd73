//! A small DNS codec for the one thing the link asks a nameserver: the A or AAAA records of the
//! broker's name (RFC 1035). It writes one recursive query and reads its answer: the header
//! checked against the query (id, response bit, one question), compressed names followed with a
//! bound on jumps, and the addresses taken from the records owned by the name or by the CNAME
//! chain from it. Nothing read is trusted: every length is checked against the message.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The record types asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    A,
    Aaaa,
}

impl Kind {
    fn code(self) -> u16 {
        match self {
            Kind::A => 1,
            Kind::Aaaa => 28,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Kind::A => "A",
            Kind::Aaaa => "AAAA",
        }
    }
}

const CNAME: u16 = 5;
const CLASS_IN: u16 = 1;
/// How many compression pointers one name may follow (a loop of pointers ends here).
const MAX_JUMPS: usize = 32;
/// How many CNAMEs deep a chain is followed within one answer.
const MAX_CHAIN: usize = 8;

/// What a nameserver answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The addresses of the name (empty: the name exists but has no record of this kind).
    Addrs(Vec<IpAddr>),
    /// NXDOMAIN: the name does not exist.
    NoSuchName,
    /// The answer did not fit the datagram: ask again over TCP.
    Truncated,
}

/// Why an answer was not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DnsError {
    #[error("the answer is malformed: {0}")]
    Malformed(&'static str),
    #[error("the answer is not to this query")]
    NotOurs,
    #[error("the nameserver answered {0}")]
    Failed(&'static str),
}

/// Why a host name is not a DNS name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadName {
    #[error("{0:?} is not a host name of 1 to 253 characters")]
    Length(String),
    #[error("{name:?} is not a host name (label {label:?}: 1 to 63 of a-z, 0-9, '-', '_')")]
    Label { name: String, label: String },
}

/// Checks a host name as a DNS name: at most 253 characters, labels of 1 to 63 letters, digits,
/// `-` or `_`, not starting or ending with `-` (a trailing dot is allowed).
pub fn check_name(name: &str) -> Result<(), BadName> {
    let bare = name.strip_suffix('.').unwrap_or(name);
    if bare.is_empty() || bare.len() > 253 {
        return Err(BadName::Length(name.to_string()));
    }
    for label in bare.split('.') {
        let ok_chars = label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if label.is_empty()
            || label.len() > 63
            || !ok_chars
            || label.starts_with('-')
            || label.ends_with('-')
        {
            return Err(BadName::Label {
                name: name.to_string(),
                label: label.to_string(),
            });
        }
    }
    Ok(())
}

fn put_name(out: &mut Vec<u8>, name: &str) {
    let bare = name.strip_suffix('.').unwrap_or(name);
    for label in bare.split('.') {
        out.push(label.len() as u8);
        out.extend_from_slice(label.as_bytes());
    }
    out.push(0);
}

/// The query for `kind` records of `name` (checked by [`check_name`]) with id `id`, recursion
/// desired.
pub fn query(id: u16, name: &str, kind: Kind) -> Vec<u8> {
    let mut q = Vec::with_capacity(18 + name.len());
    q.extend_from_slice(&id.to_be_bytes());
    q.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    put_name(&mut q, name);
    q.extend_from_slice(&kind.code().to_be_bytes());
    q.extend_from_slice(&CLASS_IN.to_be_bytes());
    q
}

struct Reader<'a> {
    msg: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], DnsError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|e| *e <= self.msg.len())
            .ok_or(DnsError::Malformed("it ends inside a record"))?;
        let s = &self.msg[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn u16(&mut self) -> Result<u16, DnsError> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    /// A name at the current position, lowercased, with compression followed.
    fn name(&mut self) -> Result<String, DnsError> {
        let (name, next) = read_name(self.msg, self.pos)?;
        self.pos = next;
        Ok(name)
    }
}

/// Reads the name at `pos`: the name (lowercase, dot-separated, no trailing dot) and the position
/// after it where it is written (after its first pointer, if it has one).
fn read_name(msg: &[u8], mut pos: usize) -> Result<(String, usize), DnsError> {
    let mut name = String::new();
    let mut after = None;
    let mut jumps = 0;
    loop {
        let len = *msg
            .get(pos)
            .ok_or(DnsError::Malformed("a name runs past the end"))?;
        match len {
            0 => {
                return Ok((name, after.unwrap_or(pos + 1)));
            }
            l if l & 0xc0 == 0xc0 => {
                let low = *msg
                    .get(pos + 1)
                    .ok_or(DnsError::Malformed("a name's pointer is cut"))?;
                jumps += 1;
                if jumps > MAX_JUMPS {
                    return Err(DnsError::Malformed("a name's pointers loop"));
                }
                after.get_or_insert(pos + 2);
                pos = (usize::from(l & 0x3f) << 8) | usize::from(low);
            }
            l if l & 0xc0 != 0 => return Err(DnsError::Malformed("a label of a reserved kind")),
            l => {
                let l = usize::from(l);
                let label = msg
                    .get(pos + 1..pos + 1 + l)
                    .ok_or(DnsError::Malformed("a label runs past the end"))?;
                if name.len() + l + 1 > 255 {
                    return Err(DnsError::Malformed("a name longer than 255 bytes"));
                }
                if !name.is_empty() {
                    name.push('.');
                }
                name.extend(label.iter().map(|b| char::from(b.to_ascii_lowercase())));
                pos += 1 + l;
            }
        }
    }
}

fn normal(name: &str) -> String {
    name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase()
}

/// Reads the answer to the query `id` for `kind` records of `name`.
pub fn answer(msg: &[u8], id: u16, name: &str, kind: Kind) -> Result<Answer, DnsError> {
    let mut r = Reader { msg, pos: 0 };
    let got_id = r.u16()?;
    let flags = r.u16()?;
    let (qd, an) = (r.u16()?, r.u16()?);
    r.take(4)?;
    if got_id != id || flags & 0x8000 == 0 || flags & 0x7800 != 0 {
        return Err(DnsError::NotOurs);
    }
    if flags & 0x0200 != 0 {
        return Ok(Answer::Truncated);
    }
    match flags & 0x000f {
        0 => {}
        3 => return Ok(Answer::NoSuchName),
        1 => return Err(DnsError::Failed("FORMERR")),
        2 => return Err(DnsError::Failed("SERVFAIL")),
        4 => return Err(DnsError::Failed("NOTIMP")),
        5 => return Err(DnsError::Failed("REFUSED")),
        _ => return Err(DnsError::Failed("an unknown error code")),
    }
    if qd != 1 {
        return Err(DnsError::NotOurs);
    }
    let wanted = normal(name);
    let qname = r.name()?;
    let (qtype, qclass) = (r.u16()?, r.u16()?);
    if qname != wanted || qtype != kind.code() || qclass != CLASS_IN {
        return Err(DnsError::NotOurs);
    }
    let mut records = Vec::new();
    for _ in 0..an {
        let owner = r.name()?;
        let (rtype, rclass) = (r.u16()?, r.u16()?);
        r.take(4)?;
        let len = usize::from(r.u16()?);
        let start = r.pos;
        let data = r.take(len)?;
        if rclass != CLASS_IN {
            continue;
        }
        let value = match rtype {
            CNAME => {
                let (target, end) = read_name(msg, start)?;
                if end != start + len {
                    return Err(DnsError::Malformed("a CNAME's length is not its name's"));
                }
                Record::Alias(target)
            }
            t if t == kind.code() => match (kind, data.len()) {
                (Kind::A, 4) => Record::Addr(IpAddr::V4(Ipv4Addr::new(
                    data[0], data[1], data[2], data[3],
                ))),
                (Kind::Aaaa, 16) => {
                    let b: [u8; 16] = data.try_into().expect("16 bytes");
                    Record::Addr(IpAddr::V6(Ipv6Addr::from(b)))
                }
                _ => return Err(DnsError::Malformed("an address record of the wrong length")),
            },
            _ => continue,
        };
        records.push((owner, value));
    }
    // The name and every alias it leads to (within one answer) own the addresses.
    let mut owners = vec![wanted];
    for _ in 0..MAX_CHAIN {
        let more: Vec<String> = records
            .iter()
            .filter_map(|(o, v)| match v {
                Record::Alias(t) if owners.contains(o) && !owners.contains(t) => Some(t.clone()),
                _ => None,
            })
            .collect();
        if more.is_empty() {
            break;
        }
        owners.extend(more);
    }
    let mut addrs = Vec::new();
    for (o, v) in &records {
        if let Record::Addr(a) = v {
            if owners.contains(o) && !addrs.contains(a) {
                addrs.push(*a);
            }
        }
    }
    Ok(Answer::Addrs(addrs))
}

enum Record {
    Alias(String),
    Addr(IpAddr),
}

/// A nameserver's answer to `query` (the test nameservers' and the fuzz test's encoder): its
/// question echoed, then each record `(owner, value)`, where a value is an address (of the
/// question's kind) or, for a CNAME, the alias's target name. `rcode` and `truncated` set the
/// flags.
#[cfg(test)]
pub fn encode_answer(
    query: &[u8],
    rcode: u8,
    truncated: bool,
    records: &[(&str, Result<IpAddr, &str>)],
) -> Vec<u8> {
    let mut out = query[..2].to_vec();
    let flags: u16 = 0x8180 | u16::from(rcode & 0x0f) | if truncated { 0x0200 } else { 0 };
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(&[0, 1]);
    out.extend_from_slice(&(records.len() as u16).to_be_bytes());
    out.extend_from_slice(&[0, 0, 0, 0]);
    out.extend_from_slice(&query[12..]);
    for (owner, value) in records {
        // The question's name is written once; an owner equal to it points at it.
        let (q, _) = read_name(query, 12).expect("the query's name");
        if normal(owner) == q {
            out.extend_from_slice(&[0xc0, 12]);
        } else {
            put_name(&mut out, owner);
        }
        let (rtype, data) = match value {
            Ok(IpAddr::V4(a)) => (1u16, a.octets().to_vec()),
            Ok(IpAddr::V6(a)) => (28u16, a.octets().to_vec()),
            Err(target) => {
                let mut d = Vec::new();
                put_name(&mut d, target);
                (CNAME, d)
            }
        };
        out.extend_from_slice(&rtype.to_be_bytes());
        out.extend_from_slice(&CLASS_IN.to_be_bytes());
        out.extend_from_slice(&300u32.to_be_bytes());
        out.extend_from_slice(&(data.len() as u16).to_be_bytes());
        out.extend_from_slice(&data);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_query_is_the_bytes_rfc_1035_gives() {
        let q = query(0xbeef, "Broker.Mesh.", Kind::Aaaa);
        let mut want = vec![0xbe, 0xef, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        want.extend_from_slice(b"\x06Broker\x04Mesh\x00");
        want.extend_from_slice(&[0, 28, 0, 1]);
        assert_eq!(q, want);
    }

    #[test]
    fn addresses_are_read_from_the_name_and_its_aliases_only() {
        let q = query(7, "broker.mesh", Kind::A);
        let a = encode_answer(
            &q,
            0,
            false,
            &[
                ("broker.mesh", Err("rabbit.mesh")),
                ("rabbit.mesh", Ok(v4("10.0.0.2"))),
                ("broker.mesh", Ok(v4("10.0.0.1"))),
                ("elsewhere.mesh", Ok(v4("10.9.9.9"))),
                ("BROKER.mesh", Ok(v4("10.0.0.1"))),
            ],
        );
        assert_eq!(
            answer(&a, 7, "broker.mesh", Kind::A),
            Ok(Answer::Addrs(vec![v4("10.0.0.2"), v4("10.0.0.1")]))
        );
        let q6 = query(8, "broker.mesh", Kind::Aaaa);
        let a6 = encode_answer(&q6, 0, false, &[("broker.mesh", Ok(v4("fd00::1")))]);
        assert_eq!(
            answer(&a6, 8, "broker.mesh", Kind::Aaaa),
            Ok(Answer::Addrs(vec![v4("fd00::1")]))
        );
    }

    #[test]
    fn the_codes_and_flags_that_are_not_addresses() {
        let q = query(9, "nowhere.mesh", Kind::A);
        let nx = encode_answer(&q, 3, false, &[]);
        assert_eq!(
            answer(&nx, 9, "nowhere.mesh", Kind::A),
            Ok(Answer::NoSuchName)
        );
        let tc = encode_answer(&q, 0, true, &[]);
        assert_eq!(
            answer(&tc, 9, "nowhere.mesh", Kind::A),
            Ok(Answer::Truncated)
        );
        let sf = encode_answer(&q, 2, false, &[]);
        assert_eq!(
            answer(&sf, 9, "nowhere.mesh", Kind::A),
            Err(DnsError::Failed("SERVFAIL"))
        );
        let empty = encode_answer(&q, 0, false, &[]);
        assert_eq!(
            answer(&empty, 9, "nowhere.mesh", Kind::A),
            Ok(Answer::Addrs(vec![]))
        );
        // Another id, another name or another type: not the answer to this query (a spoofer's
        // blind guess is dropped, and the wait goes on).
        assert_eq!(
            answer(&empty, 10, "nowhere.mesh", Kind::A),
            Err(DnsError::NotOurs)
        );
        assert_eq!(
            answer(&empty, 9, "other.mesh", Kind::A),
            Err(DnsError::NotOurs)
        );
        assert_eq!(
            answer(&empty, 9, "nowhere.mesh", Kind::Aaaa),
            Err(DnsError::NotOurs)
        );
        assert_eq!(
            answer(&q, 9, "nowhere.mesh", Kind::A),
            Err(DnsError::NotOurs),
            "a query is not an answer"
        );
    }

    #[test]
    fn malformed_answers_are_refused_without_panicking() {
        let q = query(1, "b.m", Kind::A);
        let good = encode_answer(&q, 0, false, &[("b.m", Ok(v4("10.0.0.1")))]);
        for cut in 0..good.len() {
            assert!(
                answer(&good[..cut], 1, "b.m", Kind::A).is_err(),
                "cut {cut}"
            );
        }
        // A pointer to itself loops; a pointer past the end runs off.
        let mut looped = good.clone();
        let at = q.len();
        looped[at] = 0xc0;
        looped[at + 1] = at as u8;
        assert_eq!(
            answer(&looped, 1, "b.m", Kind::A),
            Err(DnsError::Malformed("a name's pointers loop"))
        );
        let mut off = good.clone();
        off[at + 1] = 0xff;
        assert!(answer(&off, 1, "b.m", Kind::A).is_err());
        // An A record of five bytes.
        let mut long = good;
        let n = long.len();
        long[n - 5] = 5;
        long.push(0);
        assert_eq!(
            answer(&long, 1, "b.m", Kind::A),
            Err(DnsError::Malformed("an address record of the wrong length"))
        );
    }

    #[test]
    fn host_names_are_checked() {
        for ok in [
            "broker",
            "broker.mesh.lab",
            "b-1.example.",
            "_srv.x",
            "a.b.c.d9",
        ] {
            assert_eq!(check_name(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            ".",
            "a..b",
            "-a.b",
            "a-.b",
            "bad_name!",
            "a b",
            &"x".repeat(64),
        ] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        assert!(check_name(&["abc"; 70].join(".")).is_err(), "over 253");
    }
}
