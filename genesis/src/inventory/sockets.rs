//! Listening sockets from the kernel's socket tables (`tcp`, `tcp6`, `udp`, `udp6` under
//! `/proc/thread-self/net`), with the processes holding them.

use std::collections::BTreeSet;
use std::fmt;

pub use crate::ports::Proto;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;

use super::net_table;
use super::owners::{owners_of, Owner};
use crate::error::{Error, Result};

/// A socket waiting for others: a TCP socket in LISTEN, or a UDP socket bound to a port and not
/// connected to a peer.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Listener {
    pub protocol: Proto,
    /// The local address; `0.0.0.0` or `::` for every address. The family is that of the socket:
    /// an IPv6 socket on `::` also takes IPv4 unless it is IPv6-only.
    pub address: IpAddr,
    pub port: u16,
    /// The socket's inode, as in `/proc/PID/fd/N -> socket:[INODE]`.
    pub inode: u64,
    /// The processes holding it (several after a fork; none when they cannot be inspected).
    pub owners: Vec<Owner>,
}

impl Listener {
    /// Whether the socket is an IPv6 one (it came from the `tcp6`/`udp6` table).
    pub fn is_ipv6(&self) -> bool {
        self.address.is_ipv6()
    }
}

impl fmt::Display for Listener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let addr = match self.address {
            IpAddr::V4(a) => a.to_string(),
            IpAddr::V6(a) => format!("[{a}]"),
        };
        write!(f, "{} {addr}:{}", self.protocol, self.port)?;
        for owner in &self.owners {
            write!(f, " {}({})", owner.name, owner.pid)?;
        }
        Ok(())
    }
}

/// TCP_LISTEN and TCP_CLOSE in the kernel's `st` column (an unconnected UDP socket is "closed").
const TCP_LISTEN: u8 = 0x0A;
const UDP_UNCONNECTED: u8 = 0x07;

/// Every listener of the calling thread's network namespace, with its owners, sorted.
pub fn listeners() -> Result<Vec<Listener>> {
    let mut all = Vec::new();
    for (table, protocol) in [
        ("tcp", Proto::Tcp),
        ("tcp6", Proto::Tcp),
        ("udp", Proto::Udp),
        ("udp6", Proto::Udp),
    ] {
        let path = net_table(table);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            // The IPv6 tables are absent when the kernel runs without IPv6.
            Err(e) if e.kind() == io::ErrorKind::NotFound && table.ends_with('6') => continue,
            Err(source) => return Err(Error::Read { path, source }),
        };
        all.extend(parse_table(&text, protocol, &path)?);
    }
    let inodes: BTreeSet<u64> = all.iter().map(|l| l.inode).collect();
    let owners = owners_of(&inodes);
    for listener in &mut all {
        listener.owners = owners.get(&listener.inode).cloned().unwrap_or_default();
    }
    all.sort();
    all.dedup();
    Ok(all)
}

/// Parses one socket table, keeping only listeners (owners left empty).
pub(crate) fn parse_table(text: &str, protocol: Proto, path: &Path) -> Result<Vec<Listener>> {
    let mut found = Vec::new();
    for (index, line) in text.lines().enumerate().skip(1) {
        if line.trim().is_empty() {
            continue;
        }
        let malformed = |reason: &str| Error::Malformed {
            path: path.to_owned(),
            line: index + 1,
            reason: reason.to_owned(),
        };
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 10 {
            return Err(malformed("fewer than 10 columns"));
        }
        let state = u8::from_str_radix(fields[3], 16).map_err(|_| malformed("bad state"))?;
        let wanted = match protocol {
            Proto::Tcp => TCP_LISTEN,
            Proto::Udp => UDP_UNCONNECTED,
        };
        if state != wanted {
            continue;
        }
        let (address, port) =
            parse_endpoint(fields[1]).ok_or_else(|| malformed("bad local address"))?;
        // An unconnected UDP socket without a port is not bound to anything yet.
        if port == 0 {
            continue;
        }
        let inode = fields[9].parse().map_err(|_| malformed("bad inode"))?;
        found.push(Listener {
            protocol,
            address,
            port,
            inode,
            owners: Vec::new(),
        });
    }
    Ok(found)
}

/// TCP_ESTABLISHED in the `st` column.
const TCP_ESTABLISHED: u8 = 0x01;

/// The remote addresses of the established TCP connections to any of `ports` on this machine
/// (the calling thread's namespace), loopback left out and IPv4-mapped IPv6 addresses read as
/// IPv4, sorted and each once: where the ssh sessions open now came from, when `ports` are ssh's.
pub fn peers_of(ports: &[u16]) -> Result<Vec<IpAddr>> {
    let mut all = Vec::new();
    for table in ["tcp", "tcp6"] {
        let path = net_table(table);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound && table.ends_with('6') => continue,
            Err(source) => return Err(Error::Read { path, source }),
        };
        all.extend(parse_peers(&text, ports, &path)?);
    }
    all.sort();
    all.dedup();
    Ok(all)
}

/// The remote addresses of one TCP table's established connections to any of `ports`.
pub(crate) fn parse_peers(text: &str, ports: &[u16], path: &Path) -> Result<Vec<IpAddr>> {
    let mut found = Vec::new();
    for (index, line) in text.lines().enumerate().skip(1) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.is_empty() {
            continue;
        }
        let malformed = |reason: &str| Error::Malformed {
            path: path.to_owned(),
            line: index + 1,
            reason: reason.to_owned(),
        };
        if fields.len() < 4 {
            return Err(malformed("fewer than 4 columns"));
        }
        let state = u8::from_str_radix(fields[3], 16).map_err(|_| malformed("bad state"))?;
        if state != TCP_ESTABLISHED {
            continue;
        }
        let (_, local) = parse_endpoint(fields[1]).ok_or_else(|| malformed("bad local address"))?;
        if !ports.contains(&local) {
            continue;
        }
        let (remote, _) =
            parse_endpoint(fields[2]).ok_or_else(|| malformed("bad remote address"))?;
        let remote = match remote {
            IpAddr::V6(a) => a.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(IpAddr::V6(a)),
            v4 => v4,
        };
        if !remote.is_loopback() {
            found.push(remote);
        }
    }
    Ok(found)
}

/// `0100007F:1F90` or a 32-digit IPv6 form, port in hex. The kernel prints each 32-bit word of the
/// address as a number in host byte order, so each word is turned back into bytes that way.
fn parse_endpoint(field: &str) -> Option<(IpAddr, u16)> {
    let (addr, port) = field.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |i: usize| -> Option<[u8; 4]> {
        let hex = addr.get(i * 8..i * 8 + 8)?;
        Some(u32::from_str_radix(hex, 16).ok()?.to_ne_bytes())
    };
    let address = match addr.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(0)?)),
        32 => {
            let mut bytes = [0u8; 16];
            for i in 0..4 {
                bytes[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
            }
            IpAddr::V6(Ipv6Addr::from(bytes))
        }
        _ => return None,
    };
    Some((address, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0000000000000000 100 0 0 10 0
   1: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4243 1 0000000000000000 100 0 0 10 0
   2: 0100007F:1F90 0100007F:D2A4 01 00000000:00000000 00:00000000 00000000     0        0 4244 1 0000000000000000 20 4 30 10 -1
";

    const TCP6: &str = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:1F91 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 5001 1 0000000000000000 100 0 0 10 0
   1: B80D0120000000000000000010000000:0050 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 5002 1 0000000000000000 100 0 0 10 0
";

    const UDP: &str = "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
  100: 00000000:14E9 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 6001 2 0000000000000000 0
  101: 0100007F:0035 0100007F:A000 01 00000000:00000000 00:00000000 00000000     0        0 6002 2 0000000000000000 0
  102: 00000000:0000 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 6003 2 0000000000000000 0
";

    fn check(text: &str, protocol: Proto, expected: &[(&str, u16, u64)]) {
        let got = parse_table(text, protocol, Path::new("/proc/test")).unwrap();
        let got: Vec<(IpAddr, u16, u64)> = got
            .into_iter()
            .map(|l| (l.address, l.port, l.inode))
            .collect();
        let expected: Vec<(IpAddr, u16, u64)> = expected
            .iter()
            .map(|(a, p, i)| (a.parse().unwrap(), *p, *i))
            .collect();
        assert_eq!(got, expected);
    }

    #[test]
    fn peers_are_the_remote_ends_of_established_connections_to_the_ports_given() {
        // 192.0.2.30:40000 -> 192.0.2.10:22 established, a loopback one to 22, one to 80, and a
        // listener on 22.
        let tcp = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0
   1: 0A0200C0:0016 1E0200C0:9C40 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0 20 4 30 10 -1
   2: 0100007F:0016 0100007F:9C41 01 00000000:00000000 00:00000000 00000000     0        0 3 1 0 20 4 30 10 -1
   3: 0A0200C0:0050 140200C0:9C42 01 00000000:00000000 00:00000000 00000000     0        0 4 1 0 20 4 30 10 -1
";
        let got = parse_peers(tcp, &[22], Path::new("/proc/test")).unwrap();
        assert_eq!(got, ["192.0.2.30".parse::<IpAddr>().unwrap()]);
        // An IPv4 client of an IPv6 socket (::ffff:192.0.2.31) is read as IPv4; an IPv6 one as
        // it is.
        let tcp6 = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0000000000000000FFFF00000A0200C0:0016 0000000000000000FFFF00001F0200C0:9C40 01 00000000:00000000 00:00000000 00000000     0        0 5 1 0 20 4 30 10 -1
   1: B80D0120000000000000000010000000:0016 B80D0120000000000000000030000000:9C41 01 00000000:00000000 00:00000000 00000000     0        0 6 1 0 20 4 30 10 -1
";
        let got = parse_peers(tcp6, &[22], Path::new("/proc/test")).unwrap();
        assert_eq!(
            got,
            [
                "192.0.2.31".parse::<IpAddr>().unwrap(),
                "2001:db8::30".parse().unwrap()
            ]
        );
    }

    #[test]
    fn tcp_keeps_only_listening_sockets() {
        check(
            TCP,
            Proto::Tcp,
            &[("127.0.0.1", 8080, 4242), ("0.0.0.0", 22, 4243)],
        );
    }

    #[test]
    fn tcp6_addresses_are_decoded_word_by_word() {
        check(
            TCP6,
            Proto::Tcp,
            &[("::1", 8081, 5001), ("2001:db8::10", 80, 5002)],
        );
    }

    #[test]
    fn udp_keeps_bound_unconnected_sockets_with_a_port() {
        check(UDP, Proto::Udp, &[("0.0.0.0", 5353, 6001)]);
    }

    #[test]
    fn a_malformed_line_is_reported_with_its_number() {
        let text = "header\n   0: 0100007F:1F90 00000000:0000 0A\n";
        let err = parse_table(text, Proto::Tcp, Path::new("/proc/x/tcp")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "line 2 of /proc/x/tcp is malformed: fewer than 10 columns"
        );
        let text = "header\n   0: 0100007F:GG90 00000000:0000 0A 0:0 0:0 0 0 0 1\n";
        let err = parse_table(text, Proto::Tcp, Path::new("/proc/x/tcp")).unwrap_err();
        assert!(err.to_string().contains("bad local address"), "{err}");
    }

    #[test]
    fn listeners_print_with_their_owners() {
        let l = Listener {
            protocol: Proto::Tcp,
            address: "::".parse().unwrap(),
            port: 443,
            inode: 1,
            owners: vec![Owner {
                pid: 7,
                name: "nginx".into(),
            }],
        };
        assert_eq!(l.to_string(), "tcp [::]:443 nginx(7)");
        assert!(l.is_ipv6());
    }
}
