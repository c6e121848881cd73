//! Small value types shared by writing and listing: families, hooks, policies, flags, verdicts.

use std::fmt;
use std::ops::{BitOr, BitOrAssign};

use super::consts::*;

/// An nf_tables family (the `nfgen_family` of every message). Chains in `ip filter`,
/// `ip6 filter` and `inet filter` are different chains; the family is always kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    Inet,
    Ipv4,
    Ipv6,
    Arp,
    Bridge,
    Netdev,
    /// A family value this crate does not name.
    Other(u8),
}

impl Family {
    /// Every family nft knows, in the order `nft list ruleset` prints them.
    pub const ALL: [Family; 6] = [
        Family::Ipv4,
        Family::Ipv6,
        Family::Inet,
        Family::Arp,
        Family::Bridge,
        Family::Netdev,
    ];

    /// The NFPROTO_* value.
    pub fn to_raw(self) -> u8 {
        match self {
            Family::Inet => 1,
            Family::Ipv4 => 2,
            Family::Arp => 3,
            Family::Netdev => 5,
            Family::Bridge => 7,
            Family::Ipv6 => 10,
            Family::Other(v) => v,
        }
    }

    pub fn from_raw(v: u8) -> Family {
        match v {
            1 => Family::Inet,
            2 => Family::Ipv4,
            3 => Family::Arp,
            5 => Family::Netdev,
            7 => Family::Bridge,
            10 => Family::Ipv6,
            v => Family::Other(v),
        }
    }

    /// The name nft uses (`ip`, `ip6`, `inet`, ...).
    pub fn nft_name(self) -> String {
        match self {
            Family::Inet => "inet".into(),
            Family::Ipv4 => "ip".into(),
            Family::Ipv6 => "ip6".into(),
            Family::Arp => "arp".into(),
            Family::Bridge => "bridge".into(),
            Family::Netdev => "netdev".into(),
            Family::Other(v) => format!("family-{v}"),
        }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.nft_name())
    }
}

/// A base chain's hook. The numbers depend on the family: netdev's ingress is 0, inet's is 5.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Hook {
    Prerouting,
    Input,
    Forward,
    Output,
    Postrouting,
    Ingress,
    Egress,
    /// A hook number this crate does not name for that family.
    Other(u32),
}

impl Hook {
    pub fn to_raw(self, family: Family) -> u32 {
        match (family, self) {
            (Family::Netdev, Hook::Ingress) => 0,
            (Family::Netdev, Hook::Egress) => 1,
            // ARP numbers its hooks NF_ARP_IN, NF_ARP_OUT, NF_ARP_FORWARD.
            (Family::Arp, Hook::Input) => 0,
            (Family::Arp, Hook::Output) => 1,
            (Family::Arp, Hook::Forward) => 2,
            (_, Hook::Prerouting) => 0,
            (_, Hook::Input) => 1,
            (_, Hook::Forward) => 2,
            (_, Hook::Output) => 3,
            (_, Hook::Postrouting) => 4,
            (_, Hook::Ingress) => 5,
            (_, Hook::Egress) => 6,
            (_, Hook::Other(v)) => v,
        }
    }

    pub fn from_raw(family: Family, v: u32) -> Hook {
        match (family, v) {
            (Family::Netdev, 0) => Hook::Ingress,
            (Family::Netdev, 1) => Hook::Egress,
            (Family::Netdev, v) => Hook::Other(v),
            // ARP has only input (0), output (1) and forward (2).
            (Family::Arp, 0) => Hook::Input,
            (Family::Arp, 1) => Hook::Output,
            (Family::Arp, 2) => Hook::Forward,
            (Family::Arp, v) => Hook::Other(v),
            (_, 0) => Hook::Prerouting,
            (_, 1) => Hook::Input,
            (_, 2) => Hook::Forward,
            (_, 3) => Hook::Output,
            (_, 4) => Hook::Postrouting,
            (_, 5) => Hook::Ingress,
            (_, v) => Hook::Other(v),
        }
    }
}

/// A base chain's type.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ChainType {
    Filter,
    Nat,
    Route,
    Other(String),
}

impl ChainType {
    pub fn as_str(&self) -> &str {
        match self {
            ChainType::Filter => "filter",
            ChainType::Nat => "nat",
            ChainType::Route => "route",
            ChainType::Other(s) => s,
        }
    }

    pub fn from_name(s: &str) -> ChainType {
        match s {
            "filter" => ChainType::Filter,
            "nat" => ChainType::Nat,
            "route" => ChainType::Route,
            s => ChainType::Other(s.to_string()),
        }
    }
}

/// A base chain's policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Policy {
    Accept,
    Drop,
    Other(u32),
}

impl Policy {
    pub fn to_raw(self) -> u32 {
        match self {
            Policy::Accept => NF_ACCEPT as u32,
            Policy::Drop => NF_DROP as u32,
            Policy::Other(v) => v,
        }
    }

    pub fn from_raw(v: u32) -> Policy {
        match v as i32 {
            NF_ACCEPT => Policy::Accept,
            NF_DROP => Policy::Drop,
            _ => Policy::Other(v),
        }
    }
}

/// Table flags, kept as raw bits so flags newer than this crate survive a round trip.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TableFlags(pub u32);

impl TableFlags {
    pub const NONE: TableFlags = TableFlags(0);
    pub const DORMANT: TableFlags = TableFlags(NFT_TABLE_F_DORMANT);
    /// Only the owning netlink socket may change the table; it goes when that socket closes.
    pub const OWNER: TableFlags = TableFlags(NFT_TABLE_F_OWNER);
    /// With OWNER: the table stays, unowned, when the owner goes (Linux 6.9 and later).
    pub const PERSIST: TableFlags = TableFlags(NFT_TABLE_F_PERSIST);

    pub fn contains(self, other: TableFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl BitOr for TableFlags {
    type Output = TableFlags;
    fn bitor(self, rhs: TableFlags) -> TableFlags {
        TableFlags(self.0 | rhs.0)
    }
}

impl BitOrAssign for TableFlags {
    fn bitor_assign(&mut self, rhs: TableFlags) {
        self.0 |= rhs.0;
    }
}

/// A verdict as carried by an immediate expression or a chain policy.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Verdict {
    Accept,
    Drop,
    Continue,
    Break,
    Return,
    Jump(String),
    Goto(String),
    /// Queue and any other code, with the chain name if one came with it.
    Other(i32, Option<String>),
}

impl Verdict {
    pub fn code(&self) -> i32 {
        match self {
            Verdict::Accept => NF_ACCEPT,
            Verdict::Drop => NF_DROP,
            Verdict::Continue => NFT_CONTINUE,
            Verdict::Break => NFT_BREAK,
            Verdict::Return => NFT_RETURN,
            Verdict::Jump(_) => NFT_JUMP,
            Verdict::Goto(_) => NFT_GOTO,
            Verdict::Other(c, _) => *c,
        }
    }

    pub fn chain(&self) -> Option<&str> {
        match self {
            Verdict::Jump(c) | Verdict::Goto(c) => Some(c),
            Verdict::Other(_, c) => c.as_deref(),
            _ => None,
        }
    }

    pub fn from_parts(code: i32, chain: Option<String>) -> Verdict {
        match (code, chain) {
            (NF_ACCEPT, None) => Verdict::Accept,
            (NF_DROP, None) => Verdict::Drop,
            (NFT_CONTINUE, None) => Verdict::Continue,
            (NFT_BREAK, None) => Verdict::Break,
            (NFT_RETURN, None) => Verdict::Return,
            (NFT_JUMP, Some(c)) => Verdict::Jump(c),
            (NFT_GOTO, Some(c)) => Verdict::Goto(c),
            (code, chain) => Verdict::Other(code, chain),
        }
    }

    /// True for `queue` verdicts, whose queue number sits in the code's upper bits.
    pub fn is_queue(&self) -> bool {
        matches!(self, Verdict::Other(c, _) if c & 0xff == NF_QUEUE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_round_trip_and_name_like_nft() {
        for f in Family::ALL {
            assert_eq!(Family::from_raw(f.to_raw()), f);
        }
        assert_eq!(Family::Ipv4.to_raw(), 2);
        assert_eq!(Family::Ipv6.to_raw(), 10);
        assert_eq!(Family::Inet.to_raw(), 1);
        assert_eq!(Family::Ipv6.to_string(), "ip6");
        assert_eq!(Family::from_raw(99), Family::Other(99));
    }

    #[test]
    fn hooks_depend_on_family() {
        assert_eq!(Hook::Prerouting.to_raw(Family::Inet), 0);
        assert_eq!(Hook::Postrouting.to_raw(Family::Ipv4), 4);
        assert_eq!(Hook::Ingress.to_raw(Family::Netdev), 0);
        assert_eq!(Hook::from_raw(Family::Netdev, 0), Hook::Ingress);
        assert_eq!(Hook::from_raw(Family::Inet, 5), Hook::Ingress);
        assert_eq!(Hook::from_raw(Family::Arp, 1), Hook::Output);
        for h in [Hook::Input, Hook::Output, Hook::Forward] {
            assert_eq!(Hook::from_raw(Family::Arp, h.to_raw(Family::Arp)), h);
        }
        for h in [
            Hook::Prerouting,
            Hook::Input,
            Hook::Forward,
            Hook::Output,
            Hook::Postrouting,
        ] {
            assert_eq!(Hook::from_raw(Family::Ipv6, h.to_raw(Family::Ipv6)), h);
        }
    }

    #[test]
    fn policies_and_verdicts_use_kernel_codes() {
        assert_eq!(Policy::Drop.to_raw(), 0);
        assert_eq!(Policy::from_raw(0), Policy::Drop);
        assert_eq!(Policy::from_raw(1), Policy::Accept);
        assert_eq!(Verdict::Return.code(), -5);
        assert_eq!(
            Verdict::from_parts(-3, Some("x".into())),
            Verdict::Jump("x".into())
        );
        assert_eq!((TableFlags::OWNER | TableFlags::PERSIST).0, 0x6);
    }
}
