//! The kernel's node firewall: the found firewall opened through the firewall crate on first use
//! (detection reads every layer, so once per apply), the guard's table written on the nf_tables
//! socket without waiting for detection, and the guard's BPF layer pinned under the node's root.

use super::read::NfChanges;
use super::{Error, Generation, Held, Monitor, NodeFirewall, NodeFirewallRead};
use firewall::bpf::{BpfStatus, Pins};
use firewall::eval::{Answer, Verdict, Way};
use firewall::{
    Converged, FilterSpec, Firewall, Found, GuardSpec, GuardStatus, NfSocket, Opening, Presence,
    Retired, Scope,
};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The firewall engine's programs for a node with `deadlines`: the real runner with the node's
/// `firewall_s` (and its other deadlines for anything else the engine runs), plain data made per
/// call (a `Firewall` holds its own, [`Firewall::open_within`]).
fn firewall_runner(deadlines: run::Deadlines) -> run::Deadlined<'static> {
    run::Deadlined {
        runner: &run::SystemRunner,
        deadlines,
    }
}

/// The found firewall, read when first asked, its programs within `deadlines`.
fn open_found(deadlines: run::Deadlines) -> Result<Firewall<'static>, Error> {
    Firewall::open_within(deadlines).map_err(Error::Unreadable)
}

/// Whether legacy x_tables are in force in this thread's namespace (as the fingerprint reads
/// them): they send no generation, so what they hold is never known unchanged without reading it.
pub fn legacy_in_force() -> bool {
    legacy_listed().unwrap_or(false)
}

/// Whether this thread's namespace lists a legacy table, as the fingerprint reads the lists (a
/// list that is not there, its module not loaded, lists none); `None` when none is listed but a
/// list could not be read.
pub(super) fn legacy_listed() -> Option<bool> {
    let (mut any, mut unread) = (false, false);
    for path in [
        "/proc/thread-self/net/ip_tables_names",
        "/proc/thread-self/net/ip6_tables_names",
    ] {
        match std::fs::read_to_string(path) {
            Ok(text) => any |= !text.trim().is_empty(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(_) => unread = true,
        }
    }
    (any || !unread).then_some(any)
}

/// The legacy x_tables' fingerprint now (`firewall::xtables`: every table as the kernel hands it
/// out, counters left out), read without a child process; `None` without legacy tables or when
/// they cannot be read.
pub fn legacy_fingerprint() -> Option<String> {
    legacy_read().flatten()
}

/// The same, telling the two apart: `Some(None)` without legacy tables, `None` when they cannot
/// be read.
pub(super) fn legacy_read() -> Option<Option<String>> {
    firewall::xtables::fingerprint().ok()
}

/// The node's firewall in this network namespace, for one node under one root.
pub struct Kernel {
    root: PathBuf,
    node: String,
    deadlines: run::Deadlines,
    fw: Option<Firewall<'static>>,
    /// A socket of its own for the guard and the filter until the found firewall is opened.
    sock: Option<NfSocket>,
    /// The runtime's bridges as last asked or told, given to the found firewall's engine.
    bridges: Vec<String>,
    /// Where the ruleset stood the moment a converge that wrote returned: nf_tables'
    /// generation then, and the legacy tables' fingerprint, read from then on a thread of its
    /// own while the verdicts read the tables back. What the generation asked next gives; any
    /// other write drops it (the next asking reads the kernel then).
    written: Option<Written>,
}

/// [`Kernel::written`]. Read before the read-back, it can only be older than what the verdicts
/// saw, never newer: a change by someone else in between makes the next reconcile read
/// everything, where a generation read after the verdicts would vouch for a change nobody
/// checked.
struct Written {
    /// `None` when the kernel did not say.
    nft: Option<u32>,
    legacy: super::LegacyAhead,
}

impl Kernel {
    /// The node's firewall for `node` under `root`, every program the engine runs within
    /// `deadlines` (the declaration's `settings.deadlines`); for no node when `node` is empty
    /// (what only reads, and the resident host's put-back of the guard and the filter).
    pub fn new(root: &Path, node: &str, deadlines: run::Deadlines) -> Kernel {
        Kernel {
            root: root.to_path_buf(),
            node: node.to_string(),
            deadlines,
            fw: None,
            sock: None,
            bridges: Vec::new(),
            written: None,
        }
    }

    /// Opens its nf_tables socket now, so the first restore through it costs no socket setup.
    pub fn with_socket(mut self) -> Kernel {
        let _ = self.socket();
        self
    }

    /// Opens the found firewall once: every write is made for the node, whose name the mesh's
    /// table records.
    fn found(&mut self) -> Result<&mut Firewall<'static>, Error> {
        if self.fw.is_none() {
            let mut opened = open_found(self.deadlines)?;
            // A kernel for no node (`""`: `firewall status`, `explain`, `profile`, the resident
            // host's put-back) reads another node's marked rules as they are and claims nothing.
            if !self.node.is_empty() {
                opened.for_node(&self.node);
            }
            opened.set_runtime_bridges(&self.bridges);
            self.fw = Some(opened);
            self.sock = None;
        }
        Ok(self.fw.as_mut().expect("just opened"))
    }

    /// The nf_tables socket: the found firewall's when it is open, else one of its own.
    fn socket(&mut self) -> Result<&mut NfSocket, Error> {
        if let Some(fw) = self.fw.as_mut() {
            return fw.socket().ok_or(Error::NoNfTables);
        }
        if self.sock.is_none() {
            self.sock = Some(NfSocket::open().map_err(|_| Error::NoNfTables)?);
        }
        Ok(self.sock.as_mut().expect("just opened"))
    }

    fn pins(&self) -> firewall::bpf::Pins {
        firewall::bpf::Pins::under(&self.root)
    }

    /// A write other than a converge's begins: a fingerprint read before it no longer stands.
    fn writes(&mut self) {
        self.written = None;
    }
}

impl NodeFirewall for Kernel {
    fn guard_table(&mut self, spec: &GuardSpec) -> Result<firewall::GuardReport, Error> {
        self.writes();
        Ok(firewall::guard::ensure(self.socket()?, spec)?)
    }

    fn guard_bpf(&mut self, spec: &GuardSpec) -> Result<firewall::bpf::BpfReport, Error> {
        self.writes();
        Ok(firewall::bpf::ensure(&self.pins(), spec)?)
    }

    fn remove_guard_bpf(&mut self) -> Result<bool, Error> {
        self.writes();
        Ok(firewall::bpf::remove(&self.pins())?)
    }

    fn remove_guard_table(&mut self) -> Result<bool, Error> {
        self.writes();
        Ok(firewall::guard::remove(self.socket()?)?)
    }

    fn converge(&mut self, openings: &[Opening], scope: Scope) -> Result<Converged, Error> {
        self.writes();
        let fw = self.found()?;
        let done = fw.converge(openings, scope)?;
        // What the check of every write costs inside an act: `bench/run` reads this line
        // (`RUST_LOG=mesh_host::timing=debug`) beside the whole process's time.
        tracing::debug!(
            target: "mesh_host::timing",
            "the check of the write took {} us for {} openings",
            fw.last_check().as_micros(),
            openings.len()
        );
        if !done.added.is_empty() || !done.removed.is_empty() {
            let nft = fw.generation().ok().flatten();
            self.written = Some(Written {
                nft,
                legacy: super::LegacyAhead::start(),
            });
        }
        Ok(done)
    }

    fn filter_in_force(&mut self, spec: &FilterSpec) -> Result<bool, Error> {
        Ok(firewall::filter::in_force(self.socket()?, spec)?)
    }

    fn ensure_filter(&mut self, spec: &FilterSpec) -> Result<bool, Error> {
        self.writes();
        Ok(firewall::filter::ensure(self.socket()?, spec)?)
    }

    fn remove_filter(&mut self) -> Result<bool, Error> {
        self.writes();
        Ok(self.found()?.remove_filter()?)
    }

    fn survey(&mut self) -> Result<Vec<Retired>, Error> {
        let root = self.root.clone();
        Ok(self.found()?.survey(&root)?)
    }

    fn flip(
        &mut self,
        spec: &FilterSpec,
        saved: &[Retired],
    ) -> Result<(Vec<Retired>, bool), Error> {
        self.writes();
        Ok(self.found()?.flip(spec, saved)?)
    }

    fn unflip(
        &mut self,
        saved: &[Retired],
        start: &mut dyn FnMut() -> Result<(), Error>,
    ) -> Result<(), Error> {
        self.writes();
        let fw = self.found()?;
        let before = fw.listing()?;
        start()?;
        Ok(fw.unflip(saved, Some(&before))?)
    }

    fn runtime_bridges(
        &mut self,
        runner: &dyn run::Runner,
        interfaces: &[::genesis::inventory::Interface],
    ) -> Vec<String> {
        let bridges = crate::system::runtime_bridges(runner, interfaces);
        self.know_runtime_bridges(&bridges);
        bridges
    }
}

impl NodeFirewallRead for Kernel {
    fn claimed_by(&mut self) -> Result<Option<String>, Error> {
        Ok(self.found()?.claimed_by()?)
    }

    fn generation(&mut self) -> Option<Generation> {
        self.generation_with(super::LegacyAhead::none())
    }

    fn generation_with(&mut self, ahead: super::LegacyAhead) -> Option<Generation> {
        // Where this Kernel's last write left the ruleset, when its converge wrote last.
        let (nft, ahead) = match self.written.take() {
            Some(w) => (w.nft, w.legacy),
            None => (self.found().ok()?.generation().ok().flatten(), ahead),
        };
        // Legacy tables send no generation: their fingerprint, read from the kernel by
        // getsockopt (no child process), vouches for them instead (none when there are none;
        // tables that cannot be read leave the whole unknown).
        let legacy = match ahead.take() {
            Some(read) => read,
            None => legacy_read()?,
        };
        Some(Generation { nft: nft?, legacy })
    }

    fn kind(&mut self) -> String {
        match self.found() {
            Ok(fw) => fw
                .found()
                .map(|f| f.kind())
                .unwrap_or_else(|e| format!("unreadable: {e}")),
            Err(e) => format!("unreadable: {e}"),
        }
    }

    fn detected(&mut self) -> Result<Found, Error> {
        Ok(self.found()?.found()?.clone())
    }

    fn presence(&mut self, openings: &[Opening]) -> Result<BTreeMap<String, Vec<Presence>>, Error> {
        Ok(self.found()?.presence(openings)?)
    }

    fn verdicts(&mut self, openings: &[Opening]) -> Result<BTreeMap<String, Verdict>, Error> {
        Ok(self.found()?.verdicts(openings)?)
    }

    fn answers(&mut self, openings: &[Opening]) -> Result<Vec<Vec<(Way, Answer)>>, Error> {
        Ok(self.found()?.explain_each(openings)?)
    }

    fn ask_kernel(
        &mut self,
        ways: &[(Way, Answer)],
    ) -> Result<firewall::confirm::Confirmation, Error> {
        firewall::confirm::on_node(
            &firewall_runner(self.deadlines),
            ways,
            firewall::confirm::BUDGET,
        )
        .map_err(|e| Error::from(e).doing("asking the kernel in scratch network namespaces"))
    }

    fn explain(
        &mut self,
        opening: &Opening,
        only_iif: Option<&str>,
    ) -> Result<Vec<(Way, Answer)>, Error> {
        Ok(self.found()?.explain(opening, only_iif)?)
    }

    fn guard_status(&mut self) -> Result<GuardStatus, Error> {
        Ok(firewall::guard::status(self.socket()?)?)
    }

    fn bpf_pins(&mut self) -> Pins {
        self.pins()
    }

    fn bpffs(&mut self) -> bool {
        let pins = self.pins();
        pins.may_mount || firewall::bpf::is_bpffs(&pins.fs)
    }

    fn bpf_pinned(&mut self) -> Result<BpfStatus, Error> {
        Ok(firewall::bpf::status(&self.pins())?)
    }

    fn bpf_held(&mut self) -> Result<Held, Error> {
        let (links, refused) = firewall::bpf::survey(&self.pins())?;
        Ok(Held {
            links,
            refused: refused.map(|e| e.to_string()),
        })
    }

    fn bpf_supported(&mut self) -> Result<(), Error> {
        Ok(firewall::bpf::supported()?)
    }

    fn table_flags(&mut self) -> Result<firewall::probe::TableFlagSupport, Error> {
        Ok(firewall::probe::table_flags()?)
    }

    fn know_runtime_bridges(&mut self, bridges: &[String]) {
        self.bridges = bridges.to_vec();
        if let Some(fw) = self.fw.as_mut() {
            fw.set_runtime_bridges(bridges);
        }
    }

    fn monitor(&mut self) -> Result<Box<dyn Monitor>, Error> {
        Ok(Box::new(NfChanges(firewall::NfMonitor::open()?)))
    }
}
