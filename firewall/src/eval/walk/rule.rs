//! One rule of the walk: its tests over a packet (splitting the sources, forking on what cannot
//! be decided), the limits and sets it meets, and the marks it sets, up to its verdict.

use super::*;

impl<'m> Walker<'m> {
    /// Runs a rule's steps over a packet: the parts that reach its verdict and those that do not.
    pub(super) fn rule(
        &mut self,
        table: &TableIr,
        items: &[Item],
        at: &At<'_>,
        p: Pkt,
        here: &dyn Fn() -> Decider,
    ) -> Vec<(Pkt, End)> {
        let mut done = Vec::new();
        // A limit refuses past its bound when the rule's verdict is one that refuses.
        let refusing = items.iter().any(
            |i| matches!(i, Item::Act(a) if !matches!(a, Act::Accept | Act::Nat | Act::Continue)),
        );
        let mut cur = vec![(p, Flags::default())];
        // The two lists swap at each step, so a rule allocates them once.
        let mut next = Vec::new();
        for item in items {
            for (mut q, f) in cur.drain(..) {
                match item {
                    Item::Cond(c) => match self.cond(table, c, at, &q) {
                        M::All(named) => next.push((
                            q,
                            Flags {
                                port: f.port || named,
                                ..f
                            },
                        )),
                        M::None => done.push((q, End::NoMatch)),
                        M::Some(yes, named) => {
                            let no = q.src.minus(&yes);
                            if !no.is_empty() {
                                let mut n = q.clone();
                                n.src = no;
                                done.push((n, End::NoMatch));
                            }
                            if !yes.is_empty() {
                                q.src = yes;
                                next.push((
                                    q,
                                    Flags {
                                        port: f.port || named,
                                        source: true,
                                    },
                                ));
                            }
                        }
                        M::SourceAll(named) => next.push((
                            q,
                            Flags {
                                port: f.port || named,
                                source: true,
                            },
                        )),
                        M::Unknown(why) => {
                            if q.forks.len() >= MAX_FORKS {
                                done.push((q, End::Doubt(why)));
                                continue;
                            }
                            let id = self.doubts.len();
                            let at = here();
                            if self.trace {
                                q.trace.push(format!(
                                    "{}: {} tests {why}, which cannot be told: followed both ways",
                                    at.place(),
                                    at.text
                                ));
                            }
                            self.doubts.push((at, why));
                            let mut n = q.clone();
                            n.forks.push((id, false));
                            if self.trace {
                                n.trace.push("  (taken as not matching)".into());
                            }
                            done.push((n, End::NoMatch));
                            q.forks.push((id, true));
                            if self.trace {
                                q.trace.push("  (taken as matching)".into());
                            }
                            next.push((q, f));
                        }
                    },
                    Item::Fixed(true, _) => next.push((q, f)),
                    Item::Fixed(false, _) => done.push((q, End::NoMatch)),
                    Item::Limit(what) => {
                        // Not met by a connection that does not flood: the rule goes on, but
                        // the way passed a refusal that keeps first.
                        if refusing {
                            let by = here();
                            if self.trace {
                                q.trace.push(format!(
                                    "{}: {} → {what}: passed (not flooding)",
                                    by.place(),
                                    by.text
                                ));
                            }
                            if !q.limits.contains(&by) {
                                q.limits.push(by);
                            }
                        }
                        done.push((q, End::NoMatch));
                    }
                    Item::SetAdd(set) => {
                        if !q.changed.contains(set) {
                            q.changed.push(set.clone());
                        }
                        next.push((q, f));
                    }
                    Item::NoTrack => {
                        // The kernel's notrack is allowed at prerouting and output only and
                        // does nothing once conntrack (-200) has run.
                        if matches!(at.hook, Hook::Prerouting | Hook::Output) && at.priority < -200
                        {
                            q.untracked = true;
                        }
                        next.push((q, f));
                    }
                    Item::Mark(op) => {
                        q.mark = self.mark_op(op, q.mark, q.ctmark, at, &q, false);
                        q.mark_port =
                            f.port || (matches!(op, MarkOp::RestoreFromCt { .. }) && q.ctmark_port);
                        next.push((q, f));
                    }
                    Item::CtMark(op) => {
                        q.ctmark = self.mark_op(op, q.ctmark, q.mark, at, &q, true);
                        q.ctmark_port =
                            f.port || (matches!(op, MarkOp::SaveToCt { .. }) && q.mark_port);
                        next.push((q, f));
                    }
                    Item::Act(a) => done.push((q, End::Act(a.clone(), f))),
                }
            }
            std::mem::swap(&mut cur, &mut next);
            if cur.is_empty() {
                break;
            }
        }
        done.extend(cur.into_iter().map(|(q, _)| (q, End::NoMatch)));
        done
    }

    fn mark_op(
        &self,
        op: &MarkOp,
        own: Option<u32>,
        other: Option<u32>,
        at: &At<'_>,
        q: &Pkt,
        ct: bool,
    ) -> Option<u32> {
        match op {
            MarkOp::Set(l) => match self.load(l, at, q) {
                Val::Bytes(b) if b.len() >= 4 => Some(u32::from_ne_bytes(b[..4].try_into().ok()?)),
                _ => None,
            },
            MarkOp::AndXor { keep, xor } => own.map(|m| (m & keep) ^ xor),
            MarkOp::SaveToCt { ctmask, nfmask } if ct => Some((own? & !ctmask) ^ (other? & nfmask)),
            MarkOp::RestoreFromCt { ctmask, nfmask } if !ct => {
                Some((own? & !nfmask) ^ (other? & ctmask))
            }
            _ => own,
        }
    }
}
