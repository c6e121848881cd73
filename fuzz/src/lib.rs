//! The seeded fuzzing harness every decoder's test runs on stable Rust: a deterministic generator,
//! mutations that break what decoders trust (lengths, types, nesting, truncation), and a runner
//! that counts cases per second, catches panics and measures the largest allocation a case makes.
//!
//! A test calls [`run`] with a name, a generator (usually a valid message built from the
//! [`Rng`], then [`mutate`]d) and a check that decodes the bytes and asserts what must hold. The
//! number of cases is the test's default unless `MESH_FUZZ_CASES` says otherwise, so `cargo
//! test` runs a few thousand and `bench/fuzz` the same tests at ten million. Every case runs
//! under [`catch_unwind`](std::panic::catch_unwind); a panic or an allocation larger than the
//! input allows is a finding, printed as hex so it can be kept as a regression case.
//!
//! The same checks also run coverage-guided, through bolero ([`coverage!`] and the
//! [`coverage`] module), over raw bytes and a committed corpus, under the same bound.

mod alloc;
pub mod coverage;

/// The coverage-guided engine's front end, for [`coverage!`]'s expansion.
pub use bolero;

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Once;
use std::time::Instant;

pub use alloc::Counting;

/// A small, fast, seeded generator (SplitMix64): the same seed gives the same cases.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn u32(&mut self) -> u32 {
        (self.u64() >> 32) as u32
    }

    pub fn u16(&mut self) -> u16 {
        (self.u64() >> 48) as u16
    }

    pub fn u8(&mut self) -> u8 {
        (self.u64() >> 56) as u8
    }

    /// A value in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.u64() % n as u64) as usize
        }
    }

    /// True one time in `n`.
    pub fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    pub fn bool(&mut self) -> bool {
        self.u64() & 1 == 1
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// `n` random bytes.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.u8()).collect()
    }

    /// A value a decoder is likely to mishandle: the edges of every width.
    pub fn edgy_u32(&mut self) -> u32 {
        *self.pick(&[
            0,
            1,
            2,
            3,
            4,
            7,
            8,
            15,
            16,
            0x7f,
            0x80,
            0xff,
            0x100,
            0x7fff,
            0x8000,
            0xffff,
            0x1_0000,
            0x7fff_ffff,
            0x8000_0000,
            0xffff_fffe,
            0xffff_ffff,
        ])
    }

    /// A short string of printable ASCII, sometimes with a byte that is not.
    pub fn word(&mut self, max: usize) -> String {
        let n = self.below(max + 1);
        (0..n)
            .map(|_| {
                if self.one_in(20) {
                    *self.pick(&['\0', '\n', ' ', '"', '\\', 'é', '\u{7f}'])
                } else {
                    (b'a' + self.below(26) as u8) as char
                }
            })
            .collect()
    }
}

/// Applies one to four mutations that break what a decoder might trust: flipped bits, edge
/// values written over 1, 2 or 4 bytes (lengths and types are those widths), truncation, an
/// extension, a removed or duplicated slice (nesting shifted), random bytes inserted.
pub fn mutate(rng: &mut Rng, data: &mut Vec<u8>) {
    for _ in 0..1 + rng.below(4) {
        let len = data.len();
        match rng.below(9) {
            0 if len > 0 => {
                let at = rng.below(len);
                data[at] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let at = rng.below(len);
                data[at] = rng.edgy_u32() as u8;
            }
            2 if len >= 2 => {
                // Netlink's lengths and types are 2 bytes at even offsets.
                let at = rng.below(len / 2) * 2;
                let v = (rng.edgy_u32() as u16).wrapping_add(rng.below(3) as u16);
                let bytes = if rng.bool() {
                    v.to_ne_bytes()
                } else {
                    v.to_be_bytes()
                };
                data[at..at + 2].copy_from_slice(&bytes);
            }
            3 if len >= 4 => {
                let at = rng.below(len - 3);
                let v = rng.edgy_u32();
                let bytes = if rng.bool() {
                    v.to_ne_bytes()
                } else {
                    v.to_be_bytes()
                };
                data[at..at + 4].copy_from_slice(&bytes);
            }
            4 => data.truncate(rng.below(len + 1)),
            5 => {
                let extra = rng.below(16);
                let more = rng.bytes(extra);
                data.extend_from_slice(&more);
            }
            6 if len > 0 => {
                let at = rng.below(len);
                let n = rng.below(len - at + 1);
                data.drain(at..at + n);
            }
            7 if len > 0 => {
                let at = rng.below(len);
                let n = rng.below((len - at).min(64) + 1);
                let copy = data[at..at + n].to_vec();
                let to = rng.below(len + 1);
                data.splice(to..to, copy);
            }
            _ => {
                let to = rng.below(len + 1);
                let n = 1 + rng.below(8);
                let more = rng.bytes(n);
                data.splice(to..to, more);
            }
        }
    }
}

/// How many cases a test runs: `MESH_FUZZ_CASES` when set, else the test's own default.
pub fn cases(default: u64) -> u64 {
    std::env::var("MESH_FUZZ_CASES")
        .ok()
        .and_then(|v| v.replace('_', "").parse().ok())
        .unwrap_or(default)
}

/// The seed of a run: `MESH_FUZZ_SEED` when set, else one fixed per decoder (its name hashed),
/// so a default run is the same every time.
fn seed(name: &str) -> u64 {
    if let Some(s) = std::env::var("MESH_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        return s;
    }
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// The largest single allocation a case may make: a decoder may copy its input a few times over
/// into owned values, never size a buffer by a length field it has not checked.
pub fn allocation_bound(input_len: usize) -> usize {
    64 * input_len + (64 << 10)
}

/// What a run found.
#[derive(Debug)]
pub struct Report {
    pub name: String,
    pub cases: u64,
    pub seconds: f64,
    /// The inputs that panicked or allocated past the bound, with why (the first few kept).
    pub findings: Vec<(String, Vec<u8>)>,
    pub total_findings: u64,
}

/// Runs `cases(default)` cases of `generate` then `check`, and panics at the end naming every
/// finding (a panic in `check` or an allocation past [`allocation_bound`]). Prints one line to
/// standard error: `fuzz NAME: CASES cases in SECONDS s (RATE cases/s), FINDINGS findings`.
pub fn run(
    name: &str,
    default: u64,
    mut generate: impl FnMut(&mut Rng) -> Vec<u8>,
    mut check: impl FnMut(&[u8]),
) -> Report {
    let n = cases(default);
    let mut rng = Rng::new(seed(name));
    let mut report = Report {
        name: name.to_string(),
        cases: n,
        seconds: 0.0,
        findings: Vec::new(),
        total_findings: 0,
    };
    quiet_inside_cases();
    let start = Instant::now();
    for _ in 0..n {
        let input = generate(&mut rng);
        alloc::mark();
        IN_CASE.with(|c| c.set(true));
        let outcome = catch_unwind(AssertUnwindSafe(|| check(&input)));
        IN_CASE.with(|c| c.set(false));
        let largest = alloc::largest();
        let why = match outcome {
            Err(panic) => Some(format!("panic: {}", panic_text(&*panic))),
            Ok(()) if largest > allocation_bound(input.len()) => Some(format!(
                "allocated {largest} bytes at once for {} bytes of input",
                input.len()
            )),
            Ok(()) => None,
        };
        if let Some(why) = why {
            report.total_findings += 1;
            if report.findings.len() < 8 {
                report.findings.push((why, input));
            }
        }
    }
    report.seconds = start.elapsed().as_secs_f64();
    eprintln!(
        "fuzz {name}: {} cases in {:.2} s ({:.0} cases/s), {} findings",
        report.cases,
        report.seconds,
        report.cases as f64 / report.seconds.max(1e-9),
        report.total_findings
    );
    if report.total_findings > 0 {
        let mut text = format!("fuzz {name}: {} findings\n", report.total_findings);
        for (why, input) in &report.findings {
            text.push_str(&format!("  {why}\n    input: {}\n", hex(input)));
        }
        panic!("{text}");
    }
    report
}

thread_local! {
    static IN_CASE: Cell<bool> = const { Cell::new(false) };
}

/// The harness reports a case's panic itself, with its input: the hook prints nothing for a
/// panic inside a case, and what it printed before for any other (tests run on many threads).
fn quiet_inside_cases() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let before = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !IN_CASE.with(|c| c.get()) {
                before(info)
            }
        }));
    });
}

fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "(not a string)".to_string()
    }
}

/// Bytes as lowercase hex, the form findings are printed and regression cases kept in.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes of a hex string (whitespace ignored), for regression cases.
pub fn unhex(text: &str) -> Vec<u8> {
    let digits: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    digits
        .chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).expect("ascii"), 16).expect("hex"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_cases() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        let mut x = vec![1, 2, 3, 4, 5, 6, 7, 8];
        let mut y = x.clone();
        mutate(&mut a, &mut x);
        mutate(&mut b, &mut y);
        assert_eq!(x, y);
    }

    #[test]
    fn a_panic_is_a_finding_with_its_input() {
        let out = catch_unwind(|| {
            run(
                "harness-panics",
                50,
                |rng| rng.bytes(4),
                |b| assert!(b[0] != b[0].wrapping_add(0)),
            )
        });
        let text = panic_text(&*out.unwrap_err());
        assert!(text.contains("50 findings"), "{text}");
    }

    #[test]
    fn an_allocation_past_the_bound_is_a_finding() {
        let out = catch_unwind(|| {
            run(
                "harness-allocates",
                3,
                |_| vec![0; 4],
                |b| {
                    let v: Vec<u8> = Vec::with_capacity(1 << 24);
                    std::hint::black_box((v, b));
                },
            )
        });
        let text = panic_text(&*out.unwrap_err());
        assert!(text.contains("allocated"), "{text}");
    }

    #[test]
    fn hex_round_trips() {
        assert_eq!(unhex("00ff 10"), [0, 0xff, 0x10]);
        assert_eq!(hex(&[0, 0xff, 0x10]), "00ff10");
    }
}
