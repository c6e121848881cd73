//! Sockets made inside a scratch network namespace: a thread moves into it (`setns`, which
//! moves that thread alone), makes the socket and hands it back; the socket stays in that
//! namespace wherever it is used from. A listener on a port, and a TCP connect from a given
//! source address with a deadline: the kernel's own verdict on one SYN.

use super::Kernel;
use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// Where `ip netns add` keeps its namespaces (iproute2's `NETNS_RUN_DIR`).
pub const NETNS_DIR: &str = "/var/run/netns";

/// Runs `f` on a thread of its own inside the named namespace.
pub fn in_netns<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    let path = format!("{NETNS_DIR}/{ns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path)?;
        // SAFETY: setns on a namespace file we hold open; CLONE_NEWNET moves this thread only,
        // and the thread ends with `f`.
        if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(io::Error::last_os_error());
        }
        f()
    })
    .join()
    .map_err(|_| io::Error::other("the namespace's thread panicked"))?
}

/// A listener on `port` of every address, both families, in namespace `ns`. No one accepts:
/// the kernel completes the handshake into the backlog, which is all a probe asks.
pub fn listen(ns: &str, port: u16) -> io::Result<TcpListener> {
    in_netns(ns, move || TcpListener::bind(("::", port)))
}

/// A new TCP connection from `src` to `dst` in namespace `ns`, waiting at most `wait`.
pub fn connect(ns: &str, src: IpAddr, dst: SocketAddr, wait: Duration) -> io::Result<Kernel> {
    in_netns(ns, move || connect_here(src, dst, wait))
}

fn connect_here(src: IpAddr, dst: SocketAddr, wait: Duration) -> io::Result<Kernel> {
    let domain = match dst {
        SocketAddr::V4(_) => libc::AF_INET,
        SocketAddr::V6(_) => libc::AF_INET6,
    };
    // SAFETY: a plain socket(2); the descriptor is owned at once.
    let fd = unsafe {
        libc::socket(
            domain,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let (sa, len) = sockaddr(SocketAddr::new(src, 0));
    // SAFETY: `sa` is a sockaddr_storage holding an address of `len` bytes.
    if unsafe {
        libc::bind(
            fd.as_raw_fd(),
            &sa as *const _ as *const libc::sockaddr,
            len,
        )
    } != 0
    {
        return Err(io::Error::last_os_error());
    }
    let (sa, len) = sockaddr(dst);
    // SAFETY: likewise for the destination.
    let rc = unsafe {
        libc::connect(
            fd.as_raw_fd(),
            &sa as *const _ as *const libc::sockaddr,
            len,
        )
    };
    if rc != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINPROGRESS) {
            return Ok(of_errno(e));
        }
    }
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLOUT,
        revents: 0,
    };
    let ms = wait.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: one pollfd, valid for the call.
    let n = unsafe { libc::poll(&mut pfd, 1, ms) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n == 0 {
        return Ok(Kernel::TimedOut);
    }
    let mut err: libc::c_int = 0;
    let mut elen = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: SO_ERROR writes one c_int into `err`.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            &mut err as *mut _ as *mut libc::c_void,
            &mut elen,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(if err == 0 {
        Kernel::Connected
    } else {
        of_errno(io::Error::from_raw_os_error(err))
    })
}

/// What a failed connect says: a reset or an ICMP error is refused; a drop is answered by
/// nothing, which the poll above times out.
fn of_errno(e: io::Error) -> Kernel {
    match e.raw_os_error() {
        Some(libc::ETIMEDOUT) => Kernel::TimedOut,
        Some(libc::ECONNREFUSED) => Kernel::Refused("answered with a reset".into()),
        Some(libc::EHOSTUNREACH) => Kernel::Refused("answered host unreachable".into()),
        Some(libc::ENETUNREACH) => Kernel::Refused("answered network unreachable".into()),
        _ => Kernel::Refused(format!("the connect failed: {e}")),
    }
}

fn sockaddr(a: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: an all-zero sockaddr_storage is valid; the family's struct is written over it.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match a {
        SocketAddr::V4(v) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*v.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_in fits in sockaddr_storage.
            unsafe { std::ptr::write(&mut ss as *mut _ as *mut libc::sockaddr_in, sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(v) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v.port().to_be(),
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr {
                    s6_addr: v.ip().octets(),
                },
                sin6_scope_id: 0,
            };
            // SAFETY: sockaddr_in6 fits in sockaddr_storage.
            unsafe { std::ptr::write(&mut ss as *mut _ as *mut libc::sockaddr_in6, sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}
