//! Times inserting 1,000 rules in one batch with the codec against `nft -f` of the same rules,
//! inside a fresh network namespace (run as root):
//! `cargo run --release -p firewall --example batch_bench`.

mod common;
use common::{nft, stats};

use std::process::Command;
use std::time::Instant;

use firewall::netlink::*;

const RULES: u16 = 1000;
const RUNS: usize = 6;

fn body(i: u16) -> RuleBody {
    RuleBody::new()
        .iifname_ne("lo")
        .tcp_dport(10000 + i)
        .accept()
        .comment(&format!("mesh: opening {}", 10000 + i))
}

fn nft_script() -> String {
    let mut s = String::from(
        "table inet bench {\n\tchain in {\n\t\ttype filter hook input priority 0; policy accept;\n",
    );
    for i in 0..RULES {
        s.push_str(&format!(
            "\t\tiifname != \"lo\" tcp dport {} accept comment \"mesh: opening {}\"\n",
            10000 + i,
            10000 + i
        ));
    }
    s.push_str("\t}\n}\n");
    s
}

fn clear(s: &mut NfSocket) {
    if s.tables(None).unwrap().iter().any(|t| t.name == "bench") {
        let mut b = Batch::new();
        b.del_table(Family::Inet, "bench").unwrap();
        s.send(&b).unwrap();
    }
}

/// The codec as a whole process, like `nft -f`: open a socket, build, send, exit.
fn child() {
    let mut s = NfSocket::open().unwrap();
    let mut b = Batch::new();
    b.add_table(Family::Inet, "bench", TableFlags::NONE)
        .unwrap();
    b.add_chain(
        Family::Inet,
        "bench",
        "in",
        Some(&BaseChain::filter(Hook::Input, 0)),
    )
    .unwrap();
    for i in 0..RULES {
        b.add_rule(Family::Inet, "bench", "in", &body(i), Position::Append)
            .unwrap();
    }
    s.send(&b).unwrap();
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some("--child") {
        // Already in the parent's namespace, which it inherited.
        child();
        return;
    }
    // SAFETY: unshare(CLONE_NEWNET) only moves this (so far single) thread to a new namespace.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        panic!(
            "unshare(CLONE_NEWNET) failed: {}; run as root",
            std::io::Error::last_os_error()
        );
    }
    let mut s = NfSocket::open().unwrap();
    let script = nft_script();
    let path = std::env::temp_dir().join(format!("batch_bench_{}.nft", std::process::id()));
    std::fs::write(&path, &script).unwrap();

    let (mut build, mut send, mut total) = (Vec::new(), Vec::new(), Vec::new());
    let mut codec_listing = String::new();
    for _ in 0..RUNS {
        clear(&mut s);
        let t0 = Instant::now();
        let mut b = Batch::new();
        b.add_table(Family::Inet, "bench", TableFlags::NONE)
            .unwrap();
        b.add_chain(
            Family::Inet,
            "bench",
            "in",
            Some(&BaseChain::filter(Hook::Input, 0)),
        )
        .unwrap();
        for i in 0..RULES {
            b.add_rule(Family::Inet, "bench", "in", &body(i), Position::Append)
                .unwrap();
        }
        let t1 = Instant::now();
        s.send(&b).unwrap();
        let t2 = Instant::now();
        build.push(t1 - t0);
        send.push(t2 - t1);
        total.push(t2 - t0);
        codec_listing = nft(&["list", "ruleset"], None);
    }

    let mut process = Vec::new();
    let exe = std::env::current_exe().unwrap();
    for _ in 0..RUNS {
        clear(&mut s);
        let t0 = Instant::now();
        let status = Command::new(&exe).arg("--child").status().unwrap();
        process.push(t0.elapsed());
        assert!(status.success());
        assert_eq!(nft(&["list", "ruleset"], None), codec_listing);
    }

    let mut nft_f = Vec::new();
    let mut nft_listing = String::new();
    for _ in 0..RUNS {
        clear(&mut s);
        let t0 = Instant::now();
        nft(&["-f", path.to_str().unwrap()], None);
        nft_f.push(t0.elapsed());
        nft_listing = nft(&["list", "ruleset"], None);
    }
    std::fs::remove_file(&path).ok();
    assert_eq!(
        codec_listing, nft_listing,
        "both methods must give the same ruleset"
    );
    assert_eq!(s.rules(None).unwrap().len(), RULES as usize);

    println!("{RULES} rules in one batch, family inet, same final ruleset both ways");
    stats("codec: build batch", build);
    stats("codec: send + read every ACK", send);
    stats("codec: build + send (in process)", total);
    stats("codec: whole process (spawn to exit)", process);
    stats("nft -f (whole process)", nft_f);
}
