//! An atomic nf_tables batch: messages between NFNL_MSG_BATCH_BEGIN and END, each asking for an
//! acknowledgement, each remembered with a description so a refusal names what it refused.

use super::attr;
use super::consts::*;
use super::expr;
use super::msg;
use super::rule::{encode_comment_udata, RuleBody};
use super::types::{ChainType, Family, Hook, Policy, TableFlags};
use crate::error::{Error, Result};

/// The kernel's limit for table, chain and set names, including the NUL.
const NAME_MAX: usize = 256;

/// Where a new rule goes in its chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Position {
    /// At the end of the chain (`nft add rule`).
    Append,
    /// At the head of the chain (`nft insert rule`).
    Prepend,
    /// Just before the rule with this handle.
    Before(u64),
    /// Just after the rule with this handle.
    After(u64),
}

/// What makes a chain a base chain: its type, hook, priority and policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseChain {
    pub chain_type: ChainType,
    pub hook: Hook,
    pub priority: i32,
    pub policy: Policy,
}

impl BaseChain {
    /// A filter chain on a hook with an accepting policy, the guard's shape.
    pub fn filter(hook: Hook, priority: i32) -> BaseChain {
        BaseChain {
            chain_type: ChainType::Filter,
            hook,
            priority,
            policy: Policy::Accept,
        }
    }
}

#[derive(Debug, Clone)]
struct Entry {
    offset: usize,
    what: String,
}

/// A batch of changes applied atomically by [`NfSocket::send`](super::NfSocket::send).
#[derive(Debug, Clone, Default)]
pub struct Batch {
    buf: Vec<u8>,
    entries: Vec<Entry>,
    /// The ruleset generation the batch was computed from, sent as `NFNL_BATCH_GENID`.
    generation: Option<u32>,
}

fn check_name(what: &'static str, name: &str) -> Result<()> {
    let reason = if name.is_empty() {
        "must not be empty"
    } else if name.len() >= NAME_MAX {
        "must be shorter than 256 bytes"
    } else if name.contains('\0') {
        "must not contain NUL"
    } else {
        return Ok(());
    };
    Err(Error::InvalidName {
        what,
        name: name.to_string(),
        reason,
    })
}

impl Batch {
    pub fn new() -> Batch {
        Batch::default()
    }

    /// The number of messages, not counting the batch markers.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Makes the batch conditional on the ruleset generation it was computed from (the
    /// [`Ruleset::generation`](super::Ruleset) of a listing): BEGIN carries `NFNL_BATCH_GENID`,
    /// and if the ruleset has changed since, the kernel applies nothing and answers `ERESTART`.
    /// A handle read from that listing can then never name a rule that took its place.
    pub fn set_generation(&mut self, generation: u32) {
        self.generation = Some(generation);
    }

    /// Makes the batch unconditional again: the kernel applies it to whatever is there. Only for
    /// a batch whose tables are vouched for after it committed
    /// ([`NfSocket::only_mine_since`](super::NfSocket::only_mine_since)).
    pub fn clear_generation(&mut self) {
        self.generation = None;
    }

    /// The generation the batch is conditional on, if any.
    pub fn generation(&self) -> Option<u32> {
        self.generation
    }

    /// The description of the `index`th message, as used in errors.
    pub fn describe(&self, index: usize) -> Option<&str> {
        self.entries.get(index).map(|e| e.what.as_str())
    }

    fn push(&mut self, ty: u8, flags: u16, family: Family, what: String) -> usize {
        let offset = msg::begin(
            &mut self.buf,
            msg::nft_type(ty),
            NLM_F_REQUEST | flags,
            0,
            family.to_raw(),
            0,
        );
        self.entries.push(Entry { offset, what });
        offset
    }

    /// Adds a table, or updates the flags of an existing one (`nft add table`). Sending
    /// OWNER|PERSIST for an orphaned table reclaims it for the sending socket.
    pub fn add_table(&mut self, family: Family, name: &str, flags: TableFlags) -> Result<()> {
        self.table_msg(family, name, flags, 0, "add")
    }

    /// Creates a table, failing with EEXIST if it exists (`nft create table`).
    pub fn create_table(&mut self, family: Family, name: &str, flags: TableFlags) -> Result<()> {
        self.table_msg(family, name, flags, NLM_F_EXCL, "create")
    }

    fn table_msg(
        &mut self,
        family: Family,
        name: &str,
        flags: TableFlags,
        excl: u16,
        verb: &str,
    ) -> Result<()> {
        check_name("table", name)?;
        let what = format!("{verb} table {family} {name}");
        let start = self.push(NFT_MSG_NEWTABLE, NLM_F_CREATE | excl, family, what);
        attr::put_str(&mut self.buf, NFTA_TABLE_NAME, name);
        attr::put_be32(&mut self.buf, NFTA_TABLE_FLAGS, flags.0);
        msg::end(&mut self.buf, start);
        Ok(())
    }

    /// Deletes a table with everything in it.
    pub fn del_table(&mut self, family: Family, name: &str) -> Result<()> {
        check_name("table", name)?;
        let start = self.push(
            NFT_MSG_DELTABLE,
            0,
            family,
            format!("delete table {family} {name}"),
        );
        attr::put_str(&mut self.buf, NFTA_TABLE_NAME, name);
        msg::end(&mut self.buf, start);
        Ok(())
    }

    /// Adds a chain, a base chain when `base` is given; an existing chain is updated.
    pub fn add_chain(
        &mut self,
        family: Family,
        table: &str,
        name: &str,
        base: Option<&BaseChain>,
    ) -> Result<()> {
        check_name("table", table)?;
        check_name("chain", name)?;
        let start = self.push(
            NFT_MSG_NEWCHAIN,
            NLM_F_CREATE,
            family,
            format!("add chain {family} {table} {name}"),
        );
        let b = &mut self.buf;
        attr::put_str(b, NFTA_CHAIN_TABLE, table);
        attr::put_str(b, NFTA_CHAIN_NAME, name);
        if let Some(base) = base {
            let hook = attr::nest_start(b, NFTA_CHAIN_HOOK);
            attr::put_be32(b, NFTA_HOOK_HOOKNUM, base.hook.to_raw(family));
            attr::put_be32(b, NFTA_HOOK_PRIORITY, base.priority as u32);
            attr::nest_end(b, hook);
            attr::put_be32(b, NFTA_CHAIN_POLICY, base.policy.to_raw());
            attr::put_str(b, NFTA_CHAIN_TYPE, base.chain_type.as_str());
        }
        msg::end(b, start);
        Ok(())
    }

    /// Adds a regular chain carrying a comment (its user data); an existing chain is left as it
    /// is (its comment cannot be changed).
    pub fn add_chain_commented(
        &mut self,
        family: Family,
        table: &str,
        name: &str,
        comment: &str,
    ) -> Result<()> {
        check_name("table", table)?;
        check_name("chain", name)?;
        if comment.len() > super::rule::MAX_COMMENT_LEN || comment.contains('\0') {
            return Err(Error::InvalidName {
                what: "comment",
                name: comment.to_string(),
                reason: "must be at most 253 bytes without NUL",
            });
        }
        let start = self.push(
            NFT_MSG_NEWCHAIN,
            NLM_F_CREATE,
            family,
            format!("add chain {family} {table} {name} comment {comment:?}"),
        );
        let b = &mut self.buf;
        attr::put_str(b, NFTA_CHAIN_TABLE, table);
        attr::put_str(b, NFTA_CHAIN_NAME, name);
        attr::put(b, NFTA_CHAIN_USERDATA, &encode_comment_udata(comment));
        msg::end(b, start);
        Ok(())
    }

    /// Deletes an empty chain that nothing jumps to.
    pub fn del_chain(&mut self, family: Family, table: &str, name: &str) -> Result<()> {
        check_name("table", table)?;
        check_name("chain", name)?;
        let start = self.push(
            NFT_MSG_DELCHAIN,
            0,
            family,
            format!("delete chain {family} {table} {name}"),
        );
        attr::put_str(&mut self.buf, NFTA_CHAIN_TABLE, table);
        attr::put_str(&mut self.buf, NFTA_CHAIN_NAME, name);
        msg::end(&mut self.buf, start);
        Ok(())
    }

    /// Deletes every rule of one chain, or of the whole table when `chain` is `None`.
    pub fn flush(&mut self, family: Family, table: &str, chain: Option<&str>) -> Result<()> {
        check_name("table", table)?;
        if let Some(c) = chain {
            check_name("chain", c)?;
        }
        let what = match chain {
            Some(c) => format!("flush chain {family} {table} {c}"),
            None => format!("flush table {family} {table}"),
        };
        let start = self.push(NFT_MSG_DELRULE, 0, family, what);
        attr::put_str(&mut self.buf, NFTA_RULE_TABLE, table);
        if let Some(c) = chain {
            attr::put_str(&mut self.buf, NFTA_RULE_CHAIN, c);
        }
        msg::end(&mut self.buf, start);
        Ok(())
    }

    /// Adds a rule at the given position.
    pub fn add_rule(
        &mut self,
        family: Family,
        table: &str,
        chain: &str,
        body: &RuleBody,
        at: Position,
    ) -> Result<()> {
        check_name("table", table)?;
        check_name("chain", chain)?;
        if let Some((what, name, reason)) = &body.invalid {
            return Err(Error::InvalidName {
                what,
                name: name.clone(),
                reason,
            });
        }
        // Without NLM_F_APPEND the kernel inserts before the position (or at the head).
        let (append, position) = match at {
            Position::Append => (NLM_F_APPEND, None),
            Position::Prepend => (0, None),
            Position::Before(h) => (0, Some(h)),
            Position::After(h) => (NLM_F_APPEND, Some(h)),
        };
        let verb = if append != 0 { "add" } else { "insert" };
        let what = match &body.comment {
            Some(c) => format!("{verb} rule {c:?} to chain {family} {table} {chain}"),
            None => format!("{verb} rule to chain {family} {table} {chain}"),
        };
        let start = self.push(NFT_MSG_NEWRULE, NLM_F_CREATE | append, family, what);
        let b = &mut self.buf;
        attr::put_str(b, NFTA_RULE_TABLE, table);
        attr::put_str(b, NFTA_RULE_CHAIN, chain);
        if let Some(h) = position {
            attr::put_be64(b, NFTA_RULE_POSITION, h);
        }
        expr::encode_list(&body.exprs, b);
        if let Some(c) = &body.comment {
            attr::put(b, NFTA_RULE_USERDATA, &encode_comment_udata(c));
        }
        msg::end(b, start);
        Ok(())
    }

    /// Deletes the rule with this handle.
    pub fn del_rule(
        &mut self,
        family: Family,
        table: &str,
        chain: &str,
        handle: u64,
    ) -> Result<()> {
        check_name("table", table)?;
        check_name("chain", chain)?;
        let start = self.push(
            NFT_MSG_DELRULE,
            0,
            family,
            format!("delete rule handle {handle} from chain {family} {table} {chain}"),
        );
        attr::put_str(&mut self.buf, NFTA_RULE_TABLE, table);
        attr::put_str(&mut self.buf, NFTA_RULE_CHAIN, chain);
        attr::put_be64(&mut self.buf, NFTA_RULE_HANDLE, handle);
        msg::end(&mut self.buf, start);
        Ok(())
    }

    /// The bytes to send: BEGIN with `first_seq`, the messages numbered after it, then END.
    /// Message `i` gets sequence number `first_seq + 1 + i`.
    pub fn encode(&self, first_seq: u32) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.buf.len() + 40);
        let begin = msg::begin(
            &mut out,
            NFNL_MSG_BATCH_BEGIN,
            NLM_F_REQUEST,
            first_seq,
            0,
            NFNL_SUBSYS_NFTABLES,
        );
        if let Some(g) = self.generation {
            attr::put_be32(&mut out, NFNL_BATCH_GENID, g);
        }
        msg::end(&mut out, begin);
        let base = out.len();
        out.extend_from_slice(&self.buf);
        for (i, e) in self.entries.iter().enumerate() {
            msg::set_seq(
                &mut out,
                base + e.offset,
                first_seq.wrapping_add(1 + i as u32),
            );
        }
        // Only the last message asks for an acknowledgement. The kernel answers a batch once it
        // has processed all of it, in message order: a commit's refusal, then each message's
        // refusal, then this acknowledgement, so its arrival says every answer is in. An ACK on
        // every message made the kernel queue, and the host read, one datagram per rule
        // (10,000 receives for 10,000 openings); `nft -f` asks for none.
        if let Some(last) = self.entries.last() {
            msg::add_flag(&mut out, base + last.offset, NLM_F_ACK);
        }
        let end_seq = first_seq.wrapping_add(1 + self.entries.len() as u32);
        let end = msg::begin(
            &mut out,
            NFNL_MSG_BATCH_END,
            NLM_F_REQUEST,
            end_seq,
            0,
            NFNL_SUBSYS_NFTABLES,
        );
        msg::end(&mut out, end);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::msg::split;

    #[test]
    fn a_batch_is_framed_and_numbered() {
        let mut b = Batch::new();
        b.add_table(
            Family::Inet,
            "meshguard",
            TableFlags::OWNER | TableFlags::PERSIST,
        )
        .unwrap();
        b.add_chain(
            Family::Inet,
            "meshguard",
            "pre",
            Some(&BaseChain::filter(Hook::Prerouting, -150)),
        )
        .unwrap();
        b.add_rule(
            Family::Inet,
            "meshguard",
            "pre",
            &RuleBody::new().tcp_dport(5432).drop(),
            Position::Prepend,
        )
        .unwrap();
        let bytes = b.encode(100);
        let msgs = split(&bytes).unwrap();
        assert_eq!(msgs.len(), 5);
        assert_eq!(msgs[0].ty, NFNL_MSG_BATCH_BEGIN);
        assert_eq!(msgs[4].ty, NFNL_MSG_BATCH_END);
        let seqs: Vec<u32> = msgs.iter().map(|m| m.seq).collect();
        assert_eq!(seqs, [100, 101, 102, 103, 104]);
        for m in &msgs[1..4] {
            assert_eq!(m.family(), Family::Inet);
        }
        // Only the last message asks for an acknowledgement: the kernel's answers to a batch
        // come in message order, so its ACK says every refusal before it is in.
        let acks: Vec<bool> = msgs.iter().map(|m| m.flags & NLM_F_ACK != 0).collect();
        assert_eq!(acks, [false, false, false, true, false]);
        // Inserted at the head: CREATE without APPEND.
        assert_eq!(msgs[3].flags & (NLM_F_CREATE | NLM_F_APPEND), NLM_F_CREATE);
        let table_flags = msgs[1]
            .attrs()
            .find(|a| a.ty == NFTA_TABLE_FLAGS)
            .and_then(|a| a.be32());
        assert_eq!(table_flags, Some(0x6));
        let hook = msgs[2].attrs().find(|a| a.ty == NFTA_CHAIN_HOOK).unwrap();
        let prio = hook.nested().find(|a| a.ty == NFTA_HOOK_PRIORITY).unwrap();
        assert_eq!(prio.data, (-150i32).to_be_bytes());
        assert_eq!(
            b.describe(2),
            Some("insert rule to chain inet meshguard pre")
        );
    }

    #[test]
    fn a_generation_is_carried_by_the_batch_begin() {
        let mut b = Batch::new();
        b.del_rule(Family::Ipv4, "filter", "INPUT", 7).unwrap();
        // Without a generation, BEGIN is bare: the kernel applies the batch to whatever is there.
        let bytes = b.encode(10);
        let msgs = split(&bytes).unwrap();
        assert_eq!(msgs[0].attrs().count(), 0);
        b.set_generation(0x0102_0304);
        assert_eq!(b.generation(), Some(0x0102_0304));
        let bytes = b.encode(10);
        let msgs = split(&bytes).unwrap();
        assert_eq!(msgs[0].ty, NFNL_MSG_BATCH_BEGIN);
        assert_eq!(msgs[0].payload[2..4], NFNL_SUBSYS_NFTABLES.to_be_bytes());
        let genid: Vec<_> = msgs[0].attrs().collect();
        assert_eq!(genid.len(), 1);
        assert_eq!(genid[0].ty, NFNL_BATCH_GENID);
        // Big-endian on the wire, as the kernel reads it (nla_get_be32).
        assert_eq!(genid[0].data, [1, 2, 3, 4]);
        // The rest of the batch is unchanged, still numbered after BEGIN.
        assert_eq!(msgs.len(), 3);
        assert_eq!(msgs[1].seq, 11);
        assert_eq!(msgs[2].ty, NFNL_MSG_BATCH_END);
    }

    #[test]
    fn positions_choose_append_flag_and_position_attribute() {
        let body = RuleBody::new().accept();
        let mut b = Batch::new();
        for at in [Position::Append, Position::Before(5), Position::After(6)] {
            b.add_rule(Family::Ipv4, "t", "c", &body, at).unwrap();
        }
        let bytes = b.encode(1);
        let msgs = split(&bytes).unwrap();
        let pos = |i: usize| {
            msgs[i]
                .attrs()
                .find(|a| a.ty == NFTA_RULE_POSITION)
                .and_then(|a| a.be64())
        };
        assert_eq!(msgs[1].flags & NLM_F_APPEND, NLM_F_APPEND);
        assert_eq!(pos(1), None);
        assert_eq!(msgs[2].flags & NLM_F_APPEND, 0);
        assert_eq!(pos(2), Some(5));
        assert_eq!(msgs[3].flags & NLM_F_APPEND, NLM_F_APPEND);
        assert_eq!(pos(3), Some(6));
    }

    #[test]
    fn invalid_names_and_rule_arguments_are_refused_before_sending() {
        let mut b = Batch::new();
        assert!(b.add_table(Family::Inet, "", TableFlags::NONE).is_err());
        let bad = RuleBody::new().iifname_eq("0123456789abcdefg");
        let err = b
            .add_rule(Family::Inet, "t", "c", &bad, Position::Append)
            .unwrap_err();
        assert!(err.to_string().contains("interface name"), "{err}");
        assert!(b.is_empty());
    }
}
