//! Numeric constants of netlink, nfnetlink and nf_tables, defined here rather than taken from
//! build-machine headers, so the codec does not depend on which kernel headers it was built with
//! (Debian 12's 6.1 headers lack `NFT_TABLE_F_PERSIST`, which the 6.18 kernels here honour).

// Netlink framing (linux/netlink.h).
pub const NLMSG_HDRLEN: usize = 16;
pub const NLMSG_NOOP: u16 = 0x1;
pub const NLMSG_ERROR: u16 = 0x2;
pub const NLMSG_DONE: u16 = 0x3;
pub const NLMSG_OVERRUN: u16 = 0x4;
pub const NLMSG_MIN_TYPE: u16 = 0x10;

pub const NLM_F_REQUEST: u16 = 0x1;
pub const NLM_F_MULTI: u16 = 0x2;
pub const NLM_F_ACK: u16 = 0x4;
pub const NLM_F_DUMP_INTR: u16 = 0x10;
pub const NLM_F_ROOT: u16 = 0x100;
pub const NLM_F_MATCH: u16 = 0x200;
pub const NLM_F_DUMP: u16 = NLM_F_ROOT | NLM_F_MATCH;
pub const NLM_F_EXCL: u16 = 0x200;
pub const NLM_F_CREATE: u16 = 0x400;
pub const NLM_F_APPEND: u16 = 0x800;
/// Set on an error message when NETLINK_CAP_ACK left the original request out.
pub const NLM_F_CAPPED: u16 = 0x100;
/// Set on an error message that carries extended-ack attributes.
pub const NLM_F_ACK_TLVS: u16 = 0x200;

pub const NLA_HDRLEN: usize = 4;
pub const NLA_F_NESTED: u16 = 1 << 15;
pub const NLA_F_NET_BYTEORDER: u16 = 1 << 14;
pub const NLA_TYPE_MASK: u16 = !(NLA_F_NESTED | NLA_F_NET_BYTEORDER);

pub const NLMSGERR_ATTR_MSG: u16 = 1;
pub const NLMSGERR_ATTR_OFFS: u16 = 2;

pub const SOL_NETLINK: i32 = 270;
pub const NETLINK_NETFILTER: i32 = 12;
pub const NETLINK_ADD_MEMBERSHIP: i32 = 1;
pub const NETLINK_CAP_ACK: i32 = 10;
pub const NETLINK_EXT_ACK: i32 = 11;

// nfnetlink (linux/netfilter/nfnetlink.h).
pub const NFNL_SUBSYS_NFTABLES: u16 = 10;
pub const NFNL_MSG_BATCH_BEGIN: u16 = NLMSG_MIN_TYPE;
pub const NFNL_MSG_BATCH_END: u16 = NLMSG_MIN_TYPE + 1;
/// The batch BEGIN attribute holding the ruleset generation the batch expects (enum
/// nfnl_batch_attributes); the kernel refuses a batch with a stale one with ERESTART.
pub const NFNL_BATCH_GENID: u16 = 1;
pub const NFNETLINK_V0: u8 = 0;
pub const NFNLGRP_NFTABLES: u32 = 7;
pub const NFGENMSG_LEN: usize = 4;

// nf_tables message types (enum nf_tables_msg_types).
pub const NFT_MSG_NEWTABLE: u8 = 0;
pub const NFT_MSG_GETTABLE: u8 = 1;
pub const NFT_MSG_DELTABLE: u8 = 2;
pub const NFT_MSG_NEWCHAIN: u8 = 3;
pub const NFT_MSG_GETCHAIN: u8 = 4;
pub const NFT_MSG_DELCHAIN: u8 = 5;
pub const NFT_MSG_NEWRULE: u8 = 6;
pub const NFT_MSG_GETRULE: u8 = 7;
pub const NFT_MSG_DELRULE: u8 = 8;
pub const NFT_MSG_NEWSET: u8 = 9;
pub const NFT_MSG_GETSET: u8 = 10;
pub const NFT_MSG_DELSET: u8 = 11;
pub const NFT_MSG_NEWGEN: u8 = 15;
pub const NFT_MSG_GETGEN: u8 = 16;

// Table attributes and flags.
pub const NFTA_TABLE_NAME: u16 = 1;
pub const NFTA_TABLE_FLAGS: u16 = 2;
pub const NFTA_TABLE_USE: u16 = 3;
pub const NFTA_TABLE_HANDLE: u16 = 4;
pub const NFTA_TABLE_USERDATA: u16 = 6;
pub const NFTA_TABLE_OWNER: u16 = 7;
pub const NFT_TABLE_F_DORMANT: u32 = 0x1;
pub const NFT_TABLE_F_OWNER: u32 = 0x2;
/// Keeps an owned table as an orphan when its owner goes away (Linux 6.9 and later).
pub const NFT_TABLE_F_PERSIST: u32 = 0x4;

// Chain attributes.
pub const NFTA_CHAIN_TABLE: u16 = 1;
pub const NFTA_CHAIN_HANDLE: u16 = 2;
pub const NFTA_CHAIN_NAME: u16 = 3;
pub const NFTA_CHAIN_HOOK: u16 = 4;
pub const NFTA_CHAIN_POLICY: u16 = 5;
pub const NFTA_CHAIN_USE: u16 = 6;
pub const NFTA_CHAIN_TYPE: u16 = 7;
pub const NFTA_CHAIN_FLAGS: u16 = 10;
pub const NFTA_CHAIN_USERDATA: u16 = 12;
pub const NFTA_HOOK_HOOKNUM: u16 = 1;
pub const NFTA_HOOK_PRIORITY: u16 = 2;
pub const NFTA_HOOK_DEV: u16 = 3;
pub const NFTA_HOOK_DEVS: u16 = 4;

// Rule attributes.
pub const NFTA_RULE_TABLE: u16 = 1;
pub const NFTA_RULE_CHAIN: u16 = 2;
pub const NFTA_RULE_HANDLE: u16 = 3;
pub const NFTA_RULE_EXPRESSIONS: u16 = 4;
pub const NFTA_RULE_POSITION: u16 = 6;
pub const NFTA_RULE_USERDATA: u16 = 7;
pub const NFTA_LIST_ELEM: u16 = 1;
pub const NFTA_EXPR_NAME: u16 = 1;
pub const NFTA_EXPR_DATA: u16 = 2;

// Set attributes.
pub const NFTA_SET_TABLE: u16 = 1;
pub const NFTA_SET_NAME: u16 = 2;
pub const NFTA_SET_FLAGS: u16 = 3;
pub const NFTA_SET_KEY_TYPE: u16 = 4;
pub const NFTA_SET_KEY_LEN: u16 = 5;
pub const NFTA_SET_DATA_TYPE: u16 = 6;
pub const NFTA_SET_DATA_LEN: u16 = 7;
pub const NFTA_SET_HANDLE: u16 = 16;

// Generation attributes.
pub const NFTA_GEN_ID: u16 = 1;
pub const NFTA_GEN_PROC_PID: u16 = 2;
pub const NFTA_GEN_PROC_NAME: u16 = 3;

// Data and verdicts.
pub const NFTA_DATA_VALUE: u16 = 1;
pub const NFTA_DATA_VERDICT: u16 = 2;
pub const NFTA_VERDICT_CODE: u16 = 1;
pub const NFTA_VERDICT_CHAIN: u16 = 2;
pub const NF_DROP: i32 = 0;
pub const NF_ACCEPT: i32 = 1;
pub const NF_QUEUE: i32 = 3;
pub const NFT_CONTINUE: i32 = -1;
pub const NFT_BREAK: i32 = -2;
pub const NFT_JUMP: i32 = -3;
pub const NFT_GOTO: i32 = -4;
pub const NFT_RETURN: i32 = -5;

// Expression attributes.
pub const NFTA_IMMEDIATE_DREG: u16 = 1;
pub const NFTA_IMMEDIATE_DATA: u16 = 2;
pub const NFTA_CMP_SREG: u16 = 1;
pub const NFTA_CMP_OP: u16 = 2;
pub const NFTA_CMP_DATA: u16 = 3;
pub const NFTA_BITWISE_SREG: u16 = 1;
pub const NFTA_BITWISE_DREG: u16 = 2;
pub const NFTA_BITWISE_LEN: u16 = 3;
pub const NFTA_BITWISE_MASK: u16 = 4;
pub const NFTA_BITWISE_XOR: u16 = 5;
pub const NFTA_BITWISE_OP: u16 = 6;
pub const NFT_BITWISE_MASK_XOR: u32 = 0;
pub const NFTA_PAYLOAD_DREG: u16 = 1;
pub const NFTA_PAYLOAD_BASE: u16 = 2;
pub const NFTA_PAYLOAD_OFFSET: u16 = 3;
pub const NFTA_PAYLOAD_LEN: u16 = 4;
pub const NFTA_META_DREG: u16 = 1;
pub const NFTA_META_KEY: u16 = 2;
pub const NFTA_CT_DREG: u16 = 1;
pub const NFTA_CT_KEY: u16 = 2;
/// A u8 (`NLA_U8` in the kernel's policy), not a u32: a wider attribute makes the kernel log
/// "attribute type 3 has an invalid length".
pub const NFTA_CT_DIRECTION: u16 = 3;
pub const NFTA_COUNTER_BYTES: u16 = 1;
pub const NFTA_COUNTER_PACKETS: u16 = 2;
pub const NFTA_COUNTER_PAD: u16 = 3;
pub const NFTA_LOOKUP_SET: u16 = 1;
pub const NFTA_LOOKUP_SREG: u16 = 2;
pub const NFTA_LOOKUP_DREG: u16 = 3;
pub const NFTA_LOOKUP_SET_ID: u16 = 4;
pub const NFTA_LOOKUP_FLAGS: u16 = 5;
pub const NFTA_FIB_DREG: u16 = 1;
pub const NFTA_FIB_RESULT: u16 = 2;
pub const NFTA_FIB_FLAGS: u16 = 3;
/// `fib` flags (enum nft_fib_flags): which fields of the packet the route lookup uses.
pub const NFTA_FIB_F_SADDR: u32 = 1 << 0;
pub const NFTA_FIB_F_DADDR: u32 = 1 << 1;
pub const NFTA_FIB_F_MARK: u32 = 1 << 2;
pub const NFTA_FIB_F_IIF: u32 = 1 << 3;
pub const NFTA_FIB_F_OIF: u32 = 1 << 4;
pub const NFTA_FIB_F_PRESENT: u32 = 1 << 5;
/// `enum rtn_type`'s RTN_LOCAL: what `fib daddr type` yields for the machine's own addresses.
pub const RTN_LOCAL: u32 = 2;

/// iptables-nft's xt `match`/`target` expressions: NFTA_MATCH_* and NFTA_TARGET_* agree.
pub const NFTA_XT_NAME: u16 = 1;
pub const NFTA_XT_REV: u16 = 2;
pub const NFTA_XT_INFO: u16 = 3;

/// The verdict register, and the first 16-byte data register that nft itself uses.
pub const NFT_REG_VERDICT: u32 = 0;

/// The conntrack status bit of a connection whose destination was translated
/// (enum ip_conntrack_status, IPS_DST_NAT).
pub const IPS_DST_NAT: u32 = 0x20;
pub const NFT_REG_1: u32 = 1;

// nftnl user-data TLV types (libnftnl udata.h): the rule comment is type 0.
pub const NFTNL_UDATA_RULE_COMMENT: u8 = 0;
pub const NFTNL_UDATA_TABLE_COMMENT: u8 = 0;
pub const NFTNL_UDATA_CHAIN_COMMENT: u8 = 0;

/// Interface names are compared in 16-byte registers (IFNAMSIZ).
pub const IFNAMSIZ: usize = 16;

// Set elements (NFT_MSG_GETSETELEM and the attributes of its answer).
pub const NFT_MSG_GETSETELEM: u8 = 13;
pub const NFTA_SET_ELEM_LIST_TABLE: u16 = 1;
pub const NFTA_SET_ELEM_LIST_SET: u16 = 2;
pub const NFTA_SET_ELEM_LIST_ELEMENTS: u16 = 3;
pub const NFTA_SET_ELEM_KEY: u16 = 1;
pub const NFTA_SET_ELEM_DATA: u16 = 2;
pub const NFTA_SET_ELEM_FLAGS: u16 = 3;
pub const NFTA_SET_ELEM_KEY_END: u16 = 10;
/// The element closes an interval that the element before it opened (its key is one past the
/// interval's last value).
pub const NFT_SET_ELEM_INTERVAL_END: u32 = 0x1;
/// Set flags: anonymous, constant, interval, a map, with timeouts, a concatenation.
pub const NFT_SET_ANONYMOUS: u32 = 0x1;
pub const NFT_SET_INTERVAL: u32 = 0x4;
pub const NFT_SET_MAP: u32 = 0x8;
pub const NFT_SET_CONCAT: u32 = 0x80;
/// `lookup` flags: an inverted lookup (`!= @set`).
pub const NFT_LOOKUP_F_INV: u32 = 0x1;
