//! The command line: what an operator types (`args`), and the one `run` that does the work.

use crate::apply::{self, Host};
use crate::commands::{converge, status, Exit};
use crate::declaration::{self, Source};
use crate::json_contract;
use crate::store;
use answer::{
    act, derive_openings, finish, genesis_refused, interruptible, nothing_applied, preview_asked,
    previewed, print_briefing, refused, render_owned, tells_resident, verbose,
};
pub use answer::{error_json, refusal, refusal_json};
use anyhow::{Context, Result};

mod answer;
mod args;
mod input;
mod usage;
pub use args::{
    Cli, Command, CompletionShell, FirewallCommand, GenerateCommand, LinkCommand, OpeningsCommand,
    SourceArg,
};
use run::SystemRunner;
use std::process::ExitCode;
pub use usage::parse_or_refuse;

/// The exit code of an act whose standard output was closed before its report was printed: the
/// act went to its end and its briefing is in the store, but its answer reached no one (128 + 13,
/// as a shell says a process ended by SIGPIPE).
pub const CLOSED_STDOUT: i32 = 141;

/// Makes a closed standard output (a reader like `head` gone, SIGPIPE being ignored as Rust
/// starts every program) end the process quietly instead of with a panic: a command that
/// `reads_only` has done all it was asked and exits 0; an act exits [`CLOSED_STDOUT`], saying on
/// standard error where its briefing is. Any other panic is reported as before.
pub fn closed_stdout_ends_quietly(reads_only: bool) {
    let before = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let text = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or_default();
        // words read: the standard library's panic message, the only account it gives.
        if text.starts_with("failed printing to stdout") && text.contains("Broken pipe") {
            if reads_only {
                std::process::exit(0);
            }
            eprintln!(
                "mesh-host: standard output was closed before the report was printed; the act \
                 went to its end and `mesh-host briefing` says how it ended"
            );
            std::process::exit(CLOSED_STDOUT);
        }
        before(info);
    }));
}

/// Whether `e` is a write to standard output whose reader went away (EPIPE).
pub fn closed_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Runs one command and returns the process's exit code: the one place a command's [`Exit`]
/// becomes the process's code.
pub fn run(cli: Cli) -> Result<ExitCode> {
    command(cli).map(ExitCode::from)
}

/// Checks who runs it and under which root, then runs the subcommand asked: one function each.
fn command(cli: Cli) -> Result<Exit> {
    answer::set_verbose(cli.verbose);
    let needs_root = !matches!(
        cli.command,
        Command::Version { .. } | Command::Generate { .. }
    );
    if needs_root {
        if let Some(why) = not_root().or_else(|| missing_root(&cli.root)) {
            return refusal(cli.json(), 2, &[why], "nothing was read or changed");
        }
        crate::system::confine(&cli.root);
    }
    if cli.acts_in_words() {
        crate::counter::stream_acts();
    }
    let root = cli.root.as_path();
    match cli.command {
        Command::Version { json } => version(json),
        Command::Generate { what } => generate(what).map(|()| Exit::Done),
        Command::Apply {
            file,
            source,
            preview,
            confirm,
            max_declaration_bytes,
            json,
        } => {
            let read = Read {
                file: &file,
                max_bytes: max_declaration_bytes,
                source: Source::from(source),
            };
            apply_file(root, read, preview, confirm, json)
        }
        Command::Take {
            module,
            preview,
            json,
        } => stored_act(
            root,
            "take",
            converge::taking(root, &module)?,
            preview,
            json,
        ),
        Command::Converge { preview, json } => converge_cmd(root, preview, json),
        Command::Adopt { preview, json } => {
            stored_act(root, "adopt", converge::adopting(root)?, preview, json)
        }
        Command::Release { preview, json } => release(root, preview, json),
        Command::Boot => Ok(boot(root)),
        Command::Run {
            period,
            legacy_period,
            heartbeat,
        } => resident(root, period, legacy_period, heartbeat),
        Command::Enrol {
            token_file,
            token,
            json,
        } => enrol(root, token_file, token, json),
        Command::Reconcile {
            preview,
            confirm,
            json,
        } => reconcile(root, preview, confirm, json),
        Command::Owned { json } => owned(root, json),
        Command::Inventory { json } => inventory(root, json),
        Command::Genesis {
            adopted,
            node,
            ports,
            private_range,
            private_range_v6,
            private_interface,
            bundle,
            preview,
            json,
        } => {
            let req = crate::commands::genesis::Request {
                adopted,
                node,
                ports,
                private_range,
                private_range_v6,
                private_interface,
                bundle,
                preview,
            };
            genesis(root, &req, json)
        }
        Command::Openings {
            command:
                OpeningsCommand::Derive {
                    ports,
                    private_interface,
                    json,
                },
        } => derive_openings(root, ports.as_deref(), private_interface, json),
        Command::Firewall {
            command: FirewallCommand::Status { json },
        } => firewall_status(root, json),
        Command::Firewall {
            command:
                FirewallCommand::Explain {
                    port,
                    proto,
                    from,
                    interface,
                    path,
                    confirm,
                    json,
                },
        } => status::explain_command(
            port,
            &proto,
            from,
            interface,
            &path,
            status::Explain {
                confirm,
                json,
                // A store that cannot be read leaves them unknown: every bridge is then a way in.
                bridges: status::recorded_bridges(store::peek(root).ok().flatten().as_ref()),
            },
        ),
        Command::Link {
            command: LinkCommand::Status { json },
        } => crate::commands::link_status::command(root, json),
        Command::Briefing { json } => briefing(root, json),
        Command::Profile { json } => profile(root, json),
    }
}

/// Why this user may not run a command that reads the store: said before anything is read, as
/// another user every command would fail on the store's permissions, and a preview would claim
/// changes it cannot know of.
fn not_root() -> Option<String> {
    let euid = nix::unistd::geteuid();
    (!euid.is_root()).then(|| {
        format!(
            "mesh-host must run as root: it reads and writes the store under --root's \
             var/lib/mesh-host and the machine's firewall (running as uid {euid}; try sudo)"
        )
    })
}

/// `mesh-host version [--json]`.
fn version(json: bool) -> Result<Exit> {
    if json {
        let v = serde_json::json!({
            "version": crate::launch::VERSION,
            "system": crate::build::BUILD.system,
            "line": crate::launch::version_line(),
        });
        json_contract::print("version", 0, &v)?;
    } else {
        println!("{}", crate::launch::version_line());
    }
    Ok(Exit::Done)
}

/// Where `apply` reads its declaration from, and as what.
struct Read<'a> {
    file: &'a std::path::Path,
    max_bytes: u64,
    source: Source,
}

/// `mesh-host apply FILE [--preview | --confirm]`.
fn apply_file(
    root: &std::path::Path,
    read: Read<'_>,
    preview: bool,
    confirm: bool,
    json: bool,
) -> Result<Exit> {
    const REFUSED: &str = "the declaration was refused; nothing was changed";
    if preview && confirm {
        return refusal(
            json,
            2,
            &[PREVIEW_CONFIRM.to_string()],
            "nothing was read or changed",
        );
    }
    let (name, bytes) = match input::declaration(read.file, read.max_bytes)? {
        input::Got::Bytes { name, bytes } => (name, bytes),
        input::Got::Refused(why) => return refusal(json, 2, &[why], REFUSED),
    };
    // A declaration is JSON, which is UTF-8: anything else is refused input, not a failure of
    // the host.
    let text = match String::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) => {
            let why = format!(
                "declaration {name} is not UTF-8 text (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            );
            return refusal(json, 2, &[why], REFUSED);
        }
    };
    let decl = match declaration::parse(&text, read.source) {
        Ok(d) => d,
        Err(problems) => return refused(&problems, json),
    };
    if decl.release {
        // Only the resident host releases: it alone holds the identity a release drops.
        let why = "release: a release is carried out by `mesh-host run` when it comes from the \
                   controller over the link; `apply` does not release";
        return refusal(json, 2, &[why.to_string()], REFUSED);
    }
    if preview {
        return previewed(root, "apply", &decl, read.source, json);
    }
    interruptible();
    let result = apply::apply(&host(root).confirming(confirm), &decl, read.source);
    // A resident host on this root reconciles the new declaration at once.
    if tells_resident(&result) && crate::pid_file::tell_resident(root) {
        tracing::info!("told the resident host that a new declaration is stored");
    }
    finish(result, json)
}

/// `take`, `adopt` (and `converge` once its preview is past): the act on the stored declaration
/// `asked` for, or its preview.
fn stored_act(
    root: &std::path::Path,
    name: &str,
    asked: converge::Asked,
    preview: bool,
    json: bool,
) -> Result<Exit> {
    if preview {
        return preview_asked(root, name, asked, json);
    }
    act(root, asked, json)
}

/// `mesh-host converge [--preview]`.
fn converge_cmd(root: &std::path::Path, preview: bool, json: bool) -> Result<Exit> {
    if !preview {
        return act(root, converge::converging(root)?, json);
    }
    match converge::preview(&host(root))? {
        Err(asked) => act(root, asked, json),
        Ok(p) => {
            if json {
                println!("{}", serde_json::to_string_pretty(&p.document())?);
            } else {
                print!("{}", p.render(verbose()));
            }
            Ok(Exit::of(p.exit_code()))
        }
    }
}

/// `mesh-host release [--preview]`, on a node that was never enrolled.
fn release(root: &std::path::Path, preview: bool, json: bool) -> Result<Exit> {
    let decl = match crate::commands::release::local(root)? {
        Ok(d) => d,
        Err((code, why)) => {
            return refusal(
                json,
                code,
                &[format!("refused: {why}")],
                "nothing was changed",
            )
        }
    };
    if preview {
        return previewed(root, "release", &decl, SourceArg::Local.into(), json);
    }
    interruptible();
    let marker = crate::commands::release::local_marker(&decl.node);
    match crate::release::carry_out(&host(root), &decl, &marker, Source::Local) {
        Ok(done) => {
            if json {
                let mut v = serde_json::to_value(&done.report)?;
                v["guard_removed"] = serde_json::json!(done.guard);
                json_contract::print("release", done.report.exit_code(), &v)?;
            } else {
                // Only the summary when the resources' lines were printed as each was done.
                let text = if crate::counter::act_ends() {
                    done.report.render_summary()
                } else {
                    done.report.render()
                };
                print!("{text}");
                for line in &done.guard {
                    println!("{line}");
                }
                println!("released: the store is retired; nothing of the host is in force");
            }
            Ok(Exit::of(done.report.exit_code()))
        }
        Err(e) => {
            if let Some(r) = e.report() {
                if json {
                    json_contract::print("report", r.exit_code(), r)?;
                } else if crate::counter::act_ends() {
                    print!("{}", r.render_summary());
                } else {
                    print!("{}", r.render());
                }
            }
            Err(e.into())
        }
    }
}

/// `mesh-host boot`: failed closed is exit 1.
fn boot(root: &std::path::Path) -> Exit {
    if crate::commands::boot::run(root).failed.is_some() {
        Exit::Failed
    } else {
        Exit::Done
    }
}

/// `mesh-host run`: the resident host, until it is stopped.
fn resident(root: &std::path::Path, period: u64, legacy: u64, heartbeat: u64) -> Result<Exit> {
    let opts = crate::resident::Options {
        period: std::time::Duration::from_secs(period),
        legacy_period: std::time::Duration::from_millis(legacy),
        heartbeat: std::time::Duration::from_secs(heartbeat),
        ..Default::default()
    };
    Ok(match crate::resident::run(&host(root), &opts)? {
        crate::resident::Ended::Stopped | crate::resident::Ended::NewBinary => Exit::Done,
        crate::resident::Ended::AlreadyRunning => Exit::AlreadyRunning,
    })
}

/// `mesh-host enrol --token-file PATH | --token TOKEN`.
fn enrol(
    root: &std::path::Path,
    token_file: Option<std::path::PathBuf>,
    token: Option<String>,
    json: bool,
) -> Result<Exit> {
    let text = match (token_file, token) {
        (Some(path), None) => match crate::commands::enrol::read_token_file(&path) {
            Ok(t) => t,
            Err(e) => return refusal(json, 2, &[e.to_string()], "nothing was stored"),
        },
        (None, Some(t)) => t,
        // clap requires exactly one of the two.
        _ => unreachable!("enrol takes --token-file or --token"),
    };
    match crate::commands::enrol::enrol(&host(root), &text, json)? {
        Ok(exit) => Ok(exit),
        Err(r) => refusal(json, r.exit.code(), &r.problems, r.summary),
    }
}

/// `mesh-host reconcile [--preview | --confirm]`.
fn reconcile(root: &std::path::Path, preview: bool, confirm: bool, json: bool) -> Result<Exit> {
    if preview && confirm {
        return refusal(
            json,
            2,
            &[PREVIEW_CONFIRM.to_string()],
            "nothing was read or changed",
        );
    }
    if preview {
        let stored = store::peek(root)?.and_then(|s| s.declaration.clone().map(|d| (d, s.source)));
        return match stored {
            Some((decl, source)) => previewed(
                root,
                "reconcile",
                &decl,
                source.unwrap_or(Source::Local),
                json,
            ),
            None => nothing_applied(root, json),
        };
    }
    match interruptible_reconcile(root, confirm) {
        // A reconcile that went to its end proves this binary works on this machine: it is the
        // version the launcher rolls back to, and its start attempts are no longer counted.
        Ok(Some(report)) if !report.stopped() => {
            crate::launch::reconciled(&store::store_dir(root))?;
            finish(Ok(report), json)
        }
        Ok(None) => nothing_applied(root, json),
        Ok(Some(report)) => finish(Ok(report), json),
        Err(e) => finish(Err(e), json),
    }
}

/// `mesh-host owned [--json]`.
fn owned(root: &std::path::Path, json: bool) -> Result<Exit> {
    let state = store::peek(root)?;
    let lost = state.is_none() && answer::say_lost(root).is_some();
    let state = state.unwrap_or_default();
    if json {
        let v = serde_json::json!({
            "node": state.node,
            "mode": state.mode,
            "taken": state.taken,
            "owned": state.owned,
            "held": state.held,
            "originals": state.originals,
        });
        json_contract::print("owned", 0, &v)?;
    } else {
        print!("{}", render_owned(&state, lost));
    }
    Ok(Exit::Done)
}

/// `mesh-host inventory [--json]`.
fn inventory(root: &std::path::Path, json: bool) -> Result<Exit> {
    let view = crate::commands::inventory::read(host(root).runner)?;
    if json {
        json_contract::print("inventory", 0, &view.to_json())?;
    } else {
        print!("{}", view.render());
    }
    Ok(Exit::Done)
}

/// `mesh-host genesis [--preview]`.
fn genesis(
    root: &std::path::Path,
    req: &crate::commands::genesis::Request,
    json: bool,
) -> Result<Exit> {
    use crate::commands::genesis::Outcome;
    if !req.preview {
        interruptible();
    }
    let h = host(root);
    let read = || crate::commands::inventory::read(h.runner).map(|v| v.machine());
    match crate::commands::genesis::run(root, &h, req, &read) {
        Ok(Outcome::Refused(p)) => genesis_refused(&p, json, 2),
        Ok(Outcome::Unsafe(p)) => genesis_refused(&p, json, 3),
        Ok(Outcome::Applied(r)) => finish(Ok(*r), json),
        Ok(Outcome::Previewed(p)) => {
            if json {
                println!("{}", serde_json::to_string_pretty(&p.document())?);
            } else {
                print!("{}", p.render(verbose()));
            }
            Ok(Exit::of(p.exit_code()))
        }
        Err(e) => finish(Err(e), json),
    }
}

/// `mesh-host firewall status [--json]`.
fn firewall_status(root: &std::path::Path, json: bool) -> Result<Exit> {
    let state = store::peek(root)?;
    let v = status::firewall_status(root, state.as_ref())?;
    if json {
        json_contract::print("firewall_status", 0, &v)?;
    } else {
        print!("{}", status::render(&v));
    }
    Ok(Exit::Done)
}

/// `mesh-host briefing [--json]`.
fn briefing(root: &std::path::Path, json: bool) -> Result<Exit> {
    let state = store::peek(root)?;
    let Some(b) = state.and_then(|s| s.briefing) else {
        // A script asking for the briefing of a node not raised yet gets a document that says
        // so (its keys null and empty), not a refusal.
        let lost = answer::say_lost(root);
        if json {
            let none = serde_json::json!({"outcome": null, "node": null, "mode": null,
                "at": null, "lines": [], "look_at": []});
            json_contract::print("briefing", 0, &none)?;
            return Ok(Exit::Done);
        }
        if lost.is_none() {
            eprintln!(
                "error: {}: no briefing yet; nothing has been applied on this node",
                store::store_dir(root).display()
            );
        }
        return Ok(Exit::Refused);
    };
    print_briefing(&b, json)?;
    Ok(Exit::Done)
}

/// `mesh-host profile [--json]`.
fn profile(root: &std::path::Path, json: bool) -> Result<Exit> {
    let mut profile = crate::system::profile::Profile::gather(root, &SystemRunner);
    // The firewall engine's part: what it finds, and what the kernel's tables can do.
    let mut fw = crate::node_firewall::kernel_reader(root, "", Default::default());
    profile.found_firewall = Some(match fw.detected() {
        Ok(f) => match &f.refusal {
            Some(why) => format!("{} (refused for adoption: {why})", f.kind()),
            None => f.kind(),
        },
        Err(e) => format!("unreadable: {e}"),
    });
    profile.nftables_table_flags =
        fw.table_flags()
            .ok()
            .map(|f| crate::system::profile::TableFlags {
                owner: f.owner,
                persist: f.persist,
            });
    if json {
        json_contract::print("profile", 0, &profile)?;
    } else {
        print!("{}", profile.render());
    }
    Ok(Exit::Done)
}

/// Writes the completion script or the man page generated from the clap definition.
fn generate(what: GenerateCommand) -> Result<()> {
    use clap::CommandFactory;
    let cmd = Cli::command();
    let mut out = std::io::stdout().lock();
    match what {
        GenerateCommand::Completions { shell } => {
            let shell = match shell {
                CompletionShell::Bash => clap_complete::Shell::Bash,
                CompletionShell::Zsh => clap_complete::Shell::Zsh,
                CompletionShell::Fish => clap_complete::Shell::Fish,
            };
            // The generators offer hidden subcommands too; an operator is offered only the
            // visible ones, so the command is rebuilt without `generate`.
            let mut visible = clap::Command::new("mesh-host")
                .version(env!("CARGO_PKG_VERSION"))
                .about(cmd.get_about().cloned().unwrap_or_default())
                .args(cmd.get_arguments().cloned())
                .subcommands(cmd.get_subcommands().filter(|c| !c.is_hide_set()).cloned());
            // Made whole first, then written: a reader gone (`| head`) is a write error this
            // returns, not a panic inside the generator.
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut visible, "mesh-host", &mut script);
            std::io::Write::write_all(&mut out, &script)
                .and_then(|()| std::io::Write::flush(&mut out))
                .context("writing the completions to standard output")?;
        }
        GenerateCommand::Man { dir } => {
            use std::io::Write as _;
            for (file, roff) in crate::commands::man::pages() {
                match &dir {
                    Some(d) => {
                        let path = d.join(&file);
                        std::fs::write(&path, roff)
                            .with_context(|| format!("writing man page {}", path.display()))?;
                    }
                    None if file == "mesh-host.1" => out
                        .write_all(roff.as_bytes())
                        .context("writing the man page")?,
                    None => {}
                }
            }
        }
    }
    Ok(())
}

/// Why `--root` cannot be worked under: a root that is not there is a typing error or a disk not
/// mounted, never one to create (a store made there would describe no machine).
fn missing_root(root: &std::path::Path) -> Option<String> {
    match std::fs::metadata(root) {
        Ok(m) if m.is_dir() => None,
        Ok(_) => Some(format!("--root {} is not a directory", root.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some(format!(
            "--root {} does not exist; the host works under a machine's root and does not \
             create one",
            root.display()
        )),
        Err(e) => Some(format!("--root {}: {e}", root.display())),
    }
}

/// A person's reconcile: interruptible, as every act they run.
fn interruptible_reconcile(
    root: &std::path::Path,
    confirm: bool,
) -> Result<Option<apply::Report>, apply::ApplyError> {
    interruptible();
    apply::reconcile(&host(root).confirming(confirm))
}

fn host(root: &std::path::Path) -> Host<'_> {
    static RUNNER: SystemRunner = SystemRunner;
    Host {
        root,
        runner: &RUNNER,
        firewall: &crate::node_firewall::kernel,
        confirm: false,
    }
}

/// Why `--preview --confirm` is refused: a preview's answers are of the ruleset before the act's
/// writes, which the act then changes, so the kernel asked about them would confirm nothing the
/// act leaves; the ruleset as it stands is asked about by `firewall explain PORT --confirm`.
const PREVIEW_CONFIRM: &str = "--preview --confirm: a preview changes nothing and its answers \
     are of the ruleset before the act's writes, so the kernel is not asked about them; use \
     `mesh-host firewall explain PORT --confirm` for the ruleset as it stands, or the act \
     itself with --confirm";
