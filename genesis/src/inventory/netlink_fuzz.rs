//! Fuzz test of the rtnetlink link-dump decoder: datagrams of RTM_NEWLINK messages (names,
//! MTUs, addresses, nested link info with a tun type), NLMSG_DONE and NLMSG_ERROR, then mutated
//! in their lengths, types, nesting and ends. On the seeded harness in `fuzz/`;
//! `MESH_FUZZ_CASES` scales it (`bench/fuzz`); the same check also runs coverage-guided
//! (bolero) over its corpus in `__fuzz__/`.

use super::tests::{attr, message};
use super::*;
use ::fuzz::{mutate, run, Rng};

/// A link as the kernel describes it, and the bytes of its RTM_NEWLINK payload.
fn link(rng: &mut Rng) -> (Link, Vec<u8>) {
    let name: String = rng.word(15).replace('\0', "");
    let kind = (*rng.pick(&["", "veth", "bridge", "tun", "wireguard"])).to_string();
    let mut l = Link {
        index: rng.u32(),
        name: name.clone(),
        hw_type: rng.u16(),
        flags: rng.u32(),
        mtu: rng.edgy_u32(),
        address: rng.bytes(6),
        master: rng.bool().then(|| rng.u32()),
        kind: None,
        tun_type: None,
    };
    let mut p = vec![0u8, 0];
    p.extend_from_slice(&l.hw_type.to_ne_bytes());
    p.extend_from_slice(&l.index.to_ne_bytes());
    p.extend_from_slice(&l.flags.to_ne_bytes());
    p.extend_from_slice(&0u32.to_ne_bytes());
    p.extend(attr(IFLA_IFNAME, format!("{name}\0").as_bytes()));
    p.extend(attr(IFLA_MTU, &l.mtu.to_ne_bytes()));
    p.extend(attr(IFLA_ADDRESS, &l.address));
    if let Some(m) = l.master {
        p.extend(attr(IFLA_MASTER, &m.to_ne_bytes()));
    }
    if !kind.is_empty() {
        let mut info = attr(IFLA_INFO_KIND, format!("{kind}\0").as_bytes());
        if kind == "tun" {
            let t = 1 + rng.below(2) as u8;
            info.extend(attr(IFLA_INFO_DATA | 0x8000, &attr(IFLA_TUN_TYPE, &[t])));
            l.tun_type = Some(t);
        }
        p.extend(attr(IFLA_LINKINFO | 0x8000, &info));
        l.kind = Some(kind);
    }
    (l, p)
}

#[test]
fn fuzz_rtnetlink_link_dump() {
    run(
        "rtnetlink-links",
        20_000,
        |rng| {
            let mut data = Vec::new();
            let mut links = Vec::new();
            for _ in 0..1 + rng.below(4) {
                let (l, p) = link(rng);
                data.extend(message(RTM_NEWLINK, NLM_F_MULTI, 1, &p));
                links.push(l);
            }
            if rng.bool() {
                data.extend(message(NLMSG_DONE, NLM_F_MULTI, 1, &[0; 4]));
            } else if rng.one_in(3) {
                let code = *rng.pick(&[0, -1, -13, i32::MIN, i32::MAX]);
                data.extend(message(NLMSG_ERROR, 0, 1, &code.to_ne_bytes()));
            }
            // What the kernel sent reads back as it described it.
            let mut got = Dump::default();
            let _ = parse_messages(&data, 1, &mut got);
            assert_eq!(got.links, links);
            if !rng.one_in(6) {
                mutate(rng, &mut data);
            }
            data
        },
        check_dump,
    );
}

fn check_dump(bytes: &[u8]) {
    let mut dump = Dump::default();
    let _ = parse_messages(bytes, 1, &mut dump);
    // Every link costs at least a message header and its ifinfomsg.
    assert!(dump.links.len() <= bytes.len() / (NLMSG_HDRLEN + IFINFOMSG_LEN));
}

/// The same check, coverage-guided (bolero): under `cargo test` it replays its committed corpus
/// (`__fuzz__/` beside this file) and random bytes; `cargo bolero test` grows the corpus.
#[test]
fn coverage_rtnetlink_link_dump() {
    ::fuzz::coverage!(
        "rtnetlink-links",
        2_000,
        |rng| {
            let mut data = Vec::new();
            for _ in 0..1 + rng.below(4) {
                data.extend(message(RTM_NEWLINK, NLM_F_MULTI, 1, &link(rng).1));
            }
            data.extend(message(NLMSG_DONE, NLM_F_MULTI, 1, &[0; 4]));
            data
        },
        check_dump
    );
}

// Inputs the fuzzing once failed on, kept so they never fail again.

#[test]
fn regression_an_error_of_i32_min_is_an_error_not_an_overflow() {
    // `-code` overflowed on an NLMSG_ERROR carrying 0x80000000.
    let data = message(NLMSG_ERROR, 0, 1, &i32::MIN.to_ne_bytes());
    assert!(parse_messages(&data, 1, &mut Dump::default()).is_err());
}

#[test]
fn regression_a_done_carrying_i32_min_is_an_error_not_an_overflow() {
    // `-code` overflowed on an NLMSG_DONE carrying 0x80000000, found by the fuzz test above.
    let data = message(NLMSG_DONE, NLM_F_MULTI, 1, &i32::MIN.to_ne_bytes());
    assert!(parse_messages(&data, 1, &mut Dump::default()).is_err());
}
