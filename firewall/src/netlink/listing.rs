//! Listing the ruleset under churn: whole, within one generation, while it holds still; by table
//! when it will not (a busy foreign table interrupts every whole listing), each table on the way
//! of incoming packets taken when the watched events say nothing touched it meanwhile; and the
//! check, just before a commit, that nothing a plan read was touched since its listing.

use std::time::{Duration, Instant};

use super::attr;
use super::backoff::Backoff;
use super::consts::*;
use super::list::{self, Chain, Rule, Ruleset, Set, Table};
use super::msg::NlMsg;
use super::socket::NfSocket;
use super::types::{Family, Hook};
use super::watch::Watch;
use crate::error::{Error, Result};

/// How many whole listings are tried before reading by table.
pub const WHOLE_TRIES: u32 = 1;
/// How long listings go straight to reading by table after the whole ruleset would not hold
/// still (then a whole listing is tried again).
pub const BY_TABLE_FOR: Duration = Duration::from_secs(10);

/// Whether a chain's packets are incoming ones (the hooks an opening's packets cross).
fn on_the_way(c: &Chain) -> bool {
    let Some(h) = &c.hook else { return false };
    match c.family {
        Family::Netdev => h.hook == Hook::Ingress,
        Family::Ipv4 | Family::Ipv6 | Family::Inet => matches!(
            h.hook,
            Hook::Ingress | Hook::Prerouting | Hook::Input | Hook::Forward
        ),
        _ => false,
    }
}

/// One table's sets and rules.
type TableListing = (Vec<Set>, Vec<Rule>);

impl NfSocket {
    /// Lists tables, chains, sets and rules so that the parts agree with each other.
    ///
    /// First whole, within one generation: a listing interrupted (`NLM_F_DUMP_INTR`) or whose
    /// generation moved is tried again after a jittered backoff (1 ms doubling to 50 ms). After
    /// [`WHOLE_TRIES`] such tries, and for [`BY_TABLE_FOR`] after, by table: every table and
    /// chain, then the sets and rules of each table with a chain on the way of incoming packets,
    /// each taken when the watched events say no transaction touched it from just before its
    /// listing until the end of the whole reading (a table touched since is listed again);
    /// tables off that way are not read and are named in [`Ruleset::unread`]. Either way it gives up at the socket's
    /// [deadline](NfSocket::set_deadline), naming what would not hold still, the tries and the
    /// time spent.
    pub fn ruleset(&mut self, family: Option<Family>) -> Result<Ruleset> {
        let mut backoff = Backoff::new(self.deadline);
        let by_table = self.by_table_until.is_some_and(|t| Instant::now() < t);
        if !by_table {
            loop {
                if let Some(rs) = self.whole_once(family)? {
                    // Quiet again: no events are kept in the kernel's buffer for nothing.
                    self.by_table_until = None;
                    self.watch = None;
                    self.last_listing = (backoff.tries(), false);
                    return Ok(rs);
                }
                if !backoff.wait() {
                    return Err(Error::Interrupted {
                        what: Self::what("the ruleset", family),
                        tries: backoff.tries(),
                        millis: backoff.millis(),
                    });
                }
                if backoff.tries() >= WHOLE_TRIES {
                    break;
                }
            }
        }
        self.by_table_until = Some(Instant::now() + BY_TABLE_FOR);
        let rs = self.by_table(family, &mut backoff)?;
        self.last_listing = (backoff.tries(), true);
        Ok(rs)
    }

    /// Lists the whole ruleset within one generation, every table's sets and rules included,
    /// never by table: for what saves a ruleset to put it back (the flip). Retries with backoff
    /// until the socket's deadline like [`NfSocket::ruleset`].
    pub fn ruleset_complete(&mut self, family: Option<Family>) -> Result<Ruleset> {
        let mut backoff = Backoff::new(self.deadline);
        loop {
            if let Some(rs) = self.whole_once(family)? {
                return Ok(rs);
            }
            if !backoff.wait() {
                return Err(Error::Interrupted {
                    what: Self::what("the whole ruleset", family),
                    tries: backoff.tries(),
                    millis: backoff.millis(),
                });
            }
        }
    }

    /// One dump of every object of a kind (of `family`, or all), and whether the kernel flagged
    /// it interrupted.
    fn dump_all<T>(
        &mut self,
        get: u8,
        family: Option<Family>,
        kind: &str,
        decode: fn(&NlMsg<'_>) -> T,
    ) -> Result<(Vec<T>, bool)> {
        self.dump_once(get, family, &|_| {}, &Self::what(kind, family), decode)
    }

    /// One whole listing, or `None` if it was interrupted or the generation moved.
    fn whole_once(&mut self, family: Option<Family>) -> Result<Option<Ruleset>> {
        let generation = self.generation()?;
        let Some((tables, chains)) = self.frame_once(family)? else {
            return Ok(None);
        };
        let (sets, i) = self.dump_all(NFT_MSG_GETSET, family, "sets", list::decode_set)?;
        if i {
            return Ok(None);
        }
        let (rules, i) = self.dump_all(NFT_MSG_GETRULE, family, "rules", list::decode_rule)?;
        if i || self.generation()? != generation {
            return Ok(None);
        }
        Ok(Some(Ruleset {
            generation,
            tables,
            chains,
            rules,
            sets,
            family,
            unread: Vec::new(),
        }))
    }

    /// Tables and chains listed once, or `None` if either dump was interrupted.
    fn frame_once(&mut self, family: Option<Family>) -> Result<Option<(Vec<Table>, Vec<Chain>)>> {
        let (tables, i) = self.dump_all(NFT_MSG_GETTABLE, family, "tables", list::decode_table)?;
        if i {
            return Ok(None);
        }
        let (chains, i) = self.dump_all(NFT_MSG_GETCHAIN, family, "chains", list::decode_chain)?;
        Ok((!i).then_some((tables, chains)))
    }

    /// One table's sets and rules listed once, and whether that listing was interrupted.
    fn table_once(&mut self, family: Family, table: &str) -> Result<(TableListing, bool)> {
        let (sets, si) = self.dump_once(
            NFT_MSG_GETSET,
            Some(family),
            &|b: &mut Vec<u8>| attr::put_str(b, NFTA_SET_TABLE, table),
            &format!("sets of table {family} {table}"),
            list::decode_set,
        )?;
        let (rules, ri) = self.dump_once(
            NFT_MSG_GETRULE,
            Some(family),
            &|b: &mut Vec<u8>| attr::put_str(b, NFTA_RULE_TABLE, table),
            &format!("rules of table {family} {table}"),
            list::decode_rule,
        )?;
        Ok(((sets, rules), si || ri))
    }

    /// The tables whose sets and rules a verdict reads: those with a chain on the way.
    fn wanted(chains: &[Chain]) -> Vec<(Family, String)> {
        let mut out: Vec<(Family, String)> = Vec::new();
        for c in chains.iter().filter(|c| on_the_way(c)) {
            if !out.iter().any(|(f, t)| *f == c.family && *t == c.table) {
                out.push((c.family, c.table.clone()));
            }
        }
        out
    }

    /// The watch, subscribed now if it was not.
    fn watch(&mut self) -> Result<&mut Watch> {
        if self.watch.is_none() {
            let mut w = Watch::open()?;
            w.start_at(self.generation()?);
            self.watch = Some(w);
        }
        Ok(self.watch.as_mut().expect("opened above"))
    }

    /// Whether no transaction from `from` to now touched `table` (`None`: the tables and
    /// chains themselves), with the generation read now; a watch that lost events is dropped.
    fn untouched(&mut self, from: u32, table: Option<(Family, &str)>) -> Result<Option<u32>> {
        let now = self.generation()?;
        let w = self.watch()?;
        if !w.caught_up(now)? {
            self.watch = None;
            return Ok(None);
        }
        Ok((!w.touched(from, now, table)).then_some(now))
    }

    /// One table listed, and the generation it must be vouched for from, when no transaction
    /// during the listing touched it (other tables may have changed); `None` otherwise.
    fn table_vouched(
        &mut self,
        family: Family,
        table: &str,
    ) -> Result<Option<(u32, TableListing)>> {
        let g = self.generation()?;
        let from = self.watch()?.from(g)?;
        let (listing, _) = self.table_once(family, table)?;
        Ok(self
            .untouched(from, Some((family, table)))?
            .map(|_| (from, listing)))
    }

    /// The ruleset read by table (see [`NfSocket::ruleset`]).
    fn by_table(&mut self, family: Option<Family>, backoff: &mut Backoff) -> Result<Ruleset> {
        'again: loop {
            let g = self.generation()?;
            let from = self.watch()?.from(g)?;
            // An interrupted flag here may be another table's commit: the watch decides.
            let (tables, _) =
                self.dump_all(NFT_MSG_GETTABLE, family, "tables", list::decode_table)?;
            let (chains, _) =
                self.dump_all(NFT_MSG_GETCHAIN, family, "chains", list::decode_chain)?;
            if self.untouched(from, None)?.is_none() {
                if !backoff.wait() {
                    return Err(Error::Interrupted {
                        what: Self::what("tables and chains", family),
                        tries: backoff.tries(),
                        millis: backoff.millis(),
                    });
                }
                continue;
            }
            let wanted = Self::wanted(&chains);
            // (family, table, vouched from, listing), in the kernel's order of tables.
            let mut read: Vec<(Family, String, u32, TableListing)> = Vec::new();
            // Tables off the way of incoming packets are not read: no verdict goes through them.
            let unread: Vec<(Family, String)> = tables
                .iter()
                .map(|t| (t.family, t.name.clone()))
                .filter(|k| !wanted.contains(k))
                .collect();
            let mut todo = wanted.clone();
            loop {
                for (f, t) in std::mem::take(&mut todo) {
                    loop {
                        if let Some((since, listing)) = self.table_vouched(f, &t)? {
                            read.retain(|(rf, rt, _, _)| !(*rf == f && *rt == t));
                            read.push((f, t, since, listing));
                            break;
                        }
                        if !backoff.wait() {
                            return Err(Error::Interrupted {
                                what: format!("table {f} {t}"),
                                tries: backoff.tries(),
                                millis: backoff.millis(),
                            });
                        }
                    }
                }
                // Everything read must still hold now: tables and chains, and each table since
                // its own listing; a table changed since is listed again.
                let Some(now) = self.untouched(from, None)? else {
                    if !backoff.wait() {
                        return Err(Error::Interrupted {
                            what: Self::what("tables and chains", family),
                            tries: backoff.tries(),
                            millis: backoff.millis(),
                        });
                    }
                    continue 'again;
                };
                let w = self.watch()?;
                todo = read
                    .iter()
                    .filter(|(f, t, since, _)| w.touched(*since, now, Some((*f, t))))
                    .map(|(f, t, _, _)| (*f, t.clone()))
                    .collect();
                if todo.is_empty() {
                    let order = |f: Family, t: &str| {
                        tables
                            .iter()
                            .position(|x| x.family == f && x.name == t)
                            .unwrap_or(usize::MAX)
                    };
                    read.sort_by_key(|(f, t, _, _)| order(*f, t));
                    let (mut sets, mut rules) = (Vec::new(), Vec::new());
                    for (_, _, _, (s, r)) in read {
                        sets.extend(s);
                        rules.extend(r);
                    }
                    w.forget_before(from);
                    return Ok(Ruleset {
                        generation: now,
                        tables,
                        chains,
                        rules,
                        sets,
                        family,
                        unread,
                    });
                }
            }
        }
    }

    /// Whether everything `listed` read (its tables and chains, and the sets and rules of every
    /// table it did not name unread) is still as listed: `Some` with the generation now, so a
    /// batch conditional on it commits only if nothing changed since; `None` if a transaction
    /// since touched any of it, or when the listing was whole and no watch vouches for the time
    /// since.
    pub fn still_as(&mut self, listed: &Ruleset) -> Result<Option<u32>> {
        self.untouched_since(listed, None)
    }

    /// Whether, since `listed` was read, no transaction but those committed by thread `mine`
    /// touched a table it read or the tables and chains themselves: what vouches, after the
    /// fact, for a batch sent without its generation (see `Firewall::converge`).
    pub fn only_mine_since(&mut self, listed: &Ruleset, mine: u32) -> Result<bool> {
        Ok(self.untouched_since(listed, Some(mine))?.is_some())
    }

    /// The generation now, if no transaction since `listed` (but those of thread `mine`, when
    /// given) touched what it read, as the watch saw; `None` otherwise or with no watch.
    fn untouched_since(&mut self, listed: &Ruleset, mine: Option<u32>) -> Result<Option<u32>> {
        if !self
            .watch
            .as_ref()
            .is_some_and(|w| w.covers(listed.generation))
        {
            return Ok(None);
        }
        let from = listed.generation.wrapping_add(1);
        let now = self.generation()?;
        let w = self.watch()?;
        if !w.caught_up(now)? {
            self.watch = None;
            return Ok(None);
        }
        let changed = w.touched_by_other(from, now, None, mine)
            || listed
                .tables
                .iter()
                .filter(|t| {
                    !listed
                        .unread
                        .iter()
                        .any(|(f, n)| *f == t.family && *n == t.name)
                })
                .any(|t| w.touched_by_other(from, now, Some((t.family, &t.name)), mine));
        Ok((!changed).then_some(now))
    }
}
