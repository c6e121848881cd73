//! Routes of both families, from `/proc/thread-self/net/route` (the IPv4 main table) and
//! `/proc/thread-self/net/ipv6_route` (every IPv6 table, of which the local and multicast entries
//! the kernel makes for itself are left out).

use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;

use super::net_table;
use crate::error::{Error, Result};

/// A route: where packets for `destination/prefix_len` go.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Route {
    pub destination: IpAddr,
    pub prefix_len: u8,
    /// The next hop, for a route through a gateway; `None` for a directly connected network.
    pub gateway: Option<IpAddr>,
    pub interface: String,
    pub metric: u32,
}

impl Route {
    /// Whether this is a default route (`0.0.0.0/0` or `::/0`).
    pub fn is_default(&self) -> bool {
        self.prefix_len == 0
    }
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.destination, self.prefix_len)?;
        if let Some(gw) = self.gateway {
            write!(f, " via {gw}")?;
        }
        write!(f, " dev {} metric {}", self.interface, self.metric)
    }
}

const RTF_UP: u32 = 0x0001;
const RTF_GATEWAY: u32 = 0x0002;
const RTF_REJECT: u32 = 0x0200;
const RTF_CACHE: u32 = 0x0100_0000;
const RTF_LOCAL: u32 = 0x8000_0000;

/// The routes of the calling thread's network namespace: IPv4 first, then IPv6.
pub fn routes() -> Result<Vec<Route>> {
    let mut all = Vec::new();
    let v4 = net_table("route");
    let text = std::fs::read_to_string(&v4).map_err(|source| Error::Read {
        path: v4.clone(),
        source,
    })?;
    all.extend(parse_ipv4(&text, &v4)?);
    let v6 = net_table("ipv6_route");
    match std::fs::read_to_string(&v6) {
        Ok(text) => all.extend(parse_ipv6(&text, &v6)?),
        // Absent when the kernel runs without IPv6.
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(source) => return Err(Error::Read { path: v6, source }),
    }
    Ok(all)
}

fn malformed(path: &Path, line: usize, reason: &str) -> Error {
    Error::Malformed {
        path: path.to_owned(),
        line,
        reason: reason.to_owned(),
    }
}

/// `Iface Destination Gateway Flags RefCnt Use Metric Mask …`, addresses as host-order hex words.
pub(crate) fn parse_ipv4(text: &str, path: &Path) -> Result<Vec<Route>> {
    let mut found = Vec::new();
    for (index, line) in text.lines().enumerate().skip(1) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.is_empty() {
            continue;
        }
        let bad = |reason| malformed(path, index + 1, reason);
        if fields.len() < 8 {
            return Err(bad("fewer than 8 columns"));
        }
        let word = |s: &str| u32::from_str_radix(s, 16).map(|w| Ipv4Addr::from(w.to_ne_bytes()));
        let destination = word(fields[1]).map_err(|_| bad("bad destination"))?;
        let gateway = word(fields[2]).map_err(|_| bad("bad gateway"))?;
        let flags = u32::from_str_radix(fields[3], 16).map_err(|_| bad("bad flags"))?;
        let metric = fields[6].parse().map_err(|_| bad("bad metric"))?;
        let mask = word(fields[7]).map_err(|_| bad("bad mask"))?;
        if flags & RTF_UP == 0 || flags & RTF_REJECT != 0 {
            continue;
        }
        found.push(Route {
            destination: destination.into(),
            prefix_len: u32::from(mask).count_ones() as u8,
            gateway: (flags & RTF_GATEWAY != 0).then_some(gateway.into()),
            interface: fields[0].to_owned(),
            metric,
        });
    }
    Ok(found)
}

/// `dest plen src splen nexthop metric refcnt use flags dev`, addresses as 32 hex digits in
/// network byte order (unlike the socket tables), numbers in hex.
pub(crate) fn parse_ipv6(text: &str, path: &Path) -> Result<Vec<Route>> {
    let mut found = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.is_empty() {
            continue;
        }
        let bad = |reason| malformed(path, index + 1, reason);
        if fields.len() < 10 {
            return Err(bad("fewer than 10 columns"));
        }
        let addr = |s: &str| {
            u128::from_str_radix(s, 16)
                .ok()
                .filter(|_| s.len() == 32)
                .map(Ipv6Addr::from)
        };
        let hex = |s: &str| u32::from_str_radix(s, 16);
        let destination = addr(fields[0]).ok_or_else(|| bad("bad destination"))?;
        let prefix_len = hex(fields[1]).map_err(|_| bad("bad prefix length"))?;
        let next_hop = addr(fields[4]).ok_or_else(|| bad("bad next hop"))?;
        let metric = hex(fields[5]).map_err(|_| bad("bad metric"))?;
        let flags = hex(fields[8]).map_err(|_| bad("bad flags"))?;
        if prefix_len > 128 {
            return Err(bad("prefix length above 128"));
        }
        // The kernel's own entries: addresses of this machine (local), unreachable defaults
        // (reject), cached clones, and the multicast range every interface gets.
        if flags & RTF_UP == 0
            || flags & (RTF_REJECT | RTF_CACHE | RTF_LOCAL) != 0
            || destination.is_multicast()
        {
            continue;
        }
        found.push(Route {
            destination: destination.into(),
            prefix_len: prefix_len as u8,
            gateway: (flags & RTF_GATEWAY != 0).then_some(next_hop.into()),
            interface: fields[9].to_owned(),
            metric,
        });
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Captured from a namespace with v0 at 192.0.2.1/24 and 2001:db8::1/64 and one gateway route
    // per family.
    const ROUTE: &str =
        "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
v0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
v0\t006433C6\tFE0200C0\t0003\t0\t0\t0\t00FFFFFF\t0\t0\t0
v0\t00000000\tFE0200C0\t0003\t0\t0\t100\t00000000\t0\t0\t0
";

    const IPV6_ROUTE: &str = "\
20010db8000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000002 00000000 00000001       v0
20010db8000500000000000000000000 40 00000000000000000000000000000000 00 20010db80000000000000000000000fe 00000400 00000001 00000000 00000003       v0
fe800000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001       v0
00000000000000000000000000000000 00 00000000000000000000000000000000 00 00000000000000000000000000000000 ffffffff 00000001 00000000 00200200       lo
00000000000000000000000000000001 80 00000000000000000000000000000000 00 00000000000000000000000000000000 00000000 00000003 00000000 80200001       lo
20010db8000000000000000000000001 80 00000000000000000000000000000000 00 00000000000000000000000000000000 00000000 00000002 00000000 80200001       v0
ff000000000000000000000000000000 08 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000002 00000000 00000001       v0
";

    fn shown(routes: Vec<Route>) -> Vec<String> {
        routes.iter().map(Route::to_string).collect()
    }

    #[test]
    fn ipv4_routes_with_and_without_gateway() {
        let routes = parse_ipv4(ROUTE, Path::new("/proc/test/route")).unwrap();
        assert_eq!(
            shown(routes.clone()),
            [
                "192.0.2.0/24 dev v0 metric 0",
                "198.51.100.0/24 via 192.0.2.254 dev v0 metric 0",
                "0.0.0.0/0 via 192.0.2.254 dev v0 metric 100",
            ]
        );
        assert!(routes[2].is_default() && !routes[0].is_default());
    }

    #[test]
    fn ipv6_routes_leave_out_the_kernels_own_entries() {
        let routes = parse_ipv6(IPV6_ROUTE, Path::new("/proc/test/ipv6_route")).unwrap();
        assert_eq!(
            shown(routes),
            [
                "2001:db8::/64 dev v0 metric 256",
                "2001:db8:5::/64 via 2001:db8::fe dev v0 metric 1024",
                "fe80::/64 dev v0 metric 256",
            ]
        );
    }

    #[test]
    fn malformed_route_lines_are_reported() {
        let err = parse_ipv6("zz 40\n", Path::new("/proc/x/ipv6_route")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "line 1 of /proc/x/ipv6_route is malformed: fewer than 10 columns"
        );
        let err =
            parse_ipv4("h\nv0\tXX\t0\t1\t0\t0\t0\t0\n", Path::new("/proc/x/route")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "line 2 of /proc/x/route is malformed: bad destination"
        );
    }
}
