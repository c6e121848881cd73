//! Each distribution's own files for the found firewall, through the flip and the return with
//! the built binary: Alpine's `/etc/nftables.nft` with its `/etc/nftables.d/*.nft`, Fedora's
//! `/etc/sysconfig/nftables.conf`, RHEL's `/etc/sysconfig/iptables` and `ip6tables`. The flip
//! retires what they load and leaves every file byte-identical; the return puts the same
//! ruleset back, and leaves them so again. Probed before, between and after.

use super::found::{files, flipped_to_the_derived_filter, stub_systemctl};
use super::*;

const INPUT_DROP: &str = "table inet filter {
	chain input {
		type filter hook input priority filter; policy drop;
		ct state established,related accept
		iifname \"lo\" accept
		meta l4proto ipv6-icmp accept
		tcp dport { 22, 8080 } accept
	}
}
";

/// One distribution's layout: the files below the root, and how its boot unit loads them.
struct Layout {
    name: &'static str,
    files: Vec<(&'static str, String)>,
    /// Loads the files as the distribution's unit does.
    load: fn(&Machine, &Path),
    unit: &'static str,
    /// The found firewall as text, to compare before the flip and after the return.
    found: fn(&Machine) -> String,
    /// Whether what the files load is out of the running ruleset.
    retired: fn(&Machine) -> bool,
}

fn nft_retired(node: &Machine) -> bool {
    !node
        .run(&["nft", "list", "table", "inet", "filter"])
        .unwrap()
        .success()
}

fn iptables_retired(node: &Machine) -> bool {
    !iptables_found(node).contains("--dport 8080")
}

fn nft_found(node: &Machine) -> String {
    without_marked(&run_ok(node, &["nft", "list", "table", "inet", "filter"]))
}

fn iptables_found(node: &Machine) -> String {
    without_marked(&format!(
        "{}{}",
        View::Save("iptables-nft-save").read(node),
        View::Save("ip6tables-nft-save").read(node)
    ))
}

fn layouts() -> Vec<Layout> {
    vec![
        Layout {
            name: "alpine",
            files: vec![
                (
                    "etc/nftables.nft",
                    "#!/usr/sbin/nft -f\nflush ruleset\ninclude \"/etc/nftables.d/*.nft\"\n"
                        .to_string(),
                ),
                ("etc/nftables.d/filter.nft", INPUT_DROP.to_string()),
            ],
            // Alpine's OpenRC service runs `nft -f /etc/nftables.nft`; its include names the
            // machine's /etc, so the lab loads the included file beside it.
            load: |node, root| {
                let all = format!(
                    "flush ruleset\n{}",
                    std::fs::read_to_string(root.join("etc/nftables.d/filter.nft")).unwrap()
                );
                let f = root.join("load.nft");
                std::fs::write(&f, all).unwrap();
                run_ok(node, &["nft", "-f", f.to_str().unwrap()]);
                std::fs::remove_file(f).unwrap();
            },
            unit: "nftables.service",
            found: nft_found,
            retired: nft_retired,
        },
        Layout {
            name: "fedora",
            files: vec![(
                "etc/sysconfig/nftables.conf",
                format!("flush ruleset\n{INPUT_DROP}"),
            )],
            load: |node, root| {
                let f = root.join("etc/sysconfig/nftables.conf");
                run_ok(node, &["nft", "-f", f.to_str().unwrap()]);
            },
            unit: "nftables.service",
            found: nft_found,
            retired: nft_retired,
        },
        Layout {
            name: "rhel",
            files: vec![
                (
                    "etc/sysconfig/iptables",
                    "*filter\n:INPUT DROP [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n\
                     -A INPUT -m state --state RELATED,ESTABLISHED -j ACCEPT\n\
                     -A INPUT -i lo -j ACCEPT\n\
                     -A INPUT -p tcp -m state --state NEW -m tcp --dport 22 -j ACCEPT\n\
                     -A INPUT -p tcp -m state --state NEW -m tcp --dport 8080 -j ACCEPT\n\
                     COMMIT\n"
                        .to_string(),
                ),
                (
                    "etc/sysconfig/ip6tables",
                    "*filter\n:INPUT DROP [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n\
                     -A INPUT -m state --state RELATED,ESTABLISHED -j ACCEPT\n\
                     -A INPUT -p ipv6-icmp -j ACCEPT\n\
                     -A INPUT -i lo -j ACCEPT\n\
                     -A INPUT -p tcp -m state --state NEW -m tcp --dport 22 -j ACCEPT\n\
                     -A INPUT -p tcp -m state --state NEW -m tcp --dport 8080 -j ACCEPT\n\
                     COMMIT\n"
                        .to_string(),
                ),
            ],
            load: |node, root| {
                for (program, file) in [
                    ("iptables-nft-restore", "etc/sysconfig/iptables"),
                    ("ip6tables-nft-restore", "etc/sysconfig/ip6tables"),
                ] {
                    let f = root.join(file);
                    run_ok(node, &[program, "-w", "5", f.to_str().unwrap()]);
                }
            },
            unit: "iptables.service",
            found: iptables_found,
            retired: iptables_retired,
        },
    ]
}

fn through_the_flip_and_back(layout: &Layout) {
    let lab = new_lab();
    let net = adoption(&lab);
    let node = &net.node;
    let _listeners: Vec<_> = [SSH, SERVED, OPENED, STORE]
        .iter()
        .map(|p| node.listen_tcp(*p).expect("listener on the node"))
        .collect();
    let stub = lab.dir().join("stub");
    std::fs::create_dir_all(&stub).unwrap();
    stub_systemctl(&stub);
    let path = format!(
        "PATH={}:{}",
        stub.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let host = Host::wrapped(node, vec!["env".into(), path]);
    let root = host.root();
    for (rel, text) in &layout.files {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
    }
    (layout.load)(node, &root);
    let etc = files(&root.join("etc"));
    let name = layout.name;
    host.apply(&declaration(&[
        opening("api/port", OPENED, "incoming"),
        json!({"id": "store/port", "type": "opening", "port": STORE, "proto": "tcp",
               "from": "private", "path": "incoming"}),
    ]));
    let public = node_public();
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
        "adopted: the served port",
    );
    let found = (layout.found)(node);
    assert!(!(layout.retired)(node), "{name}: loaded before the flip");

    let preview = host.run(&["converge", "--preview", "--json"]);
    assert!(
        preview.status.code() == Some(4),
        "{name}: {}\n{}",
        preview.stdout,
        preview.stderr
    );
    let preview: Value = serde_json::from_str(&preview.stdout).unwrap();
    let config = preview["found_firewall"].to_string();
    for (rel, _) in &layout.files {
        if !rel.contains("nftables.d") {
            assert!(
                config.contains(&format!("/{rel}")),
                "{name}: the preview names /{rel}: {preview:#}"
            );
        }
    }
    let out = host.run(&["converge", "--json"]);
    assert!(
        out.success(),
        "{name}: the flip: {}\n{}",
        out.stdout,
        out.stderr
    );
    flipped_to_the_derived_filter(&net, &stub, layout.unit);
    assert!(
        (layout.retired)(node),
        "{name}: what its files load is retired"
    );
    assert_eq!(
        files(&root.join("etc")),
        etc,
        "{name}: its files, converged"
    );

    let out = host.run(&["adopt", "--json"]);
    assert!(
        out.success(),
        "{name}: the return: {}\n{}",
        out.stdout,
        out.stderr
    );
    assert_eq!(files(&root.join("etc")), etc, "{name}: its files, returned");
    assert_eq!((layout.found)(node), found, "{name}: its ruleset, returned");
    expect(
        &net.peer,
        &public,
        SERVED,
        Probe::Reached,
        "returned: the served port",
    );
    expect(
        &net.peer,
        &public,
        OPENED,
        Probe::Reached,
        "returned: the opening",
    );
}

#[test]
fn alpine_s_nftables_nft_and_its_directory_through_the_flip_and_the_return() {
    through_the_flip_and_back(&layouts().remove(0));
}

#[test]
fn fedora_s_sysconfig_nftables_conf_through_the_flip_and_the_return() {
    through_the_flip_and_back(&layouts().remove(1));
}

#[test]
fn rhel_s_sysconfig_iptables_through_the_flip_and_the_return() {
    through_the_flip_and_back(&layouts().remove(2));
}

/// A ban held in the found firewall's own table (a set its file fills) goes with the table at the
/// flip, since the derived filter carries no ban: the preview names it as a refusal the flip
/// lifts, and the banned source does reach the declared port once converged (probed).
#[test]
fn a_ban_in_the_found_table_is_named_as_lifted_and_the_flip_lifts_it() {
    const BANNED: std::net::Ipv4Addr = std::net::Ipv4Addr::new(192, 0, 2, 77);
    let lab = new_lab();
    let net = adoption(&lab);
    let node = &net.node;
    let _listeners: Vec<_> = [SSH, OPENED, STORE]
        .iter()
        .map(|p| node.listen_tcp(*p).expect("listener on the node"))
        .collect();
    net.outside
        .add_address(
            lab::addr::PUBLIC_IF,
            BANNED.into(),
            lab::addr::PUBLIC_V4_PREFIX,
        )
        .expect("the banned address on the outside machine");
    let stub = lab.dir().join("stub");
    std::fs::create_dir_all(&stub).unwrap();
    stub_systemctl(&stub);
    let path = format!(
        "PATH={}:{}",
        stub.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let host = Host::wrapped(node, vec!["env".into(), path]);
    let root = host.root();
    let conf = root.join("etc/nftables.conf");
    std::fs::create_dir_all(conf.parent().unwrap()).unwrap();
    std::fs::write(
        &conf,
        format!(
            "flush ruleset\ntable inet filter {{\n\tset banned {{ type ipv4_addr; elements = {{ {BANNED} }} }}\n\
             \tchain input {{\n\t\ttype filter hook input priority filter; policy drop;\n\
             \t\tct state established,related accept\n\t\tiifname \"lo\" accept\n\
             \t\tip saddr @banned drop\n\t\ttcp dport {{ 22, {OPENED} }} accept\n\t}}\n}}\n"
        ),
    )
    .unwrap();
    run_ok(node, &["nft", "-f", conf.to_str().unwrap()]);
    host.apply(&declaration(&[
        opening("api/port", OPENED, "incoming"),
        json!({"id": "store/port", "type": "opening", "port": STORE, "proto": "tcp",
               "from": "private", "path": "incoming"}),
    ]));
    let public: IpAddr = NODE_PUBLIC_V4.into();
    let from_banned = || {
        net.outside
            .probe_tcp_from(BANNED.into(), public, OPENED, SILENCE)
            .unwrap()
    };
    assert_ne!(
        from_banned(),
        Probe::Reached,
        "adopted: the ban refuses its source"
    );
    expect(
        &net.outside,
        &[public],
        OPENED,
        Probe::Reached,
        "adopted: the port",
    );

    let out = host.run(&["converge", "--preview", "--json"]);
    assert_eq!(out.status.code(), Some(4), "{}\n{}", out.stdout, out.stderr);
    let preview: Value = crate::util::contract(&out.stdout);
    let lifts = preview["lifts"].as_array().unwrap();
    assert!(
        lifts.iter().any(|l| {
            let l = l.as_str().unwrap();
            l.contains(&format!("{BANNED}/32")) && l.contains("inet filter input")
        }),
        "the preview names the ban it lifts: {preview:#}"
    );
    let out = host.run(&["converge", "--preview"]);
    assert!(
        out.stdout.contains("refusals the flip LIFTS"),
        "{}",
        out.stdout
    );

    let out = host.run(&["converge", "--json"]);
    assert!(out.success(), "the flip: {}\n{}", out.stdout, out.stderr);
    assert_eq!(
        from_banned(),
        Probe::Reached,
        "converged: the derived filter carries no ban, as the preview said"
    );
}
