//! The engine: converges openings through every layer of the found firewall that could drop them,
//! in each layer's own terms, and removes only rules the host marked.
//!
//! nf_tables changes (native rules, and deleting marked rules from iptables-nft tables by handle)
//! go in one atomic batch on the host's own socket; iptables-nft and iptables-legacy insertions
//! go through those programs with argv, so tables they wrote stay readable by them.

use crate::detect::{self, Backend, Found, Layer};
use crate::error::{Error, Result};
use crate::exec::Exec;
use crate::netlink::{Batch, Family, NfSocket, Position, Ruleset};
use crate::opening::Opening;
use crate::rules;
use std::collections::BTreeMap;
use std::path::{Path as FsPath, PathBuf};

/// Which marked rules a convergence may remove.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Only rules of the openings given (their older versions): applying one opening.
    Given,
    /// Every marked rule not of the openings given: a whole declaration's openings.
    All,
}

/// What a convergence changed, per layer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Converged {
    /// (opening id, layer) for each rule added.
    pub added: Vec<(String, String)>,
    /// (mark, layer) for each marked rule removed.
    pub removed: Vec<(String, String)>,
}

/// Whether an opening is in force in one layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Presence {
    pub layer: String,
    pub present: bool,
}

/// A marked rule as found in a layer: its mark, and how to remove it.
#[derive(Debug, Clone)]
struct Marked {
    mark: String,
    how: Removal,
}

/// How a marked rule is removed.
#[derive(Debug, Clone)]
enum Removal {
    /// By its nf_tables handle, which names this rule and no other.
    Handle(u64),
    /// A legacy rule by its own specification, as `iptables-legacy-save` printed it: `-D CHAIN
    /// SPEC` deletes a rule that matches it in full, mark included, so a rule inserted or removed
    /// by someone else since the listing can never be deleted in its place (a rule number could).
    Spec(Vec<String>),
}

/// The firewall as this host sees it: the nf_tables socket it keeps and the found layers.
pub struct Firewall<'a> {
    nf: Option<NfSocket>,
    exec: &'a dyn Exec,
    found: Found,
    /// Where the legacy table names are read (normally `/proc`).
    proc: PathBuf,
    /// The nf_tables generation `found` was detected in, when the kernel has nf_tables.
    detected: Option<u32>,
}

/// How many times a convergence is computed again after the kernel refused its batch because
/// the ruleset changed in between.
pub const CONVERGE_TRIES: u32 = 5;

impl<'a> Firewall<'a> {
    /// Opens a socket (when the kernel has nf_tables) and detects the found firewall.
    pub fn open(exec: &'a dyn Exec) -> Result<Firewall<'a>> {
        Self::open_at(exec, FsPath::new("/proc"))
    }

    pub fn open_at(exec: &'a dyn Exec, proc: &FsPath) -> Result<Firewall<'a>> {
        let mut nf = NfSocket::open().ok();
        let ruleset = match nf.as_mut() {
            Some(s) => Some(s.ruleset(None)?),
            None => None,
        };
        let found = detect::detect_in(ruleset.as_ref(), exec, proc)?;
        Ok(Firewall {
            nf,
            exec,
            found,
            proc: proc.to_path_buf(),
            detected: ruleset.map(|r| r.generation),
        })
    }

    pub fn found(&self) -> &Found {
        &self.found
    }

    /// The socket, for the guard.
    pub fn socket(&mut self) -> Option<&mut NfSocket> {
        self.nf.as_mut()
    }

    fn ruleset(&mut self) -> Result<Ruleset> {
        match self.nf.as_mut() {
            Some(s) => s.ruleset(None),
            None => Ok(Ruleset::default()),
        }
    }

    fn marked(&self, layer: &Layer, ruleset: &Ruleset) -> Result<Vec<Marked>> {
        match layer.backend {
            Backend::Nftables | Backend::IptablesNft => Ok(ruleset
                .rules_of(layer.family, &layer.table, &layer.chain)
                .filter_map(|r| {
                    let mark = rules::listed_mark(r)?;
                    rules::id_of(&mark)?;
                    Some(Marked {
                        mark,
                        how: Removal::Handle(r.handle),
                    })
                })
                .collect()),
            Backend::IptablesLegacy => {
                let program = legacy(layer.family, "-save");
                let out = self
                    .exec
                    .run_ok(&program, &["-t".into(), layer.table.clone()], None)?;
                Ok(detect::parse_save(&out.stdout)
                    .rules
                    .iter()
                    .filter(|(c, _)| *c == layer.chain)
                    .filter_map(|(_, spec)| {
                        Some(Marked {
                            mark: rules::spec_mark(spec)?,
                            how: Removal::Spec(rules::split_spec(spec)?),
                        })
                    })
                    .collect())
            }
            Backend::Firewalld | Backend::Ufw => Ok(Vec::new()),
        }
    }

    /// Whether each opening is in force in each layer on its path that could drop it.
    pub fn presence(&mut self, openings: &[Opening]) -> Result<BTreeMap<String, Vec<Presence>>> {
        let ruleset = self.ruleset()?;
        let mut out: BTreeMap<String, Vec<Presence>> = BTreeMap::new();
        let layers: Vec<Layer> = self.found.layers.clone();
        for layer in &layers {
            if !layer.can_drop {
                continue;
            }
            let marked = self.marked(layer, &ruleset)?;
            for o in openings.iter().filter(|o| o.path == layer.path) {
                let want = rules::mark(o);
                let need = expected(layer, o);
                let have = marked.iter().filter(|m| m.mark == want).count();
                out.entry(o.id.clone()).or_default().push(Presence {
                    layer: layer.describe(),
                    present: need == 0 || have == need,
                });
            }
        }
        Ok(out)
    }

    /// Converges the given openings through every layer on their paths: missing rules are put
    /// at the head of each chain that could drop them, old versions and (with [`Scope::All`])
    /// marked rules of other openings are removed. Nothing unmarked is touched.
    ///
    /// The nf_tables batch is conditional on the generation of the listing it was computed from:
    /// if anyone changed the ruleset in between (a reload restarts handles, so a listed handle
    /// could name someone else's rule), the kernel applies nothing and answers ERESTART, and the
    /// convergence is computed again from a fresh listing, up to [`CONVERGE_TRIES`] times.
    pub fn converge(&mut self, openings: &[Opening], scope: Scope) -> Result<Converged> {
        for o in openings {
            o.validate()?;
        }
        for _ in 0..CONVERGE_TRIES {
            match self.converge_once(openings, scope) {
                Err(Error::Refused { errno, .. }) if errno.0 == libc::ERESTART => continue,
                other => return other,
            }
        }
        Err(Error::Raced {
            tries: CONVERGE_TRIES,
        })
    }

    /// One convergence from one listing; ERESTART from the kernel when the listing went stale.
    fn converge_once(&mut self, openings: &[Opening], scope: Scope) -> Result<Converged> {
        let ruleset = self.ruleset()?;
        // The layers are read again when the ruleset is no longer the one they were read from.
        if self.nf.is_some() && self.detected != Some(ruleset.generation) {
            self.found = detect::detect_in(Some(&ruleset), self.exec, &self.proc)?;
            self.detected = Some(ruleset.generation);
        }
        if let Some(reason) = &self.found.refusal {
            if !openings.is_empty() {
                return Err(Error::Unsupported {
                    reason: reason.clone(),
                });
            }
        }
        let mut batch = Batch::new();
        batch.set_generation(ruleset.generation);
        let mut done = Converged::default();
        // Work queued for programs: (program, args) in order.
        let mut commands: Vec<(String, Vec<String>)> = Vec::new();
        let layers: Vec<Layer> = self.found.layers.clone();
        for layer in &layers {
            let here: Vec<&Opening> = openings.iter().filter(|o| o.path == layer.path).collect();
            let marked = self.marked(layer, &ruleset)?;
            let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
            for m in &marked {
                *counts.entry(m.mark.as_str()).or_default() += 1;
            }
            let wanted: BTreeMap<String, (&Opening, usize)> = here
                .iter()
                .filter(|_| layer.can_drop)
                .map(|o| (rules::mark(o), (*o, expected(layer, o))))
                .collect();
            let given: Vec<&str> = openings.iter().map(|o| o.id.as_str()).collect();
            // Remove: marks not wanted here (in scope), or wanted but present the wrong number
            // of times (re-written whole).
            let remove: Vec<&Marked> = marked
                .iter()
                .filter(|m| match wanted.get(&m.mark) {
                    Some((_, n)) => counts[m.mark.as_str()] != *n,
                    None => {
                        scope == Scope::All
                            || rules::id_of(&m.mark).is_some_and(|id| given.contains(&id))
                    }
                })
                .collect();
            let add: Vec<&Opening> = wanted
                .iter()
                .filter(|(mark, (_, n))| {
                    *n > 0 && counts.get(mark.as_str()).copied().unwrap_or(0) != *n
                })
                .map(|(_, (o, _))| *o)
                .collect();
            if matches!(layer.backend, Backend::Firewalld | Backend::Ufw) {
                continue;
            }
            for m in &remove {
                match &m.how {
                    Removal::Handle(handle) => {
                        batch.del_rule(layer.family, &layer.table, &layer.chain, *handle)?;
                    }
                    Removal::Spec(spec) => {
                        let mut args = xt_args(&layer.table, "-D", &layer.chain);
                        args.extend(spec.iter().cloned());
                        commands.push((legacy(layer.family, ""), args));
                    }
                }
            }
            for m in &remove {
                done.removed.push((m.mark.clone(), layer.describe()));
            }
            for o in add {
                match layer.backend {
                    Backend::Nftables => {
                        for body in rules::nft_bodies(o, layer.family) {
                            batch.add_rule(
                                layer.family,
                                &layer.table,
                                &layer.chain,
                                &body,
                                Position::Prepend,
                            )?;
                        }
                    }
                    Backend::IptablesNft | Backend::IptablesLegacy => {
                        let program = if layer.backend == Backend::IptablesNft {
                            xt(layer.family, "nft")
                        } else {
                            legacy(layer.family, "")
                        };
                        for spec in rules::xt_specs(o, layer.family) {
                            let mut args = xt_args(&layer.table, "-I", &layer.chain);
                            args.push("1".into());
                            args.extend(spec);
                            commands.push((program.clone(), args));
                        }
                    }
                    Backend::Firewalld | Backend::Ufw => {}
                }
                done.added.push((o.id.clone(), layer.describe()));
            }
        }
        if !batch.is_empty() {
            let sock = self.nf.as_mut().ok_or_else(|| Error::Unsupported {
                reason: "nf_tables layers were found but no nf_tables socket is open".into(),
            })?;
            sock.send(&batch)?;
        }
        for (program, args) in commands {
            self.exec.run_ok(&program, &args, None)?;
        }
        Ok(done)
    }
}

/// How many rules an opening needs in a layer (one per source that applies to its family).
fn expected(layer: &Layer, o: &Opening) -> usize {
    match layer.backend {
        Backend::Nftables => rules::nft_bodies(o, layer.family).len(),
        _ => rules::xt_specs(o, layer.family).len(),
    }
}

/// `-w -t TABLE OP CHAIN`: `-w` waits for the xtables lock instead of failing at once when
/// another program (Docker, the operator, a second test) holds it; iptables-nft accepts and
/// ignores it.
fn xt_args(table: &str, op: &str, chain: &str) -> Vec<String> {
    vec![
        "-w".into(),
        "-t".into(),
        table.into(),
        op.into(),
        chain.into(),
    ]
}

fn xt(family: Family, backend: &str) -> String {
    let base = if family == Family::Ipv6 {
        "ip6tables"
    } else {
        "iptables"
    };
    format!("{base}-{backend}")
}

fn legacy(family: Family, suffix: &str) -> String {
    format!("{}{suffix}", xt(family, "legacy"))
}
