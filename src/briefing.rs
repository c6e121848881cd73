//! The briefing: what the host found, kept, took over and could not do, with an outcome that is
//! computed from its worst line and never stored beside it.
//!
//! Two independently written fields drift; a briefing whose outcome is derived cannot read fine
//! while carrying a failed line. So [`Briefing`] stores lines and prose, and [`Briefing::outcome`]
//! is the only place an outcome comes from.

use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// How one line stands, ordered from best to worst.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Mark {
    /// Done as told.
    Ok,
    /// The machine's configuration was kept where it and the declaration disagree.
    Kept,
    /// The host could not tell.
    Unknown,
    /// Something the host needed did not happen.
    Failed,
}

impl Mark {
    pub fn as_str(self) -> &'static str {
        match self {
            Mark::Ok => "ok",
            Mark::Kept => "kept",
            Mark::Unknown => "unknown",
            Mark::Failed => "failed",
        }
    }
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub mark: Mark,
    pub subject: String,
    pub detail: String,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Briefing {
    pub node: String,
    pub mode: String,
    /// When the briefing was written, RFC 3339 UTC.
    pub at: String,
    pub lines: Vec<Line>,
    /// What an operator should look at, in sentences.
    pub look_at: Vec<String>,
}

/// The briefing as printed: the stored briefing plus the computed outcome.
#[derive(Serialize)]
pub struct Shown<'a> {
    pub outcome: Mark,
    #[serde(flatten)]
    pub briefing: &'a Briefing,
}

impl Briefing {
    /// The outcome: the worst mark of any line, `ok` for a briefing with none.
    pub fn outcome(&self) -> Mark {
        self.lines.iter().map(|l| l.mark).max().unwrap_or(Mark::Ok)
    }

    /// Whether it says what `other` says, whenever each was written.
    pub fn reads_as(&self, other: &Briefing) -> bool {
        self.node == other.node
            && self.mode == other.mode
            && self.lines == other.lines
            && self.look_at == other.look_at
    }

    pub fn shown(&self) -> Shown<'_> {
        Shown {
            outcome: self.outcome(),
            briefing: self,
        }
    }

    /// The briefing as a person reads it.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "outcome    {:<24} derived from the worst line below",
            self.outcome().as_str()
        );
        let _ = writeln!(out, "node       {}", self.node);
        let _ = writeln!(out, "mode       {}", self.mode);
        let _ = writeln!(out, "at         {}", self.at);
        let _ = writeln!(out);
        for l in &self.lines {
            let _ = writeln!(
                out,
                "  {:<8} {:<24} {}",
                l.mark.as_str(),
                l.subject,
                l.detail
            );
        }
        if !self.look_at.is_empty() {
            let _ = writeln!(out, "\nwhat to look at");
            for s in &self.look_at {
                let _ = writeln!(out, "  {s}");
            }
        }
        out
    }
}

/// The current time as RFC 3339 UTC, without a date library.
pub fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    rfc3339(secs)
}

fn rfc3339(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + if m <= 2 { 1 } else { 0 };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(mark: Mark) -> Line {
        Line {
            mark,
            subject: "s".into(),
            detail: "d".into(),
        }
    }

    fn briefing(lines: Vec<Line>) -> Briefing {
        Briefing {
            node: "n".into(),
            mode: "adopted".into(),
            at: "t".into(),
            lines,
            look_at: vec![],
        }
    }

    #[test]
    fn outcome_is_the_worst_line() {
        assert_eq!(briefing(vec![]).outcome(), Mark::Ok);
        assert_eq!(
            briefing(vec![line(Mark::Ok), line(Mark::Kept)]).outcome(),
            Mark::Kept
        );
        assert_eq!(
            briefing(vec![
                line(Mark::Failed),
                line(Mark::Ok),
                line(Mark::Unknown)
            ])
            .outcome(),
            Mark::Failed
        );
    }

    #[test]
    fn stored_form_carries_no_outcome() {
        let b = briefing(vec![line(Mark::Failed)]);
        let stored = serde_json::to_value(&b).unwrap();
        assert!(stored.get("outcome").is_none());
        let shown = serde_json::to_value(b.shown()).unwrap();
        assert_eq!(shown["outcome"], "failed");
    }

    #[test]
    fn dates_are_civil() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_795_999_999), "2026-11-30T00:53:19Z");
    }
}
