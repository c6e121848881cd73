//! The mesh-host binary: parse the command line, set up logging, run.

use std::process::ExitCode;

// Allocation is a third of an apply's time with glibc's malloc at 10,000 openings (many small
// rules, models and records made and freed); mimalloc's is cheaper. docs/PERFORMANCE.md.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

// `mi_option_t` in mimalloc.h (v3): `mi_option_destroy_on_exit`, which above 1 makes mimalloc's
// exit destructor return at once.
const MI_OPTION_DESTROY_ON_EXIT: std::ffi::c_int = 22;

unsafe extern "C" {
    fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
}

/// Ends the process without mimalloc's collection at exit, which frees every page and hands
/// them back to the kernel one `madvise` at a time (4 ms of a 10,000-opening reconcile) for a
/// process whose memory the kernel takes back whole anyway.
fn without_collection_at_exit(code: ExitCode) -> ExitCode {
    // SAFETY: sets one of mimalloc's options, which it reads again at exit; no pointer passes.
    unsafe { mi_option_set(MI_OPTION_DESTROY_ON_EXIT, 2) };
    code
}

fn main() -> ExitCode {
    without_collection_at_exit(run())
}

fn run() -> ExitCode {
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
