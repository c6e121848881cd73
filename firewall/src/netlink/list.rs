//! What a listing returns: tables, chains, rules and sets, decoded tolerantly from the kernel's
//! messages (unknown attributes are skipped, unknown expressions kept raw), each with its family.

use super::attr::Attr;
use super::consts::*;
use super::expr::{self, Expr};
use super::msg::NlMsg;
use super::rule::decode_comment_udata;
use super::types::{ChainType, Family, Hook, Policy, TableFlags};

/// A table as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    pub family: Family,
    pub name: String,
    pub flags: TableFlags,
    pub handle: u64,
    /// How many chains, sets and objects refer to the table.
    pub use_count: u32,
    /// The netlink port id of the owning socket, when the table is owned.
    pub owner: Option<u32>,
    pub userdata: Option<Vec<u8>>,
    /// The comment in the user data, if any.
    pub comment: Option<String>,
}

impl Table {
    /// Owned by a live socket.
    pub fn is_owned(&self) -> bool {
        self.flags.contains(TableFlags::OWNER)
    }

    /// Persistent but with no owner any more: any process may change or reclaim it.
    pub fn is_orphan(&self) -> bool {
        self.flags.contains(TableFlags::PERSIST) && !self.is_owned()
    }
}

/// The hook of a base chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainHook {
    pub hook: Hook,
    /// The raw hook number, for hooks this crate does not name.
    pub hook_num: u32,
    /// Signed, as nft prints it: `priority -300` is -300.
    pub priority: i32,
    /// The device of a netdev chain, if any.
    pub device: Option<String>,
}

/// A chain as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    pub family: Family,
    pub table: String,
    pub name: String,
    pub handle: u64,
    /// Present for base chains.
    pub hook: Option<ChainHook>,
    pub policy: Option<Policy>,
    pub chain_type: Option<ChainType>,
    pub flags: u32,
    /// How many rules jump to the chain.
    pub use_count: u32,
    pub userdata: Option<Vec<u8>>,
    pub comment: Option<String>,
}

/// A rule as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub family: Family,
    pub table: String,
    pub chain: String,
    pub handle: u64,
    /// The NFTA_RULE_POSITION attribute, when the kernel sent one (it does in events).
    pub position: Option<u64>,
    pub exprs: Vec<Expr>,
    pub userdata: Option<Vec<u8>>,
    /// The comment from the user data's type-0 TLV.
    pub comment: Option<String>,
}

impl Rule {
    /// The rule's body, to write it again elsewhere or compare it with one to be written.
    pub fn body(&self) -> super::rule::RuleBody {
        super::rule::RuleBody::from_exprs(self.exprs.clone(), self.comment.clone())
    }
}

/// A set as listed (without its elements).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Set {
    pub family: Family,
    pub table: String,
    pub name: String,
    pub handle: u64,
    pub flags: u32,
    pub key_type: u32,
    pub key_len: u32,
    pub data_type: Option<u32>,
    pub data_len: Option<u32>,
}

/// The data an element of a map carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ElemData {
    Value(Vec<u8>),
    Verdict(super::types::Verdict),
}

/// One element of a set or map as listed: its key, the end of its range (a concatenation with
/// ranges, or an interval set's element carrying both ends), what it maps to, and its flags
/// (`NFT_SET_ELEM_INTERVAL_END` marks the element that closes an interval).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Elem {
    pub key: Vec<u8>,
    pub key_end: Option<Vec<u8>>,
    pub data: Option<ElemData>,
    pub flags: u32,
}

/// A consistent snapshot: everything was listed within one ruleset generation, or, when the
/// whole ruleset would not hold still, every table and chain plus the sets and rules of each table
/// on the way of incoming packets, each table as it stood unchanged across two listings (see
/// [`NfSocket::ruleset`](super::NfSocket::ruleset)).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ruleset {
    pub generation: u32,
    pub tables: Vec<Table>,
    pub chains: Vec<Chain>,
    pub rules: Vec<Rule>,
    pub sets: Vec<Set>,
    /// The family listed (`None`: all).
    pub family: Option<Family>,
    /// Tables whose sets and rules were not read, because the whole ruleset would not hold still
    /// and none of their chains is on the way of incoming packets (empty when listed whole).
    pub unread: Vec<(Family, String)>,
}

impl Ruleset {
    pub fn table(&self, family: Family, name: &str) -> Option<&Table> {
        self.tables
            .iter()
            .find(|t| t.family == family && t.name == name)
    }

    pub fn chain(&self, family: Family, table: &str, name: &str) -> Option<&Chain> {
        self.chains
            .iter()
            .find(|c| c.family == family && c.table == table && c.name == name)
    }

    /// The rules of one chain, in the kernel's order.
    pub fn rules_of<'a>(
        &'a self,
        family: Family,
        table: &'a str,
        chain: &'a str,
    ) -> impl Iterator<Item = &'a Rule> + 'a {
        self.rules
            .iter()
            .filter(move |r| r.family == family && r.table == table && r.chain == chain)
    }
}

fn be32(a: &Attr<'_>) -> u32 {
    a.be32().unwrap_or(0)
}

fn be64(a: &Attr<'_>) -> u64 {
    a.be64().unwrap_or(0)
}

pub(crate) fn decode_table(msg: &NlMsg<'_>) -> Table {
    let mut t = Table {
        family: msg.family(),
        name: String::new(),
        flags: TableFlags::NONE,
        handle: 0,
        use_count: 0,
        owner: None,
        userdata: None,
        comment: None,
    };
    for a in msg.attrs() {
        match a.ty {
            NFTA_TABLE_NAME => t.name = a.string(),
            NFTA_TABLE_FLAGS => t.flags = TableFlags(be32(&a)),
            NFTA_TABLE_USE => t.use_count = be32(&a),
            NFTA_TABLE_HANDLE => t.handle = be64(&a),
            NFTA_TABLE_OWNER => t.owner = a.be32(),
            NFTA_TABLE_USERDATA => {
                t.comment = decode_comment_udata(a.data);
                t.userdata = Some(a.data.to_vec());
            }
            _ => {}
        }
    }
    t
}

pub(crate) fn decode_chain(msg: &NlMsg<'_>) -> Chain {
    let family = msg.family();
    let mut c = Chain {
        family,
        table: String::new(),
        name: String::new(),
        handle: 0,
        hook: None,
        policy: None,
        chain_type: None,
        flags: 0,
        use_count: 0,
        userdata: None,
        comment: None,
    };
    for a in msg.attrs() {
        match a.ty {
            NFTA_CHAIN_TABLE => c.table = a.string(),
            NFTA_CHAIN_NAME => c.name = a.string(),
            NFTA_CHAIN_HANDLE => c.handle = be64(&a),
            NFTA_CHAIN_HOOK => {
                let mut h = ChainHook {
                    hook: Hook::Other(0),
                    hook_num: 0,
                    priority: 0,
                    device: None,
                };
                for ha in a.nested() {
                    match ha.ty {
                        NFTA_HOOK_HOOKNUM => h.hook_num = be32(&ha),
                        NFTA_HOOK_PRIORITY => h.priority = be32(&ha) as i32,
                        NFTA_HOOK_DEV => h.device = Some(ha.string()),
                        NFTA_HOOK_DEVS => {
                            h.device = ha.nested().next().map(|d| d.string());
                        }
                        _ => {}
                    }
                }
                h.hook = Hook::from_raw(family, h.hook_num);
                c.hook = Some(h);
            }
            NFTA_CHAIN_POLICY => c.policy = a.be32().map(Policy::from_raw),
            NFTA_CHAIN_USE => c.use_count = be32(&a),
            NFTA_CHAIN_TYPE => c.chain_type = Some(ChainType::from_name(&a.string())),
            NFTA_CHAIN_FLAGS => c.flags = be32(&a),
            NFTA_CHAIN_USERDATA => {
                c.comment = decode_comment_udata(a.data);
                c.userdata = Some(a.data.to_vec());
            }
            _ => {}
        }
    }
    c
}

pub(crate) fn decode_rule(msg: &NlMsg<'_>) -> Rule {
    let mut r = Rule {
        family: msg.family(),
        table: String::new(),
        chain: String::new(),
        handle: 0,
        position: None,
        exprs: Vec::new(),
        userdata: None,
        comment: None,
    };
    for a in msg.attrs() {
        match a.ty {
            NFTA_RULE_TABLE => r.table = a.string(),
            NFTA_RULE_CHAIN => r.chain = a.string(),
            NFTA_RULE_HANDLE => r.handle = be64(&a),
            NFTA_RULE_POSITION => r.position = a.be64(),
            NFTA_RULE_EXPRESSIONS => r.exprs = expr::decode_list(a.data),
            NFTA_RULE_USERDATA => {
                r.comment = decode_comment_udata(a.data);
                r.userdata = Some(a.data.to_vec());
            }
            _ => {}
        }
    }
    r
}

pub(crate) fn decode_set(msg: &NlMsg<'_>) -> Set {
    let mut s = Set {
        family: msg.family(),
        table: String::new(),
        name: String::new(),
        handle: 0,
        flags: 0,
        key_type: 0,
        key_len: 0,
        data_type: None,
        data_len: None,
    };
    for a in msg.attrs() {
        match a.ty {
            NFTA_SET_TABLE => s.table = a.string(),
            NFTA_SET_NAME => s.name = a.string(),
            NFTA_SET_HANDLE => s.handle = be64(&a),
            NFTA_SET_FLAGS => s.flags = be32(&a),
            NFTA_SET_KEY_TYPE => s.key_type = be32(&a),
            NFTA_SET_KEY_LEN => s.key_len = be32(&a),
            NFTA_SET_DATA_TYPE => s.data_type = a.be32(),
            NFTA_SET_DATA_LEN => s.data_len = a.be32(),
            _ => {}
        }
    }
    s
}

/// The elements one NEWSETELEM message carries.
pub(crate) fn decode_elems(msg: &NlMsg<'_>) -> Vec<Elem> {
    let mut out = Vec::new();
    for a in msg.attrs() {
        if a.ty != NFTA_SET_ELEM_LIST_ELEMENTS {
            continue;
        }
        for item in a.nested().filter(|i| i.ty == NFTA_LIST_ELEM) {
            let mut e = Elem {
                key: Vec::new(),
                key_end: None,
                data: None,
                flags: 0,
            };
            for f in item.nested() {
                match f.ty {
                    NFTA_SET_ELEM_KEY => {
                        e.key = data_value(&f).unwrap_or_default();
                    }
                    NFTA_SET_ELEM_KEY_END => e.key_end = data_value(&f),
                    NFTA_SET_ELEM_FLAGS => e.flags = be32(&f),
                    NFTA_SET_ELEM_DATA => {
                        for d in f.nested() {
                            match d.ty {
                                NFTA_DATA_VALUE => e.data = Some(ElemData::Value(d.data.to_vec())),
                                NFTA_DATA_VERDICT => {
                                    let (mut code, mut chain) = (0i32, None);
                                    for v in d.nested() {
                                        match v.ty {
                                            NFTA_VERDICT_CODE => code = be32(&v) as i32,
                                            NFTA_VERDICT_CHAIN => chain = Some(v.string()),
                                            _ => {}
                                        }
                                    }
                                    e.data = Some(ElemData::Verdict(
                                        super::types::Verdict::from_parts(code, chain),
                                    ));
                                }
                                _ => {}
                            }
                        }
                    }
                    _ => {}
                }
            }
            out.push(e);
        }
    }
    out
}

/// The bytes of an NFTA_DATA_VALUE nested in `a`.
fn data_value(a: &Attr<'_>) -> Option<Vec<u8>> {
    a.nested()
        .find(|d| d.ty == NFTA_DATA_VALUE)
        .map(|d| d.data.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::attr;
    use crate::netlink::msg;

    fn message(ty: u8, family: Family, body: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let mut buf = Vec::new();
        let s = msg::begin(&mut buf, msg::nft_type(ty), 0, 1, family.to_raw(), 0);
        body(&mut buf);
        msg::end(&mut buf, s);
        buf
    }

    #[test]
    fn chains_keep_family_negative_priority_and_drop_policy() {
        let buf = message(NFT_MSG_NEWCHAIN, Family::Ipv6, |b| {
            attr::put_str(b, NFTA_CHAIN_TABLE, "filter");
            attr::put_str(b, NFTA_CHAIN_NAME, "INPUT");
            attr::put_be64(b, NFTA_CHAIN_HANDLE, 3);
            let h = attr::nest_start(b, NFTA_CHAIN_HOOK);
            attr::put_be32(b, NFTA_HOOK_HOOKNUM, 0);
            attr::put_be32(b, NFTA_HOOK_PRIORITY, (-300i32) as u32);
            attr::nest_end(b, h);
            attr::put_be32(b, NFTA_CHAIN_POLICY, 0);
            attr::put_str(b, NFTA_CHAIN_TYPE, "filter");
            attr::put_be32(b, 99, 1);
        });
        let msgs = msg::split(&buf).unwrap();
        let c = decode_chain(&msgs[0]);
        assert_eq!(c.family, Family::Ipv6);
        assert_eq!(c.table, "filter");
        assert_eq!(c.handle, 3);
        let h = c.hook.unwrap();
        assert_eq!(h.hook, Hook::Prerouting);
        assert_eq!(h.priority, -300);
        assert_eq!(c.policy, Some(Policy::Drop));
        assert_eq!(c.chain_type, Some(ChainType::Filter));
    }

    #[test]
    fn tables_report_owner_and_orphans() {
        let buf = message(NFT_MSG_NEWTABLE, Family::Inet, |b| {
            attr::put_str(b, NFTA_TABLE_NAME, "meshguard");
            attr::put_be32(b, NFTA_TABLE_FLAGS, 0x6);
            attr::put_be32(b, NFTA_TABLE_OWNER, 1234);
        });
        let t = decode_table(&msg::split(&buf).unwrap()[0]);
        assert!(t.is_owned() && !t.is_orphan());
        assert_eq!(t.owner, Some(1234));
        let buf = message(NFT_MSG_NEWTABLE, Family::Inet, |b| {
            attr::put_str(b, NFTA_TABLE_NAME, "meshguard");
            attr::put_be32(b, NFTA_TABLE_FLAGS, 0x4);
        });
        assert!(decode_table(&msg::split(&buf).unwrap()[0]).is_orphan());
    }

    #[test]
    fn rules_decode_comment_and_expressions() {
        let body = crate::netlink::RuleBody::new().tcp_dport(22).accept();
        let buf = message(NFT_MSG_NEWRULE, Family::Ipv4, |b| {
            attr::put_str(b, NFTA_RULE_TABLE, "filter");
            attr::put_str(b, NFTA_RULE_CHAIN, "INPUT");
            attr::put_be64(b, NFTA_RULE_HANDLE, 7);
            expr::encode_list(&body.exprs, b);
            attr::put(
                b,
                NFTA_RULE_USERDATA,
                &crate::netlink::rule::encode_comment_udata("ssh"),
            );
        });
        let r = decode_rule(&msg::split(&buf).unwrap()[0]);
        assert_eq!(r.family, Family::Ipv4);
        assert_eq!(r.handle, 7);
        assert_eq!(r.exprs, body.exprs);
        assert_eq!(r.comment.as_deref(), Some("ssh"));
    }
}
