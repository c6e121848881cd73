//! The mesh-host binary: parse the command line, set up logging, run.

use std::process::ExitCode;

// Allocation is a third of an apply's time with glibc's malloc at 10,000 openings (many small
// rules, models and records made and freed); mimalloc's is cheaper. docs/PERFORMANCE.md.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // The journal's form under systemd, plain lines elsewhere, colour only for a terminal.
    mesh_host::logging::init();
    // Long steps (an install, an image pull) are said on stderr while they run.
    mesh_host::progress::install();
    // A refused command line is a JSON document too under `--json`.
    let cli = mesh_host::commands::cli::parse_or_refuse();
    let reads_only = cli.reads_only();
    mesh_host::commands::cli::closed_stdout_ends_quietly(reads_only);
    let json = cli.json();
    match mesh_host::run(cli) {
        Ok(code) => code,
        // The reader of a listing went away: all that was asked was done.
        Err(e) if reads_only && mesh_host::commands::cli::closed_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            let text = mesh_host::error_text(&e);
            // Asked for JSON, a script reads even the failure as a document on stdout.
            if json {
                println!("{}", mesh_host::commands::cli::error_json(&text));
            }
            eprintln!("error: {text}");
            ExitCode::from(1)
        }
    }
}
