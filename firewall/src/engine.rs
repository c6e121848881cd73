//! The engine: converges openings through every layer of the found firewall that a packet of
//! theirs crosses (ingress, prerouting, input or forward), each in its own driver's terms, with
//! the operator's refusals kept first (where the evaluator's model places them, see
//! [`crate::eval`]), and removes only rules the host marked.
//!
//! One convergence is one plan from one listing: every native change goes in one nf_tables batch
//! stamped with that listing's generation (a ruleset reloaded in between makes the kernel refuse
//! it, and the plan is made again), and every iptables table's changes go in one restore.

mod check;
mod flip;
mod plan;
mod table;
mod verdict;

use plan::mirrored;
use verdict::Eval;

use crate::backend::{self, Change, Converger, Cx, TableDriver, TableKey, TableView};
use crate::detect;
use crate::error::{Error, Result};
use crate::eval::Model;
use crate::found::{Backend, Found, Layer, MESH_TABLE};
use crate::netlink::backoff::DEFAULT_DEADLINE;
use crate::netlink::{Backoff, Batch, Family, NfSocket, Ruleset, TableFlags};
use crate::opening::Opening;
use crate::outcome::{Converged, Presence, Scope, State};
use crate::published;
use crate::rules;
use run::Runner;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path as FsPath, PathBuf};

/// How long the container runtime is given to write its rules again after a found firewall's
/// daemon reloaded on the host's write (Docker hears firewalld's `Reloaded` signal on the bus).
const RUNTIME_REWRITE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(5);

/// How many refusals with ERESTART, each with nothing the plan read changed, before a batch is
/// sent without its generation and vouched for after (see `Firewall::send_steady`).
const UNCONDITIONAL_AFTER: u32 = 3;

/// The firewall as this host sees it: the nf_tables socket it keeps and the found layers.
pub struct Firewall<'a> {
    nf: Option<NfSocket>,
    exec: Held<'a>,
    /// The layers, read on first need: opening the firewall lists nothing, so a reconcile that
    /// finds the ruleset at the generation it verified never reads it.
    found: Option<Found>,
    /// Where the legacy table names are read (normally `/proc`).
    proc: PathBuf,
    /// The nf_tables generation `found` was detected in, when the kernel has nf_tables.
    detected: Option<u32>,
    /// The node whose marks this host writes, recorded in the mesh's table on first write.
    node: Option<String>,
    /// The last plan's model of the ruleset, with its generation and where each forwarded
    /// opening's port led: the verdicts of a convergence that wrote nothing read it instead of
    /// listing again. Where legacy tables are in force (they change with no generation) their
    /// saves are read again and compared before it is read.
    last: Option<LastModel>,
    /// How many batches have been sent since the convergence began ([`Firewall::last_commit_tries`]).
    commit_tries: u32,
    /// How long the check of the last convergence's writes took, every plan of it counted
    /// ([`Firewall::last_check`]).
    check_time: std::time::Duration,
    /// The bridges the container runtimes report as theirs ([`Firewall::set_runtime_bridges`]):
    /// no way in for other machines' connections.
    runtime_bridges: Vec<String>,
    /// How many times the whole ruleset has been listed ([`Firewall::listings`]).
    listings: u32,
    /// How many times the verdicts after a write were the ones read during its commit
    /// ([`Firewall::verdicts_read_ahead`]).
    read_ahead: u32,
}

/// The runner a [`Firewall`] starts its programs through: one it borrows, or the real one with a
/// node's deadlines, held by value (plain data), so a firewall opened for a node lives as long as
/// it is kept with nothing leaked to make the runner outlive it.
enum Held<'a> {
    Borrowed(&'a dyn Runner),
    Node(run::Deadlined<'static>),
}

impl Held<'_> {
    fn get(&self) -> &dyn Runner {
        match self {
            Held::Borrowed(r) => *r,
            Held::Node(d) => d,
        }
    }
}

/// A model of one listing, for the verdicts that follow a plan that wrote nothing.
struct LastModel {
    generation: u32,
    /// The legacy tables' saves the model read (empty without legacy tables): still the same
    /// when saved again, the model stands for them too.
    legacy: BTreeMap<(Family, String), String>,
    model: std::rc::Rc<Model>,
    targets: std::rc::Rc<BTreeMap<String, Vec<published::Target>>>,
    /// The verdicts of the openings the batch was planned for, read from this model while the
    /// kernel committed the batch.
    ahead: Option<verdict::Ahead>,
}

/// The chain in the mesh's table whose comment names the node whose marks are in force here.
pub const CLAIM_CHAIN: &str = "claim";

/// One table's plan: its view, its driver and its changes.
struct TablePlan {
    key: TableKey,
    view: TableView,
    driver: &'static dyn TableDriver,
    changes: Vec<Change>,
    /// The found layers whose chains live in this table.
    layers: Vec<Layer>,
}

/// One convergence computed from one listing.
struct Plan {
    ruleset: Ruleset,
    /// The legacy tables as this plan's detection read them.
    legacy_saves: BTreeMap<(Family, String), String>,
    generation: Option<u32>,
    tables: Vec<TablePlan>,
    done: Converged,
    /// The claim to record, when the mesh's table does not carry one yet.
    claim: Option<String>,
    mesh_table: bool,
    /// Kinds that converge as a whole in their own terms (firewalld, ufw), with their layers.
    whole: BTreeMap<Backend, Vec<Layer>>,
    /// (table, change) of additions the check left unwritten, dropped once it is done.
    unwritten: BTreeSet<(usize, usize)>,
    /// The model as the plan's changes leave it, when the check passed them whole: what the
    /// verdicts after the write read instead of listing again, if nothing else committed.
    after: Option<Model>,
    /// Where each forwarded opening's port led in the plan's listing.
    targets: std::rc::Rc<BTreeMap<String, Vec<published::Target>>>,
}

impl<'a> Firewall<'a> {
    /// Opens a socket (when the kernel has nf_tables); the found firewall is read when first
    /// needed.
    pub fn open(exec: &'a dyn Runner) -> Result<Firewall<'a>> {
        Self::open_at(exec, FsPath::new("/proc"))
    }

    pub fn open_at(exec: &'a dyn Runner, proc: &FsPath) -> Result<Firewall<'a>> {
        Self::holding(Held::Borrowed(exec), proc)
    }

    /// Opens the firewall with the real runner and a node's `deadlines` (its `firewall_s` for
    /// the firewall's programs), the runner held by the firewall itself.
    pub fn open_within(deadlines: run::Deadlines) -> Result<Firewall<'static>> {
        Firewall::holding(
            Held::Node(run::Deadlined {
                runner: &run::SystemRunner,
                deadlines,
            }),
            FsPath::new("/proc"),
        )
    }

    fn holding(exec: Held<'a>, proc: &FsPath) -> Result<Firewall<'a>> {
        Ok(Firewall {
            nf: NfSocket::open().ok(),
            exec,
            found: None,
            proc: proc.to_path_buf(),
            detected: None,
            node: None,
            last: None,
            commit_tries: 0,
            check_time: std::time::Duration::ZERO,
            runtime_bridges: Vec::new(),
            listings: 0,
            read_ahead: 0,
        })
    }

    /// The bridges the container runtimes report as theirs (Docker's `docker0` and `br-…`,
    /// Podman's): what arrives on them comes from this machine's own containers, so the verdicts
    /// and the placements do not ask about connections arriving there. Every other interface
    /// with an address is a way in, whatever its name (a router's `br-lan` is).
    pub fn set_runtime_bridges(&mut self, bridges: &[String]) {
        self.runtime_bridges = bridges.to_vec();
    }

    /// This machine's interfaces now, the runtime's bridges marked as no way in.
    pub(crate) fn interfaces(&self) -> Vec<crate::eval::Iface> {
        interfaces(&self.runtime_bridges)
    }

    /// The found firewall, read now if it has not been.
    pub fn found(&mut self) -> Result<&Found> {
        if self.found.is_none() {
            let ruleset = match self.nf.as_mut() {
                Some(s) => Some(s.ruleset(None)?),
                None => None,
            };
            self.found = Some(detect::detect_in(
                ruleset.as_ref(),
                self.exec.get(),
                &self.proc,
            )?);
            self.detected = ruleset.map(|r| r.generation);
        }
        Ok(self.found.as_ref().expect("read above"))
    }

    /// The socket, for the guard.
    pub fn socket(&mut self) -> Option<&mut NfSocket> {
        self.nf.as_mut()
    }

    /// Says which node this host writes for: its first write records it in the mesh's table,
    /// and a firewall that already carries another node's marks is refused.
    pub fn for_node(&mut self, node: &str) {
        self.node = Some(node.to_string());
    }

    /// The node whose marks are in force on this machine, as the mesh's table records it.
    pub fn claimed_by(&mut self) -> Result<Option<String>> {
        let Some(sock) = self.nf.as_mut() else {
            return Ok(None);
        };
        let chains = sock.chains(Some(Family::Inet))?;
        Ok(claim_of(
            chains
                .iter()
                .find(|c| c.table == MESH_TABLE && c.name == CLAIM_CHAIN)
                .and_then(|c| c.comment.as_deref()),
        ))
    }

    /// The kernel's ruleset generation now (one small request, nothing listed); `None` without
    /// nf_tables.
    pub fn generation(&mut self) -> Result<Option<u32>> {
        match self.nf.as_mut() {
            Some(s) => s.generation().map(Some),
            None => Ok(None),
        }
    }

    /// How each opening stands in each layer its packets cross, read without changing anything.
    pub fn presence(&mut self, openings: &[Opening]) -> Result<BTreeMap<String, Vec<Presence>>> {
        let mut plan = self.plan(openings, Scope::Given)?;
        self.whole(&mut plan, openings, Scope::Given, false)?;
        Ok(plan.done.states)
    }

    /// Hands the kinds that converge as a whole every opening and their layers, and merges
    /// what each says into the plan's result.
    fn whole(
        &mut self,
        plan: &mut Plan,
        openings: &[Opening],
        scope: Scope,
        write: bool,
    ) -> Result<()> {
        let mut batch = Batch::new();
        for (backend, layers) in &plan.whole {
            let Converger::Whole(driver) = backend::kind(*backend).converge else {
                continue;
            };
            let mut cx = Cx {
                ruleset: &plan.ruleset,
                legacy_saves: &plan.legacy_saves,
                batch: &mut batch,
                exec: self.exec.get(),
            };
            let got = driver.converge(layers, openings, scope, write, &mut cx)?;
            if write && !got.added.is_empty() {
                self.runtime_rules_back(&plan.ruleset, &plan.legacy_saves, openings)?;
            }
            plan.done.added.extend(got.added);
            plan.done.removed.extend(got.removed);
            plan.done.stale += got.stale;
            for (id, states) in got.states {
                plan.done.states.entry(id).or_default().extend(states);
            }
        }
        Ok(())
    }

    /// Waits, to a deadline, for the container runtime's rules that `before` held to be listed
    /// again when forwarded openings were converged: its DNAT rules for them, and every rule of
    /// every table that is neither firewalld's nor the mesh's (the runtime's filter chains, which
    /// a reload makes it delete and write again as well). A whole driver's write can make its
    /// daemon reload (firewalld does once, when it first takes the mesh's policy), and the
    /// runtime, hearing the reload, writes its rules again a moment later, nat first: the
    /// verdicts are read from the kernel once all of them are back, not from the gap between.
    /// Past the deadline the verdicts say what is there.
    fn runtime_rules_back(
        &mut self,
        before: &Ruleset,
        legacy_saves: &BTreeMap<(Family, String), String>,
        openings: &[Opening],
    ) -> Result<()> {
        if self.nf.is_none() {
            return Ok(());
        }
        let forwarded: Vec<&Opening> = openings
            .iter()
            .filter(|o| o.path == crate::opening::Path::Forwarded)
            .collect();
        if forwarded.is_empty() {
            return Ok(());
        }
        let wanted: Vec<(&Opening, Vec<published::Target>)> = forwarded
            .iter()
            .map(|o| {
                (
                    *o,
                    published::targets(before, legacy_saves, o.proto, o.port),
                )
            })
            .filter(|(_, t)| !t.is_empty())
            .collect();
        self.until_back(before, |now| {
            wanted.iter().all(|(o, t)| {
                let got = published::targets(now, legacy_saves, o.proto, o.port);
                t.iter().all(|x| got.contains(x))
            })
        })
    }

    /// Waits, to [`RUNTIME_REWRITE_DEADLINE`], polling the ruleset every 10 ms, until every rule
    /// `before` held outside firewalld's table and the mesh's is listed again and `also` holds
    /// of the listing; past the deadline it returns and what follows reads what is there.
    pub(crate) fn until_back(
        &mut self,
        before: &Ruleset,
        also: impl Fn(&Ruleset) -> bool,
    ) -> Result<()> {
        if self.nf.is_none() {
            return Ok(());
        }
        let others = others_rules(before);
        let until = std::time::Instant::now() + RUNTIME_REWRITE_DEADLINE;
        loop {
            let now = self.snapshot()?;
            let got = others_rules(&now.ruleset);
            let others_back = others
                .iter()
                .all(|(rule, n)| got.get(rule).is_some_and(|m| m >= n));
            if (others_back && also(&now.ruleset)) || std::time::Instant::now() >= until {
                return Ok(());
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// Converges the given openings through every layer their packets cross: missing rules are
    /// put where the model places them (after the operator's refusals, before the catch-all), misplaced
    /// and old versions and (with [`Scope::All`]) marked rules of other openings are removed.
    /// Nothing unmarked is touched.
    ///
    /// The nf_tables batch is conditional on the generation of the listing it was computed from:
    /// if anyone changed the ruleset in between (a reload restarts handles, so a listed handle
    /// could name someone else's rule), the kernel applies nothing and answers ERESTART, and the
    /// batch is sent again at the new generation when everything the plan read is still as it
    /// listed it ([`NfSocket::still_as`]: the changes were elsewhere), or the convergence is
    /// computed again from a fresh listing; each retry after a jittered backoff, until the
    /// socket's deadline, past which [`Error::Raced`] names the tries and the time.
    pub fn converge(&mut self, openings: &[Opening], scope: Scope) -> Result<Converged> {
        for o in openings {
            o.validate()?;
        }
        let mut backoff = Backoff::new(self.deadline());
        self.commit_tries = 0;
        self.check_time = std::time::Duration::ZERO;
        loop {
            match self.converge_once(openings, scope, &mut backoff) {
                Err(Error::Refused { errno, .. })
                    if errno.0 == nix::errno::Errno::ERESTART as i32 =>
                {
                    if !backoff.wait() {
                        return Err(Error::Raced {
                            tries: backoff.tries(),
                            millis: backoff.millis(),
                        });
                    }
                }
                other => return other,
            }
        }
    }

    /// How long a listing or a convergence retries while the ruleset changes under it.
    pub fn deadline(&self) -> std::time::Duration {
        self.nf
            .as_ref()
            .map(NfSocket::deadline)
            .unwrap_or(DEFAULT_DEADLINE)
    }

    /// Sets how long a listing or a convergence retries while the ruleset changes under it.
    pub fn set_deadline(&mut self, deadline: std::time::Duration) {
        if let Some(s) = self.nf.as_mut() {
            s.set_deadline(deadline);
        }
    }

    /// How many times this firewall has listed the whole ruleset with its sets' elements: what
    /// shows that the verdicts after a write read the checked model rather than the kernel.
    pub fn listings(&self) -> u32 {
        self.listings
    }

    /// How many times the verdicts after a write were read on a second thread while the kernel
    /// committed it ([`verdict::AHEAD_FROM`] openings or more), rather than after.
    pub fn verdicts_read_ahead(&self) -> u32 {
        self.read_ahead
    }

    /// How many batches the last convergence sent before one applied (0: nothing to send).
    pub fn last_commit_tries(&self) -> u32 {
        self.commit_tries
    }

    /// How long the last convergence spent checking its writes against the whole ruleset before
    /// sending them ([`check::settle`], every plan of it when the ruleset moved and it planned
    /// again): the share of an apply that issue 30's check costs, which `bench/run` reports.
    pub fn last_check(&self) -> std::time::Duration {
        self.check_time
    }

    /// Sends a batch conditional on the generation of `listed`; while the kernel refuses it with
    /// ERESTART and everything `listed` read is still as it was, sends it again at the new
    /// generation. An ERESTART is returned when the ruleset really changed (the plan is stale).
    /// Returns the generation the batch applied on, or `None` when it went without one.
    ///
    /// Under a churn that holds the kernel's commit lock back to back (elsewhere in the
    /// ruleset), the generation moves between every read of it and the batch: after
    /// [`UNCONDITIONAL_AFTER`] such refusals with nothing read changed, the batch goes without
    /// its generation, and the watch vouches for it after the commit: if a transaction of
    /// another thread touched a table the plan read since the listing, ERESTART is returned and
    /// the convergence is computed again from a fresh listing (which sees this batch's rules, so
    /// the next one corrects whatever it placed from a stale view).
    fn send_steady(
        sock: &mut NfSocket,
        batch: &mut Batch,
        listed: &Ruleset,
        backoff: &mut Backoff,
        sent: &mut u32,
    ) -> Result<Option<u32>> {
        let stale = |batch: &Batch| Error::Refused {
            what: format!("a batch of {} messages", batch.len()),
            seq: 0,
            errno: crate::error::Errno(nix::errno::Errno::ERESTART as i32),
            detail: None,
        };
        let mut vouched = 0;
        let mut unconditional = false;
        loop {
            *sent += 1;
            // The thread the kernel's NEWGEN will name.
            let mine = nix::unistd::gettid().as_raw() as u32;
            match sock.send(batch) {
                Ok(()) if unconditional => {
                    return if sock.only_mine_since(listed, mine)? {
                        Ok(None)
                    } else {
                        Err(stale(batch))
                    };
                }
                // Sent on the plan's word alone, a rule it names may be gone: plan again.
                Err(Error::Refused { errno, .. })
                    if unconditional
                        && matches!(
                            nix::errno::Errno::from_raw(errno.0),
                            nix::errno::Errno::ENOENT | nix::errno::Errno::EBUSY
                        ) =>
                {
                    return Err(stale(batch))
                }
                Err(Error::Refused { errno, .. })
                    if errno.0 == nix::errno::Errno::ERESTART as i32 =>
                {
                    if !backoff.wait() {
                        return Err(Error::Raced {
                            tries: backoff.tries(),
                            millis: backoff.millis(),
                        });
                    }
                    match sock.still_as(listed)? {
                        Some(_) if vouched + 1 >= UNCONDITIONAL_AFTER => {
                            batch.clear_generation();
                            unconditional = true;
                        }
                        Some(g) => {
                            vouched += 1;
                            batch.set_generation(g);
                        }
                        None => return Err(stale(batch)),
                    }
                }
                Ok(()) => return Ok(batch.generation()),
                other => return other.map(|()| None),
            }
        }
    }

    fn converge_once(
        &mut self,
        openings: &[Opening],
        scope: Scope,
        backoff: &mut Backoff,
    ) -> Result<Converged> {
        let mut plan = self.plan(openings, scope)?;
        let changes = plan.tables.iter().any(|t| !t.changes.is_empty());
        let mut batch = Batch::new();
        if let Some(g) = plan.generation {
            batch.set_generation(g);
        }
        // The first write on this machine records whose marks these are.
        if let (Some(node), true, true) = (&plan.claim, changes, self.nf.is_some()) {
            if !plan.mesh_table {
                batch.add_table(Family::Inet, MESH_TABLE, TableFlags::NONE)?;
            }
            batch.add_chain_commented(
                Family::Inet,
                MESH_TABLE,
                CLAIM_CHAIN,
                &format!("{CLAIM_PREFIX}{node}"),
            )?;
        }
        // Native changes first, in the one batch (sent here, conditional on the listing's
        // generation), then each iptables table in its own restore.
        for native in [true, false] {
            let mut cx = Cx {
                ruleset: &plan.ruleset,
                legacy_saves: &plan.legacy_saves,
                batch: &mut batch,
                exec: self.exec.get(),
            };
            for t in plan
                .tables
                .iter()
                .filter(|t| (t.key.backend == Backend::Nftables) == native && !t.changes.is_empty())
            {
                t.driver.write(&t.key, &t.view, &t.changes, &mut cx)?;
            }
            if native && !batch.is_empty() {
                let sock = self.nf.as_mut().ok_or_else(|| Error::Unsupported {
                    reason: "nf_tables layers were found but no nf_tables socket is open".into(),
                })?;
                // Where the verdicts will read the checked model, they are read from it on a
                // second thread while this one waits for the kernel's commit (a third of an
                // apply of many openings; for a few, a thread costs more than they do). The
                // batch is sent from this thread: the kernel names the committing thread in its
                // NEWGEN, and the host knows its own commits by it.
                let ahead_of = (openings.len() >= verdict::AHEAD_FROM
                    && plan.generation.is_some()
                    && mirrored(&plan))
                .then_some(plan.after.as_ref())
                .flatten();
                let ifaces = ahead_of.map(|_| interfaces(&self.runtime_bridges));
                let tries = &mut self.commit_tries;
                let targets: &BTreeMap<_, _> = &plan.targets;
                let mut send =
                    || Self::send_steady(sock, &mut batch, &plan.ruleset, backoff, tries);
                let (ahead, sent) = match ahead_of.zip(ifaces) {
                    Some((after, ifaces)) => {
                        let read = move || verdict::Ahead::read(after, openings, ifaces, targets);
                        let (ahead, sent) = crate::pair::both(read, send);
                        (Some(ahead), sent)
                    }
                    None => (None, send()),
                };
                let applied_on = sent?;
                // The batch applied on the listing's own generation, so the kernel's ruleset is
                // the listing with this batch: one generation later it is the model the check
                // built, and the verdicts read that instead of listing everything again
                // (`Firewall::verdicts` compares the generation first; any other commit since,
                // and they list). Only where the batch is the whole write and mirrors the edits.
                self.last = match (applied_on, plan.after.take()) {
                    (Some(g), Some(after)) if Some(g) == plan.generation && mirrored(&plan) => {
                        Some(LastModel {
                            generation: g.wrapping_add(1),
                            legacy: plan.legacy_saves.clone(),
                            model: std::rc::Rc::new(after),
                            targets: plan.targets.clone(),
                            ahead,
                        })
                    }
                    _ => None,
                };
            }
        }
        let mut done = std::mem::take(&mut plan.done);
        for states in done.states.values_mut() {
            for p in states.iter_mut() {
                if p.state == State::Missing {
                    p.state = State::Present;
                }
            }
        }
        // Kinds converged as a whole read back their own result, which is taken as it is.
        plan.done = done;
        self.whole(&mut plan, openings, scope, true)?;
        Ok(plan.done)
    }
}

/// The machine's interfaces as the evaluator reads them, the runtimes' bridges marked.
fn interfaces(runtime_bridges: &[String]) -> Vec<crate::eval::Iface> {
    let mut ifaces = crate::eval::interfaces();
    crate::eval::mark_runtime_bridges(&mut ifaces, runtime_bridges);
    ifaces
}

/// The prefix of the claim chain's comment, before the node's name.
pub const CLAIM_PREFIX: &str = "mesh-host node ";

fn claim_of(comment: Option<&str>) -> Option<String> {
    comment
        .and_then(|c| c.strip_prefix(CLAIM_PREFIX))
        .map(str::to_string)
}

/// Each rule of `ruleset` outside firewalld's table and the mesh's, by where it is and what it
/// says (not its handle, which a rule written again does not keep, nor its counter's counts,
/// which traffic moves and a rule written again starts from zero), with how many there are.
fn others_rules(
    ruleset: &Ruleset,
) -> HashMap<(Family, &str, &str, Vec<crate::netlink::Expr>), usize> {
    let mut out = HashMap::new();
    for r in &ruleset.rules {
        if r.table == published::FIREWALLD_TABLE
            || (r.table == MESH_TABLE && r.family == Family::Inet)
        {
            continue;
        }
        let says: Vec<crate::netlink::Expr> = r
            .exprs
            .iter()
            .map(|e| match e {
                crate::netlink::Expr::Counter { .. } => crate::netlink::Expr::Counter {
                    bytes: 0,
                    packets: 0,
                },
                e => e.clone(),
            })
            .collect();
        *out.entry((r.family, r.table.as_str(), r.chain.as_str(), says))
            .or_insert(0) += 1;
    }
    out
}
