//! One convergence's plan from one listing: the found layers read again where the ruleset moved,
//! the model, the claim, each table's changes, and the check of them all before anything is sent.

use super::table::table_plan;
use super::verdict::{legacy_of, Eval};
use super::{claim_of, Firewall, LastModel, Plan, TablePlan, CLAIM_CHAIN};
use crate::backend::{self, Change, Converger, Cx, TableKey};
use crate::detect;
use crate::error::{Error, Result};
use crate::eval::{Iface, Model};
use crate::found::{Backend, Layer, MESH_TABLE};
use crate::netlink::{Batch, Family, NfSocket, Ruleset};
use crate::opening::Opening;
use crate::outcome::{Converged, Presence, Scope, State};
use crate::published;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

/// Where each forwarded opening's published port leads, by opening.
type Targets = Rc<BTreeMap<String, Vec<published::Target>>>;

impl Firewall<'_> {
    /// The plan for `openings` from a fresh listing.
    pub(super) fn plan(&mut self, openings: &[Opening], scope: Scope) -> Result<Plan> {
        let (ruleset, model) = self.model_now()?;
        let ifaces = self.interfaces();
        let found = self.found.as_ref().expect("detected above");
        // Where each forwarded opening's published port leads, read once for every table.
        let targets: Targets = Rc::new(
            openings
                .iter()
                .filter(|o| o.path == crate::opening::Path::Forwarded)
                .map(|o| {
                    (
                        o.id.clone(),
                        published::targets(&ruleset, &found.legacy_saves, o.proto, o.port),
                    )
                })
                .collect(),
        );
        self.last = self.nf.is_some().then(|| LastModel {
            generation: ruleset.generation,
            legacy: found.legacy_saves.clone(),
            model: model.clone(),
            targets: targets.clone(),
            ahead: None,
        });
        let mut plan = self.plan_head(openings, &ruleset, &targets)?;
        self.table_plans(&mut plan, &ruleset, openings, scope, &model, &ifaces);
        // Every write checked against the whole ruleset before it is sent.
        let started = std::time::Instant::now();
        let forwards = crate::eval::check::forwarding(&self.proc);
        super::check::settle(&mut plan, &model, &ifaces, &targets, openings, forwards);
        self.check_time += started.elapsed();
        plan.ruleset = ruleset;
        Ok(plan)
    }

    /// A fresh listing and its model; the layers are read again when the ruleset is no longer
    /// the one they were read from, and always where legacy tables are in force (they change
    /// with no generation).
    fn model_now(&mut self) -> Result<(Ruleset, Rc<Model>)> {
        let mut snap = self.snapshot()?;
        let legacy = !self
            .found
            .as_ref()
            .is_none_or(|f| f.legacy_saves.is_empty());
        if self.found.is_none()
            || legacy
            || (self.nf.is_some() && self.detected != Some(snap.ruleset.generation))
        {
            let listed = self.nf.is_some().then_some(&snap.ruleset);
            self.found = Some(detect::detect_in(listed, self.exec.get(), &self.proc)?);
            self.detected = self.nf.as_ref().map(|_| snap.ruleset.generation);
        }
        snap.ipsets = self.ipsets();
        let found = self.found.as_ref().expect("detected above");
        snap.legacy = legacy_of(&found.legacy_saves);
        let model = Rc::new(Model::new(&snap));
        Ok((snap.ruleset, model))
    }

    /// The plan with nothing planned yet: refused when the found firewall is refused or carries
    /// another node's marks, with the claim to record when none is and no other process holds
    /// the mesh's table.
    fn plan_head(
        &self,
        openings: &[Opening],
        ruleset: &Ruleset,
        targets: &Targets,
    ) -> Result<Plan> {
        let found = self.found.as_ref().expect("detected above");
        if let Some(reason) = &found.refusal {
            if !openings.is_empty() {
                return Err(Error::Unsupported {
                    reason: reason.clone(),
                });
            }
        }
        let mesh = ruleset
            .chains
            .iter()
            .find(|c| c.family == Family::Inet && c.table == MESH_TABLE && c.name == CLAIM_CHAIN);
        let claimed = claim_of(mesh.and_then(|c| c.comment.as_deref()));
        if let (Some(node), Some(other)) = (&self.node, &claimed) {
            if node != other {
                return Err(Error::Claimed {
                    node: other.clone(),
                    ours: node.clone(),
                });
            }
        }
        // A mesh table held by another live process (a resident host) is its holder's to write.
        let mesh_table = ruleset.table(Family::Inet, MESH_TABLE);
        let ours = self.nf.as_ref().map(NfSocket::portid);
        let held = mesh_table.is_some_and(|t| t.owner.is_some() && t.owner != ours);
        Ok(Plan {
            ruleset: Ruleset::default(),
            legacy_saves: found.legacy_saves.clone(),
            generation: self.nf.as_ref().map(|_| ruleset.generation),
            tables: Vec::new(),
            done: Converged::default(),
            claim: if claimed.is_none() && !held {
                self.node.clone()
            } else {
                None
            },
            mesh_table: mesh_table.is_some(),
            whole: BTreeMap::new(),
            unwritten: BTreeSet::new(),
            after: None,
            targets: targets.clone(),
        })
    }

    /// Each found table's changes into `plan`, by its driver; the kinds that converge as a whole
    /// are set aside with their layers, and a table the host cannot read reports every opening
    /// its layers would refuse unwritable there.
    fn table_plans(
        &self,
        plan: &mut Plan,
        ruleset: &Ruleset,
        openings: &[Opening],
        scope: Scope,
        model: &Model,
        ifaces: &[Iface],
    ) {
        let found = self.found.as_ref().expect("detected above");
        let mut by_table: BTreeMap<TableKey, Vec<Layer>> = BTreeMap::new();
        for l in &found.layers {
            by_table
                .entry(TableKey {
                    backend: l.backend,
                    family: l.family,
                    table: l.table.clone(),
                })
                .or_default()
                .push(l.clone());
        }
        let given: BTreeSet<&str> = openings.iter().map(|o| o.id.as_str()).collect();
        let mut batch = Batch::new();
        let targets = plan.targets.clone();
        let named = model.unmarked_named_ports();
        for (key, layers) in by_table {
            let driver = match backend::kind(key.backend).converge {
                Converger::Table(d) => d,
                Converger::Whole(_) => {
                    plan.whole.entry(key.backend).or_default().extend(layers);
                    continue;
                }
            };
            let mut cx = Cx {
                ruleset,
                legacy_saves: &plan.legacy_saves,
                batch: &mut batch,
                exec: self.exec.get(),
            };
            let view = match driver.read(&key, &mut cx) {
                Ok(v) => v,
                Err(e) => {
                    // A table the host cannot read: every opening its layers would refuse is
                    // reported missing there, naming why.
                    for l in layers.iter().filter(|l| l.can_drop) {
                        for o in openings.iter().filter(|o| l.crossed_by(o)) {
                            plan.done
                                .states
                                .entry(o.id.clone())
                                .or_default()
                                .push(Presence {
                                    layer: l.id(),
                                    chain: None,
                                    state: State::Unwritable(e.to_string()),
                                });
                        }
                    }
                    continue;
                }
            };
            let eval = Eval {
                model,
                ifaces,
                targets: &targets,
                named: named.as_ref(),
                shared: Default::default(),
            };
            let changes = table_plan(
                &key,
                &view,
                &layers,
                openings,
                &given,
                scope,
                driver,
                &eval,
                &mut plan.done,
            );
            plan.tables.push(TablePlan {
                key,
                view,
                driver,
                changes,
                layers,
            });
        }
    }
}

/// Whether the plan's writes are its nf_tables batch alone, each change written as the check's
/// edit of the model says (a removal by its handle, an addition before the handle of the rule
/// at its index or at the chain's end), so the model edited by them is the ruleset the batch
/// leaves.
pub(super) fn mirrored(plan: &Plan) -> bool {
    plan.whole.is_empty()
        && plan
            .tables
            .iter()
            .filter(|t| !t.changes.is_empty())
            .all(|t| {
                t.key.backend == Backend::Nftables
                    && t.changes.iter().all(|c| match c {
                        Change::Remove { how, .. } => {
                            matches!(how, crate::backend::Removal::Handle(_))
                        }
                        Change::Add { chain, before, .. } => match before {
                            None => true,
                            Some(i) => t.view.how.get(chain).is_some_and(|h| {
                                *i >= h.len() || matches!(h[*i], crate::backend::Removal::Handle(_))
                            }),
                        },
                    })
            })
}
