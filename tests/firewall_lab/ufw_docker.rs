//! ufw as ufw-docker's setup runs it beside Docker: `/etc/ufw/after.rules` (and after6.rules)
//! make `DOCKER-USER` consult ufw's route rules and then refuse new connections from outside to
//! the containers' private networks, so a published port is reached only through a `ufw route
//! allow` to the container it leads to. Here ufw's route rules really decide: a forwarded
//! opening of a port published on another port than the container serves (`-p 8084:80`) is
//! reached only because the host names the container's address and port 80, in both families;
//! it follows the container when it is recreated with another address, and its removal leaves
//! ufw's rules and files as they were.

use super::found::{files, not_reached};
use super::*;
use lab::{Docker, EngineOptions};
use std::collections::BTreeMap;

/// The port the node publishes and the port the container serves behind it.
const PUBLISHED: u16 = 8084;
const SERVES: u16 = 80;

/// The containers' IPv6 network (a unique local one, refused from outside like the IPv4
/// private networks).
const DOCKER_V6: &str = "fd00:d0c::/64";

/// What ufw-docker's setup appends to `/etc/ufw/after.rules`, in the lab's words: the
/// containers' forward path first asks ufw's route rules, lets the private networks' own traffic
/// (and DNS answers) through, and drops every new connection from elsewhere to a private address.
const AFTER_RULES: &str = "
# ufw-docker: published ports are opened with `ufw route allow ... to CONTAINER port PORT`
*filter
:ufw-user-forward - [0:0]
:DOCKER-USER - [0:0]
-A DOCKER-USER -j ufw-user-forward
-A DOCKER-USER -s 10.0.0.0/8 -j RETURN
-A DOCKER-USER -s 172.16.0.0/12 -j RETURN
-A DOCKER-USER -s 192.168.0.0/16 -j RETURN
-A DOCKER-USER -p udp -m udp --sport 53 --dport 1024:65535 -j RETURN
-A DOCKER-USER -d 10.0.0.0/8 -p tcp -m tcp --tcp-flags FIN,SYN,RST,ACK SYN -j DROP
-A DOCKER-USER -d 172.16.0.0/12 -p tcp -m tcp --tcp-flags FIN,SYN,RST,ACK SYN -j DROP
-A DOCKER-USER -d 192.168.0.0/16 -p tcp -m tcp --tcp-flags FIN,SYN,RST,ACK SYN -j DROP
-A DOCKER-USER -d 10.0.0.0/8 -p udp -m udp --dport 0:32767 -j DROP
-A DOCKER-USER -d 172.16.0.0/12 -p udp -m udp --dport 0:32767 -j DROP
-A DOCKER-USER -d 192.168.0.0/16 -p udp -m udp --dport 0:32767 -j DROP
-A DOCKER-USER -j RETURN
COMMIT
";

/// The same for IPv6 in `/etc/ufw/after6.rules`, with the unique local addresses as the
/// private networks.
const AFTER6_RULES: &str = "
# ufw-docker: published ports are opened with `ufw route allow ... to CONTAINER port PORT`
*filter
:ufw6-user-forward - [0:0]
:DOCKER-USER - [0:0]
-A DOCKER-USER -j ufw6-user-forward
-A DOCKER-USER -s fc00::/7 -j RETURN
-A DOCKER-USER -p udp -m udp --sport 53 --dport 1024:65535 -j RETURN
-A DOCKER-USER -d fc00::/7 -p tcp -m tcp --tcp-flags FIN,SYN,RST,ACK SYN -j DROP
-A DOCKER-USER -d fc00::/7 -p udp -m udp --dport 0:32767 -j DROP
-A DOCKER-USER -j RETURN
COMMIT
";

/// A container's addresses on Docker's default bridge, IPv4 and (when it has one) IPv6.
fn container_addrs(docker: &Docker, name: &str) -> (String, String) {
    let out = docker
        .docker(&[
            "inspect",
            "-f",
            "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{.GlobalIPv6Address}}{{end}}",
            name,
        ])
        .expect("docker inspect");
    let mut words = out.stdout.split_whitespace();
    let v4 = words.next().unwrap_or_default().to_string();
    let v6 = words.next().unwrap_or_default().to_string();
    assert!(!v4.is_empty(), "{name} has no IPv4 address: {out:?}");
    (v4, v6)
}

/// A container's IPv4 address on Docker's default bridge.
pub(super) fn container_v4(docker: &Docker, name: &str) -> String {
    container_addrs(docker, name).0
}

/// The web server: busybox httpd on [`SERVES`], published on [`PUBLISHED`].
fn run_web(docker: &Docker) -> (String, String) {
    docker
        .run_container(
            "web",
            &["-p", &format!("{PUBLISHED}:{SERVES}")],
            &["/bin/httpd", "-f", "-p", &SERVES.to_string(), "-h", "/www"],
        )
        .expect("a container publishing 8084 for its port 80");
    let (v4, v6) = container_addrs(docker, "web");
    assert!(!v6.is_empty(), "the container has no IPv6 address");
    (v4, v6)
}

/// ufw's files but the two it keeps its added rules in.
fn files_but_user_rules(ufw: &lab::Ufw) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut all = files(&ufw.config_dir());
    all.retain(|p, _| {
        !matches!(
            p.file_name().and_then(|n| n.to_str()),
            Some("user.rules" | "user6.rules")
        )
    });
    all
}

/// The marked route rules `ufw show added` lists.
fn marked(ufw: &lab::Ufw) -> Vec<String> {
    ufw.cmd(&["show", "added"])
        .unwrap()
        .stdout
        .lines()
        .filter(|l| l.contains("'mesh-host:"))
        .map(String::from)
        .collect()
}

/// The route rules the opening needs, as ufw lists them: one per family, to the container.
fn route_rules(v4: &str, v6: &str) -> Vec<String> {
    [v4, v6]
        .iter()
        .map(|a| {
            format!("ufw route allow to {a} port {SERVES} proto tcp comment 'mesh-host:web/pub#")
        })
        .collect()
}

fn assert_rules(got: &[String], want: &[String]) {
    assert_eq!(got.len(), want.len(), "{got:#?}");
    for w in want {
        assert!(got.iter().any(|g| g.starts_with(w)), "no {w} in {got:#?}");
    }
}

#[test]
fn ufw_docker_a_forwarded_opening_is_a_route_rule_to_the_container_and_follows_it() {
    let lab = new_lab();
    let net = adoption(&lab);
    let node = &net.node;
    let public = node_public();
    let ufw = node
        .prepare_ufw(&lab.dir().join("ufw"))
        .expect("ufw is installed (apt-get install ufw); never skipped");
    // The operator's setup: ufw-docker's lines in ufw's own files, then ufw enabled.
    for (file, text) in [("after.rules", AFTER_RULES), ("after6.rules", AFTER6_RULES)] {
        let path = ufw.config_dir().join(file);
        let mut body = std::fs::read_to_string(&path).expect("ufw's after rules");
        body.push_str(text);
        std::fs::write(&path, body).unwrap();
    }
    for args in [vec!["allow", "22/tcp"], vec!["--force", "enable"]] {
        ufw.cmd(&args).unwrap();
    }
    let docker = node
        .start_docker_with(&lab.dir().join("docker"), &EngineOptions::ipv6(DOCKER_V6))
        .expect("a Docker engine in the node's namespace (docker.io, busybox-static)");
    let (v4, v6) = run_web(&docker);
    // Docker 20.10 (the lab's) jumps from FORWARD to DOCKER-USER in IPv4 only (moby#44451,
    // fixed in later releases): this one rule stands in for the jump a newer Docker makes
    // first in IPv6's FORWARD too, so that ufw-docker's IPv6 lines are consulted.
    run_ok(
        node,
        &["ip6tables", "-I", "FORWARD", "1", "-j", "DOCKER-USER"],
    );
    not_reached(
        &net.peer,
        &public,
        PUBLISHED,
        "ufw-docker's rules refuse a published port nothing opened",
    );
    let added_before = ufw.cmd(&["show", "added"]).unwrap().stdout;
    let config = files_but_user_rules(&ufw);

    let host = Host::wrapped(node, ufw.enter(&[]));
    let decl = declaration(&[opening("web/pub", PUBLISHED, "forwarded")]);
    host.apply(&decl);
    expect(
        &net.peer,
        &public,
        PUBLISHED,
        Probe::Reached,
        "opened by a route rule to the container",
    );
    assert_rules(&marked(&ufw), &route_rules(&v4, &v6));
    let status = host.status();
    let layers = presence(&status, "web/pub");
    assert!(!layers.is_empty(), "no layer drops the opening: {status:#}");
    assert!(layers.iter().all(|p| p.ends_with("=present")), "{status:#}");

    // ufw reloads from its files, which hold the rules.
    ufw.cmd(&["reload"]).unwrap();
    expect(
        &net.peer,
        &public,
        PUBLISHED,
        Probe::Reached,
        "still open after ufw reload",
    );

    // The container is recreated and gets other addresses (another container took its old
    // ones): the rules to the old addresses no longer open anything, and the next check
    // replaces them.
    docker.remove_container("web").unwrap();
    docker
        .run_container("squat", &[], &["sleep", "3600"])
        .expect("a container taking the old addresses");
    let (v4_new, v6_new) = run_web(&docker);
    assert_ne!(v4_new, v4, "the container kept its IPv4 address");
    assert_ne!(v6_new, v6, "the container kept its IPv6 address");
    not_reached(
        &net.peer,
        &public,
        PUBLISHED,
        "the rules still name the old addresses",
    );
    host.reconcile();
    expect(
        &net.peer,
        &public,
        PUBLISHED,
        Probe::Reached,
        "the rules follow the container",
    );
    assert_rules(&marked(&ufw), &route_rules(&v4_new, &v6_new));

    // Nothing publishes the port: the rules go, and the state says why; the opening is not in
    // force, so the reconcile exits 5.
    docker.remove_container("web").unwrap();
    host.reconcile_not_in_force();
    assert_eq!(ufw.cmd(&["show", "added"]).unwrap().stdout, added_before);
    let status = host.status();
    let text = status.to_string();
    assert!(
        text.contains("no DNAT rule translates tcp port 8084"),
        "{status:#}"
    );
    // Published again: the next check writes it.
    let (v4_back, v6_back) = run_web(&docker);
    host.reconcile();
    assert_rules(&marked(&ufw), &route_rules(&v4_back, &v6_back));
    expect(
        &net.peer,
        &public,
        PUBLISHED,
        Probe::Reached,
        "published again, opened again",
    );

    // Removal: refused again, ufw's rules and files as they were found.
    host.apply(&declaration(&[]));
    not_reached(&net.peer, &public, PUBLISHED, "removed");
    assert_eq!(ufw.cmd(&["show", "added"]).unwrap().stdout, added_before);
    assert_eq!(
        files_but_user_rules(&ufw),
        config,
        "/etc/ufw byte for byte but its rule files"
    );
}
