//! The broker's name resolved by the host itself, since the static binary cannot use the C
//! library's name service: `/etc/hosts` first (every address of the name, in its order), then
//! the nameservers of `/etc/resolv.conf` asked for A and AAAA records by hickory's resolver
//! (`hickory-resolver`, on the link's tokio runtime): over UDP, again over TCP when the answer
//! was truncated, the nameservers one after another in the file's order, each query within the
//! file's `timeout` (5 s unless it says, at most 30) and tried `attempts` times (2 unless it
//! says, at most 5). Search domains are not applied: a token names the broker fully. Both
//! files' paths are the resolver's own, so tests (and `--root`) point it at theirs.
//!
//! A spoofed answer gains nothing: every address is dialled with the broker's certificate
//! pinned, so a wrong one fails that address before anything is sent.

use crate::dns;
use crate::error::{Error, Result};
use hickory_resolver::config::{
    LookupIpStrategy, NameServerConfigGroup, ResolveHosts, ResolverConfig, ResolverOpts,
    ServerOrderingStrategy,
};
use hickory_resolver::name_server::TokioConnectionProvider;
use hickory_resolver::proto::ProtoErrorKind;
use hickory_resolver::ResolveError;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::time::Duration;

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
        let fqdn = format!("{}.", host.strip_suffix('.').unwrap_or(host));
        match self.asker(&conf).lookup_ip(fqdn.as_str()).await {
            Ok(found) => {
                let mut addrs: Vec<IpAddr> = Vec::new();
                for a in found.iter() {
                    if !addrs.contains(&a) {
                        addrs.push(a);
                    }
                }
                if addrs.is_empty() {
                    return Err(fail(format!(
                        "the name has no A or AAAA record (nameservers of {}; not in {})",
                        self.resolv_conf.display(),
                        self.hosts.display()
                    )));
                }
                tracing::debug!(host, addrs = %join(&addrs), "resolved");
                Ok(addrs)
            }
            Err(e) => Err(fail(self.why_not(&conf, &e))),
        }
    }

    /// hickory's resolver for this lookup: the file's nameservers on the resolver's port, in
    /// their order and one at a time, with its timeout and attempts, no cache, no search, no
    /// hosts file of its own (the hosts file was read above).
    fn asker(&self, conf: &Conf) -> hickory_resolver::TokioResolver {
        let servers = NameServerConfigGroup::from_ips_clear(&conf.nameservers, self.port, true);
        let config = ResolverConfig::from_parts(None, Vec::new(), servers);
        let mut opts = ResolverOpts::default();
        opts.timeout = conf.timeout;
        // hickory's attempts are retries after the first try; resolv.conf's count every try.
        opts.attempts = conf.attempts.saturating_sub(1) as usize;
        opts.ndots = 0;
        opts.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
        opts.cache_size = 0;
        opts.use_hosts_file = ResolveHosts::Never;
        opts.num_concurrent_reqs = 1;
        opts.server_ordering_strategy = ServerOrderingStrategy::UserProvidedOrder;
        opts.try_tcp_on_error = false;
        hickory_resolver::Resolver::builder_with_config(config, TokioConnectionProvider::default())
            .with_options(opts)
            .build()
    }

    /// Why the nameservers gave no address, in words naming the files.
    fn why_not(&self, conf: &Conf, e: &ResolveError) -> String {
        let servers = match conf.nameservers.as_slice() {
            [one] => format!("nameserver {one}"),
            many => format!("nameservers {}", join(many)),
        };
        if e.is_nx_domain() {
            return format!(
                "the name does not exist ({servers} answered NXDOMAIN; not in {})",
                self.hosts.display()
            );
        }
        if e.is_no_records_found() {
            return format!(
                "the name has no A or AAAA record ({servers}; not in {})",
                self.hosts.display()
            );
        }
        let what = match e.proto().map(|p| p.kind()) {
            Some(ProtoErrorKind::Timeout) => format!("no answer within {:?}", conf.timeout),
            _ => e.to_string(),
        };
        format!(
            "not in {} and no nameserver of {} answered ({servers}: {what})",
            self.hosts.display(),
            self.resolv_conf.display(),
        )
    }
}

/// A file the lookup reads that is there but cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("reading {}: {source}", path.display())]
struct Unreadable {
    path: std::path::PathBuf,
    source: std::io::Error,
}

/// A file's text, or nothing when it does not exist.
fn read_optional(path: &Path) -> std::result::Result<String, Unreadable> {
    match std::fs::read_to_string(path) {
        Ok(t) => Ok(t),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(source) => Err(Unreadable {
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
