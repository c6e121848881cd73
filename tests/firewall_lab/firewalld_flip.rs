//! The flip and the return through the built binary with firewalld as the found firewall, and
//! firewalld running its iptables backend (recognised, and said not to be spoken).

use super::firewalld::firewalld_table;
use super::found::{files, flipped_to_the_derived_filter, stub_systemctl};
use super::*;

/// The flip and the return through the built binary on a node whose found firewall is
/// firewalld: the flip ends firewalld without its cleanup and deletes its table, `/etc/firewalld`
/// byte for byte, `firewalld.service` disabled (never stopped through systemd); the derived
/// filter admits the declared ports and closes the rest. On the return the service manager
/// starts firewalld again — here the lab starts it while `mesh-host adopt` waits for it, standing
/// in for systemd starting `firewalld.service` — and its ruleset, with the openings converged
/// through it again, is what it was before the flip.
#[test]
fn firewalld_the_flip_and_the_return_through_the_binary() {
    let lab = new_lab();
    let net = adoption(&lab);
    let node = &net.node;
    let _listeners: Vec<_> = [SSH, SERVED, OPENED, STORE]
        .iter()
        .map(|p| node.listen_tcp(*p).expect("listener on the node"))
        .collect();
    let public = node_public();
    let mut fw = node
        .start_firewalld(&lab.dir().join("firewalld"))
        .expect("firewalld and dbus are installed; never skipped");
    fw.cmd(&["--permanent", "--add-port=8080/tcp"]).unwrap();
    fw.cmd(&["--reload"]).unwrap();
    let stub = lab.dir().join("stub");
    std::fs::create_dir_all(&stub).unwrap();
    stub_systemctl(&stub);
    let path = format!(
        "PATH={}:{}",
        stub.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let host = Host::wrapped(node, vec!["env".into(), fw.env(), path]);
    host.apply(&declaration(&[
        opening("api/port", OPENED, "incoming"),
        json!({"id": "store/port", "type": "opening", "port": STORE, "proto": "tcp",
               "from": "private", "path": "incoming"}),
    ]));
    expect(
        &net.peer,
        &public,
        OPENED,
        Probe::Reached,
        "adopted: the opening",
    );
    expect(
        &net.peer,
        &public,
        SERVED,
        Probe::Reached,
        "adopted: firewalld's own port",
    );
    expect(
        &net.peer,
        &node_private(),
        STORE,
        Probe::Reached,
        "adopted: the store over the private network",
    );
    let config = files(&fw.config_dir());
    let before = firewalld_table(node);

    let out = host.run(&["converge", "--json"]);
    assert!(out.success(), "the flip: {}\n{}", out.stdout, out.stderr);
    assert!(!fw.is_running(), "firewalld ended by the flip");
    assert_eq!(firewalld_table(node), "", "its table went in the flip");
    assert_eq!(
        files(&fw.config_dir()),
        config,
        "/etc/firewalld byte for byte, converged"
    );
    flipped_to_the_derived_filter(&net, &stub, "firewalld.service");

    let returning = {
        let host_run = host.wrap.clone();
        let node = node.clone();
        let root = host.root();
        std::thread::spawn(move || {
            let mut argv: Vec<&str> = host_run.iter().map(String::as_str).collect();
            argv.extend([MESH, "--root", root.to_str().unwrap(), "adopt", "--json"]);
            node.run(&argv).unwrap()
        })
    };
    // The service manager starting firewalld.service again.
    std::thread::sleep(Duration::from_millis(500));
    fw.start().unwrap();
    let out = returning.join().unwrap();
    assert!(out.success(), "the return: {}\n{}", out.stdout, out.stderr);
    assert_eq!(
        files(&fw.config_dir()),
        config,
        "/etc/firewalld byte for byte, returned"
    );
    assert_eq!(
        firewalld_table(node),
        before,
        "firewalld's ruleset, with the openings through it, as before the flip"
    );
    let mesh = run_ok(node, &["nft", "list", "table", "inet", "mesh_host"]);
    assert!(!mesh.contains("chain input"), "{mesh}");
    expect(
        &net.peer,
        &public,
        SERVED,
        Probe::Reached,
        "returned: firewalld's own port",
    );
    expect(
        &net.peer,
        &public,
        OPENED,
        Probe::Reached,
        "returned: the opening",
    );
    let log = std::fs::read_to_string(stub.join("log")).unwrap_or_default();
    assert!(log.contains("enable firewalld.service"), "{log}");
}

/// firewalld with its iptables backend writes iptables' own tables: it is recognised as
/// firewalld (never taken for iptables-nft and written into), and each opening is reported not
/// admitted there, naming why, with nothing written.
#[test]
fn firewalld_with_its_iptables_backend_is_recognised_and_said_not_to_be_spoken() {
    let lab = new_lab();
    let net = adoption(&lab);
    let node = &net.node;
    let dir = lab.dir().join("firewalld");
    std::fs::create_dir_all(&dir).unwrap();
    lab::run_ok(
        std::process::Command::new("cp")
            .arg("-a")
            .arg("/etc/firewalld")
            .arg(dir.join("etc")),
    )
    .unwrap();
    let conf = dir.join("etc/firewalld.conf");
    let text = std::fs::read_to_string(&conf).unwrap();
    let text: String = text
        .lines()
        .map(|l| {
            if l.starts_with("FirewallBackend=") {
                "FirewallBackend=iptables".to_string()
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(&conf, text + "\n").unwrap();
    let fw = node
        .start_firewalld(&dir)
        .expect("firewalld and dbus are installed; never skipped");
    let host = Host::wrapped(node, vec!["env".into(), fw.env()]);
    let file = host.dir.path().join("declaration.json");
    std::fs::write(
        &file,
        serde_json::to_vec(&declaration(&[opening("api/port", OPENED, "incoming")])).unwrap(),
    )
    .unwrap();
    let out = host.run(&["apply", file.to_str().unwrap(), "--json"]);
    let status = host.status();
    assert!(
        status["kind"].as_str().unwrap().contains("firewalld")
            && !status["kind"].as_str().unwrap().contains("iptables"),
        "{status:#}"
    );
    let layers = presence(&status, "api/port");
    assert!(!layers.is_empty(), "{status:#}");
    assert!(
        layers.iter().all(|p| p.ends_with("=unwritable")),
        "{status:#}"
    );
    assert!(
        status.to_string().contains("FirewallBackend=iptables"),
        "{status:#}"
    );
    let save = run_ok(node, &["iptables-nft-save"]);
    assert!(
        !save.contains("mesh-host:"),
        "nothing written: {save}\n{}",
        out.stdout
    );
}
