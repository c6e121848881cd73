//! What the firewall benchmarks share: `nft` as the baseline, and the min/median line.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Runs `nft ARGS…` with `stdin` fed to it and returns what it printed; the baseline must work.
pub fn nft(args: &[&str], stdin: Option<&str>) -> String {
    let mut child = Command::new("nft")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("nft must be installed (apt-get install nftables)");
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "nft {args:?} failed");
    String::from_utf8(out.stdout).unwrap()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Prints the minimum and the median of the runs.
pub fn stats(name: &str, mut d: Vec<Duration>) {
    d.sort();
    let median = (ms(d[(d.len() - 1) / 2]) + ms(d[d.len() / 2])) / 2.0;
    println!(
        "{name:<58} min {:8.2} ms   median {:8.2} ms   ({} runs)",
        ms(d[0]),
        median,
        d.len()
    );
}
