//! One table's plan: where each opening's rules belong among the table's chains (kept behind
//! the operator's refusals), which of the host's marked rules go, and which rules are added,
//! with each opening's state per layer recorded as it is counted.

use super::*;

/// One table's changes: where each opening's rules belong in it, which marked rules go, and
/// which rules are added; records each opening's state per layer into `done`.
#[allow(clippy::too_many_arguments)]
pub(super) fn table_plan(
    key: &TableKey,
    view: &TableView,
    layers: &[Layer],
    openings: &[Opening],
    given: &BTreeSet<&str>,
    scope: Scope,
    driver: &dyn TableDriver,
    eval: &Eval<'_>,
    done: &mut Converged,
) -> Vec<Change> {
    // (chain, mark) → (opening, how many rules, before which rule, site, well placed so far).
    struct Wanted<'o> {
        opening: &'o Opening,
        count: usize,
        before: Option<usize>,
        site: crate::rules::Site,
        want: Want,
    }
    let mut wanted: BTreeMap<(String, String), Wanted<'_>> = BTreeMap::new();
    // Where each opening's state will be recorded once the marks are counted.
    // (opening id, layer, the (chain, mark) its rules are counted by, state before counting).
    type Pending = (String, String, Option<(String, String)>, State);
    let mut pending: Vec<Pending> = Vec::new();
    // (opening, layer) whose way passes a rule the host cannot follow.
    let mut doubts: BTreeMap<(String, String), String> = BTreeMap::new();
    for l in layers {
        for o in openings.iter().filter(|o| l.crossed_by(o)) {
            let want = Want {
                proto: o.proto.number(),
                port: o.port,
                forwarded: o.path == crate::opening::Path::Forwarded,
                before_dnat: l.before_dnat(),
            };
            let places = if l.can_drop {
                eval.places(l, o).unwrap_or_else(|| {
                    vec![place::place(
                        view,
                        &l.chain,
                        l.policy == Policy::Drop,
                        &want,
                    )]
                })
            } else {
                vec![Place::NotNeeded(format!("nothing in {} can drop", l.chain))]
            };
            for place in places {
                let (place, doubt) = match place {
                    Place::Doubtful { rule, then } => (*then, Some(rule)),
                    p => (p, None),
                };
                if let Some(rule) = &doubt {
                    doubts.insert((o.id.clone(), l.describe()), rule.clone());
                }
                match place {
                    Place::NotNeeded(why) => {
                        pending.push((o.id.clone(), l.describe(), None, State::NotNeeded(why)))
                    }
                    Place::Refused { chain, rule } => pending.push((
                        o.id.clone(),
                        l.describe(),
                        None,
                        State::Refused(format!("in chain {chain}: {rule}")),
                    )),
                    Place::Doubtful { .. } => unreachable!("unwrapped above"),
                    Place::At { .. } if l.unwritable.is_some() => pending.push((
                        o.id.clone(),
                        l.describe(),
                        None,
                        State::Unwritable(l.unwritable.clone().unwrap_or_default()),
                    )),
                    Place::At { chain, before } => {
                        let site = l.site();
                        let mark = rules::mark(o);
                        let count = driver.rules_for(o, site);
                        if count == 0 {
                            pending.push((
                                o.id.clone(),
                                l.describe(),
                                None,
                                State::NotNeeded(format!(
                                    "its sources have no address of family {}",
                                    l.family
                                )),
                            ));
                            continue;
                        }
                        pending.push((
                            o.id.clone(),
                            l.describe(),
                            Some((chain.clone(), mark.clone())),
                            State::Missing,
                        ));
                        wanted.entry((chain, mark)).or_insert(Wanted {
                            opening: o,
                            count,
                            before,
                            site,
                            want,
                        });
                    }
                }
            }
        }
    }
    // The marked rules now in the table, by chain and mark: (index, how).
    let mut marked: BTreeMap<(String, String), Vec<usize>> = BTreeMap::new();
    for (chain, rules) in &view.seen {
        for (i, r) in rules.iter().enumerate() {
            if let Some(m) = &r.mark {
                marked
                    .entry((chain.clone(), m.clone()))
                    .or_default()
                    .push(i);
            }
        }
    }
    let mut changes = Vec::new();
    let mut satisfied: BTreeSet<(String, String)> = BTreeSet::new();
    for ((chain, mark), at) in &marked {
        let remove = match wanted.get(&(chain.clone(), mark.clone())) {
            Some(w) => {
                let ok = at.len() == w.count
                    && at
                        .iter()
                        .all(|i| place::well_placed(view, chain, *i, w.before, &w.want));
                if ok {
                    satisfied.insert((chain.clone(), mark.clone()));
                }
                !ok
            }
            None => scope == Scope::All || rules::id_of(mark).is_some_and(|id| given.contains(id)),
        };
        if remove {
            for i in at {
                changes.push(Change::Remove {
                    chain: chain.clone(),
                    index: *i,
                    mark: mark.clone(),
                    how: view.how[chain][*i].clone(),
                });
                done.removed.push((mark.clone(), key.to_string()));
            }
        }
    }
    for ((chain, mark), w) in &wanted {
        if satisfied.contains(&(chain.clone(), mark.clone())) {
            continue;
        }
        changes.push(Change::Add {
            chain: chain.clone(),
            before: w.before,
            opening: w.opening.clone(),
            site: w.site,
        });
        done.added.push((w.opening.id.clone(), key.to_string()));
    }
    for (id, layer, at, state) in pending {
        let state = match (&at, state) {
            (Some(k), State::Missing) if satisfied.contains(k) => State::Present,
            (_, s) => s,
        };
        let state = match (doubts.remove(&(id.clone(), layer.clone())), state) {
            (Some(rule), State::Present | State::Missing | State::NotNeeded(_)) => {
                State::Doubtful(rule)
            }
            (_, s) => s,
        };
        done.states.entry(id).or_default().push(Presence {
            layer,
            chain: at.map(|(c, _)| c),
            state,
        });
    }
    changes
}
