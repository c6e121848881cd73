//! The kernel asked after an act (`apply --confirm`, `reconcile --confirm`): once the act's
//! firewall writes are made, every declared opening's answer (each way it comes: family,
//! interface, path; each part of its sources) is confirmed by the kernel through the one
//! confirmation `firewall explain --confirm` uses ([`firewall::confirm::on_node`]), against the
//! ruleset as it now stands, all openings in one set of scratch namespaces. Each opening is then
//! judged: the kernel agrees, settles what the evaluator could not tell, disagrees (both verdicts
//! named; the kernel's stands), or it is unconfirmed with the reason (never taken as agreement).

use super::NodeFirewall;
/// The firewall crate's confirmation, handed on for `firewall explain --confirm`.
pub use firewall::confirm::{agreement, Confirmation, Tally, NOT_CLONED};
use firewall::confirm::{standing, Agreement, Kernel, Probe};
use firewall::eval::{Answer, Way};
use firewall::Opening;
use serde::Serialize;

/// How one opening stands beside the kernel, from best to worst.
#[derive(Serialize, Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "kebab-case")]
pub enum Judged {
    /// Every part was probed and the kernel did as the evaluator says.
    Agrees,
    /// Every part was probed; where the evaluator could not tell (doubtful) the kernel settled
    /// it, and it agreed on every other part.
    Settled,
    /// Some part was not probed (or the kernel could not be asked at all): not confirmed.
    Unconfirmed,
    /// On some part the kernel did otherwise than the evaluator says.
    Disagrees,
}

impl Judged {
    pub fn as_str(self) -> &'static str {
        match self {
            Judged::Agrees => "agrees",
            Judged::Settled => "settled",
            Judged::Unconfirmed => "unconfirmed",
            Judged::Disagrees => "disagrees",
        }
    }
}

/// One part of one way, with the evaluator's fate and the kernel's probe.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct PartConfirmed {
    pub family: &'static str,
    pub interface: String,
    pub path: &'static str,
    pub sources: Vec<String>,
    /// The evaluator's fate (`admitted`, `refused`, `not-admitted`, `doubtful`).
    pub evaluator: &'static str,
    /// The rule that decides, as the evaluator reads it.
    pub rule: Option<String>,
    /// The kernel's verdict (`connected`, `refused`, `timed-out`, `unprobed`).
    pub kernel: &'static str,
    pub kernel_detail: String,
    /// The probe's source address and where it was sent (and, forwarded, the host behind).
    pub source: Option<String>,
    pub to: Option<String>,
    pub behind: Option<String>,
    /// `agrees`, `disagrees`, `settled` or `unprobed`.
    pub agreement: &'static str,
}

/// One declared opening beside the kernel.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct OpeningConfirmed {
    pub id: String,
    pub agreement: Judged,
    /// The evaluator's state of the opening (`present`, `not-admitted`, `refused`, `doubtful`).
    pub evaluator: &'static str,
    /// The state with the kernel's verdict standing on every part it was asked about: the
    /// state reported. `None` when no part was probed.
    pub kernel: Option<&'static str>,
    /// Why it is not confirmed, when it is not.
    pub why: Option<String>,
    pub parts: Vec<PartConfirmed>,
}

impl OpeningConfirmed {
    /// Unconfirmed for `why`, with no part asked.
    pub fn unconfirmed(id: &str, evaluator: &'static str, why: String) -> OpeningConfirmed {
        OpeningConfirmed {
            id: id.to_string(),
            agreement: Judged::Unconfirmed,
            evaluator,
            kernel: None,
            why: Some(why),
            parts: Vec::new(),
        }
    }

    /// The state that stands: the kernel's where it was asked, else the evaluator's.
    pub fn state(&self) -> &'static str {
        self.kernel.unwrap_or(self.evaluator)
    }

    /// How many parts were probed, of how many.
    fn probed(&self) -> (usize, usize) {
        let probed = self.parts.iter().filter(|p| p.kernel != "unprobed").count();
        (probed, self.parts.len())
    }

    /// The first part the kernel disagrees on.
    fn disagreeing(&self) -> Option<&PartConfirmed> {
        self.parts.iter().find(|p| p.agreement == "disagrees")
    }

    /// As a person reads it, in the report and the briefing.
    pub fn describe(&self) -> String {
        let (probed, of) = self.probed();
        match self.agreement {
            Judged::Agrees => format!(
                "the kernel agrees: {} ({probed} of {of} parts probed in scratch namespaces, \
                 each as the evaluator says)",
                self.state()
            ),
            Judged::Settled => format!(
                "the kernel settles what the evaluator could not tell (it said {}): {} ({probed} \
                 of {of} parts probed); the kernel's verdict stands",
                self.evaluator,
                self.state()
            ),
            Judged::Unconfirmed => format!(
                "not confirmed by the kernel: {} ({probed} of {of} parts probed; the \
                 evaluator's {} stands unconfirmed)",
                self.why.as_deref().unwrap_or("no part was probed"),
                self.evaluator
            ),
            Judged::Disagrees => {
                let part = self
                    .disagreeing()
                    .map(|p| {
                        format!(
                            " ({} on {} from {}: the evaluator says {}{}, the kernel {})",
                            p.family,
                            p.interface,
                            p.source.as_deref().unwrap_or("?"),
                            p.evaluator,
                            p.rule
                                .as_deref()
                                .map(|r| format!(" by {r}"))
                                .unwrap_or_default(),
                            p.kernel_detail
                        )
                    })
                    .unwrap_or_default();
                format!(
                    "THE KERNEL DISAGREES WITH THE EVALUATOR: the evaluator says {}, the kernel \
                     {}{part}; the kernel's verdict stands",
                    self.evaluator,
                    self.state()
                )
            }
        }
    }
}

/// What the kernel said of every declared opening after the act's writes.
#[derive(Serialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct Confirmed {
    pub openings: Vec<OpeningConfirmed>,
    /// The scratch namespaces made (all removed when the confirmation ended).
    pub namespaces: Vec<String>,
    /// What was not recreated, and namespaces of an earlier killed confirmation removed.
    pub notes: Vec<String>,
    /// What cannot be cloned into the scratch namespaces, and how the confirmation treats it.
    pub not_cloned: Vec<String>,
    /// Why the kernel could not be asked at all (every opening is then unconfirmed).
    pub failed: Option<String>,
}

impl Confirmed {
    /// How many openings stand `judged`.
    pub fn count(&self, judged: Judged) -> usize {
        self.openings
            .iter()
            .filter(|o| o.agreement == judged)
            .count()
    }

    /// Whether the kernel disagrees with the evaluator on some opening.
    pub fn disagrees(&self) -> bool {
        self.count(Judged::Disagrees) > 0
    }

    /// Every opening unconfirmed for `why`: the kernel was not asked.
    pub fn not_asked(openings: &[(String, &'static str)], why: &str) -> Confirmed {
        Confirmed {
            openings: openings
                .iter()
                .map(|(id, state)| OpeningConfirmed::unconfirmed(id, state, why.to_string()))
                .collect(),
            failed: Some(why.to_string()),
            not_cloned: not_cloned(),
            ..Confirmed::default()
        }
    }

    /// The summary line: how many openings agree, disagree, were settled, are unconfirmed.
    pub fn summary(&self) -> String {
        let mut line = format!(
            "confirmed by the kernel in scratch namespaces (removed): {} agree, {} disagree, {} \
             settled where the evaluator was doubtful, {} unconfirmed",
            self.count(Judged::Agrees),
            self.count(Judged::Disagrees),
            self.count(Judged::Settled),
            self.count(Judged::Unconfirmed)
        );
        if let Some(why) = &self.failed {
            line.push_str(&format!(" (the kernel could not be asked: {why})"));
        }
        line
    }
}

fn not_cloned() -> Vec<String> {
    firewall::confirm::NOT_CLONED
        .iter()
        .map(|s| s.to_string())
        .collect()
}

/// The state of an opening from its parts' words, as [`firewall::eval::Verdict::state`] reads
/// them: doubtful, then not admitted, then present when any part is admitted (or there is none),
/// else refused.
fn state_of<'a>(words: impl Iterator<Item = &'a str> + Clone) -> &'static str {
    let any = |w: &str| words.clone().any(|x| x == w);
    if any("doubtful") {
        "doubtful"
    } else if any("not-admitted") {
        "not-admitted"
    } else if any("admitted") || words.clone().next().is_none() {
        "present"
    } else {
        "refused"
    }
}

/// The evaluator's state of an opening from the answers on its ways.
fn evaluated(ways: &[(Way, Answer)]) -> &'static str {
    state_of(
        ways.iter()
            .flat_map(|(_, a)| a.parts.iter().map(|p| p.fate.word())),
    )
}

/// One opening judged from its ways, the evaluator's answers on them and the kernel's probes
/// (one per part, in order). Pure: what the report says is decided here.
pub fn judge(id: &str, ways: &[(Way, Answer)], probes: &[Vec<Probe>]) -> OpeningConfirmed {
    let mut parts = Vec::new();
    let mut standing_words = Vec::new();
    let mut worst = Judged::Agrees;
    let mut why = None;
    let missing = Probe {
        source: None,
        to: None,
        behind: None,
        kernel: Kernel::Unprobed("the confirmation returned no probe for it".into()),
    };
    for (i, (w, a)) in ways.iter().enumerate() {
        for (j, p) in a.parts.iter().enumerate() {
            // A part whose probe is missing is judged unprobed, never agreeing.
            let pr = probes.get(i).and_then(|v| v.get(j)).unwrap_or(&missing);
            let agreed = agreement(&p.fate, &pr.kernel);
            let judged = match agreed {
                Agreement::Agrees => Judged::Agrees,
                Agreement::Settled => Judged::Settled,
                Agreement::Unprobed => {
                    why.get_or_insert_with(|| {
                        format!(
                            "{} on {}: {}",
                            w.conn.fam.name(),
                            w.conn.iif,
                            pr.kernel.describe()
                        )
                    });
                    Judged::Unconfirmed
                }
                Agreement::Disagrees => Judged::Disagrees,
            };
            worst = worst.max(judged);
            standing_words.push(standing(&p.fate, &pr.kernel));
            parts.push(PartConfirmed {
                family: w.conn.fam.name(),
                interface: w.conn.iif.clone(),
                path: match w.conn.path {
                    firewall::eval::Path::Incoming => "incoming",
                    firewall::eval::Path::Forwarded => "forwarded",
                },
                sources: p.sources.cidrs(),
                evaluator: p.fate.word(),
                rule: p.fate.by().map(|b| b.to_string()),
                kernel: pr.kernel.word(),
                kernel_detail: pr.kernel.describe(),
                source: pr.source.map(|a| a.to_string()),
                to: pr.to.map(|a| a.to_string()),
                behind: pr.behind.map(|a| a.to_string()),
                agreement: agreed.word(),
            });
        }
    }
    let evaluator = evaluated(ways);
    if parts.is_empty() {
        return OpeningConfirmed::unconfirmed(
            id,
            evaluator,
            "no way to ask about: nothing publishes the port, or no interface arrives here".into(),
        );
    }
    let probed = parts.iter().any(|p| p.kernel != "unprobed");
    OpeningConfirmed {
        id: id.to_string(),
        agreement: worst,
        evaluator,
        kernel: probed.then(|| state_of(standing_words.iter().copied())),
        why: (worst == Judged::Unconfirmed).then(|| why.unwrap_or_default()),
        parts,
    }
}

/// Every opening of `openings` confirmed by the kernel against the ruleset as it stands now,
/// all at once: their ways and answers read through `fw`, one confirmation of them all, each
/// opening judged. A confirmation that could not run leaves every opening unconfirmed with why.
pub fn confirm(fw: &mut dyn NodeFirewall, openings: &[Opening]) -> Confirmed {
    let answers = match fw.answers(openings) {
        Ok(a) => a,
        Err(e) => {
            let none: Vec<(String, &'static str)> =
                openings.iter().map(|o| (o.id.clone(), "unknown")).collect();
            return Confirmed::not_asked(
                &none,
                &format!("reading the openings' answers from the ruleset: {e}"),
            );
        }
    };
    let all: Vec<(Way, Answer)> = answers.iter().flatten().cloned().collect();
    let asked = if all.is_empty() {
        Ok(firewall::confirm::Confirmation::default())
    } else {
        fw.ask_kernel(&all)
    };
    let c = match asked {
        Ok(c) => c,
        Err(e) => {
            let states: Vec<(String, &'static str)> = openings
                .iter()
                .zip(&answers)
                .map(|(o, ways)| (o.id.clone(), evaluated(ways)))
                .collect();
            return Confirmed::not_asked(&states, &e.to_string());
        }
    };
    let mut at = 0;
    let mut out = Vec::new();
    for (o, ways) in openings.iter().zip(&answers) {
        let probes = c.probes.get(at..at + ways.len()).unwrap_or(&[]);
        at += ways.len();
        out.push(judge(&o.id, ways, probes));
    }
    Confirmed {
        openings: out,
        namespaces: c.namespaces,
        notes: c.notes,
        not_cloned: not_cloned(),
        failed: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use firewall::eval::{Addrs, Conn, Decider, Fam, Fate, Outcome};

    fn policy_drop() -> Decider {
        Decider {
            table: "inet filter".into(),
            chain: "input".into(),
            handle: Some(7),
            index: None,
            text: "policy drop".into(),
        }
    }

    /// One way arriving on `iif` whose whole sources end as `fates` (one part each: the first
    /// half of the addresses and the rest).
    fn way(fam: Fam, iif: &str, fates: &[Fate]) -> (Way, Answer) {
        let all = Addrs::all(fam);
        let parts = fates
            .iter()
            .enumerate()
            .map(|(i, fate)| Outcome {
                sources: if fates.len() == 1 {
                    all.clone()
                } else if i == 0 {
                    Addrs::cidr(fam, 0, 1)
                } else {
                    all.minus(&Addrs::cidr(fam, 0, 1))
                },
                fate: fate.clone(),
                trace: Vec::new(),
                limits: Vec::new(),
            })
            .collect();
        (
            Way {
                conn: Conn::incoming(fam, 6, 9000, iif),
                sources: all,
            },
            Answer { parts },
        )
    }

    fn probe(kernel: Kernel) -> Probe {
        Probe {
            source: Some("1.0.0.1".parse().unwrap()),
            to: Some("192.0.2.1:9000".parse().unwrap()),
            behind: None,
            kernel,
        }
    }

    #[test]
    fn every_part_as_the_evaluator_says_agrees_in_words_and_json() {
        let ways = vec![
            way(Fam::V4, "eth0", &[Fate::Admitted]),
            way(Fam::V6, "eth0", &[Fate::Admitted]),
        ];
        let probes = vec![
            vec![probe(Kernel::Connected)],
            vec![probe(Kernel::Connected)],
        ];
        let o = judge("web", &ways, &probes);
        assert_eq!(o.agreement, Judged::Agrees);
        assert_eq!((o.evaluator, o.kernel), ("present", Some("present")));
        assert_eq!(
            o.describe(),
            "the kernel agrees: present (2 of 2 parts probed in scratch namespaces, each as \
             the evaluator says)"
        );
        let v = serde_json::to_value(&o).unwrap();
        assert_eq!(v["agreement"], "agrees");
        assert_eq!(v["kernel"], "present");
        assert!(v["why"].is_null(), "{v:#}");
        assert_eq!(v["parts"][1]["family"], "ipv6");
        assert_eq!(v["parts"][0]["kernel"], "connected");
        assert_eq!(v["parts"][0]["agreement"], "agrees");
        assert_eq!(v["parts"][0]["path"], "incoming");
    }

    #[test]
    fn a_disagreement_names_both_verdicts_and_the_kernels_stands() {
        let ways = vec![way(Fam::V4, "eth0", &[Fate::Admitted])];
        let o = judge("web", &ways, &[vec![probe(Kernel::TimedOut)]]);
        assert_eq!(o.agreement, Judged::Disagrees);
        assert_eq!(o.evaluator, "present");
        assert_eq!(o.state(), "not-admitted", "the kernel's verdict stands");
        let words = o.describe();
        assert!(
            words.starts_with(
                "THE KERNEL DISAGREES WITH THE EVALUATOR: the evaluator says present, the \
                 kernel not-admitted (ipv4 on eth0 from 1.0.0.1: the evaluator says admitted, \
                 the kernel timed out"
            ) && words.ends_with("; the kernel's verdict stands"),
            "{words}"
        );
        let v = serde_json::to_value(&o).unwrap();
        assert_eq!(
            (&v["agreement"], &v["evaluator"], &v["kernel"]),
            (
                &serde_json::json!("disagrees"),
                &serde_json::json!("present"),
                &serde_json::json!("not-admitted")
            )
        );
        assert_eq!(v["parts"][0]["evaluator"], "admitted");
        assert_eq!(v["parts"][0]["kernel"], "timed-out");
        assert_eq!(v["parts"][0]["agreement"], "disagrees");

        // The other way round: the evaluator's policy drop, the kernel connects.
        let ways = vec![way(
            Fam::V4,
            "eth0",
            &[Fate::NotAdmitted { by: policy_drop() }],
        )];
        let o = judge("web", &ways, &[vec![probe(Kernel::Connected)]]);
        assert_eq!(
            (o.agreement, o.evaluator, o.state()),
            (Judged::Disagrees, "not-admitted", "present")
        );
        assert!(
            o.describe()
                .contains("the evaluator says not-admitted by inet filter input: policy drop, the kernel connected"),
            "{}",
            o.describe()
        );
    }

    #[test]
    fn a_part_not_probed_is_unconfirmed_never_agreement() {
        let ways = vec![
            way(Fam::V4, "eth0", &[Fate::Admitted]),
            way(Fam::V6, "eth0", &[Fate::Admitted]),
        ];
        let probes = vec![
            vec![probe(Kernel::Connected)],
            vec![probe(Kernel::Unprobed(
                "eth0 has no ipv6 address to send to".into(),
            ))],
        ];
        let o = judge("web", &ways, &probes);
        assert_eq!(o.agreement, Judged::Unconfirmed);
        assert_eq!(
            o.why.as_deref(),
            Some("ipv6 on eth0: not probed: eth0 has no ipv6 address to send to")
        );
        assert!(
            o.describe()
                .starts_with("not confirmed by the kernel: ipv6 on eth0"),
            "{}",
            o.describe()
        );
        // A probe missing altogether is unprobed too.
        let o = judge("web", &ways, &probes[..1]);
        assert_eq!(o.agreement, Judged::Unconfirmed);
        // An opening with no way to ask about.
        let o = judge("web", &[], &[]);
        assert_eq!(o.agreement, Judged::Unconfirmed);
        assert_eq!(o.kernel, None);
    }

    #[test]
    fn the_kernel_settles_doubt_and_a_ban_it_bears_out_agrees() {
        let doubtful = Fate::Doubtful {
            by: policy_drop(),
            what: "a socket".into(),
        };
        let ban = Fate::Refused {
            by: policy_drop(),
            why: firewall::eval::Refusal::Ban,
        };
        let ways = vec![way(Fam::V4, "eth0", &[ban, doubtful])];
        let o = judge(
            "web",
            &ways,
            &[vec![probe(Kernel::TimedOut), probe(Kernel::Connected)]],
        );
        assert_eq!(o.agreement, Judged::Settled);
        assert_eq!((o.evaluator, o.state()), ("doubtful", "present"));
        assert_eq!(o.parts[0].agreement, "agrees");
        assert_eq!(o.parts[1].agreement, "settled");
    }

    #[test]
    fn the_summary_counts_and_a_kernel_not_asked_says_why() {
        let c = Confirmed::not_asked(
            &[("web".into(), "unknown"), ("api".into(), "unknown")],
            "ip: not found",
        );
        assert!(!c.disagrees());
        assert_eq!(c.count(Judged::Unconfirmed), 2);
        assert_eq!(
            c.summary(),
            "confirmed by the kernel in scratch namespaces (removed): 0 agree, 0 disagree, 0 \
             settled where the evaluator was doubtful, 2 unconfirmed (the kernel could not be \
             asked: ip: not found)"
        );
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(v["failed"], "ip: not found");
        assert_eq!(v["openings"][0]["agreement"], "unconfirmed");
        assert_eq!(v["openings"][0]["why"], "ip: not found");
        assert!(!v["not_cloned"].as_array().unwrap().is_empty());
    }
}
