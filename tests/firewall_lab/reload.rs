//! A found firewall reloaded from its file loses the openings (and, with `flush ruleset`, the
//! orphaned guard) until the next reconcile puts them back.

use super::*;

/// Which file a found firewall is reloaded from, and how.
#[derive(Debug, Clone, Copy)]
enum Reload {
    /// `nft -f FILE`, the file starting with `flush ruleset`.
    Nft,
    /// `iptables-nft-restore` and `ip6tables-nft-restore` of what `-save` printed.
    IptablesNft,
    /// `iptables-legacy-restore` and `ip6tables-legacy-restore` likewise.
    IptablesLegacy,
}

fn reload_then_reconcile(kind: Reload) {
    let lab = new_lab();
    let net = adoption(&lab);
    let node = &net.node;
    let _listeners: Vec<_> = [SSH, SERVED, OPENED, STORE]
        .iter()
        .map(|p| node.listen_tcp(*p).expect("listener on the node"))
        .collect();
    let public = node_public();
    let dir = lab.dir();
    // The found firewall as its files say, and the command that reloads them.
    let (reload, views): (Vec<Vec<String>>, Vec<View>) = match kind {
        Reload::Nft => {
            let file = load_nft(node, dir, "nftables.conf", INET_INPUT_DROP);
            (
                vec![vec!["nft".into(), "-f".into(), file.display().to_string()]],
                vec![View::Nft],
            )
        }
        Reload::IptablesNft | Reload::IptablesLegacy => {
            let backend = if matches!(kind, Reload::IptablesNft) {
                "nft"
            } else {
                "legacy"
            };
            let mut reload = Vec::new();
            let mut views = Vec::new();
            for (family, program) in [("v4", "iptables"), ("v6", "ip6tables")] {
                let program = format!("{program}-{backend}");
                run_all(node, &xt_input_drop(&program));
                let saved = run_ok(node, &[&format!("{program}-save")]);
                let file = dir.join(format!("rules.{family}"));
                std::fs::write(&file, saved).unwrap();
                reload.push(vec![
                    format!("{program}-restore"),
                    // `-w` takes the next argument as its seconds if there is one, so it is given.
                    "-w".into(),
                    "30".into(),
                    file.display().to_string(),
                ]);
                views.push(View::Save(if backend == "nft" {
                    if family == "v4" {
                        "iptables-nft-save"
                    } else {
                        "ip6tables-nft-save"
                    }
                } else if family == "v4" {
                    "iptables-legacy-save"
                } else {
                    "ip6tables-legacy-save"
                }));
            }
            // iptables-nft-restore makes every built-in chain, where the commands that first
            // wrote the table made only INPUT, so nft's view of it changes with the reload
            // itself; the -save views are the comparison there.
            if backend == "legacy" {
                views.push(View::Nft);
            }
            (reload, views)
        }
    };

    let host = Host::new(node);
    let decl = declaration(&[opening("web/api", OPENED, "incoming")]);
    host.apply(&decl);
    expect(&net.outside, &public, OPENED, Probe::Reached, "opened");
    expect(&net.outside, &public, STORE, Probe::TimedOut, "guarded");
    let applied: Vec<String> = views.iter().map(|v| v.read(node)).collect();

    for argv in &reload {
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        run_ok(node, &argv);
    }
    for view in &views {
        let now = view.read(node);
        assert!(
            marked_lines(&now).is_empty(),
            "{view:?} after the reload:\n{now}"
        );
    }
    expect(
        &net.outside,
        &public,
        OPENED,
        Probe::TimedOut,
        "the reload lost the opening",
    );
    expect(
        &net.outside,
        &public,
        SSH,
        Probe::Reached,
        "ssh after the reload",
    );
    let status = host.status();
    let layers = presence(&status, "web/api");
    // An empty list would make the check below say nothing.
    assert!(!layers.is_empty(), "no layer drops the opening: {status:#}");
    assert!(layers.iter().all(|p| p.ends_with("=missing")), "{status:#}");
    // `flush ruleset` deletes the orphaned guard too; iptables-restore leaves it alone.
    let flushed = matches!(kind, Reload::Nft);
    assert_eq!(status["guard"]["present"], !flushed, "{status:#}");

    let report = host.reconcile();
    assert_eq!(outcome(&report, "web/api"), "created", "{report:#}");
    expect(
        &net.outside,
        &public,
        OPENED,
        Probe::Reached,
        "put back by reconcile",
    );
    expect(
        &net.outside,
        &public,
        SSH,
        Probe::Reached,
        "ssh after reconcile",
    );
    expect(
        &net.outside,
        &public,
        SERVED,
        Probe::Reached,
        "served after reconcile",
    );
    expect(
        &net.outside,
        &public,
        STORE,
        Probe::TimedOut,
        "guard after reconcile",
    );
    let status = host.status();
    let layers = presence(&status, "web/api");
    // An empty list would make the check below say nothing.
    assert!(!layers.is_empty(), "no layer drops the opening: {status:#}");
    assert!(layers.iter().all(|p| p.ends_with("=present")), "{status:#}");
    assert_eq!(status["guard"]["present"], true, "{status:#}");
    for (view, applied) in views.iter().zip(&applied) {
        assert_eq!(
            &view.read(node),
            applied,
            "{view:?}: reconcile must give the ruleset the first apply gave"
        );
    }
}

#[test]
fn a_reload_with_nft_f_loses_openings_until_the_next_reconcile() {
    reload_then_reconcile(Reload::Nft);
}

#[test]
fn a_reload_with_iptables_nft_restore_loses_openings_until_the_next_reconcile() {
    reload_then_reconcile(Reload::IptablesNft);
}

#[test]
fn a_reload_with_iptables_legacy_restore_loses_openings_until_the_next_reconcile() {
    reload_then_reconcile(Reload::IptablesLegacy);
}
