//! `converge --preview` in words: its exit code, its `--json` document (a plan with the flip's
//! account beside it) and the text a person reads.

use super::{Preview, Reach};
use std::fmt::Write as _;

impl Preview {
    /// What the flip closes, counted as the lines say it: a port reached now that no opening
    /// admits `WILL CLOSE`; one reached from nowhere now `stays closed`.
    fn closing_words(&self) -> String {
        let all: Vec<&Reach> = self.listening.iter().chain(&self.published).collect();
        let stays = all
            .iter()
            .filter(|r| r.closes && r.change == "stays closed")
            .count();
        let closes = all.iter().filter(|r| r.closes).count() - stays;
        let ports = |n: usize| if n == 1 { "port" } else { "ports" };
        let stay = |n: usize| {
            format!(
                "{n} {} closed now {}",
                ports(n),
                if n == 1 {
                    "stays closed"
                } else {
                    "stay closed"
                }
            )
        };
        match (closes, stays) {
            (0, 0) => "no port closes".into(),
            (c, 0) => format!("{c} {} reached now would close", ports(c)),
            (0, s) => format!("no port reached now closes; {}", stay(s)),
            (c, s) => format!("{c} {} reached now would close; {}", ports(c), stay(s)),
        }
    }
}

impl Preview {
    /// 3 when the flip would be refused; else 4, changes pending (a flip always changes the
    /// firewall).
    pub fn exit_code(&self) -> u8 {
        if self.refusals.is_empty() {
            crate::apply::plan::CHANGES_PENDING
        } else {
            3
        }
    }

    /// The `--json` document: a plan, as every preview's, with the flip's account beside it.
    pub fn document(&self) -> serde_json::Value {
        let mut plan = self.plan.clone();
        plan.pending = self.exit_code() == crate::apply::plan::CHANGES_PENDING;
        let mut v = crate::json_contract::document("plan", self.exit_code(), &plan);
        if let (Some(doc), Ok(serde_json::Value::Object(own))) =
            (v.as_object_mut(), serde_json::to_value(self))
        {
            for (k, val) in own {
                doc.entry(k).or_insert(val);
            }
        }
        v
    }

    /// The preview as a person reads it: the flip's account, then the converge's plan resource
    /// by resource (unchanged ones listed only when `verbose`) and its summary line.
    pub fn render(&self, verbose: bool) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "converge preview for node {}: adopted → converged (nothing has changed)",
            self.node
        );
        let line = |out: &mut String, r: &Reach| {
            let after = match (&r.admitted_by, r.closes) {
                (Some(id), false) => format!(
                    "{}: {id}, from {} (now from {})",
                    r.change,
                    r.from.as_deref().unwrap_or("anywhere"),
                    r.now
                ),
                _ if r.change.is_empty() => "WILL CLOSE: no opening admits it".to_string(),
                _ => r.change.clone(),
            };
            let _ = writeln!(
                out,
                "  {:<4} {:<22} {:<34} {after}",
                r.proto,
                format!("{}:{}", r.address, r.port),
                r.by
            );
        };
        let _ = writeln!(out, "\nlistening on this machine now:");
        if self.listening.is_empty() {
            let _ = writeln!(out, "  (nothing but loopback)");
        }
        for r in &self.listening {
            line(&mut out, r);
        }
        let _ = writeln!(out, "\npublished by containers now:");
        if self.published.is_empty() {
            let _ = writeln!(out, "  (none)");
        }
        for r in &self.published {
            line(&mut out, r);
        }
        let _ = writeln!(out, "\nmodules the flip takes:");
        if self.take.is_empty() {
            let _ = writeln!(out, "  (none: every module is taken already)");
        }
        for t in &self.take {
            if t.files.is_empty() {
                let _ = writeln!(out, "  {}: no held file", t.module);
            }
            for f in &t.files {
                let _ = writeln!(
                    out,
                    "  {}: replaces held file {}{}",
                    t.module,
                    f.path,
                    f.original
                        .as_deref()
                        .map(|o| format!(" (original kept at {o})"))
                        .unwrap_or_default()
                );
            }
        }
        let _ = writeln!(out, "\nfound firewall, disabled (never flushed):");
        if self.found_firewall.is_empty() {
            let _ = writeln!(out, "  (none configured here)");
        }
        for r in &self.found_firewall {
            let _ = writeln!(
                out,
                "  {}: {}",
                r.kind,
                if r.parts.is_empty() {
                    "nothing loaded now".to_string()
                } else {
                    r.parts.join(", ")
                }
            );
            let _ = writeln!(out, "    {}", r.how);
        }
        let _ = writeln!(out, "\nderived filter: {}", self.filter);
        if !self.lifts.is_empty() {
            let _ = writeln!(out, "\nrefusals the flip LIFTS:");
            for l in &self.lifts {
                let _ = writeln!(out, "  lifts: {l}");
            }
        }
        if self.refusals.is_empty() {
            let _ = writeln!(out);
            out.push_str(&self.plan.render(verbose));
            let _ = writeln!(
                out,
                "\nthe flip would go ahead ({}): run `mesh-host converge`",
                self.closing_words()
            );
        } else {
            let _ = writeln!(out, "\nthe flip would be REFUSED:");
            for r in &self.refusals {
                let _ = writeln!(out, "  {r}");
            }
        }
        out
    }
}
