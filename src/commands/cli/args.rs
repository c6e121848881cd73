//! The command line as clap reads it: every command, its flags and their help, the exit codes
//! each documents, and which commands answer in JSON.

use crate::declaration::Source;
use clap::{Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

const EXIT_CODES: &str = "\
Exit codes:
  0    done, as declared (the briefing says ok, kept or unknown)
  1    an apply failed part-way (the report names the resource), or the host could not work
  2    the input was refused and nothing changed
  3    a safety rule refused the act and nothing changed
  4    --preview: the act would change something (changes pending); nothing was changed
  5    applied to the end, but the briefing says failed: an opening not admitted, the guard or the private network not as declared
  7    --confirm (apply, reconcile, firewall explain): the kernel disagrees with the evaluator on
       some part of an answer (both verdicts named; the kernel's stands). It wins over 5: the
       kernel's verdict standing is what often makes the briefing say failed; 1 and 130/143 win
       over it (the act did not reach its end, and the kernel was not asked)
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
    /// Previews: list the resources that would stay unchanged too (by default they are only
    /// counted in the summary line).
    #[arg(long, global = true)]
    pub verbose: bool,
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
        /// After the act's firewall writes, ask the kernel about every declared opening: the
        /// ruleset as it now stands is loaded into scratch network namespaces shaped like this
        /// node (removed after), a real SYN is sent for each part of each opening's answer, and
        /// each opening is said to agree, be settled, disagree or be unconfirmed (with why); the
        /// kernel's verdict stands (exit 7 on a disagreement). Refused with --preview (exit 2).
        #[arg(long)]
        confirm: bool,
        /// Refuse (exit 2) a declaration larger than this many bytes.
        #[arg(long, value_name = "BYTES", default_value_t = super::input::MAX_DECLARATION_BYTES)]
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
        /// Milliseconds between looks at legacy iptables layers, which send no events: each reads
        /// their fingerprint (no child process) and re-checks them only when it changed (0:
        /// never).
        #[arg(long, value_name = "MILLIS", default_value_t = 1000)]
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
        /// After the act's firewall writes, ask the kernel about every declared opening: the
        /// ruleset as it now stands is loaded into scratch network namespaces shaped like this
        /// node (removed after), a real SYN is sent for each part of each opening's answer, and
        /// each opening is said to agree, be settled, disagree or be unconfirmed (with why); the
        /// kernel's verdict stands (exit 7 on a disagreement). Refused with --preview (exit 2).
        #[arg(long)]
        confirm: bool,
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
    /// The link to the mesh as this node knows it, from local state only (no broker asked).
    Link {
        #[command(subcommand)]
        command: LinkCommand,
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
pub enum LinkCommand {
    /// Enrolled or not (as which node, through which brokers), linked or not (the resident
    /// host's record, and whether it runs), the last contact with the broker and the declaration
    /// in force. Reads `link.json` and the store only, so it answers with the broker down.
    /// Exit 0.
    Status {
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
    /// input, 7 with --confirm: the kernel disagrees with the evaluator).
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
            }
            | Command::Link {
                command: LinkCommand::Status { json },
            } => *json,
            Command::Run { .. } | Command::Boot | Command::Generate { .. } => false,
        }
    }

    /// Whether the command only reads and prints (a listing, a status, a preview): such a command
    /// whose reader went away (`mesh-host generate completions bash | head`) has done all it was
    /// asked, and exits 0.
    /// Whether this is a person's act answered in words: its resources' lines are printed as
    /// each is done (`crate::counter`). Not a preview, not `--json`, not the resident host or the
    /// boot step (their lines are the journal's).
    pub fn acts_in_words(&self) -> bool {
        !self.json()
            && !self.reads_only()
            && !matches!(
                self.command,
                Command::Run { .. } | Command::Boot | Command::Enrol { .. }
            )
    }

    /// `mesh-host run`: the resident host, which lives as long as the machine.
    pub fn is_resident(&self) -> bool {
        matches!(self.command, Command::Run { .. })
    }

    pub fn reads_only(&self) -> bool {
        match &self.command {
            Command::Version { .. }
            | Command::Owned { .. }
            | Command::Briefing { .. }
            | Command::Profile { .. }
            | Command::Inventory { .. }
            | Command::Openings { .. }
            | Command::Firewall { .. }
            | Command::Link { .. }
            | Command::Generate { .. } => true,
            Command::Apply { preview, .. }
            | Command::Reconcile { preview, .. }
            | Command::Genesis { preview, .. }
            | Command::Take { preview, .. }
            | Command::Converge { preview, .. }
            | Command::Adopt { preview, .. } => *preview,
            Command::Run { .. }
            | Command::Boot
            | Command::Enrol { .. }
            | Command::Release { .. } => false,
        }
    }
}
