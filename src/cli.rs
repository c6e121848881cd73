//! The command line: what an operator types, and the one `run` that does the work.

use crate::apply::{self, Host};
use crate::declaration::{self, Source};
use crate::store;
use answer::{
    act, derive_openings, finish, genesis_refused, interruptible, nothing_applied, preview_asked,
    previewed, print_briefing, refused, render_owned, tells_resident,
};
pub use answer::{error_json, refusal};
use anyhow::{Context, Result};

mod answer;
mod input;
use clap::{Parser, Subcommand, ValueEnum};
use run::SystemRunner;
use std::path::PathBuf;
use std::process::ExitCode;

const EXIT_CODES: &str = "\
Exit codes:
  0    done, as declared (the briefing says ok, kept or unknown)
  1    an apply failed part-way (the report names the resource), or the host could not work
  2    the input was refused and nothing changed
  3    a safety rule refused the act and nothing changed
  4    --preview: the act would change something (changes pending); nothing was changed
  5    applied to the end, but the briefing says failed: an opening not admitted, the guard or the private network not as declared
  7    firewall explain --confirm: the kernel disagrees with the evaluator on some part of the
       answer (both verdicts named; the kernel's stands)
  130  interrupted by SIGINT after N of M resources (143: by SIGTERM); the child under way was passed the signal";

const RUN_EXIT_CODES: &str = "\
Exit codes:
  0    stopped when asked (SIGTERM or SIGINT) after the apply under way, or finished because a new mesh-host binary was installed: the launcher starts it at once
  1    the host could not start (the message says why); the launcher counts it
  6    another resident host already runs on this store (the message gives its pid); nothing was started";

const BOOT_EXIT_CODES: &str = "\
Exit codes:
  0    what the store recorded is loaded (or nothing was ever applied here)
  1    failed closed: the store could not be read or its record loaded, so the foundation's default ports are refused on every interface but loopback (the message says why)";

/// mesh-host makes this machine match a declaration, adopting what it finds.
///
/// With `--json` a command's outcome is one JSON document on standard output, its refusals
/// included (`{"refused": {"exit_code": N, "problems": [...], "summary": ...}}`) and an error
/// that ended it (`{"error": {"exit_code": 1, "message": ...}}`); progress and logs go to
/// standard error only.
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
    /// Print the version of this running binary and the system it was built for, one line.
    Version {
        #[arg(long)]
        json: bool,
    },
    /// Apply a declaration from a file (`-` for standard input).
    #[command(after_help = EXIT_CODES)]
    Apply {
        file: PathBuf,
        /// Where the declaration came from; actions are refused from the link.
        #[arg(long, value_enum, default_value_t = SourceArg::Local)]
        source: SourceArg,
        /// Show what the apply would do and change nothing (exit 4 when changes are pending).
        #[arg(long)]
        preview: bool,
        /// Refuse (exit 2) a declaration larger than this many bytes.
        #[arg(long, value_name = "BYTES", default_value_t = input::MAX_DECLARATION_BYTES)]
        max_declaration_bytes: u64,
        #[arg(long)]
        json: bool,
    },
    /// The resident host: reconcile on start, on a new declaration, on SIGHUP and every period,
    /// and put the guard and the openings back within milliseconds of another program changing
    /// the ruleset. Listens on no socket; SIGTERM or SIGINT end it after the apply under way.
    /// One per store: it holds the store's run lock for its life, and a second is refused (exit 6).
    #[command(after_help = RUN_EXIT_CODES)]
    Run {
        /// Seconds between reconciles when nothing else asks for one (drift).
        #[arg(long, value_name = "SECONDS", default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..))]
        period: u64,
        /// Milliseconds between re-checks of legacy iptables layers, which send no events (0:
        /// never).
        #[arg(long, value_name = "MILLIS", default_value_t = 5000)]
        legacy_period: u64,
        /// Seconds between heartbeats sent up the link, on an enrolled node.
        #[arg(long, value_name = "SECONDS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
        heartbeat: u64,
    },
    /// The boot step, run by `mesh-host-boot.service` before any interface is configured and
    /// before the container engines: loads from the store alone what the last apply left in
    /// force (the guard on an adopted node, the derived filter on a converged one), asking no
    /// runtime and no network. A store that cannot be read fails closed: the foundation's
    /// default ports refused on every interface but loopback (exit 1).
    #[command(after_help = BOOT_EXIT_CODES)]
    Boot,
    /// Join the mesh with a one-time token: dial the broker it names (by address, or by host name
    /// resolved from /etc/hosts and the nameservers of /etc/resolv.conf), check its certificate
    /// against the token's fingerprint before sending anything, present the token's secret and
    /// this node's own public key (made here; the private key never leaves the store), report the
    /// profile and inventory, and keep the identity and credentials received. A malformed,
    /// expired or already-used token is refused (exit 2) and nothing is stored.
    #[command(after_help = EXIT_CODES)]
    #[command(group(clap::ArgGroup::new("from").required(true).args(["token_file", "token"])))]
    Enrol {
        /// Read the token from this file (`-` for standard input), so it never appears on a
        /// command line (`ps`, shell history).
        #[arg(long, value_name = "PATH")]
        token_file: Option<PathBuf>,
        /// The token itself, for scripts: it is visible to every user in `ps` while enrol runs.
        #[arg(long, value_name = "TOKEN")]
        token: Option<String>,
        /// Refusals and failures as JSON on standard output.
        #[arg(long)]
        json: bool,
    },
    /// Apply the stored declaration again: repairs drift, puts back what is missing.
    #[command(after_help = EXIT_CODES)]
    Reconcile {
        /// Show what the reconcile would do and change nothing (exit 4 when changes are pending).
        #[arg(long)]
        preview: bool,
        #[arg(long)]
        json: bool,
    },
    /// What the host owns and what it holds.
    Owned {
        #[arg(long)]
        json: bool,
    },
    /// The briefing: what was found, kept, taken over and could not be done. With `--json` and
    /// nothing applied yet it prints `null` and exits 0.
    Briefing {
        #[arg(long)]
        json: bool,
    },
    /// What this machine can do: system, architecture, init, service and package manager,
    /// container runtime and its version.
    Profile {
        #[arg(long)]
        json: bool,
    },
    /// What runs on this machine: listeners, containers, interfaces, routes.
    Inventory {
        #[arg(long)]
        json: bool,
    },
    /// Raise the first node: check everything, make the given ports the node's settings, and
    /// apply the foundation from the bundle. Refuses a machine in use unless raised adopted.
    #[command(after_help = EXIT_CODES)]
    Genesis {
        /// Raise the node adopted: what is found stays in force; the guard, not a filter.
        #[arg(long)]
        adopted: bool,
        /// The node's name (default: the hostname).
        #[arg(long, value_name = "NAME")]
        node: Option<String>,
        /// The foundation's ports: store=5432,bus=5672,broker-management=15672,registry=5000,hub=51820.
        #[arg(long, value_name = "NAME=PORT,…")]
        ports: Option<String>,
        /// The private network's range (default 10.77.0.0/24).
        #[arg(long, value_name = "CIDR")]
        private_range: Option<String>,
        /// The private network's IPv6 range, beside an IPv4 --private-range (none by default:
        /// the guard then lets no IPv6 source through the private interface).
        #[arg(long, value_name = "CIDR")]
        private_range_v6: Option<String>,
        /// The private network's interface (default mesh0).
        #[arg(long, value_name = "NAME")]
        private_interface: Option<String>,
        /// Another bundle than the one carried in the binary.
        #[arg(long, value_name = "FILE")]
        bundle: Option<PathBuf>,
        /// Show what genesis would do and change nothing: on a converged raise, the derived
        /// filter and every listener it keeps, narrows or closes; the foundation's apply, resource
        /// by resource (exit 3 when it would refuse, 4 when changes are pending).
        #[arg(long)]
        preview: bool,
        #[arg(long)]
        json: bool,
    },
    /// Take a module on an adopted node: its found files and container are replaced, its port
    /// opened (its cutover, done when its data has moved).
    #[command(after_help = EXIT_CODES)]
    Take {
        module: String,
        /// Show what taking the module would do and change nothing (exit 4 when changes are
        /// pending).
        #[arg(long)]
        preview: bool,
        #[arg(long)]
        json: bool,
    },
    /// Converge an adopted node: take every module, load the derived filter in place of the
    /// guard, and retire the found firewall by disabling it (never flushing). `--preview` shows
    /// what would close, be taken and be retired, and changes nothing.
    #[command(after_help = EXIT_CODES)]
    Converge {
        /// Show what the flip would do and change nothing (exit 0 when it may go ahead, 3 when
        /// it would be refused; the flip is always a change, so it never exits 4).
        #[arg(long)]
        preview: bool,
        #[arg(long)]
        json: bool,
    },
    /// Give the machine back: on a node never enrolled (raised by genesis or applied by hand),
    /// what the host created is removed, every file it took over gets its saved original back
    /// byte for byte, a flipped node's found firewall is restored and enabled as saved, the
    /// guard's table, BPF layer and pin directory are removed, and the store is retired. Held
    /// things stay as they are. An enrolled node is released by its controller over the link
    /// (refused here, exit 3).
    #[command(after_help = EXIT_CODES)]
    Release {
        /// Show what the release would remove and give back, and change nothing.
        #[arg(long)]
        preview: bool,
        #[arg(long)]
        json: bool,
    },
    /// Return a converged node to adopted: the guard back, the found firewall restored as saved
    /// and enabled, the derived filter unloaded. What was taken stays taken.
    #[command(after_help = EXIT_CODES)]
    Adopt {
        /// Show what the return would do and change nothing (exit 4 when changes are pending).
        #[arg(long)]
        preview: bool,
        #[arg(long)]
        json: bool,
    },
    /// The openings engine.
    Openings {
        #[command(subcommand)]
        command: OpeningsCommand,
    },
    /// The found firewall, the declared openings and the guard.
    Firewall {
        #[command(subcommand)]
        command: FirewallCommand,
    },
    /// Shell completions and the man page, generated from this command line for the packages.
    #[command(hide = true)]
    Generate {
        #[command(subcommand)]
        what: GenerateCommand,
    },
}

#[derive(Subcommand, Debug)]
pub enum GenerateCommand {
    /// The completion script for one shell, on standard output.
    Completions {
        #[arg(value_enum)]
        shell: CompletionShell,
    },
    /// The man pages (roff): `mesh-host.1` on standard output, or, given a directory, every
    /// page (`mesh-host.1` and one per subcommand) written into it.
    Man {
        #[arg(value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

/// The shells the packages ship completions for.
#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum CompletionShell {
    Bash,
    Zsh,
    Fish,
}

#[derive(Subcommand, Debug)]
pub enum OpeningsCommand {
    /// The openings this node needs: the foundation's, from the node's settings, and the listens
    /// its modules declare, as declaration resources.
    Derive {
        /// Override the node's foundation ports: store=5432,bus=5672,broker-management=15672,registry=5000,hub=51820.
        #[arg(long, value_name = "NAME=PORT,…")]
        ports: Option<String>,
        /// The private network's interface (default: the node's setting, else mesh0).
        #[arg(long, value_name = "NAME")]
        private_interface: Option<String>,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum FirewallCommand {
    /// The kind, every layer with its evidence, every declared opening per layer, the guard.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Why a new connection to PORT is admitted or refused: the walk through every base chain
    /// it crosses, hook by hook, the rule that decides and the verdict, per family and
    /// interface it arrives on (exit 0 admitted, 1 not admitted, refused or doubtful, 2 bad
    /// input, 5 with --confirm: the kernel disagrees with the evaluator).
    #[command(after_help = EXIT_CODES)]
    Explain {
        port: u16,
        /// tcp or udp.
        #[arg(long, default_value = "tcp")]
        proto: String,
        /// An address or network the connection comes from (default: anywhere).
        #[arg(long)]
        from: Option<String>,
        /// The interface it arrives on (default: every outside interface).
        #[arg(long)]
        interface: Option<String>,
        /// incoming (to this machine) or forwarded (to a container behind the published PORT).
        #[arg(long, default_value = "incoming")]
        path: String,
        /// Ask the kernel too: load the ruleset as it stands into scratch network namespaces
        /// shaped like this node (removed after), send a real SYN for each part of the answer
        /// from an address inside it, and set the kernel's result (connected, refused, timed
        /// out) beside the evaluator's; the kernel's verdict stands (tcp only; exit 7 on a
        /// disagreement).
        #[arg(long)]
        confirm: bool,
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
    let needs_root = !matches!(
        cli.command,
        Command::Version { .. } | Command::Generate { .. }
    );
    if needs_root {
        if let Some(why) = missing_root(&cli.root) {
            return refusal(cli.json(), 2, &[why], "nothing was read or changed");
        }
    }
    match cli.command {
        Command::Version { json } => {
            if json {
                let v = serde_json::json!({
                    "version": crate::launch::VERSION,
                    "system": crate::build::BUILD.system,
                    "line": crate::launch::version_line(),
                });
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                println!("{}", crate::launch::version_line());
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Generate { what } => {
            generate(what)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Apply {
            file,
            source,
            preview,
            max_declaration_bytes,
            json,
        } => {
            let (name, bytes) = match input::declaration(&file, max_declaration_bytes)? {
                input::Got::Bytes { name, bytes } => (name, bytes),
                input::Got::Refused(why) => {
                    return refusal(
                        json,
                        2,
                        &[why],
                        "the declaration was refused; nothing was changed",
                    )
                }
            };
            // A declaration is JSON, which is UTF-8: anything else is refused input, not a
            // failure of the host.
            let text = match String::from_utf8(bytes) {
                Ok(t) => t,
                Err(e) => {
                    return refusal(
                        json,
                        2,
                        &[format!(
                            "declaration {name} is not UTF-8 text (invalid byte at offset {})",
                            e.utf8_error().valid_up_to()
                        )],
                        "the declaration was refused; nothing was changed",
                    );
                }
            };
            let source = Source::from(source);
            let decl = match declaration::parse(&text, source) {
                Ok(d) => d,
                Err(problems) => return refused(&problems, json),
            };
            if decl.release {
                // Only the resident host releases: it alone holds the identity a release drops.
                return refusal(
                    json,
                    2,
                    &[
                        "release: a release is carried out by `mesh-host run` when it comes from \
                       the controller over the link; `apply` does not release"
                            .to_string(),
                    ],
                    "the declaration was refused; nothing was changed",
                );
            }
            if preview {
                return previewed(&cli.root, "apply", &decl, source, json);
            }
            interruptible();
            let result = apply::apply(&host(&cli.root), &decl, source);
            // A resident host on this root reconciles the new declaration at once.
            if tells_resident(&result) && crate::pid_file::tell_resident(&cli.root) {
                tracing::info!("told the resident host that a new declaration is stored");
            }
            finish(result, json)
        }
        Command::Take {
            module,
            preview,
            json,
        } => {
            let asked = crate::converge::taking(&cli.root, &module)?;
            if preview {
                return preview_asked(&cli.root, "take", asked, json);
            }
            act(&cli.root, asked, json)
        }
        Command::Converge { preview, json } => {
            if preview {
                return match crate::converge::preview(&host(&cli.root))? {
                    Err(asked) => act(&cli.root, asked, json),
                    Ok(p) => {
                        if json {
                            println!("{}", serde_json::to_string_pretty(&p)?);
                        } else {
                            print!("{}", p.render());
                        }
                        Ok(if p.refusals.is_empty() {
                            ExitCode::SUCCESS
                        } else {
                            ExitCode::from(3)
                        })
                    }
                };
            }
            act(&cli.root, crate::converge::converging(&cli.root)?, json)
        }
        Command::Adopt { preview, json } => {
            let asked = crate::converge::adopting(&cli.root)?;
            if preview {
                return preview_asked(&cli.root, "adopt", asked, json);
            }
            act(&cli.root, asked, json)
        }
        Command::Release { preview, json } => {
            let decl = match crate::release::local(&cli.root)? {
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
                return previewed(&cli.root, "release", &decl, SourceArg::Local.into(), json);
            }
            interruptible();
            let marker = crate::release::local_marker(&decl.node);
            match crate::release::carry_out(&host(&cli.root), &decl, &marker, Source::Local) {
                Ok(done) => {
                    if json {
                        let mut v = serde_json::to_value(&done.report)?;
                        v["guard_removed"] = serde_json::json!(done.guard);
                        println!("{}", serde_json::to_string_pretty(&v)?);
                    } else {
                        print!("{}", done.report.render());
                        for line in &done.guard {
                            println!("{line}");
                        }
                        println!("released: the store is retired; nothing of the host is in force");
                    }
                    Ok(ExitCode::from(done.report.exit_code()))
                }
                Err(e) => {
                    if let Some(r) = e.report() {
                        if json {
                            println!("{}", serde_json::to_string_pretty(r)?);
                        } else {
                            print!("{}", r.render());
                        }
                    }
                    Err(e.into())
                }
            }
        }
        Command::Boot => Ok(if crate::boot::run(&cli.root).failed.is_some() {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        }),
        Command::Run {
            period,
            legacy_period,
            heartbeat,
        } => crate::resident::run(
            &host(&cli.root),
            &crate::resident::Options {
                period: std::time::Duration::from_secs(period),
                legacy_period: std::time::Duration::from_millis(legacy_period),
                heartbeat: std::time::Duration::from_secs(heartbeat),
                ..Default::default()
            },
        ),
        Command::Enrol {
            token_file,
            token,
            json,
        } => {
            let text = match (token_file, token) {
                (Some(path), None) => match crate::link::read_token_file(&path) {
                    Ok(t) => t,
                    Err(e) => return refusal(json, 2, &[e.to_string()], "nothing was stored"),
                },
                (None, Some(t)) => t,
                // clap requires exactly one of the two.
                _ => unreachable!("enrol takes --token-file or --token"),
            };
            crate::link::enrol(&host(&cli.root), &text, json)
        }
        Command::Reconcile {
            preview: true,
            json,
        } => {
            let stored =
                store::peek(&cli.root)?.and_then(|s| s.declaration.clone().map(|d| (d, s.source)));
            match stored {
                Some((decl, source)) => previewed(
                    &cli.root,
                    "reconcile",
                    &decl,
                    source.unwrap_or(Source::Local),
                    json,
                ),
                None => nothing_applied(&cli.root, json),
            }
        }
        Command::Reconcile {
            preview: false,
            json,
        } => match interruptible_reconcile(&cli.root) {
            // A reconcile that went to its end proves this binary works on this machine: it is the
            // version the launcher rolls back to, and its start attempts are no longer counted.
            Ok(Some(report)) if !report.stopped() => {
                crate::launch::reconciled(&store::store_dir(&cli.root))?;
                finish(Ok(report), json)
            }
            Ok(None) => nothing_applied(&cli.root, json),
            Ok(Some(report)) => finish(Ok(report), json),
            Err(e) => finish(Err(e), json),
        },
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
        Command::Inventory { json } => {
            let view = crate::inventory::read(host(&cli.root).runner)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&view.to_json())?);
            } else {
                print!("{}", view.render());
            }
            Ok(ExitCode::SUCCESS)
        }
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
            let req = crate::genesis::Request {
                adopted,
                node,
                ports,
                private_range,
                private_range_v6,
                private_interface,
                bundle,
                preview,
            };
            if !preview {
                interruptible();
            }
            let h = host(&cli.root);
            let read = || crate::inventory::read(h.runner).map(|v| v.machine());
            match crate::genesis::run(&cli.root, &h, &req, &read) {
                Ok(crate::genesis::Outcome::Refused(p)) => genesis_refused(&p, json, 2),
                Ok(crate::genesis::Outcome::Unsafe(p)) => genesis_refused(&p, json, 3),
                Ok(crate::genesis::Outcome::Applied(r)) => finish(Ok(*r), json),
                Ok(crate::genesis::Outcome::Previewed(p)) => {
                    if json {
                        println!("{}", serde_json::to_string_pretty(&p)?);
                    } else {
                        print!("{}", p.render());
                    }
                    Ok(ExitCode::from(p.exit_code()))
                }
                Err(e) => finish(Err(e), json),
            }
        }
        Command::Openings {
            command:
                OpeningsCommand::Derive {
                    ports,
                    private_interface,
                    json,
                },
        } => derive_openings(&cli.root, ports.as_deref(), private_interface, json),
        Command::Firewall {
            command: FirewallCommand::Status { json },
        } => {
            let state = store::peek(&cli.root)?;
            let v = crate::status::firewall_status(&cli.root, state.as_ref())?;
            if json {
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                print!("{}", crate::status::render(&v));
            }
            Ok(ExitCode::SUCCESS)
        }
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
        } => crate::status::explain_command(
            port,
            &proto,
            from,
            interface,
            &path,
            crate::status::Explain {
                confirm,
                json,
                // A store that cannot be read leaves them unknown: every bridge is then a way in.
                bridges: crate::status::recorded_bridges(
                    store::peek(&cli.root).ok().flatten().as_ref(),
                ),
            },
        ),
        Command::Briefing { json } => {
            let state = store::peek(&cli.root)?;
            let Some(b) = state.and_then(|s| s.briefing) else {
                // A script asking for the briefing of a node not raised yet gets a document
                // that says so (`null`), not a refusal.
                if json {
                    println!("null");
                    return Ok(ExitCode::SUCCESS);
                }
                eprintln!(
                    "error: {}: no briefing yet; nothing has been applied on this node",
                    store::store_dir(&cli.root).display()
                );
                return Ok(ExitCode::from(2));
            };
            print_briefing(&b, json)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Profile { json } => {
            let mut profile = crate::system::profile::Profile::gather(&cli.root, &SystemRunner);
            // The firewall engine's part: what it finds, and what the kernel's tables can do.
            static EXEC: firewall::SystemExec = firewall::SystemExec;
            profile.found_firewall = Some(match firewall::Firewall::open(&EXEC) {
                Ok(mut fw) => match fw.found() {
                    Ok(f) => match &f.refusal {
                        Some(why) => format!("{} (refused for adoption: {why})", f.kind()),
                        None => f.kind(),
                    },
                    Err(e) => format!("unreadable: {e}"),
                },
                Err(e) => format!("unreadable: {e}"),
            });
            profile.nftables_table_flags =
                firewall::probe::table_flags()
                    .ok()
                    .map(|f| crate::system::profile::TableFlags {
                        owner: f.owner,
                        persist: f.persist,
                    });
            if json {
                println!("{}", serde_json::to_string_pretty(&profile)?);
            } else {
                print!("{}", profile.render());
            }
            Ok(ExitCode::SUCCESS)
        }
    }
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
            clap_complete::generate(shell, &mut visible, "mesh-host", &mut out);
        }
        GenerateCommand::Man { dir } => {
            use std::io::Write as _;
            for (file, roff) in crate::man::pages() {
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
) -> Result<Option<apply::Report>, apply::ApplyError> {
    interruptible();
    apply::reconcile(&host(root))
}

fn host(root: &std::path::Path) -> Host<'_> {
    static RUNNER: SystemRunner = SystemRunner;
    Host {
        root,
        runner: &RUNNER,
        firewall: &crate::node_firewall::kernel,
    }
}

impl Cli {
    /// Whether the command asked for JSON, so even its errors are JSON on stdout.
    pub fn json(&self) -> bool {
        match &self.command {
            Command::Version { json }
            | Command::Apply { json, .. }
            | Command::Enrol { json, .. }
            | Command::Reconcile { json, .. }
            | Command::Owned { json }
            | Command::Briefing { json }
            | Command::Profile { json }
            | Command::Inventory { json }
            | Command::Genesis { json, .. }
            | Command::Take { json, .. }
            | Command::Converge { json, .. }
            | Command::Adopt { json, .. }
            | Command::Release { json, .. }
            | Command::Openings {
                command: OpeningsCommand::Derive { json, .. },
            }
            | Command::Firewall {
                command: FirewallCommand::Status { json } | FirewallCommand::Explain { json, .. },
            } => *json,
            Command::Run { .. } | Command::Boot | Command::Generate { .. } => false,
        }
    }
}
