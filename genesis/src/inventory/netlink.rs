//! A minimal rtnetlink client: one `RTM_GETLINK` dump of the calling thread's namespace, parsed
//! into what the inventory needs (name, index, hardware type, flags, MTU, address, master, and the
//! link kind with its tun/tap type). A dump the kernel marks interrupted (the table changed while
//! it was read) is read again, a few times at most; the errno a dump ends with is its error; and
//! the whole dump has a deadline, so a kernel that never answers cannot hang the inventory.

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{
    recv, sendto, socket, AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType,
};
use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::time::{Duration, Instant};

const NLMSG_HDRLEN: usize = 16;
const IFINFOMSG_LEN: usize = 16;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const RTM_NEWLINK: u16 = 16;
const RTM_DELLINK: u16 = 17;
const RTM_GETLINK: u16 = 18;
/// The multicast group of link announcements (`RTMGRP_LINK`).
const RTMGRP_LINK: u32 = 1;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_DUMP: u16 = 0x300;
const NLM_F_MULTI: u16 = 0x2;
/// Set by the kernel on a message of a dump during which the table changed: what was read may
/// be inconsistent (a link missed or seen twice).
const NLM_F_DUMP_INTR: u16 = 0x10;

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

/// How many times a dump is read when the kernel says each was interrupted.
const DUMP_ATTEMPTS: u32 = 5;
/// The longest one dump may take, from the request to its end (a link dump takes milliseconds).
const DUMP_DEADLINE: Duration = Duration::from_secs(5);

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
    consistent(DUMP_ATTEMPTS, |seq| dump_once(seq, DUMP_DEADLINE))
}

/// The links of the first of `attempts` dumps the kernel did not mark interrupted; each attempt
/// is given its own sequence number.
fn consistent(
    attempts: u32,
    mut dump: impl FnMut(u32) -> io::Result<Dump>,
) -> io::Result<Vec<Link>> {
    for seq in 1..=attempts {
        let read = dump(seq)?;
        if !read.interrupted {
            return Ok(read.links);
        }
    }
    Err(io::Error::other(format!(
        "the link table changed during each of {attempts} dumps (NLM_F_DUMP_INTR)"
    )))
}

/// One dump on a socket of its own, so nothing of an earlier one is read.
fn dump_once(seq: u32, deadline: Duration) -> io::Result<Dump> {
    let until = Instant::now() + deadline;
    let fd = socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkRoute,
    )?;
    let mut request = Vec::with_capacity(NLMSG_HDRLEN + IFINFOMSG_LEN);
    request.extend_from_slice(&((NLMSG_HDRLEN + IFINFOMSG_LEN) as u32).to_ne_bytes());
    request.extend_from_slice(&RTM_GETLINK.to_ne_bytes());
    request.extend_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    request.extend_from_slice(&seq.to_ne_bytes());
    request.extend_from_slice(&0u32.to_ne_bytes());
    // ifinfomsg: family AF_UNSPEC, everything else zero (no filter).
    request.extend_from_slice(&[0u8; IFINFOMSG_LEN]);
    // To the kernel: port id 0, no groups.
    sendto(
        fd.as_raw_fd(),
        &request,
        &NetlinkAddr::new(0, 0),
        MsgFlags::empty(),
    )?;
    read_dump(&fd, seq, until)
}

/// Reads the datagrams of dump `seq` until its end, or fails at `until`.
fn read_dump(fd: &impl AsFd, seq: u32, until: Instant) -> io::Result<Dump> {
    // Large enough for any one datagram of a link dump (the kernel sizes them to a few pages).
    let mut buf = vec![0u8; 1 << 16];
    let mut dump = Dump::default();
    loop {
        let n = receive(fd, &mut buf, until)?;
        if parse_messages(&buf[..n], seq, &mut dump)? == Step::Done {
            return Ok(dump);
        }
    }
}

/// One datagram, waited for no later than `until`.
fn receive(fd: &impl AsFd, buf: &mut [u8], until: Instant) -> io::Result<usize> {
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "the kernel did not finish the dump within {}s",
                    DUMP_DEADLINE.as_secs()
                ),
            ));
        }
        let mut ready = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
        let timeout = PollTimeout::try_from(left).unwrap_or(PollTimeout::MAX);
        match poll(&mut ready, timeout) {
            Ok(0) | Err(Errno::EINTR) => continue,
            Ok(_) => {}
            Err(e) => return Err(e.into()),
        }
        match recv(fd.as_fd().as_raw_fd(), buf, MsgFlags::MSG_DONTWAIT) {
            Ok(n) => return Ok(n),
            Err(Errno::EINTR | Errno::EAGAIN) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// The kernel's announcements of links added, changed and removed in the calling thread's
/// namespace: a non-blocking rtnetlink socket in the `RTMGRP_LINK` group, for a poll loop.
pub struct LinkEvents {
    fd: std::os::fd::OwnedFd,
}

impl LinkEvents {
    /// Subscribes to the namespace's link announcements.
    pub fn open() -> io::Result<LinkEvents> {
        let fd = socket(
            AddressFamily::Netlink,
            SockType::Raw,
            SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
            SockProtocol::NetlinkRoute,
        )?;
        nix::sys::socket::bind(fd.as_raw_fd(), &NetlinkAddr::new(0, RTMGRP_LINK))?;
        Ok(LinkEvents { fd })
    }

    /// Reads everything announced so far; whether a bridge was among the links added, changed
    /// or removed. Announcements lost to a full socket buffer (`ENOBUFS`) may have been one.
    pub fn drain(&self) -> bool {
        let mut buf = vec![0u8; 1 << 16];
        let mut bridge = false;
        loop {
            match recv(self.fd.as_raw_fd(), &mut buf, MsgFlags::MSG_DONTWAIT) {
                Ok(0) => return bridge,
                Ok(n) => bridge |= announces_bridge(&buf[..n]),
                Err(Errno::EINTR) => continue,
                Err(Errno::ENOBUFS) => bridge = true,
                Err(_) => return bridge,
            }
        }
    }
}

impl AsFd for LinkEvents {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Whether a datagram of link announcements names a bridge added, changed or removed.
fn announces_bridge(mut data: &[u8]) -> bool {
    while data.len() >= NLMSG_HDRLEN {
        let (Some(len), Some(kind)) = (u32_at(data, 0), u16_at(data, 4)) else {
            return false;
        };
        let len = len as usize;
        if len < NLMSG_HDRLEN || len > data.len() {
            return false;
        }
        if matches!(kind, RTM_NEWLINK | RTM_DELLINK)
            && parse_link(&data[NLMSG_HDRLEN..len])
                .is_some_and(|l| l.kind.as_deref() == Some("bridge"))
        {
            return true;
        }
        data = &data[align(len).min(data.len())..];
    }
    false
}

/// What a dump has read so far.
#[derive(Debug, Default, PartialEq, Eq)]
struct Dump {
    links: Vec<Link>,
    /// The kernel marked a message of it `NLM_F_DUMP_INTR`.
    interrupted: bool,
}

#[derive(Debug, PartialEq, Eq)]
enum Step {
    More,
    Done,
}

/// Parses one datagram of dump `seq` into `dump`; `Done` at its end (NLMSG_DONE, or an
/// NLMSG_ERROR, which fails with its errno unless it is 0). An NLMSG_DONE carrying a negative
/// errno is the dump failing part-way.
fn parse_messages(mut data: &[u8], seq: u32, dump: &mut Dump) -> io::Result<Step> {
    let invalid = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_owned());
    let errno = |payload: &[u8], what: &str| {
        payload
            .get(..4)
            .map(|b| i32::from_ne_bytes(b.try_into().expect("four bytes")))
            .ok_or_else(|| invalid(what))
    };
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
            if flags & NLM_F_DUMP_INTR != 0 {
                dump.interrupted = true;
            }
            match kind {
                NLMSG_DONE => {
                    // Older kernels may end a dump with an empty DONE: no errno is none.
                    let code = if payload.is_empty() {
                        0
                    } else {
                        errno(payload, "short done message")?
                    };
                    if code < 0 {
                        // i32::MIN has no positive errno; it is still an error.
                        return Err(io::Error::from_raw_os_error(
                            code.checked_neg().unwrap_or(i32::MAX),
                        ));
                    }
                    return Ok(Step::Done);
                }
                NLMSG_ERROR => {
                    let code = errno(payload, "short error message")?;
                    if code != 0 {
                        // i32::MIN has no positive errno; it is still an error.
                        return Err(io::Error::from_raw_os_error(
                            code.checked_neg().unwrap_or(i32::MAX),
                        ));
                    }
                    return Ok(Step::Done);
                }
                RTM_NEWLINK => dump
                    .links
                    .push(parse_link(payload).ok_or_else(|| invalid("bad link"))?),
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

    /// One netlink attribute, padded (the fuzz test builds its inputs with it too).
    pub(super) fn attr(kind: u16, value: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&((4 + value.len()) as u16).to_ne_bytes());
        out.extend_from_slice(&kind.to_ne_bytes());
        out.extend_from_slice(value);
        out.resize(align(out.len()), 0);
        out
    }

    /// One netlink message of `payload`, padded.
    pub(super) fn message(kind: u16, flags: u16, seq: u32, payload: &[u8]) -> Vec<u8> {
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

    fn link_of_kind(name: &str, kind: &str) -> Vec<u8> {
        let mut payload = vec![0u8; IFINFOMSG_LEN];
        payload.extend(attr(IFLA_IFNAME, format!("{name}\0").as_bytes()));
        let info = attr(IFLA_INFO_KIND, format!("{kind}\0").as_bytes());
        payload.extend(attr(IFLA_LINKINFO | 0x8000, &info));
        payload
    }

    #[test]
    fn a_bridge_added_or_removed_is_announced_and_a_veth_is_not() {
        let veth = message(RTM_NEWLINK, 0, 0, &link_of_kind("veth1", "veth"));
        let bridge = message(RTM_NEWLINK, 0, 0, &link_of_kind("br-0123", "bridge"));
        let gone = message(RTM_DELLINK, 0, 0, &link_of_kind("br-0123", "bridge"));
        assert!(!announces_bridge(&veth));
        assert!(announces_bridge(&[veth.clone(), bridge].concat()));
        assert!(announces_bridge(&gone));
        assert!(!announces_bridge(&veth[..NLMSG_HDRLEN - 1]));
    }

    #[test]
    fn link_events_are_heard_in_a_namespace_of_their_own() {
        // A namespace of this thread's own: the bridge made and removed is never the machine's.
        let run = std::thread::spawn(|| {
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).expect("unshare -n (root)");
            let events = LinkEvents::open().expect("an rtnetlink socket in RTMGRP_LINK");
            assert!(!events.drain(), "nothing announced yet");
            let ip = |args: &[&str]| {
                let ok = std::process::Command::new("ip").args(args).status();
                assert!(ok.is_ok_and(|s| s.success()), "ip {args:?}");
            };
            ip(&["link", "add", "lab-br0", "type", "bridge"]);
            let mut ready = [PollFd::new(events.as_fd(), PollFlags::POLLIN)];
            assert!(matches!(
                poll(&mut ready, PollTimeout::from(5000u16)),
                Ok(1)
            ));
            assert!(events.drain(), "a new bridge is announced");
            ip(&[
                "link", "add", "lab-v0", "type", "veth", "peer", "name", "lab-v1",
            ]);
            let mut ready = [PollFd::new(events.as_fd(), PollFlags::POLLIN)];
            assert!(matches!(
                poll(&mut ready, PollTimeout::from(5000u16)),
                Ok(1)
            ));
            assert!(!events.drain(), "a veth pair is no bridge");
            ip(&["link", "del", "lab-br0"]);
            let mut ready = [PollFd::new(events.as_fd(), PollFlags::POLLIN)];
            assert!(matches!(
                poll(&mut ready, PollTimeout::from(5000u16)),
                Ok(1)
            ));
            assert!(events.drain(), "a bridge removed is announced");
        });
        run.join().expect("the namespace's thread");
    }

    fn done(flags: u16, seq: u32, errno: i32) -> Vec<u8> {
        message(NLMSG_DONE, NLM_F_MULTI | flags, seq, &errno.to_ne_bytes())
    }

    fn tap() -> Link {
        Link {
            index: 7,
            name: "tap0".into(),
            hw_type: 1,
            flags: 1,
            mtu: 1500,
            address: vec![2, 0, 0, 0, 0, 1],
            master: None,
            kind: Some("tun".into()),
            tun_type: Some(2),
        }
    }

    #[test]
    fn a_tap_link_is_parsed_from_a_dump() {
        let mut data = message(RTM_NEWLINK, NLM_F_MULTI, 1, &tap_link());
        data.extend(done(0, 1, 0));
        let mut dump = Dump::default();
        assert_eq!(parse_messages(&data, 1, &mut dump).unwrap(), Step::Done);
        assert_eq!(
            dump,
            Dump {
                links: vec![tap()],
                interrupted: false
            }
        );
    }

    #[test]
    fn a_netlink_error_is_returned_as_errno() {
        let data = message(NLMSG_ERROR, 0, 1, &(-(Errno::EPERM as i32)).to_ne_bytes());
        let err = parse_messages(&data, 1, &mut Dump::default()).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(Errno::EPERM as i32));
    }

    #[test]
    fn a_dump_that_ends_with_an_errno_fails_with_it() {
        let mut data = message(RTM_NEWLINK, NLM_F_MULTI, 1, &tap_link());
        data.extend(done(0, 1, -(Errno::ENOBUFS as i32)));
        let err = parse_messages(&data, 1, &mut Dump::default()).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(Errno::ENOBUFS as i32));
        // A done without its errno (no payload) ends the dump cleanly; one cut short fails.
        let empty = message(NLMSG_DONE, NLM_F_MULTI, 1, &[]);
        assert_eq!(
            parse_messages(&empty, 1, &mut Dump::default()).unwrap(),
            Step::Done
        );
        let short = message(NLMSG_DONE, NLM_F_MULTI, 1, &[0, 0]);
        assert!(parse_messages(&short, 1, &mut Dump::default()).is_err());
    }

    #[test]
    fn an_interrupted_dump_is_marked_whichever_message_says_so() {
        // On a link of the dump.
        let mut data = message(RTM_NEWLINK, NLM_F_MULTI | NLM_F_DUMP_INTR, 1, &tap_link());
        data.extend(done(0, 1, 0));
        let mut dump = Dump::default();
        assert_eq!(parse_messages(&data, 1, &mut dump).unwrap(), Step::Done);
        assert!(dump.interrupted);
        assert_eq!(dump.links, [tap()], "what was read is still parsed");
        // On the done alone, in a datagram of its own after the links.
        let mut dump = Dump::default();
        let links = message(RTM_NEWLINK, NLM_F_MULTI, 1, &tap_link());
        assert_eq!(parse_messages(&links, 1, &mut dump).unwrap(), Step::More);
        assert!(!dump.interrupted);
        let end = done(NLM_F_DUMP_INTR, 1, 0);
        assert_eq!(parse_messages(&end, 1, &mut dump).unwrap(), Step::Done);
        assert!(dump.interrupted);
        // A message of another dump (another sequence number) says nothing of this one.
        let mut dump = Dump::default();
        let mut data = message(RTM_NEWLINK, NLM_F_MULTI | NLM_F_DUMP_INTR, 9, &tap_link());
        data.extend(done(0, 1, 0));
        assert_eq!(parse_messages(&data, 1, &mut dump).unwrap(), Step::Done);
        assert_eq!(dump, Dump::default());
    }

    #[test]
    fn an_interrupted_dump_is_read_again_a_bounded_number_of_times() {
        let interrupted = || Dump {
            links: vec![tap()],
            interrupted: true,
        };
        // Interrupted twice, then whole: the third dump's links, each under its own sequence.
        let mut seqs = Vec::new();
        let links = consistent(5, |seq| {
            seqs.push(seq);
            Ok(if seq < 3 {
                interrupted()
            } else {
                Dump {
                    links: vec![Link::default()],
                    interrupted: false,
                }
            })
        })
        .unwrap();
        assert_eq!(links, [Link::default()]);
        assert_eq!(seqs, [1, 2, 3]);
        // Interrupted every time: an error after the last attempt, not a loop.
        let mut tries = 0;
        let err = consistent(5, |_| {
            tries += 1;
            Ok(interrupted())
        })
        .unwrap_err();
        assert_eq!(tries, 5);
        assert!(err.to_string().contains("NLM_F_DUMP_INTR"), "{err}");
        // A dump that fails is not tried again.
        let mut tries = 0;
        let err = consistent(5, |_| {
            tries += 1;
            Err(io::Error::from_raw_os_error(Errno::EPERM as i32))
        })
        .unwrap_err();
        assert_eq!((tries, err.raw_os_error()), (1, Some(Errno::EPERM as i32)));
    }

    #[test]
    fn a_dump_is_read_across_datagrams_and_a_silent_peer_times_out() {
        use std::os::unix::net::UnixDatagram;
        let (kernel, host) = UnixDatagram::pair().unwrap();
        kernel
            .send(&message(RTM_NEWLINK, NLM_F_MULTI, 4, &tap_link()))
            .unwrap();
        kernel.send(&done(0, 4, 0)).unwrap();
        let until = Instant::now() + Duration::from_secs(5);
        assert_eq!(read_dump(&host, 4, until).unwrap().links, [tap()]);
        // Half a dump and then nothing: the deadline ends the wait.
        kernel
            .send(&message(RTM_NEWLINK, NLM_F_MULTI, 5, &tap_link()))
            .unwrap();
        let started = Instant::now();
        let err = read_dump(&host, 5, started + Duration::from_millis(100)).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{err}");
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(100) && waited < Duration::from_secs(2),
            "{waited:?}"
        );
    }

    #[test]
    fn a_truncated_message_is_rejected() {
        let mut data = message(RTM_NEWLINK, NLM_F_MULTI, 1, &tap_link());
        data.truncate(20);
        data[0] = 200;
        assert!(parse_messages(&data, 1, &mut Dump::default()).is_err());
    }

    #[test]
    fn the_links_of_this_namespace_are_dumped() {
        // Every namespace has its loopback; the dump reads it from the kernel itself.
        let links = dump_links().unwrap();
        assert!(links.iter().any(|l| l.name == "lo"), "{links:?}");
    }
}

#[cfg(test)]
#[path = "netlink_fuzz.rs"]
mod fuzz;
