//! The flip and the return, at the engine: the found firewall surveyed per kind, the derived
//! filter loaded with the guard's removal and the native tables' retirement in one nf_tables
//! transaction, then the other kinds retired in their own terms; and back.

use super::Firewall;
use crate::backend::{self, Cx};
use crate::error::{Error, Result};
use crate::filter::{self, FilterSpec};
use crate::found::{Backend, MESH_TABLE};
use crate::guard::GUARD_CHAINS;
use crate::netlink::{Batch, Family, Ruleset};
use crate::retire::Retired;
use std::collections::BTreeMap;
use std::path::Path as FsPath;

impl Firewall<'_> {
    /// Every kind's found firewall on this machine, as its own configuration under `root` says
    /// and the running ruleset holds it, each saved for return. Reads only. A kind is surveyed
    /// when its configuration is there (hand-written nftables) or its layers are (the others).
    pub fn survey(&mut self, root: &FsPath) -> Result<Vec<Retired>> {
        let ruleset = self.listing()?;
        let found = self.found()?.clone();
        let mut out = Vec::new();
        for kind in Backend::ALL {
            let layered = found.layers.iter().any(|l| l.backend == kind);
            if kind != Backend::Nftables && !layered {
                continue;
            }
            let mut batch = Batch::new();
            let mut cx = Cx {
                ruleset: &ruleset,
                legacy_saves: &found.legacy_saves,
                batch: &mut batch,
                exec: self.exec.get(),
            };
            if let Some(r) = backend::kind(kind).retire.survey(root, &mut cx)? {
                out.push(r);
            }
        }
        Ok(out)
    }

    /// The flip: in one nf_tables transaction the derived filter is loaded, the guard's chain
    /// removed and every retired native table deleted, so the store is never reachable from
    /// outside at any instant; then each other kind is retired in its own terms. Returns the
    /// retired firewalls completed with exactly what was taken out (the caller records them), and
    /// whether a guard was there to remove.
    pub fn flip(&mut self, filter: &FilterSpec, saved: &[Retired]) -> Result<(Vec<Retired>, bool)> {
        let ruleset = self.listing()?;
        let legacy = self.found()?.legacy_saves.clone();
        let mut batch = Batch::new();
        filter.add_to(&mut batch)?;
        let mut guarded = false;
        for (name, _) in GUARD_CHAINS {
            let there = ruleset
                .chains
                .iter()
                .any(|c| c.family == Family::Inet && c.table == MESH_TABLE && c.name == name);
            if there {
                batch.flush(Family::Inet, MESH_TABLE, Some(name))?;
                batch.del_chain(Family::Inet, MESH_TABLE, name)?;
                guarded = true;
            }
        }
        let mut out = Vec::new();
        // Native tables join the batch; the others wait until it is in force.
        for r in saved.iter().filter(|r| r.backend == Backend::Nftables) {
            let mut cx = self.cx(&ruleset, &legacy, &mut batch);
            out.push(backend::kind(r.backend).retire.retire(r, &mut cx)?);
        }
        self.send(&batch)?;
        for r in saved.iter().filter(|r| r.backend != Backend::Nftables) {
            let mut none = Batch::new();
            let mut cx = self.cx(&ruleset, &legacy, &mut none);
            out.push(backend::kind(r.backend).retire.retire(r, &mut cx)?);
            self.send(&none)?;
        }
        self.found = None;
        Ok((out, guarded))
    }

    /// The return: each retired firewall put back exactly as saved, then the derived filter's
    /// chains removed (the caller ensured the guard first), so there is no moment with neither.
    ///
    /// A daemon's firewall put back (firewalld started again) makes the container runtime,
    /// hearing it, delete and write its rules again a moment later: the return waits, to a
    /// deadline, until every rule of the other tables listed before is back, so the verdicts
    /// read after it are not read from that gap (an opening forwarded to a container reported
    /// NOT ADMITTED, "no container runtime publishes it yet", while the runtime was rewriting).
    ///
    /// `before` is the ruleset listed before the caller started any daemon of the return (its
    /// start alone makes the runtime rewrite); without it, the listing at this call is used.
    pub fn unflip(&mut self, saved: &[Retired], before: Option<&Ruleset>) -> Result<()> {
        let ruleset = self.listing()?;
        let legacy = BTreeMap::new();
        for r in saved {
            let mut none = Batch::new();
            let mut cx = self.cx(&ruleset, &legacy, &mut none);
            backend::kind(r.backend).retire.restore(r, &mut cx)?;
            self.send(&none)?;
        }
        if saved.iter().any(|r| r.backend != Backend::Nftables) {
            self.until_back(before.unwrap_or(&ruleset), |_| true)?;
        }
        if let Some(sock) = self.nf.as_mut() {
            let mut batch = Batch::new();
            if filter::remove_into(sock, &mut batch)? {
                sock.send(&batch)?;
            }
        }
        self.found = None;
        Ok(())
    }

    /// Puts the derived filter in force as `spec` says; `true` when it had to be written.
    pub fn ensure_filter(&mut self, spec: &FilterSpec) -> Result<bool> {
        let sock = self.nf.as_mut().ok_or_else(no_nf)?;
        filter::ensure(sock, spec)
    }

    /// Removes the derived filter's chains where they should not be (an adopted node's ruleset);
    /// `true` when there were any.
    pub fn remove_filter(&mut self) -> Result<bool> {
        let Some(sock) = self.nf.as_mut() else {
            return Ok(false);
        };
        let mut batch = Batch::new();
        if !filter::remove_into(sock, &mut batch)? {
            return Ok(false);
        }
        sock.send(&batch)?;
        Ok(true)
    }

    /// The whole ruleset, every table's rules included (never read by table): what is retired
    /// is saved from it and put back exactly, and what the return's wait compares with (listed
    /// by the caller before a daemon of the return is started).
    pub fn listing(&mut self) -> Result<Ruleset> {
        match self.nf.as_mut() {
            Some(s) => s.ruleset_complete(None),
            None => Err(no_nf()),
        }
    }

    fn cx<'c>(
        &'c self,
        ruleset: &'c Ruleset,
        legacy: &'c BTreeMap<(Family, String), String>,
        batch: &'c mut Batch,
    ) -> Cx<'c> {
        Cx {
            ruleset,
            legacy_saves: legacy,
            batch,
            exec: self.exec.get(),
        }
    }

    fn send(&mut self, batch: &Batch) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        self.nf.as_mut().ok_or_else(no_nf)?.send(batch)
    }
}

fn no_nf() -> Error {
    Error::Unsupported {
        reason: "the kernel has no nf_tables, so the derived filter cannot be loaded".into(),
    }
}
