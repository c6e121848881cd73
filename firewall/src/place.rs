//! Where an opening's rule goes in a found chain, so that the operator's refusals stay first.
//!
//! An opening admits only what a layer would otherwise refuse *by default*: its policy drop, or
//! its catch-all drop or reject (a refusal that matches every new connection of the opening). So
//! its rule goes after every rule that refuses particular sources (a blocklist set, an address,
//! an interface, a jump to fail2ban's `f2b-*` chain) and just before the catch-all; a chain with
//! policy accept and no catch-all gets no rule at all. An operator's refusal of exactly the
//! opening's port is the operator's word: the opening is reported refused there, never written
//! ahead of it. An unconditional jump (`jump input_rules`, `-j DOCKER-USER`) is followed: a
//! catch-all inside the chain it reaches is where the rule goes.
//!
//! Rules are first reduced to [`Seen`]: from nf_tables expressions (native rules and
//! iptables-nft's, [`seen_nft`]) or from an `iptables-save` spec ([`seen_xt`]). Anything this
//! crate cannot read narrows a rule, so a rule it does not understand is never taken for a
//! catch-all: the host errs towards leaving the operator's rules first.

use crate::netlink::consts::{IPS_DST_NAT, NFT_REG_VERDICT};
use crate::netlink::{CmpOp, CtDirection, CtKey, CtState, Expr, MetaKey, PayloadBase, Verdict};
use std::borrow::Cow;
use std::collections::BTreeMap;

/// What a rule does when it matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Does {
    Accept,
    /// `drop` or `reject`.
    Refuse,
    Jump(String),
    Goto(String),
    Return,
    /// No verdict (counter, log, mark, …): the packet goes on to the next rule.
    Continue,
    /// A verdict this crate cannot follow (queue, a verdict map, an unknown target): it may drop.
    Unknown,
}

/// One rule of a found chain, reduced to what placement needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub does: Does,
    /// The layer-4 protocol it matches (`meta l4proto`, `-p`), if it names one.
    pub proto: Option<u8>,
    /// The destination ports it matches on the packet as it is (`th dport`, `--dport`,
    /// `--dports`), if it matches on them.
    pub dports: Option<Vec<u16>>,
    /// The original destination ports (`ct original proto-dst`, `--ctorigdstport`).
    pub orig_dports: Option<Vec<u16>>,
    /// Whether it can match a new connection (`ct state established,related` cannot).
    pub new_ok: bool,
    /// It matches only connections whose destination was translated (`ct status dnat`).
    pub dnat_only: bool,
    /// It matches on the interface a packet arrives on or leaves by, and nothing else narrows
    /// it: a refusal by interface is a catch-all for what arrives there (`-i eth0 -j DROP` in
    /// DOCKER-USER refuses everything from outside), while an accept or a jump by interface is
    /// particular.
    pub by_iface: bool,
    /// It matches on the address family or ethertype (`meta nfproto`, `meta protocol`): a
    /// refusal so narrowed is a catch-all for that family, an accept is particular (`meta
    /// protocol arp accept` in a netdev chain accepts no opening's packet).
    pub by_family: bool,
    /// It matches on anything else that narrows what it applies to: addresses, sets, marks,
    /// rates, or something this crate does not read.
    pub narrow: bool,
    /// The mesh's full mark, when the rule carries one.
    pub mark: Option<String>,
    /// The rule as an operator reads it (an iptables spec, or `handle N` for an nft rule).
    pub text: String,
}

impl Seen {
    /// A rule that matches everything and does `does`.
    pub fn plain(does: Does, text: &str) -> Seen {
        Seen {
            does,
            proto: None,
            dports: None,
            orig_dports: None,
            new_ok: true,
            dnat_only: false,
            by_iface: false,
            by_family: false,
            narrow: false,
            mark: None,
            text: text.to_string(),
        }
    }
}

/// The opening as a layer sees its packets: a new connection of `proto` to `port`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Want {
    pub proto: u8,
    pub port: u16,
    /// Forwarded to a container (its port translated by the runtime's DNAT).
    pub forwarded: bool,
    /// The layer runs before destination NAT (ingress, prerouting below -100): the packet still
    /// carries the port it was sent to.
    pub before_dnat: bool,
}

impl Want {
    /// Whether the packet's own destination port is the opening's port in this layer.
    fn port_on_packet(&self) -> bool {
        !self.forwarded || self.before_dnat
    }
}

/// How a rule's match relates to the opening's new connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fit {
    /// It never matches them.
    No,
    /// It matches some of them (some sources, some interfaces, or it cannot be told).
    Some,
    /// It matches exactly this port, from everywhere.
    Port,
    /// It matches every one of them, and more.
    All,
}

/// How `r` relates to the opening's new connections.
pub fn fit(r: &Seen, w: &Want) -> Fit {
    if !r.new_ok || r.proto.is_some_and(|p| p != w.proto) {
        return Fit::No;
    }
    let mut port = false;
    if let Some(ports) = &r.dports {
        if !w.port_on_packet() {
            // After DNAT the packet carries the container's port, which this crate does not know.
            return Fit::Some;
        }
        if !ports.contains(&w.port) {
            return Fit::No;
        }
        port = true;
    }
    if let Some(ports) = &r.orig_dports {
        if !ports.contains(&w.port) {
            return Fit::No;
        }
        port = true;
    }
    if r.dnat_only && !w.forwarded {
        return Fit::No;
    }
    if r.narrow || ((r.by_iface || r.by_family) && r.does != Does::Refuse) {
        Fit::Some
    } else if port {
        Fit::Port
    } else {
        Fit::All
    }
}

/// The chains of one table, as placement reads them.
pub trait Chains {
    /// A chain's rules, in order.
    fn rules(&self, chain: &str) -> Option<&[Seen]>;

    /// The indices of a chain's rules that are not the mesh's, in order: placement reads only
    /// those, so its cost follows the operator's rules, not the openings already written.
    fn unmarked(&self, chain: &str) -> Option<Cow<'_, [usize]>> {
        let rules = self.rules(chain)?;
        Some(Cow::Owned(unmarked_of(rules)))
    }
}

/// The indices of the rules without a mesh mark.
pub fn unmarked_of(rules: &[Seen]) -> Vec<usize> {
    rules
        .iter()
        .enumerate()
        .filter(|(_, r)| r.mark.is_none())
        .map(|(i, _)| i)
        .collect()
}

impl Chains for BTreeMap<String, Vec<Seen>> {
    fn rules(&self, chain: &str) -> Option<&[Seen]> {
        self.get(chain).map(Vec::as_slice)
    }
}

/// Where an opening stands in one layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// The layer refuses nothing of it by default, or already accepts it: no rule.
    NotNeeded(String),
    /// Its rule goes in `chain`, before the rule at index `before` (the catch-all), or at the
    /// end when `None` (the chain's policy is drop).
    At {
        chain: String,
        before: Option<usize>,
    },
    /// A rule on its way decides by something this crate cannot follow (a verdict map, a
    /// queue, an unknown target): whether the layer admits it cannot be told, and it is never
    /// reported admitted. `then` is where it would go otherwise.
    Doubtful { rule: String, then: Box<Place> },
    /// The operator refuses exactly this port in `chain`: the opening is not admitted there.
    Refused { chain: String, rule: String },
}

/// How deep unconditional jumps are followed.
const MAX_DEPTH: u8 = 8;

enum Walk {
    Done(Place),
    /// Fell off the end of a jumped-to chain (or `return`): the caller goes on.
    Back,
    /// Fell off the end of a chain reached by `goto`: the base chain's policy decides.
    End,
}

/// Where the opening `w` goes in the base chain `base` (policy drop or not).
pub fn place(chains: &dyn Chains, base: &str, policy_drop: bool, w: &Want) -> Place {
    let mut doubt = None;
    let place = match walk(chains, base, w, 0, &mut doubt) {
        Walk::Done(p) => p,
        Walk::Back | Walk::End if policy_drop => Place::At {
            chain: base.to_string(),
            before: None,
        },
        Walk::Back | Walk::End => Place::NotNeeded(format!(
            "{base} has policy accept and no catch-all refusal for it"
        )),
    };
    match (doubt, place) {
        // The operator's own refusal of the port stands whatever came before it.
        (_, p @ Place::Refused { .. }) | (None, p) => p,
        (Some(rule), p) => Place::Doubtful {
            rule,
            then: Box::new(p),
        },
    }
}

fn walk(chains: &dyn Chains, chain: &str, w: &Want, depth: u8, doubt: &mut Option<String>) -> Walk {
    let (Some(rules), Some(unmarked)) = (chains.rules(chain), chains.unmarked(chain)) else {
        // A chain that cannot be read is no catch-all this host can place a rule before.
        return Walk::Back;
    };
    for &i in unmarked.iter() {
        let r = &rules[i];
        let f = fit(r, w);
        match (&r.does, f) {
            (_, Fit::No) => {}
            (Does::Refuse, Fit::All) => {
                return Walk::Done(Place::At {
                    chain: chain.to_string(),
                    before: Some(i),
                })
            }
            (Does::Refuse, Fit::Port) => {
                return Walk::Done(Place::Refused {
                    chain: chain.to_string(),
                    rule: r.text.clone(),
                })
            }
            (Does::Accept, Fit::All | Fit::Port) => {
                return Walk::Done(Place::NotNeeded(format!(
                    "{chain} already accepts it ({})",
                    r.text
                )))
            }
            (Does::Jump(to) | Does::Goto(to), Fit::All | Fit::Port) if depth < MAX_DEPTH => {
                let goto = matches!(r.does, Does::Goto(_));
                match walk(chains, to, w, depth + 1, doubt) {
                    Walk::Done(p) => return Walk::Done(p),
                    Walk::End => return Walk::End,
                    Walk::Back if goto => return Walk::End,
                    Walk::Back => {}
                }
            }
            (Does::Return, Fit::All | Fit::Port) => return Walk::Back,
            (Does::Unknown, _) => {
                doubt.get_or_insert_with(|| format!("in chain {chain}: {}", r.text));
            }
            // A refusal of some sources, a conditional jump, an accept of some, an unknown
            // verdict: the operator's, and the opening's rule goes after it.
            _ => {}
        }
    }
    Walk::Back
}

/// Whether a marked rule at index `at` of `chain` stands where [`place`] would put it: before
/// the catch-all (`before`), with no rule between that could refuse the opening. Only the
/// unmarked rules between are read.
pub fn well_placed(
    chains: &dyn Chains,
    chain: &str,
    at: usize,
    before: Option<usize>,
    w: &Want,
) -> bool {
    let (Some(rules), Some(unmarked)) = (chains.rules(chain), chains.unmarked(chain)) else {
        return false;
    };
    let end = before.unwrap_or(rules.len());
    let from = unmarked.partition_point(|&i| i <= at);
    at < end
        && unmarked[from..].iter().take_while(|&&i| i < end).all(|&i| {
            let r = &rules[i];
            fit(r, w) == Fit::No || matches!(r.does, Does::Accept | Does::Continue)
        })
}

// ---------------------------------------------------------------------------------------------
// Reading nf_tables rules.

/// What a register holds while a rule is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reg {
    L4Proto,
    /// `meta nfproto` or `meta protocol`: the family, which narrows nothing an opening cares
    /// about (its rules are written per family).
    Family,
    DPort,
    OrigDPort,
    Iface,
    CtState(Option<u32>),
    CtStatus(Option<u32>),
    Other,
}

/// x_tables targets that never end a packet's way through a chain (the evaluator reads MARK and
/// CONNMARK for what they set before it takes the rest as going on).
pub(crate) const XT_GOING_ON: &[&str] = &[
    "LOG",
    "NFLOG",
    "ULOG",
    "MARK",
    "CONNMARK",
    "TCPMSS",
    "NOTRACK",
    "CT",
    "CLASSIFY",
    "DSCP",
    "TOS",
    "TTL",
    "HL",
    "SECMARK",
    "CONNSECMARK",
    "AUDIT",
    "TRACE",
    "CHECKSUM",
    "TEE",
    "IDLETIMER",
    "LED",
    "SET",
    "comment",
];

/// Reduces a listed nf_tables rule to what placement needs. `mark` is the rule's mesh mark, if
/// any; `text` how it is shown.
pub fn seen_nft(exprs: &[Expr], mark: Option<String>, text: String) -> Seen {
    let mut s = Seen {
        mark,
        text,
        ..Seen::plain(Does::Continue, "")
    };
    let mut regs: BTreeMap<u32, Reg> = BTreeMap::new();
    for e in exprs {
        match e {
            Expr::Meta { key, dreg } => {
                let r = match key {
                    MetaKey::L4Proto => Reg::L4Proto,
                    MetaKey::NfProto | MetaKey::Protocol => Reg::Family,
                    MetaKey::IifName | MetaKey::OifName | MetaKey::Iif | MetaKey::Oif => Reg::Iface,
                    _ => Reg::Other,
                };
                regs.insert(*dreg, r);
            }
            Expr::Payload {
                base: PayloadBase::Transport,
                offset: 2,
                len: 2,
                dreg,
            } => {
                regs.insert(*dreg, Reg::DPort);
            }
            Expr::Payload { dreg, .. } => {
                regs.insert(*dreg, Reg::Other);
            }
            Expr::Ct {
                key,
                dreg,
                direction,
            } => {
                let r = match (key, direction) {
                    (CtKey::State, None) => Reg::CtState(None),
                    (CtKey::Status, None) => Reg::CtStatus(None),
                    (CtKey::ProtoDst, Some(CtDirection::Original)) => Reg::OrigDPort,
                    _ => Reg::Other,
                };
                regs.insert(*dreg, r);
            }
            Expr::Bitwise {
                sreg, dreg, mask, ..
            } => {
                let m = (mask.len() == 4)
                    .then(|| u32::from_ne_bytes([mask[0], mask[1], mask[2], mask[3]]));
                let r = match regs.get(sreg) {
                    Some(Reg::CtState(None)) => Reg::CtState(m),
                    Some(Reg::CtStatus(None)) => Reg::CtStatus(m),
                    _ => Reg::Other,
                };
                regs.insert(*dreg, r);
            }
            Expr::Cmp { sreg, op, data } => cmp(
                &mut s,
                regs.get(sreg).copied().unwrap_or(Reg::Other),
                *op,
                data,
            ),
            Expr::Immediate { dreg, .. } if *dreg != NFT_REG_VERDICT => {
                regs.insert(*dreg, Reg::Other);
            }
            Expr::Immediate { .. } => {
                if let Some(v) = e.as_verdict() {
                    s.does = match v {
                        Verdict::Accept => Does::Accept,
                        Verdict::Drop => Does::Refuse,
                        Verdict::Jump(c) => Does::Jump(c.clone()),
                        Verdict::Goto(c) => Does::Goto(c.clone()),
                        Verdict::Return => Does::Return,
                        Verdict::Continue => Does::Continue,
                        _ => Does::Unknown,
                    };
                }
            }
            Expr::Counter { .. } => {}
            Expr::Lookup { dreg, .. } => {
                // A set lookup narrows; a verdict map decides by what it finds.
                if *dreg == Some(NFT_REG_VERDICT) {
                    s.does = Does::Unknown;
                }
                s.narrow = true;
            }
            Expr::Fib { dreg, .. } => {
                regs.insert(*dreg, Reg::Other);
            }
            Expr::Raw { name, .. } => match name.as_str() {
                "log" | "counter" | "notrack" | "dynset" | "last" => {}
                "reject" => s.does = Does::Refuse,
                "match" => match e.xt_name().as_deref() {
                    Some("comment") => {}
                    // `-m conntrack --ctstate S` and `-m state --state S`, which iptables-nft
                    // keeps as x_tables matches: a condition on the connection's state only.
                    Some(m @ ("conntrack" | "state")) => {
                        match e.xt_info().and_then(|(rev, info)| xt_states(m, rev, &info)) {
                            Some(states) => s.new_ok &= states & CtState::NEW.0 != 0,
                            None => s.narrow = true,
                        }
                    }
                    _ => s.narrow = true,
                },
                "target" => {
                    let t = e.xt_name().unwrap_or_default();
                    s.does = if t == "REJECT" {
                        Does::Refuse
                    } else if XT_GOING_ON.contains(&t.as_str()) {
                        Does::Continue
                    } else {
                        Does::Unknown
                    };
                }
                _ => s.narrow = true,
            },
        }
    }
    s
}

/// The states an x_tables `conntrack` or `state` match admits, when that is all it matches on
/// (the bits are `ct state`'s: `NEW` is 8). `None` for anything else it checks, or inverted.
fn xt_states(name: &str, rev: u32, info: &[u8]) -> Option<u32> {
    let u16_at = |at: usize| Some(u16::from_ne_bytes(info.get(at..at + 2)?.try_into().ok()?));
    match (name, rev) {
        // struct xt_state_info { unsigned int statemask; }
        ("state", _) => Some(u32::from_ne_bytes(info.get(..4)?.try_into().ok()?)),
        // struct xt_conntrack_mtinfo1: eight addresses (128 bytes), two u32 (136), l4proto and
        // four ports as u16 (146), then u8 match_flags, invert_flags, state_mask.
        ("conntrack", 1) => {
            let (flags, invert, states) = (*info.get(146)?, *info.get(147)?, *info.get(148)?);
            (flags == 1 && invert == 0).then_some(u32::from(states))
        }
        // xt_conntrack_mtinfo2 and 3: the same, with u16 flags and masks.
        ("conntrack", 2 | 3) => {
            let (flags, invert, states) = (u16_at(146)?, u16_at(148)?, u16_at(150)?);
            (flags == 1 && invert == 0).then_some(u32::from(states))
        }
        _ => None,
    }
}

fn cmp(s: &mut Seen, reg: Reg, op: CmpOp, data: &[u8]) {
    let be16 = || (data.len() == 2).then(|| u16::from_be_bytes([data[0], data[1]]));
    let ne32 =
        || (data.len() == 4).then(|| u32::from_ne_bytes([data[0], data[1], data[2], data[3]]));
    match (reg, op) {
        (Reg::L4Proto, CmpOp::Eq) if data.len() == 1 => s.proto = Some(data[0]),
        (Reg::Family, _) => s.by_family = true,
        (Reg::Iface, CmpOp::Eq | CmpOp::Neq) => s.by_iface = true,
        (Reg::DPort, CmpOp::Eq) => match be16() {
            Some(p) => s.dports = Some(vec![p]),
            None => s.narrow = true,
        },
        (Reg::OrigDPort, CmpOp::Eq) => match be16() {
            Some(p) => s.orig_dports = Some(vec![p]),
            None => s.narrow = true,
        },
        (Reg::CtState(Some(mask)), _) if ne32() == Some(0) => {
            // `ct state S` is `(state & S) != 0`; `ct state != S` is `(state & S) == 0`.
            let new_in = mask & CtState::NEW.0 != 0;
            match op {
                CmpOp::Neq => s.new_ok &= new_in,
                CmpOp::Eq => s.new_ok &= !new_in,
                _ => s.narrow = true,
            }
        }
        (Reg::CtState(None), CmpOp::Eq) => match ne32() {
            Some(v) => s.new_ok &= v == CtState::NEW.0,
            None => s.narrow = true,
        },
        (Reg::CtStatus(Some(mask)), CmpOp::Neq) if mask == IPS_DST_NAT && ne32() == Some(0) => {
            s.dnat_only = true
        }
        _ => s.narrow = true,
    }
}

// ---------------------------------------------------------------------------------------------
// Reading iptables-save specs.

/// x_tables targets that end the packet's way in a refusal.
const XT_REFUSE: &[&str] = &["DROP", "REJECT"];

/// Reduces one `iptables-save` rule spec (what follows `-A CHAIN`) to what placement needs.
/// `chains` are the table's user chains, so `-j NAME` is known for a jump; `mark` is the rule's
/// mesh mark, if any.
pub fn seen_xt(spec: &str, chains: &[String], mark: Option<String>) -> Seen {
    let mut s = Seen {
        mark,
        text: spec.to_string(),
        ..Seen::plain(Does::Continue, "")
    };
    let Some(words) = crate::rules::split_spec(spec) else {
        s.narrow = true;
        s.does = Does::Unknown;
        return s;
    };
    let mut i = 0;
    let mut negate = false;
    let mut module = String::new();
    let arg = |i: usize| words.get(i + 1).map(String::as_str).unwrap_or("");
    while i < words.len() {
        let w = words[i].as_str();
        let mut took = 1;
        match w {
            "!" => {
                negate = true;
                i += 1;
                continue;
            }
            "-p" | "--protocol" => {
                took = 2;
                match (negate, arg(i)) {
                    (false, "tcp" | "6") => s.proto = Some(6),
                    (false, "udp" | "17") => s.proto = Some(17),
                    (false, "all" | "0") => {}
                    (false, "icmp" | "1") => s.proto = Some(1),
                    (false, "ipv6-icmp" | "icmpv6" | "58") => s.proto = Some(58),
                    _ => s.narrow = true,
                }
            }
            "-m" | "--match" => {
                took = 2;
                module = arg(i).to_string();
            }
            "-j" | "--jump" | "-g" | "--goto" => {
                let target = arg(i);
                let goto = matches!(w, "-g" | "--goto");
                s.does = if target == "ACCEPT" {
                    Does::Accept
                } else if XT_REFUSE.contains(&target) {
                    Does::Refuse
                } else if target == "RETURN" {
                    Does::Return
                } else if chains.iter().any(|c| c == target) {
                    if goto {
                        Does::Goto(target.to_string())
                    } else {
                        Does::Jump(target.to_string())
                    }
                } else if XT_GOING_ON.contains(&target) {
                    Does::Continue
                } else {
                    Does::Unknown
                };
                // What follows is the target's options.
                break;
            }
            "-c" | "--set-counters" => took = 3,
            "-i" | "--in-interface" | "-o" | "--out-interface" => {
                took = 2;
                s.by_iface = true;
                // A negated interface is still only an interface.
                negate = false;
            }
            "--dport" | "--destination-port" if !negate => {
                took = 2;
                match arg(i).parse::<u16>() {
                    Ok(p) => s.dports = Some(vec![p]),
                    Err(_) => s.narrow = true,
                }
            }
            "--dports" | "--destination-ports" if !negate && module == "multiport" => {
                took = 2;
                let ports: Option<Vec<u16>> =
                    arg(i).split(',').map(|p| p.parse::<u16>().ok()).collect();
                match ports {
                    Some(p) => s.dports = Some(p),
                    None => s.narrow = true,
                }
            }
            "--ctorigdstport" if !negate => {
                took = 2;
                match arg(i).parse::<u16>() {
                    Ok(p) => s.orig_dports = Some(vec![p]),
                    Err(_) => s.narrow = true,
                }
            }
            "--ctstate" | "--state" if !negate => {
                took = 2;
                let states: Vec<&str> = arg(i).split(',').collect();
                if states == ["DNAT"] {
                    s.dnat_only = true;
                } else {
                    s.new_ok &= states.contains(&"NEW");
                }
            }
            "--comment" if module == "comment" => took = 2,
            _ => {
                // Any other option narrows the rule: addresses, interfaces, sets, rates, flags,
                // and everything not read here. An option's value is skipped with it.
                s.narrow = true;
                if words
                    .get(i + 1)
                    .is_some_and(|n| !n.starts_with('-') || n == "-")
                {
                    took = 2;
                }
            }
        }
        if negate {
            s.narrow = true;
        }
        negate = false;
        i += took;
    }
    s
}

#[cfg(test)]
mod tests;
