//! ufw's rule text: the argv (after `ufw`) the host writes for an opening, and a rule as
//! `ufw show added` prints it back, reduced to what it matches ([`Key`]) so the two can be
//! compared. ufw reorders and shortens what it was given (`allow proto tcp from any to any port
//! 9000` comes back as `allow 9000/tcp`), so rules are compared by what they match, never by
//! their words.
//!
//! A forwarded opening names where the runtime's DNAT sends the published port, because ufw's
//! `route` rules stand in the forward path, after the translation: `route allow proto P from SRC
//! to ADDR port TPORT` for each destination, the way ufw-docker's setup opens a published port.

use crate::opening::{From, Opening, Path};
use crate::published::Target;
use crate::rules;
use std::net::IpAddr;

/// The argv (after `ufw`) of each rule an opening needs, every one ending in its mark: one per
/// source for an incoming opening; for a forwarded one, one per source and destination of the
/// same family (ufw refuses a rule that mixes families), none without a destination.
pub(super) fn commands(o: &Opening, to: &[Target]) -> Vec<Vec<String>> {
    let mark = rules::mark(o);
    let mut head: Vec<String> = match o.path {
        Path::Incoming => vec!["allow".into()],
        Path::Forwarded => vec!["route".into(), "allow".into()],
    };
    if let From::Interface(i) = &o.from {
        head.extend(["in".into(), "on".into(), i.clone()]);
    }
    let sources: Vec<(String, Option<bool>)> = match &o.from {
        From::Networks(nets) => nets
            .iter()
            .map(|n| (n.to_string(), Some(n.addr.is_ipv4())))
            .collect(),
        _ => vec![("any".into(), None)],
    };
    let destinations: Vec<(String, u16, Option<bool>)> = match o.path {
        Path::Incoming => vec![("any".into(), o.port, None)],
        Path::Forwarded => to
            .iter()
            .map(|t| (t.addr.to_string(), t.port, Some(t.addr.is_ipv4())))
            .collect(),
    };
    let mut out = Vec::new();
    for (src, src_v4) in &sources {
        for (dst, port, dst_v4) in &destinations {
            if let (Some(a), Some(b)) = (src_v4, dst_v4) {
                if a != b {
                    continue;
                }
            }
            let mut argv = head.clone();
            argv.extend(
                [
                    "proto",
                    o.proto.as_str(),
                    "from",
                    src,
                    "to",
                    dst,
                    "port",
                    &port.to_string(),
                    "comment",
                    &mark,
                ]
                .map(String::from),
            );
            out.push(argv);
        }
    }
    out
}

/// What a ufw rule matches, whatever words it was written or printed with.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Key {
    route: bool,
    action: String,
    /// `in` or `out`, and the interface after `on`.
    direction: Option<String>,
    interface: Option<String>,
    proto: Option<String>,
    from: String,
    from_port: Option<String>,
    to: String,
    port: Option<String>,
}

impl Key {
    /// Whether two rules match the same traffic, whatever each does with it. ufw itself
    /// compares so: adding a rule that differs from one it holds only in action or comment
    /// REPLACES that rule ("Rule updated"), so the host never adds one where such a rule is.
    pub(super) fn same_traffic(&self, other: &Key) -> bool {
        Key {
            action: String::new(),
            ..self.clone()
        } == Key {
            action: String::new(),
            ..other.clone()
        }
    }

    pub(super) fn allows(&self) -> bool {
        self.action == "allow"
    }
}

/// An address as ufw may print it, in one form: `any`, an address (a full-length prefix is the
/// address), or a network `addr/len`.
fn address(word: &str) -> String {
    let (addr, len) = match word.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (word, None),
    };
    let Ok(ip) = addr.parse::<IpAddr>() else {
        return word.to_string();
    };
    let full = if ip.is_ipv4() { "32" } else { "128" };
    match len {
        None => ip.to_string(),
        Some(l) if l == full => ip.to_string(),
        Some(l) => format!("{ip}/{l}"),
    }
}

/// Reduces a rule's argv (after `ufw`, as written or as `ufw show added` prints it) to what it
/// matches; `None` for a form this reading does not know (an application profile, say), which
/// then matches nothing the host wants.
pub(super) fn key(argv: &[String]) -> Option<Key> {
    let mut words = argv.iter().map(String::as_str).peekable();
    let route = words.peek() == Some(&"route");
    if route {
        words.next();
    }
    let mut k = Key {
        route,
        action: words.next()?.to_string(),
        direction: None,
        interface: None,
        proto: None,
        from: "any".into(),
        from_port: None,
        to: "any".into(),
        port: None,
    };
    // Whether the last address given was the source, for the `port` after it.
    let mut after_from = false;
    let mut simple = true;
    while let Some(w) = words.next() {
        match w {
            "in" | "out" => {
                k.direction = Some(w.to_string());
                if words.peek() == Some(&"on") {
                    words.next();
                    k.interface = Some(words.next()?.to_string());
                }
            }
            "log" | "log-all" => {}
            "proto" => {
                k.proto = Some(words.next()?.to_string());
                simple = false;
            }
            "from" => {
                k.from = address(words.next()?);
                after_from = true;
                simple = false;
            }
            "to" => {
                k.to = address(words.next()?);
                after_from = false;
                simple = false;
            }
            "port" => {
                let p = Some(words.next()?.to_string());
                if after_from {
                    k.from_port = p;
                } else {
                    k.port = p;
                }
            }
            "comment" => {
                words.next()?;
            }
            // The short form, `PORT[/PROTO]` alone: to any port, from anywhere.
            w if simple && k.port.is_none() && w.chars().next()?.is_ascii_digit() => {
                let (port, proto) = match w.split_once('/') {
                    Some((p, x)) => (p, Some(x.to_string())),
                    None => (w, None),
                };
                k.port = Some(port.to_string());
                k.proto = proto;
            }
            _ => return None,
        }
    }
    Some(k)
}

/// Splits a line as ufw prints it: words, with a comment in single quotes kept whole.
pub(super) fn split_quoted(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    let mut any = false;
    for c in line.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                any = true;
            }
            ' ' if !quoted => {
                if any {
                    out.push(std::mem::take(&mut word));
                    any = false;
                }
            }
            c => {
                word.push(c);
                any = true;
            }
        }
    }
    if any {
        out.push(word);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::opening::{Network, Proto};

    fn opening(from: From, path: Path) -> Opening {
        Opening {
            id: "web".into(),
            port: 9000,
            proto: Proto::Tcp,
            from,
            path,
        }
    }

    fn target(addr: &str, port: u16) -> Target {
        Target {
            addr: addr.parse().unwrap(),
            port,
        }
    }

    fn words(line: &str) -> Vec<String> {
        split_quoted(line)
    }

    /// ufw's own commands: `allow` incoming, `in on` for an interface, one per source network,
    /// each with the mark as its comment.
    #[test]
    fn incoming_in_ufw_terms() {
        let o = opening(From::Anywhere, Path::Incoming);
        let mark = rules::mark(&o);
        assert_eq!(
            commands(&o, &[]),
            [[
                "allow", "proto", "tcp", "from", "any", "to", "any", "port", "9000", "comment",
                &mark
            ]
            .map(String::from)
            .to_vec()]
        );
        let n = opening(
            From::Networks(vec![
                Network {
                    addr: "10.0.0.0".parse().unwrap(),
                    len: 8,
                },
                Network {
                    addr: "fd00::".parse().unwrap(),
                    len: 8,
                },
            ]),
            Path::Incoming,
        );
        let c = commands(&n, &[target("172.17.0.2", 80)]);
        assert_eq!(c.len(), 2, "an incoming opening ignores destinations");
        assert_eq!(c[1][4], "fd00::/8");
        assert_eq!(c[1][6], "any");
    }

    /// A forwarded opening is a `route allow` to each destination the runtime's DNAT sends the
    /// port to, at the translated port; a source network pairs only with destinations of its
    /// family; no destination, no rule.
    #[test]
    fn forwarded_names_the_translated_destination() {
        let to = [target("172.17.0.2", 80), target("fd00:d0c::2", 80)];
        let o = opening(From::Anywhere, Path::Forwarded);
        let mark = rules::mark(&o);
        let c = commands(&o, &to);
        assert_eq!(
            c,
            [
                [
                    "route",
                    "allow",
                    "proto",
                    "tcp",
                    "from",
                    "any",
                    "to",
                    "172.17.0.2",
                    "port",
                    "80",
                    "comment",
                    &mark
                ]
                .map(String::from)
                .to_vec(),
                [
                    "route",
                    "allow",
                    "proto",
                    "tcp",
                    "from",
                    "any",
                    "to",
                    "fd00:d0c::2",
                    "port",
                    "80",
                    "comment",
                    &mark
                ]
                .map(String::from)
                .to_vec()
            ]
        );
        let i = opening(From::Interface("wg0".into()), Path::Forwarded);
        let c = commands(&i, &to[..1]);
        assert_eq!(
            &c[0][..9],
            ["route", "allow", "in", "on", "wg0", "proto", "tcp", "from", "any"]
        );
        let n = opening(
            From::Networks(vec![Network {
                addr: "10.0.0.0".parse().unwrap(),
                len: 8,
            }]),
            Path::Forwarded,
        );
        let c = commands(&n, &to);
        assert_eq!(c.len(), 1, "no IPv6 destination for an IPv4 source: {c:?}");
        assert_eq!(
            (c[0][5].as_str(), c[0][7].as_str()),
            ("10.0.0.0/8", "172.17.0.2")
        );
        assert!(commands(&o, &[]).is_empty());
    }

    /// What the host writes and what ufw prints back for it (as ufw 0.36 prints it, read in the
    /// lab) reduce to the same key; another destination, port or source does not.
    #[test]
    fn written_and_printed_rules_compare_by_what_they_match() {
        let o = opening(From::Anywhere, Path::Forwarded);
        let mark = rules::mark(&o);
        let written = commands(&o, &[target("172.17.0.2", 80)]);
        let printed = words(&format!(
            "route allow to 172.17.0.2 port 80 proto tcp comment '{mark}'"
        ));
        assert_eq!(key(&written[0]), key(&printed));
        assert!(key(&printed).is_some());
        for other in [
            "route allow to 172.17.0.3 port 80 proto tcp",
            "route allow to 172.17.0.2 port 81 proto tcp",
            "route allow to 172.17.0.2 port 80 proto udp",
            "route allow from 10.0.0.0/8 to 172.17.0.2 port 80 proto tcp",
            "route allow in on wg0 to 172.17.0.2 port 80 proto tcp",
            "allow to 172.17.0.2 port 80 proto tcp",
            "route deny to 172.17.0.2 port 80 proto tcp",
        ] {
            assert_ne!(key(&written[0]), key(&words(other)), "{other}");
        }
        // The short form ufw prints for a rule from and to anywhere.
        let i = opening(From::Anywhere, Path::Incoming);
        assert_eq!(
            key(&commands(&i, &[])[0]),
            key(&words("allow 9000/tcp comment 'x'"))
        );
        assert_eq!(
            key(&words(
                "route allow in on wg0 to 172.17.0.3/32 port 53 proto udp"
            )),
            key(&words(
                "route allow in on wg0 proto udp from any to 172.17.0.3 port 53"
            ))
        );
        assert_eq!(
            key(&words("allow from 10.0.0.0/8 to any port 9000 proto tcp")),
            key(&words("allow proto tcp from 10.0.0.0/8 to any port 9000"))
        );
        assert_eq!(key(&words("allow OpenSSH")), None, "an application profile");
        let deny = key(&words("route deny to 172.17.0.2 port 80 proto tcp")).unwrap();
        let ours = key(&written[0]).unwrap();
        assert!(ours.same_traffic(&deny) && ours.allows() && !deny.allows());
        assert!(
            !ours.same_traffic(&key(&words("route deny to 172.17.0.2 port 81 proto tcp")).unwrap())
        );
    }
}
