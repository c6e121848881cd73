//! The openings phase: every declared opening (in the firewall crate's terms already) converged
//! through the found firewall at once (one listing, one nf_tables batch, one restore per iptables
//! table) with its verdict read back, each opening's own outcome and line drawn from that one
//! convergence.

use super::{Error, NodeFirewall};
use firewall::{Opening, Presence, Scope, State};
use serde::Serialize;
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

/// An opening a layer still refuses (or the kernel's verdict does not admit), for the report and
/// the briefing.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct NotAdmitted {
    pub id: String,
    pub layer: String,
    pub why: String,
}

/// What the one convergence of an apply's openings did: each converged opening's outcome by id,
/// or why the convergence failed (every opening then fails with that reason).
#[derive(Debug)]
pub struct Openings {
    /// The found firewall's kind, as the lines name it.
    pub kind: String,
    pub result: Result<Converged, std::sync::Arc<Error>>,
}

/// The openings in force after the convergence.
#[derive(Debug, Default)]
pub struct Converged {
    /// Ids whose rules were added.
    pub added: HashSet<String>,
    /// Ids some of whose marked rules were removed (old versions, misplaced).
    pub removed: HashSet<String>,
    pub states: HashMap<String, Vec<Presence>>,
    /// Marked rules of openings not declared, left for the sweep.
    pub stale: usize,
    /// Each opening's verdict, read back after the write.
    pub verdicts: HashMap<String, firewall::eval::Verdict>,
    /// Why no verdict could be read, if it could not.
    pub unverdicted: Option<String>,
}

/// How one opening's rules changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Unchanged,
    Created,
    Changed,
}

/// One opening's part of the convergence: how it changed, its line, and every layer (or the
/// kernel's verdict) that still does not admit it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub change: Change,
    pub line: String,
    pub not_admitted: Vec<NotAdmitted>,
}

/// Converges every declared opening at once and reads their verdicts back: `openings` are the
/// declared ones that could be put in the firewall's terms (one that cannot fails on its own
/// line, not the others').
pub fn converge(fw: &mut dyn NodeFirewall, openings: &[Opening]) -> Openings {
    let result = fw.converge(openings, Scope::Given).map(|c| {
        let mut done = Converged {
            added: c.added.into_iter().map(|(id, _)| id).collect(),
            removed: c
                .removed
                .iter()
                .filter_map(|(mark, _)| firewall::rules::id_of(mark).map(str::to_string))
                .collect(),
            states: c.states.into_iter().collect(),
            stale: c.stale,
            ..Converged::default()
        };
        // What is reported is the verdict of the ruleset read back after the write.
        match fw.verdicts(openings) {
            Ok(v) => done.verdicts = v.into_iter().collect(),
            Err(e) => done.unverdicted = Some(e.to_string()),
        }
        done
    });
    let kind = fw.kind();
    Openings {
        result: result.map_err(|e| {
            std::sync::Arc::new(e.doing(format!("openings through the found firewall ({kind})")))
        }),
        kind,
    }
}

impl Openings {
    /// Whether the convergence saw marked rules of openings it was not given (a sweep is due).
    pub fn may_be_stale(&self) -> bool {
        matches!(&self.result, Ok(done) if done.stale > 0)
    }

    /// One opening's outcome and line, from the one convergence.
    pub fn of(&self, opening: &Opening) -> Result<Outcome, Error> {
        let done = self.result.as_ref().map_err(|e| Error::Opening {
            id: opening.id.clone(),
            source: e.clone(),
        })?;
        let id = &opening.id;
        let added = done.added.contains(id);
        let removed = done.removed.contains(id);
        let states: &[Presence] = done.states.get(id).map_or(&[], Vec::as_slice);
        let verdict = done.verdicts.get(id);
        let mut not_admitted = Vec::new();
        let mut in_force = Vec::new();
        let mut not_needed = 0;
        for p in states {
            match &p.state {
                State::Present => in_force.push(match &p.chain {
                    Some(c) if p.layer.chain != *c => {
                        format!("{} (in chain {c})", p.layer)
                    }
                    _ => p.layer.to_string(),
                }),
                State::NotNeeded(_) => not_needed += 1,
                // A layer's own account of why it does not admit it (the driver's words),
                // beside the verdict below.
                State::Missing
                | State::Refused(_)
                | State::Unwritable(_)
                | State::Doubtful(_)
                | State::Bypass(_) => not_admitted.push(NotAdmitted {
                    id: id.clone(),
                    layer: p.layer.to_string(),
                    why: p.state.describe(),
                }),
            }
        }
        // The verdict's words, computed once for the line and the list of what is not admitted.
        let summary = verdict.map(|v| v.summary());
        if let (Some(v), Some(s)) = (verdict, &summary) {
            // What a new connection meets in the kernel is reported even where every layer
            // thinks itself in order.
            if s.state != "present" && not_admitted.is_empty() {
                not_admitted.push(NotAdmitted {
                    id: id.clone(),
                    layer: v
                        .decider()
                        .and_then(|p| p.fate.by())
                        .map(|b| b.place())
                        .unwrap_or_else(|| "the found firewall".into()),
                    why: s.text.clone(),
                });
            }
        }
        let kind = &self.kind;
        // The layers its rules were written in, whatever they admit: "no rule written" is said
        // only when none was.
        let written = || -> Vec<String> {
            states
                .iter()
                .filter(|p| p.chain.is_some() && !matches!(p.state, State::NotNeeded(_)))
                .map(|p| p.layer.to_string())
                .collect()
        };
        let mut where_ = match (in_force.is_empty(), verdict) {
            (true, Some(_)) => match written() {
                w if w.is_empty() => {
                    format!("the found firewall as it is ({kind}), no rule written")
                }
                w => format!(
                    "the found firewall ({kind}), its rules written in {}",
                    w.join(", ")
                ),
            },
            (true, None) => format!(
                "nothing on the {} path refuses it by default (found firewall: {kind}); no rule needed",
                opening.path.as_str()
            ),
            (false, _) => in_force.join(", "),
        };
        if !in_force.is_empty() && not_needed > 0 {
            let _ = write!(
                where_,
                "; {not_needed} other layer(s) let it on as they are"
            );
        }
        match &summary {
            // The line ends in what a new connection meets, as the status and the briefing say.
            Some(s) => {
                where_.push_str("; ");
                where_.push_str(&s.text);
            }
            None => {
                let refused: Vec<String> = states
                    .iter()
                    .filter(|p| !p.present())
                    .map(|p| format!("{}: {}", p.layer, p.state.describe()))
                    .collect();
                if !refused.is_empty() {
                    let _ = write!(where_, "; NOT admitted by {}", refused.join("; "));
                }
            }
        }
        let (change, line) = match (added, removed) {
            // Nothing written, and a layer still refuses it: not "in force".
            (false, false) if !not_admitted.is_empty() => {
                (Change::Unchanged, format!("NOT in force: {where_}"))
            }
            (false, false) => (Change::Unchanged, format!("in force in {where_}")),
            (true, false) => (Change::Created, format!("opened in {where_}")),
            _ => (Change::Changed, format!("rewritten in {where_}")),
        };
        Ok(Outcome {
            change,
            line,
            not_admitted,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use firewall::eval::{Addrs, Decider, Fam, Fate, Part, Refusal, Verdict};
    use firewall::Presence;

    fn opening() -> Opening {
        Opening {
            id: "web/api".into(),
            port: 9000,
            proto: firewall::Proto::Tcp,
            from: firewall::opening::From::Anywhere,
            path: firewall::Path::Incoming,
        }
    }

    /// The port refused by a netdev ingress chain on eth0; mesh0 admits it.
    fn refused_on_eth0() -> Verdict {
        let by = Decider {
            table: "netdev filter".into(),
            chain: "ingress_eth0".into(),
            handle: Some(3),
            index: Some(0),
            text: "tcp dport 9000 drop".into(),
        };
        let part = |iif: &str, fate: Fate| Part {
            fam: Fam::V4,
            iif: iif.into(),
            sources: Addrs::all(Fam::V4),
            fate,
        };
        Verdict {
            parts: vec![
                part(
                    "eth0",
                    Fate::Refused {
                        by,
                        why: Refusal::Port,
                    },
                ),
                part("mesh0", Fate::Admitted),
            ],
            none: None,
        }
    }

    fn converged(added: bool, presence: Presence, verdict: Verdict) -> Openings {
        let id = opening().id;
        Openings {
            kind: "nftables".into(),
            result: Ok(Converged {
                added: if added {
                    [id.clone()].into()
                } else {
                    HashSet::new()
                },
                states: [(id.clone(), vec![presence])].into(),
                verdicts: [(id, verdict)].into(),
                ..Converged::default()
            }),
        }
    }

    const LAYER: &str = "inet filter input (nftables)";

    /// The layer `LAYER` names.
    fn layer() -> firewall::LayerId {
        crate::node_firewall::fake::layer_id(
            firewall::Backend::Nftables,
            firewall::Family::Inet,
            "filter",
            "input",
        )
    }

    #[test]
    fn the_verdict_s_words_end_the_line_and_name_what_is_not_admitted() {
        // Written now and in force in its layer, but eth0's ingress refuses the port ahead.
        let written = Presence {
            layer: layer(),
            chain: Some("input".into()),
            state: State::Present,
        };
        let v = refused_on_eth0();
        let o = converged(true, written, v.clone()).of(&opening()).unwrap();
        assert_eq!(o.change, Change::Created);
        assert_eq!(o.line, format!("opened in {LAYER}; {}", v.describe()));
        // The same words, from the same summary, in the list of what is not admitted.
        assert_eq!(
            o.not_admitted,
            [NotAdmitted {
                id: "web/api".into(),
                layer: "netdev filter ingress_eth0".into(),
                why: v.describe(),
            }]
        );
        assert!(v.describe().starts_with("REFUSED on eth0 (ipv4)"));
    }

    #[test]
    fn no_rule_written_only_when_none_was() {
        // The check left it unwritten (no chain): nothing was written, and the line says so.
        let unwritten = Presence {
            layer: layer(),
            chain: None,
            state: State::Bypass("no place admits it without changing what is not its own".into()),
        };
        let o = converged(false, unwritten, refused_on_eth0())
            .of(&opening())
            .unwrap();
        assert_eq!(o.change, Change::Unchanged);
        assert!(
            o.line.starts_with(
                "NOT in force: the found firewall as it is (nftables), no rule written; "
            ),
            "{}",
            o.line
        );
        // Its marked rule stands from an earlier apply but a rule on its way cannot be told:
        // written, not "no rule written".
        let standing = Presence {
            layer: layer(),
            chain: Some("input".into()),
            state: State::Doubtful("inet filter input: th sport 53 accept".into()),
        };
        let o = converged(false, standing, refused_on_eth0())
            .of(&opening())
            .unwrap();
        assert!(
            o.line.contains(&format!("its rules written in {LAYER}"))
                && !o.line.contains("no rule written"),
            "{}",
            o.line
        );
        // Written by this apply, before the layer counts it in force: written too.
        let added = Presence {
            layer: layer(),
            chain: Some("input".into()),
            state: State::Missing,
        };
        let o = converged(true, added, refused_on_eth0())
            .of(&opening())
            .unwrap();
        assert!(
            o.line.starts_with(&format!(
                "opened in the found firewall (nftables), its rules written in {LAYER}; "
            )) && !o.line.contains("no rule written"),
            "{}",
            o.line
        );
    }
}
