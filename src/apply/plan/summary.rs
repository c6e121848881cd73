//! A preview's summary line, as `terraform plan` ends: the count of resources per verb, counted
//! from the same entries the JSON gives, so the line and the document never disagree.

use super::Step;
use crate::apply::Outcome;
use serde::Serialize;

/// The count of resources per verb, as the summary line says them.
#[derive(Serialize, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Summary {
    pub create: usize,
    pub change: usize,
    pub hold: usize,
    pub remove: usize,
    pub release: usize,
    pub fail: usize,
    pub unchanged: usize,
}

impl Summary {
    /// The counts of `entries`' verbs.
    pub fn of(entries: &[Step]) -> Summary {
        let mut s = Summary::default();
        for e in entries {
            *match e.outcome {
                Outcome::Created => &mut s.create,
                Outcome::Changed => &mut s.change,
                Outcome::Held | Outcome::ChangedBySomethingElse => &mut s.hold,
                Outcome::Removed => &mut s.remove,
                Outcome::Forgotten => &mut s.release,
                Outcome::Failed => &mut s.fail,
                Outcome::Unchanged => &mut s.unchanged,
            } += 1;
        }
        s
    }

    /// The summary line, as `terraform plan` ends: `Plan: 3 to create, 1 to change, 2 to hold,
    /// 1,994 unchanged.`, the guard and the flip named after the counts when the act writes them.
    pub fn line(&self, guard: bool, firewall: Option<&str>) -> String {
        let mut parts: Vec<String> = [
            (self.create, "to create"),
            (self.change, "to change"),
            (self.remove, "to remove"),
            (self.release, "to release"),
            (self.hold, "to hold"),
            (self.fail, "would fail"),
        ]
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, w)| format!("{} {w}", thousands(*n)))
        .collect();
        if parts.is_empty() {
            parts.push("nothing to change".into());
        }
        parts.push(format!("{} unchanged", thousands(self.unchanged)));
        let mut line = format!("Plan: {}", parts.join(", "));
        if guard {
            line.push_str("; the guard to write");
        }
        if let Some(f) = firewall {
            line.push_str("; ");
            line.push_str(f);
        }
        line.push('.');
        line
    }
}

/// `1994` as `1,994`.
pub fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::tests::step;
    use super::*;

    #[test]
    fn the_summary_counts_each_verb_and_says_them_as_terraform_plan_ends() {
        let mut entries: Vec<Step> = (0..1994)
            .map(|i| step(&format!("u{i}"), Outcome::Unchanged))
            .collect();
        entries.extend((0..3).map(|i| step(&format!("c{i}"), Outcome::Created)));
        entries.push(step("x", Outcome::Changed));
        entries.push(step("h1", Outcome::Held));
        entries.push(step("h2", Outcome::ChangedBySomethingElse));
        let s = Summary::of(&entries);
        assert_eq!(
            s,
            Summary {
                create: 3,
                change: 1,
                hold: 2,
                unchanged: 1994,
                ..Summary::default()
            }
        );
        assert_eq!(
            s.line(false, None),
            "Plan: 3 to create, 1 to change, 2 to hold, 1,994 unchanged."
        );
        assert_eq!(
            Summary::default().line(true, Some("the flip to the derived filter")),
            "Plan: nothing to change, 0 unchanged; the guard to write; the flip to the derived \
             filter."
        );
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(999), "999");
    }
}
