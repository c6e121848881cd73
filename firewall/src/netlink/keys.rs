//! The named values inside expressions: meta and ct keys, comparison operators, payload bases
//! and conntrack directions. A value outside these lists keeps its expression raw.

/// Declares a keyed enum with its kernel values and nft names; unknown values are not
/// representable, so an expression carrying one is kept raw.
macro_rules! keys {
    ($(#[$m:meta])* $name:ident { $($var:ident = $val:expr, $text:expr;)* }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($var,)* }

        impl $name {
            pub fn to_raw(self) -> u32 {
                match self { $($name::$var => $val,)* }
            }

            pub fn from_raw(v: u32) -> Option<$name> {
                match v { $($val => Some($name::$var),)* _ => None }
            }

            /// The keyword nft uses for it.
            pub fn nft_name(self) -> &'static str {
                match self { $($name::$var => $text,)* }
            }
        }
    };
}

keys!(
    /// What a `meta` expression loads.
    MetaKey {
        Len = 0, "length";
        Protocol = 1, "protocol";
        Priority = 2, "priority";
        Mark = 3, "mark";
        Iif = 4, "iif";
        Oif = 5, "oif";
        IifName = 6, "iifname";
        OifName = 7, "oifname";
        IifType = 8, "iiftype";
        OifType = 9, "oiftype";
        SkUid = 10, "skuid";
        SkGid = 11, "skgid";
        NfTrace = 12, "nftrace";
        RtClassId = 13, "rtclassid";
        SecMark = 14, "secmark";
        NfProto = 15, "nfproto";
        L4Proto = 16, "l4proto";
        BriIifName = 17, "ibrname";
        BriOifName = 18, "obrname";
        PktType = 19, "pkttype";
        Cpu = 20, "cpu";
        IifGroup = 21, "iifgroup";
        OifGroup = 22, "oifgroup";
        Cgroup = 23, "cgroup";
        Prandom = 24, "random";
        SecPath = 25, "ipsec";
        IifKind = 26, "iifkind";
        OifKind = 27, "oifkind";
        BriIifPvid = 28, "ibrpvid";
        BriIifVproto = 29, "ibrvproto";
        TimeNs = 30, "time";
        TimeDay = 31, "day";
        TimeHour = 32, "hour";
        Sdif = 33, "sdif";
        SdifName = 34, "sdifname";
    }
);

keys!(
    /// What a `ct` expression loads.
    CtKey {
        State = 0, "state";
        Direction = 1, "direction";
        Status = 2, "status";
        Mark = 3, "mark";
        SecMark = 4, "secmark";
        Expiration = 5, "expiration";
        Helper = 6, "helper";
        L3Protocol = 7, "l3proto";
        Src = 8, "saddr";
        Dst = 9, "daddr";
        Protocol = 10, "protocol";
        ProtoSrc = 11, "proto-src";
        ProtoDst = 12, "proto-dst";
        Labels = 13, "label";
        Pkts = 14, "packets";
        Bytes = 15, "bytes";
        AvgPkt = 16, "avgpkt";
        Zone = 17, "zone";
        EventMask = 18, "event";
        SrcIp = 19, "ip saddr";
        DstIp = 20, "ip daddr";
        SrcIp6 = 21, "ip6 saddr";
        DstIp6 = 22, "ip6 daddr";
        Id = 23, "id";
    }
);

keys!(
    /// A comparison operator.
    CmpOp {
        Eq = 0, "==";
        Neq = 1, "!=";
        Lt = 2, "<";
        Lte = 3, "<=";
        Gt = 4, ">";
        Gte = 5, ">=";
    }
);

keys!(
    /// Where a `payload` expression reads from.
    PayloadBase {
        LinkLayer = 0, "ll";
        Network = 1, "nh";
        Transport = 2, "th";
        Inner = 3, "ih";
    }
);

keys!(
    /// What a `fib` expression looks up (enum nft_fib_result).
    FibResult {
        Oif = 1, "oif";
        OifName = 2, "oifname";
        AddrType = 3, "type";
    }
);

/// The conntrack direction of a `ct` expression; encoded as a single byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CtDirection {
    Original,
    Reply,
}

impl CtDirection {
    pub fn to_raw(self) -> u8 {
        match self {
            CtDirection::Original => 0,
            CtDirection::Reply => 1,
        }
    }

    pub fn from_raw(v: u8) -> Option<CtDirection> {
        match v {
            0 => Some(CtDirection::Original),
            1 => Some(CtDirection::Reply),
            _ => None,
        }
    }
}
