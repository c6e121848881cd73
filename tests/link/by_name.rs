//! A token naming the broker by host name: resolved by the node itself through a real nameserver
//! (dnsmasq) in its namespace, or through its hosts file, each address tried in turn; and a name
//! that does not resolve refused with an error naming it, nothing stored.

use super::{bed, linked, root};
use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

/// Writes the node's own `etc/hosts` and `etc/resolv.conf` under its root (what `--root` makes
/// the host read in place of the machine's).
fn name_files(root: &Path, hosts: &str, resolv_conf: &str) {
    std::fs::create_dir_all(root.join("etc")).unwrap();
    std::fs::write(root.join("etc/hosts"), hosts).unwrap();
    std::fs::write(root.join("etc/resolv.conf"), resolv_conf).unwrap();
}

fn relay_port() -> u16 {
    let addr: std::net::SocketAddr = bed().relay.addr().parse().unwrap();
    addr.port()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn a_token_naming_the_broker_by_name_enrols_through_the_lab_nameserver() {
    let bed = bed();
    let ns = lab::Nameserver::start(
        &bed.node,
        ip("127.0.0.53"),
        "mesh.lab",
        &[("broker.mesh.lab", ip("127.0.0.1"))],
    )
    .expect("dnsmasq in the node's namespace");
    let named = format!("broker.mesh.lab:{}", relay_port());
    let mut ctl = lab::Controller::connect_to(&bed.rabbit, vec![named.clone()]).unwrap();
    let (_d, r) = root();
    // The hosts file does not name the broker: only the nameserver does.
    name_files(
        &r,
        "127.0.0.1 localhost\n",
        &format!("nameserver {}\noptions timeout:2\n", ns.addr()),
    );
    let issued = ctl.issue("by-name", Duration::from_secs(600)).unwrap();
    assert_eq!(issued.token.brokers, vec![named.clone()]);
    let out = bed.enrol(&r, &issued.text);
    assert!(
        out.success(),
        "{}\n{}\nnameserver:\n{}",
        out.stdout,
        out.stderr,
        ns.log()
    );
    assert!(
        out.stdout.contains(&format!("through broker {named}")),
        "{}",
        out.stdout
    );
    let asked = |log: &str| log.matches("query[A] broker.mesh.lab").count();
    assert!(asked(&ns.log()) >= 1, "the node asked: {}", ns.log());
    assert_eq!(
        ctl.take_enrolments(Duration::from_secs(20)).unwrap().len(),
        1
    );
    let kept: serde_json::Value =
        serde_json::from_slice(&std::fs::read(r.join("var/lib/mesh-host/link.json")).unwrap())
            .unwrap();
    assert_eq!(
        kept["broker"]["addrs"][0],
        named.as_str(),
        "the name is kept"
    );

    // The resident host resolves the name again for its own link.
    let before = asked(&ns.log());
    let resident = bed.resident(&r);
    linked(&mut ctl, "by-name", Duration::from_secs(30));
    assert!(
        asked(&ns.log()) > before,
        "the link asked again: {}\n{}",
        ns.log(),
        resident.log()
    );
}

#[test]
fn each_address_of_a_name_is_tried_and_a_name_that_does_not_resolve_is_named() {
    let bed = bed();
    let ns = lab::Nameserver::start(&bed.node, ip("127.0.0.54"), "mesh.lab", &[])
        .expect("dnsmasq in the node's namespace");
    let port = relay_port();
    let conf = format!("nameserver {}\noptions timeout:2\n", ns.addr());

    // The hosts file gives two addresses; nothing listens on the first, so only trying the next
    // one enrols.
    let hosts = "127.0.0.9 rabbit.hosts.lab\n127.0.0.1 rabbit.hosts.lab\n";
    let named = format!("rabbit.hosts.lab:{port}");
    let mut ctl = lab::Controller::connect_to(&bed.rabbit, vec![named.clone()]).unwrap();
    let (_d, r) = root();
    name_files(&r, hosts, &conf);
    let issued = ctl.issue("by-hosts", Duration::from_secs(600)).unwrap();
    let out = bed.enrol(&r, &issued.text);
    assert!(out.success(), "{}\n{}", out.stdout, out.stderr);
    assert!(
        !ns.log().contains("rabbit.hosts.lab"),
        "a name in the hosts file is asked of no nameserver: {}",
        ns.log()
    );

    // A name the nameserver does not know: refused, the name and the reason given.
    let nowhere = format!("nowhere.mesh.lab:{port}");
    let mut ctl = lab::Controller::connect_to(&bed.rabbit, vec![nowhere.clone()]).unwrap();
    let (_d, r) = root();
    name_files(&r, "127.0.0.1 localhost\n", &conf);
    let issued = ctl.issue("by-nowhere", Duration::from_secs(600)).unwrap();
    let out = bed.enrol(&r, &issued.text);
    assert_eq!(out.status.code(), Some(1), "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains("broker name nowhere.mesh.lab")
            && out.stderr.contains("does not exist")
            && out.stderr.contains("NXDOMAIN"),
        "{}",
        out.stderr
    );
    assert!(
        ns.log().contains("query[A] nowhere.mesh.lab"),
        "{}",
        ns.log()
    );
    assert!(
        !r.join("var/lib/mesh-host").exists(),
        "a failed enrolment stored nothing"
    );
}
