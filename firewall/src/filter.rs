//! The derived filter: the mesh's own drop-by-default filter on a converged node (ADR 0088's base
//! ruleset), derived from the same openings the engine converges through a found firewall, so it
//! admits exactly what they admit. Two chains in the mesh's table, `input` and `forward`, each
//! with a drop policy, loaded in one transaction (with the guard's removal on the flip, so the
//! store is never reachable from outside at any instant).
//!
//! On input: established and related traffic, loopback, the ICMP and ICMPv6 a machine needs
//! (errors, echo, neighbour discovery, multicast listeners), ssh from the private network and
//! from the operator's addresses a converged genesis saw, and every incoming opening from where
//! it says. On forward: established and related traffic,
//! traffic leaving the runtime's bridges (a container's own connections out), and every forwarded
//! opening by the port its packets were originally sent to (`ct status dnat ct original
//! proto-dst`), as the runtime translated them at prerouting. Both address families (an `inet`
//! table).

use crate::error::{Error, Result};
use crate::found::MESH_TABLE;
use crate::netlink::{
    BaseChain, Batch, Chain, CtState, Family, Hook, L4Proto, NfSocket, Policy, Position, RuleBody,
};
use crate::opening::{check_exact_interface, Opening, Path};
use crate::rules::{self, Site};
use std::net::IpAddr;

/// The filter's chains in the mesh's table.
pub const INPUT_CHAIN: &str = "input";
pub const FORWARD_CHAIN: &str = "forward";

/// At the filter hooks' usual priority: a found table's chains at the same hook (the runtime's,
/// a blocklist's) run too, and a drop in any is final, so the operator's refusals still refuse.
pub const FILTER_PRIORITY: i32 = 0;

/// The ICMP types a machine needs: echo reply, destination unreachable (path MTU discovery),
/// echo request, time exceeded, parameter problem.
const ICMP_TYPES: [u8; 5] = [0, 3, 8, 11, 12];

/// The ICMPv6 types a machine needs: the errors (unreachable, packet too big, time exceeded,
/// parameter problem), echo, multicast listener query, report and done (and MLDv2 reports), and
/// neighbour discovery (router solicitation and advertisement, neighbour solicitation and
/// advertisement) without which IPv6 does not work at all.
const ICMPV6_TYPES: [u8; 14] = [1, 2, 3, 4, 128, 129, 130, 131, 132, 133, 134, 135, 136, 143];

/// A filter rule's mark: `mesh-host:filter/WHAT`.
fn mark(what: &str) -> String {
    format!("mesh-host:filter/{what}")
}

/// What the derived filter admits.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct FilterSpec {
    /// Every opening the node's declaration holds, both paths.
    pub openings: Vec<Opening>,
    /// The private network's interface: ssh stays reachable through it.
    pub private: Option<String>,
    /// The private network's source ranges (the settings' `range` and `range_v6`): what comes in
    /// on its interface is the private network's only from these, as the guard judges it, so a
    /// peer relaying an outside host reaches neither ssh nor an opening from the private network.
    /// Empty in a store written before the filter knew them: the interface alone, as then.
    #[cfg_attr(feature = "serde", serde(default))]
    pub private_ranges: Vec<crate::Network>,
    /// The bridges the container runtime reports: what leaves them is forwarded.
    pub bridges: Vec<String>,
    /// The ports ssh listens on, kept reachable from the private network (from anywhere when the
    /// node has no private network: ssh is never closed by the flip).
    pub ssh: Vec<u16>,
    /// Where the operator reached ssh from when the node was raised converged (the peers of the
    /// ssh sessions open then): ssh's ports stay reachable from each of these addresses too, so
    /// a converged genesis never locks out the session it runs in.
    pub ssh_from: Vec<IpAddr>,
}

impl FilterSpec {
    fn check(&self) -> Result<()> {
        for i in self.private.iter().chain(&self.bridges) {
            check_exact_interface(i, "filter").map_err(|reason| Error::InvalidOpening {
                id: "filter".into(),
                reason: reason.to_string(),
            })?;
        }
        for o in &self.openings {
            o.validate()?;
        }
        Ok(())
    }

    /// The first rules of both chains: established and related traffic admitted, invalid
    /// packets dropped.
    fn head(&self) -> Result<Vec<RuleBody>> {
        self.check()?;
        Ok(vec![
            RuleBody::new()
                .ct_state(CtState::ESTABLISHED | CtState::RELATED)
                .accept()
                .comment(&mark("established")),
            RuleBody::new()
                .ct_state(CtState::INVALID)
                .drop()
                .comment(&mark("invalid")),
        ])
    }

    /// The input chain's rules, in order.
    pub fn input(&self) -> Result<Vec<RuleBody>> {
        let mut out = self.head()?;
        out.push(
            RuleBody::new()
                .iifname_eq("lo")
                .accept()
                .comment(&mark("loopback")),
        );
        for t in ICMP_TYPES {
            out.push(
                RuleBody::new()
                    .l4proto(L4Proto::Other(1))
                    .icmp_type(t)
                    .accept()
                    .comment(&mark(&format!("icmp/{t}"))),
            );
        }
        for t in ICMPV6_TYPES {
            out.push(
                RuleBody::new()
                    .l4proto(L4Proto::Other(58))
                    .icmp_type(t)
                    .accept()
                    .comment(&mark(&format!("icmpv6/{t}"))),
            );
        }
        for port in &self.ssh {
            for b in self.private_sources() {
                out.push(
                    b.tcp_dport(*port)
                        .accept()
                        .comment(&mark(&format!("ssh/{port}"))),
                );
            }
            for addr in &self.ssh_from {
                let b = match addr {
                    IpAddr::V4(a) => RuleBody::new().ip_saddr(*a, 32),
                    IpAddr::V6(a) => RuleBody::new().ip6_saddr(*a, 128),
                };
                out.push(
                    b.tcp_dport(*port)
                        .accept()
                        .comment(&mark(&format!("ssh/{port}/from/{addr}"))),
                );
            }
        }
        for o in self.openings.iter().filter(|o| o.path == Path::Incoming) {
            out.extend(self.opening(o));
        }
        Ok(out)
    }

    /// Where ssh is reached from: the private network (its interface, and each of its ranges
    /// when known), or anywhere when the node has none.
    fn private_sources(&self) -> Vec<RuleBody> {
        match &self.private {
            Some(i) => rules::private_matches(i, &self.private_ranges, Family::Inet),
            None => vec![RuleBody::new()],
        }
    }

    /// An opening's rules in the filter: one from the private network admits its ranges only.
    fn opening(&self, o: &Opening) -> Vec<RuleBody> {
        let site = Site::late(Family::Inet);
        match &self.private {
            Some(i) => rules::nft_bodies_within(o, site, (i, &self.private_ranges)),
            None => rules::nft_bodies(o, site),
        }
    }

    /// The forward chain's rules, in order.
    pub fn forward(&self) -> Result<Vec<RuleBody>> {
        let mut out = self.head()?;
        for b in &self.bridges {
            out.push(
                RuleBody::new()
                    .iifname_eq(b)
                    .accept()
                    .comment(&mark(&format!("leaving/{b}"))),
            );
        }
        for o in self.openings.iter().filter(|o| o.path == Path::Forwarded) {
            out.extend(self.opening(o));
        }
        Ok(out)
    }

    /// Adds the filter to `batch`: the mesh's table, both chains with a drop policy, emptied,
    /// then their rules. Loaded as one transaction with whatever else the batch holds.
    pub fn add_to(&self, batch: &mut Batch) -> Result<()> {
        let (input, forward) = (self.input()?, self.forward()?);
        batch.add_table(Family::Inet, MESH_TABLE, crate::netlink::TableFlags::NONE)?;
        for (chain, hook, bodies) in [
            (INPUT_CHAIN, Hook::Input, &input),
            (FORWARD_CHAIN, Hook::Forward, &forward),
        ] {
            let mut base = BaseChain::filter(hook, FILTER_PRIORITY);
            base.policy = Policy::Drop;
            batch.add_chain(Family::Inet, MESH_TABLE, chain, Some(&base))?;
            batch.flush(Family::Inet, MESH_TABLE, Some(chain))?;
            for b in bodies {
                batch.add_rule(Family::Inet, MESH_TABLE, chain, b, Position::Append)?;
            }
        }
        Ok(())
    }
}

/// Whether both chains stand at their hooks with a drop policy and exactly `spec`'s rules.
pub fn in_force(sock: &mut NfSocket, spec: &FilterSpec) -> Result<bool> {
    let chains = sock.chains(Some(Family::Inet))?;
    in_force_among(sock, &chains, spec)
}

/// [`in_force`], with the mesh's chains already listed.
fn in_force_among(sock: &mut NfSocket, chains: &[Chain], spec: &FilterSpec) -> Result<bool> {
    for (name, hook, bodies) in [
        (INPUT_CHAIN, Hook::Input, spec.input()?),
        (FORWARD_CHAIN, Hook::Forward, spec.forward()?),
    ] {
        let Some(c) = chains
            .iter()
            .find(|c| c.table == MESH_TABLE && c.name == name)
        else {
            return Ok(false);
        };
        let hooked = c
            .hook
            .as_ref()
            .is_some_and(|h| h.hook == hook && h.priority == FILTER_PRIORITY)
            && c.policy == Some(Policy::Drop);
        let rules = sock.rules_of(Family::Inet, MESH_TABLE, Some(name))?;
        let same = rules.len() == bodies.len()
            && rules
                .iter()
                .zip(&bodies)
                .all(|(r, b)| r.comment == b.comment && r.exprs == b.exprs);
        if !hooked || !same {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Puts the filter in force as `spec` says, in one transaction; `true` when it had to be
/// written. Idempotent. The mesh's chains are listed once for all it checks.
pub fn ensure(sock: &mut NfSocket, spec: &FilterSpec) -> Result<bool> {
    let chains = sock.chains(Some(Family::Inet))?;
    // The filter takes the guard's place: a guard chain beside it (put back by a resident host
    // that had not heard of the flip yet) goes in the same transaction.
    let guard: Vec<&str> = crate::guard::GUARD_CHAINS
        .iter()
        .map(|(name, _)| *name)
        .filter(|name| {
            chains
                .iter()
                .any(|c| c.table == MESH_TABLE && c.name == *name)
        })
        .collect();
    if guard.is_empty() && in_force_among(sock, &chains, spec)? {
        return Ok(false);
    }
    let mut batch = Batch::new();
    for name in guard {
        drop_chain(&mut batch, name)?;
    }
    // A chain at the wrong hook or priority cannot be changed in place: it is deleted and made
    // again in the same transaction.
    for c in chains.iter().filter(|c| c.table == MESH_TABLE) {
        let want = match c.name.as_str() {
            INPUT_CHAIN => Hook::Input,
            FORWARD_CHAIN => Hook::Forward,
            _ => continue,
        };
        let ok = c
            .hook
            .as_ref()
            .is_some_and(|h| h.hook == want && h.priority == FILTER_PRIORITY);
        if !ok {
            drop_chain(&mut batch, &c.name)?;
        }
    }
    spec.add_to(&mut batch)?;
    sock.send(&batch)?;
    Ok(true)
}

/// A chain of the mesh's table emptied and deleted, in `batch`.
fn drop_chain(batch: &mut Batch, name: &str) -> Result<()> {
    batch.flush(Family::Inet, MESH_TABLE, Some(name))?;
    batch.del_chain(Family::Inet, MESH_TABLE, name)
}

/// Adds the filter's removal to `batch` when its chains are there (on return).
pub fn remove_into(sock: &mut NfSocket, batch: &mut Batch) -> Result<bool> {
    let mut any = false;
    for c in sock.chains(Some(Family::Inet))? {
        if c.table == MESH_TABLE && (c.name == INPUT_CHAIN || c.name == FORWARD_CHAIN) {
            drop_chain(batch, &c.name)?;
            any = true;
        }
    }
    Ok(any)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::opening::{From, Proto};

    fn spec() -> FilterSpec {
        FilterSpec {
            openings: vec![
                Opening {
                    id: "web/http".into(),
                    port: 80,
                    proto: Proto::Tcp,
                    from: From::Anywhere,
                    path: Path::Incoming,
                },
                Opening {
                    id: "app/api".into(),
                    port: 8080,
                    proto: Proto::Tcp,
                    from: From::Interface("wg0".into()),
                    path: Path::Forwarded,
                },
            ],
            private: Some("wg0".into()),
            private_ranges: Vec::new(),
            bridges: vec!["docker0".into()],
            ssh: vec![22],
            ssh_from: Vec::new(),
        }
    }

    #[test]
    fn with_the_private_ranges_ssh_and_an_opening_from_the_private_network_need_interface_and_source(
    ) {
        let mut s = spec();
        s.private_ranges = vec![
            crate::Network {
                addr: "10.77.0.0".parse().unwrap(),
                len: 24,
            },
            crate::Network {
                addr: "fd77::".parse().unwrap(),
                len: 64,
            },
        ];
        let ssh: Vec<_> = s
            .input()
            .unwrap()
            .into_iter()
            .filter(|b| b.comment.as_deref() == Some("mesh-host:filter/ssh/22"))
            .map(|b| b.exprs)
            .collect();
        let v4 = RuleBody::new()
            .iifname_eq("wg0")
            .ip_saddr("10.77.0.0".parse().unwrap(), 24);
        let v6 = RuleBody::new()
            .iifname_eq("wg0")
            .ip6_saddr("fd77::".parse().unwrap(), 64);
        assert_eq!(
            ssh,
            [
                v4.clone().tcp_dport(22).accept().exprs,
                v6.clone().tcp_dport(22).accept().exprs
            ]
        );
        // The forwarded opening from wg0: one rule per range, each with the interface.
        let api: Vec<_> = s
            .forward()
            .unwrap()
            .into_iter()
            .filter(|b| {
                b.comment
                    .as_deref()
                    .is_some_and(|c| c.starts_with("mesh-host:app/api#"))
            })
            .map(|b| b.exprs)
            .collect();
        let tail = |b: RuleBody| {
            b.l4proto(L4Proto::Tcp)
                .ct_status_dnat()
                .ct_original_proto_dst_only(8080)
                .accept()
                .exprs
        };
        assert_eq!(api, [tail(v4), tail(v6)]);
        // The opening from anywhere is as it was.
        let anywhere = Opening {
            id: "web/http".into(),
            port: 80,
            proto: Proto::Tcp,
            from: From::Anywhere,
            path: Path::Incoming,
        };
        assert_eq!(
            s.opening(&anywhere)[0].exprs,
            rules::nft_bodies(&anywhere, Site::late(Family::Inet))[0].exprs
        );
    }

    #[test]
    fn input_admits_established_loopback_icmp_ssh_from_private_then_incoming_openings() {
        let marks: Vec<String> = spec()
            .input()
            .unwrap()
            .into_iter()
            .map(|b| b.comment.unwrap())
            .collect();
        assert_eq!(
            marks[..3],
            [
                "mesh-host:filter/established",
                "mesh-host:filter/invalid",
                "mesh-host:filter/loopback"
            ]
        );
        assert!(marks.contains(&"mesh-host:filter/icmpv6/135".to_string()));
        assert!(marks.contains(&"mesh-host:filter/icmp/3".to_string()));
        let ssh = marks
            .iter()
            .position(|m| m == "mesh-host:filter/ssh/22")
            .unwrap();
        let http = marks
            .iter()
            .position(|m| m.starts_with("mesh-host:web/http#"))
            .unwrap();
        assert!(ssh < http);
        assert!(!marks.iter().any(|m| m.starts_with("mesh-host:app/api#")));
        let ssh_body = &spec().input().unwrap()[ssh];
        assert_eq!(
            ssh_body.exprs,
            RuleBody::new()
                .iifname_eq("wg0")
                .tcp_dport(22)
                .accept()
                .exprs
        );
    }

    #[test]
    fn forward_admits_what_leaves_the_bridges_and_forwarded_openings_by_original_port() {
        let bodies = spec().forward().unwrap();
        let marks: Vec<String> = bodies.iter().map(|b| b.comment.clone().unwrap()).collect();
        assert_eq!(marks[2], "mesh-host:filter/leaving/docker0");
        assert!(marks[3].starts_with("mesh-host:app/api#"));
        assert_eq!(marks.len(), 4);
    }

    #[test]
    fn ssh_is_admitted_from_each_operator_address_beside_the_private_network() {
        let mut s = spec();
        s.ssh_from = vec![
            "192.0.2.30".parse().unwrap(),
            "2001:db8::30".parse().unwrap(),
        ];
        let bodies = s.input().unwrap();
        let find = |m: &str| {
            bodies
                .iter()
                .find(|b| b.comment.as_deref() == Some(m))
                .unwrap_or_else(|| panic!("no rule {m}"))
        };
        assert_eq!(
            find("mesh-host:filter/ssh/22/from/192.0.2.30").exprs,
            RuleBody::new()
                .ip_saddr("192.0.2.30".parse().unwrap(), 32)
                .tcp_dport(22)
                .accept()
                .exprs
        );
        assert_eq!(
            find("mesh-host:filter/ssh/22/from/2001:db8::30").exprs,
            RuleBody::new()
                .ip6_saddr("2001:db8::30".parse().unwrap(), 128)
                .tcp_dport(22)
                .accept()
                .exprs
        );
        assert!(bodies
            .iter()
            .any(|b| b.comment.as_deref() == Some("mesh-host:filter/ssh/22")));
    }

    #[test]
    fn a_pattern_for_a_bridge_is_refused() {
        let mut s = spec();
        s.bridges.push("br-*".into());
        assert!(s.input().unwrap_err().to_string().contains("pattern"));
    }
}
