//! A recording fake of the node's firewall for unit tests: every call is logged in order (with
//! whether a watched path existed at that moment, so a test can tell what came before what), and
//! answers come from a script (a call named in `fail` fails).

use super::{Change, Error, Held, Monitor, NodeFirewall, NodeFirewallRead};
use firewall::bpf::{BpfStatus, Pins};
use firewall::eval::{Answer, Verdict, Way};
use firewall::probe::TableFlagSupport;
use firewall::{
    Converged, FilterSpec, Found, GuardSpec, GuardStatus, GuardTable, Opening, Presence, Retired,
    Scope,
};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::rc::Rc;

/// One call the fake was asked, by method name, with what it was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub method: &'static str,
    /// The ids of the openings given (converge, verdicts, filter specs).
    pub openings: Vec<String>,
    /// Whether each watched path existed when the call came.
    pub watched: Vec<bool>,
}

/// What the fake answers.
#[derive(Debug, Default)]
pub struct Script {
    /// Methods that fail, with a kernel-like error.
    pub fail: Vec<&'static str>,
    pub claimed_by: Option<String>,
    pub generation: Option<u32>,
    pub survey: Vec<Retired>,
    /// Whether a derived filter is loaded (remove_filter answers it, and unloads it).
    pub filter_loaded: bool,
    /// The runtime's bridges, as `runtime_bridges` answers them.
    pub bridges: Vec<String>,
    /// Marked rules in force (mark → id): a convergence of the given openings adds theirs, one
    /// of every marked rule removes the others'.
    pub in_force: BTreeMap<String, String>,
    /// Each opening's ways and answers (`answers`, `explain`), by id.
    pub answers: BTreeMap<String, Vec<(Way, Answer)>>,
    /// The kernel's verdict of each part `ask_kernel` is asked about, in order.
    pub kernel: Vec<firewall::confirm::Kernel>,
    /// The found firewall as detected (`detected`).
    pub found: Found,
    /// Each opening's layers (`presence`), by id.
    pub presence: BTreeMap<String, Vec<Presence>>,
    /// Each opening's verdict (`verdicts`), by id; an opening with none has no verdict.
    pub verdicts: BTreeMap<String, Verdict>,
    /// The guard's table (`guard_status`); `None`: the kernel has no nf_tables.
    pub guard: Option<GuardStatus>,
    /// Whether a bpffs is there (`bpffs`).
    pub bpffs: bool,
    /// The guard's BPF layer as pinned (`bpf_pinned`).
    pub bpf: BpfStatus,
    /// The guard's links the kernel holds (`bpf_held`).
    pub held: Held,
    /// The ruleset's changes the monitor hears.
    pub changes: Vec<Change>,
}

/// A layer's identity as the driver names it: `layer_id(Backend::Nftables, Family::Inet, "fw",
/// "input")` is `inet fw input (nftables)`.
pub fn layer_id(
    backend: firewall::Backend,
    family: firewall::Family,
    table: &str,
    chain: &str,
) -> firewall::LayerId {
    firewall::LayerId {
        backend,
        family,
        table: table.into(),
        chain: chain.into(),
    }
}

/// A layer of the found firewall at the input hook, of table `ip filter`, chain `INPUT`, as
/// `backend` wrote it (for a script's `found`).
pub fn input_layer(backend: firewall::Backend, rules: usize, can_drop: bool) -> firewall::Layer {
    firewall::Layer {
        backend,
        hook: firewall::Hook::Input,
        family: firewall::Family::Ipv4,
        table: "filter".into(),
        chain: "INPUT".into(),
        priority: 0,
        policy: firewall::Policy::Drop,
        rules,
        can_drop,
        evidence: "the fake's".into(),
        device: None,
        unwritable: None,
    }
}

/// What the kernel did with a probe (for a script's `kernel`).
pub use firewall::confirm::Kernel as Probed;

/// One incoming tcp way to `port` on `iif` whose every source the evaluator admits (for a
/// script's `answers`).
pub fn admitted_way(fam: firewall::eval::Fam, port: u16, iif: &str) -> (Way, Answer) {
    use firewall::eval::{Addrs, Conn, Fate, Outcome};
    (
        Way {
            conn: Conn::incoming(fam, 6, port, iif),
            sources: Addrs::all(fam),
        },
        Answer {
            parts: vec![Outcome {
                sources: Addrs::all(fam),
                fate: Fate::Admitted,
                trace: vec![format!("{} filter INPUT: policy accept", fam.name())],
                limits: Vec::new(),
            }],
        },
    )
}

/// The fake; clones share one log and one script, so a test keeps one to read what an apply
/// asked of the one it handed over.
#[derive(Clone, Default)]
pub struct Recording {
    pub log: Rc<RefCell<Vec<Call>>>,
    pub script: Rc<RefCell<Script>>,
    pub watch: Rc<Vec<PathBuf>>,
    /// Every guard spec the guard's table was asked for, in order.
    pub guards: Rc<RefCell<Vec<GuardSpec>>>,
    /// Every list of runtime bridges the firewall was told of, in order.
    pub told_bridges: Rc<RefCell<Vec<Vec<String>>>>,
}

impl Recording {
    pub fn watching(paths: &[PathBuf]) -> Recording {
        Recording {
            watch: Rc::new(paths.to_vec()),
            ..Recording::default()
        }
    }

    /// The methods called, in order.
    pub fn methods(&self) -> Vec<&'static str> {
        self.log.borrow().iter().map(|c| c.method).collect()
    }

    /// The first call of `method`.
    pub fn first(&self, method: &str) -> Option<Call> {
        self.log
            .borrow()
            .iter()
            .find(|c| c.method == method)
            .cloned()
    }

    fn called(&self, method: &'static str, openings: &[Opening]) -> Result<(), Error> {
        self.log.borrow_mut().push(Call {
            method,
            openings: openings.iter().map(|o| o.id.clone()).collect(),
            watched: self.watch.iter().map(|p| p.exists()).collect(),
        });
        if self.script.borrow().fail.contains(&method) {
            return Err(Error::Kernel(firewall::Error::Socket {
                op: method,
                errno: firewall::Errno(nix::errno::Errno::EPERM as i32),
            }));
        }
        Ok(())
    }
}

impl NodeFirewall for Recording {
    fn guard_table(&mut self, spec: &GuardSpec) -> Result<firewall::GuardReport, Error> {
        self.called("guard_table", &[])?;
        self.guards.borrow_mut().push(spec.clone());
        Ok(firewall::GuardReport {
            table: GuardTable::Created,
            changed: true,
        })
    }

    fn guard_bpf(&mut self, _spec: &GuardSpec) -> Result<firewall::bpf::BpfReport, Error> {
        self.called("guard_bpf", &[])?;
        Ok(firewall::bpf::BpfReport {
            loaded: firewall::bpf::Loaded::Created,
            changed: true,
            link_ids: vec![1, 2, 3, 4],
            detached: Vec::new(),
        })
    }

    fn remove_guard_bpf(&mut self) -> Result<bool, Error> {
        self.called("remove_guard_bpf", &[])?;
        Ok(true)
    }

    fn remove_guard_table(&mut self) -> Result<bool, Error> {
        self.called("remove_guard_table", &[])?;
        Ok(true)
    }

    fn converge(&mut self, openings: &[Opening], scope: Scope) -> Result<Converged, Error> {
        self.called(
            match scope {
                Scope::Given => "converge",
                Scope::All => "converge_all",
            },
            openings,
        )?;
        let mut script = self.script.borrow_mut();
        let given: Vec<String> = openings.iter().map(firewall::rules::mark).collect();
        let removed = match scope {
            Scope::Given => Vec::new(),
            Scope::All => {
                let gone: Vec<String> = script
                    .in_force
                    .keys()
                    .filter(|m| !given.contains(m))
                    .cloned()
                    .collect();
                for m in &gone {
                    script.in_force.remove(m);
                }
                gone.into_iter()
                    .map(|m| (m, "table inet filter".to_string()))
                    .collect()
            }
        };
        for (o, m) in openings.iter().zip(given) {
            script.in_force.insert(m, o.id.clone());
        }
        Ok(Converged {
            added: openings
                .iter()
                .map(|o| (o.id.clone(), "table inet filter".to_string()))
                .collect(),
            removed,
            states: openings
                .iter()
                .map(|o| {
                    (
                        o.id.clone(),
                        vec![firewall::Presence {
                            layer: layer_id(
                                firewall::Backend::Nftables,
                                firewall::Family::Inet,
                                "filter",
                                "input",
                            ),
                            chain: None,
                            state: firewall::State::Present,
                        }],
                    )
                })
                .collect(),
            stale: 0,
        })
    }

    fn filter_in_force(&mut self, spec: &FilterSpec) -> Result<bool, Error> {
        self.called("filter_in_force", &spec.openings)?;
        Ok(self.script.borrow().filter_loaded)
    }

    fn ensure_filter(&mut self, spec: &FilterSpec) -> Result<bool, Error> {
        self.called("ensure_filter", &spec.openings)?;
        let mut script = self.script.borrow_mut();
        let written = !script.filter_loaded;
        script.filter_loaded = true;
        Ok(written)
    }

    fn remove_filter(&mut self) -> Result<bool, Error> {
        self.called("remove_filter", &[])?;
        Ok(std::mem::take(&mut self.script.borrow_mut().filter_loaded))
    }

    fn survey(&mut self) -> Result<Vec<Retired>, Error> {
        self.called("survey", &[])?;
        Ok(self.script.borrow().survey.clone())
    }

    fn flip(
        &mut self,
        spec: &FilterSpec,
        saved: &[Retired],
    ) -> Result<(Vec<Retired>, bool), Error> {
        self.called("flip", &spec.openings)?;
        self.script.borrow_mut().filter_loaded = true;
        Ok((saved.to_vec(), true))
    }

    fn unflip(
        &mut self,
        _saved: &[Retired],
        start: &mut dyn FnMut() -> Result<(), Error>,
    ) -> Result<(), Error> {
        start()?;
        self.called("unflip", &[])
    }

    /// Answered from the script and not logged: a question about the machine's runtime, which
    /// changes nothing of the firewall.
    fn runtime_bridges(
        &mut self,
        _runner: &dyn run::Runner,
        _interfaces: &[::genesis::inventory::Interface],
    ) -> Vec<String> {
        self.script.borrow().bridges.clone()
    }
}

impl NodeFirewallRead for Recording {
    fn claimed_by(&mut self) -> Result<Option<String>, Error> {
        self.called("claimed_by", &[])?;
        Ok(self.script.borrow().claimed_by.clone())
    }

    fn generation(&mut self) -> Option<super::Generation> {
        self.called("generation", &[]).ok()?;
        self.script
            .borrow()
            .generation
            .map(|nft| super::Generation { nft, legacy: None })
    }

    fn kind(&mut self) -> String {
        let _ = self.called("kind", &[]);
        "nftables (fake)".into()
    }

    fn detected(&mut self) -> Result<Found, Error> {
        self.called("detected", &[])?;
        Ok(self.script.borrow().found.clone())
    }

    /// Each opening's layers as the script gives them (none when it gives none).
    fn presence(&mut self, openings: &[Opening]) -> Result<BTreeMap<String, Vec<Presence>>, Error> {
        self.called("presence", openings)?;
        let script = self.script.borrow();
        Ok(openings
            .iter()
            .map(|o| {
                let layers = script.presence.get(&o.id).cloned().unwrap_or_default();
                (o.id.clone(), layers)
            })
            .collect())
    }

    fn verdicts(&mut self, openings: &[Opening]) -> Result<BTreeMap<String, Verdict>, Error> {
        self.called("verdicts", openings)?;
        let script = self.script.borrow();
        Ok(openings
            .iter()
            .filter_map(|o| Some((o.id.clone(), script.verdicts.get(&o.id)?.clone())))
            .collect())
    }

    /// Each opening's ways as the script gives them (none when it gives none).
    fn answers(&mut self, openings: &[Opening]) -> Result<Vec<Vec<(Way, Answer)>>, Error> {
        self.called("answers", openings)?;
        let script = self.script.borrow();
        Ok(openings
            .iter()
            .map(|o| script.answers.get(&o.id).cloned().unwrap_or_default())
            .collect())
    }

    /// The script's kernel verdict for each part, in order (unprobed where it runs out).
    fn ask_kernel(
        &mut self,
        ways: &[(Way, Answer)],
    ) -> Result<firewall::confirm::Confirmation, Error> {
        self.called("ask_kernel", &[])?;
        let script = self.script.borrow();
        let mut kernel = script.kernel.iter();
        Ok(firewall::confirm::Confirmation {
            probes: ways
                .iter()
                .map(|(_, a)| {
                    a.parts
                        .iter()
                        .map(|_| firewall::confirm::Probe {
                            source: None,
                            to: None,
                            behind: None,
                            kernel: kernel.next().cloned().unwrap_or(
                                firewall::confirm::Kernel::Unprobed("not scripted".into()),
                            ),
                        })
                        .collect()
                })
                .collect(),
            namespaces: vec!["mesh-confirm-fake".into()],
            notes: Vec::new(),
        })
    }

    /// The script's ways for the opening's id, kept to those arriving on `only_iif`.
    fn explain(
        &mut self,
        opening: &Opening,
        only_iif: Option<&str>,
    ) -> Result<Vec<(Way, Answer)>, Error> {
        self.called("explain", std::slice::from_ref(opening))?;
        let script = self.script.borrow();
        Ok(script
            .answers
            .get(&opening.id)
            .into_iter()
            .flatten()
            .filter(|(w, _)| only_iif.is_none_or(|i| i == w.conn.iif))
            .cloned()
            .collect())
    }

    /// The script's guard; no nf_tables when it gives none.
    fn guard_status(&mut self) -> Result<GuardStatus, Error> {
        self.called("guard_status", &[])?;
        self.script.borrow().guard.clone().ok_or(Error::NoNfTables)
    }

    fn bpf_pins(&mut self) -> Pins {
        Pins::under(std::path::Path::new("/"))
    }

    fn bpffs(&mut self) -> bool {
        let _ = self.called("bpffs", &[]);
        self.script.borrow().bpffs
    }

    fn bpf_pinned(&mut self) -> Result<BpfStatus, Error> {
        self.called("bpf_pinned", &[])?;
        Ok(self.script.borrow().bpf.clone())
    }

    fn bpf_held(&mut self) -> Result<Held, Error> {
        self.called("bpf_held", &[])?;
        Ok(self.script.borrow().held.clone())
    }

    fn bpf_supported(&mut self) -> Result<(), Error> {
        self.called("bpf_supported", &[])
    }

    fn table_flags(&mut self) -> Result<TableFlagSupport, Error> {
        self.called("table_flags", &[])?;
        Ok(TableFlagSupport {
            owner: true,
            persist: true,
        })
    }

    /// Recorded, for the reconcile's tests: the bridges the engine was told of.
    fn know_runtime_bridges(&mut self, bridges: &[String]) {
        self.told_bridges.borrow_mut().push(bridges.to_vec());
    }

    /// The script's changes, heard once each; the descriptor is one end of a socket pair the
    /// monitor keeps.
    fn monitor(&mut self) -> Result<Box<dyn Monitor>, Error> {
        self.called("monitor", &[])?;
        let (fd, _) = std::os::unix::net::UnixStream::pair()
            .map_err(|_| Error::Declared("a socket pair for the fake monitor".into()))?;
        Ok(Box::new(Heard {
            changes: std::mem::take(&mut self.script.borrow_mut().changes),
            fd,
        }))
    }
}

/// The fake's monitor: the script's changes, then none.
struct Heard {
    changes: Vec<Change>,
    fd: std::os::unix::net::UnixStream,
}

impl Monitor for Heard {
    fn changes(&mut self) -> Result<Vec<Change>, Error> {
        Ok(std::mem::take(&mut self.changes))
    }

    fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.fd.as_fd()
    }
}
