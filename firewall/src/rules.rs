//! An opening's rules in each backend's own terms: native nf_tables rule bodies for hand-written
//! nftables layers, and iptables argv for iptables-nft and iptables-legacy layers.
//!
//! The mark on each rule is `mesh-host:<id>#<fingerprint>`: the id says whose rule it is, the
//! fingerprint (of port, protocol, source and path) says which version, so a changed opening is
//! replaced and an unchanged one is left exactly as it is.

use crate::netlink::{Family, L4Proto, Rule, RuleBody};
use crate::opening::{From, Network, Opening, Path, Proto, MARK_PREFIX};
use std::net::IpAddr;

/// The full mark of an opening: its id and the fingerprint of what it admits, written into one
/// string (a mark is made for every opening in every plan).
pub fn mark(o: &Opening) -> String {
    use std::fmt::Write;
    let mut m = String::with_capacity(MARK_PREFIX.len() + o.id.len() + 9);
    m.push_str(MARK_PREFIX);
    m.push_str(&o.id);
    let _ = write!(m, "#{:08x}", fnv(o));
    m
}

/// The fingerprint in a mark: FNV-1a (32 bits, lowercase hex) of the opening's canonical
/// encoding, so the same opening gives the same mark with every build of the host. The encoding
/// is written down in docs/operator.md and pinned by a test:
/// `v1|<port>|<tcp|udp>|<from>|<incoming|forwarded>`, where `<from>` is `anywhere`,
/// `interface=<name>`, or `networks=<net>,<net>…` with each network as `addr/len` (IPv6 in
/// its shortest form) in the order given.
pub fn fingerprint(o: &Opening) -> String {
    format!("{:08x}", fnv(o))
}

/// FNV-1a of the canonical encoding, hashed as it is written: no string of the encoding is
/// kept.
fn fnv(o: &Opening) -> u32 {
    use std::fmt::Write;
    struct Fnv(u32);
    impl Write for Fnv {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            for b in s.bytes() {
                self.0 ^= u32::from(b);
                self.0 = self.0.wrapping_mul(0x0100_0193);
            }
            Ok(())
        }
    }
    let mut h = Fnv(0x811c_9dc5);
    let _ = write!(h, "v1|{}|{}|", o.port, o.proto.as_str());
    let _ = match &o.from {
        From::Anywhere => h.write_str("anywhere"),
        From::Interface(i) => write!(h, "interface={i}"),
        From::Networks(nets) => {
            let _ = h.write_str("networks=");
            for (k, n) in nets.iter().enumerate() {
                let _ = write!(h, "{}{n}", if k == 0 { "" } else { "," });
            }
            Ok(())
        }
    };
    let _ = write!(h, "|{}", o.path.as_str());
    h.0
}

/// A mark in full, `mesh-host:<id>#<fingerprint>`: the id 1 to 109 of `[A-Za-z0-9._/@:-]` (what
/// an opening's id may be), the fingerprint 8 lowercase hex digits. Anything else, an operator's
/// `mesh-host: keep` included, is no mark: the host never removes a rule on a guess.
/// Returns (id, fingerprint).
pub fn parse_mark(text: &str) -> Option<(&str, &str)> {
    let rest = text.strip_prefix(MARK_PREFIX)?;
    let (id, fp) = rest.rsplit_once('#')?;
    let id_ok = (1..=crate::opening::MAX_ID_LEN).contains(&id.len())
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._/@:-".contains(c));
    let fp_ok = fp.len() == 8 && fp.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f'));
    (id_ok && fp_ok).then_some((id, fp))
}

/// The id carried by a full mark, whatever its fingerprint.
pub fn id_of(mark: &str) -> Option<&str> {
    parse_mark(mark).map(|(id, _)| id)
}

/// Where a rule's traffic comes from, once split per family.
enum Src<'a> {
    Any,
    Iface(&'a str),
    Net(&'a Network),
    /// Arriving on the interface from a source in the network: the private network's packets
    /// when its ranges are known (a peer relaying an outside host brings the host's source).
    IfaceNet(&'a str, &'a Network),
}

/// Whether a network is of a chain's family (`inet` and `netdev` hold both).
fn of_family(n: &Network, family: Family) -> bool {
    match family {
        Family::Ipv4 => n.addr.is_ipv4(),
        Family::Ipv6 => n.addr.is_ipv6(),
        _ => true,
    }
}

/// The sources of an opening that apply to a chain of `family`; empty when none do (an opening
/// from IPv6 networks only has nothing to admit in an `ip` table).
fn sources(o: &Opening, family: Family) -> Vec<Src<'_>> {
    match &o.from {
        From::Anywhere => vec![Src::Any],
        From::Interface(i) => vec![Src::Iface(i)],
        From::Networks(nets) => nets
            .iter()
            .filter(|n| of_family(n, family))
            .map(Src::Net)
            .collect(),
    }
}

/// [`sources`], with an opening from the private network's interface narrowed to its `ranges`
/// (one source per range of the family; none of the family: nothing to admit). An opening from
/// elsewhere, or no ranges given, is [`sources`] as it is.
fn sources_within<'a>(
    o: &'a Opening,
    family: Family,
    (private, ranges): (&str, &'a [Network]),
) -> Vec<Src<'a>> {
    match &o.from {
        From::Interface(i) if i == private => private_sources(i, ranges, family),
        _ => sources(o, family),
    }
}

/// What arrives from the private network on `interface`: from each of its `ranges` of the
/// family, or the interface alone when no ranges are known.
fn private_sources<'a>(interface: &'a str, ranges: &'a [Network], family: Family) -> Vec<Src<'a>> {
    if ranges.is_empty() {
        return vec![Src::Iface(interface)];
    }
    ranges
        .iter()
        .filter(|n| of_family(n, family))
        .map(|n| Src::IfaceNet(interface, n))
        .collect()
}

/// The source matches of the private network on `interface` in a chain of `family`, one rule
/// head each ([`private_sources`]): the derived filter's ssh rules start with them.
pub fn private_matches(interface: &str, ranges: &[Network], family: Family) -> Vec<RuleBody> {
    private_sources(interface, ranges, family)
        .iter()
        .map(|src| source_match(RuleBody::new(), src, family))
        .collect()
}

/// How many rules an opening needs in a chain of `family`: one per source of that family.
pub fn source_count(o: &Opening, family: Family) -> usize {
    sources(o, family).len()
}

fn l4(p: Proto) -> L4Proto {
    match p {
        Proto::Tcp => L4Proto::Tcp,
        Proto::Udp => L4Proto::Udp,
    }
}

/// Where in the kernel's path a layer's chain runs, as an opening's rule needs to know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Site {
    /// The chain's family: `ip`, `ip6`, `inet`, or `netdev` (where an address's family is told
    /// by the ethertype, not `meta nfproto`).
    pub family: Family,
    /// The chain runs before destination NAT (ingress, prerouting below -100): a forwarded
    /// opening's packet still carries the published port, and conntrack may not have seen it.
    pub before_dnat: bool,
    /// The rule admits only connections to this machine's own addresses (`fib daddr type
    /// local`, `-m addrtype --dst-type LOCAL`): where the chain it goes in is also on the
    /// forward path, an incoming opening must not open forwarding (see `eval::check`).
    pub local: bool,
}

impl Site {
    /// A chain at the input or forward hook of `family`.
    pub fn late(family: Family) -> Site {
        Site {
            family,
            before_dnat: false,
            local: false,
        }
    }
}

/// The native rules of an opening in a chain at `site`.
pub fn nft_bodies(o: &Opening, site: Site) -> Vec<RuleBody> {
    bodies(o, site, sources(o, site.family))
}

/// [`nft_bodies`], an opening from `private`'s interface admitted only from its ranges (the
/// derived filter's rules: on a converged node no guard stands beside them).
pub fn nft_bodies_within(o: &Opening, site: Site, private: (&str, &[Network])) -> Vec<RuleBody> {
    bodies(o, site, sources_within(o, site.family, private))
}

/// A source's match at the head of a rule in a chain of `family`.
fn source_match(b: RuleBody, src: &Src<'_>, family: Family) -> RuleBody {
    let net = |b: RuleBody, n: &Network| match n.addr {
        _ if family == Family::Netdev => b.saddr_by_ethertype(n.addr, n.len),
        // In an `ip` or `ip6` table the family is the table's: no `meta nfproto` (nft writes
        // none there, and cannot list a rule that has one).
        IpAddr::V4(_) if family == Family::Ipv4 => b.saddr_in_own_family(n.addr, n.len),
        IpAddr::V6(_) if family == Family::Ipv6 => b.saddr_in_own_family(n.addr, n.len),
        IpAddr::V4(a) => b.ip_saddr(a, n.len),
        IpAddr::V6(a) => b.ip6_saddr(a, n.len),
    };
    match src {
        Src::Any => b,
        Src::Iface(i) => b.iifname_eq(i),
        Src::Net(n) => net(b, n),
        Src::IfaceNet(i, n) => net(b.iifname_eq(i), n),
    }
}

fn bodies(o: &Opening, site: Site, sources: Vec<Src<'_>>) -> Vec<RuleBody> {
    let m = mark(o);
    sources
        .into_iter()
        .map(|src| {
            let mut b = source_match(RuleBody::new(), &src, site.family);
            if site.local && o.path == Path::Incoming {
                b = b.fib_daddr_type_local();
            }
            b = match (o.path, site.before_dnat) {
                // Before DNAT a published port is still on the packet.
                (Path::Incoming, _) | (Path::Forwarded, true) => match o.proto {
                    Proto::Tcp => b.tcp_dport(o.port),
                    Proto::Udp => b.udp_dport(o.port),
                },
                // Only a translated connection: an untranslated packet forwarded to some
                // address behind this machine on the same port is not the published port's.
                (Path::Forwarded, false) => b
                    .l4proto(l4(o.proto))
                    .ct_status_dnat()
                    .ct_original_proto_dst_only(o.port),
            };
            b.accept().comment(&m)
        })
        .collect()
}

/// The iptables rule specs (what follows `-A CHAIN`) of an opening in a chain of `family`
/// (`ip` or `ip6`); `before_dnat` for the raw and mangle PREROUTING chains.
pub fn xt_specs(o: &Opening, family: Family, before_dnat: bool) -> Vec<Vec<String>> {
    xt_specs_at(
        o,
        Site {
            family,
            before_dnat,
            local: false,
        },
    )
}

/// The same at a site, with its qualifier for this machine's own addresses.
pub fn xt_specs_at(o: &Opening, site: Site) -> Vec<Vec<String>> {
    let (family, before_dnat) = (site.family, site.before_dnat);
    let m = mark(o);
    sources(o, family)
        .into_iter()
        .map(|src| {
            let mut a: Vec<String> = vec!["-p".into(), o.proto.as_str().into()];
            match src {
                Src::Any => {}
                Src::Iface(i) => a.extend(["-i".into(), i.to_string()]),
                Src::Net(n) => a.extend(["-s".into(), n.to_string()]),
                Src::IfaceNet(i, n) => {
                    a.extend(["-i".into(), i.to_string(), "-s".into(), n.to_string()])
                }
            }
            if site.local && o.path == Path::Incoming {
                a.extend([
                    "-m".into(),
                    "addrtype".into(),
                    "--dst-type".into(),
                    "LOCAL".into(),
                ]);
            }
            match (o.path, before_dnat) {
                (Path::Incoming, _) | (Path::Forwarded, true) => a.extend([
                    "-m".into(),
                    o.proto.as_str().into(),
                    "--dport".into(),
                    o.port.to_string(),
                ]),
                (Path::Forwarded, false) => a.extend([
                    "-m".into(),
                    "conntrack".into(),
                    "--ctstate".into(),
                    "DNAT".into(),
                    "--ctorigdstport".into(),
                    o.port.to_string(),
                ]),
            }
            a.extend([
                "-m".into(),
                "comment".into(),
                "--comment".into(),
                m.clone(),
                "-j".into(),
                "ACCEPT".into(),
            ]);
            a
        })
        .collect()
}

/// The mark of a listed nf_tables rule: its comment, from the user data nft writes or from the
/// x_tables `comment` match iptables-nft writes.
/// Only a comment that is a full mark ([`parse_mark`]) counts.
pub fn listed_mark(rule: &Rule) -> Option<String> {
    rule.comment
        .iter()
        .cloned()
        .chain(rule.exprs.iter().filter_map(|e| e.xt_comment()))
        .find(|c| parse_mark(c).is_some())
}

/// The mark in an `iptables-save` rule spec, if it has one: the spec is split into arguments
/// honouring quotes, and only the argument right after an unquoted `-m comment --comment` is
/// read, so text inside another argument (a `--string` to match, a LOG prefix) is never taken
/// for a mark.
pub fn spec_mark(spec: &str) -> Option<String> {
    let words = split_words(spec)?;
    let at = words.windows(4).find_map(|w| match w {
        [(m, false), (c, false), (o, false), (text, _)]
            if m == "-m" && c == "comment" && o == "--comment" =>
        {
            Some(text)
        }
        _ => None,
    })?;
    parse_mark(at).map(|_| at.clone())
}

/// Splits an `iptables-save` rule spec into arguments again: words separated by spaces, with
/// double quotes grouping (iptables-save quotes comments, escaping `"` and `\` with a backslash).
/// `None` for an unterminated quote, which is no spec iptables-save prints.
pub fn split_spec(spec: &str) -> Option<Vec<String>> {
    Some(split_words(spec)?.into_iter().map(|(w, _)| w).collect())
}

/// The arguments of a spec, each with whether any of it was quoted.
fn split_words(spec: &str) -> Option<Vec<(String, bool)>> {
    let mut args = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut was_quoted = false;
    let mut quoted = false;
    let mut chars = spec.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                quoted = !quoted;
                in_word = true;
                was_quoted = true;
            }
            '\\' if quoted => word.push(chars.next()?),
            c if c.is_whitespace() && !quoted => {
                if in_word {
                    args.push((std::mem::take(&mut word), was_quoted));
                    in_word = false;
                    was_quoted = false;
                }
            }
            c => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if quoted {
        return None;
    }
    if in_word {
        args.push((word, was_quoted));
    }
    Some(args)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_mark_carries_the_id_and_nothing_else_does() {
        assert_eq!(id_of("mesh-host:web/https#0011aabb"), Some("web/https"));
        assert_eq!(id_of("mesh-host:web/https"), None);
        assert_eq!(id_of("ssh+http"), None);
    }

    fn o(from: From, path: Path) -> Opening {
        Opening {
            id: "web/https".into(),
            port: 443,
            proto: Proto::Tcp,
            from,
            path,
        }
    }

    #[test]
    fn the_mark_changes_with_what_the_opening_admits() {
        let a = o(From::Anywhere, Path::Incoming);
        let mut b = a.clone();
        assert_eq!(mark(&a), mark(&b));
        b.port = 8443;
        assert_ne!(mark(&a), mark(&b));
        assert_eq!(id_of(&mark(&a)), Some("web/https"));
        assert!(mark(&a).starts_with("mesh-host:web/https#"));
    }

    #[test]
    fn the_fingerprint_is_pinned_to_its_canonical_encoding() {
        // A change here changes every mark on every node: each opening is then rewritten once.
        assert_eq!(fingerprint(&o(From::Anywhere, Path::Incoming)), "daba6bf1");
        let nets = vec![
            Network {
                addr: "10.0.0.0".parse().unwrap(),
                len: 8,
            },
            Network {
                addr: "fd77::".parse().unwrap(),
                len: 64,
            },
        ];
        assert_eq!(
            fingerprint(&o(From::Networks(nets), Path::Forwarded)),
            "fcc2376f"
        );
        let mesh0 = o(From::Interface("mesh0".into()), Path::Incoming);
        assert_eq!(fingerprint(&mesh0), "2aa088b5");
        // The full mark is the opening's own mark, `#` and that fingerprint.
        assert_eq!(mark(&mesh0), format!("{}#2aa088b5", mesh0.mark()));
        assert_eq!(
            parse_mark(&mark(&mesh0)),
            Some((mesh0.id.as_str(), "2aa088b5"))
        );
    }

    #[test]
    fn networks_split_by_family() {
        let nets = vec![
            Network {
                addr: "10.0.0.0".parse().unwrap(),
                len: 8,
            },
            Network {
                addr: "fd77::".parse().unwrap(),
                len: 64,
            },
        ];
        let op = o(From::Networks(nets), Path::Incoming);
        assert_eq!(nft_bodies(&op, Site::late(Family::Ipv4)).len(), 1);
        assert_eq!(nft_bodies(&op, Site::late(Family::Ipv6)).len(), 1);
        assert_eq!(nft_bodies(&op, Site::late(Family::Inet)).len(), 2);
        let v6 = &xt_specs(&op, Family::Ipv6, false)[0];
        assert_eq!(v6[..4], ["-p", "tcp", "-s", "fd77::/64"]);
    }

    #[test]
    fn a_source_network_tests_the_family_only_where_the_table_does_not() {
        use crate::netlink::{Expr, MetaKey};
        let nets = vec![
            Network {
                addr: "10.0.0.0".parse().unwrap(),
                len: 8,
            },
            Network {
                addr: "fd77::".parse().unwrap(),
                len: 64,
            },
        ];
        let op = o(From::Networks(nets), Path::Incoming);
        let nfproto = |b: &RuleBody| {
            b.exprs.iter().any(|e| {
                matches!(
                    e,
                    Expr::Meta {
                        key: MetaKey::NfProto,
                        ..
                    }
                )
            })
        };
        // `ip` and `ip6` tables: as nft writes `ip saddr 10.0.0.0/8` there (nft 1.0.6 aborts
        // listing a rule of such a table that tests `meta nfproto`).
        for family in [Family::Ipv4, Family::Ipv6] {
            let b = nft_bodies(&op, Site::late(family));
            assert!(!nfproto(&b[0]), "{family:?}: {:?}", b[0].exprs);
        }
        // `inet`: the family is the rule's to test.
        assert!(nft_bodies(&op, Site::late(Family::Inet))
            .iter()
            .all(nfproto));
    }

    #[test]
    fn forwarded_specs_match_the_original_port() {
        let spec = xt_specs(
            &o(From::Interface("mesh0".into()), Path::Forwarded),
            Family::Ipv4,
            false,
        )
        .remove(0);
        let line = spec.join(" ");
        assert!(line.starts_with("-p tcp -i mesh0 -m conntrack --ctstate DNAT --ctorigdstport 443 -m comment --comment mesh-host:web/https#"), "{line}");
        assert!(line.ends_with("-j ACCEPT"));
    }

    #[test]
    fn save_specs_split_back_into_arguments() {
        let spec = "-p tcp -m tcp --dport 9000 -m comment --comment \"mesh-host:web/api#0011aabb\" -j ACCEPT";
        assert_eq!(
            split_spec(spec).unwrap(),
            [
                "-p",
                "tcp",
                "-m",
                "tcp",
                "--dport",
                "9000",
                "-m",
                "comment",
                "--comment",
                "mesh-host:web/api#0011aabb",
                "-j",
                "ACCEPT"
            ]
        );
        assert_eq!(
            split_spec(r#"-m comment --comment "a \"b\" c\\" -j ACCEPT"#).unwrap(),
            ["-m", "comment", "--comment", r#"a "b" c\"#, "-j", "ACCEPT"]
        );
        assert_eq!(split_spec(r#"--comment """#).unwrap(), ["--comment", ""]);
        assert_eq!(split_spec("--comment \"open"), None);
        // The specs the host writes survive the round trip through iptables-save's quoting.
        let o = o(From::Interface("mesh0".into()), Path::Forwarded);
        let spec = xt_specs(&o, Family::Ipv4, false).remove(0);
        let saved: Vec<String> = spec
            .iter()
            .map(|a| {
                if a.starts_with("mesh-host:") {
                    format!("\"{a}\"")
                } else {
                    a.clone()
                }
            })
            .collect();
        assert_eq!(split_spec(&saved.join(" ")).unwrap(), spec);
    }

    #[test]
    fn marks_are_read_from_save_output() {
        assert_eq!(
            spec_mark(
                "-p tcp -m tcp --dport 22 -m comment --comment \"mesh-host:x#0011aabb\" -j ACCEPT"
            )
            .as_deref(),
            Some("mesh-host:x#0011aabb")
        );
        assert_eq!(
            spec_mark("-p tcp -m comment --comment mesh-host:y#0011aabb -j ACCEPT").as_deref(),
            Some("mesh-host:y#0011aabb")
        );
        assert_eq!(
            spec_mark("-p tcp -m comment --comment \"ssh+http\" -j ACCEPT"),
            None
        );
    }

    #[test]
    fn only_a_full_mark_is_a_mark() {
        assert_eq!(
            parse_mark("mesh-host:web/api#0011aabb"),
            Some(("web/api", "0011aabb"))
        );
        assert_eq!(
            parse_mark("mesh-host:a.b_c-d/e@f:g#deadbeef"),
            Some(("a.b_c-d/e@f:g", "deadbeef"))
        );
        for not_a_mark in [
            "mesh-host: keep",
            "mesh-host:keep",
            "mesh-host:y",
            "mesh-host:#0011aabb",
            "mesh-host:x#0011AABB",
            "mesh-host:x#0011aab",
            "mesh-host:x#0011aabbc",
            "mesh-host:x y#0011aabb",
            "mesh-host:x\"#0011aabb",
            "mesh-host:x#0011aabb ",
            "Mesh-host:x#0011aabb",
            "ssh+http",
        ] {
            assert_eq!(parse_mark(not_a_mark), None, "{not_a_mark}");
            assert_eq!(id_of(not_a_mark), None, "{not_a_mark}");
        }
        let long = format!("mesh-host:{}#0011aabb", "a".repeat(110));
        assert_eq!(parse_mark(&long), None);
        let longest = format!("mesh-host:{}#0011aabb", "a".repeat(109));
        assert!(parse_mark(&longest).is_some());
        // The longest mark fits nft's 128-byte comment (and iptables' 256).
        assert_eq!(longest.len(), 128);
        // Every mark the host writes is one.
        let o = o(From::Anywhere, Path::Incoming);
        assert_eq!(id_of(&mark(&o)), Some("web/https"));
    }

    #[test]
    fn text_inside_another_argument_is_never_a_mark() {
        for spoof in [
            // A string to match that reads like a comment option.
            "-p tcp -m string --string \"--comment mesh-host:y#0011aabb\" --algo bm -j ACCEPT",
            // A LOG prefix.
            "-p tcp -m tcp --dport 22 -j LOG --log-prefix \"-m comment --comment mesh-host:y#0011aabb \"",
            // A whole fake comment match inside one quoted argument.
            "-m string --string \"x -m comment --comment mesh-host:y#0011aabb\" --algo kmp -j DROP",
            // An operator's comment that merely starts with the prefix.
            "-p tcp -m tcp --dport 22 -m comment --comment \"mesh-host: keep\" -j ACCEPT",
            "-p tcp -m comment --comment mesh-host:y -j ACCEPT",
        ] {
            assert_eq!(spec_mark(spoof), None, "{spoof}");
        }
        // The real comment is found after a spoof in an earlier argument.
        assert_eq!(
            spec_mark("-m string --string \"--comment mesh-host:z#00000000\" --algo bm -m comment --comment \"mesh-host:y#0011aabb\" -j ACCEPT").as_deref(),
            Some("mesh-host:y#0011aabb")
        );
    }

    #[test]
    fn a_listed_rule_is_marked_only_by_a_full_mark() {
        let rule = |comment: &str| Rule {
            family: Family::Inet,
            table: "t".into(),
            chain: "c".into(),
            handle: 3,
            position: None,
            exprs: Vec::new(),
            userdata: None,
            comment: Some(comment.into()),
        };
        assert_eq!(listed_mark(&rule("mesh-host: keep")), None);
        assert_eq!(listed_mark(&rule("mesh-host:keep")), None);
        assert_eq!(
            listed_mark(&rule("mesh-host:web/api#0011aabb")).as_deref(),
            Some("mesh-host:web/api#0011aabb")
        );
    }
}
