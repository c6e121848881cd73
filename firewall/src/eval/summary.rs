//! An opening's verdict summarised from its parts, grouped by family and interface: the state
//! word scripts read and the sentence a person reads, computed once, from the same parts, for
//! `firewall status` (text and `--json`), `apply`'s line and the briefing.
//!
//! Every interface a verdict asks about is a way in ([`super::Iface::outside`], or the one
//! interface an opening names), so a family on an interface where no source is admitted is a
//! way in that admits nothing: the opening is not *present*, whatever another interface admits.

use super::addrs::{Addrs, Fam};
use super::opening::{Part, Verdict};
use super::{Fate, Refusal};

/// Parts that end alike, where they hold and for which sources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Clause {
    pub fate: Fate,
    /// Each interface with the families it holds for, in the order the parts were asked.
    pub on: Vec<(String, Vec<Fam>)>,
    /// The sources, when it is said of part of its ways' sources (a ban); `None` when said of
    /// the whole way: what it admits, or the widest refusal of a way that admits nothing.
    pub from: Option<Addrs>,
    /// Whether it holds on every interface asked in its families.
    pub everywhere: bool,
    /// The first part of the verdict it was built from.
    pub first: usize,
}

impl Clause {
    /// `eth0, mesh0 (ipv4, ipv6)`: interfaces holding for the same families said together.
    pub fn where_(&self) -> String {
        let mut runs: Vec<(Vec<&str>, &[Fam])> = Vec::new();
        for (iif, fams) in &self.on {
            match runs.iter_mut().find(|(_, f)| *f == fams.as_slice()) {
                Some((names, _)) => names.push(iif),
                None => runs.push((vec![iif], fams)),
            }
        }
        runs.iter()
            .map(|(names, fams)| {
                let fams: Vec<&str> = fams.iter().map(|f| f.name()).collect();
                format!("{} ({})", names.join(", "), fams.join(", "))
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// How the clause reads after its first word: `on eth0 (ipv4) by the operator's rule …`.
    fn rest(&self) -> String {
        let from = match &self.from {
            Some(s) => format!("from {s} "),
            None => String::new(),
        };
        let by = match &self.fate {
            Fate::Admitted => String::new(),
            Fate::Refused {
                by,
                why: Refusal::Port,
            } => format!(" by the operator's rule {by}, which names the port"),
            Fate::Refused {
                by,
                why: Refusal::Ban,
            } => format!(" by the operator's rule {by} (a ban of these sources)"),
            Fate::NotAdmitted { by } => format!(": {by}"),
            Fate::Doubtful { by, what } => format!(": {by} tests {what}, which cannot be told"),
        };
        format!("{from}on {}{by}", self.where_())
    }
}

/// An opening's verdict summarised: the state, the clauses that say it (the state's own first),
/// and the sentence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// `present`, `not-admitted`, `refused` or `doubtful`.
    pub state: &'static str,
    /// Every way the parts end: what is not admitted (the state's own clauses first, a whole
    /// way before a part of its sources), then what is admitted.
    pub clauses: Vec<Clause>,
    /// The sentence: "present", "present, except from 10.200.1.2/32 (refused by …)", "REFUSED on
    /// eth0 (ipv4, ipv6) by the operator's rule …; admitted on mesh0 (ipv4, ipv6)".
    pub text: String,
}

/// The word a state's clauses open with, in capitals when it leads.
fn word(fate: &Fate, lead: bool) -> &'static str {
    match (fate, lead) {
        (Fate::Admitted, _) => "admitted",
        (Fate::Refused { .. }, true) => "REFUSED",
        (Fate::Refused { .. }, false) => "refused",
        (Fate::NotAdmitted { .. }, true) => "NOT ADMITTED",
        (Fate::NotAdmitted { .. }, false) => "not admitted",
        (Fate::Doubtful { .. }, true) => "DOUBTFUL",
        (Fate::Doubtful { .. }, false) => "doubtful",
    }
}

/// How many addresses a set holds (saturating: every ipv6 address is more than `u128` counts).
fn size(a: &Addrs) -> u128 {
    a.spans()
        .iter()
        .map(|(lo, hi)| (hi - lo).saturating_add(1))
        .fold(0u128, u128::saturating_add)
}

/// Parts grouped by fate, and by their sources where they are a part of their way's (a family
/// arriving on an interface): what is admitted is said per way whatever its sources; on a way
/// that admits nothing, its widest refusal is said of the whole way and any other (a ban ahead
/// of the port's refusal) with its sources.
fn clauses(parts: &[Part]) -> Vec<Clause> {
    // Every way asked, with the part said of the whole way where it admits nothing.
    let mut ways: Vec<((Fam, &str), Option<usize>)> = Vec::new();
    for p in parts {
        let key = (p.fam, p.iif.as_str());
        if !ways.iter().any(|(k, _)| *k == key) {
            ways.push((key, None));
        }
    }
    for (key, widest) in ways.iter_mut() {
        let mine = || {
            parts
                .iter()
                .enumerate()
                .filter(|(_, p)| (p.fam, p.iif.as_str()) == *key)
        };
        if !mine().any(|(_, p)| p.fate == Fate::Admitted) {
            // The first of the widest.
            *widest = mine()
                .fold(None, |best: Option<(usize, u128)>, (i, p)| {
                    let n = size(&p.sources);
                    match best {
                        Some((_, m)) if m >= n => best,
                        _ => Some((i, n)),
                    }
                })
                .map(|(i, _)| i);
        }
    }
    let mut out: Vec<Clause> = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        let whole = p.fate == Fate::Admitted
            || ways
                .iter()
                .any(|(k, w)| *k == (p.fam, p.iif.as_str()) && *w == Some(i));
        let from = (!whole).then(|| p.sources.clone());
        let at = out.iter().position(|c| c.fate == p.fate && c.from == from);
        let c = match at {
            Some(at) => &mut out[at],
            None => {
                out.push(Clause {
                    fate: p.fate.clone(),
                    on: Vec::new(),
                    from,
                    everywhere: false,
                    first: i,
                });
                out.last_mut().expect("just pushed")
            }
        };
        match c.on.iter_mut().find(|(n, _)| *n == p.iif) {
            Some((_, fams)) if !fams.contains(&p.fam) => fams.push(p.fam),
            Some(_) => {}
            None => c.on.push((p.iif.clone(), vec![p.fam])),
        }
    }
    for c in &mut out {
        let fams: Vec<Fam> = c.on.iter().flat_map(|(_, f)| f.iter().copied()).collect();
        c.everywhere = ways.iter().all(|((fam, iif), _)| {
            !fams.contains(fam)
                || c.on
                    .iter()
                    .any(|(n, f)| n.as_str() == *iif && f.contains(fam))
        });
    }
    out
}

impl Verdict {
    /// The verdict summarised from its parts ([`Summary`]). The state is **present** when on
    /// every way asked (each family arriving on each interface) some source is admitted and
    /// every source not admitted is refused by the operator (a ban); otherwise **doubtful**
    /// where a part is, then **not-admitted** where a part is (a write can still admit it),
    /// then **refused**: the operator's own rules refuse it, of every source on at least one
    /// way in (a port refused on the outside interface while the private one admits it) or of
    /// every source everywhere.
    pub fn summary(&self) -> Summary {
        if let Some(why) = &self.none {
            return Summary {
                state: "not-admitted",
                clauses: Vec::new(),
                text: format!("NOT ADMITTED: {why}"),
            };
        }
        let mut all = clauses(&self.parts);
        let any = |w: &str| self.parts.iter().any(|p| p.fate.word() == w);
        // A way (a family arriving on an interface) where no part is admitted: its widest
        // refusal is said of the whole way.
        let way_admits_nothing = all
            .iter()
            .any(|c| c.fate != Fate::Admitted && c.from.is_none());
        let state = if any("doubtful") {
            "doubtful"
        } else if any("not-admitted") {
            "not-admitted"
        } else if way_admits_nothing {
            "refused"
        } else {
            "present"
        };
        // The state's own clauses first, a whole way before part of its sources; what is
        // admitted last.
        all.sort_by_key(|c| {
            (
                c.fate == Fate::Admitted,
                c.fate.word() != state,
                c.from.is_some(),
                c.first,
            )
        });
        let refused: Vec<&Clause> = all.iter().filter(|c| c.fate != Fate::Admitted).collect();
        let text = if state == "present" {
            if refused.is_empty() {
                "present".to_string()
            } else {
                // Only bans are left here: each said with its sources, and its interfaces where
                // it does not hold on every one.
                let except: Vec<String> = refused
                    .iter()
                    .map(|c| {
                        let from = c.from.as_ref().map(Addrs::to_string).unwrap_or_default();
                        let on = if c.everywhere {
                            String::new()
                        } else {
                            format!(
                                " on {}",
                                c.on.iter()
                                    .map(|(n, _)| n.as_str())
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            )
                        };
                        format!("from {from}{on} ({})", c.fate.describe())
                    })
                    .collect();
                format!("present, except {}", except.join("; "))
            }
        } else {
            all.iter()
                .enumerate()
                .map(|(i, c)| format!("{} {}", word(&c.fate, i == 0), c.rest()))
                .collect::<Vec<_>>()
                .join("; ")
        };
        Summary {
            state,
            clauses: all,
            text,
        }
    }

    /// `present`, `not-admitted`, `refused` or `doubtful` ([`Verdict::summary`]).
    pub fn state(&self) -> &'static str {
        self.summary().state
    }

    /// The part that decides the state, if it is not present: the first of the clause that
    /// leads the sentence.
    pub fn decider(&self) -> Option<&Part> {
        let s = self.summary();
        if s.state == "present" {
            return None;
        }
        s.clauses
            .first()
            .filter(|c| c.fate != Fate::Admitted)
            .and_then(|c| self.parts.get(c.first))
    }

    /// The state as a person reads it ([`Summary::text`]).
    pub fn describe(&self) -> String {
        self.summary().text
    }
}
