//! `mesh-host link status`: what the node knows of its link from local state alone, before
//! enrolment, enrolled with no resident host, linked with one (the declaration in force and the
//! last contact), and once that host has stopped.

use super::{bed, bin, declare_and_wait, enrolled, linked, root};
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(60);

/// `link status --json` inside the node's namespace, and its text form alongside.
fn status(root: &Path) -> (Value, String) {
    let run = |extra: &[&str]| {
        let mut argv = vec![
            bin(),
            "--root".into(),
            root.to_str().unwrap().into(),
            "link".into(),
            "status".into(),
        ];
        argv.extend(extra.iter().map(|a| a.to_string()));
        let out = bed()
            .node
            .run_timeout(&argv, Duration::from_secs(30))
            .expect("running mesh-host link status");
        assert!(out.success(), "{}\n{}", out.stdout, out.stderr);
        out.stdout
    };
    let json = run(&["--json"]);
    if let Err(e) = serde_json::from_str::<serde_json::Value>(&json) {
        panic!("{e}: {json}");
    }
    let v = crate::util::contract(&json);
    (v, run(&[]))
}

/// Polls `link status` until `want` holds, to a deadline.
fn status_until(root: &Path, what: &str, want: impl Fn(&Value) -> bool) -> (Value, String) {
    let deadline = Instant::now() + WAIT;
    loop {
        let (v, text) = status(root);
        if want(&v) {
            return (v, text);
        }
        assert!(Instant::now() < deadline, "never {what}: {v:#}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn link_status_says_enrolled_linked_last_contact_and_the_declaration_in_force() {
    // Never enrolled.
    let (_fresh, fresh) = root();
    let (v, text) = status(&fresh);
    assert_eq!(
        (v["enrolled"].as_bool(), v["link"].as_str()),
        (Some(false), Some("not-enrolled"))
    );
    assert!(text.contains("enrolled              no"), "{text}");

    let bed = bed();
    let mut ctl = bed.controller();
    let (_d, r) = enrolled(bed, &mut ctl, "status-node");
    // Enrolled, and no resident host keeps the link: said as such, from local state alone.
    let (v, text) = status(&r);
    assert_eq!(v["enrolled"], true, "{v:#}");
    assert_eq!(v["node"], "status-node");
    assert_eq!(v["link"], "not-running", "{v:#}");
    assert_eq!(v["brokers"][0], bed.relay.addr().to_string(), "{v:#}");
    assert!(text.contains("no resident host runs"), "{text}");

    let host = bed.resident(&r);
    linked(&mut ctl, "status-node", WAIT);
    let (v, text) = status_until(&r, "linked", |v| v["link"] == "linked");
    assert_eq!(
        v["resident_pid"].as_u64(),
        Some(u64::from(host_pid(&r))),
        "{v:#}"
    );
    assert_eq!(v["detail"], bed.relay.addr().to_string(), "{v:#}");
    assert!(
        text.contains(&format!("yes, to {}", bed.relay.addr())),
        "{text}"
    );

    declare_and_wait(&mut ctl, "status-node", 3, "from the mesh\n", WAIT);
    let (v, text) = status_until(&r, "version 3 in force", |v| v["declaration_version"] == 3);
    assert_eq!(v["declaration_source"], "link", "{v:#}");
    let contact = v["last_contact"].as_u64().expect("a last contact");
    assert!(link::now_secs().saturating_sub(contact) < 120, "{v:#}");
    assert!(
        text.contains("in force from link; version 3 from the link is the newest accepted"),
        "{text}"
    );
    assert!(text.contains(" ago"), "{text}");

    // The resident host stopped: nothing keeps the link, whatever it last recorded.
    drop(host);
    let (v, _) = status_until(&r, "not running", |v| v["link"] == "not-running");
    assert_eq!(v["resident_pid"], Value::Null, "{v:#}");
    assert_eq!(v["declaration_version"], 3, "{v:#}");
}

/// The resident host's pid as its pid file gives it.
fn host_pid(root: &Path) -> u32 {
    std::fs::read_to_string(root.join("var/lib/mesh-host/run.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}
