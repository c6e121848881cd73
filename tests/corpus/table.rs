//! The corpus's table, printed like the bed's: ruleset × opening, one column per source and
//! family, each cell the report's fate and what the probe found, and the failures under it.

use std::fmt::Write as _;
use std::time::Duration;

use lab::Probe;

use super::flood::{AT_MOST, BASELINE, BURST as FLOOD};
use super::routed::{Routed, FROM, LAN_IF};
use super::{Family, Ran, Source, BURST, PORT_UNDECLARED};

/// The columns of the table: every source in every family.
const COLUMNS: [(Source, Family); 6] = [
    (Source::Outside, Family::V4),
    (Source::Outside, Family::V6),
    (Source::Banned, Family::V4),
    (Source::Banned, Family::V6),
    (Source::Private, Family::V4),
    (Source::Private, Family::V6),
];

fn short_fate(fate: &Result<String, String>) -> &'static str {
    match fate.as_deref() {
        Ok("admitted") => "adm",
        Ok("refused") => "ref",
        Ok("not-admitted") => "not",
        Ok("doubtful") => "dbt",
        Ok(_) => "???",
        Err(_) => "none",
    }
}

pub(super) fn short_probe(p: &Result<Probe, String>) -> &'static str {
    match p {
        Ok(Probe::Reached) => "R",
        Ok(Probe::Refused) => "X",
        Ok(Probe::Unreachable) => "U",
        Ok(Probe::TimedOut) => "T",
        Err(_) => "ERR",
    }
}

pub(super) fn table(ran: &[Ran], total: Duration) -> (String, String) {
    let mut t = String::from(
        "\nThe corpus: the host's report against real probes (ruleset × opening × source)\n\n",
    );
    let _ = write!(
        t,
        "{:<31} {:<5} {:<17} {:<9} {:<12} {:<13}",
        "ruleset", "undcl", "opening", "apply", "verdict", "layers"
    );
    for (s, f) in COLUMNS {
        let _ = write!(
            t,
            " | {:<13}",
            format!("{} {}", s.name(), if f == Family::V4 { "v4" } else { "v6" })
        );
    }
    let _ = write!(t, " | routed o4 o6 b4 b6");
    t.push('\n');
    let mut failures = String::new();
    let mut today_wrong = String::new();
    // Cells reported doubtful where the fixture says why the evaluator cannot decide.
    let mut known_gaps = 0;
    let (mut cells, mut agreeing, mut layers_agreeing, mut explain_agreeing) = (0, 0, 0, 0);
    let (mut routed_cells, mut routed_holding, mut routed_opened_before) = (0, 0, 0);
    for r in ran {
        if let Some(e) = &r.error {
            let _ = writeln!(t, "{:<31} FAILED: {}", r.fixture.name, first_line(e));
            let _ = writeln!(failures, "- {}: {e}", r.fixture.name);
            continue;
        }
        for row in &r.rows {
            if let Some(c) = &row.contradiction {
                let _ = writeln!(failures, "- {} / {}: {c}", r.fixture.name, row.opening);
            }
            let _ = write!(
                t,
                "{:<31} {:<5} {:<17} {:<9} {:<12} {:<13}",
                r.fixture.name,
                r.undeclared,
                row.opening.trim_start_matches("corpus/"),
                row.outcome,
                row.state,
                row.layers
            );
            for (s, f) in COLUMNS {
                let shown = match row.cells.iter().find(|c| c.source == s && c.family == f) {
                    None => "·".to_owned(),
                    Some(c) => {
                        cells += 1;
                        agreeing += usize::from(c.agrees());
                        layers_agreeing += usize::from(c.layers_agree());
                        let known = r.fixture.undecided.is_some()
                            && matches!(&c.reported, Ok(f) if f == "doubtful");
                        if known {
                            known_gaps += 1;
                        }
                        if !c.agrees() && !known {
                            let why = match (&c.reported, &c.probed) {
                                (Err(e), _) => e.clone(),
                                (_, Err(e)) => format!("the probe failed: {e}"),
                                (Ok(fate), Ok(p)) => format!(
                                    "reported {fate}, probed {p} ({}: {})",
                                    row.state, row.detail
                                ),
                            };
                            let _ = writeln!(
                                failures,
                                "- {} / {} / {} {}: {why}",
                                r.fixture.name,
                                row.opening,
                                s.name(),
                                f.name()
                            );
                        }
                        if !c.ban_holds() {
                            let _ = writeln!(
                                failures,
                                "- {} / {} / {} {}: a ban bypassed: the banned source was {} \
                                 before the apply and {} after it",
                                r.fixture.name,
                                row.opening,
                                s.name(),
                                f.name(),
                                c.banned_before.as_ref().map(probe_word).unwrap_or_default(),
                                c.probed_text()
                            );
                        }
                        explain_agreeing += usize::from(c.explain_agrees());
                        if !c.explain_agrees() && !known {
                            let why = match (&c.explained, &c.probed) {
                                (Err(e), _) => e.clone(),
                                (_, Err(e)) => format!("the probe failed: {e}"),
                                (Ok(fate), Ok(p)) => format!("explain says {fate}, probed {p}"),
                            };
                            let _ = writeln!(
                                failures,
                                "- {} / {} / {} {}: firewall explain: {why}",
                                r.fixture.name,
                                row.opening,
                                s.name(),
                                f.name()
                            );
                        }
                        if !c.layers_agree() {
                            let _ = writeln!(
                                today_wrong,
                                "- {} / {} / {} {}: layers {} claim {}, probed {}",
                                r.fixture.name,
                                row.opening,
                                s.name(),
                                f.name(),
                                row.layers,
                                if c.layers_claim {
                                    "in force"
                                } else {
                                    "not in force"
                                },
                                c.probed_text()
                            );
                        }
                        format!(
                            "{}/{}{}{}{}{}",
                            short_fate(&c.reported),
                            c.probed_text(),
                            if c.agrees() { "" } else { " !" },
                            if c.ban_holds() { "" } else { " b" },
                            if c.explain_agrees() { "" } else { " e" },
                            if c.layers_agree() { "" } else { " *" }
                        )
                    }
                };
                let _ = write!(t, " | {shown:<13}");
            }
            for (k, &(s, f)) in FROM.iter().enumerate() {
                routed_cells += 1;
                routed_holding += usize::from(row.routed.holds(k));
                routed_opened_before +=
                    usize::from(matches!(&row.routed.before[k], Ok(p) if p.is_reached()));
                if !row.routed.holds(k) {
                    let _ = writeln!(
                        failures,
                        "- {} / {} / routed {} {}: the LAN host behind the node was {} before \
                         the apply and {} after it{}",
                        r.fixture.name,
                        row.opening,
                        s.name(),
                        f.name(),
                        probe_word(&row.routed.before[k]),
                        probe_word(&row.routed.after[k]),
                        if s == Source::Banned {
                            " (a banned source's SYN got an answer through the node)"
                        } else {
                            " (an opening opened forwarding)"
                        }
                    );
                }
            }
            let _ = write!(t, " | {}", routed_text(&row.routed));
            t.push('\n');
        }
    }
    let _ = writeln!(
        t,
        "\ncell: reported/probed — reported is the verdict's fate for the part holding the source \
         (adm admitted, ref refused, not not-admitted, dbt doubtful, none: no verdict); probed is \
         R reached, X refused (reset, port unreachable), U unreachable (prohibited), T timed out; \
         ×30 or k/30R where a rate-limited ruleset's cell is probed {BURST} times. \
         ! the report and the probe disagree; b a banned source refused before the apply \
         reached the node after it (where the ruleset bans it); e `firewall explain --from SOURCE` and the probe \
         disagree; * the per-layer states (layers, the report before \
         the verdict: in force iff every needed layer is present) disagree with the probe. \
         undcl: port {PORT_UNDECLARED}, served and declared by no opening, probed from outside \
         (v4 v6): what the found firewall does with what nobody opened. routed: the opening's \
         port at the LAN host behind the node ({LAN_IF}), from outside (o) and the banned source \
         (b) in v4 and v6, before the apply then after it (RR, XX, TT, ...; ! where after reached \
         and before did not)."
    );
    let _ = writeln!(
        t,
        "{cells} cells: {agreeing} agree with the verdict, {explain_agreeing} with firewall \
         explain, {layers_agreeing} with the per-layer states"
    );
    if known_gaps > 0 {
        let _ = writeln!(
            t,
            "{known_gaps} cells reported doubtful where the evaluator cannot decide (known gaps, \
             not agreeing, not failing the suite; their bans and routed cells are checked):"
        );
        for r in ran.iter().filter(|r| r.fixture.undecided.is_some()) {
            let _ = writeln!(
                t,
                "- {}: {}",
                r.fixture.name,
                r.fixture.undecided.unwrap_or("")
            );
        }
    }
    let _ = writeln!(
        t,
        "{routed_cells} routed cells (the LAN host behind the node): {routed_holding} unchanged \
         by the apply or closed by it, {routed_opened_before} reached before it (the found \
         firewall forwards there)"
    );
    confirmations(&mut t, &mut failures, ran);
    for r in ran {
        for f in &r.flooded {
            let shown = |n: &Result<usize, String>| match n {
                Ok(n) => format!("{n}/{FLOOD}"),
                Err(e) => format!("not probed ({e})"),
            };
            let _ = writeln!(
                t,
                "flood limits, {} {}: a burst of {FLOOD} new connections to 9000 at once: {} \
                 through from the node itself, {} from outside{}",
                r.fixture.name,
                f.family.name(),
                shown(&f.own),
                shown(&f.outside),
                if f.holds() { "" } else { " !" }
            );
            if !f.holds() {
                let _ = writeln!(
                    failures,
                    "- {} / flood {}: the per-source limit after the apply: {} of {FLOOD} from \
                     outside got through (at most {AT_MOST} may) and {} from the node itself \
                     (at least {BASELINE} must, or the burst proves nothing)",
                    r.fixture.name,
                    f.family.name(),
                    shown(&f.outside),
                    shown(&f.own)
                );
            }
        }
    }
    let _ = write!(t, "wall time per ruleset:");
    for r in ran {
        let _ = write!(t, " {} {:.0} s;", r.fixture.name, r.took.as_secs_f64());
    }
    let _ = writeln!(t, "\ntotal: {:.0} s", total.as_secs_f64());
    if !today_wrong.is_empty() {
        let _ = write!(
            t,
            "\nwhere the per-layer states are wrong (*):\n{today_wrong}"
        );
    }
    if !failures.is_empty() {
        let _ = write!(t, "\nfailures:\n{failures}");
    }
    (t, failures)
}

fn first_line(s: &str) -> String {
    let line = s.lines().next().unwrap_or("");
    line.chars().take(120).collect()
}

/// A probe in words for a failure line.
fn probe_word(p: &Result<Probe, String>) -> String {
    match p {
        Ok(p) => p.to_string(),
        Err(e) => format!("not probed ({e})"),
    }
}

/// The routed column: before then after for each source of [`FROM`].
fn routed_text(r: &Routed) -> String {
    let shown: Vec<String> = (0..FROM.len())
        .map(|k| {
            format!(
                "{}{}{}",
                short_probe(&r.before[k]),
                short_probe(&r.after[k]),
                if r.holds(k) { "" } else { "!" }
            )
        })
        .collect();
    shown.join(" ")
}

/// The kernel asked in scratch namespaces (`firewall explain PORT --confirm`) on each ruleset:
/// its parts counted by agreement, the doubtful ones apart with the fixture's reason, and every
/// problem a failure.
fn confirmations(t: &mut String, failures: &mut String, ran: &[Ran]) {
    let (mut total, mut asked, mut rulesets) = ([0usize; 4], 0, 0);
    let mut lines = String::new();
    let mut settled_lines = String::new();
    let mut took: Vec<f64> = Vec::new();
    for r in ran.iter().filter(|r| r.error.is_none()) {
        rulesets += 1;
        if r.confirmed.len() != r.rows.len() + 1 {
            let _ = writeln!(
                failures,
                "- {}: {} confirmations for {} openings and the undeclared port",
                r.fixture.name,
                r.confirmed.len(),
                r.rows.len()
            );
        }
        took.push(
            r.confirmed
                .iter()
                .map(|c| c.took.as_secs_f64())
                .fold(0.0, f64::max),
        );
        let mut tally = [0usize; 4];
        let mut ports = Vec::new();
        // The kernel's verdicts on the parts the evaluator found doubtful.
        let mut settled: std::collections::BTreeMap<String, usize> = Default::default();
        for c in &r.confirmed {
            for p in c.parts().iter().filter(|p| p.agreement == "settled") {
                *settled.entry(p.kernel.clone()).or_default() += 1;
            }
            asked += 1;
            let k = c.tally();
            for i in 0..4 {
                tally[i] += k[i];
            }
            ports.push(match c.outcome {
                Ok((Some(code), _)) => format!("{}:{code}", c.port),
                _ => format!("{}:ERR", c.port),
            });
            for p in super::confirmed::problems(c, r.fixture.undecided.is_some()) {
                let _ = writeln!(failures, "- {}: {p}", r.fixture.name);
            }
        }
        for i in 0..4 {
            total[i] += tally[i];
        }
        if !settled.is_empty() {
            let said: Vec<String> = settled.iter().map(|(k, n)| format!("{n} {k}")).collect();
            let _ = writeln!(
                settled_lines,
                "  {}: the kernel said {} ({})",
                r.fixture.name,
                said.join(", "),
                if r.fixture.undecided.is_some() {
                    "a known gap"
                } else {
                    "NOT a known gap: a failure"
                }
            );
        }
        let _ = writeln!(
            lines,
            "  {:<31} {:>3} agree {:>2} disagree {:>2} settled {:>2} unprobed  (port:exit {})",
            r.fixture.name,
            tally[0],
            tally[1],
            tally[2],
            tally[3],
            ports.join(" ")
        );
    }
    let [agree, disagree, settled, unprobed] = total;
    let _ = writeln!(
        t,
        "the kernel asked (`firewall explain PORT --confirm` after the apply, every opening's port \
         and {PORT_UNDECLARED}, on {rulesets} rulesets, {asked} confirmations): {} parts: {agree} \
         agree with the evaluator, {disagree} disagree, {settled} doubtful parts settled by the \
         kernel (not agreements: allowed only on the known gaps above), {unprobed} unprobed \
         (an interface with no address of the family, a forwarded hairpin, a part holding only \
         a host behind's own address)",
        agree + disagree + settled + unprobed
    );
    t.push_str(&lines);
    if !settled_lines.is_empty() {
        let _ = writeln!(t, "doubtful parts, settled by the kernel:\n{settled_lines}");
    }
    took.sort_by(f64::total_cmp);
    if let (Some(low), Some(high)) = (took.first(), took.last()) {
        let _ = writeln!(
            t,
            "the confirmations of one ruleset (at once, beside its probes): {low:.1} to {high:.1} \
             s, median {:.1} s",
            took[took.len() / 2]
        );
    }
}
