//! The netlink socket: `NfSocket` is kept by its caller, so tables it owns live as long as it does;
//! it sends whole batches in one datagram and reads the kernel's answers itself: a refusal of any
//! message, and the acknowledgement of the last, which only that message asks for.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use super::attr;
use super::backoff::{Backoff, DEFAULT_DEADLINE};
use super::batch::Batch;
use super::consts::*;
use super::list::{self, Chain, Elem, Rule, Set, Table};
use super::msg::{self, NlMsg};
use super::types::{Family, TableFlags};
use crate::error::{Errno, Error, Result};

/// The buffer sizes asked for at open: big enough for a few thousand rules and their answers.
const INITIAL_SNDBUF: usize = 4 << 20;
const INITIAL_RCVBUF: usize = 4 << 20;
/// Room per answer in the receive buffer (a refusal of every message of a batch fits); each is
/// its own skb, counted by truesize.
const RCVBUF_PER_ACK: usize = 1024;
/// One datagram from the kernel: dumps send at most ~32 KiB, events and ACKs far less.
const RECV_BUF: usize = 256 << 10;
/// How long to wait for a kernel answer that should already be queued.
pub(super) const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a receive may wait.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Wait {
    No,
    For(Duration),
}

/// A raw NETLINK_NETFILTER socket with its receive buffer.
#[derive(Debug)]
pub(crate) struct NlFd {
    fd: OwnedFd,
    portid: u32,
    sndbuf: usize,
    rcvbuf: usize,
    buf: Vec<u8>,
}

fn setsockopt_int(fd: RawFd, level: i32, opt: i32, value: i32) -> std::result::Result<(), Errno> {
    // SAFETY: `value` lives across the call and its exact size is passed.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            (&value as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(Errno::last())
    }
}

fn kernel_addr() -> libc::sockaddr_nl {
    // SAFETY: sockaddr_nl is plain data; all-zero is a valid value (pid 0 = the kernel).
    let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    addr
}

impl NlFd {
    /// Opens, binds (the kernel picks the port id) and sets the acknowledgement options.
    pub(crate) fn open() -> Result<NlFd> {
        // SAFETY: a plain socket(2) call; the result is checked before use.
        let raw = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                NETLINK_NETFILTER,
            )
        };
        if raw < 0 {
            return Err(Error::Socket {
                op: "open",
                errno: Errno::last(),
            });
        }
        // SAFETY: `raw` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let addr = kernel_addr();
        // SAFETY: `addr` is a valid sockaddr_nl and its size is passed.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(Error::Socket {
                op: "bind",
                errno: Errno::last(),
            });
        }
        let mut bound = kernel_addr();
        let mut len = std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t;
        // SAFETY: `bound` and `len` are valid for writing and describe the same object.
        let rc = unsafe {
            libc::getsockname(
                fd.as_raw_fd(),
                (&mut bound as *mut libc::sockaddr_nl).cast(),
                &mut len,
            )
        };
        if rc < 0 {
            return Err(Error::Socket {
                op: "getsockname",
                errno: Errno::last(),
            });
        }
        // CAP_ACK keeps each ACK to 36 bytes instead of echoing the request; EXT_ACK brings the
        // kernel's reason text along with an error.
        for (opt, name) in [
            (NETLINK_CAP_ACK, "set NETLINK_CAP_ACK"),
            (NETLINK_EXT_ACK, "set NETLINK_EXT_ACK"),
        ] {
            setsockopt_int(fd.as_raw_fd(), SOL_NETLINK, opt, 1)
                .map_err(|errno| Error::Socket { op: name, errno })?;
        }
        let mut nl = NlFd {
            fd,
            portid: bound.nl_pid,
            sndbuf: 0,
            rcvbuf: 0,
            buf: vec![0; RECV_BUF],
        };
        nl.ensure_buffers(INITIAL_SNDBUF, INITIAL_RCVBUF)?;
        Ok(nl)
    }

    pub(crate) fn portid(&self) -> u32 {
        self.portid
    }

    /// Grows the socket buffers to at least these sizes; the FORCE options pass the system
    /// limits (root), the plain ones are the fallback when not permitted.
    pub(crate) fn ensure_buffers(&mut self, snd: usize, rcv: usize) -> Result<()> {
        let fd = self.fd.as_raw_fd();
        for (want, have, force, plain, op) in [
            (
                snd,
                &mut self.sndbuf,
                libc::SO_SNDBUFFORCE,
                libc::SO_SNDBUF,
                "set send buffer size",
            ),
            (
                rcv,
                &mut self.rcvbuf,
                libc::SO_RCVBUFFORCE,
                libc::SO_RCVBUF,
                "set receive buffer size",
            ),
        ] {
            if want <= *have {
                continue;
            }
            let value = want.min(i32::MAX as usize / 2) as i32;
            setsockopt_int(fd, libc::SOL_SOCKET, force, value)
                .or_else(|_| setsockopt_int(fd, libc::SOL_SOCKET, plain, value))
                .map_err(|errno| Error::Socket { op, errno })?;
            *have = want;
        }
        Ok(())
    }

    pub(crate) fn join_group(&self, group: u32) -> Result<()> {
        setsockopt_int(
            self.fd.as_raw_fd(),
            SOL_NETLINK,
            NETLINK_ADD_MEMBERSHIP,
            group as i32,
        )
        .map_err(|errno| Error::Socket {
            op: "join multicast group",
            errno,
        })
    }

    /// Sends one datagram to the kernel.
    pub(crate) fn send(&self, bytes: &[u8]) -> Result<()> {
        let addr = kernel_addr();
        loop {
            // SAFETY: `bytes` and `addr` are valid for the given lengths during the call.
            let rc = unsafe {
                libc::sendto(
                    self.fd.as_raw_fd(),
                    bytes.as_ptr().cast(),
                    bytes.len(),
                    0,
                    (&addr as *const libc::sockaddr_nl).cast(),
                    std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
                )
            };
            if rc >= 0 {
                return Ok(());
            }
            let errno = Errno::last();
            if errno.0 != libc::EINTR {
                return Err(Error::Socket { op: "send", errno });
            }
        }
    }

    /// Receives one datagram into the internal buffer and returns it, or `None` when nothing
    /// arrived in time.
    pub(crate) fn recv(&mut self, wait: Wait) -> Result<Option<&[u8]>> {
        if let Wait::For(d) = wait {
            let mut pfd = libc::pollfd {
                fd: self.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = d.as_millis().min(i32::MAX as u128) as i32;
            loop {
                // SAFETY: one valid pollfd is passed with count 1.
                let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
                if rc > 0 {
                    break;
                }
                if rc == 0 {
                    return Ok(None);
                }
                let errno = Errno::last();
                if errno.0 != libc::EINTR {
                    return Err(Error::Socket { op: "poll", errno });
                }
            }
        }
        loop {
            // SAFETY: the buffer is valid for writing `len` bytes; MSG_TRUNC makes the return
            // value the datagram's real length so truncation is detected.
            let rc = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    self.buf.as_mut_ptr().cast(),
                    self.buf.len(),
                    libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                )
            };
            if rc >= 0 {
                let n = rc as usize;
                if n > self.buf.len() {
                    return Err(Error::Malformed {
                        what: "a netlink datagram".into(),
                        reason: format!("{n} bytes do not fit the {} byte buffer", self.buf.len()),
                    });
                }
                return Ok(Some(&self.buf[..n]));
            }
            let errno = Errno::last();
            match errno.0 {
                libc::EINTR => continue,
                libc::EAGAIN => return Ok(None),
                _ => {
                    return Err(Error::Socket {
                        op: "receive",
                        errno,
                    })
                }
            }
        }
    }
}

impl AsRawFd for NlFd {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// What [`NfSocket::claim_table`] found and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// No such table existed; it was created owned by this socket.
    Created,
    /// The table was an orphan (persist, no owner); this socket owns it now.
    Reclaimed,
    /// This socket already owned it; nothing was sent.
    AlreadyOwned,
}

/// A NETLINK_NETFILTER socket for nf_tables, kept open by its caller.
///
/// Tables created with [`TableFlags::OWNER`] through it belong to it: other processes cannot
/// change them, `nft flush ruleset` skips them, and they go (or with PERSIST, become orphans)
/// when it is dropped.
#[derive(Debug)]
pub struct NfSocket {
    nl: NlFd,
    seq: u32,
    /// How long a listing retries while the ruleset keeps changing under it.
    pub(super) deadline: Duration,
    /// Until when listings go straight to [`NfSocket::ruleset`]'s reading by table, because the
    /// whole ruleset would not hold still for the last one.
    pub(super) by_table_until: Option<std::time::Instant>,
    /// How the last [`NfSocket::ruleset`] went: (tries that failed before it, read by table).
    pub(super) last_listing: (u32, bool),
    /// The events watched since the ruleset would not hold still, opened then.
    pub(super) watch: Option<super::watch::Watch>,
}

impl NfSocket {
    /// Opens a socket in the calling thread's network namespace.
    pub fn open() -> Result<NfSocket> {
        let nl = NlFd::open()?;
        // Start sequence numbers away from zero and from other sockets' so a stray answer is
        // never taken for ours.
        let seq = (std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as u32)
            .unwrap_or(1))
        .wrapping_mul(7919)
            | 1;
        Ok(NfSocket {
            nl,
            seq,
            deadline: DEFAULT_DEADLINE,
            by_table_until: None,
            last_listing: (0, false),
            watch: None,
        })
    }

    /// Sets how long a listing keeps retrying, with backoff, while the ruleset changes under
    /// it (by default [`DEFAULT_DEADLINE`]).
    pub fn set_deadline(&mut self, deadline: Duration) {
        self.deadline = deadline;
    }

    /// How long a listing keeps retrying while the ruleset changes under it.
    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    /// How the last whole-ruleset listing went: how many of its tries failed before the one
    /// that held, and whether it was read by table.
    pub fn last_listing(&self) -> (u32, bool) {
        self.last_listing
    }

    /// The netlink port id the kernel gave this socket; owned tables report it as their owner.
    pub fn portid(&self) -> u32 {
        self.nl.portid()
    }

    pub(super) fn take_seq(&mut self, n: usize) -> u32 {
        let first = self.seq;
        self.seq = self.seq.wrapping_add(n as u32).max(1);
        first
    }

    /// The raw socket, for the other netfilter subsystems read over it (ipset).
    pub(super) fn nl_mut(&mut self) -> &mut NlFd {
        &mut self.nl
    }

    /// Sends the batch as one atomic transaction and reads the kernel's answers to it, up to the
    /// acknowledgement of its last message; the first refusal is returned, naming the message it
    /// belonged to (the kernel then applied nothing).
    pub fn send(&mut self, batch: &Batch) -> Result<()> {
        let n = batch.len();
        if n == 0 {
            return Ok(());
        }
        let first = self.take_seq(n + 2);
        let bytes = batch.encode(first);
        // Room for a refusal of every message: each comes back even though only the last message
        // asks for an acknowledgement.
        self.nl
            .ensure_buffers(bytes.len() + (64 << 10), n * RCVBUF_PER_ACK + (256 << 10))?;
        self.nl.send(&bytes)?;

        let mut last_answered = false;
        let mut refusal: Option<Error> = None;
        while !last_answered {
            // The kernel processes the batch inside sendmsg, so the answers are already queued;
            // the wait is only a guard against a lost one.
            let data = match self.nl.recv(Wait::No)? {
                Some(d) => d,
                // A batch the kernel stopped early (out of memory, a malformed message) answers
                // with its refusal alone.
                None if refusal.is_some() => break,
                None => match self.nl.recv(Wait::For(ANSWER_TIMEOUT))? {
                    Some(d) => d,
                    None => break,
                },
            };
            let msgs = msg::split(data).map_err(|reason| Error::Malformed {
                what: "batch acknowledgements".into(),
                reason: reason.to_string(),
            })?;
            for m in msgs.iter().filter(|m| m.ty == NLMSG_ERROR) {
                let ack = msg::parse_ack(m).map_err(|reason| Error::Malformed {
                    what: "batch acknowledgements".into(),
                    reason: reason.to_string(),
                })?;
                let idx = ack.seq.wrapping_sub(first) as usize;
                if idx > n + 1 {
                    continue; // an answer to some earlier request
                }
                if idx == n {
                    last_answered = true;
                }
                if ack.errno != 0 && refusal.is_none() {
                    // An error against a batch marker refuses the whole batch.
                    let what = if idx == 0 || idx == n + 1 {
                        format!("a batch of {n} messages")
                    } else {
                        batch.describe(idx - 1).unwrap_or("?").to_string()
                    };
                    refusal = Some(Error::Refused {
                        what,
                        seq: ack.seq,
                        errno: Errno(ack.errno),
                        detail: ack.message,
                    });
                }
            }
        }
        if let Some(e) = refusal {
            return Err(e);
        }
        if !last_answered {
            return Err(Error::AcksMissing {
                messages: n,
                last: batch.describe(n - 1).unwrap_or("?").to_string(),
            });
        }
        Ok(())
    }

    /// Dumps one kind of object, retrying with backoff (up to the socket's deadline) while the
    /// kernel flags the dump as interrupted.
    fn dump<T>(
        &mut self,
        get: u8,
        family: Option<Family>,
        filter: &dyn Fn(&mut Vec<u8>),
        what: &str,
        decode: fn(&NlMsg<'_>) -> T,
    ) -> Result<Vec<T>> {
        let mut backoff = Backoff::new(self.deadline);
        loop {
            let (out, interrupted) = self.dump_once(get, family, filter, what, decode)?;
            if !interrupted {
                return Ok(out);
            }
            if !backoff.wait() {
                return Err(Error::Interrupted {
                    what: what.to_string(),
                    tries: backoff.tries(),
                    millis: backoff.millis(),
                });
            }
        }
    }

    /// Dumps one kind of object once: what the kernel sent, and whether it flagged the dump as
    /// interrupted (a commit anywhere in the namespace between two of its parts).
    pub(super) fn dump_once<T>(
        &mut self,
        get: u8,
        family: Option<Family>,
        filter: &dyn Fn(&mut Vec<u8>),
        what: &str,
        decode: fn(&NlMsg<'_>) -> T,
    ) -> Result<(Vec<T>, bool)> {
        let reply = get - 1; // GETx is answered with NEWx
        let seq = self.take_seq(1);
        let mut req = Vec::with_capacity(64);
        let fam = family.map(Family::to_raw).unwrap_or(0);
        let start = msg::begin(
            &mut req,
            msg::nft_type(get),
            NLM_F_REQUEST | NLM_F_DUMP,
            seq,
            fam,
            0,
        );
        filter(&mut req);
        msg::end(&mut req, start);
        self.nl.send(&req)?;

        let mut out = Vec::new();
        let interrupted = self.read_dump(seq, what, "listing", |m| {
            if m.nft_msg() == Some(reply) {
                out.push(decode(m));
            }
            Ok(())
        })?;
        Ok((out, interrupted))
    }

    /// Reads the kernel's answer to the dump request sent as `seq` to its end (`NLMSG_DONE`, or
    /// an error or acknowledgement), handing each other message of that sequence to `each`,
    /// which keeps what it wants of it within its own bounds (and may fail the read); returns
    /// whether the kernel flagged the dump as interrupted. `what` names the listing in errors,
    /// `waited` in the error of an answer that did not come within [`ANSWER_TIMEOUT`]. The one
    /// dump reader of nf_tables' listings and ipset's.
    pub(super) fn read_dump(
        &mut self,
        seq: u32,
        what: &str,
        waited: &'static str,
        mut each: impl FnMut(&NlMsg<'_>) -> Result<()>,
    ) -> Result<bool> {
        let mut interrupted = false;
        loop {
            let data = self
                .nl
                .recv(Wait::For(ANSWER_TIMEOUT))?
                .ok_or(Error::Timeout {
                    what: waited,
                    millis: ANSWER_TIMEOUT.as_millis(),
                })?;
            let msgs = msg::split(data).map_err(|reason| Error::Malformed {
                what: what.to_string(),
                reason: reason.to_string(),
            })?;
            for m in msgs.iter().filter(|m| m.seq == seq) {
                if m.flags & NLM_F_DUMP_INTR != 0 {
                    interrupted = true;
                }
                match m.ty {
                    NLMSG_DONE => {
                        let err = m
                            .payload
                            .get(..4)
                            .and_then(|b| b.try_into().ok())
                            .map(i32::from_ne_bytes)
                            .unwrap_or(0);
                        if err < 0 {
                            return Err(Error::ListRefused {
                                what: what.to_string(),
                                errno: Errno(err.checked_neg().unwrap_or(i32::MAX)),
                                detail: None,
                            });
                        }
                        return Ok(interrupted);
                    }
                    NLMSG_ERROR => {
                        let ack = msg::parse_ack(m).map_err(|reason| Error::Malformed {
                            what: what.to_string(),
                            reason: reason.to_string(),
                        })?;
                        if ack.errno != 0 {
                            return Err(Error::ListRefused {
                                what: what.to_string(),
                                errno: Errno(ack.errno),
                                detail: ack.message,
                            });
                        }
                        return Ok(interrupted);
                    }
                    _ => each(m)?,
                }
            }
        }
    }

    pub(super) fn what(kind: &str, family: Option<Family>) -> String {
        match family {
            Some(f) => format!("{kind} of family {f}"),
            None => format!("{kind} of all families"),
        }
    }

    /// Lists tables of one family, or of all when `None`; each carries its own family.
    pub fn tables(&mut self, family: Option<Family>) -> Result<Vec<Table>> {
        let what = Self::what("tables", family);
        self.dump(NFT_MSG_GETTABLE, family, &|_| {}, &what, list::decode_table)
    }

    /// Lists chains of one family, or of all when `None`.
    pub fn chains(&mut self, family: Option<Family>) -> Result<Vec<Chain>> {
        let what = Self::what("chains", family);
        self.dump(NFT_MSG_GETCHAIN, family, &|_| {}, &what, list::decode_chain)
    }

    /// Lists rules of one family, or of all when `None`.
    pub fn rules(&mut self, family: Option<Family>) -> Result<Vec<Rule>> {
        let what = Self::what("rules", family);
        self.dump(NFT_MSG_GETRULE, family, &|_| {}, &what, list::decode_rule)
    }

    /// Lists the rules of one table, or of one chain in it, in the kernel's order.
    pub fn rules_of(
        &mut self,
        family: Family,
        table: &str,
        chain: Option<&str>,
    ) -> Result<Vec<Rule>> {
        let what = match chain {
            Some(c) => format!("rules of chain {family} {table} {c}"),
            None => format!("rules of table {family} {table}"),
        };
        let filter = |b: &mut Vec<u8>| {
            attr::put_str(b, NFTA_RULE_TABLE, table);
            if let Some(c) = chain {
                attr::put_str(b, NFTA_RULE_CHAIN, c);
            }
        };
        self.dump(
            NFT_MSG_GETRULE,
            Some(family),
            &filter,
            &what,
            list::decode_rule,
        )
    }

    /// Lists sets (without elements) of one family, or of all when `None`.
    pub fn sets(&mut self, family: Option<Family>) -> Result<Vec<Set>> {
        let what = Self::what("sets", family);
        self.dump(NFT_MSG_GETSET, family, &|_| {}, &what, list::decode_set)
    }

    /// Lists the elements of one set or map (named or anonymous), in the kernel's order.
    pub fn set_elements(&mut self, family: Family, table: &str, set: &str) -> Result<Vec<Elem>> {
        let what = format!("elements of set {family} {table} {set}");
        let filter = |b: &mut Vec<u8>| {
            attr::put_str(b, NFTA_SET_ELEM_LIST_TABLE, table);
            attr::put_str(b, NFTA_SET_ELEM_LIST_SET, set);
        };
        let lists = self.dump(
            NFT_MSG_GETSETELEM,
            Some(family),
            &filter,
            &what,
            list::decode_elems,
        )?;
        Ok(lists.into_iter().flatten().collect())
    }

    /// The current ruleset generation; it changes with every committed batch.
    pub fn generation(&mut self) -> Result<u32> {
        let seq = self.take_seq(1);
        let req = msg::request(NFT_MSG_GETGEN, NLM_F_ACK, seq, None);
        self.nl.send(&req)?;
        let mut gen = None;
        loop {
            let data = self
                .nl
                .recv(Wait::For(ANSWER_TIMEOUT))?
                .ok_or(Error::Timeout {
                    what: "reading the ruleset generation",
                    millis: ANSWER_TIMEOUT.as_millis(),
                })?;
            let msgs = msg::split(data).map_err(|reason| Error::Malformed {
                what: "the ruleset generation".into(),
                reason: reason.to_string(),
            })?;
            for m in msgs.iter().filter(|m| m.seq == seq) {
                if m.ty == NLMSG_ERROR {
                    let ack = msg::parse_ack(m).map_err(|reason| Error::Malformed {
                        what: "the ruleset generation".into(),
                        reason: reason.to_string(),
                    })?;
                    if ack.errno != 0 {
                        return Err(Error::ListRefused {
                            what: "the ruleset generation".into(),
                            errno: Errno(ack.errno),
                            detail: ack.message,
                        });
                    }
                    return gen.ok_or_else(|| Error::Malformed {
                        what: "the ruleset generation".into(),
                        reason: "acknowledged without a generation".into(),
                    });
                }
                if m.nft_msg() == Some(NFT_MSG_NEWGEN) {
                    gen = m
                        .attrs()
                        .find(|a| a.ty == NFTA_GEN_ID)
                        .and_then(|a| a.be32());
                }
            }
        }
    }

    /// Makes this socket the owner of a persistent table: creates it, reclaims it if it is an
    /// orphan, or leaves it if already ours. A table owned by another live socket is refused,
    /// and a plain (never persistent) table cannot be claimed (the kernel says EOPNOTSUPP).
    pub fn claim_table(&mut self, family: Family, name: &str) -> Result<Claim> {
        let existing = self
            .tables(Some(family))?
            .into_iter()
            .find(|t| t.name == name);
        let outcome = match existing {
            None => Claim::Created,
            Some(t) if t.is_owned() && t.owner == Some(self.portid()) => {
                return Ok(Claim::AlreadyOwned)
            }
            Some(t) if t.is_owned() => {
                return Err(Error::TableOwned {
                    family,
                    table: name.to_string(),
                    owner: t.owner.unwrap_or(0),
                })
            }
            Some(_) => Claim::Reclaimed,
        };
        let mut batch = Batch::new();
        batch.add_table(family, name, TableFlags::OWNER | TableFlags::PERSIST)?;
        self.send(&batch)?;
        Ok(outcome)
    }
}

impl AsRawFd for NfSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.nl.as_raw_fd()
    }
}

impl AsFd for NfSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.nl.fd.as_fd()
    }
}
