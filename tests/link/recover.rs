//! A lost store recovered for removal over the link: the controller's stand-in keeps the records
//! of what the node reported it owns and hands them back with the first declaration after the
//! node enrols again as itself; the host removes the orphans that are as recorded and keeps, and
//! reports, the one changed meanwhile.

use super::{bed, enrolled, linked};
use serde_json::{json, Value};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

fn files(node: &str, ids: &[&str]) -> Value {
    let resources: Vec<Value> = ids
        .iter()
        .map(|id| {
            json!({"id": id, "type": "file", "path": format!("/etc/recover/{id}"),
                   "content": format!("{id} from the mesh\n"), "mode": "0644"})
        })
        .collect();
    json!({"version": 1, "node": node, "mode": "converged", "taken": [], "resources": resources})
}

#[test]
fn after_state_json_is_lost_a_reenrolment_recovers_removal_of_the_orphans() {
    let bed = bed();
    let mut ctl = bed.controller();
    let node = "run-recover";
    let (_d, r) = enrolled(bed, &mut ctl, node);
    let host = bed.resident(&r);
    linked(&mut ctl, node, WAIT);
    ctl.declare(
        node,
        1,
        Duration::from_secs(300),
        files(node, &["a", "b", "c", "d"]),
    )
    .unwrap();
    let first = ctl
        .wait_for(node, "report", WAIT, |p| p["version"] == 1)
        .expect("the report of version 1");
    assert_eq!(
        ctl.owned(node).and_then(Value::as_array).map(Vec::len),
        Some(4),
        "the controller keeps the records the report carried: {}",
        first.payload
    );
    drop(host);

    // The store is lost (its records with it); someone edits one orphan meanwhile.
    let dir = r.join("var/lib/mesh-host");
    for f in ["state.json", "state.journal"] {
        let _ = std::fs::remove_file(dir.join(f));
    }
    std::fs::write(r.join("etc/recover/d"), "edited by hand\n").unwrap();

    // The node enrols again as itself, and is sent a smaller declaration.
    let issued = ctl.issue(node, Duration::from_secs(600)).unwrap();
    let out = bed.enrol(&r, &issued.text);
    assert!(out.success(), "{}\n{}", out.stdout, out.stderr);
    assert_eq!(
        ctl.take_enrolments(Duration::from_secs(20)).unwrap().len(),
        1
    );
    let host = bed.resident(&r);
    linked(&mut ctl, node, WAIT);
    ctl.declare(node, 2, Duration::from_secs(300), files(node, &["a"]))
        .unwrap();
    let second = ctl
        .wait_for(node, "report", WAIT, |p| p["version"] == 2)
        .unwrap_or_else(|| panic!("no report of version 2:\n{}", host.log()))
        .payload;
    let outcome = |id: &str| {
        second["report"]["entries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["id"] == id)
            .map(|e| e["outcome"].as_str().unwrap().to_string())
            .unwrap_or_else(|| panic!("no entry for {id}: {second:#}"))
    };
    assert_eq!(outcome("a"), "unchanged");
    assert_eq!(outcome("b"), "removed");
    assert_eq!(outcome("c"), "removed");
    assert_eq!(outcome("d"), "changed-by-something-else");
    assert!(r.join("etc/recover/a").exists());
    assert!(!r.join("etc/recover/b").exists());
    assert!(!r.join("etc/recover/c").exists());
    assert_eq!(
        std::fs::read_to_string(r.join("etc/recover/d")).unwrap(),
        "edited by hand\n"
    );
    assert_eq!(
        second["report"]["recovered"],
        json!({"records": 4, "removed": ["c", "b"], "kept": ["d"]}),
        "{second:#}"
    );
    let briefing = second["briefing"].to_string();
    assert!(briefing.contains("rebuilt"), "{briefing}");
    assert!(briefing.contains("changed since (d)"), "{briefing}");
    // The copy goes with the first declaration only: the next one carries none, and the store
    // that now exists would ignore it anyway.
    ctl.declare(node, 3, Duration::from_secs(300), files(node, &["a"]))
        .unwrap();
    let third = ctl
        .wait_for(node, "report", WAIT, |p| p["version"] == 3)
        .expect("the report of version 3")
        .payload;
    assert!(third["report"]["recovered"].is_null(), "{third:#}");
    drop(host);
}
