//! The fleet benchmark's program (run by `bench/fleet`, never a test): one real RabbitMQ, the
//! controller's stand-in, and N simulated nodes — the link's own client code, each node with its
//! own TLS connection, queue, credentials and key — spread over node processes. It publishes one
//! declaration per node and measures the time from each publish to that node's verified report,
//! and prints one JSON line of figures.
//!
//!   fleet controller N PROCS           the whole run (starts the broker and the node processes)
//!   fleet nodes ARGS…                  one node process (started by the controller)
//!
//! Simulated nodes take the place of `mesh-host run`: on a verified declaration they report at
//! once (no apply), so the figure is the link's and the broker's share of a change landing.

use ed25519_dalek::SigningKey;
use serde_json::json;
use sha2::Digest as _;
use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("controller") => {
            controller(args[2].parse().expect("N"), args[3].parse().expect("PROCS"))
        }
        Some("nodes") => nodes(&args[2..]),
        _ => {
            eprintln!("usage: fleet controller N PROCS");
            std::process::exit(2);
        }
    }
}

/// Node i's key and broker password, derived from the run's secret (the simulation's shortcut:
/// a real node makes its key itself and the controller learns the public half at enrolment).
fn derive(secret: &str, i: usize) -> (SigningKey, String) {
    let seed: [u8; 32] = sha2::Sha256::digest(format!("{secret}/key/{i}")).into();
    let pw = link::hex(&sha2::Sha256::digest(format!("{secret}/pw/{i}"))[..16]);
    (SigningKey::from_bytes(&seed), pw)
}

fn unix_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

fn name(i: usize) -> String {
    format!("sim-{i}")
}

struct SimSink {
    node: String,
    handle: std::sync::OnceLock<link::Handle>,
}

impl link::Sink for SimSink {
    fn event(&self, e: link::Event) {
        if let link::Event::Declaration(v, receipt) = e {
            // When it verified the declaration, so the benchmark can split the time into the
            // way down (publish → verified at the node) and the way up (→ verified report).
            let payload = json!({"node": self.node, "version": v.version,
                "report": {"simulated": true}, "verified_at_us": unix_us()});
            if let Some(h) = self.handle.get() {
                h.report(serde_json::to_vec(&payload).unwrap());
            }
            receipt.done();
        }
    }
}

fn nodes(a: &[String]) {
    let (addr, fingerprint, controller, secret) = (&a[0], &a[1], &a[2], &a[3]);
    let (from, to): (usize, usize) = (a[4].parse().unwrap(), a[5].parse().unwrap());
    let controller = link::controller_key(controller).expect("controller key");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        for i in from..to {
            let (key, password) = derive(secret, i);
            let node = name(i);
            let config = link::Config {
                node: node.clone(),
                broker: link::Broker {
                    addrs: vec![addr.clone()],
                    fingerprint: fingerprint.clone(),
                    vhost: "/".into(),
                },
                resolver: link::Resolver::default(),
                credentials: link::Credentials {
                    user: link::names::node_user(&node),
                    password,
                },
                controller,
                node_key: key,
                last_version: 0,
                last_contact: None,
                heartbeat: Duration::from_secs(3600),
                backoff_base: Duration::from_secs(1),
                backoff_cap: Duration::from_secs(30),
                attempt_deadline: Duration::from_secs(120),
            };
            let sink = Arc::new(SimSink {
                node,
                handle: std::sync::OnceLock::new(),
            });
            let (handle, fut) = link::link(config, sink.clone());
            let _ = sink.handle.set(handle);
            tokio::spawn(fut);
            // Connections are opened at a steady pace, as a fleet coming up does.
            if i % 50 == 49 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    });
    // The links run on the runtime's workers until the controller closes this process's
    // standard input.
    let mut rest = Vec::new();
    let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut rest);
    drop(rt);
}

/// CPU seconds (user and system) a process has used so far, from /proc.
fn cpu_s(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command's closing parenthesis; utime and stime are the 12th and 13th.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = [11, 12]
        .iter()
        .filter_map(|i| f.get(*i).and_then(|v| v.parse::<f64>().ok()))
        .sum();
    // SAFETY: sysconf with a valid name.
    ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e4).round() / 10.0
}

fn controller(n: usize, procs: usize) {
    let started = Instant::now();
    let rabbit = lab::Rabbit::start().expect("broker");
    let broker_pid = rabbit.pid().map_or(0, |p| p as u32);
    let fd_limit = std::fs::read_to_string(format!("/proc/{broker_pid}/limits"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .map(|l| l.split_whitespace().nth(3).unwrap_or("?").to_string())
        .unwrap_or_else(|| "?".into());
    let rss_idle = rabbit.rss_bytes().unwrap_or(0);
    let mut ctl = lab::Controller::connect(&rabbit).expect("controller");
    let secret = link::random_hex(16).unwrap();
    let mut all = Vec::new();
    for i in 0..n {
        let (key, pw) = derive(&secret, i);
        ctl.know(&name(i), key.verifying_key());
        all.push((name(i), pw));
    }
    let t = Instant::now();
    for chunk in all.chunks(1000) {
        ctl.provision(chunk).expect("provisioning node users");
    }
    let provision_s = t.elapsed().as_secs_f64();

    // The baseline, in the same run: the broker's own round trip for N messages the controller
    // publishes to a queue it reads itself (no node, no TLS of a node, no signature).
    let baseline = ctl
        .round_trips(n.min(10_000))
        .expect("baseline round trips");

    use base64::Engine as _;
    let controller_b64 =
        base64::engine::general_purpose::STANDARD.encode(ctl.key.verifying_key().as_bytes());
    let exe = std::env::current_exe().unwrap();
    let per = n.div_ceil(procs);
    let mut children = Vec::new();
    let t = Instant::now();
    for p in 0..procs {
        let (from, to) = (p * per, ((p + 1) * per).min(n));
        if from >= to {
            break;
        }
        children.push(
            Command::new(&exe)
                .args([
                    "nodes",
                    &rabbit.addr(),
                    &rabbit.fingerprint,
                    &controller_b64,
                    &secret,
                ])
                .args([from.to_string(), to.to_string()])
                .stdin(Stdio::piped())
                .spawn()
                .expect("node process"),
        );
    }
    // Every node's first heartbeat says it is linked.
    let mut linked = std::collections::HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(900);
    while linked.len() < n && Instant::now() < deadline {
        if let Some(u) = ctl.next_upward(Duration::from_secs(5)) {
            if u.kind == "heartbeat" && u.verified {
                linked.insert(u.node);
            }
        }
    }
    let link_all_s = t.elapsed().as_secs_f64();
    let connections = rabbit.connection_users().map(|c| c.len()).unwrap_or(0);
    let rss_linked = rabbit.rss_bytes().unwrap_or(0);

    // One declaration per linked node; the time from its publish to its verified report.
    let node_pids: Vec<u32> = children.iter().map(|c| c.id()).collect();
    let me = std::process::id();
    let cpu_before = (
        cpu_s(broker_pid),
        node_pids.iter().map(|p| cpu_s(*p)).sum::<f64>(),
        cpu_s(me),
    );
    let mut published = HashMap::new();
    let t = Instant::now();
    for i in 0..n {
        let node = name(i);
        if !linked.contains(&node) {
            continue;
        }
        published.insert(node.clone(), (Instant::now(), unix_us()));
        ctl.declare(
            &node,
            1,
            Duration::from_secs(3600),
            json!({"resources": []}),
        )
        .expect("publishing");
    }
    let publish_s = t.elapsed().as_secs_f64();
    let publish_start = t;
    let mut first_report: Option<Duration> = None;
    let mut first_read_call: Option<Duration> = None;
    let mut lat = Vec::new();
    let mut down = Vec::new();
    let mut unverified = 0;
    let expected = published.len();
    let deadline = Instant::now() + Duration::from_secs(600);
    while lat.len() < expected && Instant::now() < deadline {
        first_read_call.get_or_insert(publish_start.elapsed());
        let Some(u) = ctl.next_upward(Duration::from_secs(5)) else {
            continue;
        };
        if u.kind != "report" {
            continue;
        }
        if !u.verified || u.payload["version"] != 1 {
            unverified += 1;
            continue;
        }
        first_report.get_or_insert(u.at - publish_start);
        if let Some((p, p_us)) = published.remove(&u.node) {
            lat.push(u.at - p);
            let at_node = u.payload["verified_at_us"].as_u64().unwrap_or(p_us);
            down.push(Duration::from_micros(at_node.saturating_sub(p_us)));
        }
    }
    let round_s = publish_start.elapsed().as_secs_f64();
    let cpu = (
        cpu_s(broker_pid) - cpu_before.0,
        node_pids.iter().map(|p| cpu_s(*p)).sum::<f64>() - cpu_before.1,
        cpu_s(me) - cpu_before.2,
    );
    lat.sort();
    down.sort();
    let rss_after = rabbit.rss_bytes().unwrap_or(0);
    for mut c in children {
        drop(c.stdin.take());
        let _ = c.wait();
    }
    println!(
        "{}",
        json!({
            "n": n,
            "node_processes": procs,
            "linked": linked.len(),
            "reports_verified": lat.len(),
            "reports_unverified": unverified,
            "p50_ms": ms(percentile(&lat, 0.5)),
            "p99_ms": ms(percentile(&lat, 0.99)),
            "max_ms": ms(lat.last().copied().unwrap_or_default()),
            "down_p50_ms": ms(percentile(&down, 0.5)),
            "down_p99_ms": ms(percentile(&down, 0.99)),
            "down_max_ms": ms(down.last().copied().unwrap_or_default()),
            "publish_all_s": (publish_s * 100.0).round() / 100.0,
            "round_s": (round_s * 100.0).round() / 100.0,
            "round_cpu_broker_s": (cpu.0 * 100.0).round() / 100.0,
            "round_cpu_nodes_s": (cpu.1 * 100.0).round() / 100.0,
            "round_cpu_controller_s": (cpu.2 * 100.0).round() / 100.0,
            "first_read_call_ms": ms(first_read_call.unwrap_or_default()),
            "first_report_ms": ms(first_report.unwrap_or_default()),
            "link_all_s": (link_all_s * 100.0).round() / 100.0,
            "provision_s": (provision_s * 100.0).round() / 100.0,
            "baseline_p50_ms": ms(percentile(&baseline, 0.5)),
            "baseline_p99_ms": ms(percentile(&baseline, 0.99)),
            "baseline_max_ms": ms(baseline.last().copied().unwrap_or_default()),
            "broker_rss_idle_mb": rss_idle / 1_000_000,
            "broker_rss_linked_mb": rss_linked / 1_000_000,
            "broker_rss_after_mb": rss_after / 1_000_000,
            "connections": connections,
            "broker_fd_limit": fd_limit,
            "total_s": (started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
        })
    );
}
