//! Sockets made inside a scratch network namespace: a thread moves into it (`setns`, which
//! moves that thread alone), makes the socket and hands it back; the socket stays in that
//! namespace wherever it is used from. A listener on a port, and a TCP connect from a given
//! source address with a deadline: the kernel's own verdict on one SYN.

use super::Kernel;
use nix::errno::Errno;
use nix::sys::socket::{self as so, SockaddrStorage};
use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::os::fd::{AsFd, AsRawFd};
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
        // CLONE_NEWNET moves this thread only, and the thread ends with `f`.
        nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET)?;
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
        SocketAddr::V4(_) => so::AddressFamily::Inet,
        SocketAddr::V6(_) => so::AddressFamily::Inet6,
    };
    let fd = so::socket(
        domain,
        so::SockType::Stream,
        so::SockFlag::SOCK_NONBLOCK | so::SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    so::bind(
        fd.as_raw_fd(),
        &SockaddrStorage::from(SocketAddr::new(src, 0)),
    )?;
    match so::connect(fd.as_raw_fd(), &SockaddrStorage::from(dst)) {
        Ok(()) | Err(Errno::EINPROGRESS) => {}
        Err(e) => return Ok(of_errno(io::Error::from(e))),
    }
    let mut pfd = [nix::poll::PollFd::new(
        fd.as_fd(),
        nix::poll::PollFlags::POLLOUT,
    )];
    let timeout = nix::poll::PollTimeout::try_from(wait).unwrap_or(nix::poll::PollTimeout::MAX);
    if nix::poll::poll(&mut pfd, timeout)? == 0 {
        return Ok(Kernel::TimedOut);
    }
    let err = so::getsockopt(&fd, so::sockopt::SocketError)?;
    Ok(if err == 0 {
        Kernel::Connected
    } else {
        of_errno(io::Error::from_raw_os_error(err))
    })
}

/// What a failed connect says: a reset or an ICMP error is refused; a drop is answered by
/// nothing, which the poll above times out.
fn of_errno(e: io::Error) -> Kernel {
    match e.raw_os_error().map(Errno::from_raw) {
        Some(Errno::ETIMEDOUT) => Kernel::TimedOut,
        Some(Errno::ECONNREFUSED) => Kernel::Refused("answered with a reset".into()),
        Some(Errno::EHOSTUNREACH) => Kernel::Refused("answered host unreachable".into()),
        Some(Errno::ENETUNREACH) => Kernel::Refused("answered network unreachable".into()),
        _ => Kernel::Refused(format!("the connect failed: {e}")),
    }
}
