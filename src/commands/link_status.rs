//! `mesh-host link status [--json]`: the link as this node knows it, from local state only
//! (`link.json`, the resident host's record in it, the kernel's word on whether that host runs,
//! the store): enrolled or not, linked or not, the last contact and the declaration in force. It
//! asks no broker, so it answers the same with the broker down or unreachable.

use crate::commands::Exit;
use crate::link::{load, Connection};
use crate::store;
use anyhow::Result;
use serde::Serialize;
use std::path::Path;

/// What `link status` says; every key is there in every case (`null` when not known).
#[derive(Debug, Serialize)]
pub struct Status {
    pub enrolled: bool,
    pub node: Option<String>,
    pub brokers: Vec<String>,
    pub enrolled_at: Option<u64>,
    /// `linked`, `unlinked` (the resident host runs and its link is down), `not-running` (no
    /// resident host runs on this store, so nothing keeps a link) or `not-enrolled`.
    pub link: &'static str,
    /// The broker's address when linked; why the link is down otherwise.
    pub detail: Option<String>,
    /// Since when the link is as said (seconds since the epoch), when the resident host said.
    pub since: Option<u64>,
    pub resident_pid: Option<u32>,
    /// When the broker was last heard from (seconds since the epoch).
    pub last_contact: Option<u64>,
    /// The newest declaration version accepted from the link.
    pub declaration_version: Option<u64>,
    /// Where the declaration in force came from (`link`, `local`, `bundle`), if one is stored.
    pub declaration_source: Option<&'static str>,
}

/// Reads the link's state under `root`; nothing is written and no broker is asked.
pub fn read(root: &Path) -> Result<Status> {
    let linked = load(root)?;
    let stored = store::peek(root).ok().flatten();
    let declaration_source = stored
        .as_ref()
        .filter(|s| s.declaration.is_some())
        .and_then(|s| s.source)
        .map(|s| s.as_str());
    let resident_pid = crate::pid_file::resident(root);
    let Some(l) = linked else {
        return Ok(Status {
            enrolled: false,
            node: None,
            brokers: Vec::new(),
            enrolled_at: None,
            link: "not-enrolled",
            detail: None,
            since: None,
            resident_pid,
            last_contact: None,
            declaration_version: None,
            declaration_source,
        });
    };
    let (link, detail, since) = match (resident_pid, &l.connection) {
        (None, _) => ("not-running", None, None),
        (Some(_), Some(Connection { up, since, detail })) => (
            if *up { "linked" } else { "unlinked" },
            Some(detail.clone()),
            Some(*since),
        ),
        (Some(_), None) => ("unlinked", None, None),
    };
    Ok(Status {
        enrolled: true,
        node: Some(l.node.clone()),
        brokers: l.broker.addrs.clone(),
        enrolled_at: Some(l.enrolled_at),
        link,
        detail,
        since,
        resident_pid,
        last_contact: l.last_contact,
        declaration_version: Some(l.last_version),
        declaration_source,
    })
}

/// When, as a person reads it: the time of day in UTC and how long ago.
fn when(secs: u64, now: u64) -> String {
    let day = secs % 86_400;
    format!(
        "{:02}:{:02}:{:02} UTC, {} ago",
        day / 3600,
        day % 3600 / 60,
        day % 60,
        link::human::duration(now.saturating_sub(secs))
    )
}

impl Status {
    /// The status as lines a person reads.
    pub fn render(&self, now: u64) -> String {
        let mut out = String::new();
        let mut line = |k: &str, v: String| out.push_str(&format!("{k:<21} {v}\n"));
        if !self.enrolled {
            line(
                "enrolled",
                "no (`mesh-host enrol --token-file PATH` joins the mesh)".into(),
            );
        } else {
            line(
                "enrolled",
                format!(
                    "yes, as node {} (since {}), brokers {}",
                    self.node.as_deref().unwrap_or("-"),
                    self.enrolled_at.map_or("-".into(), |t| when(t, now)),
                    self.brokers.join(", ")
                ),
            );
        }
        let pid = self
            .resident_pid
            .map_or(String::new(), |p| format!(" (resident host pid {p})"));
        let since = self
            .since
            .map_or(String::new(), |t| format!(" since {}", when(t, now)));
        let detail = self.detail.clone().unwrap_or_default();
        line(
            "linked",
            match self.link {
                "linked" => format!("yes, to {detail}{since}{pid}"),
                "unlinked" => format!("no{since}: {detail}{pid}"),
                "not-running" => "no: no resident host runs on this store (`mesh-host run`, \
                                  the mesh-host service, keeps the link)"
                    .into(),
                _ => "no: not enrolled".into(),
            },
        );
        if self.enrolled {
            line(
                "last contact",
                self.last_contact.map_or("never".into(), |t| when(t, now)),
            );
        }
        let version = match self.declaration_version {
            Some(0) | None => "no version from the link yet".to_string(),
            Some(v) => format!("version {v} from the link is the newest accepted"),
        };
        line(
            "declaration",
            match self.declaration_source {
                Some(source) => format!("in force from {source}; {version}"),
                None => format!("none applied; {version}"),
            },
        );
        out
    }
}

/// `mesh-host link status [--json]`: always exit 0 (it reports; it refuses nothing).
pub fn command(root: &Path, json: bool) -> Result<Exit> {
    let status = read(root)?;
    if json {
        crate::json_contract::print("link_status", 0, &status)?;
    } else {
        print!("{}", status.render(link::now_secs()));
    }
    Ok(Exit::Done)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_node_never_enrolled_is_said_so_and_every_key_is_there() {
        let root = tempfile::tempdir().unwrap();
        let s = super::read(root.path()).unwrap();
        assert_eq!(s.link, "not-enrolled");
        let v = serde_json::to_value(&s).unwrap();
        for key in [
            "enrolled",
            "node",
            "brokers",
            "enrolled_at",
            "link",
            "detail",
            "since",
            "resident_pid",
            "last_contact",
            "declaration_version",
            "declaration_source",
        ] {
            assert!(v.get(key).is_some(), "{key} missing: {v}");
        }
        let doc = crate::json_contract::document("link_status", 0, &s);
        assert_eq!(crate::json_contract::check(&doc), Ok(()), "{doc}");
        let text = s.render(0);
        assert!(text.contains("enrolled              no"), "{text}");
        assert!(text.contains("none applied"), "{text}");
    }
}
