//! A command line clap refuses (an unknown command or flag, a missing argument): under `--json`
//! one refusal document on stdout as well as clap's words on stderr, so a script reads every
//! outcome as JSON; exit 2 either way. Help and `--version` print as clap prints them.

use super::{refusal_json, Cli};
use clap::Parser;
use std::ffi::OsString;

/// The summary of a refused command line.
const SUMMARY: &str = "the command line was refused; nothing was read or changed";

/// The command line parsed, or the process ended as clap would end it, with the refusal as a
/// JSON document on stdout first when `--json` is among the arguments.
pub fn parse_or_refuse() -> Cli {
    let args: Vec<OsString> = std::env::args_os().collect();
    match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) => {
            if e.use_stderr() && json_asked(&args) {
                let text = e.render().to_string();
                println!("{}", refusal_json(2, &problems(&text), SUMMARY));
            }
            e.exit()
        }
    }
}

/// Whether `--json` is among the arguments (before a `--` that ends the flags).
fn json_asked(args: &[OsString]) -> bool {
    args.iter()
        .skip(1)
        .take_while(|a| *a != "--")
        .any(|a| a == "--json")
}

/// clap's message as problems: its error (with the indented lines that continue it, such as
/// the arguments missing) and its tips, one each, without the usage lines.
fn problems(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for line in text.lines() {
        let l = line.trim();
        if l.is_empty() || l.starts_with("Usage:") || l.starts_with("For more information") {
            continue;
        }
        let continues = line.starts_with(' ') && !l.starts_with("tip:");
        match out.last_mut() {
            Some(last) if continues => {
                last.push(' ');
                last.push_str(l);
            }
            _ => out.push(l.strip_prefix("error: ").unwrap_or(l).to_string()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_command_line_is_its_error_and_tips_without_the_usage() {
        let e = Cli::try_parse_from(["mesh-host", "aply", "--json"]).unwrap_err();
        let p = problems(&e.render().to_string());
        assert_eq!(p[0], "unrecognized subcommand 'aply'", "{p:?}");
        assert!(
            p.iter()
                .any(|l| l.contains("similar subcommand exists: 'apply'")),
            "{p:?}"
        );
        assert!(!p.iter().any(|l| l.contains("Usage")), "{p:?}");
        let doc: serde_json::Value = serde_json::from_str(&refusal_json(2, &p, SUMMARY)).unwrap();
        assert_eq!(crate::json_contract::check(&doc), Ok(()));
        assert_eq!(
            (doc["status"].as_str(), doc["exit_code"].as_u64()),
            (Some("refused"), Some(2))
        );
    }

    #[test]
    fn a_missing_argument_is_one_problem_naming_it() {
        let e = Cli::try_parse_from(["mesh-host", "apply", "--json"]).unwrap_err();
        assert_eq!(
            problems(&e.render().to_string()),
            ["the following required arguments were not provided: <FILE>"]
        );
    }

    #[test]
    fn json_is_asked_only_before_the_end_of_flags() {
        let os = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        assert!(json_asked(&os(&["mesh-host", "owned", "--json"])));
        assert!(!json_asked(&os(&["mesh-host", "apply", "--", "--json"])));
        assert!(!json_asked(&os(&["mesh-host", "owned"])));
    }
}
