//! The engine's side of the evaluator: the ruleset read again with its sets' elements for the
//! verdicts it reports and the walk `firewall explain` prints, and placement asked of the model.

use super::table::Place;
use super::Firewall;
use crate::detect;
use crate::error::Result;
use crate::eval::{Fam, Model, Outcome, Placement, Snapshot, Verdict};
use crate::found::{Found, Layer};
use crate::netlink::Family;
use crate::opening::Opening;
use crate::published;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::rc::Rc;

impl Firewall<'_> {
    /// The ruleset with every set's elements, for the evaluator.
    pub(super) fn snapshot(&mut self) -> Result<Snapshot> {
        self.listings += 1;
        match self.nf.as_mut() {
            Some(s) => Snapshot::read(s),
            None => Ok(Snapshot::default()),
        }
    }

    /// The namespace's ipsets with their members and kernel indices, for x_tables' `set` match;
    /// `None` (each such match undecided) without a socket or when the kernel would not list
    /// them. Without the `ip_set` module there is no set to read, and asking would load it.
    pub(super) fn ipsets(&mut self) -> Option<Vec<crate::netlink::Ipset>> {
        let sock = self.nf.as_mut()?;
        if !std::path::Path::new("/sys/module/ip_set").exists() {
            return Some(Vec::new());
        }
        sock.ipsets().ok()
    }

    /// The ruleset read again, with every set's elements, the legacy tables and the ipsets, its
    /// layers and its model.
    fn fresh_model(&mut self) -> Result<(Snapshot, Found, Model)> {
        let mut snap = self.snapshot()?;
        let listed = self.nf.is_some().then_some(&snap.ruleset);
        let found = detect::detect_in(listed, self.exec.get(), &self.proc)?;
        snap.legacy = legacy_of(&found.legacy_saves);
        snap.ipsets = self.ipsets();
        let model = Model::new(&snap);
        Ok((snap, found, model))
    }

    /// The walk of each way an opening's connections come, with the verdicts met on it:
    /// `mesh-host firewall explain`.
    /// `only_iif` keeps the ways arriving on that interface alone.
    pub fn explain(
        &mut self,
        o: &Opening,
        only_iif: Option<&str>,
    ) -> Result<Vec<(crate::eval::Way, crate::eval::Answer)>> {
        let (snap, found, model) = self.fresh_model()?;
        Ok(self.walks(&snap, &found, &model, o, only_iif))
    }

    /// The same for each of `openings`, from one reading of the ruleset: what `apply
    /// --confirm` asks the kernel about.
    pub fn explain_each(
        &mut self,
        openings: &[Opening],
    ) -> Result<Vec<Vec<(crate::eval::Way, crate::eval::Answer)>>> {
        let (snap, found, model) = self.fresh_model()?;
        Ok(openings
            .iter()
            .map(|o| self.walks(&snap, &found, &model, o, None))
            .collect())
    }

    fn walks(
        &self,
        snap: &Snapshot,
        found: &Found,
        model: &Model,
        o: &Opening,
        only_iif: Option<&str>,
    ) -> Vec<(crate::eval::Way, crate::eval::Answer)> {
        let ifaces = self.interfaces();
        let targets = match o.path {
            crate::opening::Path::Forwarded => {
                published::targets(&snap.ruleset, &found.legacy_saves, o.proto, o.port)
            }
            crate::opening::Path::Incoming => Vec::new(),
        };
        let mut out = Vec::new();
        for fam in crate::eval::families(o) {
            for w in crate::eval::ways(o, fam, &ifaces, &targets) {
                if only_iif.is_some_and(|i| i != w.conn.iif) {
                    continue;
                }
                let a = model.explain(&w.conn, &w.sources);
                out.push((w, a));
            }
        }
        out
    }

    /// Each opening's verdict end to end, read from the kernel now: what a new connection from
    /// each of its sources meets on every layer it crosses ([`crate::eval`]). This, not the
    /// presence of rules, is what the host reports.
    pub fn verdicts(&mut self, openings: &[Opening]) -> Result<BTreeMap<String, Verdict>> {
        let now = if self.last.is_some() {
            self.generation()?
        } else {
            None
        };
        // Legacy tables have no generation: their saves, read again, must say what the model read
        // (two small child processes rather than a second reading of every table and a model).
        let legacy_same = match &self.last {
            Some(last) if !last.legacy.is_empty() && Some(last.generation) == now => {
                detect::same_saves(
                    &last.legacy,
                    &detect::legacy_saves_now(self.exec.get(), &self.proc)?,
                )
            }
            _ => true,
        };
        if let (Some(last), Some(now), true) = (&mut self.last, now, legacy_same) {
            if last.generation == now
                && openings.iter().all(|o| {
                    o.path == crate::opening::Path::Incoming || last.targets.contains_key(&o.id)
                })
            {
                let ifaces = super::interfaces(&self.runtime_bridges);
                // Read while the batch committed, from this model, for these very openings and
                // interfaces: the same answers, already made.
                if let Some(ahead) = last.ahead.take() {
                    if ahead.openings == openings && ahead.ifaces == ifaces {
                        self.read_ahead += 1;
                        return Ok(ahead.verdicts);
                    }
                }
                return Ok(verdicts_split(
                    &last.model,
                    openings,
                    &ifaces,
                    &last.targets,
                ));
            }
        }
        let (snap, found, model) = self.fresh_model()?;
        let ifaces = self.interfaces();
        let targets: BTreeMap<String, Vec<published::Target>> = openings
            .iter()
            .filter(|o| o.path == crate::opening::Path::Forwarded)
            .map(|o| {
                let t = published::targets(&snap.ruleset, &found.legacy_saves, o.proto, o.port);
                (o.id.clone(), t)
            })
            .collect();
        let out = verdicts_split(&model, openings, &ifaces, &targets);
        self.found = Some(found);
        self.detected = self.nf.as_ref().map(|_| snap.ruleset.generation);
        Ok(out)
    }
}

/// Each of `openings`' verdict in `model`, with the machine's `ifaces` and where each forwarded
/// opening's published port leads.
fn verdicts_of(
    model: &Model,
    openings: &[Opening],
    ifaces: &[crate::eval::Iface],
    targets: &BTreeMap<String, Vec<published::Target>>,
) -> BTreeMap<String, Verdict> {
    let none = Vec::new();
    openings
        .iter()
        .map(|o| {
            let t = targets.get(&o.id).unwrap_or(&none);
            (o.id.clone(), model.verdict(o, ifaces, t))
        })
        .collect()
}

/// [`verdicts_of`], the openings in two halves, one on a second thread, from [`SPLIT_FROM`]
/// openings: where nothing else runs beside them (the verdicts read while the kernel commits
/// already have a thread of their own, and the commit the other).
fn verdicts_split(
    model: &Model,
    openings: &[Opening],
    ifaces: &[crate::eval::Iface],
    targets: &BTreeMap<String, Vec<published::Target>>,
) -> BTreeMap<String, Verdict> {
    if openings.len() < SPLIT_FROM {
        return verdicts_of(model, openings, ifaces, targets);
    }
    let (first, second) = openings.split_at(openings.len() / 2);
    let (mut out, rest) = crate::pair::both(
        || verdicts_of(model, second, ifaces, targets),
        || verdicts_of(model, first, ifaces, targets),
    );
    out.extend(rest);
    out
}

/// How many openings make their verdicts worth reading in two halves (a verdict is a few
/// microseconds, a thread a few hundred).
pub(super) const SPLIT_FROM: usize = 256;

/// How many openings make their verdicts worth reading on a second thread while the kernel
/// commits: a verdict is a few microseconds, a thread a few hundred (with the allocator's heap
/// it leaves behind), and the resident host's acts of a few openings start none.
pub(super) const AHEAD_FROM: usize = 256;

/// The verdicts of a batch's openings read from the model it leaves, while the kernel commits
/// it, with what they were read for; [`Firewall::verdicts`] takes them when it would read that
/// model for those openings and the interfaces are still the ones they were read with.
pub(super) struct Ahead {
    openings: Vec<Opening>,
    ifaces: Vec<crate::eval::Iface>,
    verdicts: BTreeMap<String, Verdict>,
}

impl Ahead {
    pub(super) fn read(
        model: &Model,
        openings: &[Opening],
        ifaces: Vec<crate::eval::Iface>,
        targets: &BTreeMap<String, Vec<published::Target>>,
    ) -> Ahead {
        Ahead {
            verdicts: verdicts_of(model, openings, &ifaces, targets),
            openings: openings.to_vec(),
            ifaces,
        }
    }
}

/// The iptables-legacy saves as the evaluator reads them.
pub(super) fn legacy_of(saves: &BTreeMap<(Family, String), String>) -> Vec<(Fam, String, String)> {
    saves
        .iter()
        .map(|((f, t), text)| {
            let fam = if *f == Family::Ipv6 { Fam::V6 } else { Fam::V4 };
            (fam, t.clone(), text.clone())
        })
        .collect()
}

/// What placement asks the evaluator with: the model of this listing, the machine's
/// interfaces, and where each forwarded opening's published port leads.
pub(super) struct Eval<'e> {
    pub(super) model: &'e Model,
    pub(super) ifaces: &'e [crate::eval::Iface],
    pub(super) targets: &'e BTreeMap<String, Vec<published::Target>>,
    /// The ports the model's rules other than the mesh's are about
    /// ([`Model::unmarked_named_ports`]), asked once per plan.
    pub(super) named: Option<&'e HashSet<u16>>,
    /// The answers shared by openings to ports no rule other than the mesh's is about.
    pub(super) shared: RefCell<Shared>,
}

/// What openings alike but for their id and their port share, by layer and the opening
/// without them: walks that skip the mesh's rules answer alike for every port outside
/// [`Eval::named`] ([`Model::unmarked_named_ports`]), so such an opening is placed, and its
/// rules' standing compared, against the first one's walks.
#[derive(Default)]
pub(super) struct Shared {
    places: HashMap<SharedKey, Option<Vec<Place>>>,
    unmarked: HashMap<SharedKey, Option<Rc<Vec<Vec<Outcome>>>>>,
}

/// A layer as it describes itself, and an opening with its id and port left out.
type SharedKey = (String, Opening);

impl Eval<'_> {
    /// The table of layer `l` as the model names it.
    fn table(l: &Layer) -> String {
        super::check::model_table(&crate::backend::TableKey {
            backend: l.backend,
            family: l.family,
            table: l.table.clone(),
        })
    }

    /// Where `o`'s rule goes in layer `l`, from the verdict of its connections through that
    /// layer's base chain (a forwarded opening that nothing publishes yet: its connections
    /// translated to a destination not known, [`crate::eval::placed_ways`]); `None` when the
    /// model does not hold the layer.
    pub(super) fn place(&self, l: &Layer, o: &Opening) -> Option<Place> {
        let none = Vec::new();
        let targets = self.targets.get(&o.id).unwrap_or(&none);
        let p = self.model.place_opening(
            &Self::table(l),
            &l.chain,
            l.family,
            o,
            self.ifaces,
            targets,
        )?;
        Some(to_place(p))
    }

    /// Whether `o`'s marked rules, as they stand in layer `l`, are where its placement wants
    /// them ([`Model::stands`]); false when the model does not hold the layer. The walks without
    /// the mesh's rules it compares with are shared where [`Eval::shared_key`] says they may be.
    pub(super) fn stands(&self, l: &Layer, o: &Opening) -> bool {
        let none = Vec::new();
        let targets = self.targets.get(&o.id).unwrap_or(&none);
        let table = Self::table(l);
        let walk = || {
            self.model
                .unmarked_walks(&table, &l.chain, l.family, o, self.ifaces, targets)
                .map(Rc::new)
        };
        let without = match self.shared_key(l, o) {
            Some(key) => {
                let got = self.shared.borrow().unmarked.get(&key).cloned();
                match got {
                    Some(w) => w,
                    None => {
                        let w = walk();
                        self.shared.borrow_mut().unmarked.insert(key, w.clone());
                        w
                    }
                }
            }
            None => walk(),
        };
        without
            .and_then(|w| {
                self.model
                    .stands_against(&table, &l.chain, l.family, o, self.ifaces, targets, &w)
            })
            .unwrap_or(false)
    }

    /// The key `o`'s answers in layer `l` are shared under, when walks that skip the mesh's
    /// rules answer for it as for any port no other rule is about: it comes in to this machine
    /// (its port known all the way, no DNAT's target to follow) and its port is not one that
    /// [`Eval::named`] holds.
    fn shared_key(&self, l: &Layer, o: &Opening) -> Option<SharedKey> {
        let unnamed = o.path != crate::opening::Path::Forwarded
            && self.named.is_some_and(|n| !n.contains(&o.port))
            && self.targets.get(&o.id).is_none_or(Vec::is_empty);
        unnamed.then(|| {
            (
                l.describe(),
                Opening {
                    id: String::new(),
                    port: 0,
                    ..o.clone()
                },
            )
        })
    }
}

impl Eval<'_> {
    /// Where `o`'s rules go in layer `l`: the place [`Eval::place`] gives, and, where the ways
    /// its connections arrive by need rules in other chains too (an interface the found
    /// firewall sends elsewhere), the first place each other interface needs.
    pub(super) fn places(&self, l: &Layer, o: &Opening) -> Option<Vec<Place>> {
        let Some(key) = self.shared_key(l, o) else {
            return self.places_walked(l, o);
        };
        if let Some(p) = self.shared.borrow().places.get(&key) {
            return p.clone();
        }
        let p = self.places_walked(l, o);
        self.shared.borrow_mut().places.insert(key, p.clone());
        p
    }

    /// [`Eval::places`], walked.
    fn places_walked(&self, l: &Layer, o: &Opening) -> Option<Vec<Place>> {
        let main = self.place(l, o)?;
        let first_at = |p: &Place| match p {
            Place::At { chain, .. } => Some(chain.clone()),
            Place::Doubtful { then, .. } => match then.as_ref() {
                Place::At { chain, .. } => Some(chain.clone()),
                _ => None,
            },
            _ => None,
        };
        let Some(chain) = first_at(&main) else {
            return Some(vec![main]);
        };
        let mut chains = vec![chain];
        let mut out = vec![main];
        let table = Self::table(l);
        let none = Vec::new();
        let targets = self.targets.get(&o.id).unwrap_or(&none);
        for i in self.ifaces.iter().filter(|i| match &o.from {
            crate::opening::From::Interface(name) => &i.name == name,
            _ => i.outside(),
        }) {
            let one = std::slice::from_ref(i);
            let Some(p) = self
                .model
                .place_opening(&table, &l.chain, l.family, o, one, targets)
            else {
                continue;
            };
            if let Place::At { chain, before } = to_place(p) {
                if !chains.contains(&chain) {
                    chains.push(chain.clone());
                    out.push(Place::At { chain, before });
                }
            }
        }
        Some(out)
    }
}

fn to_place(p: Placement) -> Place {
    match p {
        Placement::NotNeeded(why) => Place::NotNeeded(why),
        Placement::At { chain, index, .. } => Place::At {
            chain,
            before: index,
        },
        Placement::Refused(by) => Place::Refused {
            chain: by.chain.clone(),
            rule: by.text.clone(),
        },
        Placement::Doubtful { by, what, then } => Place::Doubtful {
            rule: format!("{by}, which tests {what}"),
            then: Box::new(to_place(*then)),
        },
    }
}
