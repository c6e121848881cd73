//! Raw-socket probes for the BPF guard's kernel tests: crafted TCP SYNs (IPv4 in two fragments,
//! IPv6 behind extension headers) sent from the calling thread's namespace, and whether the
//! target answered with a SYN-ACK.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// Sends a TCP SYN from `src` to `dst:dport` in two IPv4 fragments (8 bytes of TCP header, then
/// 12) on a raw socket of the calling thread's namespace, and says whether a SYN-ACK came back
/// within `wait`.
pub fn fragmented_syn_answered(src: Ipv4Addr, dst: Ipv4Addr, dport: u16, wait: Duration) -> bool {
    // SAFETY: plain socket calls on descriptors this function owns.
    let (tx, rx) = unsafe {
        let tx = libc::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_RAW);
        let rx = libc::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_TCP);
        assert!(
            tx >= 0 && rx >= 0,
            "raw sockets: {}",
            std::io::Error::last_os_error()
        );
        (OwnedFd::from_raw_fd(tx), OwnedFd::from_raw_fd(rx))
    };
    let sport: u16 = 40000 + (std::process::id() % 20000) as u16;
    let mut tcp = Vec::new();
    tcp.extend(sport.to_be_bytes());
    tcp.extend(dport.to_be_bytes());
    tcp.extend(0x1234_5678u32.to_be_bytes());
    tcp.extend([0, 0, 0, 0, 0x50, 0x02, 0xff, 0xff, 0, 0, 0, 0]);
    let mut pseudo = Vec::new();
    pseudo.extend(src.octets());
    pseudo.extend(dst.octets());
    pseudo.extend([0, 6, 0, 20]);
    pseudo.extend(&tcp);
    let sum = checksum(&pseudo);
    tcp[16..18].copy_from_slice(&sum.to_be_bytes());
    let frag = |offset_units: u16, more: bool, payload: &[u8]| -> Vec<u8> {
        let mut ip = vec![0x45, 0];
        ip.extend(((20 + payload.len()) as u16).to_be_bytes());
        ip.extend(0x4d48u16.to_be_bytes());
        ip.extend((offset_units | if more { 0x2000 } else { 0 }).to_be_bytes());
        ip.extend([64, 6, 0, 0]);
        ip.extend(src.octets());
        ip.extend(dst.octets());
        let s = checksum(&ip);
        ip[10..12].copy_from_slice(&s.to_be_bytes());
        ip.extend(payload);
        ip
    };
    // SAFETY: a zeroed sockaddr_in filled in below is a valid address for sendto.
    let mut to: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    to.sin_family = libc::AF_INET as u16;
    to.sin_addr.s_addr = u32::from_ne_bytes(dst.octets());
    for pkt in [frag(0, true, &tcp[..8]), frag(1, false, &tcp[8..])] {
        // SAFETY: the buffer and address outlive the call.
        let rc = unsafe {
            libc::sendto(
                tx.as_raw_fd(),
                pkt.as_ptr().cast(),
                pkt.len(),
                0,
                (&to as *const libc::sockaddr_in).cast(),
                std::mem::size_of::<libc::sockaddr_in>() as u32,
            )
        };
        assert_eq!(
            rc,
            pkt.len() as isize,
            "sendto: {}",
            std::io::Error::last_os_error()
        );
    }
    let deadline = Instant::now() + wait;
    let mut buf = [0u8; 1500];
    while Instant::now() < deadline {
        let tv = libc::timeval {
            tv_sec: 0,
            tv_usec: 100_000,
        };
        // SAFETY: setsockopt reads the timeval; recv writes at most buf.len() bytes into buf.
        let n = unsafe {
            libc::setsockopt(
                rx.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as u32,
            );
            libc::recv(rx.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0)
        };
        if n < 40 {
            continue;
        }
        let ihl = usize::from(buf[0] & 0x0f) * 4;
        let t = &buf[ihl..n as usize];
        let from_port = u16::from_be_bytes([t[0], t[1]]);
        let to_port = u16::from_be_bytes([t[2], t[3]]);
        if buf[12..16] == dst.octets()
            && from_port == dport
            && to_port == sport
            && t[13] & 0x12 == 0x12
        {
            return true;
        }
    }
    false
}

fn checksum(b: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    for c in b.chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Sends a TCP SYN from `src` to `dst:dport` on a raw IPv6 socket of the calling thread's
/// namespace, with the extension headers `ext` (their first type `first`) between the IPv6
/// header and TCP, and says whether a SYN-ACK came back within `wait`.
pub fn v6_syn_answered(
    src: Ipv6Addr,
    dst: Ipv6Addr,
    dport: u16,
    first: u8,
    ext: &[u8],
    wait: Duration,
) -> bool {
    // SAFETY: plain socket calls on descriptors this function owns.
    let (tx, rx) = unsafe {
        let tx = libc::socket(libc::AF_INET6, libc::SOCK_RAW, libc::IPPROTO_RAW);
        let rx = libc::socket(libc::AF_INET6, libc::SOCK_RAW, libc::IPPROTO_TCP);
        assert!(
            tx >= 0 && rx >= 0,
            "raw sockets: {}",
            std::io::Error::last_os_error()
        );
        (OwnedFd::from_raw_fd(tx), OwnedFd::from_raw_fd(rx))
    };
    let sport: u16 = 30000 + (std::process::id() % 10000) as u16 + u16::from(first);
    let mut tcp = Vec::new();
    tcp.extend(sport.to_be_bytes());
    tcp.extend(dport.to_be_bytes());
    tcp.extend(0x0bad_cafeu32.to_be_bytes());
    tcp.extend([0, 0, 0, 0, 0x50, 0x02, 0xff, 0xff, 0, 0, 0, 0]);
    let mut pseudo = Vec::new();
    pseudo.extend(src.octets());
    pseudo.extend(dst.octets());
    pseudo.extend((tcp.len() as u32).to_be_bytes());
    pseudo.extend([0, 0, 0, 6]);
    pseudo.extend(&tcp);
    let sum = checksum(&pseudo);
    tcp[16..18].copy_from_slice(&sum.to_be_bytes());
    let mut pkt = vec![0x60, 0, 0, 0];
    pkt.extend(((ext.len() + tcp.len()) as u16).to_be_bytes());
    pkt.extend([first, 64]);
    pkt.extend(src.octets());
    pkt.extend(dst.octets());
    pkt.extend(ext);
    pkt.extend(&tcp);
    // SAFETY: a zeroed sockaddr_in6 filled in below is a valid address for sendto.
    let mut to: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
    to.sin6_family = libc::AF_INET6 as u16;
    to.sin6_addr.s6_addr = dst.octets();
    // SAFETY: the buffer and the address outlive the call.
    let rc = unsafe {
        libc::sendto(
            tx.as_raw_fd(),
            pkt.as_ptr().cast(),
            pkt.len(),
            0,
            (&to as *const libc::sockaddr_in6).cast(),
            std::mem::size_of::<libc::sockaddr_in6>() as u32,
        )
    };
    assert_eq!(
        rc,
        pkt.len() as isize,
        "sendto: {}",
        std::io::Error::last_os_error()
    );
    let deadline = Instant::now() + wait;
    let mut buf = [0u8; 1500];
    while Instant::now() < deadline {
        let tv = libc::timeval {
            tv_sec: 0,
            tv_usec: 100_000,
        };
        // SAFETY: zeroed sockaddr_in6 for recvfrom to fill; setsockopt reads the timeval.
        let mut from: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_in6>() as u32;
        // SAFETY: recvfrom writes at most buf.len() bytes into buf and the address into from.
        let n = unsafe {
            libc::setsockopt(
                rx.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as u32,
            );
            libc::recvfrom(
                rx.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                0,
                (&mut from as *mut libc::sockaddr_in6).cast(),
                &mut len,
            )
        };
        if n < 20 {
            continue;
        }
        let t = &buf[..n as usize];
        let from_port = u16::from_be_bytes([t[0], t[1]]);
        let to_port = u16::from_be_bytes([t[2], t[3]]);
        if from.sin6_addr.s6_addr == dst.octets()
            && from_port == dport
            && to_port == sport
            && t[13] & 0x12 == 0x12
        {
            return true;
        }
    }
    false
}
