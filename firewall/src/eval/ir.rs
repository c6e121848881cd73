//! The evaluator's rules: what a rule loads, tests, changes and decides, in the order the kernel
//! runs it (read from nf_tables expressions by `lower`, from saved iptables rules by `legacy`),
//! and a rule's steps in words close to nft's.

use crate::netlink::{CmpOp, CtDirection, CtKey, FibResult, MetaKey, PayloadBase};

/// Where a register's value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Src {
    Meta(MetaKey),
    Payload {
        base: PayloadBase,
        offset: u32,
        len: u32,
    },
    Ct {
        key: CtKey,
        dir: Option<CtDirection>,
    },
    Fib {
        result: FibResult,
        flags: u32,
    },
    /// A constant (`immediate`).
    Imm(Vec<u8>),
    /// x_tables' view of the connection's state: `1 << (ctinfo + 1)`, with DNAT and SNAT bits.
    XtCtState,
    /// A condition x_tables decides that the evaluator computes from the connection:
    /// `addrtype`, `rpfilter`.
    XtFixed(XtFixed),
    /// Something the evaluator does not read (a socket, a route, a hash, an extension header).
    Unknown(String),
}

/// x_tables matches decided from the connection's path alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum XtFixed {
    /// `-m addrtype`: the masks of address types (0 = any) and their inversions.
    AddrType {
        src: u16,
        dst: u16,
        inv_src: bool,
        inv_dst: bool,
    },
    /// `-m rpfilter [--invert]`: the reverse path is valid for a real source.
    RpFilter { invert: bool },
}

/// A value loaded into registers, maybe masked (`bitwise`: `(v & mask) ^ xor`), then changed
/// further by the operations in `then`, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Load {
    pub src: Src,
    pub len: u32,
    pub mask: Option<(Vec<u8>, Vec<u8>)>,
    pub then: Vec<RegOp>,
}

/// An operation on a register's bytes after its load and first mask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegOp {
    /// `byteorder`: hton/ntoh of the first `len` bytes in `size`-byte words (on a
    /// little-endian host both swap each word; on a big-endian one both leave it).
    Swap { size: u32, len: u32 },
    /// `bitwise` mask-and-xor after a swap or a shift.
    MaskXor(Vec<u8>, Vec<u8>),
    /// `bitwise` shift of host-order 32-bit words by `by` bits (left or right), over `len`
    /// bytes, carrying between words as the kernel does.
    Shift { left: bool, by: u32, len: u32 },
}

impl Load {
    pub fn new(src: Src, len: u32) -> Load {
        Load {
            src,
            len,
            mask: None,
            then: Vec::new(),
        }
    }

    /// The bytes the load takes in a concatenation (each part padded to whole registers).
    pub fn padded(&self) -> u32 {
        self.len.div_ceil(4) * 4
    }
}

/// What a condition checks of its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Test {
    Cmp {
        op: CmpOp,
        data: Vec<u8>,
    },
    /// `range` and x_tables port ranges: `lo ≤ key ≤ hi` (memcmp order), or not.
    Range {
        neg: bool,
        lo: Vec<u8>,
        hi: Vec<u8>,
    },
    /// A list of ranges written in the rule itself (x_tables `multiport`, iptables-save's).
    InList {
        neg: bool,
        ranges: Vec<(Vec<u8>, Vec<u8>)>,
    },
    /// A lookup in a set of the rule's table, by name.
    InSet {
        set: String,
        neg: bool,
    },
    /// x_tables' `set` match (`-m set --match-set NAME src,dst`): a test of the ipset against
    /// the connection's dimensions, in the order the match lists them; the key is empty, the
    /// walk loads each dimension itself. `src` has bit `i + 1` set when dimension `i` (from 0)
    /// is taken from the source, as the kernel's `IPSET_DIM_*_SRC`.
    Ipset {
        set: IpsetRef,
        dims: u8,
        src: u8,
        neg: bool,
    },
}

/// The ipset a `set` match names: by its name in a legacy save, by the kernel's index in
/// iptables-nft's x_tables (all its `xt_set_info` keeps).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IpsetRef {
    Name(String),
    Index(u16),
}

impl std::fmt::Display for IpsetRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IpsetRef::Name(n) => f.write_str(n),
            IpsetRef::Index(i) => write!(f, "with kernel index {i}"),
        }
    }
}

/// The `src,dst` words of a `set` match's dimensions.
pub fn ipset_dims(dims: u8, src: u8) -> String {
    (0..dims.min(6))
        .map(|i| if src & (2 << i) != 0 { "src" } else { "dst" })
        .collect::<Vec<_>>()
        .join(",")
}

/// One condition: a key (one load, or several for a concatenation) and its test.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cond {
    pub key: Vec<Load>,
    pub test: Test,
}

/// How a mark changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MarkOp {
    /// `meta mark set V` / `ct mark set V`: the value of a load (a constant, the other mark, …).
    Set(Load),
    /// `new = (old & keep) ^ xor`, as x_tables' MARK and CONNMARK --set-xmark write it.
    AndXor { keep: u32, xor: u32 },
    /// CONNMARK --save-mark: `ct = (ct & !ctmask) ^ (mark & nfmask)`.
    SaveToCt { ctmask: u32, nfmask: u32 },
    /// CONNMARK --restore-mark: `mark = (mark & !nfmask) ^ (ct & ctmask)`.
    RestoreFromCt { ctmask: u32, nfmask: u32 },
}

/// What a rule decides when the packet reaches its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Act {
    Accept,
    /// `drop`, `reject`, `-j DROP`, `-j REJECT`.
    Drop,
    Jump(String),
    Goto(String),
    Return,
    /// No verdict: the packet goes on to the next rule.
    Continue,
    /// `… vmap @set` / `vmap { … }`: the verdict an element of the map gives for the key.
    Vmap {
        key: Vec<Load>,
        set: String,
    },
    /// A NAT statement (`dnat`, `masquerade`, `-j DNAT`): the packet leaves this base chain
    /// accepted.
    Nat,
    /// A verdict the evaluator cannot follow (queue, an unknown target): the packet may go.
    Unknown(String),
}

/// One step of a rule, in the kernel's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    Cond(Cond),
    /// A match that holds or not whatever the connection (`limit`, `quota`, `ct count`,
    /// x_tables' connlimit): for one new connection from a source not flooding, its answer.
    Fixed(bool, &'static str),
    /// A limit that refuses past a rate or a count (`limit rate over`, `ct count over`, a
    /// `dynset` carrying one, `--hashlimit-above`, `--connlimit-above`, `recent --hitcount`):
    /// it does not hold for a connection not flooding, so the rule goes on, but the walk
    /// records that the way passed it (a refusal that must stay ahead of any opening).
    Limit(String),
    /// A `dynset` add or update of set `.0`: a later lookup in that set by the same packet
    /// cannot be told from the set's listed elements.
    SetAdd(String),
    /// `notrack` in a chain ahead of conntrack: the connection is untracked from here on.
    NoTrack,
    Mark(MarkOp),
    CtMark(MarkOp),
    Act(Act),
}

/// A rule of a chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IrRule {
    pub items: Vec<Item>,
    /// The nf_tables handle, or the line's position in a save for legacy tables.
    pub handle: u64,
    /// How it is shown: a legacy rule's spec as saved; for nf_tables, its comment (the rule is
    /// put in words from its steps only when it decides something).
    pub text: RuleText,
    /// Carries the mesh's mark.
    pub marked: bool,
}

/// How a rule is shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleText {
    /// As iptables-save printed it.
    Saved(String),
    /// An nf_tables rule, with its comment.
    Nft(Option<String>),
}

impl IrRule {
    /// The rule as a person reads it: `handle 7: meta l4proto 6 th dport 22 accept comment "…"`.
    pub fn text(&self) -> String {
        match &self.text {
            RuleText::Saved(s) => s.clone(),
            RuleText::Nft(None) => format!("handle {}: {}", self.handle, render(&self.items)),
            RuleText::Nft(Some(c)) => format!(
                "handle {}: {} comment \"{c}\"",
                self.handle,
                render(&self.items)
            ),
        }
    }

    /// Every value the rule loads: its conditions' keys, a verdict map's key, a mark's source.
    fn loads(&self) -> impl Iterator<Item = &Load> + '_ {
        self.items.iter().flat_map(|it| -> &[Load] {
            match it {
                Item::Cond(c) => &c.key,
                Item::Act(Act::Vmap { key, .. }) => key,
                Item::Mark(MarkOp::Set(l)) | Item::CtMark(MarkOp::Set(l)) => {
                    std::slice::from_ref(l)
                }
                _ => &[],
            }
        })
    }

    /// Whether a walk's answer could depend on the connection's port through this rule: it
    /// loads anything of the transport header, or (see [`IrRule::reads_port_anyhow`]) more.
    pub fn reads_port(&self) -> bool {
        self.reads_port_anyhow()
            || self.loads().any(|l| {
                matches!(
                    l.src,
                    Src::Payload {
                        base: PayloadBase::Transport,
                        ..
                    }
                )
            })
    }

    /// Whether the rule reads the port where the port index cannot keep it from other ports'
    /// walks: conntrack's ports (read from the connection even after a DNAT whose destination
    /// is not known, where every rule is a candidate) or an ipset, which may hold ports.
    pub fn reads_port_anyhow(&self) -> bool {
        self.items.iter().any(|it| {
            matches!(
                it,
                Item::Cond(Cond {
                    test: Test::Ipset { .. },
                    ..
                })
            )
        }) || self.loads().any(|l| {
            matches!(
                l.src,
                Src::Ct {
                    key: CtKey::ProtoDst | CtKey::ProtoSrc,
                    ..
                }
            )
        })
    }

    /// The destination ports the rule is about when its first port test is a plain equality
    /// or a short literal set: the index the walk uses to skip rules that cannot match.
    pub fn port_keys(&self) -> Option<Vec<u16>> {
        for it in &self.items {
            let Item::Cond(c) = it else { continue };
            if c.key.len() != 1 || !is_dport(&c.key[0]) {
                continue;
            }
            return match &c.test {
                Test::Cmp {
                    op: CmpOp::Eq,
                    data,
                } if data.len() == 2 => Some(vec![u16::from_be_bytes([data[0], data[1]])]),
                // `--dport 9000` reads as the range 9000:9000.
                Test::Range { neg: false, lo, hi } => {
                    let (lo, hi) = (be16(lo)?, be16(hi)?);
                    (hi >= lo && hi - lo <= 64).then(|| (lo..=hi).collect())
                }
                Test::InList { neg: false, ranges } if ranges.len() <= 16 => {
                    let mut ports = Vec::new();
                    for (lo, hi) in ranges {
                        let (lo, hi) = (be16(lo)?, be16(hi)?);
                        // A reversed range (8200:8100) holds no port; it is no list of them.
                        if hi < lo || hi - lo > 64 {
                            return None;
                        }
                        ports.extend(lo..=hi);
                    }
                    Some(ports)
                }
                _ => None,
            };
        }
        None
    }
}

fn be16(b: &[u8]) -> Option<u16> {
    Some(u16::from_be_bytes(b.get(..2)?.try_into().ok()?))
}

/// Whether a load is the packet's destination port.
pub fn is_dport(l: &Load) -> bool {
    l.mask.is_none()
        && l.then.is_empty()
        && matches!(
            l.src,
            Src::Payload {
                base: PayloadBase::Transport,
                offset: 2,
                len: 2
            }
        )
}

/// Whether a load is the connection's original destination port.
pub fn is_orig_dport(l: &Load) -> bool {
    l.mask.is_none()
        && l.then.is_empty()
        && matches!(
            l.src,
            Src::Ct {
                key: CtKey::ProtoDst,
                dir: Some(CtDirection::Original)
            }
        )
}

/// A condition on something the evaluator does not read.
pub fn unknown_cond(what: &str) -> Cond {
    Cond {
        key: vec![Load::new(Src::Unknown(what.to_string()), 4)],
        test: Test::Cmp {
            op: CmpOp::Eq,
            data: vec![0; 4],
        },
    }
}

/// A rule's steps in words close to nft's, for the operator reading why: `meta l4proto == 6
/// th dport == 9000 accept`.
pub fn render(items: &[Item]) -> String {
    let mut out: Vec<String> = Vec::new();
    for it in items {
        match it {
            Item::Cond(c) => {
                let key: Vec<String> = c.key.iter().map(load_name).collect();
                let key = key.join(" . ");
                let value = |d: &[u8]| value_text(&c.key, d);
                out.push(match &c.test {
                    Test::Cmp { op, data } => {
                        let op = match op {
                            CmpOp::Eq => "",
                            other => other.nft_name(),
                        };
                        if op.is_empty() {
                            format!("{key} {}", value(data))
                        } else {
                            format!("{key} {op} {}", value(data))
                        }
                    }
                    Test::Range { neg, lo, hi } => format!(
                        "{key} {}{}-{}",
                        if *neg { "!= " } else { "" },
                        value(lo),
                        value(hi)
                    ),
                    Test::InList { neg, ranges } => format!(
                        "{key} {}{{ {} }}",
                        if *neg { "!= " } else { "" },
                        ranges
                            .iter()
                            .map(|(lo, hi)| if lo == hi {
                                value(lo)
                            } else {
                                format!("{}-{}", value(lo), value(hi))
                            })
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    Test::InSet { set, neg } => {
                        format!("{key} {}@{set}", if *neg { "!= " } else { "" })
                    }
                    Test::Ipset {
                        set,
                        dims,
                        src,
                        neg,
                    } => format!(
                        "-m set {}--match-set {} {}",
                        if *neg { "! " } else { "" },
                        match set {
                            IpsetRef::Name(n) => n.clone(),
                            IpsetRef::Index(i) => format!("#{i}"),
                        },
                        ipset_dims(*dims, *src)
                    ),
                });
            }
            Item::Fixed(_, what) => out.push(format!("({what})")),
            Item::Limit(what) => out.push(format!("({what})")),
            Item::SetAdd(set) => out.push(format!("add @{set}")),
            Item::NoTrack => out.push("notrack".into()),
            Item::Mark(_) => out.push("meta mark set …".into()),
            Item::CtMark(_) => out.push("ct mark set …".into()),
            Item::Act(a) => out.push(act_text(a)),
        }
    }
    out.join(" ")
}

/// A verdict in words: `accept`, `jump wan`, `tcp dport vmap @ports`.
pub fn act_text(a: &Act) -> String {
    match a {
        Act::Accept => "accept".into(),
        Act::Drop => "drop".into(),
        Act::Jump(c) => format!("jump {c}"),
        Act::Goto(c) => format!("goto {c}"),
        Act::Return => "return".into(),
        Act::Continue => "continue".into(),
        Act::Vmap { key, set } => format!(
            "{} vmap @{set}",
            key.iter().map(load_name).collect::<Vec<_>>().join(" . ")
        ),
        Act::Nat => "nat".into(),
        Act::Unknown(w) => w.clone(),
    }
}

fn load_name(l: &Load) -> String {
    let base = match &l.src {
        Src::Meta(k) => format!("meta {}", k.nft_name()),
        Src::Payload {
            base: PayloadBase::Transport,
            offset: 2,
            len: 2,
        } => "th dport".into(),
        Src::Payload {
            base: PayloadBase::Transport,
            offset: 0,
            len: 2,
        } => "th sport".into(),
        Src::Payload {
            base: PayloadBase::Transport,
            offset: 13,
            len: 1,
        } => "tcp flags".into(),
        Src::Payload {
            base: PayloadBase::Network,
            offset,
            len,
        } => match (offset, len) {
            (12, 4) => "ip saddr".into(),
            (16, 4) => "ip daddr".into(),
            (8, 16) => "ip6 saddr".into(),
            (24, 16) => "ip6 daddr".into(),
            (12, _) => format!("ip saddr (first {len} bytes)"),
            (8, _) => format!("ip6 saddr (first {len} bytes)"),
            _ => format!("network header @{offset},{len}"),
        },
        Src::Payload { base, offset, len } => format!("{} @{offset},{len}", base.nft_name()),
        Src::Ct { key, dir } => match dir {
            Some(CtDirection::Original) => format!("ct original {}", key.nft_name()),
            Some(CtDirection::Reply) => format!("ct reply {}", key.nft_name()),
            None => format!("ct {}", key.nft_name()),
        },
        Src::Fib { result, .. } => format!("fib {}", result.nft_name()),
        Src::Imm(_) => "a constant".into(),
        Src::XtCtState => "conntrack state".into(),
        Src::XtFixed(XtFixed::AddrType { .. }) => "addrtype".into(),
        Src::XtFixed(XtFixed::RpFilter { .. }) => "rpfilter".into(),
        Src::Unknown(w) => w.clone(),
    };
    let mut out = match &l.mask {
        Some((m, _)) => format!("{base} & 0x{}", hex(m)),
        None => base,
    };
    for op in &l.then {
        match op {
            RegOp::Swap { .. } => out = format!("hton({out})"),
            RegOp::MaskXor(m, x) => out = format!("({out} & 0x{}) ^ 0x{}", hex(m), hex(x)),
            RegOp::Shift { left, by, .. } => {
                out = format!("({out} {} {by})", if *left { "<<" } else { ">>" })
            }
        }
    }
    out
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn value_text(keys: &[Load], d: &[u8]) -> String {
    let only = keys.first().filter(|_| keys.len() == 1);
    match only.map(|l| &l.src) {
        Some(Src::Payload {
            base: PayloadBase::Transport,
            len: 2,
            ..
        })
        | Some(Src::Ct {
            key: CtKey::ProtoDst | CtKey::ProtoSrc,
            ..
        }) if d.len() == 2 => u16::from_be_bytes([d[0], d[1]]).to_string(),
        Some(Src::Meta(
            MetaKey::IifName | MetaKey::OifName | MetaKey::BriIifName | MetaKey::BriOifName,
        )) => {
            let name: Vec<u8> = d.iter().copied().take_while(|b| *b != 0).collect();
            let exact = d.contains(&0);
            format!(
                "\"{}{}\"",
                String::from_utf8_lossy(&name),
                if exact { "" } else { "*" }
            )
        }
        Some(Src::Payload {
            base: PayloadBase::Network,
            ..
        }) if d.len() == 4 || d.len() == 16 => match d.len() {
            4 => std::net::Ipv4Addr::from(<[u8; 4]>::try_from(d).unwrap_or_default()).to_string(),
            _ => std::net::Ipv6Addr::from(<[u8; 16]>::try_from(d).unwrap_or_default()).to_string(),
        },
        Some(Src::Meta(MetaKey::L4Proto)) | Some(Src::Meta(MetaKey::PktType)) if d.len() == 1 => {
            d[0].to_string()
        }
        _ => format!("0x{}", hex(d)),
    }
}
