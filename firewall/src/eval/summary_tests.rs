//! The summary of a verdict from hand-built parts: the state word and the sentence, per family and
//! interface (issue 30, point 4). The same words from a real netdev ingress refusal are in
//! `tests/kernel_summary.rs`.

use super::*;

fn rule(table: &str, chain: &str, text: &str) -> Decider {
    Decider {
        table: table.into(),
        chain: chain.into(),
        handle: Some(4),
        index: Some(0),
        text: text.into(),
    }
}

/// The netdev ingress refusal of the port on eth0.
fn ingress_port() -> Fate {
    Fate::Refused {
        by: rule("netdev filter", "ingress_eth0", "tcp dport 9000 drop"),
        why: Refusal::Port,
    }
}

fn ban() -> Fate {
    Fate::Refused {
        by: rule("inet filter", "input", "ip saddr 203.0.113.0/24 drop"),
        why: Refusal::Ban,
    }
}

fn policy() -> Fate {
    Fate::NotAdmitted {
        by: rule("inet filter", "input", "policy drop"),
    }
}

fn all(fam: Fam) -> Addrs {
    Addrs::all(fam)
}

fn net(s: &str) -> Addrs {
    let (a, len) = s.split_once('/').unwrap();
    let a: IpAddr = a.parse().unwrap();
    let fam = Fam::of(a);
    Addrs::cidr(fam, addrs::num(a), len.parse().unwrap())
}

fn part(fam: Fam, iif: &str, sources: Addrs, fate: Fate) -> Part {
    Part {
        fam,
        iif: iif.into(),
        sources,
        fate,
    }
}

fn verdict(parts: Vec<Part>) -> Verdict {
    Verdict { parts, none: None }
}

/// Every source of both families admitted on `iif`.
fn open_on(iif: &str) -> Vec<Part> {
    [Fam::V4, Fam::V6]
        .into_iter()
        .map(|f| part(f, iif, all(f), Fate::Admitted))
        .collect()
}

/// Both families arriving on `iif` ending in `fate`, every source.
fn whole_on(iif: &str, fate: &Fate) -> Vec<Part> {
    [Fam::V4, Fam::V6]
        .into_iter()
        .map(|f| part(f, iif, all(f), fate.clone()))
        .collect()
}

/// `iif` in ipv4 with the ban's sources refused and the rest admitted.
fn banned_on(iif: &str) -> Vec<Part> {
    let banned = net("203.0.113.0/24");
    vec![
        part(Fam::V4, iif, banned.complement(), Fate::Admitted),
        part(Fam::V4, iif, banned, ban()),
    ]
}

#[test]
fn every_way_admitting_every_source_is_present() {
    let v = verdict([open_on("eth0"), open_on("mesh0")].concat());
    assert_eq!(v.state(), "present");
    assert_eq!(v.describe(), "present");
    assert_eq!(v.decider(), None);
    assert_eq!(
        v.summary().clauses[0].where_(),
        "eth0, mesh0 (ipv4, ipv6)",
        "one admitted clause over both ways"
    );
}

#[test]
fn an_ingress_refusal_on_the_outside_interface_is_refused_there_not_present() {
    // The netdev ingress chain on eth0 drops the port; only the private interface admits.
    let v = verdict([whole_on("eth0", &ingress_port()), open_on("mesh0")].concat());
    assert_eq!(v.state(), "refused");
    assert_eq!(
        v.describe(),
        "REFUSED on eth0 (ipv4, ipv6) by the operator's rule netdev filter ingress_eth0: \
         tcp dport 9000 drop, which names the port; admitted on mesh0 (ipv4, ipv6)"
    );
    let d = v.decider().expect("a refused verdict has a deciding part");
    assert_eq!((d.iif.as_str(), d.fate.clone()), ("eth0", ingress_port()));
    // The parts arrive family first (every interface in ipv4, then in ipv6): the same words.
    let mut by_family = v.clone();
    by_family.parts.sort_by_key(|p| p.fam);
    assert_eq!(by_family.describe(), v.describe());
}

#[test]
fn an_interface_rule_refusing_one_family_on_eth0_is_refused_in_that_family() {
    // `iifname "eth0" meta nfproto ipv6 tcp dport 9000 drop`: eth0 admits ipv4 only.
    let by = Fate::Refused {
        by: rule(
            "inet filter",
            "input",
            "iifname \"eth0\" meta nfproto ipv6 tcp dport 9000 drop",
        ),
        why: Refusal::Port,
    };
    let v = verdict(vec![
        part(Fam::V4, "eth0", all(Fam::V4), Fate::Admitted),
        part(Fam::V4, "mesh0", all(Fam::V4), Fate::Admitted),
        part(Fam::V6, "eth0", all(Fam::V6), by),
        part(Fam::V6, "mesh0", all(Fam::V6), Fate::Admitted),
    ]);
    assert_eq!(v.state(), "refused");
    assert_eq!(
        v.describe(),
        "REFUSED on eth0 (ipv6) by the operator's rule inet filter input: iifname \"eth0\" meta \
         nfproto ipv6 tcp dport 9000 drop, which names the port; admitted on eth0 (ipv4), \
         mesh0 (ipv4, ipv6)"
    );
}

#[test]
fn a_ban_on_every_way_is_an_exception_said_once() {
    let v = verdict([banned_on("eth0"), banned_on("mesh0")].concat());
    assert_eq!(v.state(), "present");
    assert_eq!(
        v.describe(),
        "present, except from 203.0.113.0/24 (refused by the operator's rule inet filter \
         input: ip saddr 203.0.113.0/24 drop (a ban of these sources))"
    );
    assert_eq!(v.decider(), None);
}

#[test]
fn a_ban_on_one_interface_names_it() {
    let mut parts = banned_on("eth0");
    parts.push(part(Fam::V4, "mesh0", all(Fam::V4), Fate::Admitted));
    let v = verdict(parts);
    assert_eq!(v.state(), "present");
    assert_eq!(
        v.describe(),
        "present, except from 203.0.113.0/24 on eth0 (refused by the operator's rule inet \
         filter input: ip saddr 203.0.113.0/24 drop (a ban of these sources))"
    );
}

#[test]
fn a_ban_and_a_port_refusal_sharing_one_way_leave_it_admitting_nothing() {
    // eth0 in ipv4: the ban takes its sources, the port's refusal the rest: nothing admitted
    // there, though no single part is every source.
    let banned = net("203.0.113.0/24");
    let v = verdict(vec![
        part(Fam::V4, "eth0", banned.clone(), ban()),
        part(Fam::V4, "eth0", banned.complement(), ingress_port()),
        part(Fam::V4, "mesh0", all(Fam::V4), Fate::Admitted),
    ]);
    assert_eq!(v.state(), "refused");
    // The way said with its widest refusal, the ban ahead of it with its sources.
    assert_eq!(
        v.describe(),
        "REFUSED on eth0 (ipv4) by the operator's rule netdev filter ingress_eth0: tcp dport \
         9000 drop, which names the port; refused from 203.0.113.0/24 on eth0 (ipv4) by the \
         operator's rule inet filter input: ip saddr 203.0.113.0/24 drop (a ban of these \
         sources); admitted on mesh0 (ipv4)"
    );
    assert_eq!(v.decider().map(|p| p.fate.clone()), Some(ingress_port()));
}

#[test]
fn a_refusal_on_every_way_is_refused_with_its_rule() {
    let port = Fate::Refused {
        by: rule("inet filter", "input", "tcp dport 9000 drop"),
        why: Refusal::Port,
    };
    let v = verdict([whole_on("eth0", &port), whole_on("mesh0", &port)].concat());
    assert_eq!(v.state(), "refused");
    assert_eq!(
        v.describe(),
        "REFUSED on eth0, mesh0 (ipv4, ipv6) by the operator's rule inet filter input: tcp \
         dport 9000 drop, which names the port"
    );
}

#[test]
fn not_admitted_outranks_a_refused_way_and_leads_the_sentence() {
    let v = verdict(
        [
            whole_on("eth0", &ingress_port()),
            vec![
                part(Fam::V4, "mesh0", all(Fam::V4), policy()),
                part(Fam::V6, "mesh0", all(Fam::V6), Fate::Admitted),
            ],
        ]
        .concat(),
    );
    assert_eq!(v.state(), "not-admitted");
    assert_eq!(
        v.describe(),
        "NOT ADMITTED on mesh0 (ipv4): inet filter input: policy drop; refused on eth0 (ipv4, \
         ipv6) by the operator's rule netdev filter ingress_eth0: tcp dport 9000 drop, which \
         names the port; admitted on mesh0 (ipv6)"
    );
    assert_eq!(v.decider().map(|p| p.iif.as_str()), Some("mesh0"));
}

#[test]
fn a_doubt_outranks_everything_and_names_its_sources() {
    let doubt = Fate::Doubtful {
        by: rule(
            "inet filter",
            "input",
            "ip saddr 10.0.0.0/8 th sport 53 accept",
        ),
        what: "the source port".into(),
    };
    let private = net("10.0.0.0/8");
    let v = verdict(vec![
        part(Fam::V4, "eth0", private.clone(), doubt),
        part(Fam::V4, "eth0", private.complement(), policy()),
    ]);
    assert_eq!(v.state(), "doubtful");
    // The way admits nothing: the policy's drop, its widest, is said of the way.
    assert_eq!(
        v.describe(),
        "DOUBTFUL from 10.0.0.0/8 on eth0 (ipv4): inet filter input: ip saddr 10.0.0.0/8 th \
         sport 53 accept tests the source port, which cannot be told; not admitted on eth0 \
         (ipv4): inet filter input: policy drop"
    );
}

#[test]
fn no_way_to_ask_is_not_admitted_with_why() {
    let v = Verdict {
        parts: Vec::new(),
        none: Some("no DNAT rule translates tcp port 8080".into()),
    };
    assert_eq!(v.state(), "not-admitted");
    assert_eq!(
        v.describe(),
        "NOT ADMITTED: no DNAT rule translates tcp port 8080"
    );
}

#[test]
fn state_and_sentence_come_from_one_summary() {
    // Each of the shapes above: the state word is the sentence's, and every part is said.
    let shapes = vec![
        verdict([open_on("eth0"), open_on("mesh0")].concat()),
        verdict([whole_on("eth0", &ingress_port()), open_on("mesh0")].concat()),
        verdict([banned_on("eth0"), banned_on("mesh0")].concat()),
        verdict([whole_on("eth0", &policy()), banned_on("mesh0")].concat()),
    ];
    for v in shapes {
        let s = v.summary();
        assert_eq!(s.state, v.state());
        assert_eq!(s.text, v.describe());
        let lead = match s.state {
            "present" => "present",
            "refused" => "REFUSED",
            "not-admitted" => "NOT ADMITTED",
            _ => "DOUBTFUL",
        };
        assert!(s.text.starts_with(lead), "{s:#?}");
        // No part is left out of the sentence: its fate is said on its way.
        for p in &v.parts {
            assert!(
                s.clauses.iter().any(|c| c.fate == p.fate
                    && c.on.iter().any(|(n, f)| *n == p.iif && f.contains(&p.fam))),
                "{p:?} is in no clause: {s:#?}"
            );
        }
    }
}
