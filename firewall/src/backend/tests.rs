//! Each seam driven through its trait object, as the engine and detection reach a driver: the
//! kind a `Backend` names ([`kind`]) and nothing else, against the recording fake.

use super::*;
use crate::detect::tests::chain;
use crate::found::Layer;
use crate::netlink::{Batch, Family, Hook, Policy, Rule, RuleBody, Ruleset, Table, TableFlags};
use crate::opening::{From, Opening, Path, Proto};
use crate::outcome::{Scope, State};
use crate::rules::{self, Site};
use run::RecordingRunner;
use std::collections::BTreeMap;

fn table(family: Family, name: &str) -> Table {
    Table {
        family,
        name: name.into(),
        flags: TableFlags::NONE,
        handle: 1,
        use_count: 0,
        owner: None,
        userdata: None,
        comment: None,
    }
}

fn rule(family: Family, table: &str, chain: &str, handle: u64, body: RuleBody) -> Rule {
    Rule {
        family,
        table: table.into(),
        chain: chain.into(),
        handle,
        position: None,
        exprs: body.exprs,
        userdata: None,
        comment: None,
    }
}

fn answer(exec: &RecordingRunner, stdout: &str) {
    exec.answers
        .borrow_mut()
        .push_back(crate::child::answer(stdout));
}

fn opening(path: Path) -> Opening {
    Opening {
        id: "web".into(),
        port: 9000,
        proto: Proto::Tcp,
        from: From::Anywhere,
        path,
    }
}

fn cx<'a>(
    ruleset: &'a Ruleset,
    saves: &'a BTreeMap<(Family, String), String>,
    batch: &'a mut Batch,
    exec: &'a RecordingRunner,
) -> Cx<'a> {
    Cx {
        ruleset,
        legacy_saves: saves,
        batch,
        exec,
    }
}

/// Each kind says whether it wrote a table, and only its own: firewalld its table, ufw its
/// chains, iptables-nft iptables' shape, nftables whatever it is asked; on the legacy side ufw's
/// and firewalld's chains, and iptables-legacy any table.
#[test]
fn detect_each_kind_claims_its_own_tables() {
    let ufw = Ruleset {
        chains: vec![
            chain(Family::Ipv4, "filter", "INPUT", Some(0)),
            chain(Family::Ipv4, "filter", "ufw-user-input", None),
        ],
        ..Ruleset::default()
    };
    let plain = Ruleset {
        chains: vec![chain(Family::Ipv4, "filter", "INPUT", Some(0))],
        rules: vec![rule(
            Family::Ipv4,
            "filter",
            "INPUT",
            2,
            RuleBody::new().tcp_dport(22).counter().accept(),
        )],
        ..Ruleset::default()
    };
    let wrote = |b: Backend, rs: &Ruleset, table: &str| {
        let d: &dyn Detect = kind(b).detect;
        d.wrote(rs, Family::Ipv4, table, "INPUT")
    };
    assert_eq!(
        wrote(Backend::Ufw, &ufw, "filter").as_deref(),
        Some("ufw chains in table ip filter")
    );
    assert_eq!(wrote(Backend::Ufw, &plain, "filter"), None);
    assert_eq!(wrote(Backend::Firewalld, &plain, "filter"), None);
    assert_eq!(
        wrote(Backend::Firewalld, &plain, "firewalld").as_deref(),
        Some("table ip firewalld")
    );
    assert!(wrote(Backend::IptablesNft, &plain, "filter")
        .is_some_and(|e| e.starts_with("iptables-nft: iptables' table and chain names")));
    assert_eq!(wrote(Backend::IptablesLegacy, &plain, "filter"), None);
    assert!(wrote(Backend::Nftables, &plain, "filter").is_some());

    let legacy = |b: Backend, chains: &[&str]| kind(b).detect.wrote_legacy(chains);
    assert!(legacy(Backend::Ufw, &["INPUT", "ufw-before-input"]));
    assert!(!legacy(Backend::Ufw, &["INPUT"]));
    assert!(legacy(Backend::Firewalld, &["INPUT", "INPUT_direct"]));
    assert!(!legacy(Backend::Firewalld, &["INPUT", "FOO_direct"]));
    assert!(legacy(Backend::IptablesLegacy, &["INPUT"]));
    assert!(!legacy(Backend::IptablesNft, &["INPUT"]));
    assert!(!legacy(Backend::Nftables, &["INPUT"]));
}

/// The table drivers through `TableDriver`: iptables-nft and nftables read the same nf_tables
/// table alike (the view they share), and iptables-legacy reads detection's save without a
/// process, then writes its changes in one `iptables-legacy-restore --noflush`.
#[test]
fn table_driver_reads_and_writes_through_the_trait_object() {
    let table_driver = |b: Backend| match kind(b).converge {
        Converger::Table(d) => d,
        Converger::Whole(_) => panic!("{b} converges per table"),
    };
    let ruleset = Ruleset {
        chains: vec![chain(Family::Ipv4, "filter", "INPUT", Some(0))],
        rules: vec![
            rule(
                Family::Ipv4,
                "filter",
                "INPUT",
                7,
                RuleBody::new().tcp_dport(22).counter().accept(),
            ),
            rule(
                Family::Ipv4,
                "filter",
                "INPUT",
                9,
                RuleBody::new().counter().drop(),
            ),
        ],
        ..Ruleset::default()
    };
    let exec = RecordingRunner::succeeding();
    let mut saves = BTreeMap::new();
    let mut batch = Batch::new();
    let key = |backend| TableKey {
        backend,
        family: Family::Ipv4,
        table: "filter".into(),
    };
    let nft = table_driver(Backend::IptablesNft)
        .read(
            &key(Backend::IptablesNft),
            &mut cx(&ruleset, &saves, &mut batch, &exec),
        )
        .unwrap();
    let native = table_driver(Backend::Nftables)
        .read(
            &key(Backend::Nftables),
            &mut cx(&ruleset, &saves, &mut batch, &exec),
        )
        .unwrap();
    assert_eq!(
        nft.how["INPUT"],
        [Removal::Handle(7), Removal::Handle(9)],
        "read from the listing"
    );
    assert_eq!(native.how, nft.how);
    assert_eq!(native.marks, nft.marks);
    assert!(
        crate::child::recorded(&exec).is_empty(),
        "no program runs to read nf_tables"
    );

    // A native write joins the batch; nothing runs.
    let o = opening(Path::Incoming);
    let add = Change::Add {
        chain: "INPUT".into(),
        before: Some(1),
        opening: o.clone(),
        site: Site::late(Family::Ipv4),
    };
    table_driver(Backend::Nftables)
        .write(
            &key(Backend::Nftables),
            &native,
            std::slice::from_ref(&add),
            &mut cx(&ruleset, &saves, &mut batch, &exec),
        )
        .unwrap();
    assert!(!batch.is_empty());
    assert!(crate::child::recorded(&exec).is_empty());

    saves.insert(
        (Family::Ipv4, "filter".to_string()),
        "*filter\n:INPUT DROP [0:0]\n-A INPUT -i lo -j ACCEPT\n-A INPUT -j REJECT\nCOMMIT\n"
            .to_string(),
    );
    let legacy = table_driver(Backend::IptablesLegacy);
    let key = key(Backend::IptablesLegacy);
    let mut none = Batch::new();
    let view = legacy
        .read(&key, &mut cx(&ruleset, &saves, &mut none, &exec))
        .unwrap();
    assert_eq!(view.marks["INPUT"].len(), 2);
    assert!(
        crate::child::recorded(&exec).is_empty(),
        "read from detection's save"
    );
    assert_eq!(legacy.rules_for(&o, Site::late(Family::Ipv4)), 1);
    legacy
        .write(
            &key,
            &view,
            &[add],
            &mut cx(&ruleset, &saves, &mut none, &exec),
        )
        .unwrap();
    let calls = crate::child::recorded(&exec);
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0].0, "iptables-legacy-restore");
    assert_eq!(calls[0].1, ["-w", "5", "--noflush"]);
    let m = rules::mark(&o);
    assert_eq!(
        calls[0].2.as_deref(),
        Some(
            format!("*filter\n-I INPUT 2 -p tcp -m tcp --dport 9000 -m comment --comment {m} -j ACCEPT\nCOMMIT\n")
                .as_str()
        )
    );
    assert!(none.is_empty());
}

/// A whole driver through `WholeDriver`: ufw, handed the opening and its layer, writes it with
/// its own command and reads it back before saying it is present.
#[test]
fn whole_driver_converges_through_the_trait_object() {
    let Converger::Whole(driver) = kind(Backend::Ufw).converge else {
        panic!("ufw converges as a whole");
    };
    let o = opening(Path::Incoming);
    let mark = rules::mark(&o);
    let exec = RecordingRunner {
        programs: vec!["ufw".into()],
        ..RecordingRunner::succeeding()
    };
    for a in [
        "Status: active\n".to_string(),
        String::new(),
        String::new(),
        format!("ufw allow 9000/tcp comment '{mark}'\n"),
    ] {
        answer(&exec, &a);
    }
    let layer = Layer {
        backend: Backend::Ufw,
        hook: Hook::Input,
        family: Family::Ipv4,
        table: "filter".into(),
        chain: "INPUT".into(),
        priority: 0,
        policy: Policy::Drop,
        rules: 3,
        can_drop: true,
        evidence: "ufw chains".into(),
        device: None,
        unwritable: None,
    };
    let ruleset = Ruleset::default();
    let saves = BTreeMap::new();
    let mut batch = Batch::new();
    let done = driver
        .converge(
            &[layer],
            std::slice::from_ref(&o),
            Scope::Given,
            true,
            &mut cx(&ruleset, &saves, &mut batch, &exec),
        )
        .unwrap();
    assert_eq!(done.states["web"][0].state, State::Present);
    assert_eq!(done.added, [("web".to_string(), "ufw".to_string())]);
    let calls: Vec<Vec<String>> = crate::child::recorded(&exec)
        .iter()
        .map(|c| c.1.clone())
        .collect();
    assert_eq!(calls.len(), 4, "{calls:?}");
    assert_eq!(calls[0], ["status"]);
    assert_eq!(calls[1], ["show", "added"]);
    assert!(calls[2].first().is_some_and(|a| a == "allow"), "{calls:?}");
    assert!(calls[2].contains(&mark), "{calls:?}");
    assert_eq!(calls[3], ["show", "added"]);
}

/// The retire seam through `Retire`: hand-written nftables surveyed from its configuration file
/// (each table it loads saved with `nft list table`), retired by deleting that table in the
/// caller's batch, and restored from the saved listing with one `nft -f`.
#[test]
fn retire_surveys_retires_and_restores_through_the_trait_object() {
    let retire: &dyn Retire = kind(Backend::Nftables).retire;
    let root = std::env::temp_dir().join(format!(
        "mesh-backend-retire-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("etc")).unwrap();
    std::fs::write(
        root.join("etc/nftables.conf"),
        "flush ruleset\ntable inet filter {\n chain input { type filter hook input priority 0; policy drop; }\n}\ntable ip gone {\n}\n",
    )
    .unwrap();
    let ruleset = Ruleset {
        tables: vec![table(Family::Inet, "filter")],
        ..Ruleset::default()
    };
    let listing = "table inet filter {\n\tchain input {\n\t\ttype filter hook input priority filter; policy drop;\n\t}\n}\n";
    let exec = RecordingRunner::succeeding();
    answer(&exec, listing);
    let saves = BTreeMap::new();
    let mut batch = Batch::new();
    let surveyed = retire
        .survey(&root, &mut cx(&ruleset, &saves, &mut batch, &exec))
        .unwrap();
    std::fs::remove_dir_all(&root).unwrap();
    let saved = surveyed.expect("a configuration file is there");
    assert_eq!(saved.backend, Backend::Nftables);
    assert_eq!(saved.config, ["/etc/nftables.conf"]);
    assert_eq!(saved.unit.as_deref(), Some("nftables.service"));
    assert_eq!(saved.saved.len(), 1, "a table not loaded now is not saved");
    assert_eq!(saved.saved[0].what, "table inet filter");
    assert_eq!(
        crate::child::recorded(&exec)[0].1,
        ["list", "table", "inet", "filter"]
    );
    assert!(batch.is_empty(), "a survey only reads");

    let back = retire
        .retire(&saved, &mut cx(&ruleset, &saves, &mut batch, &exec))
        .unwrap();
    assert_eq!(back, saved);
    assert!(
        !batch.is_empty(),
        "the table's deletion joins the caller's batch"
    );
    assert_eq!(
        crate::child::recorded(&exec).len(),
        1,
        "no program runs to retire"
    );

    let mut none = Batch::new();
    retire
        .restore(&saved, &mut cx(&ruleset, &saves, &mut none, &exec))
        .unwrap();
    let calls = crate::child::recorded(&exec);
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[1].0, "nft");
    assert_eq!(calls[1].1, ["-f", "-"]);
    assert_eq!(
        calls[1].2.as_deref(),
        Some(format!("table inet filter\ndelete table inet filter\n{listing}\n").as_str())
    );
    assert!(none.is_empty());
}
