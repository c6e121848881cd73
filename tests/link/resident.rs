//! `mesh-host run` linked: a declaration applied with source `link` and reported; forged,
//! replayed, expired, other-node and malformed deliveries refused with the machine untouched; a
//! broker restart followed by reconnect and reconcile; failover to the token's second address;
//! SIGHUP ending a hung connection attempt at once, and the packages' resume hook doing it; a
//! re-enrolment revoking the old identity.

use super::{bed, declare_and_wait, enrolled, file_decl, linked, root, Bed, Resident};
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(60);

#[test]
fn a_declaration_from_the_link_is_applied_and_reported() {
    let bed = bed();
    let mut ctl = bed.controller();
    let (_d, r) = enrolled(bed, &mut ctl, "run-apply");
    let host = bed.resident(&r);
    linked(&mut ctl, "run-apply", WAIT);
    let report = declare_and_wait(&mut ctl, "run-apply", 1, "hello from the mesh\n", WAIT);
    assert_eq!(
        std::fs::read_to_string(r.join("etc/motd")).unwrap(),
        "hello from the mesh\n"
    );
    let entries = report["report"]["entries"].as_array().unwrap();
    assert_eq!(entries[0]["id"], "motd");
    assert_eq!(entries[0]["outcome"], "created");
    assert_eq!(report["report"]["source"], "link");
    assert_eq!(
        report["owned"][0]["id"], "motd",
        "the records of what it owns: {report}"
    );
    assert!(report["briefing"]["outcome"].is_string(), "{report}");
    // The heartbeat now carries the version applied.
    ctl.wait_for("run-apply", "heartbeat", WAIT, |p| {
        p["state"]["version"] == 1
    })
    .expect("a heartbeat carrying version 1");
    // An action is refused from the link by validation, as from `apply --source link`.
    ctl.declare(
        "run-apply",
        2,
        Duration::from_secs(300),
        json!({"version": 1, "node": "run-apply", "mode": "converged", "taken": [],
               "resources": [{"id": "act", "type": "action", "run": ["touch", "/acted"], "verify": ["true"]}]}),
    )
    .unwrap();
    let refused = ctl
        .wait_for("run-apply", "report", WAIT, |p| p["version"] == 2)
        .unwrap();
    let problems = refused.payload["report"]["refused"].to_string();
    assert!(
        problems.contains("an action is refused from the link"),
        "{problems}"
    );
    assert!(!r.join("acted").exists());
    drop(host);
}

/// Every file under the root but the link's own bookkeeping and logs, with contents.
fn machine(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let name = p.strip_prefix(root).unwrap().display().to_string();
            if name.ends_with("link.json") || name.ends_with(".tmp") {
                continue;
            }
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push((name, std::fs::read(&p).unwrap_or_default()));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn forged_replayed_expired_and_other_node_declarations_are_refused_and_change_nothing() {
    let bed = bed();
    let mut ctl = bed.controller();
    let node = "run-refuse";
    let (_d, r) = enrolled(bed, &mut ctl, node);
    let _host = bed.resident(&r);
    linked(&mut ctl, node, WAIT);
    declare_and_wait(&mut ctl, node, 5, "v5\n", WAIT);
    let before = machine(&r);

    let decl = |c: &str| file_decl(node, "/etc/motd", c);
    let later = link::now_secs() + 300;
    let intruder = ed25519_dalek::SigningKey::from_bytes(&[9; 32]);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "forged",
            link::envelope::seal_declaration(&intruder, node, 6, later, decl("forged\n")),
        ),
        (
            "replayed",
            link::envelope::seal_declaration(&ctl.key, node, 5, later, decl("replayed\n")),
        ),
        (
            "replayed",
            link::envelope::seal_declaration(&ctl.key, node, 4, later, decl("older\n")),
        ),
        (
            "expired",
            link::envelope::seal_declaration(
                &ctl.key,
                node,
                7,
                link::now_secs() - 5,
                decl("expired\n"),
            ),
        ),
        (
            "other-node",
            link::envelope::seal_declaration(&ctl.key, "run-other", 8, later, decl("other\n")),
        ),
        ("malformed", b"{\"not\": \"an envelope\"}".to_vec()),
    ];
    for (kind, bytes) in &cases {
        ctl.send_raw(node, bytes.clone()).unwrap();
        let got = ctl
            .wait_for(node, "refusal", WAIT, |p| p["kind"] == *kind)
            .unwrap_or_else(|| panic!("no {kind} refusal reported"));
        assert!(got.payload["reason"].is_string());
    }
    assert_eq!(
        machine(&r),
        before,
        "a refused delivery changed the machine or the store"
    );
    // The link still works: a genuine newer version is applied.
    declare_and_wait(&mut ctl, node, 9, "v9\n", WAIT);
    assert_eq!(std::fs::read_to_string(r.join("etc/motd")).unwrap(), "v9\n");
}

#[test]
fn after_a_broker_restart_the_node_reconnects_and_reconciles() {
    // A broker of its own: restarting the shared one would cut the other tests' links.
    let own = Bed::new();
    let mut ctl = own.controller();
    let node = "run-restart";
    let (_d, r) = enrolled(&own, &mut ctl, node);
    let host = own.resident(&r);
    linked(&mut ctl, node, WAIT);
    declare_and_wait(&mut ctl, node, 1, "before\n", WAIT);

    own.rabbit.stop().unwrap();
    // Disconnected: drift made meanwhile is not repaired until something asks (the period is
    // ten minutes) …
    std::fs::remove_file(r.join("etc/motd")).unwrap();
    std::thread::sleep(Duration::from_secs(2));
    assert!(!r.join("etc/motd").exists());
    let down = Instant::now();
    own.rabbit.start_again().unwrap();
    ctl.reconnect(&own.rabbit).unwrap();
    // … and the reconnect is a reconcile: the file is back, and the heartbeat says how long the
    // node was unlinked.
    let hb = ctl
        .wait_for(node, "heartbeat", WAIT, |p| p["unlinked_s"].is_u64())
        .expect("a heartbeat saying how long the node was unlinked");
    assert!(
        hb.payload["unlinked_s"].as_u64().unwrap() <= down.elapsed().as_secs() + 60,
        "{}",
        hb.payload
    );
    assert!(
        host.wait_log("trigger=\"reconnect\"", 1, WAIT)
            || host.wait_log("trigger=reconnect", 1, WAIT),
        "{}",
        host.log()
    );
    let deadline = Instant::now() + WAIT;
    while !r.join("etc/motd").exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        std::fs::read_to_string(r.join("etc/motd")).unwrap(),
        "before\n"
    );
    // And declarations flow again.
    declare_and_wait(&mut ctl, node, 2, "after\n", WAIT);
    assert_eq!(
        std::fs::read_to_string(r.join("etc/motd")).unwrap(),
        "after\n"
    );
}

#[test]
fn the_link_fails_over_to_the_tokens_second_address() {
    let bed = bed();
    let first = lab::Relay::start(&bed.node, bed.rabbit.addr().parse().unwrap()).unwrap();
    let mut ctl =
        lab::Controller::connect_to(&bed.rabbit, vec![first.addr(), bed.relay.addr()]).unwrap();
    let node = "run-failover";
    let (_d, r) = enrolled(bed, &mut ctl, node);
    let host = bed.resident(&r);
    linked(&mut ctl, node, WAIT);
    assert!(
        host.wait_log(&format!("broker={}", first.addr()), 1, WAIT),
        "{}",
        host.log()
    );
    // The first address goes away (its connections reset, new ones refused).
    first.cut();
    assert!(
        host.wait_log(&format!("broker={}", bed.relay.addr()), 1, WAIT),
        "linked through the second address:\n{}",
        host.log()
    );
    declare_and_wait(&mut ctl, node, 1, "over the second address\n", WAIT);
}

/// The resident host of the node enrolled under `r`, started with its stored broker address
/// pointed at a black hole: a listener that accepts and never answers (what a suspended machine's
/// connection is). Returned once the host has dialled it.
fn dialling_a_black_hole(bed: &Bed, r: &Path) -> (lab::Hung, Resident) {
    let hung = lab::Hung::start(&bed.node).unwrap();
    let link = r.join("var/lib/mesh-host/link.json");
    let mut kept: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&link).unwrap()).unwrap();
    kept["broker"]["addrs"] = json!([hung.addr()]);
    std::fs::write(&link, serde_json::to_vec(&kept).unwrap()).unwrap();
    let host = bed.resident(r);
    assert!(hung.wait_accepted(1, WAIT), "the host dialled");
    (hung, host)
}

#[test]
fn sighup_ends_a_hung_connection_attempt_at_once() {
    let bed = bed();
    let mut ctl = bed.controller();
    let (_d, r) = enrolled(bed, &mut ctl, "run-hung");
    let (hung, host) = dialling_a_black_hole(bed, &r);
    // It sits in the attempt (its deadline is 30 s) …
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        hung.wait_closed(0, Instant::now(), Duration::from_millis(300)),
        None
    );
    // … until roused: the attempt ends at once.
    let roused = Instant::now();
    host.signal(libc::SIGHUP);
    let took = hung
        .wait_closed(0, roused, Duration::from_secs(5))
        .expect("the hung attempt was not ended by SIGHUP");
    assert!(took < Duration::from_secs(1), "ended after {took:?}");
    assert!(
        host.wait_log("the attempt was ended by a rouse", 1, WAIT),
        "{}",
        host.log()
    );
    // The next attempt comes after the rouse's settling moment, not at once, and rouses in that
    // moment are one (they do not end the next attempt the moment it starts).
    host.signal(libc::SIGHUP);
    host.signal(libc::SIGHUP);
    assert!(
        hung.wait_accepted(2, Duration::from_secs(10)),
        "a next attempt"
    );
    let second = Instant::now();
    assert_eq!(
        hung.wait_closed(1, second, Duration::from_millis(500)),
        None,
        "a rouse taken during the wait ended the next attempt"
    );
}

/// A storm of SIGHUPs (200 a second for 8 s, a flapping link's dispatcher or a signal loop) ends
/// the link's attempt at most once per rouse hold (5 s after an attempt begun on a rouse), not
/// once per settling moment: the first rouse ends the hung attempt at once, the attempt after it
/// stands its hold, and the rouses meanwhile are one, acted on when it ends. Without the hold
/// the storm made a new attempt every 500 ms (about 16 here).
#[test]
fn a_storm_of_sighups_ends_the_link_at_most_once_per_rouse_hold() {
    let bed = bed();
    let mut ctl = bed.controller();
    let (_d, r) = enrolled(bed, &mut ctl, "run-storm");
    let (hung, host) = dialling_a_black_hole(bed, &r);
    let began = Instant::now();
    while began.elapsed() < Duration::from_secs(8) {
        host.signal(libc::SIGHUP);
        std::thread::sleep(Duration::from_millis(5));
    }
    let attempts = hung.accepted();
    // Attempt 1 is ended at once; attempt 2 begins 0.5 s later and stands until 5.5 s; attempt 3
    // begins at about 6 s and stands past the storm's end.
    assert!(
        (2..=4).contains(&attempts),
        "{attempts} attempts in an 8 s storm:\n{}",
        host.log()
    );
    assert!(
        hung.wait_closed(0, began, Duration::from_secs(1)).is_some(),
        "the first rouse ended the attempt under way"
    );
    // The rouse taken during the hold is acted on when it ends: the attempt standing then ends.
    let last = attempts - 1;
    assert!(
        hung.wait_closed(last, Instant::now(), Duration::from_secs(7))
            .is_some(),
        "the rouses kept during the last attempt's hold were acted on when it ended"
    );
    eprintln!("sighup storm: 1,600 SIGHUPs in 8 s, {attempts} attempts");
}

/// The sleep hook the packages install (`packaging/rouse/sleep`, run as systemd-sleep runs it after
/// a resume) rouses a host sitting in an attempt that will never return, which is what a connection
/// that survived a suspend is: the attempt ends at once and the next begins after the rouse's
/// settling moment (500 ms), not after the backoff's wait or the attempt's 30 s deadline. Before the sleep
/// (`pre`) it does nothing.
#[test]
fn the_resume_hook_ends_a_hung_attempt_and_another_begins() {
    let bed = bed();
    let mut ctl = bed.controller();
    let (_d, r) = enrolled(bed, &mut ctl, "run-resume");
    let (hung, host) = dialling_a_black_hole(bed, &r);
    assert!(
        host.wait_log("resident host started", 1, WAIT),
        "the host started (its pid file is written before it says so):\n{}",
        host.log()
    );
    assert!(r.join("var/lib/mesh-host/run.pid").is_file());
    let hook = |when: &str| crate::rouse::dispatch("sleep", &r, &[when, "suspend"], &[]);
    assert_eq!(hook("pre"), (0, String::new()));
    assert_eq!(
        hung.wait_closed(0, Instant::now(), Duration::from_millis(500)),
        None,
        "the hook before the sleep ended the attempt"
    );
    let roused = Instant::now();
    let (code, said) = hook("post");
    assert_eq!(code, 0, "{said}");
    assert!(said.contains("roused the host"), "{said}");
    let ended = hung
        .wait_closed(0, roused, Duration::from_secs(5))
        .expect("the hung attempt was not ended by the resume hook");
    assert!(ended < Duration::from_secs(1), "ended after {ended:?}");
    let ended_at = roused + ended;
    assert!(
        hung.wait_accepted(2, Duration::from_secs(5)),
        "no next attempt:\n{}",
        host.log()
    );
    let next = ended_at.elapsed();
    eprintln!("resume hook: the attempt ended {ended:?} after it, the next began {next:?} later");
    // A roused attempt is followed by the next after the rouse's settling moment (500 ms), not
    // the backoff's wait: ended and begun again within 1 s of the hook.
    assert!(
        ended + next < Duration::from_secs(1),
        "the attempt ended {ended:?} after the hook and the next began {next:?} after that"
    );
    assert!(
        host.wait_log("the attempt was ended by a rouse", 1, WAIT),
        "{}",
        host.log()
    );
}

#[test]
fn a_reenrolment_token_revokes_the_running_identity() {
    let bed = bed();
    let mut ctl = bed.controller();
    let node = "run-reenrol";
    let (_d, old_root) = enrolled(bed, &mut ctl, node);
    let old = bed.resident(&old_root);
    linked(&mut ctl, node, WAIT);
    // The machine is reinstalled (its key lost); the mesh issues a token for the same node.
    let (_d2, new_root) = root();
    let issued = ctl.issue(node, Duration::from_secs(600)).unwrap();
    assert!(
        old.wait_log("were refused", 1, WAIT),
        "the old identity is cut off and refused:\n{}",
        old.log()
    );
    let out = bed.enrol(&new_root, &issued.text);
    assert!(out.success(), "{}", out.stderr);
    ctl.take_enrolments(Duration::from_secs(20)).unwrap();
    let _new = bed.resident(&new_root);
    declare_and_wait(&mut ctl, node, 1, "new identity\n", WAIT);
    assert_eq!(
        std::fs::read_to_string(new_root.join("etc/motd")).unwrap(),
        "new identity\n"
    );
    assert!(
        !old_root.join("etc/motd").exists(),
        "the old identity received it"
    );
}

#[test]
fn enrolling_while_the_host_runs_links_it_at_once() {
    let bed = bed();
    let mut ctl = bed.controller();
    let node = "run-late";
    let (_d, r) = root();
    // The host runs before the node is enrolled: it reconciles and holds no link.
    let host = bed.resident(&r);
    assert!(
        host.wait_log("resident host started", 1, WAIT),
        "{}",
        host.log()
    );
    let issued = ctl.issue(node, Duration::from_secs(600)).unwrap();
    let out = bed.enrol(&r, &issued.text);
    assert!(out.success(), "{}", out.stderr);
    ctl.take_enrolments(Duration::from_secs(20)).unwrap();
    // `enrol` tells it; it links with the new identity without a restart.
    linked(&mut ctl, node, WAIT);
    declare_and_wait(&mut ctl, node, 1, "linked late\n", WAIT);
    assert!(
        host.log().contains("a new enrolment is stored"),
        "{}",
        host.log()
    );
}
