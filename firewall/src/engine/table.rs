//! One table's plan: where each opening's rules belong among the table's chains (kept behind
//! the operator's refusals), which of the host's marked rules go, and which rules are added,
//! with each opening's state per layer recorded as it is counted.

use super::*;

/// Where an opening stands in one layer, as the engine acts on it: the evaluator's placement
/// ([`crate::eval::Placement`]) as a position in the table's chains.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Place {
    /// The layer refuses nothing of it by default, or already accepts it: no rule.
    NotNeeded(String),
    /// Its rule goes in `chain`, before the rule at index `before` (the refusal that would take
    /// it), or at the end when `None` (the chain's policy refuses).
    At {
        chain: String,
        before: Option<usize>,
    },
    /// A test on its way cannot be decided: it is never reported admitted. `then` is where it
    /// goes otherwise.
    Doubtful { rule: String, then: Box<Place> },
    /// The operator refuses exactly this port in `chain`: the opening is not admitted there.
    Refused { chain: String, rule: String },
    /// The evaluator's model holds no such base chain: nothing is written there.
    Unread(String),
}

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
    let (wanted, pending, doubts) = wanted_in(layers, openings, driver, eval);
    let (changes, satisfied) = changes_of(key, view, &wanted, given, scope, eval, done);
    record(pending, &satisfied, doubts, done);
    changes
}

/// The rules one opening wants in one (chain, mark): how many, before which rule, their site,
/// and the layer they are for.
struct Wanted<'o> {
    opening: &'o Opening,
    count: usize,
    before: Option<usize>,
    site: crate::rules::Site,
    layer: &'o Layer,
}

/// Where an opening's state will be recorded once the marks are counted: (opening id, layer, the
/// (chain, mark) its rules are counted by, state before counting).
type Pending = (
    String,
    crate::outcome::LayerId,
    Option<(String, String)>,
    State,
);

/// What each opening wants in the table's layers, by (chain, mark); where each one's state
/// will be recorded; and each (opening, layer) whose way passes a rule the host cannot follow.
#[allow(clippy::type_complexity)]
fn wanted_in<'o>(
    layers: &'o [Layer],
    openings: &'o [Opening],
    driver: &dyn TableDriver,
    eval: &Eval<'_>,
) -> (
    BTreeMap<(String, String), Wanted<'o>>,
    Vec<Pending>,
    BTreeMap<(String, String), String>,
) {
    let mut wanted: BTreeMap<(String, String), Wanted<'_>> = BTreeMap::new();
    let mut pending: Vec<Pending> = Vec::new();
    // (opening, layer) whose way passes a rule the host cannot follow.
    let mut doubts: BTreeMap<(String, String), String> = BTreeMap::new();
    for l in layers {
        for o in openings.iter().filter(|o| l.crossed_by(o)) {
            let places = if l.can_drop {
                eval.places(l, o).unwrap_or_else(|| {
                    vec![Place::Unread(format!(
                        "the evaluator holds no base chain {} in {}",
                        l.chain,
                        l.describe()
                    ))]
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
                        pending.push((o.id.clone(), l.id(), None, State::NotNeeded(why)))
                    }
                    Place::Refused { chain, rule } => pending.push((
                        o.id.clone(),
                        l.id(),
                        None,
                        State::Refused(format!("in chain {chain}: {rule}")),
                    )),
                    Place::Unread(why) => {
                        pending.push((o.id.clone(), l.id(), None, State::Unwritable(why)))
                    }
                    Place::Doubtful { .. } => unreachable!("unwrapped above"),
                    Place::At { .. } if l.unwritable.is_some() => pending.push((
                        o.id.clone(),
                        l.id(),
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
                                l.id(),
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
                            l.id(),
                            Some((chain.clone(), mark.clone())),
                            State::Missing,
                        ));
                        wanted.entry((chain, mark)).or_insert(Wanted {
                            opening: o,
                            count,
                            before,
                            site,
                            layer: l,
                        });
                    }
                }
            }
        }
    }
    (wanted, pending, doubts)
}

/// The table's changes: the marked rules that go (those no opening wants where they stand,
/// or, with [`Scope::All`] or for a given opening, every other marked rule) and the rules added;
/// with the (chain, mark)s whose rules already stand.
fn changes_of(
    key: &TableKey,
    view: &TableView,
    wanted: &BTreeMap<(String, String), Wanted<'_>>,
    given: &BTreeSet<&str>,
    scope: Scope,
    eval: &Eval<'_>,
    done: &mut Converged,
) -> (Vec<Change>, BTreeSet<(String, String)>) {
    // The marked rules now in the table, by chain and mark: (index, how).
    let mut marked: BTreeMap<(String, String), Vec<usize>> = BTreeMap::new();
    for (chain, marks) in &view.marks {
        for (i, m) in marks.iter().enumerate() {
            if let Some(m) = m {
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
                // Where they stand, the model says whether they admit what the placement
                // would and pass every ban and limit the placement keeps ahead.
                let ok = at.len() == w.count && eval.stands(w.layer, w.opening);
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
    for ((chain, mark), w) in wanted {
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
    (changes, satisfied)
}

/// Each opening's state per layer into `done`: a missing rule whose marks already stand is
/// present, and one whose way passes a rule the host cannot follow is doubtful.
fn record(
    pending: Vec<Pending>,
    satisfied: &BTreeSet<(String, String)>,
    mut doubts: BTreeMap<(String, String), String>,
    done: &mut Converged,
) {
    for (id, layer, at, state) in pending {
        let state = match (&at, state) {
            (Some(k), State::Missing) if satisfied.contains(k) => State::Present,
            (_, s) => s,
        };
        let state = match (doubts.remove(&(id.clone(), layer.to_string())), state) {
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
}
