//! The previews at the prompt on a machine whose own firewall drops: `genesis --preview` and
//! `converge --preview` saying what opens, what stays closed and what closes.

use super::*;

/// A found ruleset that drops every new connection but ssh's, as an operator's own firewall.
const DROPPING: &str = "table inet host {
	chain input {
		type filter hook input priority 0; policy drop;
		ct state established,related accept
		iif \"lo\" accept
		tcp dport 22 accept
	}
}
";

/// Runs `mesh-host --root ROOT ARGS…` in a network namespace of its own holding `DROPPING` and a
/// TCP listener on `port` on every address (busybox httpd, waited for in /proc/net/tcp to a
/// deadline), after `first` (another command run the same way, whose output must be success);
/// the whole run bounded by `timeout`.
fn behind_dropping_firewall(
    root: &std::path::Path,
    port: u16,
    first: Option<&[&str]>,
    args: &[&str],
) -> (Option<i32>, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let ruleset = dir.path().join("found.nft");
    std::fs::write(&ruleset, DROPPING).unwrap();
    const SCRIPT: &str = r#"
ip link set lo up
nft -f "$RULESET"
busybox httpd -f -p "0.0.0.0:$PORT" -h "$WWW" & httpd=$!
trap 'kill $httpd' EXIT
hex=$(printf '%04X' "$PORT")
i=0
until grep -q "^ *[0-9]*: 00000000:$hex 00000000:0000 0A" /proc/net/tcp; do
  i=$((i+1)); [ $i -lt 250 ] || { echo "no listener on $PORT after 5 s" >&2; exit 99; }
  sleep 0.02
done
if [ -n "$FIRST" ]; then
  eval "set -- $FIRST"; "$MESH" --root "$ROOT" "$@" > /dev/null || { echo "first command failed" >&2; exit 98; }
fi
shift $#
"$MESH" --root "$ROOT" $ARGS
"#;
    let quote = |a: &[&str]| {
        a.iter()
            .map(|s| format!("'{}'", s.replace('\'', "'\\''")))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let out = Command::new("timeout")
        .args(["120", "unshare", "--net", "--", "sh", "-ec", SCRIPT])
        .env("RULESET", &ruleset)
        .env("PORT", port.to_string())
        .env("WWW", dir.path())
        .env("MESH", MESH)
        .env("ROOT", root)
        .env("FIRST", first.map(quote).unwrap_or_default())
        .env("ARGS", args.join(" "))
        .env(crate::util::HOST_TOOLS, "1")
        .output()
        .expect("timeout, unshare, sh, nft and busybox (busybox-static)");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// genesis --preview on a machine whose own firewall closes the registry's port to everyone: the
/// derived filter admits it from anywhere, so the preview says it opens, not that it is kept.
#[test]
fn genesis_preview_says_a_port_the_found_firewall_closes_and_the_filter_admits_opens() {
    let node = Node::new();
    let (code, stdout, stderr) = behind_dropping_firewall(
        node.root(),
        5000,
        None,
        &["genesis", "--node", "n1", "--preview", "--json"],
    );
    // A listener on the registry's port is in use: genesis would refuse, and says each fate.
    assert_eq!(code, Some(3), "{stdout}\n{stderr}");
    let plan = crate::util::contract(&stdout);
    let registry = plan["filter"]["listeners"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["listener"].as_str().unwrap().contains(":5000 "))
        .unwrap_or_else(|| panic!("no listener on 5000: {plan:#}"))
        .clone();
    assert_eq!(registry["fate"], "opens", "{registry:#}");
    assert_eq!(
        registry["why"],
        "the found firewall closes it now; opening registry/port admits it from anywhere",
        "{registry:#}"
    );
    let (_, text, _) = behind_dropping_firewall(
        node.root(),
        5000,
        None,
        &["genesis", "--node", "n1", "--preview"],
    );
    assert!(
        text.lines().any(|l| l.starts_with("  opens ")
            && l.contains(":5000 ")
            && l.ends_with(
                "the found firewall closes it now; opening registry/port admits it from anywhere"
            )),
        "{text}"
    );
    assert!(!text.contains("kept      tcp 0.0.0.0:5000"), "{text}");
}

/// converge --preview on an adopted node whose found firewall already closes a listener that no
/// opening admits: its line says it stays closed, and the closing count agrees (none closes).
#[test]
fn converge_preview_counts_a_port_closed_now_as_staying_closed_not_closing() {
    let node = Node::new();
    let file = node.path("/adopted.json");
    node.write("/etc/web.conf", "found\n");
    // No private network: the guard and the flip need none, and an adopted apply that declares
    // one whose interface is missing says so (exit 5).
    let d = json!({"version": 1, "node": "n1", "mode": "adopted",
        "settings": {"ports": {"store": 5432, "bus": 5672, "broker_management": 15672,
                               "registry": 5000, "hub": 51820}},
        "resources": [{"id": "web/conf", "module": "web", "type": "file",
                       "path": "/etc/web.conf", "content": "declared\n"}]});
    std::fs::write(&file, serde_json::to_vec(&d).unwrap()).unwrap();
    let apply = ["apply", file.to_str().unwrap()];
    let (code, stdout, stderr) =
        behind_dropping_firewall(node.root(), 8081, Some(&apply), &["converge", "--preview"]);
    assert_eq!(code, Some(4), "{stdout}\n{stderr}");
    let line = stdout
        .lines()
        .find(|l| l.contains("0.0.0.0:8081"))
        .unwrap_or_else(|| panic!("no line for the listener:\n{stdout}"));
    assert!(line.ends_with("stays closed"), "{line}");
    assert!(
        stdout.contains(
            "the flip would go ahead (no port reached now closes; 1 port closed now stays closed)"
        ),
        "{stdout}"
    );
    assert!(!stdout.contains("would close)"), "{stdout}");
    assert!(
        stdout.contains("Plan: ") && stdout.contains("; the flip to the derived filter."),
        "{stdout}"
    );
    // The same preview as JSON: a plan like every preview's, the flip's account beside it.
    let (code, stdout, stderr) = behind_dropping_firewall(
        node.root(),
        8081,
        None,
        &["converge", "--preview", "--json"],
    );
    assert_eq!(code, Some(4), "{stdout}\n{stderr}");
    let plan = crate::util::contract(&stdout);
    assert_eq!(
        (
            plan["document"].as_str(),
            plan["act"].as_str(),
            plan["status"].as_str()
        ),
        (Some("plan"), Some("converge"), Some("changes"))
    );
    let reach = plan["listening"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["port"] == 8081)
        .unwrap_or_else(|| panic!("{plan:#}"))
        .clone();
    assert_eq!(
        (reach["now"].as_str(), reach["change"].as_str()),
        (Some("nowhere"), Some("stays closed"))
    );
    assert_eq!(
        plan["summary"]["change"], 1,
        "the held file is replaced: {plan:#}"
    );
    assert_eq!(
        plan["entries"][0]["diff"],
        json!([
            "--- /etc/web.conf (now)",
            "+++ /etc/web.conf (declared)",
            "@@ -1,1 +1,1 @@",
            "-found",
            "+declared"
        ]),
        "{plan:#}"
    );
}
