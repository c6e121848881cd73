//! The random found rulesets and openings the property is run on: the shapes found firewalls
//! have (bans by set, by chain, by verdict map and by a dynamic set; shared and nested chains;
//! both families in one `inet` table or in `ip` and `ip6` tables).

use super::*;

/// How a generated ruleset refuses its banned sources.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Bans {
    None,
    /// `ip saddr @ban4 drop`: a named set.
    Set,
    /// `jump bans`: a chain of its own refusing each address.
    Chain,
    /// `ip saddr vmap { 192.0.2.40 : drop, … }`: a verdict map.
    Vmap,
    /// `ip saddr @dyn4 drop` over a dynamic set that a rule adds to (`tcp dport 23 add @dyn4
    /// { ip saddr } drop`: a trap port, whose visitors are banned from then on).
    Dynset,
}

impl Bans {
    const ALL: [Bans; 5] = [Bans::None, Bans::Set, Bans::Chain, Bans::Vmap, Bans::Dynset];

    /// The banned sources, per family.
    pub(super) fn sources(self, fam: Fam) -> &'static [&'static str] {
        match (self, fam) {
            (Bans::None, _) => &[],
            (Bans::Dynset, Fam::V4) => &["192.0.2.40/32", "203.0.113.7/32"],
            (_, Fam::V4) => &["192.0.2.40/32", "203.0.113.0/24"],
            (_, Fam::V6) => &["2001:db8:1::40/128"],
        }
    }
}

/// One generated found ruleset: its text, and what the probes' source regions need of it.
pub(super) struct Found {
    pub(super) text: String,
    pub(super) bans: Bans,
    /// Written as `table ip` and `table ip6` rather than one `table inet`.
    pub(super) split: bool,
}

/// Lines of a ruleset, each for both families or one: an `inet` table takes them all, a
/// family's own table those for both and its own.
#[derive(Default)]
struct Lines(Vec<(Option<Fam>, String)>);

impl Lines {
    fn both(&mut self, l: impl Into<String>) {
        self.0.push((None, l.into()));
    }
    fn v4(&mut self, l: impl Into<String>) {
        self.0.push((Some(Fam::V4), l.into()));
    }
    fn v6(&mut self, l: impl Into<String>) {
        self.0.push((Some(Fam::V6), l.into()));
    }
    fn render(&self, fam: Option<Fam>) -> String {
        self.0
            .iter()
            .filter(|(f, _)| fam.is_none() || f.is_none() || *f == fam)
            .map(|(_, l)| format!("{l}\n"))
            .collect()
    }
}

/// One random found ruleset of the shapes above.
pub(super) fn ruleset(rng: &mut fuzz::Rng) -> Found {
    let bans = Bans::ALL[rng.below(Bans::ALL.len())];
    let ban_verdict = if rng.bool() { "jump shared" } else { "drop" };
    let bans_forward = bans != Bans::None && rng.bool();
    let limits = rng.one_in(3);
    let vmap = rng.bool();
    let split = rng.one_in(3);
    let mut l = Lines::default();
    match bans {
        Bans::Set => {
            l.v4(" set ban4 { type ipv4_addr; flags interval; elements = { 192.0.2.40, 203.0.113.0/24 } }");
            l.v6(" set ban6 { type ipv6_addr; elements = { 2001:db8:1::40 } }");
        }
        Bans::Dynset => {
            l.v4(" set dyn4 { type ipv4_addr; size 65535; flags dynamic; elements = { 192.0.2.40, 203.0.113.7 } }");
            l.v6(" set dyn6 { type ipv6_addr; size 65535; flags dynamic; elements = { 2001:db8:1::40 } }");
        }
        _ => {}
    }
    if limits {
        l.v4(" set rl4 { type ipv4_addr; flags dynamic; timeout 1m; }");
        l.v4(" set cl4 { type ipv4_addr; flags dynamic; }");
    }
    // The chain every refusal ends in: shared by input and, where forward ends there, forward.
    l.both(" chain shared {");
    if rng.bool() {
        l.both("  log prefix \"found drop: \"");
    }
    l.both("  meta l4proto tcp reject with tcp reset");
    l.both(if rng.bool() { "  drop" } else { "  reject" });
    l.both(" }");
    // Nested: the outside's refusal may pass through a chain of its own on the way there (a
    // router's `input_wan → reject_from_wan → handle_reject`).
    let wan_end = if rng.bool() {
        l.both(" chain reject_from_wan {");
        if rng.bool() {
            l.both("  counter");
        }
        l.both("  jump shared");
        l.both(" }");
        "reject_from_wan"
    } else {
        "shared"
    };
    l.both(" chain wan_in {");
    l.both(format!("  tcp dport {{ {} }} accept", PORTS[rng.below(2)]));
    l.both(format!("  jump {wan_end}"));
    l.both(" }");
    l.both(" chain lan_in {\n  accept\n }");
    // The ban's rule(s) where a hook meets them; a chain of bans is shared between the hooks
    // that jump to it.
    let ban_rules = |l: &mut Lines| match bans {
        Bans::None => {}
        Bans::Set => {
            l.v4(format!("  ip saddr @ban4 {ban_verdict}"));
            l.v6(format!("  ip6 saddr @ban6 {ban_verdict}"));
        }
        Bans::Chain => l.both("  jump bans"),
        Bans::Vmap => {
            l.v4(format!(
                "  ip saddr vmap {{ 192.0.2.40 : {ban_verdict}, 203.0.113.0/24 : {ban_verdict} }}"
            ));
            l.v6(format!(
                "  ip6 saddr vmap {{ 2001:db8:1::40 : {ban_verdict} }}"
            ));
        }
        Bans::Dynset => {
            l.v4(format!("  ip saddr @dyn4 {ban_verdict}"));
            l.v6(format!("  ip6 saddr @dyn6 {ban_verdict}"));
        }
    };
    if bans == Bans::Chain {
        l.both(" chain bans {");
        l.v4(format!(
            "  ip saddr {{ 192.0.2.40, 203.0.113.0/24 }} {ban_verdict}"
        ));
        l.v6(format!("  ip6 saddr 2001:db8:1::40 {ban_verdict}"));
        l.both(" }");
    }
    // input
    let policy = if rng.bool() { "drop" } else { "accept" };
    l.both(" chain input {");
    l.both(format!(
        "  type filter hook input priority filter; policy {policy};"
    ));
    l.both("  iif \"lo\" accept\n  ct state established,related accept");
    ban_rules(&mut l);
    if bans == Bans::Dynset {
        // The trap: a source that tries port 23 is banned from then on.
        l.v4("  tcp dport 23 add @dyn4 { ip saddr } drop");
        l.v6("  tcp dport 23 add @dyn6 { ip6 saddr } drop");
    }
    if limits {
        l.v4("  ct state new add @rl4 { ip saddr limit rate over 10/second } drop");
        l.v4("  ct state new add @cl4 { ip saddr ct count over 20 } drop");
    }
    l.both("  meta l4proto ipv6-icmp accept\n  meta l4proto icmp accept");
    if rng.bool() {
        l.both(format!(
            "  tcp dport {} accept",
            PORTS[rng.below(PORTS.len())]
        ));
    }
    if vmap {
        l.both("  iifname vmap { \"eth0\" : jump wan_in, \"lan0\" : jump lan_in }");
    } else {
        l.both("  iifname \"eth0\" jump wan_in\n  iifname \"lan0\" jump lan_in");
    }
    match rng.below(3) {
        0 => l.both("  jump shared"),
        1 => l.both("  reject"),
        _ => {}
    }
    l.both(" }");
    // forward
    l.both(" chain forward {");
    l.both("  type filter hook forward priority filter; policy drop;");
    l.both("  ct state established,related accept");
    if bans_forward {
        ban_rules(&mut l);
    }
    l.both("  iifname \"lan0\" accept");
    if rng.bool() {
        l.both("  iifname \"eth0\" jump wan_in");
    } else {
        l.both("  jump shared");
    }
    l.both(" }");
    let mut text = String::from("flush ruleset\n");
    if split {
        for (family, fam) in [("ip", Fam::V4), ("ip6", Fam::V6)] {
            text.push_str(&format!("table {family} found {{\n"));
            text.push_str(&l.render(Some(fam)));
            text.push_str("}\n");
        }
    } else {
        text.push_str("table inet found {\n");
        text.push_str(&l.render(None));
        text.push_str("}\n");
    }
    Found { text, bans, split }
}

pub(super) fn openings(rng: &mut fuzz::Rng) -> Vec<Opening> {
    let n = 1 + rng.below(3);
    let mut ports: Vec<u16> = PORTS.to_vec();
    let mut out = Vec::new();
    for i in 0..n {
        let port = ports.remove(rng.below(ports.len()));
        let net = |a: &str, len| firewall::Network {
            addr: a.parse().unwrap(),
            len,
        };
        let from = match rng.below(3) {
            0 => firewall::opening::From::Anywhere,
            1 => firewall::opening::From::Networks(vec![
                net("192.0.2.0", 24),
                net("2001:db8:1::", 64),
            ]),
            _ => firewall::opening::From::Networks(vec![net("198.51.100.0", 24)]),
        };
        out.push(Opening {
            id: format!("o{i}"),
            port,
            proto: firewall::Proto::Tcp,
            from,
            path: firewall::Path::Incoming,
        });
    }
    out
}
