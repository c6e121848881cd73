//! Reading the host's own report: which part of an opening's verdict holds a probe's source (a
//! small CIDR-contains helper), the per-layer states the report gave before the verdict, what
//! `firewall explain` says of a cell, and whether `apply` and `firewall status` say the same.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde_json::{json, Value};

use std::path::Path;

use lab::Machine;

use super::{mesh, Declared, Family, Source};

/// Whether `cidr` (an address, or an address with a prefix length) holds `addr`; `None` when it
/// is not a CIDR at all.
fn cidr_contains(cidr: &str, addr: IpAddr) -> Option<bool> {
    let (net, len) = match cidr.split_once('/') {
        Some((n, l)) => (n, Some(l.parse::<u32>().ok()?)),
        None => (cidr, None),
    };
    let net: IpAddr = net.parse().ok()?;
    Some(match (net, addr) {
        (IpAddr::V4(n), IpAddr::V4(a)) => {
            let len = len.unwrap_or(32);
            if len > 32 {
                return None;
            }
            let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
            u32::from(n) & mask == u32::from(a) & mask
        }
        (IpAddr::V6(n), IpAddr::V6(a)) => {
            let len = len.unwrap_or(128);
            if len > 128 {
                return None;
            }
            let mask = if len == 0 {
                0
            } else {
                u128::MAX << (128 - len)
            };
            u128::from(n) & mask == u128::from(a) & mask
        }
        _ => false,
    })
}

/// Whether one of a part's sources holds the probe's source: a CIDR holding its address, or (for
/// an opening from the private network) a source naming the interface it arrives on.
fn source_holds(source: &str, addr: IpAddr, interface: &str) -> bool {
    match cidr_contains(source, addr) {
        Some(held) => held,
        None => source
            .split(|c: char| !c.is_alphanumeric() && c != '.' && c != '-')
            .any(|w| w == interface),
    }
}

/// What the host's report says of one source arriving on `interface`: the fate of the verdict's
/// part holding it, its family's, on that interface (a part naming no `interface` is on any),
/// with a source holding its address.
pub(super) fn reported(
    opening: &Value,
    family: Family,
    addr: IpAddr,
    interface: &str,
) -> Result<String, String> {
    let verdict = &opening["verdict"];
    if verdict.is_null() {
        return Err(format!(
            "no verdict in the report for {} (firewall status --json has no `verdict`)",
            opening["id"].as_str().unwrap_or("?")
        ));
    }
    let parts = verdict["parts"]
        .as_array()
        .ok_or_else(|| format!("the verdict has no parts: {verdict}"))?;
    let holding: Vec<&Value> = parts
        .iter()
        .filter(|p| p["family"] == family.name())
        .filter(|p| match p["interface"].as_str() {
            None | Some("") => true,
            Some(i) => i == interface,
        })
        .filter(|p| {
            p["sources"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .any(|s| source_holds(s, addr, interface))
        })
        .collect();
    match holding.as_slice() {
        [part] => part["fate"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| format!("a part has no fate: {part}")),
        [] => Err(format!(
            "no {} part of the verdict holds the declared source {addr} on {interface}; its parts: \
             {}",
            family.name(),
            parts_shown(parts)
        )),
        _ => Err(format!(
            "{} parts of the verdict hold {addr} on {interface}; they must partition the sources: \
             {}",
            holding.len(),
            parts_shown(parts)
        )),
    }
}

/// A verdict's parts in a line: family, interface, fate and the first of the sources.
fn parts_shown(parts: &[Value]) -> String {
    let shown: Vec<String> = parts
        .iter()
        .map(|p| {
            let sources: Vec<&str> = p["sources"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let more = if sources.len() > 3 {
                format!(" and {} more", sources.len() - 3)
            } else {
                String::new()
            };
            format!(
                "{} on {} {} from {}{more}",
                p["family"].as_str().unwrap_or("?"),
                p["interface"].as_str().unwrap_or("any interface"),
                p["fate"].as_str().unwrap_or("?"),
                sources[..sources.len().min(3)].join(", ")
            )
        })
        .collect();
    shown.join("; ")
}

/// The per-layer states of an opening where a rule is needed, as the report gave them before the
/// verdict (`present`, `missing`, `refused`, `doubtful`, ...), and whether they claim it in force.
pub(super) fn layer_states(opening: &Value) -> (String, bool) {
    let states: Vec<&str> = opening["layers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|l| l["state"] != "not-needed")
        .map(|l| l["state"].as_str().unwrap_or("?"))
        .collect();
    if states.is_empty() {
        return ("not-needed".to_owned(), true);
    }
    let in_force = states.iter().all(|s| *s == "present");
    let mut counted: BTreeMap<&str, usize> = BTreeMap::new();
    for s in states {
        *counted.entry(s).or_default() += 1;
    }
    let shown: Vec<String> = counted
        .iter()
        .map(|(s, n)| {
            if *n == 1 {
                (*s).to_owned()
            } else {
                format!("{s}×{n}")
            }
        })
        .collect();
    (shown.join(","), in_force)
}

/// Whether a verdict's `state` says what its parts say (issue 20: *present* only when every
/// declared source the operator does not refuse is admitted; issue 30: and only when every way
/// asked, a family arriving on an interface, admits some source): `None` when it does, or when
/// there is no verdict (each cell says that), else what contradicts it.
pub(super) fn state_contradiction(opening: &Value) -> Option<String> {
    let verdict = &opening["verdict"];
    let state = verdict["state"].as_str()?;
    let parts = verdict["parts"].as_array()?;
    let fates: Vec<&str> = parts
        .iter()
        .map(|p| p["fate"].as_str().unwrap_or("?"))
        .collect();
    let admitted = fates.iter().filter(|f| **f == "admitted").count();
    let open_or_banned = fates.iter().all(|f| *f == "admitted" || *f == "refused");
    // The ways where no part is admitted.
    let way = |p: &Value| (p["family"].to_string(), p["interface"].to_string());
    let mut shut: Vec<(String, String)> = parts
        .iter()
        .map(way)
        .filter(|w| {
            !parts
                .iter()
                .any(|p| way(p) == *w && p["fate"] == "admitted")
        })
        .collect();
    shut.sort();
    shut.dedup();
    match state {
        "present" if !(open_or_banned && admitted > 0) => Some(format!(
            "the verdict says present, but its parts' fates are {fates:?}"
        )),
        "present" if !shut.is_empty() => Some(format!(
            "the verdict says present, but nothing is admitted on {shut:?}"
        )),
        "present" => None,
        _ if !fates.is_empty() && admitted == fates.len() => Some(format!(
            "the verdict says {state}, but every part is admitted"
        )),
        _ => None,
    }
}

/// What `mesh-host firewall explain PORT --from SOURCE --interface IF --path PATH --json` says
/// of a connection from `source` in `family` arriving where the probe arrives (issue 20, point
/// 6: its answer checked against the probe): the fate of the part holding the source's address,
/// on the way arriving on that interface.
pub(super) fn explained(
    node: &Machine,
    root: &Path,
    wrap: &[String],
    o: &Declared,
    source: Source,
    family: Family,
) -> Result<String, String> {
    let (port, addr) = (o.port.to_string(), source.addr(family).to_string());
    let args = [
        "firewall",
        "explain",
        &port,
        "--proto",
        "tcp",
        "--from",
        &addr,
        "--interface",
        source.interface(),
        "--path",
        o.path,
        "--json",
    ];
    let out = mesh(node, root, wrap, &args);
    let v: Value = serde_json::from_str(&out.stdout).map_err(|e| {
        format!(
            "mesh-host {} printed no JSON ({e}), exit {}: {}",
            args.join(" "),
            out.status,
            out.stderr.trim()
        )
    })?;
    mesh_host::json_contract::check(&v).map_err(|problems| {
        format!(
            "mesh-host {} breaks the JSON contract: {}",
            args.join(" "),
            problems.join("; ")
        )
    })?;
    let ways: Vec<&Value> = v["ways"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|w| w["family"] == family.name() && w["interface"] == source.interface())
        .collect();
    let [way] = ways.as_slice() else {
        return Err(format!(
            "firewall explain has {} {} ways arriving on {} for {addr}: {v}",
            ways.len(),
            family.name(),
            source.interface()
        ));
    };
    // The way's parts read as a verdict's: each with the way's family and interface.
    let parts: Vec<Value> = way["parts"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            let mut p = p.clone();
            p["family"] = json!(family.name());
            p["interface"] = way["interface"].clone();
            p
        })
        .collect();
    let as_verdict =
        json!({"id": format!("explain {port} from {addr}"), "verdict": {"parts": parts}});
    reported(&as_verdict, family, source.addr(family), source.interface())
}

/// Whether `apply`'s report and `firewall status` say the same of an opening (issue 20: they
/// say the same thing): apply lists it as not admitted exactly where the status's verdict is
/// not present. `None` when they agree or there is no verdict to compare.
pub(super) fn apply_contradiction(report: &Value, entry: &Value) -> Option<String> {
    let state = entry["verdict"]["state"].as_str()?;
    let listed = report["not_admitted"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|n| n["id"] == entry["id"]);
    match (state == "present", listed) {
        (true, true) => Some(format!(
            "firewall status says present, but apply listed it as not admitted: {}",
            report["not_admitted"]
        )),
        (false, false) => Some(format!(
            "firewall status says {state}, but apply did not list it as not admitted"
        )),
        _ => None,
    }
}

#[test]
fn the_cidr_helper_holds_what_it_should() {
    let a4: IpAddr = "192.0.2.40".parse().unwrap();
    let a6: IpAddr = "2001:db8:1::40".parse().unwrap();
    assert_eq!(cidr_contains("0.0.0.0/0", a4), Some(true));
    assert_eq!(cidr_contains("192.0.2.32/28", a4), Some(true));
    assert_eq!(cidr_contains("192.0.2.0/27", a4), Some(false));
    assert_eq!(cidr_contains("192.0.2.40", a4), Some(true));
    assert_eq!(cidr_contains("::/0", a6), Some(true));
    assert_eq!(cidr_contains("::/0", a4), Some(false));
    assert_eq!(cidr_contains("2001:db8:1::40/124", a6), Some(true));
    assert_eq!(cidr_contains("2001:db8:1::/124", a6), Some(false));
    assert_eq!(cidr_contains("mesh0", a4), None);
    assert_eq!(cidr_contains("10.0.0.0/33", a4), None);
    assert!(source_holds("iifname mesh0", a4, "mesh0"));
    assert!(!source_holds("iifname mesh0", a4, "eth0"));
    let opening = json!({"id": "x", "verdict": {"state": "present", "parts": [
        {"family": "ipv4", "sources": ["192.0.2.32/28"], "fate": "refused"},
        {"family": "ipv4", "sources": ["0.0.0.0/1", "128.0.0.0/2", "192.0.2.0/27"], "fate": "admitted"},
    ]}});
    assert_eq!(
        reported(&opening, Family::V4, a4, "eth0").as_deref(),
        Ok("refused")
    );
    assert_eq!(
        reported(&opening, Family::V4, "192.0.2.20".parse().unwrap(), "eth0").as_deref(),
        Ok("admitted")
    );
    assert!(reported(&opening, Family::V6, a6, "eth0").is_err());
    assert_eq!(state_contradiction(&opening), None);
    let by_interface = json!({"verdict": {"state": "refused", "parts": [
        {"family": "ipv4", "interface": "eth0", "sources": ["0.0.0.0/0"], "fate": "refused"},
        {"family": "ipv4", "interface": "mesh0", "sources": ["0.0.0.0/0"], "fate": "admitted"},
    ]}});
    assert_eq!(state_contradiction(&by_interface), None);
    // The outside interface refusing every source is no exception of a present opening.
    let mut said_present = by_interface.clone();
    said_present["verdict"]["state"] = json!("present");
    assert!(state_contradiction(&said_present)
        .is_some_and(|c| c.contains("nothing is admitted on") && c.contains("eth0")));
    assert_eq!(
        reported(&by_interface, Family::V4, a4, "eth0").as_deref(),
        Ok("refused")
    );
    assert_eq!(
        reported(
            &by_interface,
            Family::V4,
            "10.77.0.2".parse().unwrap(),
            "mesh0"
        )
        .as_deref(),
        Ok("admitted")
    );
    let all_in = json!({"verdict": {"state": "not-admitted", "parts": [
        {"family": "ipv4", "sources": ["0.0.0.0/0"], "fate": "admitted"}]}});
    assert!(state_contradiction(&all_in).is_some());
    let doubtful = json!({"verdict": {"state": "present", "parts": [
        {"family": "ipv4", "sources": ["0.0.0.0/0"], "fate": "doubtful"}]}});
    assert!(state_contradiction(&doubtful).is_some());
    assert_eq!(state_contradiction(&json!({"id": "x"})), None);
    assert!(reported(&json!({"id": "x"}), Family::V4, a4, "eth0")
        .unwrap_err()
        .contains("no verdict in the report"));
}
