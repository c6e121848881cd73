//! The apply loop through the built binary: create, re-apply, change, removal by the asymmetry,
//! adoption of found files, the briefing, and refusals that change nothing.

use crate::util::Node;
use serde_json::{json, Value};

fn decl(mode: &str, taken: &[&str], resources: Value) -> Value {
    crate::util::workstation(mode, taken, resources)
}

fn proxy_config(content: &str) -> Value {
    json!({"id": "proxy/config", "module": "proxy", "type": "file", "path": "/etc/caddy/Caddyfile", "content": content, "mode": "0640"})
}

#[test]
fn create_then_unchanged_then_changed_then_removed_by_the_asymmetry() {
    let node = Node::new();
    let resources = json!([
        proxy_config("v1\n"),
        {"id": "proxy/data", "module": "proxy", "type": "directory", "path": "/srv/caddy", "mode": "0750"},
        {"id": "db/create", "type": "action", "run": ["touch", "db-made"], "verify": ["test", "-e", "db-made"]}
    ]);
    let r = node.apply(&decl("converged", &[], resources.clone()));
    assert_eq!(r.outcome("proxy/config"), "created");
    assert_eq!(r.outcome("proxy/data"), "created");
    assert_eq!(r.outcome("db/create"), "changed");
    assert_eq!(node.read("/etc/caddy/Caddyfile").as_deref(), Some("v1\n"));
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &str| {
        std::fs::metadata(node.path(p))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    };
    assert_eq!(mode("/etc/caddy/Caddyfile"), 0o640);
    assert_eq!(mode("/srv/caddy"), 0o750);
    assert!(node.path("db-made").exists());

    let r = node.apply(&decl("converged", &[], resources.clone()));
    for id in ["proxy/config", "proxy/data", "db/create"] {
        assert_eq!(r.outcome(id), "unchanged", "{id}");
    }

    let mut changed = resources.clone();
    changed[0] = proxy_config("v2\n");
    let r = node.apply(&decl("converged", &[], changed));
    assert_eq!(r.outcome("proxy/config"), "changed");
    assert_eq!(node.read("/etc/caddy/Caddyfile").as_deref(), Some("v2\n"));

    // A reconcile that changes nothing writes nothing: the store is the same file (a save
    // renames a new one over it), its briefing with it.
    let store = || {
        use std::os::unix::fs::MetadataExt;
        let path = node.path("/var/lib/mesh-host/state.json");
        (
            std::fs::metadata(&path).unwrap().ino(),
            std::fs::read(&path).unwrap(),
        )
    };
    let r = node.run(&["reconcile", "--json"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let before = store();
    let r = node.run(&["reconcile", "--json"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    for id in ["proxy/config", "proxy/data", "db/create"] {
        assert_eq!(r.outcome(id), "unchanged", "{id}");
    }
    assert!(
        store() == before,
        "a reconcile that changed nothing rewrote the store"
    );

    // Drift on an owned file is repaired by reconcile, and recorded.
    node.write("/etc/caddy/Caddyfile", "edited by hand\n");
    let r = node.run(&["reconcile", "--json"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(r.outcome("proxy/config"), "changed");
    assert_eq!(node.read("/etc/caddy/Caddyfile").as_deref(), Some("v2\n"));
    assert_ne!(
        store().0,
        before.0,
        "a reconcile that changed a file kept the old store"
    );

    // Nothing declared: the file and directory the host made are removed, the action forgotten.
    let r = node.apply(&decl("converged", &[], json!([])));
    assert_eq!(r.outcome("proxy/config"), "removed");
    assert_eq!(r.outcome("proxy/data"), "removed");
    assert_eq!(r.outcome("db/create"), "forgotten");
    assert!(!node.path("/etc/caddy/Caddyfile").exists());
    assert!(!node.path("/srv/caddy").exists());
    assert!(
        node.path("db-made").exists(),
        "an action's work is never undone"
    );
    assert_eq!(node.state()["owned"], json!([]));
}

#[test]
fn a_directory_holding_other_files_is_left_when_undeclared() {
    let node = Node::new();
    node.apply(&decl(
        "converged",
        &[],
        json!([{"id": "d", "type": "directory", "path": "/srv/data"}]),
    ));
    node.write("/srv/data/customer.db", "precious");
    let r = node.apply(&decl("converged", &[], json!([])));
    assert_eq!(r.outcome("d"), "forgotten");
    assert_eq!(
        node.read("/srv/data/customer.db").as_deref(),
        Some("precious")
    );
}

#[test]
fn found_file_on_an_adopted_node_is_held_untouched_and_its_original_saved() {
    let node = Node::with_private_network();
    node.write("/etc/caddy/Caddyfile", "the predecessor's\n");
    let r = node.apply(&decl("adopted", &[], json!([proxy_config("the mesh's\n")])));
    assert_eq!(r.outcome("proxy/config"), "held");
    assert_eq!(
        node.read("/etc/caddy/Caddyfile").as_deref(),
        Some("the predecessor's\n")
    );
    let state = node.state();
    let saved = state["originals"][0]["saved"].as_str().unwrap().to_string();
    assert_eq!(state["originals"][0]["key"], "/etc/caddy/Caddyfile");
    assert_eq!(node.read(&saved).as_deref(), Some("the predecessor's\n"));
    assert_eq!(state["held"][0]["id"], "proxy/config");
    assert_eq!(state["owned"], json!([]));

    // Held on every reconcile, and never removed, even when its module is no longer assigned.
    let r = node.run(&["reconcile", "--json"]);
    assert_eq!(r.outcome("proxy/config"), "held");
    let r = node.apply(&decl("adopted", &[], json!([])));
    assert_eq!(r.outcome("proxy/config"), "forgotten");
    assert_eq!(
        node.read("/etc/caddy/Caddyfile").as_deref(),
        Some("the predecessor's\n")
    );
    assert_eq!(node.read(&saved).as_deref(), Some("the predecessor's\n"));
    let owned = node.run(&["owned", "--json"]).json();
    assert_eq!(owned["held"], json!([]));
    assert_eq!(owned["originals"][0]["key"], "/etc/caddy/Caddyfile");
}

#[test]
fn what_is_not_found_is_created_on_an_adopted_node() {
    let node = Node::with_private_network();
    let r = node.apply(&decl("adopted", &[], json!([proxy_config("new\n")])));
    assert_eq!(r.outcome("proxy/config"), "created");
    // A file the host wrote in an earlier life is not found: its record says so.
    let r = node.apply(&decl("adopted", &[], json!([proxy_config("new\n")])));
    assert_eq!(r.outcome("proxy/config"), "unchanged");
}

#[test]
fn a_held_file_that_changes_is_reported_and_not_reverted() {
    let node = Node::new();
    node.write("/etc/caddy/Caddyfile", "v1 by the predecessor\n");
    // Each run's fresh namespace has no private interface, which the briefing would rightly
    // mark failed; this node declares no private network, so the held line is the worst.
    let mut d = decl("adopted", &[], json!([proxy_config("the mesh's\n")]));
    d["settings"]
        .as_object_mut()
        .unwrap()
        .remove("private_network");
    node.apply(&d);
    // The predecessor's control, still running, writes the file again.
    node.write("/etc/caddy/Caddyfile", "v2 by the predecessor\n");
    let r = node.run(&["reconcile", "--json"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(r.outcome("proxy/config"), "changed-by-something-else");
    assert_eq!(
        node.read("/etc/caddy/Caddyfile").as_deref(),
        Some("v2 by the predecessor\n")
    );
    let b = node.run(&["briefing", "--json"]).json();
    assert_eq!(b["outcome"], "kept");
    let line = b["lines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["subject"] == "proxy/config")
        .unwrap();
    assert_eq!(line["mark"], "kept");
    assert!(line["detail"]
        .as_str()
        .unwrap()
        .contains("changed by something else"));
    assert!(b["look_at"][0]
        .as_str()
        .unwrap()
        .contains("Stop it before taking module proxy"));
    // The original saved is the first one, not the rewrite.
    let saved = node.state()["originals"][0]["saved"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        node.read(&saved).as_deref(),
        Some("v1 by the predecessor\n")
    );
}

#[test]
fn taking_a_module_replaces_what_it_held() {
    let node = Node::with_private_network();
    node.write("/etc/caddy/Caddyfile", "the predecessor's\n");
    node.apply(&decl("adopted", &[], json!([proxy_config("the mesh's\n")])));
    let r = node.apply(&decl(
        "adopted",
        &["proxy"],
        json!([proxy_config("the mesh's\n")]),
    ));
    assert_eq!(r.outcome("proxy/config"), "changed");
    assert_eq!(
        node.read("/etc/caddy/Caddyfile").as_deref(),
        Some("the mesh's\n")
    );
    let state = node.state();
    assert_eq!(state["held"], json!([]));
    assert_eq!(state["owned"][0]["found"], true);
    let saved = state["originals"][0]["saved"].as_str().unwrap().to_string();
    assert_eq!(node.read(&saved).as_deref(), Some("the predecessor's\n"));
    // It converges like any other now: drift is repaired.
    node.write("/etc/caddy/Caddyfile", "drift\n");
    let r = node.run(&["reconcile", "--json"]);
    assert_eq!(r.outcome("proxy/config"), "changed");
    assert_eq!(
        node.read("/etc/caddy/Caddyfile").as_deref(),
        Some("the mesh's\n")
    );
    // Undeclared, a file the host took over is forgotten, not removed.
    let r = node.apply(&decl("adopted", &["proxy"], json!([])));
    assert_eq!(r.outcome("proxy/config"), "forgotten");
    assert!(node.path("/etc/caddy/Caddyfile").exists());
}

#[test]
fn a_converged_node_saves_the_original_before_replacing_a_found_file() {
    let node = Node::new();
    node.write("/etc/caddy/Caddyfile", "found\n");
    let r = node.apply(&decl("converged", &[], json!([proxy_config("declared\n")])));
    assert_eq!(r.outcome("proxy/config"), "changed");
    assert_eq!(
        node.read("/etc/caddy/Caddyfile").as_deref(),
        Some("declared\n")
    );
    let saved = node.state()["originals"][0]["saved"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(node.read(&saved).as_deref(), Some("found\n"));
}

#[test]
fn create_once_never_overwrites() {
    let node = Node::new();
    let f = json!({"id": "seed", "type": "file", "path": "/etc/seed", "content": "first\n", "create_once": true});
    assert_eq!(
        node.apply(&decl("converged", &[], json!([f.clone()])))
            .outcome("seed"),
        "created"
    );
    node.write("/etc/seed", "edited\n");
    assert_eq!(
        node.apply(&decl("converged", &[], json!([f])))
            .outcome("seed"),
        "unchanged"
    );
    assert_eq!(node.read("/etc/seed").as_deref(), Some("edited\n"));
}

#[test]
fn an_owned_file_edited_since_it_was_written_is_left_in_place_when_undeclared() {
    let node = Node::new();
    let f = |path: &str| json!({"id": path, "type": "file", "path": path, "content": "mine\n"});
    let both = json!([f("/etc/edited"), f("/etc/untouched")]);
    let r = node.apply(&decl("converged", &[], both));
    assert_eq!(r.outcome("/etc/edited"), "created");
    node.write("/etc/edited", "an admin's line\n");
    // The preview says what the act will do, and changes nothing.
    let empty = decl("converged", &[], json!([]));
    let p = node.apply_env(&empty, &["--preview"], &[]);
    assert_eq!(p.code, Some(4), "{}\n{}", p.stdout, p.stderr);
    assert!(
        p.stdout.contains("changed since the host wrote it"),
        "{}\n{}",
        p.stdout,
        p.stderr
    );
    assert_eq!(node.read("/etc/untouched").as_deref(), Some("mine\n"));
    let r = node.apply(&empty);
    assert_eq!(r.outcome("/etc/edited"), "forgotten", "{}", r.stdout);
    assert_eq!(r.outcome("/etc/untouched"), "removed", "{}", r.stdout);
    assert!(
        r.stdout.contains("changed since the host wrote it")
            && r.stdout.contains("left in place, not removed"),
        "{}",
        r.stdout
    );
    assert_eq!(
        node.read("/etc/edited").as_deref(),
        Some("an admin's line\n")
    );
    assert_eq!(node.read("/etc/untouched"), None);
    assert!(
        node.state()["owned"]
            .as_array()
            .unwrap()
            .iter()
            .all(|o| o["key"] != "/etc/edited"),
        "the record is forgotten"
    );
}

#[test]
fn a_failure_stops_the_apply_and_the_briefing_reads_failed() {
    let node = Node::new();
    let resources = json!([
        proxy_config("v1\n"),
        {"id": "db/create", "type": "action", "run": ["false"], "verify": ["test", "-e", "never"]},
        {"id": "after", "type": "file", "path": "/etc/after", "content": "x"}
    ]);
    let r = node.apply_env(&decl("converged", &[], resources), &[], &[]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert_eq!(r.outcome("proxy/config"), "created");
    assert_eq!(r.outcome("db/create"), "failed");
    let entries = r.json()["entries"].as_array().unwrap().len();
    assert_eq!(entries, 2, "nothing after the failure runs");
    assert!(!node.path("/etc/after").exists());
    // What came before the failure stays done and recorded.
    assert_eq!(node.state()["owned"][0]["id"], "proxy/config");
    let b = node.run(&["briefing", "--json"]).json();
    assert_eq!(b["outcome"], "failed");
    assert!(
        b.get("outcome").is_some() && node.state()["briefing"].get("outcome").is_none(),
        "the outcome is computed, never stored"
    );
    let text = node.run(&["briefing"]).stdout;
    assert!(text.starts_with("outcome    failed"), "{text}");
}

#[test]
fn a_resource_whose_system_tool_cannot_be_run_fails_naming_the_resource() {
    // PATH holds `unshare` (which runs the binary) and nothing else, so the service manager's
    // program cannot be found: the service fails, naming itself and the program, never succeeds.
    let node = Node::new();
    let bin = tempfile::tempdir().unwrap();
    let unshare = ["/usr/bin/unshare", "/bin/unshare"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("unshare (util-linux)");
    std::os::unix::fs::symlink(unshare, bin.path().join("unshare")).unwrap();
    let path = bin.path().display().to_string();
    let r = node.apply_env(
        &decl("converged", &[], json!([{"id": "web/svc", "type": "service", "name": "nginx", "state": "running", "enabled": true}])),
        &[],
        &[("PATH", &path)],
    );
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert_eq!(r.outcome("web/svc"), "failed");
    assert!(
        r.stdout
            .contains("reading service nginx through systemd: starting systemctl"),
        "{}",
        r.stdout
    );
}

#[test]
fn an_action_from_the_link_is_refused_and_nothing_changes() {
    let node = Node::new();
    let resources = json!([proxy_config("x"), {"id": "a", "type": "action", "run": ["touch", "x"], "verify": ["false"]}]);
    let r = node.apply_env(
        &decl("converged", &[], resources),
        &["--source", "link"],
        &[],
    );
    assert_eq!(r.code, Some(2));
    assert!(
        r.stderr
            .contains("error: resources[1].type: an action is refused from the link"),
        "{}",
        r.stderr
    );
    assert_eq!(
        std::fs::read_dir(node.root()).unwrap().count(),
        0,
        "the machine and store are untouched"
    );
}

#[test]
fn a_refused_declaration_names_every_problem_and_changes_nothing() {
    let node = Node::new();
    node.apply(&decl("converged", &[], json!([proxy_config("v1\n")])));
    let before = node.snapshot();
    let bad = json!({
        "version": 1, "node": "workstation", "mode": "converged", "colour": "blue",
        "resources": [
            {"id": "a", "type": "file", "path": "etc/x", "content": "x"},
            {"id": "b", "type": "opening", "port": 0, "proto": "tcp", "from": "anywhere", "path": "incoming"},
            {"id": "c", "type": "directory", "path": "/var/lib/mesh-host/x"}
        ]
    });
    let r = node.apply_env(&bad, &[], &[]);
    assert_eq!(r.code, Some(2));
    for want in [
        "error: colour: unknown field",
        "error: resources[0].path: must be absolute",
        "error: resources[1].port: port 0 is outside 1-65535",
        "error: resources[2].path: /var/lib/mesh-host/x is the host's own",
    ] {
        assert!(r.stderr.contains(want), "missing {want:?} in\n{}", r.stderr);
    }
    assert_eq!(node.snapshot(), before);
}

#[test]
fn safety_rules_refuse_with_exit_3_and_change_nothing() {
    let node = Node::with_private_network();
    node.apply(&decl("adopted", &[], json!([proxy_config("v1\n")])));
    let before = node.snapshot();
    let mut other = decl("adopted", &[], json!([]));
    other["node"] = json!("laptop");
    let r = node.apply_env(&other, &[], &[]);
    assert_eq!(r.code, Some(3));
    assert!(
        r.stderr
            .contains("this store belongs to node \"workstation\""),
        "{}",
        r.stderr
    );
    assert_eq!(node.snapshot(), before);
    // A converged declaration for an adopted node is the flip (no found container is held, so
    // nothing refuses it): the held file is taken, and the store says the node was flipped.
    let r = node.apply_env(
        &decl("converged", &[], json!([proxy_config("v1\n")])),
        &[],
        &[],
    );
    assert_eq!(r.code, Some(0), "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains("flip: derived filter loaded"),
        "{}",
        r.stdout
    );
    let state: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(node.path("/var/lib/mesh-host/state.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(state["flip"]["stage"], "done", "{state:#}");
}

#[test]
fn completions_and_the_man_page_are_generated_from_the_command_line() {
    let node = Node::new();
    for shell in ["bash", "zsh", "fish"] {
        let r = node.run(&["generate", "completions", shell]);
        assert_eq!(r.code, Some(0), "{shell}: {}", r.stderr);
        for command in ["reconcile", "genesis", "adopted", "root"] {
            assert!(r.stdout.contains(command), "{shell} lacks {command}");
        }
        // The hidden command that makes them is not offered to an operator.
        assert!(!r.stdout.contains("generate"), "{shell} offers generate");
    }
    let bash = node.run(&["generate", "completions", "bash"]).stdout;
    let check = std::process::Command::new("timeout")
        .args(["60", "bash", "-n", "-c", &bash])
        .output()
        .unwrap();
    assert!(check.status.success(), "{check:?}");
    let man = node.run(&["generate", "man"]);
    assert_eq!(man.code, Some(0));
    assert!(man.stdout.contains(".TH mesh-host 1"), "{}", man.stdout);
    assert!(man.stdout.contains("reconcile"), "{}", man.stdout);
    assert!(node.run(&["--help"]).stdout.find("generate").is_none());
}

#[test]
fn version_owned_and_help_say_what_they_should() {
    let node = Node::with_private_network();
    let v = node.run(&["version"]);
    assert_eq!(
        v.stdout.trim(),
        format!(
            "mesh-host {} ({})",
            env!("CARGO_PKG_VERSION"),
            mesh_host::build::BUILD.system
        )
    );
    let help = node.run(&["--help"]).stdout;
    assert!(
        help.contains("3    a safety rule refused the act"),
        "{help}"
    );
    node.write("/etc/app.conf", "found");
    node.apply(&decl("adopted", &[], json!([proxy_config("x"), {"id": "app/conf", "module": "app", "type": "file", "path": "/etc/app.conf", "content": "y"}])));
    let owned = node.run(&["owned"]).stdout;
    assert!(
        owned.contains("owned                proxy/config"),
        "{owned}"
    );
    assert!(owned.contains("held                 app/conf"), "{owned}");
    let r = node.run(&["reconcile"]);
    assert_eq!(r.code, Some(0));
    assert!(
        r.stdout
            .contains("node workstation (adopted, from local): 1 unchanged, 1 held"),
        "{}",
        r.stdout
    );
}

#[test]
fn reconcile_with_nothing_applied_is_refused() {
    let node = Node::new();
    let r = node.run(&["reconcile"]);
    assert_eq!(r.code, Some(2));
    assert!(
        r.stderr.contains("no declaration has been applied"),
        "{}",
        r.stderr
    );
    assert_eq!(
        std::fs::read_dir(node.root()).unwrap().count(),
        0,
        "looking made no store"
    );
}

#[test]
fn the_foundations_ports_are_never_moved_back_by_a_declaration() {
    let node = Node::new();
    let mut custom = decl("adopted", &[], json!([]));
    custom["settings"]["ports"]["registry"] = json!(5001);
    // The namespace the run had carries no mesh0, so the briefing says failed: exit 5, never 0.
    let r = node.apply_env(&custom, &[], &[]);
    assert_eq!(r.code, Some(5), "{}\n{}", r.stdout, r.stderr);
    assert_eq!(r.json()["outcome"], "failed", "{}", r.stdout);
    assert!(
        r.json()["guard"].as_str().unwrap().starts_with(
            "refusing store 5432 and broker-management 15672 on this node's own addresses \
                 except on lo and on mesh0 from "
        ),
        "{}",
        r.stdout
    );
    // The namespace the run had carries no mesh0: said, not ok.
    assert_eq!(
        r.json()["private_network"]["mark"],
        "failed",
        "{}",
        r.stdout
    );
    let before = node.snapshot();
    let r = node.apply_env(&decl("adopted", &[], json!([])), &[], &[]);
    assert_eq!(r.code, Some(3), "{}", r.stderr);
    assert!(r.stderr.contains("fixed at genesis"), "{}", r.stderr);
    assert_eq!(node.snapshot(), before);
    // Without settings, a declaration keeps the node's (mesh0 still missing: exit 5 again).
    let mut bare = decl("adopted", &[], json!([]));
    bare.as_object_mut().unwrap().remove("settings");
    assert_eq!(node.apply_env(&bare, &[], &[]).code, Some(5));
    assert_eq!(node.state()["settings"]["ports"]["registry"], 5001);
}

#[test]
fn owners_are_the_machines_accounts_by_name() {
    use std::os::unix::fs::MetadataExt;
    let node = Node::new();
    node.write(
        "/etc/passwd",
        "root:x:0:0:root:/root:/bin/sh\ncaddy:x:4242:4243::/var/lib/caddy:/usr/sbin/nologin\n",
    );
    node.write("/etc/group", "root:x:0:\ncaddy:x:4243:\n");
    let f = json!({"id": "proxy/config", "type": "file", "path": "/etc/caddy/Caddyfile", "content": "x", "owner": "caddy", "group": "caddy", "mode": "0640"});
    let r = node.apply(&decl("converged", &[], json!([f])));
    assert_eq!(r.outcome("proxy/config"), "created");
    let meta = std::fs::metadata(node.path("/etc/caddy/Caddyfile")).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (4242, 4243));
    // Unchanged on a second apply; a chown by hand is drift, repaired.
    assert_eq!(
        node.apply(&decl("converged", &[], json!([f])))
            .outcome("proxy/config"),
        "unchanged"
    );
    std::os::unix::fs::chown(node.path("/etc/caddy/Caddyfile"), Some(0), Some(0)).unwrap();
    assert_eq!(
        node.run(&["reconcile", "--json"]).outcome("proxy/config"),
        "changed"
    );
    let unknown = json!({"id": "x", "type": "file", "path": "/etc/x", "content": "x", "owner": "nobody-here"});
    let r = node.apply_env(&decl("converged", &[], json!([unknown])), &[], &[]);
    assert_eq!(r.code, Some(1));
    assert!(
        r.stdout
            .contains("user \\\"nobody-here\\\" does not exist on this machine"),
        "{}",
        r.stdout
    );
}

#[test]
fn a_held_resource_that_moves_is_created_at_its_new_path_not_reported_changed() {
    let node = Node::with_private_network();
    node.write("/etc/a.conf", "the predecessor's\n");
    let at = |p: &str| json!([{"id": "app/conf", "module": "app", "type": "file", "path": p, "content": "mesh\n"}]);
    assert_eq!(
        node.apply(&decl("adopted", &[], at("/etc/a.conf")))
            .outcome("app/conf"),
        "held"
    );
    let r = node.apply(&decl("adopted", &[], at("/etc/b.conf")));
    assert_eq!(r.outcome("app/conf"), "created", "{}", r.stdout);
    assert_eq!(node.read("/etc/b.conf").as_deref(), Some("mesh\n"));
    assert_eq!(
        node.read("/etc/a.conf").as_deref(),
        Some("the predecessor's\n"),
        "what was held is never removed"
    );
}

#[test]
fn an_owned_file_that_moves_is_removed_from_its_old_path() {
    let node = Node::new();
    let at = |p: &str| json!([{"id": "app/conf", "type": "file", "path": p, "content": "x\n"}]);
    node.apply(&decl("converged", &[], at("/etc/app/old.conf")));
    let r = node.apply(&decl("converged", &[], at("/etc/app/new.conf")));
    let entries = r.json()["entries"].clone();
    assert_eq!(entries[0]["key"], "/etc/app/old.conf", "{entries:#}");
    assert_eq!(entries[0]["outcome"], "removed", "{entries:#}");
    assert_eq!(entries[1]["outcome"], "created", "{entries:#}");
    assert!(!node.path("/etc/app/old.conf").exists());
    node.apply(&decl("converged", &[], json!([])));
    assert!(
        !node.path("/etc/app/new.conf").exists(),
        "nothing the host made is left without a record"
    );
    assert_eq!(node.state()["owned"], json!([]));
}

#[test]
fn a_lost_store_is_rebuilt_without_taking_the_hosts_own_files_for_found_originals() {
    let node = Node::new();
    // Adopted, no private network (this run's namespace has none, so the guard's line is not
    // the worst of the briefing).
    let mut d = decl("adopted", &["proxy"], json!([proxy_config("mine\n")]));
    d["settings"]
        .as_object_mut()
        .unwrap()
        .remove("private_network");
    d["mode"] = json!("converged");
    let r = node.apply(&d);
    assert_eq!(r.outcome("proxy/config"), "created");
    // The store is lost: state.json (and any journal) gone, its folder and lock left.
    let store = node.path("/var/lib/mesh-host");
    std::fs::remove_file(store.join("state.json")).unwrap();
    let _ = std::fs::remove_file(store.join("state.journal"));
    d["mode"] = json!("adopted");
    d["taken"] = json!([]);
    let r = node.apply(&d);
    assert_eq!(r.outcome("proxy/config"), "unchanged", "{}", r.stdout);
    let state = node.state();
    assert!(
        state["originals"].as_array().is_none_or(|o| o.is_empty()),
        "the host's own file was saved as a found original: {state:#}"
    );
    assert!(
        state["held"].as_array().is_none_or(|h| h.is_empty()),
        "{state:#}"
    );
    let owned = &state["owned"][0];
    assert_eq!(
        (owned["id"].as_str(), owned["found"].as_bool()),
        (Some("proxy/config"), Some(true))
    );
    let briefing = node.run(&["briefing", "--json"]).json();
    assert!(
        briefing["lines"].as_array().unwrap().iter().any(
            |l| l["subject"] == "store" && l["detail"].as_str().unwrap().starts_with("rebuilt")
        ),
        "{briefing:#}"
    );
    // The next apply reads the store it rebuilt: nothing is said about a rebuild any more.
    node.apply(&d);
    let briefing = node.run(&["briefing", "--json"]).json();
    assert!(
        !briefing["lines"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["subject"] == "store"),
        "{briefing:#}"
    );
}

#[test]
fn a_store_of_the_wrong_shape_is_refused_naming_the_file() {
    let node = Node::new();
    node.write(
        "/var/lib/mesh-host/state.json",
        "{\"version\": 2, \"ownd\": []}\n",
    );
    let r = node.run(&["owned"]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(r.stderr.contains("state.json"), "{}", r.stderr);
    assert!(r.stderr.contains("unknown field `ownd`"), "{}", r.stderr);
}
