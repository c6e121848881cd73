//! The broker's name resolved by the host itself, since the static binary cannot use the C
//! library's name service: `/etc/hosts` first (every address of the name, in its order), then
//! the nameservers of `/etc/resolv.conf` asked for A and AAAA records over UDP, again over TCP
//! when the answer was truncated, each query within the file's `timeout` (5 s unless it says, at
//! most 30) and `attempts` (2 unless it says, at most 5). Search domains are not applied: a
//! token names the broker fully. Both files' paths are the resolver's own, so tests (and
//! `--root`) point it at theirs.
//!
//! A spoofed answer gains nothing: every address is dialled with the broker's certificate
//! pinned, so a wrong one fails that address before anything is sent.

use crate::dns::{self, Answer, Kind};
use crate::error::{Error, Result};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Where names are looked up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolver {
    /// The hosts file (`/etc/hosts`).
    pub hosts: PathBuf,
    /// The nameservers' file (`/etc/resolv.conf`).
    pub resolv_conf: PathBuf,
    /// The nameservers' port (53; the tests' nameservers listen on ports of their own).
    pub port: u16,
}

impl Default for Resolver {
    fn default() -> Resolver {
        Resolver::under(Path::new("/"))
    }
}

/// What `/etc/resolv.conf` says, as far as the resolver reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conf {
    pub nameservers: Vec<IpAddr>,
    pub timeout: Duration,
    pub attempts: u32,
}

impl Resolver {
    /// The files under `root` (`/` on a real machine).
    pub fn under(root: &Path) -> Resolver {
        Resolver {
            hosts: root.join("etc/hosts"),
            resolv_conf: root.join("etc/resolv.conf"),
            port: 53,
        }
    }

    /// The addresses of `host`: itself when it is an address, otherwise from the hosts file or,
    /// when that does not name it, from the nameservers. An error names the host and why.
    pub async fn lookup(&self, host: &str) -> Result<Vec<IpAddr>> {
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Ok(vec![ip]);
        }
        let fail = |what: String| Error::Resolve {
            name: host.to_string(),
            what,
        };
        dns::check_name(host).map_err(|e| fail(e.to_string()))?;
        let hosts = read_optional(&self.hosts).map_err(|e| fail(e.to_string()))?;
        let found = from_hosts(&hosts, host);
        if !found.is_empty() {
            tracing::debug!(host, addrs = %join(&found), file = %self.hosts.display(), "resolved");
            return Ok(found);
        }
        let conf = parse_conf(&read_optional(&self.resolv_conf).map_err(|e| fail(e.to_string()))?);
        let mut problems = Vec::new();
        for ns in &conf.nameservers {
            let server = SocketAddr::new(*ns, self.port);
            for _ in 0..conf.attempts {
                let (a, aaaa) = tokio::join!(
                    ask(server, host, Kind::A, conf.timeout),
                    ask(server, host, Kind::Aaaa, conf.timeout)
                );
                match (a, aaaa) {
                    (Ok(Answer::NoSuchName), _) | (_, Ok(Answer::NoSuchName)) => {
                        return Err(fail(format!(
                            "the name does not exist (nameserver {ns} answered NXDOMAIN; not in {})",
                            self.hosts.display()
                        )))
                    }
                    (Ok(Answer::Addrs(mut v4)), Ok(Answer::Addrs(v6))) => {
                        v4.extend(v6);
                        if v4.is_empty() {
                            return Err(fail(format!(
                                "the name has no A or AAAA record (nameserver {ns}; not in {})",
                                self.hosts.display()
                            )));
                        }
                        tracing::debug!(host, addrs = %join(&v4), nameserver = %ns, "resolved");
                        return Ok(v4);
                    }
                    // A nameserver that answers one kind and drops the other (some drop AAAA
                    // queries) still gives the addresses it answered.
                    (Ok(Answer::Addrs(v)), Err(e)) | (Err(e), Ok(Answer::Addrs(v)))
                        if !v.is_empty() =>
                    {
                        tracing::debug!(host, addrs = %join(&v), nameserver = %ns, error = %e, "resolved one kind");
                        return Ok(v);
                    }
                    (Err(e), _) | (_, Err(e)) => problems.push(format!("nameserver {ns}: {e}")),
                    _ => problems.push(format!("nameserver {ns}: truncated over TCP too")),
                }
            }
        }
        problems.dedup();
        Err(fail(format!(
            "not in {} and no nameserver of {} answered ({})",
            self.hosts.display(),
            self.resolv_conf.display(),
            problems.join("; ")
        )))
    }
}

/// Why one query of a name got no answer, or a file the lookup reads could not be read.
#[derive(Debug, thiserror::Error)]
enum AskError {
    #[error("reading {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the random source: {0}")]
    Random(getrandom::Error),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Dns(#[from] dns::DnsError),
    /// The query of `kind` records over `via` (UDP or TCP) failed.
    #[error("{kind} over {via}: {source}")]
    Over {
        kind: &'static str,
        via: &'static str,
        source: Box<AskError>,
    },
    #[error("{kind} over {via}: no answer within {timeout:?}")]
    Timeout {
        kind: &'static str,
        via: &'static str,
        timeout: Duration,
    },
}

/// A file's text, or nothing when it does not exist.
fn read_optional(path: &Path) -> std::result::Result<String, AskError> {
    match std::fs::read_to_string(path) {
        Ok(t) => Ok(t),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(source) => Err(AskError::Read {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Every address the hosts file gives `name` (case-insensitively), in the file's order.
pub fn from_hosts(text: &str, name: &str) -> Vec<IpAddr> {
    let name = name.strip_suffix('.').unwrap_or(name);
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("");
        let mut words = line.split_whitespace();
        let Some(Ok(ip)) = words.next().map(parse_ip) else {
            continue;
        };
        if words.any(|w| w.strip_suffix('.').unwrap_or(w).eq_ignore_ascii_case(name))
            && !out.contains(&ip)
        {
            out.push(ip);
        }
    }
    out
}

/// An address as the files write it (an IPv6 one may carry a `%zone`, which is dropped: the
/// broker is not reached by a link-local address).
fn parse_ip(word: &str) -> std::result::Result<IpAddr, std::net::AddrParseError> {
    word.split('%').next().unwrap_or(word).parse()
}

/// Reads `resolv.conf`: its `nameserver` lines (the first three, as the C library takes;
/// `127.0.0.1` when there are none, as it does) and the `timeout:` and `attempts:` options.
pub fn parse_conf(text: &str) -> Conf {
    let mut conf = Conf {
        nameservers: Vec::new(),
        timeout: Duration::from_secs(5),
        attempts: 2,
    };
    for line in text.lines() {
        let mut words = line.split_whitespace();
        match words.next() {
            Some("nameserver") => {
                if let Some(Ok(ip)) = words.next().map(parse_ip) {
                    if conf.nameservers.len() < 3 {
                        conf.nameservers.push(ip);
                    }
                }
            }
            Some("options") => {
                for o in words {
                    if let Some(n) = o.strip_prefix("timeout:").and_then(|n| n.parse().ok()) {
                        conf.timeout = Duration::from_secs(u64::clamp(n, 1, 30));
                    }
                    if let Some(n) = o.strip_prefix("attempts:").and_then(|n| n.parse().ok()) {
                        conf.attempts = u32::clamp(n, 1, 5);
                    }
                }
            }
            _ => {}
        }
    }
    if conf.nameservers.is_empty() {
        conf.nameservers.push(IpAddr::V4(Ipv4Addr::LOCALHOST));
    }
    conf
}

/// Asks `server` for `kind` records of `name` within `timeout`: over UDP, then over TCP when
/// the UDP answer was truncated.
async fn ask(
    server: SocketAddr,
    name: &str,
    kind: Kind,
    timeout: Duration,
) -> std::result::Result<Answer, AskError> {
    let kind_ = kind.label();
    let over = |via: &'static str| {
        move |e: AskError| AskError::Over {
            kind: kind_,
            via,
            source: Box::new(e),
        }
    };
    let late = |via: &'static str| AskError::Timeout {
        kind: kind_,
        via,
        timeout,
    };
    let id = getrandom::u32().map_err(AskError::Random)? as u16;
    let query = dns::query(id, name, kind);
    let udp = tokio::time::timeout(timeout, ask_udp(server, &query, id, name, kind)).await;
    match udp {
        Ok(Ok(Answer::Truncated)) => {}
        Ok(r) => return r.map_err(over("UDP")),
        Err(_) => return Err(late("UDP")),
    }
    match tokio::time::timeout(timeout, ask_tcp(server, &query, id, name, kind)).await {
        Ok(r) => r.map_err(over("TCP")),
        Err(_) => Err(late("TCP")),
    }
}

async fn ask_udp(
    server: SocketAddr,
    query: &[u8],
    id: u16,
    name: &str,
    kind: Kind,
) -> std::result::Result<Answer, AskError> {
    let local: SocketAddr = if server.is_ipv4() {
        "0.0.0.0:0".parse().expect("an address")
    } else {
        "[::]:0".parse().expect("an address")
    };
    let sock = tokio::net::UdpSocket::bind(local).await?;
    // Connected: datagrams from any other address are not received.
    sock.connect(server).await?;
    sock.send(query).await?;
    let mut buf = vec![0u8; 4096];
    loop {
        let n = sock.recv(&mut buf).await?;
        match dns::answer(&buf[..n], id, name, kind) {
            // Someone else's datagram (or a blind guess at the id): wait on for ours.
            Err(dns::DnsError::NotOurs) => continue,
            r => return r.map_err(AskError::Dns),
        }
    }
}

async fn ask_tcp(
    server: SocketAddr,
    query: &[u8],
    id: u16,
    name: &str,
    kind: Kind,
) -> std::result::Result<Answer, AskError> {
    let mut s = tokio::net::TcpStream::connect(server).await?;
    let mut framed = (query.len() as u16).to_be_bytes().to_vec();
    framed.extend_from_slice(query);
    s.write_all(&framed).await?;
    let mut len = [0u8; 2];
    s.read_exact(&mut len).await?;
    let mut buf = vec![0u8; usize::from(u16::from_be_bytes(len))];
    s.read_exact(&mut buf).await?;
    dns::answer(&buf, id, name, kind).map_err(AskError::Dns)
}

/// Addresses as a log line shows them: `192.0.2.1, 2001:db8::1`.
fn join(addrs: &[std::net::IpAddr]) -> String {
    addrs
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests;
