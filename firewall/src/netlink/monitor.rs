//! `NfMonitor`: listens to the nf_tables multicast group and yields decoded ruleset events, so
//! the resident host notices when something else reloads the firewall.

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use super::consts::*;
use super::list::{self, Chain, Rule, Set, Table};
use super::msg;
use super::socket::{NlFd, Wait};
use super::types::Family;
use crate::error::{Error, Result};

/// The end of a committed transaction: one NEWGEN follows the changes of each batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generation {
    pub id: u32,
    /// The process that committed it.
    pub pid: Option<u32>,
    /// That process's name (its comm, at most 15 bytes), e.g. `nft` or `iptables-nft`.
    pub process: Option<String>,
}

/// One change to the ruleset as announced by the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    NewTable(Table),
    DelTable(Table),
    NewChain(Chain),
    DelChain(Chain),
    NewRule(Rule),
    DelRule(Rule),
    NewSet(Set),
    DelSet(Set),
    NewGen(Generation),
    /// Any other nf_tables event (set elements, objects, flowtables), with the table it names
    /// (their table attribute is the first of each message kind).
    Other {
        msg_type: u8,
        family: Family,
        table: Option<String>,
    },
    /// The receive buffer overflowed and events were lost; list the ruleset again.
    Lost,
}

/// A socket subscribed to NFNLGRP_NFTABLES in the calling thread's network namespace.
#[derive(Debug)]
pub struct NfMonitor {
    nl: NlFd,
    queue: VecDeque<Event>,
}

/// A large buffer, since a reload by another tool announces every rule it loads.
const MONITOR_RCVBUF: usize = 16 << 20;

impl NfMonitor {
    pub fn open() -> Result<NfMonitor> {
        let mut nl = NlFd::open()?;
        nl.ensure_buffers(0, MONITOR_RCVBUF)?;
        nl.join_group(NFNLGRP_NFTABLES)?;
        Ok(NfMonitor {
            nl,
            queue: VecDeque::new(),
        })
    }

    /// The next event; waits at most `timeout` (forever when `None`) and returns `Ok(None)` when
    /// nothing came.
    pub fn next_event(&mut self, timeout: Option<Duration>) -> Result<Option<Event>> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            if let Some(e) = self.queue.pop_front() {
                return Ok(Some(e));
            }
            let wait = match deadline {
                Some(d) => Wait::For(d.saturating_duration_since(Instant::now())),
                // Wake up now and then, which costs nothing and survives a missed wakeup.
                None => Wait::For(Duration::from_secs(3600)),
            };
            let data = match self.nl.recv(wait) {
                Ok(Some(d)) => d,
                Ok(None) => {
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return Ok(None);
                    }
                    continue;
                }
                Err(Error::Socket { errno, .. }) if errno.0 == libc::ENOBUFS => {
                    return Ok(Some(Event::Lost));
                }
                Err(e) => return Err(e),
            };
            let msgs = msg::split(data).map_err(|reason| Error::Malformed {
                what: "nf_tables events".into(),
                reason: reason.to_string(),
            })?;
            for m in &msgs {
                let Some(kind) = m.nft_msg() else { continue };
                let event = match kind {
                    NFT_MSG_NEWTABLE => Event::NewTable(list::decode_table(m)),
                    NFT_MSG_DELTABLE => Event::DelTable(list::decode_table(m)),
                    NFT_MSG_NEWCHAIN => Event::NewChain(list::decode_chain(m)),
                    NFT_MSG_DELCHAIN => Event::DelChain(list::decode_chain(m)),
                    NFT_MSG_NEWRULE => Event::NewRule(list::decode_rule(m)),
                    NFT_MSG_DELRULE => Event::DelRule(list::decode_rule(m)),
                    NFT_MSG_NEWSET => Event::NewSet(list::decode_set(m)),
                    NFT_MSG_DELSET => Event::DelSet(list::decode_set(m)),
                    NFT_MSG_NEWGEN => Event::NewGen(generation(m)),
                    other => Event::Other {
                        msg_type: other,
                        family: m.family(),
                        table: m.attrs().find(|a| a.ty == 1).map(|a| a.string()),
                    },
                };
                self.queue.push_back(event);
            }
        }
    }

    /// Drains what the kernel has queued without waiting, keeping only the end of each
    /// transaction (NEWGEN, with the writing process) and lost events: a reload of thousands of
    /// rules costs one generation here, not thousands of decoded rules. Events already decoded by
    /// [`NfMonitor::next_event`] and queued are drained too.
    pub fn generations(&mut self) -> Result<Vec<Event>> {
        let mut out: Vec<Event> = self
            .queue
            .drain(..)
            .filter(|e| matches!(e, Event::NewGen(_) | Event::Lost))
            .collect();
        loop {
            let data = match self.nl.recv(Wait::No) {
                Ok(Some(d)) => d,
                Ok(None) => return Ok(out),
                Err(Error::Socket { errno, .. }) if errno.0 == libc::ENOBUFS => {
                    out.push(Event::Lost);
                    continue;
                }
                Err(e) => return Err(e),
            };
            let msgs = msg::split(data).map_err(|reason| Error::Malformed {
                what: "nf_tables events".into(),
                reason: reason.to_string(),
            })?;
            for m in msgs.iter().filter(|m| m.nft_msg() == Some(NFT_MSG_NEWGEN)) {
                out.push(Event::NewGen(generation(m)));
            }
        }
    }

    /// Drains what is already queued without waiting.
    pub fn pending(&mut self) -> Result<Vec<Event>> {
        let mut out = Vec::new();
        while let Some(e) = self.next_event(Some(Duration::ZERO))? {
            out.push(e);
        }
        Ok(out)
    }
}

/// A NEWGEN message: the generation and the process whose transaction made it.
fn generation(m: &msg::NlMsg<'_>) -> Generation {
    let mut g = Generation {
        id: 0,
        pid: None,
        process: None,
    };
    for a in m.attrs() {
        match a.ty {
            NFTA_GEN_ID => g.id = a.be32().unwrap_or(0),
            NFTA_GEN_PROC_PID => g.pid = a.be32(),
            NFTA_GEN_PROC_NAME => g.process = Some(a.string()),
            _ => {}
        }
    }
    g
}

impl AsRawFd for NfMonitor {
    fn as_raw_fd(&self) -> RawFd {
        self.nl.as_raw_fd()
    }
}
