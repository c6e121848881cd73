//! The command line: what an operator types, and the one `run` that does the work.

use crate::apply::{self, ApplyError, Host, Report};
use crate::briefing::Briefing;
use crate::declaration::{self, Source};
use crate::runner::SystemRunner;
use crate::store;
use anyhow::{Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;

const EXIT_CODES: &str = "\
Exit codes:
  0  done
  1  an apply failed part-way (the report names the resource), or the host could not work
  2  the input was refused and nothing changed
  3  a safety rule refused the act and nothing changed";

/// mesh-host makes this machine match a declaration, adopting what it finds.
#[derive(Parser, Debug)]
#[command(name = "mesh-host", version, about, after_help = EXIT_CODES)]
pub struct Cli {
    /// Resolve every machine path, and the store, under this directory instead of `/`.
    #[arg(long, global = true, value_name = "DIR", default_value = "/")]
    pub root: PathBuf,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Print the version, one line.
    Version,
    /// Apply a declaration from a file (`-` for standard input).
    #[command(after_help = EXIT_CODES)]
    Apply {
        file: PathBuf,
        /// Where the declaration came from; actions are refused from the link.
        #[arg(long, value_enum, default_value_t = SourceArg::Local)]
        source: SourceArg,
        #[arg(long)]
        json: bool,
    },
    /// Apply the stored declaration again: repairs drift, puts back what is missing.
    #[command(after_help = EXIT_CODES)]
    Reconcile {
        #[arg(long)]
        json: bool,
    },
    /// What the host owns and what it holds.
    Owned {
        #[arg(long)]
        json: bool,
    },
    /// The briefing: what was found, kept, taken over and could not be done.
    Briefing {
        #[arg(long)]
        json: bool,
    },
    /// The found firewall, the declared openings and the guard.
    Firewall {
        #[command(subcommand)]
        command: FirewallCommand,
    },
}

#[derive(Subcommand, Debug)]
pub enum FirewallCommand {
    /// The kind, every layer with its evidence, every declared opening per layer, the guard.
    Status {
        #[arg(long)]
        json: bool,
    },
}

#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum SourceArg {
    Local,
    Bundle,
    /// What the controller's link will use; accepted here so its refusals can be exercised.
    Link,
}

impl From<SourceArg> for Source {
    fn from(s: SourceArg) -> Source {
        match s {
            SourceArg::Local => Source::Local,
            SourceArg::Bundle => Source::Bundle,
            SourceArg::Link => Source::Link,
        }
    }
}

/// Runs one command and returns the process's exit code.
pub fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Version => {
            println!("mesh-host {}", env!("CARGO_PKG_VERSION"));
            Ok(ExitCode::SUCCESS)
        }
        Command::Apply { file, source, json } => {
            let text = if file.as_os_str() == "-" {
                std::io::read_to_string(std::io::stdin())
                    .context("reading the declaration from standard input")?
            } else {
                std::fs::read_to_string(&file)
                    .with_context(|| format!("reading declaration {}", file.display()))?
            };
            let source = Source::from(source);
            let decl = match declaration::parse(&text, source) {
                Ok(d) => d,
                Err(problems) => return Ok(refused(&problems)),
            };
            finish(apply::apply(&host(&cli.root), &decl, source), json)
        }
        Command::Reconcile { json } => {
            let state = store::peek(&cli.root)?;
            let Some((decl, source)) = state.and_then(|s| Some((s.declaration?, s.source?))) else {
                eprintln!(
                    "error: {}: no declaration has been applied on this node yet",
                    store::store_dir(&cli.root).display()
                );
                return Ok(ExitCode::from(2));
            };
            finish(apply::apply(&host(&cli.root), &decl, source), json)
        }
        Command::Owned { json } => {
            let state = store::peek(&cli.root)?.unwrap_or_default();
            if json {
                let v = serde_json::json!({
                    "node": state.node,
                    "mode": state.mode,
                    "taken": state.taken,
                    "owned": state.owned,
                    "held": state.held,
                    "originals": state.originals,
                });
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                print!("{}", render_owned(&state));
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Firewall {
            command: FirewallCommand::Status { json },
        } => {
            let state = store::peek(&cli.root)?;
            let v = crate::status::firewall_status(state.as_ref())?;
            if json {
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                print!("{}", crate::status::render(&v));
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Briefing { json } => {
            let state = store::peek(&cli.root)?;
            let Some(b) = state.and_then(|s| s.briefing) else {
                eprintln!(
                    "error: {}: no briefing yet; nothing has been applied on this node",
                    store::store_dir(&cli.root).display()
                );
                return Ok(ExitCode::from(2));
            };
            print_briefing(&b, json)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn host(root: &std::path::Path) -> Host<'_> {
    static RUNNER: SystemRunner = SystemRunner;
    Host {
        root,
        runner: &RUNNER,
    }
}

fn refused(problems: &declaration::Problems) -> ExitCode {
    for p in &problems.0 {
        eprintln!("error: {p}");
    }
    eprintln!(
        "the declaration was refused ({} problems); nothing was changed",
        problems.0.len()
    );
    ExitCode::from(2)
}

fn finish(result: Result<Report, ApplyError>, json: bool) -> Result<ExitCode> {
    let report = match result {
        Ok(r) => r,
        Err(ApplyError::Refused(p)) => return Ok(refused(&p)),
        Err(ApplyError::Safety(why)) => {
            eprintln!("error: refused: {why}");
            eprintln!("nothing was changed");
            return Ok(ExitCode::from(3));
        }
        Err(e @ ApplyError::Store(_)) => return Err(e.into()),
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.render());
    }
    Ok(if report.failed().is_some() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn print_briefing(b: &Briefing, json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(&b.shown())?);
    } else {
        print!("{}", b.render());
    }
    Ok(())
}

fn render_owned(state: &store::State) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "node {} ({})",
        state.node.as_deref().unwrap_or("-"),
        state
            .mode
            .map(|m| m.as_str())
            .unwrap_or("nothing applied yet")
    );
    for o in &state.owned {
        let how = if o.found {
            "owned (taken over)"
        } else {
            "owned"
        };
        let _ = writeln!(out, "{how:<20} {:<24} {} {}", o.id, o.shape, o.key);
    }
    for h in &state.held {
        let original = state
            .original(&h.key)
            .map(|o| format!(" (original at {})", o.saved))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "{:<20} {:<24} {} {}{original}",
            "held", h.id, h.shape, h.key
        );
    }
    out
}
