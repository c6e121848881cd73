//! The coverage-guided half of the harness: a decoder's check over raw bytes, run by bolero
//! under the same allocation bound as the seeded runs.
//!
//! A target is one `#[test]` calling [`coverage!`](crate::coverage!) with a name, how many random
//! inputs `cargo test` adds, the seeded generator that makes its first corpus, and the check.
//! Under `cargo test` bolero's own engine replays the target's committed corpus (in
//! `__fuzz__/<module>__<test>/corpus/` beside the test's file) and then random inputs; under
//! `cargo bolero test` (libFuzzer, coverage-guided) the same target grows that corpus. Either way
//! each input runs through [`bounded`]: a panic, or a single allocation past
//! [`allocation_bound`], is a finding the engine shrinks and prints.

use crate::{alloc, allocation_bound, Rng};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Runs one input through `check` and panics, naming the sizes, when the check made a single
/// allocation larger than [`allocation_bound`] allows for the input.
pub fn bounded(input: &[u8], check: impl FnOnce(&[u8])) {
    alloc::mark();
    check(input);
    let largest = alloc::largest();
    assert!(
        largest <= allocation_bound(input.len()),
        "allocated {largest} bytes at once for {} bytes of input",
        input.len()
    );
}

/// How many random inputs a target adds after its corpus: `MESH_COVERAGE_CASES` when set, else
/// the target's own default.
pub fn random_cases(default: usize) -> usize {
    std::env::var("MESH_COVERAGE_CASES")
        .ok()
        .and_then(|v| v.replace('_', "").parse().ok())
        .unwrap_or(default)
}

/// What one target's run under `cargo test` did: inputs counted as they run, then checked.
#[derive(Debug)]
pub struct Tally {
    cases: AtomicU64,
    random: usize,
    started: Instant,
}

impl Tally {
    pub fn new(random: usize) -> Tally {
        Tally {
            cases: AtomicU64::new(0),
            random,
            started: Instant::now(),
        }
    }

    /// The random inputs to ask the engine for.
    pub fn random(&self) -> usize {
        self.random
    }

    /// One input ran.
    pub fn case(&self) {
        self.cases.fetch_add(1, Ordering::Relaxed);
    }

    /// Prints `coverage NAME: CASES cases (CORPUS from the corpus, RANDOM random) in SECONDS s`
    /// and panics when no corpus input ran: a corpus moved or renamed away from its target
    /// would otherwise leave only random bytes, which rarely get past a decoder's first check.
    pub fn finish(self, name: &str) {
        let cases = self.cases.into_inner();
        let corpus = cases.saturating_sub(self.random as u64);
        eprintln!(
            "coverage {name}: {cases} cases ({corpus} from the corpus, {} random) in {:.2} s",
            self.random,
            self.started.elapsed().as_secs_f64()
        );
        assert!(
            corpus > 0,
            "coverage {name}: no input of its corpus ran (is __fuzz__/…/corpus beside the test?)"
        );
    }
}

/// Writes `n` inputs of the seeded generator into `corpus` (named `seed-<index>`), when
/// `MESH_COVERAGE_WRITE_SEEDS=n` asks for them: how a target's first corpus is made before
/// libFuzzer grows it (docs/FUZZING.md).
pub fn write_seeds(
    name: &str,
    corpus: Option<&Path>,
    mut generate: impl FnMut(&mut Rng) -> Vec<u8>,
) {
    let Some(n) = std::env::var("MESH_COVERAGE_WRITE_SEEDS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    else {
        return;
    };
    let corpus = corpus.expect("the target's corpus directory is known");
    std::fs::create_dir_all(corpus)
        .unwrap_or_else(|e| panic!("cannot create corpus {}: {e}", corpus.display()));
    let mut rng = Rng::new(crate::seed(name));
    for i in 0..n {
        let path = corpus.join(format!("seed-{i:04}"));
        std::fs::write(&path, generate(&mut rng))
            .unwrap_or_else(|e| panic!("cannot write seed {}: {e}", path.display()));
    }
}

/// A coverage-guided target: `coverage!(NAME, RANDOM, GENERATE, CHECK)` in a `#[test]`.
///
/// `GENERATE` (`FnMut(&mut Rng) -> Vec<u8>`) makes seeds only when `MESH_COVERAGE_WRITE_SEEDS`
/// asks; `CHECK` (`Fn(&[u8])`) decodes and asserts, as the seeded run's check does.
#[macro_export]
macro_rules! coverage {
    ($name:expr, $random:expr, $generate:expr, $check:expr) => {{
        let location = $crate::bolero::TargetLocation {
            package_name: env!("CARGO_PKG_NAME"),
            manifest_dir: env!("CARGO_MANIFEST_DIR"),
            module_path: module_path!(),
            file: file!(),
            line: line!(),
            item_path: $crate::bolero::__item_path__!(),
            test_name: None,
        };
        $crate::coverage::write_seeds(
            $name,
            location.work_dir().map(|d| d.join("corpus")).as_deref(),
            $generate,
        );
        let tally = $crate::coverage::Tally::new($crate::coverage::random_cases($random));
        $crate::bolero::check!()
            .with_iterations(tally.random())
            .for_each(|input: &[u8]| {
                tally.case();
                $crate::coverage::bounded(input, $check)
            });
        tally.finish($name);
    }};
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::panic::catch_unwind;

    fn panic_text(out: std::thread::Result<()>) -> String {
        crate::panic_text(&*out.expect_err("the run fails"))
    }

    #[test]
    fn an_allocation_past_the_bound_panics_naming_it() {
        let text = panic_text(catch_unwind(|| {
            bounded(&[0; 4], |b| {
                let v: Vec<u8> = Vec::with_capacity(1 << 24);
                std::hint::black_box((v, b));
            })
        }));
        assert!(
            text.starts_with("allocated 16777216 bytes at once for 4 bytes"),
            "{text}"
        );
        bounded(&[0; 4], |b| assert_eq!(b.len(), 4));
    }

    #[test]
    fn a_failing_check_fails_the_target() {
        // No corpus here: the random inputs reach the check, which refuses any byte over 9.
        let text = panic_text(catch_unwind(|| {
            crate::coverage!("fails", 1_000, |rng| rng.bytes(4), |b: &[u8]| assert!(b
                .iter()
                .all(|x| *x < 10)))
        }));
        assert_eq!(text, "test failed");
    }

    #[test]
    fn a_target_without_its_corpus_fails() {
        let text = panic_text(catch_unwind(|| {
            crate::coverage!("no-corpus", 10, |rng| rng.bytes(4), |_: &[u8]| {})
        }));
        assert!(text.contains("no input of its corpus ran"), "{text}");
    }
}
