//! The read view of the node's firewall ([`NodeFirewallRead`]): what `firewall status`, the
//! preview, `profile` and the resident host's monitor ask of it, none of which changes the
//! ruleset; the write view ([`super::NodeFirewall`]) extends it, so one value answers both.

use super::Error;
use firewall::bpf::{BpfStatus, Pins};
use firewall::eval::{Answer, Verdict, Way};
use firewall::{Found, GuardStatus, Opening, Presence};
use std::collections::BTreeMap;
use std::os::fd::BorrowedFd;
use std::path::Path;

/// Where the node's whole firewall stands, asked without listing it: equal to what an apply
/// recorded when nothing of it changed since.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generation {
    /// nf_tables' ruleset generation, which every nf_tables change moves.
    pub nft: u32,
    /// The legacy x_tables' fingerprint (`sha256:…`, counters left out), where they are in
    /// force: they send no generation.
    pub legacy: Option<String>,
}

impl std::fmt::Display for Generation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.legacy {
            None => write!(f, "ruleset generation {}", self.nft),
            Some(fp) => write!(
                f,
                "ruleset generation {} and legacy tables {}",
                self.nft,
                fp.get(..19).unwrap_or(fp)
            ),
        }
    }
}

/// The legacy tables' fingerprint, read on a thread of its own from the start of a reconcile
/// while the store is read and parsed (at 10,000 openings each is a quarter of the reconcile),
/// for [`NodeFirewallRead::generation_with`]. Read before the store's lock is taken: an act that
/// held the lock and changed the tables meanwhile recorded their new fingerprint, which this one
/// then does not match, and the tables are read whole; the same as a change by another program
/// after any reading of them. Where no legacy table is listed there is nothing to read: no
/// thread, and the lists are not read again when the generation is asked.
pub struct LegacyAhead(Ahead);

enum Ahead {
    /// Nothing read ahead: the fingerprint is read when it is asked for.
    NotRead,
    /// No legacy table was listed.
    NoTables,
    /// The fingerprint being read (`Some(None)`: no legacy table; `None`: unreadable).
    Reading(std::thread::JoinHandle<Option<Option<String>>>),
}

impl LegacyAhead {
    /// Starts the reading where legacy tables are listed in this thread's namespace.
    pub fn start() -> LegacyAhead {
        LegacyAhead(match super::kernel::legacy_listed() {
            Some(false) => Ahead::NoTables,
            None => Ahead::NotRead,
            Some(true) => std::thread::Builder::new()
                .name("legacy-fingerprint".into())
                .spawn(super::kernel::legacy_read)
                .map_or(Ahead::NotRead, Ahead::Reading),
        })
    }

    /// Nothing read ahead.
    pub fn none() -> LegacyAhead {
        LegacyAhead(Ahead::NotRead)
    }

    /// The fingerprint read ahead (`Some(None)`: no legacy table); `None` when nothing was read
    /// ahead, or the tables could not be read.
    pub(super) fn take(self) -> Option<Option<String>> {
        match self.0 {
            Ahead::NotRead => None,
            Ahead::NoTables => Some(None),
            Ahead::Reading(reading) => reading.join().ok().flatten(),
        }
    }
}

/// What the core reads of the node's firewall. The kernel's implementation
/// ([`super::Kernel`]) opens the found firewall on first use; the recording fake answers from its
/// script.
pub trait NodeFirewallRead {
    /// The node whose marked rules are in force here, if any.
    fn claimed_by(&mut self) -> Result<Option<String>, Error>;
    /// Where the whole ruleset stands: nf_tables' generation and, where legacy x_tables are in
    /// force (they send no generation), their fingerprint; `None` when either cannot be read.
    fn generation(&mut self) -> Option<Generation>;
    /// The same, with the legacy tables' fingerprint read ahead when one was
    /// ([`LegacyAhead`]); what does not read the kernel asks [`NodeFirewallRead::generation`].
    fn generation_with(&mut self, ahead: LegacyAhead) -> Option<Generation> {
        drop(ahead);
        self.generation()
    }
    /// The found firewall's kind, as the report names it (`nftables`, `firewalld`, …).
    fn kind(&mut self) -> String;
    /// The found firewall as detected: its layers with their evidence, its refusal, its notes.
    fn detected(&mut self) -> Result<Found, Error>;
    /// Each opening's marked rule, present or missing, on each layer it crosses, by id.
    fn presence(&mut self, openings: &[Opening]) -> Result<BTreeMap<String, Vec<Presence>>, Error>;
    /// What a new connection of each opening meets, read from the kernel's ruleset now.
    fn verdicts(&mut self, openings: &[Opening]) -> Result<BTreeMap<String, Verdict>, Error>;
    /// Each opening's ways and the evaluator's answer on each, read from the ruleset as it
    /// stands now (the walk `firewall explain` prints), in the order given.
    fn answers(&mut self, openings: &[Opening]) -> Result<Vec<Vec<(Way, Answer)>>, Error>;
    /// The ways of one opening (only those arriving on `only_iif`, when given) and the
    /// evaluator's answer on each: `firewall explain`.
    fn explain(
        &mut self,
        opening: &Opening,
        only_iif: Option<&str>,
    ) -> Result<Vec<(Way, Answer)>, Error>;
    /// The kernel asked about `ways` in scratch network namespaces shaped like this node, the
    /// ruleset as it stands now loaded there ([`firewall::confirm::on_node`]).
    fn ask_kernel(
        &mut self,
        ways: &[(Way, Answer)],
    ) -> Result<firewall::confirm::Confirmation, Error>;
    /// The guard's table (`inet mesh_host`) as it stands; [`Error::NoNfTables`] where the
    /// kernel has none.
    fn guard_status(&mut self) -> Result<GuardStatus, Error>;
    /// Where the guard's BPF layer is pinned under the node's root.
    fn bpf_pins(&mut self) -> Pins;
    /// Whether a bpffs is mounted where the pins live, or may be mounted there.
    fn bpffs(&mut self) -> bool;
    /// The guard's BPF layer as pinned, read without changing anything.
    fn bpf_pinned(&mut self) -> Result<BpfStatus, Error>;
    /// This namespace's guard links the kernel holds, pinned or not, and why the kernel refused
    /// the program when none was pinned to ask with.
    fn bpf_held(&mut self) -> Result<Held, Error>;
    /// Whether this kernel takes the guard's program at all.
    fn bpf_supported(&mut self) -> Result<(), Error>;
    /// Which nf_tables table flags (owner, persist) this kernel takes, tried in a namespace of
    /// its own.
    fn table_flags(&mut self) -> Result<firewall::probe::TableFlagSupport, Error>;
    /// The runtime's bridges as last asked (the memo's guard keeps them), for a reconcile that
    /// asks no runtime: the openings' verdicts and placements take no connection arriving on
    /// them for another machine's. `runtime_bridges` tells it the same as it answers.
    fn know_runtime_bridges(&mut self, bridges: &[String]);
    /// The ruleset's changes as the kernel announces them, from now on.
    fn monitor(&mut self) -> Result<Box<dyn Monitor>, Error>;
}

/// Opens the node's firewall for reading: for node `node` (its claim compared) under `root`
/// (the guard's pins), its programs within `deadlines`.
pub type OpenRead<'a> = &'a dyn Fn(&Path, &str, run::Deadlines) -> Box<dyn NodeFirewallRead>;

/// The kernel's firewall, for reading: what the binary's preview uses.
pub fn kernel_reader(
    root: &Path,
    node: &str,
    deadlines: run::Deadlines,
) -> Box<dyn NodeFirewallRead> {
    Box::new(super::Kernel::new(root, node, deadlines))
}

/// The guard's links the kernel holds in this namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Held {
    pub links: Vec<firewall::bpf::LinkInfo>,
    /// Why the kernel refused the program the survey loaded (no program was pinned).
    pub refused: Option<String>,
}

impl Held {
    /// A link of this namespace's guard is attached at each of the four hooks.
    pub fn attached(&self) -> bool {
        firewall::bpf::HOOKS
            .iter()
            .all(|(pf, hook, _)| self.links.iter().any(|l| l.pf == *pf && l.hooknum == *hook))
    }
}

/// One change to the ruleset as a monitor hears it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A transaction committed, by the process named when the kernel says.
    Generation {
        pid: Option<u32>,
        process: Option<String>,
    },
    /// The kernel's buffer overflowed and changes were lost: any of them may be foreign.
    Lost,
}

impl Change {
    /// Whether this change is another process's than `me` (lost changes may be).
    pub fn foreign(&self, me: u32) -> bool {
        !matches!(self, Change::Generation { pid: Some(p), .. } if *p == me)
    }

    /// Who made it, as the log says it: `nft (pid 42)`.
    pub fn who(&self) -> String {
        match self {
            Change::Generation { pid, process } => format!(
                "{} (pid {})",
                process.as_deref().unwrap_or("?"),
                pid.map(|p| p.to_string()).unwrap_or_else(|| "?".into())
            ),
            Change::Lost => "events lost (buffer full)".to_string(),
        }
    }
}

/// The ruleset's changes heard as they come: a descriptor that polls readable when there are
/// some, and the changes drained without waiting.
pub trait Monitor {
    /// The changes heard since the last call, without waiting.
    fn changes(&mut self) -> Result<Vec<Change>, Error>;
    /// The descriptor to poll.
    fn fd(&self) -> BorrowedFd<'_>;
}

/// The kernel's monitor: an nf_tables socket subscribed to the ruleset's changes.
pub(super) struct NfChanges(pub(super) firewall::NfMonitor);

impl Monitor for NfChanges {
    fn changes(&mut self) -> Result<Vec<Change>, Error> {
        Ok(self
            .0
            .generations()?
            .into_iter()
            .filter_map(|e| match e {
                firewall::Event::NewGen(g) => Some(Change::Generation {
                    pid: g.pid,
                    process: g.process,
                }),
                firewall::Event::Lost => Some(Change::Lost),
                _ => None,
            })
            .collect())
    }

    fn fd(&self) -> BorrowedFd<'_> {
        use std::os::fd::AsRawFd;
        // SAFETY: the monitor owns this descriptor and the borrow lives no longer than `self`
        // (the firewall crate gives the monitor no `AsFd`).
        unsafe { BorrowedFd::borrow_raw(self.0.as_raw_fd()) }
    }
}

/// Listens for firewalld's `Reloaded` signal on a thread of its own for the life of the process,
/// calling `heard` for each (a reload drops firewalld's runtime configuration, the openings with
/// it).
pub fn firewalld_reloads(heard: impl Fn() + Send + 'static) -> std::io::Result<()> {
    firewall::backend::firewalld_reloads(heard).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_is_foreign_unless_this_process_made_it() {
        let mine = Change::Generation {
            pid: Some(7),
            process: Some("mesh-host".into()),
        };
        let nft = Change::Generation {
            pid: Some(42),
            process: Some("nft".into()),
        };
        assert!(!mine.foreign(7));
        assert!(nft.foreign(7));
        assert!(Change::Lost.foreign(7));
        assert_eq!(nft.who(), "nft (pid 42)");
        assert_eq!(Change::Lost.who(), "events lost (buffer full)");
    }
}
