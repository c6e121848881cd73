//! The mesh-host binary: parse the command line, set up logging, run.

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    // The journal's form under systemd, plain lines elsewhere, colour only for a terminal.
    mesh_host::logging::init();
    let cli = mesh_host::Cli::parse();
    match mesh_host::run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", mesh_host::error_text(&e));
            ExitCode::from(1)
        }
    }
}
