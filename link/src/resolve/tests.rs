//! The resolver's tests: the two files read as the C library reads them, and lookups against
//! nameservers these tests run on loopback ports of their own (UDP and TCP), which answer,
//! truncate, refuse, send another query's answer first, or stay silent.

use super::*;
use crate::dns::encode_answer;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn the_hosts_file_gives_every_address_of_the_name_in_its_order() {
    let text = "\
# a comment naming broker.mesh 10.9.9.9
127.0.0.1 localhost
10.0.0.1   Broker.Mesh broker   # the broker
fe80::1%eth0 broker.mesh.
10.0.0.1 broker.mesh
bogus broker.mesh
10.0.0.2 brokers.mesh
";
    assert_eq!(
        from_hosts(text, "broker.mesh"),
        vec![ip("10.0.0.1"), ip("fe80::1")]
    );
    assert_eq!(from_hosts(text, "broker"), vec![ip("10.0.0.1")]);
    assert!(from_hosts(text, "mesh").is_empty());
}

#[test]
fn resolv_conf_gives_three_nameservers_and_bounded_options() {
    let c = parse_conf(
        "search lab\nnameserver 10.0.0.53\nnameserver fd00::53%eth0\n# nameserver 1.1.1.1\n\
         nameserver 10.0.0.54\nnameserver 10.0.0.55\noptions rotate timeout:99 attempts:0\n",
    );
    assert_eq!(
        c.nameservers,
        vec![ip("10.0.0.53"), ip("fd00::53"), ip("10.0.0.54")]
    );
    assert_eq!(c.timeout, Duration::from_secs(30));
    assert_eq!(c.attempts, 1);
    let none = parse_conf("");
    assert_eq!(none.nameservers, vec![ip("127.0.0.1")]);
    assert_eq!((none.timeout, none.attempts), (Duration::from_secs(5), 2));
}

/// How a test nameserver answers.
#[derive(Clone, Copy)]
enum Behaviour {
    /// The records, over UDP.
    Answer,
    /// Truncated over UDP, the records over TCP.
    Truncate,
    /// An answer to another id first, then the records.
    Spoofed,
    /// NXDOMAIN for every name.
    NoSuchName,
    /// Nothing at all.
    Silent,
    /// The A query answered, the AAAA query dropped.
    NoAaaa,
}

/// A nameserver on a loopback port: its port and how many queries it has had.
fn nameserver(rt: &tokio::runtime::Runtime, how: Behaviour) -> (u16, Arc<AtomicUsize>) {
    let queries = Arc::new(AtomicUsize::new(0));
    let (udp, tcp) = rt.block_on(async {
        loop {
            let udp = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
            let port = udp.local_addr().unwrap().port();
            if let Ok(tcp) = tokio::net::TcpListener::bind(("127.0.0.1", port)).await {
                return (udp, tcp);
            }
        }
    });
    let port = udp.local_addr().unwrap().port();
    let reply = move |q: &[u8], over_tcp: bool| -> Vec<u8> {
        let kind_aaaa = q[q.len() - 3] == 28;
        let records: Vec<(&str, std::result::Result<IpAddr, &str>)> = if kind_aaaa {
            vec![("broker.mesh", Ok(ip("fd00::1")))]
        } else {
            vec![
                ("broker.mesh", Err("rabbit.mesh")),
                ("rabbit.mesh", Ok(ip("10.0.0.1"))),
                ("rabbit.mesh", Ok(ip("10.0.0.2"))),
            ]
        };
        match how {
            Behaviour::NoSuchName => encode_answer(q, 3, false, &[]),
            Behaviour::Truncate if !over_tcp => encode_answer(q, 0, true, &[]),
            _ => encode_answer(q, 0, false, &records),
        }
    };
    let n = queries.clone();
    rt.spawn(async move {
        let mut buf = [0u8; 512];
        loop {
            let Ok((len, from)) = udp.recv_from(&mut buf).await else {
                return;
            };
            n.fetch_add(1, Ordering::Relaxed);
            let q = buf[..len].to_vec();
            match how {
                Behaviour::Silent => continue,
                Behaviour::NoAaaa if q[len - 3] == 28 => continue,
                Behaviour::Spoofed => {
                    let mut other = q.clone();
                    other[0] ^= 0xff;
                    let _ = udp
                        .send_to(&encode_answer(&other, 0, false, &[]), from)
                        .await;
                }
                _ => {}
            }
            let _ = udp.send_to(&reply(&q, false), from).await;
        }
    });
    // Every query a connection carries is answered on it, as RFC 7766 has nameservers do
    // (hickory asks its A and AAAA queries over one connection).
    rt.spawn(async move {
        while let Ok((mut s, _)) = tcp.accept().await {
            tokio::spawn(async move {
                loop {
                    let mut len = [0u8; 2];
                    if s.read_exact(&mut len).await.is_err() {
                        return;
                    }
                    let mut q = vec![0u8; usize::from(u16::from_be_bytes(len))];
                    if s.read_exact(&mut q).await.is_err() {
                        return;
                    }
                    let a = reply(&q, true);
                    let mut framed = (a.len() as u16).to_be_bytes().to_vec();
                    framed.extend_from_slice(&a);
                    if s.write_all(&framed).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (port, queries)
}

/// A resolver whose files are written in a temporary directory.
fn resolver(hosts: &str, conf: &str, port: u16) -> (tempfile::TempDir, Resolver) {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(d.path().join("etc")).unwrap();
    std::fs::write(d.path().join("etc/hosts"), hosts).unwrap();
    std::fs::write(d.path().join("etc/resolv.conf"), conf).unwrap();
    let mut r = Resolver::under(d.path());
    r.port = port;
    (d, r)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

const CONF: &str = "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n";

#[test]
fn a_name_in_the_hosts_file_is_not_asked_of_any_nameserver() {
    let rt = runtime();
    let (port, queries) = nameserver(&rt, Behaviour::Answer);
    let (_d, r) = resolver("10.1.1.1 broker.mesh\n", CONF, port);
    assert_eq!(
        rt.block_on(r.lookup("BROKER.mesh")).unwrap(),
        vec![ip("10.1.1.1")]
    );
    assert_eq!(
        rt.block_on(r.lookup("10.2.2.2")).unwrap(),
        vec![ip("10.2.2.2")]
    );
    assert_eq!(queries.load(Ordering::Relaxed), 0);
}

#[test]
fn a_name_is_asked_for_a_and_aaaa_over_udp_and_its_aliases_followed() {
    let rt = runtime();
    for how in [Behaviour::Answer, Behaviour::Spoofed] {
        let (port, queries) = nameserver(&rt, how);
        let (_d, r) = resolver("", CONF, port);
        assert_eq!(
            rt.block_on(r.lookup("broker.mesh")).unwrap(),
            vec![ip("10.0.0.1"), ip("10.0.0.2"), ip("fd00::1")]
        );
        assert_eq!(queries.load(Ordering::Relaxed), 2, "one A, one AAAA");
    }
}

#[test]
fn a_nameserver_that_drops_aaaa_queries_still_gives_the_a_records() {
    let rt = runtime();
    let (port, _) = nameserver(&rt, Behaviour::NoAaaa);
    let (_d, r) = resolver("", CONF, port);
    assert_eq!(
        rt.block_on(r.lookup("broker.mesh")).unwrap(),
        vec![ip("10.0.0.1"), ip("10.0.0.2")]
    );
}

#[test]
fn a_truncated_answer_is_asked_again_over_tcp() {
    let rt = runtime();
    let (port, _) = nameserver(&rt, Behaviour::Truncate);
    let (_d, r) = resolver("", CONF, port);
    assert_eq!(
        rt.block_on(r.lookup("broker.mesh")).unwrap(),
        vec![ip("10.0.0.1"), ip("10.0.0.2"), ip("fd00::1")]
    );
}

#[test]
fn a_name_that_does_not_resolve_is_named_with_why() {
    let rt = runtime();
    let (port, _) = nameserver(&rt, Behaviour::NoSuchName);
    let (_d, r) = resolver("", CONF, port);
    let e = rt
        .block_on(r.lookup("nowhere.mesh"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("nowhere.mesh") && e.contains("NXDOMAIN") && e.contains("etc/hosts"),
        "{e}"
    );

    // A silent nameserver: each query given up after its timeout, the next nameserver tried.
    let (silent, queries) = nameserver(&rt, Behaviour::Silent);
    let (_d, r) = resolver(
        "",
        "nameserver 127.0.0.1\nnameserver 127.0.0.1\noptions timeout:1 attempts:1\n",
        silent,
    );
    let started = std::time::Instant::now();
    let e = rt
        .block_on(r.lookup("broker.mesh"))
        .unwrap_err()
        .to_string();
    let took = started.elapsed();
    assert!(
        e.contains("broker.mesh") && e.contains("no answer within 1s"),
        "{e}"
    );
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(4),
        "{took:?}"
    );
    assert_eq!(queries.load(Ordering::Relaxed), 4);

    let (_d, r) = resolver("", CONF, port);
    let e = rt.block_on(r.lookup("bad_name!")).unwrap_err().to_string();
    assert!(
        e.contains("bad_name!") && e.contains("not a host name"),
        "{e}"
    );
}
