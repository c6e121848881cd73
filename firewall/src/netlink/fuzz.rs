//! Fuzz tests of the netlink decoders (attributes, message framing, acknowledgements,
//! expressions, listings, set elements and ipset listings) on the seeded harness in `fuzz/`: valid messages
//! built at random, then mutated in their lengths, types, nesting and ends. `MESH_FUZZ_CASES`
//! scales them (`bench/fuzz` runs ten million each). The decoders' checks also run coverage-guided
//! (bolero) over their corpus in `__fuzz__/`.

use super::attr::{self, Attrs};
use super::consts::*;
use super::expr::{self, Expr, ImmediateData};
use super::ipset::{self, Member};
use super::keys::{CmpOp, CtDirection, CtKey, FibResult, MetaKey, PayloadBase};
use super::list;
use super::msg::{self, NlMsg};
use super::rule::{decode_comment_udata, encode_comment_udata};
use super::types::Verdict;
use fuzz::{mutate, run, Rng};

/// Cases per decoder in `cargo test`: a few seconds in a debug build.
const CASES: u64 = 20_000;

/// A name the kernel would accept: no NUL, so it reads back as written.
fn name(rng: &mut Rng) -> String {
    rng.word(12).replace('\0', "")
}

fn key<T>(rng: &mut Rng, from_raw: impl Fn(u32) -> Option<T>, fallback: T) -> T {
    from_raw(rng.below(40) as u32).unwrap_or(fallback)
}

fn verdict(rng: &mut Rng) -> Verdict {
    let code = *rng.pick(&[1, 0, -1, -2, -3, -4, -5, 3, 0x10003]);
    let chain = rng.bool().then(|| name(rng));
    Verdict::from_parts(code, chain)
}

/// Any expression this crate models, with arbitrary values in its fields.
pub(crate) fn expression(rng: &mut Rng) -> Expr {
    let reg = |rng: &mut Rng| *rng.pick(&[0, 1, 8, 9, 15, 16, 23, 0xffff_ffff]);
    match rng.below(10) {
        0 => Expr::Meta {
            key: key(rng, MetaKey::from_raw, MetaKey::Mark),
            dreg: reg(rng),
        },
        1 => Expr::Cmp {
            sreg: reg(rng),
            op: key(rng, CmpOp::from_raw, CmpOp::Eq),
            data: {
                let n = rng.below(17);
                rng.bytes(n)
            },
        },
        2 => Expr::Payload {
            base: key(rng, PayloadBase::from_raw, PayloadBase::Transport),
            offset: rng.edgy_u32(),
            len: rng.edgy_u32(),
            dreg: reg(rng),
        },
        3 => Expr::Bitwise {
            sreg: reg(rng),
            dreg: reg(rng),
            len: rng.edgy_u32(),
            mask: rng.bytes(4),
            xor: rng.bytes(4),
        },
        4 => Expr::Ct {
            key: key(rng, CtKey::from_raw, CtKey::State),
            dreg: reg(rng),
            direction: rng
                .bool()
                .then(|| CtDirection::from_raw(rng.below(2) as u8).unwrap()),
        },
        5 => Expr::Immediate {
            dreg: reg(rng),
            data: if rng.bool() {
                ImmediateData::Verdict(verdict(rng))
            } else {
                let n = rng.below(17);
                ImmediateData::Value(rng.bytes(n))
            },
        },
        6 => Expr::Counter {
            bytes: rng.u64(),
            packets: rng.u64(),
        },
        7 => Expr::Lookup {
            set: name(rng),
            sreg: reg(rng),
            dreg: rng.bool().then(|| reg(rng)),
            set_id: rng.bool().then(|| rng.u32()),
            flags: if rng.bool() { 0 } else { rng.edgy_u32() },
        },
        8 => Expr::Fib {
            result: key(rng, FibResult::from_raw, FibResult::OifName),
            flags: rng.edgy_u32(),
            dreg: reg(rng),
        },
        _ => {
            // An unmodelled expression, kept as the well-formed attributes it carried.
            let mut data = Vec::new();
            for _ in 0..rng.below(4) {
                let n = rng.below(9);
                let bytes = rng.bytes(n);
                attr::put(&mut data, 1 + rng.below(8) as u16, &bytes);
            }
            Expr::Raw {
                name: format!("x{}", name(rng)),
                data,
            }
        }
    }
}

/// A random tree of attributes: types in the range the decoders know, leaves that are
/// integers, strings or bytes, nests up to `depth` deep.
fn attributes(rng: &mut Rng, buf: &mut Vec<u8>, depth: usize) {
    for _ in 0..rng.below(6) {
        let ty = rng.below(14) as u16;
        if depth > 0 && rng.one_in(3) {
            let nest = attr::nest_start(buf, ty);
            attributes(rng, buf, depth - 1);
            attr::nest_end(buf, nest);
        } else {
            match rng.below(4) {
                0 => attr::put_be32(buf, ty, rng.edgy_u32()),
                1 => attr::put_be64(buf, ty, rng.u64()),
                2 => attr::put_str(buf, ty, &name(rng)),
                _ => {
                    let n = rng.below(20);
                    let bytes = rng.bytes(n);
                    attr::put(buf, ty, &bytes)
                }
            }
        }
    }
}

/// One nf_tables message of kind `ty` whose attributes `body` writes.
fn message(rng: &mut Rng, ty: u8, body: impl FnOnce(&mut Rng, &mut Vec<u8>)) -> Vec<u8> {
    let mut buf = Vec::new();
    let family = *rng.pick(&[1u8, 2, 3, 5, 7, 10, 99]);
    let start = msg::begin(
        &mut buf,
        msg::nft_type(ty),
        NLM_F_MULTI,
        rng.u32(),
        family,
        0,
    );
    body(rng, &mut buf);
    msg::end(&mut buf, start);
    buf
}

/// An NLMSG_ERROR: capped or with the request echoed, with or without extended-ack TLVs.
fn ack(rng: &mut Rng) -> Vec<u8> {
    let capped = rng.bool();
    let tlvs = rng.bool();
    let mut flags = 0;
    if capped {
        flags |= NLM_F_CAPPED;
    }
    if tlvs {
        flags |= NLM_F_ACK_TLVS;
    }
    let mut buf = Vec::new();
    buf.extend_from_slice(&0u32.to_ne_bytes());
    buf.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
    buf.extend_from_slice(&flags.to_ne_bytes());
    buf.extend_from_slice(&rng.u32().to_ne_bytes());
    buf.extend_from_slice(&0u32.to_ne_bytes());
    let errno = *rng.pick(&[0, 1, 13, 22, 95, i32::MAX, -i32::MAX]);
    buf.extend_from_slice(&(-errno).to_ne_bytes());
    // The original request: its header alone when capped, else all of it.
    let request = message(rng, NFT_MSG_NEWRULE, |rng, b| attributes(rng, b, 2));
    if capped {
        buf.extend_from_slice(&request[..16]);
    } else {
        buf.extend_from_slice(&request);
    }
    if tlvs {
        attr::put_str(&mut buf, NLMSGERR_ATTR_MSG, &name(rng));
        attr::put(&mut buf, NLMSGERR_ATTR_OFFS, &rng.u32().to_ne_bytes());
    }
    let len = buf.len() as u32;
    buf[0..4].copy_from_slice(&len.to_ne_bytes());
    buf
}

/// A listing's message of any kind: a table, chain, rule, set or set elements, valid as the
/// kernel writes them.
fn listing(rng: &mut Rng) -> Vec<u8> {
    match rng.below(6) {
        0 => message(rng, NFT_MSG_NEWTABLE, |rng, b| {
            attr::put_str(b, NFTA_TABLE_NAME, &name(rng));
            attr::put_be32(b, NFTA_TABLE_FLAGS, rng.below(8) as u32);
            attr::put_be64(b, NFTA_TABLE_HANDLE, rng.u64());
            attr::put(b, NFTA_TABLE_OWNER, &rng.u32().to_be_bytes());
            attr::put(b, NFTA_TABLE_USERDATA, &encode_comment_udata(&name(rng)));
        }),
        1 => message(rng, NFT_MSG_NEWCHAIN, |rng, b| {
            attr::put_str(b, NFTA_CHAIN_TABLE, &name(rng));
            attr::put_str(b, NFTA_CHAIN_NAME, &name(rng));
            let hook = attr::nest_start(b, NFTA_CHAIN_HOOK);
            attr::put_be32(b, NFTA_HOOK_HOOKNUM, rng.below(6) as u32);
            attr::put_be32(b, NFTA_HOOK_PRIORITY, rng.edgy_u32());
            if rng.bool() {
                let devs = attr::nest_start(b, NFTA_HOOK_DEVS);
                attr::put_str(b, 1, &name(rng));
                attr::nest_end(b, devs);
            }
            attr::nest_end(b, hook);
            attr::put_be32(b, NFTA_CHAIN_POLICY, rng.below(3) as u32);
            attr::put_str(
                b,
                NFTA_CHAIN_TYPE,
                rng.pick::<&str>(&["filter", "nat", "route"]),
            );
        }),
        2 => message(rng, NFT_MSG_NEWRULE, |rng, b| {
            attr::put_str(b, NFTA_RULE_TABLE, &name(rng));
            attr::put_str(b, NFTA_RULE_CHAIN, &name(rng));
            attr::put_be64(b, NFTA_RULE_HANDLE, rng.u64());
            let exprs: Vec<Expr> = (0..rng.below(6)).map(|_| expression(rng)).collect();
            expr::encode_list(&exprs, b);
            attr::put(b, NFTA_RULE_USERDATA, &encode_comment_udata(&name(rng)));
        }),
        3 => message(rng, NFT_MSG_NEWSET, |rng, b| attributes(rng, b, 2)),
        4 => message(rng, 12, |rng, b| {
            attr::put_str(b, NFTA_SET_ELEM_LIST_TABLE, &name(rng));
            attr::put_str(b, NFTA_SET_ELEM_LIST_SET, &name(rng));
            let list = attr::nest_start(b, NFTA_SET_ELEM_LIST_ELEMENTS);
            for _ in 0..rng.below(5) {
                let item = attr::nest_start(b, NFTA_LIST_ELEM);
                let key = attr::nest_start(b, NFTA_SET_ELEM_KEY);
                let n = rng.below(17);
                attr::put(b, NFTA_DATA_VALUE, &rng.bytes(n));
                attr::nest_end(b, key);
                if rng.bool() {
                    let end = attr::nest_start(b, NFTA_SET_ELEM_KEY_END);
                    attr::put(b, NFTA_DATA_VALUE, &rng.bytes(4));
                    attr::nest_end(b, end);
                }
                attr::put_be32(b, NFTA_SET_ELEM_FLAGS, rng.below(4) as u32);
                if rng.bool() {
                    let data = attr::nest_start(b, NFTA_SET_ELEM_DATA);
                    let v = attr::nest_start(b, NFTA_DATA_VERDICT);
                    let verdict = verdict(rng);
                    attr::put_be32(b, NFTA_VERDICT_CODE, verdict.code() as u32);
                    if let Some(chain) = verdict.chain() {
                        attr::put_str(b, NFTA_VERDICT_CHAIN, chain);
                    }
                    attr::nest_end(b, v);
                    attr::nest_end(b, data);
                }
                attr::nest_end(b, item);
            }
            attr::nest_end(b, list);
        }),
        _ => {
            let ty = rng.below(24) as u8;
            message(rng, ty, |rng, b| attributes(rng, b, 3))
        }
    }
}

/// A datagram of a few messages, any of them an acknowledgement.
fn datagram(rng: &mut Rng) -> Vec<u8> {
    let mut out = Vec::new();
    for _ in 0..1 + rng.below(3) {
        let m = if rng.one_in(3) {
            ack(rng)
        } else {
            listing(rng)
        };
        out.extend_from_slice(&m);
        attr::pad(&mut out);
    }
    out
}

/// Mutated most of the time; sometimes left valid, sometimes replaced by noise.
fn maybe_mutated(rng: &mut Rng, mut bytes: Vec<u8>) -> Vec<u8> {
    match rng.below(8) {
        0 => bytes,
        1 => {
            let n = rng.below(bytes.len() + 8);
            rng.bytes(n)
        }
        _ => {
            mutate(rng, &mut bytes);
            bytes
        }
    }
}

/// Walks every attribute and every nest inside it, as a decoder that trusts nothing would.
fn walk(data: &[u8], depth: usize) -> usize {
    let mut seen = 0;
    let mut attrs = Attrs::new(data);
    for a in attrs.by_ref() {
        seen += 1;
        let _ = (a.u8(), a.be32(), a.be64(), a.string());
        if depth > 0 {
            seen += walk(a.data, depth - 1);
        }
    }
    let _ = attrs.malformed();
    seen
}

/// Everything a listing reads from one message, as the socket's dump loop calls it.
fn decode_message(m: &NlMsg<'_>) {
    let _ = (m.nft_msg(), m.family());
    if m.ty == NLMSG_ERROR {
        let _ = msg::parse_ack(m);
        return;
    }
    let _ = list::decode_table(m);
    let _ = list::decode_chain(m);
    let _ = list::decode_set(m);
    let elems = list::decode_elems(m);
    assert!(elems.len() <= m.payload.len() / 4 + 1);
    let rule = list::decode_rule(m);
    for e in &rule.exprs {
        let _ = (e.xt_name(), e.xt_info(), e.xt_comment(), e.as_verdict());
    }
}

#[test]
fn fuzz_netlink_attributes() {
    run(
        "netlink-attributes",
        CASES,
        |rng| {
            let mut buf = Vec::new();
            attributes(rng, &mut buf, 4);
            maybe_mutated(rng, buf)
        },
        check_attributes,
    );
}

fn check_attributes(bytes: &[u8]) {
    // Every attribute costs at least its 4-byte header.
    assert!(walk(bytes, 5) <= bytes.len() / 4 * 6);
    let _ = Attrs::all_well_formed(bytes);
}

#[test]
fn fuzz_netlink_messages_and_acks() {
    run(
        "netlink-messages",
        CASES,
        |rng| {
            let d = datagram(rng);
            maybe_mutated(rng, d)
        },
        check_messages,
    );
}

fn check_messages(bytes: &[u8]) {
    if let Ok(msgs) = msg::split(bytes) {
        assert!(msgs.len() <= bytes.len() / NLMSG_HDRLEN);
        for m in &msgs {
            if m.ty == NLMSG_ERROR {
                if let Ok(ack) = msg::parse_ack(m) {
                    assert!(ack.message.as_ref().is_none_or(|t| t.len() <= bytes.len()));
                }
            }
            let _ = walk(m.payload.get(NFGENMSG_LEN..).unwrap_or(&[]), 3);
        }
    }
}

#[test]
fn fuzz_netlink_expressions_round_trip() {
    // A valid expression list decodes to what was encoded, and whatever a mutated one decodes
    // to encodes and decodes to itself (a raw expression is written back verbatim).
    run(
        "netlink-expressions",
        CASES,
        |rng| {
            let exprs: Vec<Expr> = (0..1 + rng.below(5)).map(|_| expression(rng)).collect();
            let mut buf = Vec::new();
            expr::encode_list(&exprs, &mut buf);
            let list = buf[4..].to_vec();
            assert_eq!(expr::decode_list(&list), exprs, "a valid list reads back");
            maybe_mutated(rng, list)
        },
        check_expressions,
    );
}

fn expressions_seed(rng: &mut Rng) -> Vec<u8> {
    let exprs: Vec<Expr> = (0..1 + rng.below(5)).map(|_| expression(rng)).collect();
    let mut buf = Vec::new();
    expr::encode_list(&exprs, &mut buf);
    buf[4..].to_vec()
}

fn check_expressions(bytes: &[u8]) {
    let first = expr::decode_list(bytes);
    let mut again = Vec::new();
    expr::encode_list(&first, &mut again);
    assert_eq!(expr::decode_list(&again[4..]), first);
}

#[test]
fn fuzz_netlink_listings_and_set_elements() {
    run(
        "netlink-listings",
        CASES,
        |rng| {
            let d = datagram(rng);
            maybe_mutated(rng, d)
        },
        check_listings,
    );
}

fn check_listings(bytes: &[u8]) {
    // The dump loop: framing first, then each message decoded as every kind it may be.
    if let Ok(msgs) = msg::split(bytes) {
        for m in &msgs {
            decode_message(m);
        }
    }
}

/// An ipset member of arbitrary address, prefix, port and protocol.
fn ipset_member(rng: &mut Rng) -> Member {
    let ip = if rng.bool() {
        let b = rng.u64().to_be_bytes();
        std::net::IpAddr::from([b[0], b[1], b[2], b[3]])
    } else {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&rng.u64().to_be_bytes());
        std::net::IpAddr::from(b)
    };
    Member {
        ip: Some(ip),
        cidr: rng.bool().then(|| rng.below(129) as u8),
        port: rng.bool().then(|| rng.below(65536) as u16),
        proto: rng.bool().then(|| *rng.pick(&[6u8, 17, 132])),
        nomatch: rng.below(8) == 0,
        name: (rng.below(8) == 0).then(|| name(rng)),
        ..Member::default()
    }
}

#[test]
fn fuzz_ipset_listings() {
    // A valid LIST answer reads back as the members written; a mutated one decodes to at most
    // one member per four bytes, and never panics.
    run(
        "netlink-ipsets",
        CASES,
        |rng| {
            let members: Vec<Member> = (0..rng.below(6)).map(|_| ipset_member(rng)).collect();
            let set = name(rng);
            let set = if set.is_empty() { "s".to_string() } else { set };
            let bytes = ipset::tests::list_message(&set, "hash:net,port", 2, &members);
            let msgs = msg::split(&bytes).unwrap();
            let read = ipset::decode_list(&msgs[0]).unwrap();
            assert_eq!(
                (read.name.as_str(), &read.members),
                (set.as_str(), &members)
            );
            maybe_mutated(rng, bytes)
        },
        check_ipsets,
    );
}

fn ipsets_seed(rng: &mut Rng) -> Vec<u8> {
    let members: Vec<Member> = (0..rng.below(6)).map(|_| ipset_member(rng)).collect();
    ipset::tests::list_message("s", "hash:net,port", 2, &members)
}

fn check_ipsets(bytes: &[u8]) {
    if let Ok(msgs) = msg::split(bytes) {
        for m in &msgs {
            if let Some(s) = ipset::decode_list(m) {
                assert!(s.members.len() <= m.payload.len() / 4 + 1);
            }
            let _ = ipset::decode_get(m);
        }
    }
}

#[test]
fn fuzz_comment_user_data_round_trip() {
    run(
        "netlink-userdata",
        CASES,
        |rng| {
            let comment = name(rng);
            let mut udata = Vec::new();
            if rng.bool() {
                // Another TLV first, as nft writes for chains and tables.
                udata.extend_from_slice(&[1, 2, 0, 0]);
            }
            udata.extend_from_slice(&encode_comment_udata(&comment));
            assert_eq!(decode_comment_udata(&udata), Some(comment));
            maybe_mutated(rng, udata)
        },
        |bytes| {
            if let Some(c) = decode_comment_udata(bytes) {
                assert!(c.len() <= bytes.len() * 3);
            }
        },
    );
}

// The same checks, coverage-guided (bolero): under `cargo test` each replays its committed
// corpus (`__fuzz__/` beside this file) and random bytes; `cargo bolero test` grows the corpus.

/// Random inputs each target adds in `cargo test`, after its corpus.
const RANDOM: usize = 20_000;

#[test]
fn coverage_netlink_attributes() {
    fuzz::coverage!(
        "netlink-attributes",
        RANDOM,
        |rng| {
            let mut buf = Vec::new();
            attributes(rng, &mut buf, 4);
            buf
        },
        check_attributes
    );
}

#[test]
fn coverage_netlink_messages() {
    fuzz::coverage!("netlink-messages", RANDOM, datagram, check_messages);
}

#[test]
fn coverage_netlink_expressions() {
    fuzz::coverage!(
        "netlink-expressions",
        RANDOM,
        expressions_seed,
        check_expressions
    );
}

#[test]
fn coverage_netlink_listings() {
    fuzz::coverage!("netlink-listings", RANDOM, datagram, check_listings);
}

#[test]
fn coverage_ipset_listings() {
    fuzz::coverage!("netlink-ipsets", RANDOM, ipsets_seed, check_ipsets);
}

// Inputs the fuzzing once failed on, kept so they never fail again.

#[test]
fn regression_an_ack_with_errno_i32_min_is_a_refusal_not_an_overflow() {
    // `-error` overflowed: an NLMSG_ERROR carrying 0x80000000.
    let bytes =
        fuzz::unhex("24000000020000010549162e000700000000008024010000060a0200f007d74700000000");
    let msgs = msg::split(&bytes).unwrap();
    let ack = msg::parse_ack(&msgs[0]).unwrap();
    assert_ne!(ack.errno, 0);
}

#[test]
fn regression_a_raw_expression_of_unaligned_length_is_written_back_aligned() {
    // A `fib` whose data ended 13 bytes in was re-encoded without padding, so the expressions
    // after it read from the wrong offset (two of four came back).
    let bytes = fuzz::unhex(concat!(
        "1800018007000100787600000c00028007000000007fe4002800018008000100666962001100028008000100",
        "ffffffff08000200000000030800030000010000280001800e00010078626a7371000000000000001400028009",
        "000700090b1b19e6000000040003002800018008000100666962001c0002800800010000000000080002000000",
        "0002080003000000000f"
    ));
    let first = expr::decode_list(&bytes);
    assert_eq!(first.len(), 4);
    let mut again = Vec::new();
    expr::encode_list(&first, &mut again);
    assert_eq!(expr::decode_list(&again[4..]), first);
}
