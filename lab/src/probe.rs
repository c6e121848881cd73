//! Probes: real TCP and UDP exchanges made from inside a machine's namespace, and a UDP echo that
//! records who reached it.

use std::fmt;
use std::io;
use std::mem;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::exec::lock;

/// What a probe found.
///
/// For TCP, `Reached` means the three-way handshake completed: something accepts on that port.
/// For UDP, `Reached` means a reply carrying the probe's own random payload came back from the
/// target within the timeout, so it needs a listener that echoes (the lab's [`UdpEcho`], or
/// `busybox nc -u -l -p PORT -e cat` for a single exchange); a datagram that was delivered but not
/// answered is `TimedOut`, exactly like one a firewall dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Probe {
    /// The port answered (TCP handshake done, or the UDP echo came back).
    Reached,
    /// The target said nothing listens there: a TCP reset, or ICMP port unreachable (also what a
    /// firewall `reject` sends by default).
    Refused,
    /// An ICMP host/network unreachable or administratively prohibited came back, or a local rule
    /// refused to send (`EPERM`/`EACCES` from a firewall in the prober's own namespace).
    Unreachable,
    /// Nothing came back within the timeout: a firewall dropped the packets, or nothing echoed.
    TimedOut,
}

impl Probe {
    /// Shorthand for `== Probe::Reached`.
    pub fn is_reached(self) -> bool {
        self == Probe::Reached
    }
}

impl fmt::Display for Probe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Probe::Reached => "reached",
            Probe::Refused => "refused",
            Probe::Unreachable => "unreachable",
            Probe::TimedOut => "timed out",
        })
    }
}

/// Classifies a connect or receive error as a probe outcome; `None` for errors that are faults of
/// the probe itself (a source address not on this machine, no such family), which are reported.
fn outcome_of(err: &io::Error) -> Option<Probe> {
    match err.raw_os_error()? {
        libc::ECONNREFUSED => Some(Probe::Refused),
        libc::EHOSTUNREACH | libc::ENETUNREACH | libc::EHOSTDOWN | libc::ENETDOWN => {
            Some(Probe::Unreachable)
        }
        libc::EACCES | libc::EPERM => Some(Probe::Unreachable),
        libc::ETIMEDOUT | libc::EAGAIN => Some(Probe::TimedOut),
        _ => None,
    }
}

/// Connects to `dst` over TCP, optionally from a chosen source address, in the calling thread's
/// namespace. Built on raw sockets because std cannot bind before connecting.
pub(crate) fn tcp(source: Option<IpAddr>, dst: SocketAddr, timeout: Duration) -> io::Result<Probe> {
    let family = if dst.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    // SAFETY: plain socket(2); the result is checked before it is owned.
    let raw = unsafe {
        libc::socket(
            family,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: raw is a fresh descriptor nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    if let Some(src) = source {
        let (addr, len) = sockaddr(SocketAddr::new(src, 0));
        // SAFETY: addr is a properly initialised sockaddr of length len.
        let rc = unsafe { libc::bind(fd.as_raw_fd(), &addr as *const _ as *const _, len) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    let (addr, len) = sockaddr(dst);
    // SAFETY: as above.
    let rc = unsafe { libc::connect(fd.as_raw_fd(), &addr as *const _ as *const _, len) };
    if rc == 0 {
        return Ok(Probe::Reached);
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() != Some(libc::EINPROGRESS) {
        return outcome_of(&err).ok_or(err);
    }
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLOUT,
        revents: 0,
    };
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let ms = left.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: pfd is one valid pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        if n == 0 {
            return Ok(Probe::TimedOut);
        }
        break;
    }
    let mut so_error: libc::c_int = 0;
    let mut len = mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: so_error and len are valid out-parameters of the sizes given.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            &mut so_error as *mut _ as *mut _,
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    if so_error == 0 {
        return Ok(Probe::Reached);
    }
    let err = io::Error::from_raw_os_error(so_error);
    outcome_of(&err).ok_or(err)
}

fn sockaddr(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: an all-zero sockaddr_storage is a valid value.
    let mut storage: libc::sockaddr_storage = unsafe { mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { std::ptr::write(&mut storage as *mut _ as *mut libc::sockaddr_in, sin) };
            mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { std::ptr::write(&mut storage as *mut _ as *mut libc::sockaddr_in6, sin6) };
            mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as libc::socklen_t)
}

fn unspecified_like(dst: &SocketAddr) -> IpAddr {
    if dst.is_ipv4() {
        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
    } else {
        IpAddr::V6(Ipv6Addr::UNSPECIFIED)
    }
}

/// Sends one datagram with a random payload and waits for the same payload to come back.
pub(crate) fn udp(source: Option<IpAddr>, dst: SocketAddr, timeout: Duration) -> io::Result<Probe> {
    let socket = UdpSocket::bind(SocketAddr::new(
        source.unwrap_or_else(|| unspecified_like(&dst)),
        0,
    ))?;
    // Connecting makes the kernel report ICMP errors for this peer on the socket.
    socket.connect(dst)?;
    let payload = nonce();
    if let Err(err) = socket.send(&payload) {
        return outcome_of(&err).ok_or(err);
    }
    let deadline = Instant::now() + timeout;
    let mut buf = [0u8; 512];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(Probe::TimedOut);
        }
        socket.set_read_timeout(Some(left))?;
        match socket.recv(&mut buf) {
            Ok(n) if buf[..n] == payload[..] => return Ok(Probe::Reached),
            // Something else answered (a stale echo of an earlier probe): keep waiting for ours.
            Ok(_) => continue,
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => return Ok(Probe::TimedOut),
            Err(err) => return outcome_of(&err).ok_or(err),
        }
    }
}

/// Sends one datagram from `source` without waiting for anything (for spoofed-source checks, where
/// no reply can come back to the sender).
pub(crate) fn udp_send(source: IpAddr, dst: SocketAddr, payload: &[u8]) -> io::Result<()> {
    let socket = UdpSocket::bind(SocketAddr::new(source, 0))?;
    socket.send_to(payload, dst)?;
    Ok(())
}

fn nonce() -> [u8; 16] {
    let mut buf = [0u8; 16];
    // SAFETY: getrandom writes at most buf.len() bytes into buf.
    let n = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n != buf.len() as isize {
        // Uniqueness, not secrecy, is what matters: fall back to the clock and pid.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        buf[..16].copy_from_slice(&(t ^ u128::from(std::process::id())).to_ne_bytes());
    }
    buf
}

/// A UDP listener on `[::]:port` (both families) inside a machine that echoes every datagram back
/// and records the source of each, so a test can tell that a datagram arrived even when no reply
/// can return (a spoofed source). Runs on a thread of the test process; stops on drop.
#[derive(Debug)]
pub struct UdpEcho {
    port: u16,
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Vec<SocketAddr>>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl UdpEcho {
    pub(crate) fn start(socket: UdpSocket) -> io::Result<UdpEcho> {
        let port = socket.local_addr()?.port();
        // A short read timeout lets the loop notice the stop flag promptly.
        socket.set_read_timeout(Some(Duration::from_millis(50)))?;
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let thread = {
            let (stop, seen) = (stop.clone(), seen.clone());
            thread::Builder::new()
                .name(format!("lab-udp-echo-{port}"))
                .spawn(move || {
                    let mut buf = [0u8; 2048];
                    while !stop.load(Ordering::Relaxed) {
                        if let Ok((n, from)) = socket.recv_from(&mut buf) {
                            lock(&seen)
                                .push(SocketAddr::new(from.ip().to_canonical(), from.port()));
                            let _ = socket.send_to(&buf[..n], from);
                        }
                    }
                })?
        };
        Ok(UdpEcho {
            port,
            stop,
            seen,
            thread: Some(thread),
        })
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The source of every datagram received so far, in order (IPv4 sources as plain IPv4).
    pub fn received_from(&self) -> Vec<SocketAddr> {
        lock(&self.seen).clone()
    }
}

impl Drop for UdpEcho {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
