//! A minimal rtnetlink client: one `RTM_GETLINK` dump of the calling thread's namespace, parsed
//! into what the inventory needs (name, index, hardware type, flags, MTU, address, master, and the
//! link kind with its tun/tap type).

use std::io;
use std::mem;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const NLMSG_HDRLEN: usize = 16;
const IFINFOMSG_LEN: usize = 16;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const RTM_NEWLINK: u16 = 16;
const RTM_GETLINK: u16 = 18;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_DUMP: u16 = 0x300;
const NLM_F_MULTI: u16 = 0x2;

const IFLA_ADDRESS: u16 = 1;
const IFLA_IFNAME: u16 = 3;
const IFLA_MTU: u16 = 4;
const IFLA_MASTER: u16 = 10;
const IFLA_LINKINFO: u16 = 18;
const IFLA_INFO_KIND: u16 = 1;
const IFLA_INFO_DATA: u16 = 2;
const IFLA_TUN_TYPE: u16 = 3;
/// The nested and byte-order bits a kernel may set on an attribute type.
const NLA_TYPE_MASK: u16 = 0x3fff;

/// One link as the kernel describes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Link {
    pub index: u32,
    pub name: String,
    /// The ARPHRD_* hardware type.
    pub hw_type: u16,
    pub flags: u32,
    pub mtu: u32,
    pub address: Vec<u8>,
    pub master: Option<u32>,
    /// The rtnetlink kind (`veth`, `bridge`, `tun`, `wireguard`, `vxlan`…); none for hardware.
    pub kind: Option<String>,
    /// For kind `tun`: 1 for a tun device, 2 for a tap device.
    pub tun_type: Option<u8>,
}

/// Dumps every link of the calling thread's network namespace.
pub(crate) fn dump_links() -> io::Result<Vec<Link>> {
    // SAFETY: plain socket(2); the result is checked before it is owned.
    let raw = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        )
    };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: raw is a fresh descriptor nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let seq: u32 = 1;
    let mut request = Vec::with_capacity(NLMSG_HDRLEN + IFINFOMSG_LEN);
    request.extend_from_slice(&((NLMSG_HDRLEN + IFINFOMSG_LEN) as u32).to_ne_bytes());
    request.extend_from_slice(&RTM_GETLINK.to_ne_bytes());
    request.extend_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    request.extend_from_slice(&seq.to_ne_bytes());
    request.extend_from_slice(&0u32.to_ne_bytes());
    // ifinfomsg: family AF_UNSPEC, everything else zero (no filter).
    request.extend_from_slice(&[0u8; IFINFOMSG_LEN]);
    // SAFETY: the zeroed sockaddr_nl addresses the kernel (pid 0); request is a valid buffer.
    let sent = unsafe {
        let mut kernel: libc::sockaddr_nl = mem::zeroed();
        kernel.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        libc::sendto(
            fd.as_raw_fd(),
            request.as_ptr().cast(),
            request.len(),
            0,
            &kernel as *const libc::sockaddr_nl as *const libc::sockaddr,
            mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    // Large enough for any one datagram of a link dump (the kernel sizes them to a few pages).
    let mut buf = vec![0u8; 1 << 16];
    let mut links = Vec::new();
    loop {
        // SAFETY: buf is a writable buffer of the length given.
        let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        match parse_messages(&buf[..n as usize], seq, &mut links)? {
            Step::More => continue,
            Step::Done => return Ok(links),
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Step {
    More,
    Done,
}

/// Parses one datagram of the dump, appending links; `Done` at NLMSG_DONE.
fn parse_messages(mut data: &[u8], seq: u32, links: &mut Vec<Link>) -> io::Result<Step> {
    let invalid = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_owned());
    while data.len() >= NLMSG_HDRLEN {
        let len = u32_at(data, 0).ok_or_else(|| invalid("short header"))? as usize;
        let kind = u16_at(data, 4).ok_or_else(|| invalid("short header"))?;
        let flags = u16_at(data, 6).ok_or_else(|| invalid("short header"))?;
        let msg_seq = u32_at(data, 8).ok_or_else(|| invalid("short header"))?;
        if len < NLMSG_HDRLEN || len > data.len() {
            return Err(invalid("message length out of bounds"));
        }
        let payload = &data[NLMSG_HDRLEN..len];
        if msg_seq == seq {
            match kind {
                NLMSG_DONE => return Ok(Step::Done),
                NLMSG_ERROR => {
                    let code = payload
                        .get(..4)
                        .map(|b| i32::from_ne_bytes(b.try_into().expect("four bytes")))
                        .ok_or_else(|| invalid("short error message"))?;
                    if code != 0 {
                        // i32::MIN has no positive errno; it is still an error.
                        return Err(io::Error::from_raw_os_error(
                            code.checked_neg().unwrap_or(i32::MAX),
                        ));
                    }
                    return Ok(Step::Done);
                }
                RTM_NEWLINK => links.push(parse_link(payload).ok_or_else(|| invalid("bad link"))?),
                _ => {}
            }
        }
        // A reply that is not part of a multi-part dump is complete by itself.
        if flags & NLM_F_MULTI == 0 && msg_seq == seq {
            return Ok(Step::Done);
        }
        data = &data[align(len).min(data.len())..];
    }
    Ok(Step::More)
}

/// Parses an `ifinfomsg` and its attributes.
fn parse_link(payload: &[u8]) -> Option<Link> {
    let mut link = Link {
        hw_type: u16_at(payload, 2)?,
        index: u32_at(payload, 4)?,
        flags: u32_at(payload, 8)?,
        ..Link::default()
    };
    for (kind, value) in attributes(payload.get(IFINFOMSG_LEN..)?) {
        match kind {
            IFLA_IFNAME => link.name = c_string(value),
            IFLA_MTU => link.mtu = u32_at(value, 0)?,
            IFLA_ADDRESS => link.address = value.to_vec(),
            IFLA_MASTER => link.master = u32_at(value, 0),
            IFLA_LINKINFO => {
                for (info, data) in attributes(value) {
                    match info {
                        IFLA_INFO_KIND => link.kind = Some(c_string(data)),
                        IFLA_INFO_DATA if link.kind.as_deref() == Some("tun") => {
                            link.tun_type = attributes(data)
                                .find(|(t, _)| *t == IFLA_TUN_TYPE)
                                .and_then(|(_, v)| v.first().copied());
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Some(link)
}

/// Iterates the `rtattr`s of a buffer: (type without flag bits, value).
fn attributes(mut data: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        let len = usize::from(u16_at(data, 0)?);
        let kind = u16_at(data, 2)? & NLA_TYPE_MASK;
        if len < 4 || len > data.len() {
            return None;
        }
        let value = &data[4..len];
        data = &data[align(len).min(data.len())..];
        Some((kind, value))
    })
}

fn align(len: usize) -> usize {
    (len + 3) & !3
}

fn u16_at(data: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(data.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(data: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(data.get(at..at + 4)?.try_into().ok()?))
}

fn c_string(value: &[u8]) -> String {
    let end = value.iter().position(|b| *b == 0).unwrap_or(value.len());
    String::from_utf8_lossy(&value[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(kind: u16, value: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&((4 + value.len()) as u16).to_ne_bytes());
        out.extend_from_slice(&kind.to_ne_bytes());
        out.extend_from_slice(value);
        out.resize(align(out.len()), 0);
        out
    }

    fn message(kind: u16, flags: u16, seq: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&((NLMSG_HDRLEN + payload.len()) as u32).to_ne_bytes());
        out.extend_from_slice(&kind.to_ne_bytes());
        out.extend_from_slice(&flags.to_ne_bytes());
        out.extend_from_slice(&seq.to_ne_bytes());
        out.extend_from_slice(&0u32.to_ne_bytes());
        out.extend_from_slice(payload);
        out.resize(align(out.len()), 0);
        out
    }

    fn tap_link() -> Vec<u8> {
        let mut payload = vec![0u8, 0];
        payload.extend_from_slice(&1u16.to_ne_bytes()); // ARPHRD_ETHER
        payload.extend_from_slice(&7u32.to_ne_bytes()); // index
        payload.extend_from_slice(&1u32.to_ne_bytes()); // IFF_UP
        payload.extend_from_slice(&0u32.to_ne_bytes());
        payload.extend(attr(IFLA_IFNAME, b"tap0\0"));
        payload.extend(attr(IFLA_MTU, &1500u32.to_ne_bytes()));
        payload.extend(attr(IFLA_ADDRESS, &[2, 0, 0, 0, 0, 1]));
        let mut info = attr(IFLA_INFO_KIND, b"tun\0");
        info.extend(attr(IFLA_INFO_DATA | 0x8000, &attr(IFLA_TUN_TYPE, &[2])));
        payload.extend(attr(IFLA_LINKINFO | 0x8000, &info));
        payload
    }

    #[test]
    fn a_tap_link_is_parsed_from_a_dump() {
        let mut data = message(RTM_NEWLINK, NLM_F_MULTI, 1, &tap_link());
        data.extend(message(NLMSG_DONE, NLM_F_MULTI, 1, &[0, 0, 0, 0]));
        let mut links = Vec::new();
        assert_eq!(parse_messages(&data, 1, &mut links).unwrap(), Step::Done);
        assert_eq!(
            links,
            [Link {
                index: 7,
                name: "tap0".into(),
                hw_type: 1,
                flags: 1,
                mtu: 1500,
                address: vec![2, 0, 0, 0, 0, 1],
                master: None,
                kind: Some("tun".into()),
                tun_type: Some(2),
            }]
        );
    }

    #[test]
    fn a_netlink_error_is_returned_as_errno() {
        let data = message(NLMSG_ERROR, 0, 1, &(-libc::EPERM).to_ne_bytes());
        let err = parse_messages(&data, 1, &mut Vec::new()).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EPERM));
    }

    #[test]
    fn a_truncated_message_is_rejected() {
        let mut data = message(RTM_NEWLINK, NLM_F_MULTI, 1, &tap_link());
        data.truncate(20);
        data[0] = 200;
        assert!(parse_messages(&data, 1, &mut Vec::new()).is_err());
    }
}

#[cfg(test)]
#[path = "netlink_fuzz.rs"]
mod fuzz;
