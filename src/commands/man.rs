//! The man pages, generated from the clap definition so they never drift from the command line:
//! `mesh-host(1)` and one page per visible subcommand (`mesh-host-apply(1)`,
//! `mesh-host-firewall-status(1)`, …), each with clap's NAME, SYNOPSIS, DESCRIPTION, OPTIONS and
//! SUBCOMMANDS, then EXIT STATUS, ENVIRONMENT, FILES and SEE ALSO written here. Every
//! `mesh-host…(1)` a page cites is a page this module makes (tests/manpages.rs checks it).

use clap::CommandFactory;
use std::fmt::Write as _;

/// The section every page is in.
const SECTION: &str = "1";

/// The exit status of the commands whose help carries no `Exit codes:` of its own.
fn exit_status(name: &str) -> &'static [(&'static str, &'static str)] {
    match name {
        "mesh-host-briefing" => &[
            (
                "0",
                "the briefing was shown; with --json also when nothing has been applied yet, \
                 and the document is then null",
            ),
            ("1", "the store could not be read"),
            (
                "2",
                "nothing has been applied on this node yet, so there is no briefing (without \
                 --json)",
            ),
        ],
        "mesh-host-firewall-explain" => &[
            ("0", "a new connection to the port is admitted"),
            ("1", "it is not admitted, refused or doubtful"),
            ("2", "the input was refused"),
        ],
        _ => &[
            ("0", "done"),
            ("1", "the host could not work (the message says why)"),
            ("2", "the input was refused"),
        ],
    }
}

const ENVIRONMENT: &[(&str, &str)] = &[
    (
        "RUST_LOG",
        "what is logged to standard error, as tracing's filter directives (default: \
                  warnings, and the resident host's reconciles, restores and link changes and \
                  the progress of steps past 3 s at info); RUST_LOG=debug says more",
    ),
    (
        "JOURNAL_STREAM",
        "set by systemd; when it names standard error's device and inode, each \
                        log line carries its syslog priority (<3> error, <4> warning, <6> info, \
                        <7> debug) and no timestamp, so journalctl -p warning filters them",
    ),
    (
        "NO_COLOR",
        "when set and not empty, log lines are never coloured (they are coloured only \
                  on a terminal in any case)",
    ),
    (
        "DOCKER_HOST, CONTAINER_HOST",
        "where the Docker engine or the Podman service is reached, \
                                     as their own CLIs read it",
    ),
];

const FILES: &[(&str, &str)] = &[
    (
        "/var/lib/mesh-host/state.json, state.journal",
        "the store: what the host owns and holds, \
      the declaration, the briefing (under --root DIR when given)",
    ),
    (
        "/var/lib/mesh-host/originals/",
        "the original of every found file, saved before anything \
      touched it",
    ),
    (
        "/var/lib/mesh-host/run.pid",
        "the resident host's pid, which apply, take, converge and \
      adopt signal when they stored a new declaration",
    ),
    (
        "/var/lib/mesh-host/node.key, link.json",
        "the node's private key and its link to the \
      mesh, after mesh-host enrol",
    ),
    (
        "/var/lib/mesh-host/released.json",
        "left by a release: whom the dropped identity \
      was and the newest version it accepted (no key, no credentials)",
    ),
    (
        "/etc/hosts, /etc/resolv.conf",
        "where a broker named by host name is looked up, by enrol and by the link \
      (mesh-host resolves names itself: the C library's name service is not used)",
    ),
    (
        "/var/lib/mesh-host/known-good, attempts, rolled-back, halted",
        "the launcher's state: the \
      version it rolls back to, its count of failed starts, the rollback made, why it halted",
    ),
    (
        "/usr/lib/mesh-host/launch",
        "the launcher the init starts, which starts mesh-host run",
    ),
    (
        "/usr/lib/systemd/system/mesh-host.service, /etc/init.d/mesh-host",
        "the init file",
    ),
];

/// Pages cited that are not this program's own, with the section they are in.
const ELSEWHERE: &[&str] = &["systemctl(1)", "journalctl(1)", "nft(8)"];

/// Every page: its file name (`mesh-host-apply.1`) and its roff.
pub fn pages() -> Vec<(String, String)> {
    let mut cmd = crate::Cli::command().disable_help_subcommand(true);
    cmd.build();
    let mut names = Vec::new();
    collect_names(&cmd, &mut names);
    let mut out = Vec::new();
    collect(&cmd, None, &names, &mut out);
    out
}

/// The names of every page, so SEE ALSO never cites one that is not made.
pub fn page_names() -> Vec<String> {
    let mut cmd = crate::Cli::command().disable_help_subcommand(true);
    cmd.build();
    let mut names = Vec::new();
    collect_names(&cmd, &mut names);
    names
}

/// The external pages the generated ones cite.
pub fn cited_elsewhere() -> &'static [&'static str] {
    ELSEWHERE
}

fn display(cmd: &clap::Command) -> String {
    cmd.get_display_name()
        .unwrap_or_else(|| cmd.get_name())
        .to_string()
}

fn collect_names(cmd: &clap::Command, names: &mut Vec<String>) {
    names.push(display(cmd));
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        collect_names(sub, names);
    }
}

fn collect(
    cmd: &clap::Command,
    parent: Option<&str>,
    names: &[String],
    out: &mut Vec<(String, String)>,
) {
    let name = display(cmd);
    out.push((format!("{name}.{SECTION}"), page(cmd, parent, names)));
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        collect(sub, Some(&name), names, out);
    }
}

fn page(cmd: &clap::Command, parent: Option<&str>, names: &[String]) -> String {
    let name = display(cmd);
    let man = clap_mangen::Man::new(cmd.clone()).section(SECTION);
    let mut buf = Vec::new();
    // Writing to a Vec cannot fail.
    let _ = man.render_title(&mut buf);
    let _ = man.render_name_section(&mut buf);
    let _ = man.render_synopsis_section(&mut buf);
    let _ = man.render_description_section(&mut buf);
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        let _ = man.render_options_section(&mut buf);
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        let _ = man.render_subcommands_section(&mut buf);
    }
    let mut text = String::from_utf8_lossy(&buf).into_owned();

    text.push_str(".SH \"EXIT STATUS\"\n");
    let own = cmd
        .get_after_help()
        .map(|h| h.to_string())
        .filter(|h| h.starts_with("Exit codes:"));
    match own {
        Some(help) => {
            for line in help.lines().skip(1) {
                let line = line.trim();
                if let Some((code, what)) = line.split_once(char::is_whitespace) {
                    tagged(&mut text, code, what.trim());
                }
            }
        }
        None if cmd.get_subcommands().any(|s| !s.is_hide_set()) && parent.is_none() => {
            paragraph(
                &mut text,
                "Each command's page gives its own: 0 done, as declared; 1 an apply failed \
                 part-way (the report names the resource), or the host could not work; 2 the \
                 input was refused and nothing changed; 3 a safety rule refused the act and \
                 nothing changed; 4 a preview with changes pending; 5 applied to the end, but \
                 the briefing says failed (an opening not admitted); 6 another resident host \
                 runs on the store; 130 and 143 an act interrupted by SIGINT or SIGTERM.",
            );
        }
        None => {
            for (code, what) in exit_status(&name) {
                tagged(&mut text, code, what);
            }
        }
    }

    text.push_str(".SH ENVIRONMENT\n");
    for (var, what) in ENVIRONMENT {
        tagged(&mut text, var, what);
    }
    text.push_str(".SH FILES\n");
    for (path, what) in FILES {
        tagged(&mut text, path, what);
    }

    if name == "mesh-host-enrol" {
        text.push_str(".SH EXAMPLES\n");
        paragraph(
            &mut text,
            "Save the token the controller printed into a file only root can read, enrol from \
             it, then remove it: mesh-host enrol --token-file /root/mesh.token. From standard \
             input: mesh-host enrol --token-file - < /root/mesh.token. The token given with \
             --token is visible to every user of the machine in ps while enrol runs, and \
             stays in the shell's history: it is for scripts that have no file.",
        );
        text.push_str(".PP\n");
        paragraph(
            &mut text,
            "A broker the token names by host name is looked up by mesh-host itself: \
             /etc/hosts, then the nameservers of /etc/resolv.conf (A and AAAA records), again \
             at every attempt to reach it. A spoofed answer gains nothing: every address is \
             dialled with the broker's certificate pinned by the token's fingerprint.",
        );
    }

    text.push_str(".SH \"SEE ALSO\"\n");
    let mut see: Vec<String> = Vec::new();
    if let Some(p) = parent {
        see.push(format!("{p}({SECTION})"));
    }
    if name != "mesh-host" && parent != Some("mesh-host") {
        see.push(format!("mesh-host({SECTION})"));
    }
    if name == "mesh-host" {
        // The top page names every page.
        see.extend(
            names
                .iter()
                .filter(|n| *n != "mesh-host")
                .map(|n| format!("{n}({SECTION})")),
        );
    }
    for (from, to) in [
        ("mesh-host", "mesh-host-run"),
        ("mesh-host-apply", "mesh-host-reconcile"),
        ("mesh-host-reconcile", "mesh-host-run"),
        ("mesh-host-converge", "mesh-host-adopt"),
        ("mesh-host-adopt", "mesh-host-converge"),
        ("mesh-host-take", "mesh-host-converge"),
    ] {
        let cite = format!("{to}({SECTION})");
        if name == from && names.iter().any(|n| n == to) && !see.contains(&cite) {
            see.push(cite);
        }
    }
    if name == "mesh-host" || name == "mesh-host-run" {
        see.push("systemctl(1)".into());
        see.push("journalctl(1)".into());
    }
    if name.starts_with("mesh-host-firewall") {
        see.push("nft(8)".into());
    }
    let cited: Vec<String> = see
        .iter()
        .map(|s| {
            let (page, section) = s.trim_end_matches(')').split_once('(').unwrap_or((s, ""));
            format!(".BR {} ({})", escape(page), section)
        })
        .collect();
    for (i, line) in cited.iter().enumerate() {
        text.push_str(line);
        if i + 1 < cited.len() {
            text.push_str(" ,");
        }
        text.push('\n');
    }
    text
}

fn tagged(out: &mut String, tag: &str, what: &str) {
    let _ = write!(
        out,
        ".TP\n\\fB{}\\fR\n{}\n",
        escape(tag),
        escape(&squash(what))
    );
}

fn paragraph(out: &mut String, text: &str) {
    let _ = writeln!(out, "{}", escape(&squash(text)));
}

/// Runs of spaces (from the continued string literals above) become one.
fn squash(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Text made safe for roff: backslashes escaped, hyphens as `\-`, a leading `.` or `'` guarded.
fn escape(s: &str) -> String {
    let mut out = s.replace('\\', "\\e").replace('-', "\\-");
    if out.starts_with('.') || out.starts_with('\'') {
        out.insert_str(0, "\\&");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn there_is_a_page_per_visible_subcommand_and_none_for_hidden_ones() {
        let names = page_names();
        for n in [
            "mesh-host",
            "mesh-host-apply",
            "mesh-host-run",
            "mesh-host-firewall",
            "mesh-host-firewall-status",
            "mesh-host-openings-derive",
        ] {
            assert!(names.iter().any(|x| x == n), "{n} in {names:?}");
        }
        assert!(!names.iter().any(|x| x.contains("generate")), "{names:?}");
        let pages = pages();
        assert_eq!(pages.len(), names.len());
        for (file, roff) in &pages {
            for section in [
                ".SH \"EXIT STATUS\"",
                ".SH ENVIRONMENT",
                ".SH FILES",
                ".SH \"SEE ALSO\"",
            ] {
                assert!(roff.contains(section), "{file} has no {section}");
            }
        }
    }
}
