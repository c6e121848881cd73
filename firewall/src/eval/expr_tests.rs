//! The expression table's rows (docs/EXPRESSIONS.md) with hand-built expressions (`last`,
//! `queue`, `flow_offload`, `inner`, `tunnel`, an unknown expression, `-m set`), and each fix
//! read at the level of its steps. The same rows from a real listing are in
//! `tests/kernel_expressions.rs` (`queue` and `flow_offload`, which this kernel refuses, as
//! stand-ins on a listed rule).

use super::ir::{Item, RegOp};
use super::lower::from_nft;
use super::model::Snapshot;
use super::*;
use crate::netlink::attr;
use crate::netlink::{
    Chain, ChainHook, ChainType, CmpOp, CtKey, Expr, Family, FibResult, Hook, ImmediateData,
    MetaKey, PayloadBase, Policy, Rule, Table, TableFlags, Verdict as NfVerdict,
};

/// An expression kept raw, its NFTA_EXPR_DATA written by `body`.
fn raw(name: &str, body: impl Fn(&mut Vec<u8>)) -> Expr {
    let mut data = Vec::new();
    body(&mut data);
    Expr::Raw {
        name: name.into(),
        data,
    }
}

/// An expression nested whole (NFTA_EXPR_NAME, NFTA_EXPR_DATA) under attribute `ty`.
fn nested_expr(buf: &mut Vec<u8>, ty: u16, e: &Expr) {
    let mut list = Vec::new();
    e.encode(&mut list);
    // `encode` writes an NFTA_LIST_ELEM: its payload is the name and data wanted here.
    let inner = &list[4..u16::from_ne_bytes([list[0], list[1]]) as usize];
    attr::put(buf, ty, inner);
}

fn limit(over: bool) -> Expr {
    raw("limit", |b| {
        attr::put_be32(b, 1, 10);
        attr::put_be32(b, 2, 1);
        attr::put_be32(b, 5, u32::from(over));
    })
}

fn connlimit(over: bool) -> Expr {
    raw("connlimit", |b| {
        attr::put_be32(b, 1, 20);
        attr::put_be32(b, 2, u32::from(over));
    })
}

fn dynset(set: &str, exprs: &[Expr]) -> Expr {
    raw("dynset", |b| {
        attr::put_str(b, 1, set);
        attr::put_be32(b, 3, 0);
        attr::put_be32(b, 4, 1);
        match exprs {
            [] => {}
            [one] => nested_expr(b, 7, one),
            many => {
                let n = attr::nest_start(b, 10);
                for e in many {
                    e.encode(b);
                }
                attr::nest_end(b, n);
            }
        }
    })
}

fn saddr() -> Expr {
    Expr::Payload {
        base: PayloadBase::Network,
        offset: 12,
        len: 4,
        dreg: 1,
    }
}

fn dport_is(p: u16) -> Vec<Expr> {
    vec![
        Expr::Payload {
            base: PayloadBase::Transport,
            offset: 2,
            len: 2,
            dreg: 1,
        },
        Expr::Cmp {
            sreg: 1,
            op: CmpOp::Eq,
            data: p.to_be_bytes().to_vec(),
        },
    ]
}

fn verdict(v: NfVerdict) -> Expr {
    Expr::Immediate {
        dreg: 0,
        data: ImmediateData::Verdict(v),
    }
}

fn imm(reg: u32, v: &[u8]) -> Expr {
    Expr::Immediate {
        dreg: reg,
        data: ImmediateData::Value(v.to_vec()),
    }
}

fn lower(exprs: &[Expr]) -> Vec<Item> {
    from_nft(exprs, &|_| None)
}

/// A model of one `inet t` table whose chain `c` hooks input with policy drop.
fn model(rules: Vec<Vec<Expr>>) -> Model {
    let mut snap = Snapshot::default();
    snap.ruleset.tables.push(Table {
        family: Family::Inet,
        name: "t".into(),
        flags: TableFlags::NONE,
        handle: 1,
        use_count: 0,
        owner: None,
        userdata: None,
        comment: None,
    });
    snap.ruleset.chains.push(Chain {
        family: Family::Inet,
        table: "t".into(),
        name: "c".into(),
        handle: 1,
        hook: Some(ChainHook {
            hook: Hook::Input,
            hook_num: 1,
            priority: 0,
            device: None,
        }),
        policy: Some(Policy::Drop),
        chain_type: Some(ChainType::Filter),
        flags: 0,
        use_count: 0,
        userdata: None,
        comment: None,
    });
    for (i, exprs) in rules.into_iter().enumerate() {
        snap.ruleset.rules.push(Rule {
            family: Family::Inet,
            table: "t".into(),
            chain: "c".into(),
            handle: 10 + i as u64,
            position: None,
            exprs,
            userdata: None,
            comment: None,
        });
    }
    Model::new(&snap)
}

fn conn(port: u16) -> Conn {
    let mut c = Conn::incoming(Fam::V4, 6, port, "eth0");
    c.iif_index = Some(2);
    c
}

fn answer(m: &Model, port: u16) -> Answer {
    m.evaluate(&conn(port), &Addrs::all(Fam::V4))
}

fn word(m: &Model, port: u16) -> &'static str {
    answer(m, port).parts[0].fate.word()
}

/// `add @rate_limit { ip saddr limit rate over 10/second } drop`, then `tcp dport 22 accept`.
fn flood_limits() -> Model {
    model(vec![
        vec![
            saddr(),
            dynset("rate_limit", &[limit(true)]),
            verdict(NfVerdict::Drop),
        ],
        vec![
            saddr(),
            dynset("connection_limit", &[connlimit(true)]),
            verdict(NfVerdict::Drop),
        ],
        [dport_is(22), vec![verdict(NfVerdict::Accept)]].concat(),
    ])
}

#[test]
fn a_dynset_with_a_limit_over_is_a_limit_met_not_a_catch_all() {
    let items = lower(&[
        saddr(),
        dynset("rl", &[limit(true)]),
        verdict(NfVerdict::Drop),
    ]);
    assert!(
        items
            .iter()
            .any(|i| matches!(i, Item::Limit(w) if w.contains("rl"))),
        "{items:?}"
    );
    let m = flood_limits();
    let a = answer(&m, 9000);
    assert_eq!(a.parts.len(), 1, "{a:?}");
    // The policy refuses, not the first limit; both limits are on the way.
    assert!(
        matches!(&a.parts[0].fate, Fate::NotAdmitted { by } if by.handle.is_none()),
        "{a:?}"
    );
    let met: Vec<Option<usize>> = a.parts[0].limits.iter().map(|l| l.index).collect();
    assert_eq!(met, vec![Some(0), Some(1)]);
    let a = answer(&m, 22);
    assert_eq!(a.parts[0].fate, Fate::Admitted);
    assert_eq!(a.parts[0].limits.len(), 2);
}

#[test]
fn an_opening_is_placed_behind_the_limits() {
    let m = flood_limits();
    let p = m.place("inet t", "c", &conn(9000), &Addrs::all(Fam::V4));
    assert!(
        matches!(&p, Some(Placement::At { index: None, .. })),
        "{p:?}"
    );
}

#[test]
fn a_placement_ahead_of_a_limit_in_its_chain_moves_behind_it() {
    // The guard itself (the kernel test reaches it through a chain entered twice): an `At`
    // index at or before a limit met in the same chain moves behind the last such limit.
    let m = flood_limits();
    let parts = m
        .evaluate_base("inet t", "c", &conn(9000), &Addrs::all(Fam::V4), true)
        .unwrap();
    let by = parts[0].limits[0].clone();
    let p = m.after_limits(
        Placement::At {
            chain: "c".into(),
            index: Some(0),
            by,
        },
        &parts,
    );
    assert!(matches!(p, Placement::At { index: Some(2), .. }), "{p:?}");
}

#[test]
fn a_dynset_that_only_adds_cannot_change_a_verdict_but_a_later_lookup_of_it_is_doubtful() {
    let m = model(vec![[
        dport_is(9000),
        vec![saddr(), dynset("seen", &[]), verdict(NfVerdict::Accept)],
    ]
    .concat()]);
    assert_eq!(word(&m, 9000), "admitted");
    assert!(answer(&m, 9000).parts[0].limits.is_empty());
    let items = lower(&[
        saddr(),
        dynset("seen", &[]),
        saddr(),
        Expr::Lookup {
            set: "seen".into(),
            sreg: 1,
            dreg: None,
            set_id: None,
            flags: 0,
        },
        verdict(NfVerdict::Accept),
    ]);
    assert!(
        matches!(items[0], Item::SetAdd(ref s) if s == "seen"),
        "{items:?}"
    );
}

#[test]
fn plain_limits_hold_and_over_limits_are_met() {
    for (e, holds) in [
        (limit(false), true),
        (connlimit(false), true),
        (
            raw("quota", |b| {
                attr::put_be32(b, 1, 1000);
                attr::put_be32(b, 2, 0);
            }),
            true,
        ),
    ] {
        let items = lower(&[e]);
        assert!(
            matches!(items[..], [Item::Fixed(h, _)] if h == holds),
            "{items:?}"
        );
    }
    for e in [limit(true), connlimit(true)] {
        let items = lower(&[e]);
        assert!(matches!(items[..], [Item::Limit(_)]), "{items:?}");
    }
    // `limit rate 5/second reject` as Arch has it: a rate-limited reject refuses.
    let m = model(vec![vec![limit(false), verdict(NfVerdict::Drop)]]);
    match &answer(&m, 9000).parts[0].fate {
        Fate::NotAdmitted { by } => assert!(by.handle.is_some()),
        f => panic!("{f:?}"),
    }
}

fn fib(flags: u32) -> Expr {
    Expr::Fib {
        result: FibResult::Oif,
        flags,
        dreg: 1,
    }
}

#[test]
fn fib_exists_holds_and_missing_does_not_for_a_real_source() {
    use crate::netlink::consts::{NFTA_FIB_F_IIF, NFTA_FIB_F_MARK, NFTA_FIB_F_PRESENT};
    let f = 1 | NFTA_FIB_F_MARK | NFTA_FIB_F_IIF | NFTA_FIB_F_PRESENT;
    let cmp1 = |v: u8| Expr::Cmp {
        sreg: 1,
        op: CmpOp::Eq,
        data: vec![v, 0, 0, 0],
    };
    let exists = model(vec![vec![fib(f), cmp1(1), verdict(NfVerdict::Accept)]]);
    assert_eq!(word(&exists, 9000), "admitted");
    let missing = model(vec![
        vec![fib(f), cmp1(0), verdict(NfVerdict::Drop)],
        vec![verdict(NfVerdict::Accept)],
    ]);
    assert_eq!(word(&missing, 9000), "admitted");
    // `fib daddr . iif oif exists` is not decided.
    let d = model(vec![vec![
        fib(2 | NFTA_FIB_F_IIF | NFTA_FIB_F_PRESENT),
        cmp1(1),
        verdict(NfVerdict::Accept),
    ]]);
    assert_eq!(word(&d, 9000), "doubtful");
}

fn byteorder(len: u32, size: u32) -> Expr {
    raw("byteorder", |b| {
        attr::put_be32(b, 1, 1);
        attr::put_be32(b, 2, 1);
        attr::put_be32(b, 3, 1);
        attr::put_be32(b, 4, len);
        attr::put_be32(b, 5, size);
    })
}

#[test]
fn byteorder_swaps_a_known_value_and_a_short_swap_is_none() {
    let mark = Expr::Meta {
        key: MetaKey::Mark,
        dreg: 1,
    };
    let set_mark = raw("meta", |b| {
        attr::put_be32(b, 2, MetaKey::Mark.to_raw());
        attr::put_be32(b, 3, 1);
    });
    // `meta mark set 0x15`, then `meta mark 0x10-0x20 accept` as nft writes it.
    let m = model(vec![
        vec![imm(1, &0x15u32.to_ne_bytes()), set_mark.clone()],
        vec![
            mark.clone(),
            byteorder(4, 4),
            Expr::Cmp {
                sreg: 1,
                op: CmpOp::Gte,
                data: 0x10u32.to_be_bytes().to_vec(),
            },
            Expr::Cmp {
                sreg: 1,
                op: CmpOp::Lte,
                data: 0x20u32.to_be_bytes().to_vec(),
            },
            verdict(NfVerdict::Accept),
        ],
    ]);
    assert_eq!(word(&m, 9000), "admitted");
    // hton(reg, 2, 1) of `meta l4proto` leaves the load as it was.
    let items = lower(&[
        Expr::Meta {
            key: MetaKey::L4Proto,
            dreg: 1,
        },
        byteorder(1, 2),
        Expr::Cmp {
            sreg: 1,
            op: CmpOp::Eq,
            data: vec![6],
        },
    ]);
    assert!(
        matches!(&items[0], Item::Cond(c) if c.key[0].then.is_empty()),
        "{items:?}"
    );
    // A swap of a value not known (the ct mark after an unknown change) stays undecided.
    let items = lower(&[mark, byteorder(4, 4)]);
    assert!(items.is_empty());
    let v = super::values::apply_then(vec![1, 2, 3, 4], &[RegOp::Swap { size: 4, len: 4 }], 4);
    assert_eq!(
        v,
        if cfg!(target_endian = "little") {
            vec![4, 3, 2, 1]
        } else {
            vec![1, 2, 3, 4]
        }
    );
}

#[test]
fn a_shift_of_the_mark_is_followed() {
    let v = super::values::apply_then(
        0xff00u32.to_ne_bytes().to_vec(),
        &[RegOp::Shift {
            left: false,
            by: 8,
            len: 4,
        }],
        4,
    );
    assert_eq!(v, 0xffu32.to_ne_bytes().to_vec());
    let v = super::values::apply_then(
        0xffu32.to_ne_bytes().to_vec(),
        &[RegOp::Shift {
            left: true,
            by: 4,
            len: 4,
        }],
        4,
    );
    assert_eq!(v, 0xff0u32.to_ne_bytes().to_vec());
}

#[test]
fn rows_the_kernel_here_cannot_load() {
    let accept_after = |e: Expr| {
        model(vec![
            [dport_is(9000), vec![e, verdict(NfVerdict::Accept)]].concat()
        ])
    };
    // `last`: a timestamp kept, it changes no verdict.
    assert_eq!(word(&accept_after(raw("last", |_| {})), 9000), "admitted");
    // `queue`: to userspace, whose verdict is not known.
    let m = model(vec![[
        dport_is(9000),
        vec![raw("queue", |b| attr::put_be32(b, 1, 1))],
    ]
    .concat()]);
    assert_eq!(word(&m, 9000), "doubtful");
    // `flow add @ft`: a new connection is not offloaded and the rule stops.
    assert_eq!(
        word(
            &accept_after(raw("flow_offload", |b| attr::put_str(b, 1, "ft"))),
            9000
        ),
        "not-admitted"
    );
    // `inner`, `tunnel`: loaders whose value is not read.
    for name in ["inner", "tunnel"] {
        let m = model(vec![[
            dport_is(9000),
            vec![
                raw(name, |b| attr::put_be32(b, 1, 1)),
                Expr::Cmp {
                    sreg: 1,
                    op: CmpOp::Eq,
                    data: vec![1, 0, 0, 0],
                },
                verdict(NfVerdict::Accept),
            ],
        ]
        .concat()]);
        assert_eq!(word(&m, 9000), "doubtful", "{name}");
    }
    // An expression this host does not know is a step that cannot be told, never a no-op.
    assert_eq!(
        word(&accept_after(raw("frobnicate", |_| {})), 9000),
        "doubtful"
    );
    // A test that cannot be decoded (a cmp with an attribute newer than the codec).
    assert_eq!(
        word(&accept_after(raw("cmp", |b| attr::put_be32(b, 9, 1))), 9000),
        "doubtful"
    );
}

#[test]
fn notrack_and_a_named_quota_lower_to_their_steps() {
    let items = lower(&[raw("notrack", |_| {})]);
    assert_eq!(items, vec![Item::NoTrack]);
    let items = lower(&[
        Expr::Ct {
            key: CtKey::State,
            dreg: 1,
            direction: None,
        },
        raw("objref", |b| {
            attr::put_be32(b, 1, 2);
            attr::put_str(b, 2, "q1");
        }),
    ]);
    assert!(matches!(items.last(), Some(Item::Cond(_))), "{items:?}");
}

#[test]
fn legacy_set_recent_connlimit_hashlimit_physdev_socket() {
    let mut m = Model::default();
    m.add_legacy(
        Fam::V4,
        "filter",
        "*filter\n:INPUT DROP [0:0]\n\
         -A INPUT -p tcp -m tcp --dport 9110 -m set --match-set s1 src -j DROP\n\
         -A INPUT -p tcp -m tcp --dport 9110 -j ACCEPT\n\
         -A INPUT -p tcp -m tcp --dport 9111 -m recent ! --rcheck --seconds 60 --hitcount 4 --name r -j ACCEPT\n\
         -A INPUT -p tcp -m tcp --dport 9112 -m connlimit ! --connlimit-above 4 --connlimit-mask 32 --connlimit-saddr -j ACCEPT\n\
         -A INPUT -p tcp -m tcp --dport 9113 -m recent --remove --name r -j ACCEPT\n\
         COMMIT\n",
    );
    let w = |p: u16| {
        m.evaluate(&conn(p), &Addrs::all(Fam::V4)).parts[0]
            .fate
            .word()
    };
    assert_eq!(w(9110), "doubtful");
    assert_eq!(w(9111), "admitted");
    assert_eq!(w(9112), "admitted");
    assert_eq!(w(9113), "doubtful");
}

/// `ip frag-off & MASK != 0 drop`, then an accept: the load of the IPv4 header's bytes 6..8.
fn frag_off(mask: [u8; 2]) -> Model {
    model(vec![
        vec![
            Expr::Payload {
                base: PayloadBase::Network,
                offset: 6,
                len: 2,
                dreg: 1,
            },
            Expr::Bitwise {
                sreg: 1,
                dreg: 1,
                len: 2,
                mask: mask.to_vec(),
                xor: vec![0, 0],
            },
            Expr::Cmp {
                sreg: 1,
                op: CmpOp::Neq,
                data: vec![0, 0],
            },
            verdict(NfVerdict::Drop),
        ],
        vec![verdict(NfVerdict::Accept)],
    ])
}

#[test]
fn a_connections_first_packet_is_no_fragment_but_its_dont_fragment_bit_is_not_known() {
    // The offset (the wiki's `ip frag-off & 0x1fff != 0 drop`) and more-fragments are clear.
    assert_eq!(word(&frag_off([0x1f, 0xff]), 9000), "admitted");
    assert_eq!(word(&frag_off([0x3f, 0xff]), 9000), "admitted");
    // The don't-fragment bit is the sender's: the rule is not decided.
    assert_eq!(word(&frag_off([0x40, 0x00]), 9000), "doubtful");
}
