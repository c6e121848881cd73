//! The apply loop's firewall paths driven through the recording fake: the guard before the store
//! and every resource, a failed guard stopping everything, a failed convergence reported on each
//! opening's line, the flip's and the return's stages in order, a flip that fails part-way
//! resumed from the store, and `--confirm`'s kernel asked last, its verdict standing.

use super::fake::Recording;
use super::NodeFirewall;
use crate::apply::{apply, Host, Outcome, Report};
use crate::declaration::{validate_value, Declaration, Source};
use crate::store::{self, FlipStage, State};
use run::RecordingRunner;
use serde_json::json;
use std::path::{Path, PathBuf};

fn decl(mode: &str, resources: serde_json::Value) -> Declaration {
    let v = json!({
        "version": 1, "node": "n1", "mode": mode,
        "settings": {
            "ports": {"store": 15432, "bus": 5672, "broker_management": 15672,
                      "registry": 5000, "hub": 51820}
        },
        "resources": resources
    });
    validate_value(&v, Source::Local).unwrap_or_else(|p| panic!("refused:\n{p}"))
}

fn file_and_openings() -> serde_json::Value {
    json!([
        {"id": "web/conf", "type": "file", "path": "/etc/web.conf", "content": "port 80\n"},
        {"id": "web/http", "type": "opening", "port": 80, "proto": "tcp", "from": "anywhere", "path": "incoming"},
        {"id": "web/https", "type": "opening", "port": 443, "proto": "tcp", "from": "anywhere", "path": "incoming"}
    ])
}

/// One apply of `d` under `root` through `fake`.
fn run(root: &Path, fake: &Recording, d: &Declaration) -> Report {
    run_confirming(root, fake, d, false)
}

/// Likewise, with `--confirm` when `confirm`.
fn run_confirming(root: &Path, fake: &Recording, d: &Declaration, confirm: bool) -> Report {
    let runner = RecordingRunner::default();
    let handed = fake.clone();
    let open = move |_: &Path, _: &crate::declaration::Declaration| -> Box<dyn NodeFirewall> {
        Box::new(handed.clone())
    };
    let host = Host {
        root,
        runner: &runner,
        firewall: &open,
        confirm,
    };
    apply(&host, d, Source::Local).expect("the apply runs")
}

fn state(root: &Path) -> State {
    store::peek(root).unwrap().expect("a store")
}

fn watched(root: &Path) -> Vec<PathBuf> {
    vec![
        root.join("var/lib/mesh-host/state.json"),
        root.join("etc/web.conf"),
    ]
}

#[test]
fn the_guard_is_in_force_before_the_store_and_every_resource() {
    let root = tempfile::tempdir().unwrap();
    let fake = Recording::watching(&watched(root.path()));
    let report = run(root.path(), &fake, &decl("adopted", file_and_openings()));
    assert!(report.failed().is_none(), "{}", report.render());

    let methods = fake.methods();
    assert_eq!(
        &methods[..3],
        ["claimed_by", "guard_table", "guard_bpf"],
        "{methods:?}"
    );
    // Both layers of the guard were written before the store existed and before the file.
    for m in ["guard_table", "guard_bpf"] {
        assert_eq!(fake.first(m).unwrap().watched, [false, false], "{m}");
    }
    // The openings converge once, together, after the file declared before them.
    let converges: Vec<_> = methods.iter().filter(|m| **m == "converge").collect();
    assert_eq!(converges.len(), 1, "{methods:?}");
    let converge = fake.first("converge").unwrap();
    assert_eq!(converge.openings, ["web/http", "web/https"]);
    assert_eq!(converge.watched, [true, true]);
    assert!(
        report
            .guard
            .as_ref()
            .unwrap()
            .to_string()
            .starts_with("refusing store 15432 and broker-management 15672"),
        "{:?}",
        report.guard
    );
    let http = report.entries.iter().find(|e| e.id == "web/http").unwrap();
    assert_eq!(http.outcome, Outcome::Created);
    assert!(
        http.detail
            .starts_with("opened in inet filter input (nftables)"),
        "{}",
        http.detail
    );
    // Both openings are recorded.
    let st = state(root.path());
    assert!(st.owned("web/http").is_some() && st.owned("web/https").is_some());
}

#[test]
fn a_guard_that_cannot_be_written_stops_every_resource() {
    let root = tempfile::tempdir().unwrap();
    let fake = Recording::watching(&watched(root.path()));
    fake.script.borrow_mut().fail.push("guard_table");
    let report = run(root.path(), &fake, &decl("adopted", file_and_openings()));
    let failed = report.failed().expect("the guard fails");
    assert_eq!(failed.id, "guard");
    assert!(
        failed.detail.starts_with("loading the guard: "),
        "{}",
        failed.detail
    );
    // The BPF layer is still loaded, and nothing after the guard ran.
    assert!(fake.methods().contains(&"guard_bpf"));
    assert!(!fake.methods().contains(&"converge"));
    assert!(!root.path().join("etc/web.conf").exists());
    assert_eq!(report.entries.len(), 1, "{}", report.render());
}

#[test]
fn a_failed_convergence_is_reported_on_the_opening_and_records_nothing() {
    let root = tempfile::tempdir().unwrap();
    let fake = Recording::watching(&watched(root.path()));
    fake.script.borrow_mut().fail.push("converge");
    let report = run(root.path(), &fake, &decl("adopted", file_and_openings()));
    let failed = report.failed().expect("the opening fails");
    assert_eq!(failed.id, "web/http");
    assert_eq!(
        failed.detail,
        format!(
            "opening web/http: openings through the found firewall (nftables (fake)): netlink \
             socket converge failed: {}",
            firewall::Errno(nix::errno::Errno::EPERM as i32)
        )
    );
    // The file before it was applied; the apply stopped at the opening.
    let conf = report.entries.iter().find(|e| e.id == "web/conf").unwrap();
    assert_eq!(conf.outcome, Outcome::Created);
    assert!(!report.entries.iter().any(|e| e.id == "web/https"));
    let st = state(root.path());
    assert!(st.owned("web/http").is_none() && st.owned("web/https").is_none());
    // The next apply converges again, and records both.
    fake.script.borrow_mut().fail.clear();
    let report = run(root.path(), &fake, &decl("adopted", file_and_openings()));
    assert!(report.failed().is_none(), "{}", report.render());
    assert!(state(root.path()).owned("web/https").is_some());
}

#[test]
fn the_flip_saves_then_loads_then_retires_and_the_return_guards_first() {
    let root = tempfile::tempdir().unwrap();
    let fake = Recording::watching(&watched(root.path()));
    let report = run(root.path(), &fake, &decl("adopted", file_and_openings()));
    assert!(report.failed().is_none(), "{}", report.render());

    fake.log.borrow_mut().clear();
    let report = run(root.path(), &fake, &decl("converged", file_and_openings()));
    assert!(report.failed().is_none(), "{}", report.render());
    let methods = fake.methods();
    let at = |m: &str| {
        methods
            .iter()
            .position(|x| *x == m)
            .unwrap_or_else(|| panic!("{m} not called: {methods:?}"))
    };
    // Saved before anything, loaded with the declaration's openings, the guard's BPF layer
    // removed after the filter holds, the mesh's marks left in the retired firewall removed.
    assert!(at("survey") < at("flip"), "{methods:?}");
    assert!(at("flip") < at("remove_guard_bpf"), "{methods:?}");
    assert!(at("remove_guard_bpf") < at("converge_all"), "{methods:?}");
    assert_eq!(
        fake.first("flip").unwrap().openings,
        ["web/http", "web/https"]
    );
    // No opening goes into the retired firewall.
    assert!(!methods.contains(&"converge"), "{methods:?}");
    let st = state(root.path());
    assert_eq!(st.flip.as_ref().map(|f| f.stage), Some(FlipStage::Done));
    assert!(report
        .flip
        .as_ref()
        .unwrap()
        .to_string()
        .starts_with("flip: derived filter loaded"));
    let http = report.entries.iter().find(|e| e.id == "web/http").unwrap();
    assert_eq!(
        http.detail,
        "admitted by the derived filter (inet mesh_host)"
    );

    fake.log.borrow_mut().clear();
    let report = run(root.path(), &fake, &decl("adopted", file_and_openings()));
    assert!(report.failed().is_none(), "{}", report.render());
    let methods = fake.methods();
    let at = |m: &str| methods.iter().position(|x| *x == m).unwrap();
    // The guard in both layers before the found firewall is restored.
    assert!(at("guard_table") < at("unflip"), "{methods:?}");
    assert!(at("guard_bpf") < at("unflip"), "{methods:?}");
    assert!(state(root.path()).flip.is_none());
    assert!(report
        .flip
        .as_ref()
        .unwrap()
        .to_string()
        .starts_with("return: found firewall restored"));
}

#[test]
fn a_flip_that_fails_part_way_is_resumed_from_the_store() {
    let root = tempfile::tempdir().unwrap();
    let fake = Recording::watching(&watched(root.path()));
    run(root.path(), &fake, &decl("adopted", file_and_openings()));
    fake.script.borrow_mut().fail.push("flip");
    let report = run(root.path(), &fake, &decl("converged", file_and_openings()));
    let failed = report.failed().expect("the flip fails");
    assert_eq!(failed.id, "flip");
    assert!(
        failed
            .detail
            .starts_with("loading the derived filter and retiring the found firewall: "),
        "{}",
        failed.detail
    );
    // The saved firewall is in the store, so the next apply goes on from there.
    assert_eq!(
        state(root.path()).flip.as_ref().map(|f| f.stage),
        Some(FlipStage::Saved)
    );
    fake.script.borrow_mut().fail.clear();
    fake.log.borrow_mut().clear();
    let report = run(root.path(), &fake, &decl("converged", file_and_openings()));
    assert!(report.failed().is_none(), "{}", report.render());
    // Not surveyed again: what was saved first is what is put back on return.
    assert!(!fake.methods().contains(&"survey"), "{:?}", fake.methods());
    assert_eq!(
        state(root.path()).flip.as_ref().map(|f| f.stage),
        Some(FlipStage::Done)
    );
}

#[test]
fn another_nodes_marks_refuse_the_apply_before_anything_changes() {
    let root = tempfile::tempdir().unwrap();
    let fake = Recording::watching(&watched(root.path()));
    fake.script.borrow_mut().claimed_by = Some("n2".into());
    let runner = RecordingRunner::default();
    let handed = fake.clone();
    let open = move |_: &Path, _: &crate::declaration::Declaration| -> Box<dyn NodeFirewall> {
        Box::new(handed.clone())
    };
    let host = Host {
        root: root.path(),
        runner: &runner,
        firewall: &open,
        confirm: false,
    };
    let err = apply(&host, &decl("adopted", file_and_openings()), Source::Local).unwrap_err();
    assert!(
        err.to_string().contains("marked rules of node \"n2\""),
        "{err}"
    );
    assert_eq!(fake.methods(), ["claimed_by"]);
    assert!(!root.path().join("var/lib/mesh-host").exists());
}

#[test]
fn an_opening_no_longer_declared_is_removed_and_its_record_dropped() {
    let root = tempfile::tempdir().unwrap();
    let fake = Recording::watching(&watched(root.path()));
    let report = run(root.path(), &fake, &decl("adopted", file_and_openings()));
    assert!(report.failed().is_none(), "{}", report.render());

    fake.log.borrow_mut().clear();
    let mut fewer = file_and_openings();
    fewer.as_array_mut().unwrap().pop();
    let report = run(root.path(), &fake, &decl("adopted", fewer));
    assert!(report.failed().is_none(), "{}", report.render());
    let gone = report.entries.iter().find(|e| e.id == "web/https").unwrap();
    assert_eq!(gone.outcome, Outcome::Removed);
    // Removed by converging what stays, with every marked rule in scope.
    let all = fake.first("converge_all").expect("a removal");
    assert_eq!(all.openings, ["web/http"]);
    let st = state(root.path());
    assert!(st.owned("web/https").is_none() && st.owned("web/http").is_some());
}

#[test]
fn openings_no_longer_declared_are_removed_by_one_removal_each_on_its_own_line() {
    let root = tempfile::tempdir().unwrap();
    let fake = Recording::watching(&watched(root.path()));
    let report = run(root.path(), &fake, &decl("adopted", file_and_openings()));
    assert!(report.failed().is_none(), "{}", report.render());
    // A marked rule of an opening the store never recorded (a lost store's, say).
    let stale = firewall::Opening {
        id: "old/ssh".into(),
        port: 2222,
        proto: firewall::Proto::Tcp,
        from: firewall::opening::From::Anywhere,
        path: firewall::Path::Incoming,
    };
    fake.script
        .borrow_mut()
        .in_force
        .insert(firewall::rules::mark(&stale), stale.id.clone());

    fake.log.borrow_mut().clear();
    let only_the_file = json!([file_and_openings()[0].clone()]);
    let report = run(root.path(), &fake, &decl("adopted", only_the_file));
    assert!(report.failed().is_none(), "{}", report.render());
    // One removal for both openings and the stale mark: every marked rule in scope, none kept.
    let removals: Vec<_> = fake
        .log
        .borrow()
        .iter()
        .filter(|c| c.method == "converge_all")
        .cloned()
        .collect();
    assert_eq!(removals.len(), 1, "{:?}", fake.methods());
    assert!(removals[0].openings.is_empty());
    // Each removed opening's line names its own rules, and the stale one is reported once.
    for id in ["web/http", "web/https"] {
        let e = report.entries.iter().find(|e| e.id == id).unwrap();
        assert_eq!(e.outcome, Outcome::Removed, "{id}");
        assert!(
            e.detail
                .contains("its marked rules removed from table inet filter"),
            "{id}: {}",
            e.detail
        );
    }
    let swept: Vec<_> = report
        .entries
        .iter()
        .filter(|e| e.id == "old/ssh")
        .collect();
    assert_eq!(swept.len(), 1, "{}", report.render());
    assert!(
        swept[0].detail.starts_with("stale marked rule"),
        "{}",
        swept[0].detail
    );
    assert!(fake.script.borrow().in_force.is_empty());
    let st = state(root.path());
    assert!(st.owned("web/http").is_none() && st.owned("web/https").is_none());
}

#[test]
fn a_recheck_tells_the_engine_the_runtime_bridges_the_memo_keeps_before_converging() {
    let mut fake = Recording::default();
    let mut guard = firewall::GuardSpec::for_node(5432, 15672, None);
    guard.add_runtime_bridge("docker0");
    guard.add_runtime_bridge("br-0123456789ab");
    let memo = super::Memo {
        declaration: decl("adopted", file_and_openings()),
        guard: Some(guard),
        openings: vec![firewall::Opening {
            id: "web/http".into(),
            port: 80,
            proto: firewall::Proto::Tcp,
            from: firewall::opening::From::Anywhere,
            path: firewall::Path::Incoming,
        }],
        filter: None,
    };
    super::recheck(&mut fake, &memo).unwrap();
    assert_eq!(
        *fake.told_bridges.borrow(),
        [vec!["docker0".to_string(), "br-0123456789ab".to_string()]]
    );
    assert!(fake.methods().contains(&"converge"), "{:?}", fake.methods());
}

/// One incoming way on eth0 whose every source the evaluator admits.
fn admitted_way(fam: firewall::eval::Fam) -> (firewall::eval::Way, firewall::eval::Answer) {
    use firewall::eval::{Addrs, Answer, Conn, Fate, Outcome, Way};
    (
        Way {
            conn: Conn::incoming(fam, 6, 80, "eth0"),
            sources: Addrs::all(fam),
        },
        Answer {
            parts: vec![Outcome {
                sources: Addrs::all(fam),
                fate: Fate::Admitted,
                trace: Vec::new(),
                limits: Vec::new(),
            }],
        },
    )
}

#[test]
fn with_confirm_the_kernel_is_asked_last_and_a_disagreement_exits_7_with_its_verdict_standing() {
    use crate::briefing::Mark;
    use firewall::confirm::Kernel;
    use firewall::eval::Fam;
    let root = tempfile::tempdir().unwrap();
    let fake = Recording::watching(&watched(root.path()));
    {
        let mut script = fake.script.borrow_mut();
        for id in ["web/http", "web/https"] {
            script.answers.insert(
                id.into(),
                vec![admitted_way(Fam::V4), admitted_way(Fam::V6)],
            );
        }
        // http: the kernel drops the IPv4 SYN the evaluator admits; https: both connect.
        script.kernel = vec![
            Kernel::TimedOut,
            Kernel::Connected,
            Kernel::Connected,
            Kernel::Connected,
        ];
    }
    let report = run_confirming(
        root.path(),
        &fake,
        &decl("adopted", file_and_openings()),
        true,
    );
    assert!(report.failed().is_none(), "{}", report.render());
    let methods = fake.methods();
    let at = |m: &str| methods.iter().position(|x| *x == m).unwrap();
    assert!(at("converge") < at("answers") && at("answers") < at("ask_kernel"));
    assert_eq!(
        fake.first("answers").unwrap().openings,
        ["web/http", "web/https"]
    );

    let c = report
        .confirm
        .as_ref()
        .expect("the confirmation is reported");
    assert_eq!(c.namespaces, ["mesh-confirm-fake"]);
    let judged: Vec<_> = c
        .openings
        .iter()
        .map(|o| (o.id.as_str(), o.agreement.as_str()))
        .collect();
    assert_eq!(judged, [("web/http", "disagrees"), ("web/https", "agrees")]);
    // The kernel's verdict stands: http is not admitted, by the kernel, and its line says so.
    assert_eq!(report.not_admitted.len(), 1, "{:?}", report.not_admitted);
    assert_eq!(report.not_admitted[0].id, "web/http");
    assert_eq!(
        report.not_admitted[0].layer,
        "the kernel (asked in scratch namespaces)"
    );
    let http = report.entries.iter().find(|e| e.id == "web/http").unwrap();
    assert!(
        http.detail.contains("; THE KERNEL DISAGREES WITH THE EVALUATOR: the evaluator says present, the kernel not-admitted"),
        "{}",
        http.detail
    );
    // 7 wins over the briefing's failed (5).
    assert_eq!(report.outcome, Mark::Failed);
    assert_eq!(report.exit_code(), crate::apply::DISAGREES);
    let text = report.render();
    assert!(
        text.contains(
            "confirmed by the kernel in scratch namespaces (removed): 1 agree, 1 disagree, 0 \
             settled where the evaluator was doubtful, 0 unconfirmed"
        ) && text.contains("kernel: web/https: the kernel agrees: present (2 of 2 parts"),
        "{text}"
    );
    let v = serde_json::to_value(&report).unwrap();
    assert_eq!(v["confirm"]["openings"][0]["agreement"], "disagrees");
    assert_eq!(v["confirm"]["openings"][0]["kernel"], "not-admitted");
    assert_eq!(v["confirm"]["openings"][1]["agreement"], "agrees");

    // The briefing's opening lines say the same.
    let b = state(root.path()).briefing.expect("a briefing");
    let line = |id: &str, starts: &str| {
        b.lines
            .iter()
            .find(|l| l.subject == id && l.detail.starts_with(starts))
            .unwrap_or_else(|| panic!("no line {id} {starts:?}: {b:#?}"))
            .mark
    };
    assert_eq!(line("web/http", "THE KERNEL DISAGREES"), Mark::Failed);
    assert_eq!(line("web/https", "the kernel agrees"), Mark::Ok);
    assert!(
        b.look_at
            .iter()
            .any(|s| s.contains("The kernel disagrees with the evaluator on opening web/http")),
        "{:?}",
        b.look_at
    );
    // Said as sentences: no run of blanks left by a string's line breaks.
    assert!(
        b.look_at.iter().all(|s| !s.contains("  ")),
        "{:?}",
        b.look_at
    );
}

#[test]
fn with_confirm_a_kernel_that_cannot_be_asked_leaves_every_opening_unconfirmed_not_agreed() {
    use crate::briefing::Mark;
    use firewall::eval::Fam;
    let root = tempfile::tempdir().unwrap();
    let fake = Recording::watching(&watched(root.path()));
    {
        let mut script = fake.script.borrow_mut();
        for id in ["web/http", "web/https"] {
            script
                .answers
                .insert(id.into(), vec![admitted_way(Fam::V4)]);
        }
        script.fail.push("ask_kernel");
    }
    let report = run_confirming(
        root.path(),
        &fake,
        &decl("adopted", file_and_openings()),
        true,
    );
    let c = report.confirm.as_ref().unwrap();
    assert!(c.failed.is_some(), "{c:?}");
    for o in &c.openings {
        assert_eq!(o.agreement.as_str(), "unconfirmed", "{o:?}");
        assert_eq!(o.evaluator, "present");
        assert!(o.why.as_deref().unwrap().contains("ask_kernel"), "{o:?}");
    }
    // Unknown, not failed: the act exits 0 and the briefing says the host could not tell.
    assert_eq!(report.outcome, Mark::Unknown);
    assert_eq!(report.exit_code(), 0);
    assert!(report.not_admitted.is_empty());

    // Without --confirm nothing is asked and nothing is said.
    fake.log.borrow_mut().clear();
    let report = run(root.path(), &fake, &decl("adopted", file_and_openings()));
    assert!(report.confirm.is_none());
    assert!(!fake.methods().contains(&"ask_kernel"));
}

#[test]
fn with_confirm_an_act_that_stopped_asks_nothing_and_its_failure_wins() {
    let root = tempfile::tempdir().unwrap();
    let fake = Recording::watching(&watched(root.path()));
    fake.script.borrow_mut().fail.push("converge");
    let report = run_confirming(
        root.path(),
        &fake,
        &decl("adopted", file_and_openings()),
        true,
    );
    assert!(report.failed().is_some(), "{}", report.render());
    let c = report.confirm.as_ref().expect("said, though not asked");
    assert_eq!(
        c.failed.as_deref(),
        Some("the act stopped before its end, so the kernel was not asked")
    );
    assert_eq!(c.openings.len(), 2);
    assert!(c
        .openings
        .iter()
        .all(|o| o.agreement.as_str() == "unconfirmed"));
    assert!(!fake.methods().contains(&"ask_kernel"));
    // A failed resource (1) wins over everything the confirmation could say.
    assert_eq!(report.exit_code(), 1);
}
