//! Fuzz tests of the D-Bus reader: calls written by the client's own writer (every argument
//! kind), replies with variants nested deep, then mutated in their lengths, signatures and ends.
//! On the seeded harness in `fuzz/`; `MESH_FUZZ_CASES` scales it (`bench/fuzz`).

use super::{decode_message, encode_call, Arg, Value, MAX_DEPTH};
use fuzz::{mutate, run, Rng};

fn word(rng: &mut Rng) -> String {
    rng.word(10).replace('\0', "")
}

/// A call with arguments of every kind the client writes, and what they read back as.
fn call(rng: &mut Rng) -> (Vec<u8>, String, Vec<String>) {
    let words: Vec<String> = (0..8).map(|_| word(rng)).collect();
    let w = |i: usize| words[i].as_str();
    let mut args = Vec::new();
    for _ in 0..rng.below(4) {
        args.push(match rng.below(5) {
            0 => Arg::Str(w(0)),
            1 => Arg::I32(rng.u32() as i32),
            2 => Arg::Strs(vec![w(1), w(2)]),
            3 => Arg::StrQuads(vec![[w(3), w(4), w(5), w(6)]]),
            _ => Arg::Dict(vec![(w(7), Arg::Str(w(0))), ("n", Arg::I32(-1))]),
        });
    }
    let member = format!("M{}", w(1));
    let bytes = encode_call(
        rng.u32(),
        "org.fedoraproject.FirewallD1",
        "/x",
        w(2),
        &member,
        &args,
    );
    (bytes, member, words)
}

/// A reply whose body is a variant holding a variant … `depth` deep, ending in a string.
fn nested_variants(depth: usize) -> Vec<u8> {
    let mut body = Vec::new();
    for _ in 0..depth {
        body.extend_from_slice(&[1, b'v', 0]);
    }
    body.extend_from_slice(&[1, b's', 0]);
    while body.len() % 4 != 0 {
        body.push(0);
    }
    body.extend_from_slice(&1u32.to_le_bytes());
    body.extend_from_slice(b"x\0");
    let mut m = vec![b'l', 2, 0, 1];
    m.extend_from_slice(&(body.len() as u32).to_le_bytes());
    m.extend_from_slice(&1u32.to_le_bytes());
    // The header fields: signature "v".
    let fields = [8u8, 1, b'g', 0, 1, b'v', 0, 0];
    m.extend_from_slice(&(fields.len() as u32 - 1).to_le_bytes());
    m.extend_from_slice(&fields);
    m.extend_from_slice(&body);
    m
}

#[test]
fn fuzz_dbus_reader() {
    run(
        "dbus-reader",
        10_000,
        |rng| {
            let mut bytes = if rng.one_in(8) {
                nested_variants(rng.below(3 * MAX_DEPTH))
            } else {
                let (bytes, member, _) = call(rng);
                let m = decode_message(&bytes).expect("a call the writer wrote reads back");
                assert_eq!(m.member.as_deref(), Some(member.as_str()));
                bytes
            };
            if !rng.one_in(5) {
                // The message kind, then anything.
                if rng.one_in(4) {
                    bytes[1] = rng.below(6) as u8;
                }
                mutate(rng, &mut bytes);
            }
            bytes
        },
        |bytes| {
            if let Ok(m) = decode_message(bytes) {
                for v in &m.body {
                    let _ = (v.as_str(), v.as_bool(), v.as_strs(), v.get("n"));
                }
            }
        },
    );
}

// Inputs the fuzzing once failed on, kept so they never fail again.

#[test]
fn regression_variants_nested_past_the_limit_are_refused_not_recursed() {
    assert!(decode_message(&nested_variants(MAX_DEPTH - 2)).is_ok());
    // Deep enough to exhaust a test thread's stack before the limit existed.
    assert!(decode_message(&nested_variants(200_000)).is_err());
}

#[test]
fn regression_an_array_of_empty_structs_is_refused_not_looped() {
    // `a()`: each element takes no bytes, so reading them never reached the array's end.
    let mut m = vec![b'l', 2, 0, 1];
    m.extend_from_slice(&4u32.to_le_bytes());
    m.extend_from_slice(&1u32.to_le_bytes());
    let fields = [8u8, 1, b'g', 0, 3, b'a', b'(', b')', 0, 0, 0, 0, 0, 0, 0, 0];
    m.extend_from_slice(&9u32.to_le_bytes());
    m.extend_from_slice(&fields);
    m.extend_from_slice(&8u32.to_le_bytes());
    assert!(decode_message(&m).is_err());
}

#[test]
fn a_message_shorter_than_its_lengths_is_refused() {
    let (bytes, _, _) = call(&mut Rng::new(1));
    for cut in 0..bytes.len() {
        assert!(decode_message(&bytes[..cut]).is_err(), "cut at {cut}");
    }
    assert!(matches!(
        decode_message(&bytes).unwrap().body.first(),
        None | Some(Value::Str(_) | Value::I32(_) | Value::Array(_))
    ));
}
