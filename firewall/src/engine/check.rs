//! The engine's side of the check every write passes before it is sent ([`crate::eval::check`]):
//! a plan's changes as edits of the model, the classes of connection they could change, and,
//! where a planned rule would change more than its opening's own cells, another place tried —
//! the rule kept where it already stands, the same rule for this machine's own addresses only
//! (`fib daddr type local`, `-m addrtype --dst-type LOCAL`), or the rule before each jump that
//! leads to the chain, up to the base chain — and, where none is clean, nothing written: the
//! opening is reported not admitted there, naming the rule it would have had to bypass.
//!
//! Only table drivers' changes (nftables, iptables-nft, iptables-legacy) are checked here: the
//! engine places their rules. firewalld and ufw converge in their own terms.

use super::{Plan, TablePlan};
use crate::backend::{quoted, Change, TableKey};
use crate::eval::check::{self, Before, May, Violation};
use crate::eval::{families, placed_ways, Addrs, Conn, Edit, EditWhat, Fam, Fate, Iface, Model};
use crate::found::{Backend, Layer};
use crate::netlink::Family;
use crate::opening::{Opening, Path};
use crate::outcome::State;
use crate::published::Target;
use crate::rules::{self, Site};
use std::collections::{BTreeMap, BTreeSet};

/// How deep the search for another place follows jumps back towards the base chain.
const MAX_UP: usize = 16;

/// The table as the model names it.
pub(super) fn model_table(key: &TableKey) -> String {
    match key.backend {
        Backend::IptablesLegacy => format!(
            "{} {}",
            if key.family == Family::Ipv6 {
                "ip6tables-legacy"
            } else {
                "iptables-legacy"
            },
            key.table
        ),
        _ => format!("{} {}", key.family, key.table),
    }
}

/// The rules an opening's change writes, as an edit of the model.
fn insert(
    model: &Model,
    key: &TableKey,
    chain: &str,
    before: Option<usize>,
    o: &Opening,
    site: Site,
) -> Edit {
    insert_among(key, chain, before, o, site, &chain_names(model, key))
}

/// The chains of an x_tables table in `model`, which its rules' jumps are read against (none
/// for nf_tables, whose rules name no chain by word).
fn chain_names(model: &Model, key: &TableKey) -> Vec<String> {
    match key.backend {
        Backend::Nftables => Vec::new(),
        _ => model
            .table(&model_table(key))
            .map(|t| t.chains.keys().cloned().collect())
            .unwrap_or_default(),
    }
}

/// [`insert`], the table's chains named by the caller (once for all of a table's changes).
fn insert_among(
    key: &TableKey,
    chain: &str,
    before: Option<usize>,
    o: &Opening,
    site: Site,
    names: &[String],
) -> Edit {
    let table = model_table(key);
    let rules = match key.backend {
        Backend::Nftables => rules::nft_bodies(o, site)
            .iter()
            .map(check::planned_nft)
            .collect(),
        _ => {
            let fam = if site.family == Family::Ipv6 {
                Fam::V6
            } else {
                Fam::V4
            };
            rules::xt_specs_at(o, site)
                .iter()
                .map(|words| {
                    let spec: Vec<String> = words.iter().map(|w| quoted(w)).collect();
                    check::planned_xt(chain, &spec.join(" "), fam, names)
                })
                .collect()
        }
    };
    Edit {
        table,
        chain: chain.to_string(),
        what: EditWhat::Insert { before, rules },
    }
}

fn edit_of(model: &Model, key: &TableKey, c: &Change) -> Edit {
    edit_among(key, c, &chain_names(model, key))
}

/// Every change of a table as the model's edits, its chains read once.
fn table_edits<'a>(model: &'a Model, t: &'a TablePlan) -> impl Iterator<Item = Edit> + 'a {
    let names = chain_names(model, &t.key);
    t.changes.iter().map(move |c| edit_among(&t.key, c, &names))
}

fn edit_among(key: &TableKey, c: &Change, names: &[String]) -> Edit {
    match c {
        Change::Remove { chain, index, .. } => Edit {
            table: model_table(key),
            chain: chain.clone(),
            what: EditWhat::Remove(*index),
        },
        Change::Add {
            chain,
            before,
            opening,
            site,
        } => insert_among(key, chain, *before, opening, *site, names),
    }
}

/// What a plan may change: the cells of the openings it writes, and whatever the marked rules
/// it removes admitted (their ports, any sources: what goes with them is theirs).
struct Allowed<'o> {
    openings: Vec<&'o Opening>,
    withdrawn: BTreeSet<u16>,
}

impl May for Allowed<'_> {
    fn change(&self, conn: &Conn, before: &Fate) -> Addrs {
        let mut out = Addrs::none(conn.fam);
        if *before == Fate::Admitted && self.withdrawn.contains(&conn.port) {
            return Addrs::all(conn.fam);
        }
        for o in &self.openings {
            out = out.union(&check::own(o, conn, before));
        }
        out
    }
}

/// The ports a removed marked rule is about: the declared opening its mark names, else what the
/// rule itself tests.
fn withdrawn_ports(model: &Model, key: &TableKey, c: &Change, openings: &[Opening]) -> Vec<u16> {
    let Change::Remove {
        chain, index, mark, ..
    } = c
    else {
        return Vec::new();
    };
    let mut out: Vec<u16> = rules::id_of(mark)
        .and_then(|id| openings.iter().find(|o| o.id == id))
        .map(|o| vec![o.port])
        .unwrap_or_default();
    if let Some(keys) = model
        .table(&model_table(key))
        .and_then(|t| t.chains.get(chain))
        .and_then(|c| c.rules.get(*index))
        .and_then(|r| r.port_keys())
    {
        out.extend(keys);
    }
    out
}

/// Where else an opening's rule may go, in the order tried: the same place for this machine's
/// own addresses (incoming only), then before each rule that jumps or goes to the chain (or
/// dispatches to it through a verdict map), nearest first, each plain and then qualified.
fn candidates(
    model: &Model,
    table: &str,
    chain: &str,
    before: Option<usize>,
    o: &Opening,
) -> Vec<(String, Option<usize>, bool)> {
    // `fib` is there in every family, netdev's ingress included.
    let can_local = o.path == Path::Incoming;
    let mut out = Vec::new();
    if can_local {
        out.push((chain.to_string(), before, true));
    }
    let mut seen: BTreeSet<String> = BTreeSet::from([chain.to_string()]);
    let mut level = vec![chain.to_string()];
    for _ in 0..MAX_UP {
        let mut next = Vec::new();
        for target in &level {
            for (name, j) in model.callers(table, target) {
                out.push((name.clone(), Some(j), false));
                if can_local {
                    out.push((name.clone(), Some(j), true));
                }
                if seen.insert(name.clone()) {
                    next.push(name);
                }
            }
        }
        if next.is_empty() {
            break;
        }
        level = next;
    }
    out
}

/// One planned addition, found by its table and its index among the table's changes.
#[derive(Clone, Copy)]
struct AddAt {
    table: usize,
    change: usize,
}

fn add_of(plan: &Plan, at: AddAt) -> Option<(&TablePlan, &str, Option<usize>, &Opening, Site)> {
    let t = &plan.tables[at.table];
    match &t.changes[at.change] {
        Change::Add {
            chain,
            before,
            opening,
            site,
        } => Some((t, chain.as_str(), *before, opening, *site)),
        Change::Remove { .. } => None,
    }
}

/// The removals of `id`'s earlier rules in one table's plan.
fn removals_of<'t>(t: &'t TablePlan, id: &str) -> Vec<&'t Change> {
    t.changes
        .iter()
        .filter(|c| matches!(c, Change::Remove { mark, .. } if rules::id_of(mark) == Some(id)))
        .collect()
}

/// Whether the opening's own connections reach accept in one of the layer's base chains of
/// `table` once `after` stands.
fn useful(
    after: &Model,
    layers: &[Layer],
    table: &str,
    o: &Opening,
    ifaces: &[Iface],
    targets: &[Target],
) -> bool {
    layers.iter().filter(|l| l.crossed_by(o)).any(|l| {
        families(o).into_iter().any(|fam| {
            placed_ways(o, fam, ifaces, targets).iter().any(|w| {
                // Each branch of an undecided test apart, as placement reads them: a rule that
                // admits where the test lets the connection on is of use, the doubt said beside.
                after
                    .evaluate_base_branches(table, &l.chain, &w.conn, &w.sources)
                    .is_some_and(|parts| parts.iter().any(|p| p.fate == Fate::Admitted))
            })
        })
    })
}

/// The cells one opening's changes in one table would change beyond its own.
struct Solo<'p> {
    before: &'p Before,
    /// The port no opening names, asked about with each opening's own.
    spare: u16,
    model: &'p Model,
    ifaces: &'p [Iface],
    targets: &'p BTreeMap<String, Vec<Target>>,
    openings: &'p [Opening],
}

impl Solo<'_> {
    fn violations(&self, t: &TablePlan, o: &Opening, extra: Option<Edit>) -> Vec<Violation> {
        let mut edits: Vec<Edit> = removals_of(t, &o.id)
            .into_iter()
            .map(|c| edit_of(self.model, &t.key, c))
            .collect();
        let withdrawn = removals_of(t, &o.id)
            .into_iter()
            .flat_map(|c| withdrawn_ports(self.model, &t.key, c, self.openings))
            .collect();
        edits.extend(extra);
        let after = self.model.edited(&edits);
        // Its rules name its port alone: the classes of that port and of the spare one.
        let before = self
            .before
            .only(|c| c.port == o.port || c.port == self.spare);
        check::diff(
            &before,
            &after,
            &Allowed {
                openings: vec![o],
                withdrawn,
            },
        )
    }

    /// A candidate's edits, if it changes only the opening's own cells and admits them.
    fn clean(&self, t: &TablePlan, o: &Opening, edit: Edit) -> bool {
        let table = edit.table.clone();
        if !self.violations(t, o, Some(edit.clone())).is_empty() {
            return false;
        }
        let mut edits: Vec<Edit> = removals_of(t, &o.id)
            .into_iter()
            .map(|c| edit_of(self.model, &t.key, c))
            .collect();
        edits.push(edit);
        let none = Vec::new();
        let targets = self.targets.get(&o.id).unwrap_or(&none);
        useful(
            &self.model.edited(&edits),
            &t.layers,
            &table,
            o,
            self.ifaces,
            targets,
        )
    }
}

/// Checks a plan's changes before they are sent and corrects what would change more than its
/// own cells; what it moved or left unwritten is in the plan's states.
pub(super) fn settle(
    plan: &mut Plan,
    model: &Model,
    ifaces: &[Iface],
    targets: &BTreeMap<String, Vec<Target>>,
    openings: &[Opening],
    forwards: [bool; 2],
) {
    if plan.tables.iter().all(|t| t.changes.is_empty()) {
        return;
    }
    let mut adds: Vec<AddAt> = Vec::new();
    let mut ports: BTreeSet<(u8, u16)> = BTreeSet::new();
    let mut withdrawn: BTreeSet<u16> = BTreeSet::new();
    let mut dnat: Vec<Conn> = Vec::new();
    for (ti, t) in plan.tables.iter().enumerate() {
        for (ci, c) in t.changes.iter().enumerate() {
            match c {
                Change::Add { opening: o, .. } => {
                    adds.push(AddAt {
                        table: ti,
                        change: ci,
                    });
                    ports.insert((o.proto.number(), o.port));
                    if o.path == Path::Forwarded {
                        let none = Vec::new();
                        let to = targets.get(&o.id).unwrap_or(&none);
                        for fam in families(o) {
                            dnat.extend(
                                placed_ways(o, fam, ifaces, to).into_iter().map(|w| w.conn),
                            );
                        }
                    }
                }
                Change::Remove { .. } => {
                    for p in withdrawn_ports(model, &t.key, c, openings) {
                        withdrawn.insert(p);
                        ports.insert((6, p));
                        ports.insert((17, p));
                    }
                }
            }
        }
    }
    let named: BTreeSet<(u8, u16)> = openings
        .iter()
        .map(|o| (o.proto.number(), o.port))
        .chain(ports.iter().copied())
        .collect();
    let spare = check::unnamed_port(&named);
    ports.insert((6, spare));
    ports.insert((17, spare));
    let classes = check::classes(ifaces, &ports, &dnat, forwards);
    // The answers before the write (a walk of every class) on a second thread, while this one
    // lowers the changes and edits the model with them: neither reads what the other makes.
    let edited = || {
        let edits: Vec<Edit> = plan
            .tables
            .iter()
            .flat_map(|t| table_edits(model, t))
            .collect();
        model.edited_by(edits)
    };
    let (before, after) = if classes.len() < check::PARALLEL_FROM {
        (Before::of(model, classes), edited())
    } else {
        crate::pair::both(|| Before::of(model, classes), edited)
    };
    let planned: Vec<&Opening> = adds
        .iter()
        .filter_map(|a| add_of(plan, *a).map(|(_, _, _, o, _)| o))
        .collect();
    let all = Allowed {
        openings: planned,
        withdrawn,
    };
    let v = check::diff(&before, &after, &all);
    let withdrawn = all.withdrawn;
    if v.is_empty() {
        // The model as the write will leave it: the verdicts after the write read it when the
        // kernel shows no other commit between the listing and the batch (`Firewall::verdicts`).
        plan.after = Some(after);
        return;
    }
    drop(after);
    let solo = Solo {
        before: &before,
        spare,
        model,
        ifaces,
        targets,
        openings,
    };
    let mut culprits: Vec<(AddAt, Violation)> = Vec::new();
    for a in &adds {
        let (t, chain, at, o, site) = add_of(plan, *a).expect("an addition");
        let edit = insert(model, &t.key, chain, at, o, site);
        if let Some(first) = solo.violations(t, o, Some(edit)).into_iter().next() {
            culprits.push((*a, first));
        }
    }
    if culprits.is_empty() {
        // Each is clean alone but not together: write none of them.
        culprits = adds.iter().map(|a| (*a, v[0].clone())).collect();
    }
    let mut unwritten: Vec<(AddAt, Violation)> = Vec::new();
    for (a, first) in culprits {
        if !replace(plan, &solo, a) {
            unwritten.push((a, first));
        }
    }
    for (a, first) in &unwritten {
        leave_unwritten(plan, *a, first);
    }
    drop_empty(plan);
    // The plan as corrected, checked whole again: if it still changes more, nothing is added.
    let edits: Vec<Edit> = plan
        .tables
        .iter()
        .flat_map(|t| table_edits(model, t))
        .collect();
    let planned: Vec<&Opening> = plan
        .tables
        .iter()
        .flat_map(|t| t.changes.iter())
        .filter_map(|c| match c {
            Change::Add { opening, .. } => Some(opening),
            Change::Remove { .. } => None,
        })
        .collect();
    let after = model.edited(&edits);
    let again = check::diff(
        &before,
        &after,
        &Allowed {
            openings: planned,
            withdrawn,
        },
    );
    if again.is_empty() {
        plan.after = Some(after);
    }
    if let Some(first) = again.into_iter().next() {
        let rest: Vec<AddAt> = plan
            .tables
            .iter()
            .enumerate()
            .flat_map(|(ti, t)| {
                t.changes
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| matches!(c, Change::Add { .. }))
                    .map(move |(ci, _)| AddAt {
                        table: ti,
                        change: ci,
                    })
            })
            .collect();
        for a in rest {
            leave_unwritten(plan, a, &first);
        }
        drop_empty(plan);
    }
}

/// Tries the other places for one addition; true when one is clean (the change now says it).
fn replace(plan: &mut Plan, solo: &Solo<'_>, a: AddAt) -> bool {
    let (t, chain, at, o, site) = add_of(plan, a).expect("an addition");
    let table = model_table(&t.key);
    // Where its rules stand already, if the plan would move them from there.
    let kept: Vec<&Change> = removals_of(t, &o.id);
    if !kept.is_empty() && solo_keeps(solo, t, o) {
        let (id, key) = (o.id.clone(), t.key.to_string());
        let old_chain = match kept[0] {
            Change::Remove { chain, .. } => chain.clone(),
            Change::Add { .. } => unreachable!("removals only"),
        };
        for (ci, c) in plan.tables[a.table].changes.iter().enumerate() {
            let mine = match c {
                Change::Remove { mark, .. } => rules::id_of(mark) == Some(id.as_str()),
                Change::Add { opening, .. } => opening.id == id,
            };
            if mine {
                plan.unwritten.insert((a.table, ci));
            }
        }
        plan.done.added.retain(|(i, k)| !(i == &id && k == &key));
        plan.done
            .removed
            .retain(|(m, k)| !(rules::id_of(m) == Some(id.as_str()) && k == &key));
        set_state(
            plan,
            a.table,
            &id,
            &old_chain,
            Some(old_chain.clone()),
            State::Present,
        );
        return true;
    }
    for (c, before, local) in candidates(solo.model, &table, chain, at, o) {
        let site = Site { local, ..site };
        let edit = insert(solo.model, &t.key, &c, before, o, site);
        if !solo.clean(t, o, edit) {
            continue;
        }
        let (id, old_chain) = (o.id.clone(), chain.to_string());
        let opening = o.clone();
        plan.tables[a.table].changes[a.change] = Change::Add {
            chain: c.clone(),
            before,
            opening,
            site,
        };
        set_state(plan, a.table, &id, &old_chain, Some(c), State::Missing);
        return true;
    }
    false
}

/// Whether an opening's rules may stay where they stand in one table: alone they change only
/// its own cells, and they admit it.
fn solo_keeps(solo: &Solo<'_>, t: &TablePlan, o: &Opening) -> bool {
    let removes: Vec<Edit> = removals_of(t, &o.id)
        .into_iter()
        .map(|c| edit_of(solo.model, &t.key, c))
        .collect();
    let without = solo.model.edited(&removes);
    let conns = solo
        .before
        .only(|c| c.port == o.port || c.port == solo.spare)
        .conns;
    let reverse = Before::of(&without, conns);
    let v = check::diff(
        &reverse,
        solo.model,
        &Allowed {
            openings: vec![o],
            withdrawn: BTreeSet::new(),
        },
    );
    let none = Vec::new();
    let targets = solo.targets.get(&o.id).unwrap_or(&none);
    v.is_empty()
        && useful(
            solo.model,
            &t.layers,
            &model_table(&t.key),
            o,
            solo.ifaces,
            targets,
        )
}

/// Removes an addition from the plan and says why in the opening's state for that table.
fn leave_unwritten(plan: &mut Plan, a: AddAt, first: &Violation) {
    let Some((t, chain, _, o, _)) = add_of(plan, a) else {
        return;
    };
    let (id, chain, key) = (o.id.clone(), chain.to_string(), t.key.to_string());
    let rule = first
        .bypassed()
        .map(|d| d.to_string())
        .unwrap_or_else(|| "the found firewall's own answer".into());
    let why = format!(
        "no place in {key} admits it without changing what is not its own ({}); the rule it would have had to bypass: {rule}",
        first.describe()
    );
    plan.unwritten.insert((a.table, a.change));
    plan.done.added.retain(|(i, k)| !(i == &id && k == &key));
    set_state(plan, a.table, &id, &chain, None, State::Bypass(why));
}

/// Drops the additions [`leave_unwritten`] named.
fn drop_empty(plan: &mut Plan) {
    let gone = std::mem::take(&mut plan.unwritten);
    for (ti, t) in plan.tables.iter_mut().enumerate() {
        let mut ci = 0;
        t.changes.retain(|_| {
            ci += 1;
            !gone.contains(&(ti, ci - 1))
        });
    }
}

/// The state of `id` in the layers of one table whose rule was to go in `chain`.
fn set_state(
    plan: &mut Plan,
    table: usize,
    id: &str,
    chain: &str,
    now: Option<String>,
    state: State,
) {
    let layers: Vec<crate::outcome::LayerId> =
        plan.tables[table].layers.iter().map(Layer::id).collect();
    if let Some(ps) = plan.done.states.get_mut(id) {
        for p in ps
            .iter_mut()
            .filter(|p| layers.contains(&p.layer) && p.chain.as_deref() == Some(chain))
        {
            p.chain = now.clone();
            p.state = state.clone();
        }
    }
}
